/*
 * Registered memory and descriptors.
 *
 * A descriptor ("rdmx_mr_pack") is a portable, versioned blob; all integers
 * little-endian:
 *
 *   off  size  field
 *     0     4  magic "RDMD"
 *     4     2  version (3)
 *     6     2  access rights (RDMX_ACCESS_*)
 *     8     8  region id (names the region at its owner)
 *    16     8  remote virtual address of the range start
 *    24     8  range length
 *    32     8  range start, as an offset from the region start
 *    40     4  transport key length n (at most RDMX_RKEY_MAX)
 *    44     4  key kind: the backend whose key follows (RDMX_KEY_KIND_*:
 *              1 UCX, 2 ofi); another backend's endpoint refuses it
 *    48     n  the transport's packed remote key
 *  48+n    16  MAC: HMAC-SHA256(the owner context's grant key,
 *              "rdmx-grant" || region id || range start || range length ||
 *              access u32)[0..16)
 *  64+n     8  FNV-1a 64 of bytes [0, 64+n): catches corruption at unpack
 *
 * Who enforces what (docs/SECURITY.md): where rdmx carries one-sided
 * access (access.c: every transport but RDMA hardware), the owner checks
 * every access against the MAC'd grant and refuses descriptors it did not
 * issue, so a peer that edits one (and recomputes the FNV) gets
 * RDMX_ERR_BAD_DESCRIPTOR. Where the transport moves the data itself, the
 * transport enforces the registration behind the key.
 */
#include "core/internal.h"

#include "util/endian.h"
#include "util/hash.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RDMX_DESC_FIXED   48
#define RDMX_RKEY_MAX     4096

static rdmx_status_t mr_create(rdmx_context_t *ctx, void *addr, size_t length,
                               unsigned access, int allocate, rdmx_mr_t **mr_p)
{
    rdmx_mr_t *mr;
    rdmx_status_t st;

    if (ctx == NULL || mr_p == NULL || length == 0 ||
        (!allocate && addr == NULL))
        return rdmx__error(RDMX_ERR_INVALID,
                           "mem: context, output, address and a non-zero "
                           "length are required");
    if (access & ~(unsigned)RDMX_ACCESS_ALL)
        return rdmx__error(RDMX_ERR_INVALID, "mem: unknown access bits 0x%x",
                           access & ~(unsigned)RDMX_ACCESS_ALL);
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "mem: out of memory");
    st = ctx->tp->mem_map(ctx->tctx, addr, length, allocate, access,
                          &mr->tmr, &mr->addr, &mr->rkey_buf, &mr->rkey_size);
    if (st != RDMX_OK)
        goto err_free;
    mr->ctx = ctx;
    mr->length = length;
    mr->access = access;
    mr->allocated = allocate;
    if (allocate)
        memset(mr->addr, 0, length);
    if (mr->rkey_size > RDMX_RKEY_MAX) {
        st = rdmx__error(RDMX_ERR_UNSUPPORTED,
                         "mem: remote key of %zu bytes", mr->rkey_size);
        goto err_unmap;
    }

    pthread_mutex_lock(&ctx->mr_lock);
    mr->id = ctx->next_region_id++;
    if (rdmx_ptrmap_put(&ctx->regions, (void *)(uintptr_t)mr->id, mr) != 0) {
        pthread_mutex_unlock(&ctx->mr_lock);
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "mem: out of memory");
        goto err_unmap;
    }
    pthread_mutex_unlock(&ctx->mr_lock);
    *mr_p = mr;
    return RDMX_OK;

err_unmap:
    ctx->tp->mem_unmap(ctx->tctx, mr->tmr, mr->rkey_buf);
err_free:
    free(mr);
    return st;
}

rdmx_status_t rdmx_mem_register(rdmx_context_t *context, void *addr,
                                size_t length, unsigned access,
                                rdmx_mr_t **mr_p)
{
    return mr_create(context, addr, length, access, 0, mr_p);
}

rdmx_status_t rdmx_mem_alloc(rdmx_context_t *context, size_t length,
                             unsigned access, rdmx_mr_t **mr_p)
{
    return mr_create(context, NULL, length, access, 1, mr_p);
}

void rdmx_mem_deregister(rdmx_mr_t *mr)
{
    rdmx_context_t *ctx;

    if (mr == NULL)
        return;
    ctx = mr->ctx;
    pthread_mutex_lock(&ctx->mr_lock);
    rdmx_ptrmap_del(&ctx->regions, (void *)(uintptr_t)mr->id);
    pthread_mutex_unlock(&ctx->mr_lock);
    rdmx__mr_release(mr);
}

void rdmx__mr_release(rdmx_mr_t *mr)
{
    mr->ctx->tp->mem_unmap(mr->ctx->tctx, mr->tmr, mr->rkey_buf);
    free(mr);
}

void *rdmx_mr_addr(const rdmx_mr_t *mr)
{
    return mr->addr;
}

size_t rdmx_mr_length(const rdmx_mr_t *mr)
{
    return mr->length;
}

rdmx_mr_t *rdmx__mr_find(rdmx_context_t *ctx, uint64_t id)
{
    rdmx_mr_t *mr;

    pthread_mutex_lock(&ctx->mr_lock);
    mr = rdmx_ptrmap_get(&ctx->regions, (void *)(uintptr_t)id);
    pthread_mutex_unlock(&ctx->mr_lock);
    return mr;
}

/* A thread's last grants, their MACs and their descriptors' checksums: a
 * caller lends the same buffer call after call (a GET into one buffer
 * packs the same descriptor each time), an HMAC costs ~7,000 instructions
 * and a shared-memory descriptor's checksum ~120. @key: the first bytes of
 * the context's random grant key, so that another context's grants (or a
 * later one's at the same address) never match. */
#define GRANT_MEMO 4
typedef struct {
    uint64_t key, region_id, offset, length;
    unsigned access;
    int has_sum; /* sum is known: the checksum of the whole descriptor
                    rdmx_mr_pack makes of this grant (its other bytes, the
                    region's address and transport key, never change) */
    uint64_t sum;
    unsigned char mac[RDMX_GRANT_MAC];
} grant_memo_t;
static __thread grant_memo_t grant_memo[GRANT_MEMO];
static __thread unsigned grant_memo_next;

/* The MAC of a grant (the first RDMX_GRANT_MAC bytes of the HMAC), and its
 * memo entry (NULL when the HMAC failed). */
static grant_memo_t *grant_mac(const rdmx_context_t *ctx, uint64_t region_id,
                               uint64_t offset, uint64_t length,
                               unsigned access,
                               unsigned char out[RDMX_GRANT_MAC])
{
    unsigned char f[28], full[RDMX_MAC_SIZE];
    rdmx_iov_t parts[2] = {{"rdmx-grant", 10}, {f, sizeof(f)}};
    uint64_t key;
    unsigned i;

    memcpy(&key, ctx->grant_key, sizeof(key));
    for (i = 0; i < GRANT_MEMO; i++)
        if (grant_memo[i].key == key && grant_memo[i].region_id == region_id &&
            grant_memo[i].offset == offset && grant_memo[i].length == length &&
            grant_memo[i].access == access && key != 0) {
            memcpy(out, grant_memo[i].mac, RDMX_GRANT_MAC);
            return &grant_memo[i];
        }
    rdmx_put_le64(f, region_id);
    rdmx_put_le64(f + 8, offset);
    rdmx_put_le64(f + 16, length);
    rdmx_put_le32(f + 24, access);
    if (rdmx__hmac(ctx->grant_key, sizeof(ctx->grant_key), parts, 2, full) !=
        RDMX_OK) {
        memset(out, 0, RDMX_GRANT_MAC); /* (never matches a fresh one) */
        return NULL;
    }
    memcpy(out, full, RDMX_GRANT_MAC);
    i = grant_memo_next++ % GRANT_MEMO;
    grant_memo[i].key = key;
    grant_memo[i].region_id = region_id;
    grant_memo[i].offset = offset;
    grant_memo[i].length = length;
    grant_memo[i].access = access;
    grant_memo[i].has_sum = 0;
    memcpy(grant_memo[i].mac, full, RDMX_GRANT_MAC);
    return &grant_memo[i];
}

int rdmx__grant_valid(rdmx_worker_t *w, uint64_t region_id, uint64_t offset,
                      uint64_t length, unsigned access,
                      const unsigned char *mac)
{
    rdmx_grant_t *g = &w->grants[mac[0] % RDMX_GRANT_CACHE];
    unsigned char want[RDMX_GRANT_MAC];

    if (g->valid && g->region_id == region_id && g->offset == offset &&
        g->length == length && g->access == access &&
        memcmp(g->mac, mac, RDMX_GRANT_MAC) == 0)
        return 1;
    grant_mac(w->ctx, region_id, offset, length, access, want);
    if (CRYPTO_memcmp(want, mac, RDMX_GRANT_MAC) != 0)
        return 0;
    g->region_id = region_id;
    g->offset = offset;
    g->length = length;
    g->access = access;
    memcpy(g->mac, mac, RDMX_GRANT_MAC);
    g->valid = 1;
    return 1;
}

rdmx_status_t rdmx_mr_pack(const rdmx_mr_t *mr, uint64_t offset,
                           uint64_t length, unsigned access, void *buf,
                           size_t size, size_t *size_p)
{
    size_t need;
    unsigned char *p = buf;
    grant_memo_t *memo;
    uint64_t sum;

    if (mr == NULL || size_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "mr_pack: NULL argument");
    need = RDMX_DESC_FIXED + mr->rkey_size + RDMX_GRANT_MAC + 8;
    if (offset > mr->length || length > mr->length - offset)
        return rdmx__error(RDMX_ERR_OUT_OF_RANGE,
                           "mr_pack: offset %llu + length %llu exceeds the "
                           "region's %zu bytes",
                           (unsigned long long)offset,
                           (unsigned long long)length, mr->length);
    if (access & ~(mr->access | RDMX_ACCESS_FENCED))
        return rdmx__error(RDMX_ERR_DENIED,
                           "mr_pack: rights 0x%x not in the region's 0x%x",
                           access, mr->access);
    if (buf == NULL) {
        *size_p = need;
        return RDMX_OK;
    }
    if (size < need) {
        *size_p = need;
        return rdmx__error(RDMX_ERR_TOO_BIG,
                           "mr_pack: buffer of %zu bytes, need %zu", size,
                           need);
    }
    rdmx_put_le32(p, RDMX_DESC_MAGIC);
    rdmx_put_le16(p + 4, RDMX_DESC_VERSION);
    rdmx_put_le16(p + 6, (uint16_t)access);
    rdmx_put_le64(p + 8, mr->id);
    rdmx_put_le64(p + 16, (uint64_t)(uintptr_t)mr->addr + offset);
    rdmx_put_le64(p + 24, length);
    rdmx_put_le64(p + 32, offset);
    rdmx_put_le32(p + 40, (uint32_t)mr->rkey_size);
    rdmx_put_le32(p + 44, mr->ctx->tp->key_kind);
    memcpy(p + RDMX_DESC_FIXED, mr->rkey_buf, mr->rkey_size);
    memo = grant_mac(mr->ctx, mr->id, offset, length, access,
                     p + RDMX_DESC_FIXED + mr->rkey_size);
    if (memo == NULL || !memo->has_sum) {
        sum = rdmx_sum64(p, need - 8);
        if (memo != NULL) {
            memo->sum = sum;
            memo->has_sum = 1;
        }
    } else {
        sum = memo->sum; /* (a buffer lent again: the same bytes) */
    }
    rdmx_put_le64(p + need - 8, sum);
    *size_p = need;
    return RDMX_OK;
}

static const char *key_kind_name(uint32_t kind)
{
    return kind == RDMX_KEY_KIND_UCX   ? "ucx"
           : kind == RDMX_KEY_KIND_OFI ? "ofi"
                                       : NULL;
}

static rdmx_status_t bad_descriptor(rdmx_worker_t *w, const char *why)
{
    w->stats.bad_descriptors++;
    return rdmx__error(RDMX_ERR_BAD_DESCRIPTOR, "descriptor: %s", why);
}

rdmx_status_t rdmx_rmem_unpack(rdmx_ep_t *ep, const void *buf, size_t size,
                               rdmx_rmem_t **rmem_p)
{
    const unsigned char *p = buf;
    rdmx_worker_t *w;
    rdmx_rmem_t *rm;
    uint64_t addr, length, rkey_len;
    unsigned access;
    rdmx_status_t st = RDMX_OK;

    if (ep == NULL || rmem_p == NULL || (buf == NULL && size != 0))
        return rdmx__error(RDMX_ERR_INVALID, "rmem_unpack: NULL argument");
    w = ep->worker;
    rdmx__lock(w);
    if (size < RDMX_DESC_FIXED + RDMX_GRANT_MAC + 8) {
        st = bad_descriptor(w, "truncated");
        goto out;
    }
    if (rdmx_get_le32(p) != RDMX_DESC_MAGIC) {
        st = bad_descriptor(w, "bad magic, not an rdmx descriptor");
        goto out;
    }
    if (rdmx_get_le16(p + 4) != RDMX_DESC_VERSION) {
        st = bad_descriptor(w, "unsupported version");
        goto out;
    }
    rkey_len = rdmx_get_le32(p + 40);
    if (rkey_len == 0 || rkey_len > RDMX_RKEY_MAX ||
        size != RDMX_DESC_FIXED + rkey_len + RDMX_GRANT_MAC + 8) {
        st = bad_descriptor(w, "length does not match its rkey length");
        goto out;
    }
    if (rdmx_get_le64(p + size - 8) != rdmx_sum64(p, size - 8)) {
        st = bad_descriptor(w, "checksum mismatch (corrupt)");
        goto out;
    }
    access = rdmx_get_le16(p + 6);
    addr = rdmx_get_le64(p + 16);
    length = rdmx_get_le64(p + 24);
    if ((access & ~(unsigned)(RDMX_ACCESS_ALL | RDMX_ACCESS_FENCED)) ||
        addr + length < addr) {
        st = bad_descriptor(w, "invalid rights or range");
        goto out;
    }
    /* (before the carried/transport split: refused in either mode) */
    if (rdmx_get_le32(p + 44) != w->tp->key_kind) {
        const char *kind = key_kind_name(rdmx_get_le32(p + 44));
        char why[200];
        if (kind == NULL)
            snprintf(why, sizeof(why), "unknown remote key kind %u",
                     (unsigned)rdmx_get_le32(p + 44));
        else
            snprintf(why, sizeof(why),
                     "its remote key is for backend %s, this endpoint uses "
                     "%s (both sides need the same --transport family)",
                     kind, w->tp->name);
        st = bad_descriptor(w, why);
        goto out;
    }
    if (ep->tep == NULL || ep->status != RDMX_OK) {
        st = rdmx__error(ep->status != RDMX_OK ? ep->status
                                               : RDMX_ERR_CONN_CLOSED,
                         "rmem_unpack: endpoint is not connected");
        goto out;
    }

    rm = calloc(1, sizeof(*rm));
    if (rm == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "rmem_unpack: out of memory");
        goto out;
    }
    /* (Carried access needs no transport key: the grant is all; but a
     * peer's memory that is mapped here is copied, carried or not.) */
    if ((w->ctx->tp_rma || rdmx__ep_maps_peer(ep)) &&
        !(access & RDMX_ACCESS_FENCED) &&
        w->tp->rkey_unpack(ep->tep, p + RDMX_DESC_FIXED, rkey_len,
                           &rm->trkey) != RDMX_OK) {
        char why[240];
        snprintf(why, sizeof(why),
                 "the transport cannot unpack its remote key (%s)",
                 rdmx_error_detail());
        free(rm);
        st = bad_descriptor(w, why);
        goto out;
    }
    rm->ep = ep;
    rm->addr = addr;
    rm->length = length;
    rm->access = access;
    rm->region_id = rdmx_get_le64(p + 8);
    rm->region_offset = rdmx_get_le64(p + 32);
    memcpy(rm->mac, p + RDMX_DESC_FIXED + rkey_len, RDMX_GRANT_MAC);
    rdmx_list_insert_tail(&ep->rmems, &rm->link);
    *rmem_p = rm;
out:
    rdmx__unlock(w);
    return st;
}

void rdmx__rmem_detach_all(rdmx_ep_t *ep)
{
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ep->rmems)) != NULL) {
        rdmx_rmem_t *rm = rdmx_container_of(e, rdmx_rmem_t, link);
        if (rm->trkey != NULL)
            ep->worker->tp->rkey_destroy(rm->trkey);
        rm->trkey = NULL;
        rm->map = NULL;
        rm->ep = NULL;
    }
}

unsigned char *rdmx__rmem_here(rdmx_rmem_t *rm)
{
    const rdmx_tp_ops_t *tp;
    void *p;

    if (rm->trkey == NULL) /* (carried, or its endpoint is gone) */
        return NULL;
    if (!rm->map_known) {
        rm->map_known = 1;
        tp = rm->ep->worker->tp;
        if (tp->rkey_ptr != NULL &&
            tp->rkey_ptr(rm->trkey, rm->addr, &p) == RDMX_OK)
            rm->map = p;
    }
    return rm->map;
}

rdmx_status_t rdmx__rmem_map(rdmx_rmem_t *rm, void **ptr_p)
{
    rdmx_worker_t *w;
    unsigned char *p;

    if (rm == NULL || rm->ep == NULL)
        return RDMX_ERR_UNSUPPORTED;
    w = rm->ep->worker;
    rdmx__lock(w);
    p = rdmx__rmem_here(rm);
    rdmx__unlock(w);
    if (p == NULL)
        return RDMX_ERR_UNSUPPORTED;
    *ptr_p = p;
    return RDMX_OK;
}

int rdmx__rmem_mapped(const rdmx_rmem_t *rm)
{
    return rm != NULL && rm->ep != NULL && rm->trkey != NULL;
}

int rdmx__mr_allocated(const rdmx_mr_t *mr)
{
    return mr != NULL && mr->allocated;
}

int rdmx__ep_maps_peer(rdmx_ep_t *ep)
{
    int yes;

    if (ep == NULL)
        return 0;
    if (ep->maps_peer != 0)
        return ep->maps_peer == 2;
    yes = ep->worker->ctx->map_peers && ep->worker->tp->rkey_ptr != NULL &&
          rdmx__ep_transport(ep) == RDMX_TRANSPORT_SHM;
    if (ep->state == RDMX_EP_CONNECTED)
        ep->maps_peer = yes ? 2 : 1;
    return yes;
}

void rdmx_rmem_destroy(rdmx_rmem_t *rm)
{
    if (rm == NULL)
        return;
    if (rm->ep != NULL) {
        rdmx_worker_t *w = rm->ep->worker;
        rdmx__lock(w);
        rdmx_list_del(&rm->link);
        if (rm->trkey != NULL)
            w->tp->rkey_destroy(rm->trkey);
        rdmx__unlock(w);
    }
    free(rm);
}

uint64_t rdmx_rmem_length(const rdmx_rmem_t *rm)
{
    return rm->length;
}

unsigned rdmx_rmem_access(const rdmx_rmem_t *rm)
{
    return rm->access;
}
