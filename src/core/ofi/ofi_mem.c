/*
 * Memory registration of the libfabric backend: every mr_mode bit a
 * provider may ask for, packed remote keys, and their unpacking
 * (docs/FABRIC.md, "Memory registration").
 *
 * Per bit:
 * - FI_MR_LOCAL: every local buffer of a data call has a desc. Regions
 *   carry theirs (rdmx__ofi_mr_desc); the backend's own buffers are
 *   registered once; a caller's buffer without a region is registered
 *   for the one operation (ofi_rma.c, ofi_rndv.c).
 * - FI_MR_VIRT_ADDR: remote addresses are the owner's virtual addresses;
 *   without it, offsets from the registration's start (ofi_rma.c
 *   translates; the packed key carries the start).
 * - FI_MR_ALLOCATED: memory exists before it is registered: mem_map's
 *   own allocations are made and zeroed first; a caller's region is its
 *   memory already.
 * - FI_MR_PROV_KEY: the key is fi_mr_key's; without it a random one of
 *   mr_key_size bytes, tried again on -FI_ENOKEY.
 * - FI_MR_ENDPOINT: a region is registered once per worker and bound to
 *   its endpoint (workers created later register every region); its
 *   packed key is a table {worker instance, key} of the workers that
 *   existed at registration.
 * - FI_MR_RAW: the packed key carries fi_mr_raw_attr's bytes; the peer
 *   maps them with fi_mr_map_raw (unmapped with the remote key).
 *
 * RDMX_OFI_MR_MODE_EXTRA (names: local, allocated, prov_key, endpoint,
 * raw, comma-separated) makes the code honour bits the provider did not
 * ask for: allowed by libfabric for all but the calls only such a
 * provider implements (fi_mr_bind, fi_mr_raw_attr, fi_mr_map_raw), which
 * are then skipped (endpoint) or replaced by the key's 8 bytes (raw). It
 * exists for the tests (tests/test_ofi_mr.c). FI_MR_VIRT_ADDR cannot be
 * pretended (the target's provider decides how it reads addresses): tcp
 * runs the offset form, shm the virtual one.
 *
 * Packed key (the rkey inside rdmx descriptors; all little-endian):
 *  0 u32 magic "OFK1"  4 u8 version 1
 *  5 u8 flags: 1 virtual addresses, 2 raw, 4 table, 8 no transport key
 *  6 u16 n  8 u64 base  16 u64 length  24 u32 FNV-1a of prov_name  28 u32 0
 * 32 payload: plain u64 key (n = 8) | raw: u64 raw base, n raw bytes |
 *    table: n x {u64 worker instance, u64 key} | no key: nothing (n = 0)
 */
#include "core/ofi/ofi_int.h"

#include "util/endian.h"

#include <stdlib.h>
#include <string.h>

#define OFI_KEY_MAGIC 0x314b464fu /* "OFK1" little-endian */
#define OFI_KEY_HDR   32
#define OFI_KEY_VIRT  1
#define OFI_KEY_RAW   2
#define OFI_KEY_TABLE 4
#define OFI_KEY_NOKEY 8
#define OFI_RAW_MAX   64 /* raw key bytes we accept */
#define OFI_TABLE_MAX 1024

static uint32_t fnv1a(const char *s)
{
    uint32_t h = 2166136261u;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* RDMX_OFI_MR_MODE_EXTRA: bits to honour beyond the provider's. */
static uint64_t extra_bits(void)
{
    static const struct {
        const char *name;
        uint64_t bit;
    } names[] = {{"local", FI_MR_LOCAL},
                 {"allocated", FI_MR_ALLOCATED},
                 {"prov_key", FI_MR_PROV_KEY},
                 {"endpoint", FI_MR_ENDPOINT},
                 {"raw", FI_MR_RAW}};
    const char *s = getenv("RDMX_OFI_MR_MODE_EXTRA");
    uint64_t bits = 0;

    while (s != NULL && *s != '\0') {
        size_t n = strcspn(s, ",");
        size_t i;
        for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strlen(names[i].name) == n && !strncmp(s, names[i].name, n))
                break;
        if (i < sizeof(names) / sizeof(names[0]))
            bits |= names[i].bit;
        else
            rdmx_warn("RDMX_OFI_MR_MODE_EXTRA: unknown bit '%.*s' ignored",
                      (int)n, s);
        s += n;
        if (*s == ',')
            s++;
    }
    return bits;
}

void rdmx__ofi_mem_init(ofi_ctx_t *oc)
{
    oc->mr_granted = oc->mr_mode;
    oc->mr_mode |= extra_bits();
    oc->prov_id = fnv1a(oc->prov);
    pthread_mutex_init(&oc->lock, NULL);
    rdmx_list_init(&oc->workers);
    rdmx_list_init(&oc->regions);
}

/* Register @len bytes at @buf with @access (FI_* bits), bound to @ow's
 * endpoint when the provider asks for FI_MR_ENDPOINT (@ow NULL: a domain
 * registration). The key is ours (random, retried when taken) or, with
 * FI_MR_PROV_KEY, the provider's. */
rdmx_status_t rdmx__ofi_mr_reg(ofi_ctx_t *oc, ofi_worker_t *ow, const void *buf,
                               size_t len, uint64_t access,
                               struct fid_mr **mr_p, uint64_t *key_p)
{
    uint64_t key = 0;
    int ret = -FI_ENOKEY;

    *mr_p = NULL;
    for (int tries = 0; tries < 8 && ret == -FI_ENOKEY; tries++) {
        /* (a provider with FI_MR_PROV_KEY ignores the requested key) */
        if (rdmx__random(&key, sizeof(key)) != RDMX_OK)
            return rdmx__error(RDMX_ERR_IO, "ofi: no random key");
        if (oc->key_size < 8)
            key &= (1ull << (8 * oc->key_size)) - 1;
        ret = fi_mr_reg(oc->domain, buf, len, access, 0, key, 0, mr_p, NULL);
    }
    if (ret == 0 && ow != NULL && (oc->mr_granted & FI_MR_ENDPOINT)) {
        ret = fi_mr_bind(*mr_p, &ow->ep->fid, 0);
        if (ret == 0)
            ret = fi_mr_enable(*mr_p);
        if (ret != 0) {
            fi_close(&(*mr_p)->fid);
            *mr_p = NULL;
        }
    }
    if (ret != 0) {
        *mr_p = NULL;
        return rdmx__error(ret == -FI_ENOMEM ? RDMX_ERR_NO_MEMORY : RDMX_ERR_IO,
                           "ofi %s: cannot register %zu bytes: %s", oc->prov,
                           len, fi_strerror(-ret));
    }
    if (key_p != NULL)
        *key_p = (oc->mr_mode & FI_MR_PROV_KEY) ? fi_mr_key(*mr_p) : key;
    return RDMX_OK;
}

/* Add a registration of @m for @ow (NULL: the domain's). Under
 * ctx->lock with FI_MR_ENDPOINT. */
static rdmx_status_t ent_add(ofi_ctx_t *oc, ofi_mr_t *m, ofi_worker_t *ow)
{
    ofi_mrent_t *e;
    rdmx_status_t st;

    if (m->n == m->cap) {
        unsigned cap = m->cap ? 2 * m->cap : 1;
        e = realloc(m->ents, cap * sizeof(*e));
        if (e == NULL)
            return rdmx__error(RDMX_ERR_NO_MEMORY, "mem: out of memory");
        m->ents = e;
        m->cap = cap;
    }
    e = &m->ents[m->n];
    memset(e, 0, sizeof(*e));
    st = rdmx__ofi_mr_reg(oc, ow, m->base, m->len, m->access, &e->mr, &e->key);
    if (st != RDMX_OK)
        return st;
    e->worker = ow;
    e->instance = ow != NULL ? ow->instance : 0;
    e->desc = fi_mr_desc(e->mr);
    m->n++;
    return RDMX_OK;
}

static void mr_free(ofi_mr_t *m)
{
    for (unsigned i = 0; i < m->n; i++)
        fi_close(&m->ents[i].mr->fid);
    free(m->ents);
    free(m->alloc);
    free(m);
}

/* The packed key of @m (see the top of this file). */
static rdmx_status_t key_pack(ofi_ctx_t *oc, ofi_mr_t *m, unsigned char **key_p,
                              size_t *len_p)
{
    unsigned char raw[OFI_RAW_MAX];
    uint64_t raw_base = (uint64_t)(uintptr_t)m->base;
    unsigned flags = 0;
    size_t n = 0, len = OFI_KEY_HDR;
    unsigned char *k;

    if (oc->mr_mode & FI_MR_VIRT_ADDR)
        flags |= OFI_KEY_VIRT;
    if (oc->one_sided && !(oc->mr_mode & FI_MR_ENDPOINT) &&
        (m->n == 0 || m->ents == NULL)) /* (mem_map registered it) */
        return rdmx__error(RDMX_ERR_IO, "ofi %s: region not registered",
                           oc->prov);
    if (!oc->one_sided) {
        flags |= OFI_KEY_NOKEY;
    } else if (oc->mr_mode & FI_MR_ENDPOINT) {
        if (oc->mr_mode & FI_MR_RAW)
            return rdmx__error(RDMX_ERR_UNSUPPORTED,
                               "ofi %s: raw keys (FI_MR_RAW) bound to "
                               "endpoints (FI_MR_ENDPOINT) are not supported",
                               oc->prov);
        flags |= OFI_KEY_TABLE;
        n = m->n;
        len += 16 * n;
    } else if (oc->mr_mode & FI_MR_RAW) {
        flags |= OFI_KEY_RAW;
        n = sizeof(raw);
        if (oc->mr_granted & FI_MR_RAW) {
            int ret = fi_mr_raw_attr(m->ents[0].mr, &raw_base, raw, &n, 0);
            if (ret != 0 || n == 0 || n > sizeof(raw))
                return rdmx__error(RDMX_ERR_IO, "ofi %s: fi_mr_raw_attr: %s",
                                   oc->prov,
                                   ret ? fi_strerror(-ret) : "bad length");
        } else {
            n = 8; /* (pretended: the key itself) */
            rdmx_put_le64(raw, m->ents[0].key);
        }
        len += 8 + n;
    } else {
        n = 8;
        len += 8;
    }
    if ((k = malloc(len)) == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "mem: out of memory");
    rdmx_put_le32(k, OFI_KEY_MAGIC);
    k[4] = 1;
    k[5] = (unsigned char)flags;
    rdmx_put_le16(k + 6, (uint16_t)n);
    rdmx_put_le64(k + 8, (uint64_t)(uintptr_t)m->base);
    rdmx_put_le64(k + 16, m->len);
    rdmx_put_le32(k + 24, oc->prov_id);
    rdmx_put_le32(k + 28, 0);
    if (flags & OFI_KEY_TABLE) {
        for (size_t i = 0; i < n; i++) {
            rdmx_put_le64(k + OFI_KEY_HDR + 16 * i, m->ents[i].instance);
            rdmx_put_le64(k + OFI_KEY_HDR + 16 * i + 8, m->ents[i].key);
        }
    } else if (flags & OFI_KEY_RAW) {
        rdmx_put_le64(k + OFI_KEY_HDR, raw_base);
        memcpy(k + OFI_KEY_HDR + 8, raw, n);
    } else if (!(flags & OFI_KEY_NOKEY)) {
        rdmx_put_le64(k + OFI_KEY_HDR, m->ents[0].key);
    }
    *key_p = k;
    *len_p = len;
    return RDMX_OK;
}

/* Carried one-sided access (one_sided 0) registers nothing: messages are
 * copied through the backend's own buffers and large ones registered for
 * their pull, so a region is its memory and a key that says so. With the
 * provider's one-sided access, the region is registered with the rights
 * asked (atomics need remote read and write), local use always. */
rdmx_status_t rdmx__ofi_mem_map(void *tctx, void *addr, size_t length,
                                int allocate, unsigned access, void **tmr_p,
                                void **addr_p, void **rkey_p,
                                size_t *rkey_len_p)
{
    ofi_ctx_t *oc = tctx;
    unsigned char *key = NULL;
    size_t key_len = 0;
    rdmx_status_t st = RDMX_OK;
    ofi_mr_t *m;

    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "mem: out of memory");
    rdmx_list_init(&m->link);
    m->base = addr;
    m->len = length;
    if (allocate) {
        /* (FI_MR_ALLOCATED: the pages exist before the registration) */
        if (posix_memalign(&m->alloc, 4096, length ? length : 1) != 0) {
            free(m);
            return rdmx__error(RDMX_ERR_NO_MEMORY,
                               "mem: cannot allocate %zu bytes", length);
        }
        memset(m->alloc, 0, length);
        m->base = m->alloc;
    }
    m->access = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
    if (access & (RDMX_ACCESS_READ | RDMX_ACCESS_ATOMIC))
        m->access |= FI_REMOTE_READ;
    if (access & (RDMX_ACCESS_WRITE | RDMX_ACCESS_ATOMIC))
        m->access |= FI_REMOTE_WRITE;
    if (oc->one_sided) {
        if (oc->mr_mode & FI_MR_ENDPOINT) {
            rdmx_list_t *e;
            pthread_mutex_lock(&oc->lock);
            rdmx_list_for_each(e, &oc->workers)
            {
                st = ent_add(oc, m, rdmx_container_of(e, ofi_worker_t, clink));
                if (st != RDMX_OK)
                    break;
            }
            if (st == RDMX_OK)
                rdmx_list_insert_tail(&oc->regions, &m->link);
            pthread_mutex_unlock(&oc->lock);
        } else {
            st = ent_add(oc, m, NULL);
        }
        if (st != RDMX_OK)
            goto err_mr;
    }
    if (oc->mr_mode & FI_MR_ENDPOINT)
        pthread_mutex_lock(&oc->lock);
    st = key_pack(oc, m, &key, &key_len);
    if (oc->mr_mode & FI_MR_ENDPOINT)
        pthread_mutex_unlock(&oc->lock);
    if (st != RDMX_OK)
        goto err_list;
    *tmr_p = m;
    *addr_p = m->base;
    *rkey_p = key;
    *rkey_len_p = key_len;
    return RDMX_OK;

err_list:
    if (oc->mr_mode & FI_MR_ENDPOINT) {
        pthread_mutex_lock(&oc->lock);
        rdmx_list_del(&m->link);
        pthread_mutex_unlock(&oc->lock);
    }
err_mr:
    mr_free(m);
    return st;
}

void rdmx__ofi_mem_unmap(void *tctx, void *tmr, void *rkey)
{
    ofi_ctx_t *oc = tctx;
    ofi_mr_t *m = tmr;

    if (oc->mr_mode & FI_MR_ENDPOINT) {
        pthread_mutex_lock(&oc->lock);
        rdmx_list_del(&m->link);
        pthread_mutex_unlock(&oc->lock);
    }
    mr_free(m);
    free(rkey);
}

/* A new worker: known to mem_map from now on; with FI_MR_ENDPOINT every
 * region gets a registration bound to its endpoint (for local use: the
 * regions' packed keys were made before it existed). */
rdmx_status_t rdmx__ofi_mem_worker_add(ofi_worker_t *ow)
{
    ofi_ctx_t *oc = ow->ctx;
    rdmx_status_t st = RDMX_OK;
    rdmx_list_t *e;

    pthread_mutex_lock(&oc->lock);
    if (oc->one_sided && (oc->mr_mode & FI_MR_ENDPOINT)) {
        rdmx_list_for_each(e, &oc->regions)
        {
            st = ent_add(oc, rdmx_container_of(e, ofi_mr_t, link), ow);
            if (st != RDMX_OK)
                break;
        }
    }
    rdmx_list_insert_tail(&oc->workers, &ow->clink);
    pthread_mutex_unlock(&oc->lock);
    if (st != RDMX_OK)
        rdmx__ofi_mem_worker_remove(ow);
    return st;
}

/* The worker goes: its registrations of every region close. */
void rdmx__ofi_mem_worker_remove(ofi_worker_t *ow)
{
    ofi_ctx_t *oc = ow->ctx;
    rdmx_list_t *e;

    pthread_mutex_lock(&oc->lock);
    rdmx_list_del(&ow->clink);
    rdmx_list_for_each(e, &oc->regions)
    {
        ofi_mr_t *m = rdmx_container_of(e, ofi_mr_t, link);
        for (unsigned i = 0; i < m->n;) {
            if (m->ents[i].worker == ow) {
                fi_close(&m->ents[i].mr->fid);
                m->ents[i] = m->ents[--m->n];
            } else {
                i++;
            }
        }
    }
    pthread_mutex_unlock(&oc->lock);
}

/* The desc of region @tmr for a data call on @ow (NULL: none needed or
 * none registered). */
void *rdmx__ofi_mr_desc(ofi_worker_t *ow, void *tmr)
{
    ofi_ctx_t *oc = ow->ctx;
    ofi_mr_t *m = tmr;
    void *desc = NULL;

    if (m == NULL || m->n == 0)
        return NULL;
    if (!(oc->mr_mode & FI_MR_ENDPOINT))
        return m->ents[0].desc;
    pthread_mutex_lock(&oc->lock);
    for (unsigned i = 0; i < m->n; i++)
        if (m->ents[i].worker == ow)
            desc = m->ents[i].desc;
    pthread_mutex_unlock(&oc->lock);
    return desc;
}

static rdmx_status_t bad_key(const char *why, const char *prov)
{
    return rdmx__error(RDMX_ERR_BAD_DESCRIPTOR, "ofi %s: %s", prov, why);
}

rdmx_status_t rdmx__ofi_rkey_unpack(rdmx_tep_t *tep, const void *rkey,
                                    size_t len, void **trkey_p)
{
    ofi_ep_t *ep = (ofi_ep_t *)tep;
    ofi_ctx_t *oc = ep->worker->ctx;
    const unsigned char *k = rkey;
    ofi_rkey_t *rk;
    unsigned flags;
    size_t n;

    if (len < OFI_KEY_HDR || rdmx_get_le32(k) != OFI_KEY_MAGIC || k[4] != 1)
        return bad_key("remote key is not an ofi one", oc->prov);
    if (rdmx_get_le32(k + 24) != oc->prov_id)
        return bad_key("remote key is for another ofi provider (both sides "
                       "need the same --transport)",
                       oc->prov);
    flags = k[5];
    n = rdmx_get_le16(k + 6);
    if (flags & OFI_KEY_NOKEY)
        return bad_key("the region's owner carries one-sided access itself "
                       "(RDMX_RMA differs between the two sides)",
                       oc->prov);
    if ((flags & ~(unsigned)(OFI_KEY_VIRT | OFI_KEY_RAW | OFI_KEY_TABLE)) ||
        ((flags & OFI_KEY_RAW) && (flags & OFI_KEY_TABLE)) ||
        rdmx_get_le32(k + 28) != 0)
        return bad_key("malformed remote key", oc->prov);
    if (flags & OFI_KEY_TABLE) {
        if (n > OFI_TABLE_MAX || len != OFI_KEY_HDR + 16 * n)
            return bad_key("malformed remote key (table)", oc->prov);
    } else if (flags & OFI_KEY_RAW) {
        if (n == 0 || n > OFI_RAW_MAX || len != OFI_KEY_HDR + 8 + n)
            return bad_key("malformed remote key (raw)", oc->prov);
    } else if (n != 8 || len != OFI_KEY_HDR + 8) {
        return bad_key("malformed remote key", oc->prov);
    }
    rk = calloc(1, sizeof(*rk));
    if (rk == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "rmem_unpack: out of memory");
    rk->ctx = oc;
    rk->base = rdmx_get_le64(k + 8);
    rk->len = rdmx_get_le64(k + 16);
    rk->virt = (flags & OFI_KEY_VIRT) != 0;
    if (rk->base + rk->len < rk->base) {
        free(rk);
        return bad_key("remote key's range wraps", oc->prov);
    }
    if (flags & OFI_KEY_TABLE) {
        size_t i;
        for (i = 0; i < n; i++)
            if (rdmx_get_le64(k + OFI_KEY_HDR + 16 * i) == ep->peer->instance)
                break;
        if (i == n) {
            free(rk);
            return bad_key("the region was registered before the peer's "
                           "worker existed (FI_MR_ENDPOINT: create workers "
                           "before registering memory)",
                           oc->prov);
        }
        rk->key = rdmx_get_le64(k + OFI_KEY_HDR + 16 * i + 8);
    } else if (flags & OFI_KEY_RAW) {
        if (oc->mr_granted & FI_MR_RAW) {
            int ret =
                fi_mr_map_raw(oc->domain, rdmx_get_le64(k + OFI_KEY_HDR),
                              (uint8_t *)k + OFI_KEY_HDR + 8, n, &rk->key, 0);
            if (ret != 0) {
                free(rk);
                return rdmx__error(RDMX_ERR_BAD_DESCRIPTOR,
                                   "ofi %s: fi_mr_map_raw: %s", oc->prov,
                                   fi_strerror(-ret));
            }
            rk->raw_mapped = 1;
        } else if (n == 8) {
            rk->key = rdmx_get_le64(k + OFI_KEY_HDR + 8);
        } else {
            free(rk);
            return bad_key("raw remote key this provider cannot map", oc->prov);
        }
    } else {
        rk->key = rdmx_get_le64(k + OFI_KEY_HDR);
    }
    *trkey_p = rk;
    return RDMX_OK;
}

void rdmx__ofi_rkey_destroy(void *trkey)
{
    ofi_rkey_t *rk = trkey;

    if (rk == NULL)
        return;
    if (rk->raw_mapped)
        fi_mr_unmap_key(rk->ctx->domain, rk->key);
    free(rk);
}
