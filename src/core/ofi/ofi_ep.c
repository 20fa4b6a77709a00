/*
 * Endpoints of the libfabric backend: the peer worker's address checked
 * and put in the AV (one entry per peer worker, refcounted by the
 * endpoints toward it), endpoint ids for frames (a slot and its
 * generation), close, and failure of every endpoint toward a peer
 * (docs/FABRIC.md, "Address" and "Pairing"). Frames find their endpoint
 * in ofi_msg.c.
 */
#include "core/ofi/ofi_int.h"

#include "util/endian.h"

#include <stdlib.h>
#include <string.h>

#define OFI_SLOT_BITS 20
#define OFI_SLOT_MASK ((1u << OFI_SLOT_BITS) - 1)

#define OFI_PEER_TAB_MAX (1u << 20) /* AV indices the table covers */

/* The peer of a completion's source address: FI_AV_TABLE addresses are
 * indices, so a table finds it in one step (a walk of the peers beyond
 * the table's reach). */
ofi_peer_t *rdmx__ofi_peer_by_addr(ofi_worker_t *ow, fi_addr_t a)
{
    rdmx_list_t *e;

    if (a == FI_ADDR_NOTAVAIL)
        return NULL;
    if (a < ow->peer_tab_len)
        return ow->peer_tab[a];
    rdmx_list_for_each(e, &ow->peers)
    {
        ofi_peer_t *p = rdmx_container_of(e, ofi_peer_t, link);
        if (p->fi_addr == a)
            return p;
    }
    return NULL;
}

/* Note @p under its AV index (nothing when the index is past
 * OFI_PEER_TAB_MAX or memory runs out: lookups walk the list then). */
static void peer_tab_set(ofi_worker_t *ow, fi_addr_t a, ofi_peer_t *p)
{
    rdmx_list_t *e;

    if (a >= ow->peer_tab_len) {
        size_t len = ow->peer_tab_len ? ow->peer_tab_len : 64;
        ofi_peer_t **t;
        if (p == NULL || a >= OFI_PEER_TAB_MAX)
            return;
        while (len <= a)
            len *= 2;
        t = realloc(ow->peer_tab, len * sizeof(*t));
        if (t == NULL)
            return;
        memset(t + ow->peer_tab_len, 0, (len - ow->peer_tab_len) * sizeof(*t));
        ow->peer_tab = t;
        ow->peer_tab_len = len;
        /* (peers a failed growth left out) */
        rdmx_list_for_each(e, &ow->peers)
        {
            ofi_peer_t *q = rdmx_container_of(e, ofi_peer_t, link);
            if (q->fi_addr < len)
                t[q->fi_addr] = q;
        }
    }
    ow->peer_tab[a] = p;
}

ofi_ep_t *rdmx__ofi_ep_lookup(ofi_worker_t *ow, uint32_t id)
{
    uint32_t slot = (id & OFI_SLOT_MASK) - 1;

    if ((id & OFI_SLOT_MASK) == 0 || slot >= ow->nslots ||
        ow->slots[slot].ep == NULL || ow->slots[slot].ep->id != id)
        return NULL;
    return ow->slots[slot].ep;
}

/* Give @ep an id: a free slot (or a new one) and the slot's generation. */
static int ep_id_alloc(ofi_worker_t *ow, ofi_ep_t *ep)
{
    uint32_t slot;

    if (ow->free_slot != 0) {
        slot = ow->free_slot - 1;
        ow->free_slot = ow->slots[slot].next_free;
    } else {
        if (ow->nslots >= OFI_SLOT_MASK - 1)
            return -1;
        if (ow->nslots == ow->slot_cap) {
            size_t cap = ow->slot_cap ? ow->slot_cap * 2 : 64;
            ofi_slot_t *s = realloc(ow->slots, cap * sizeof(*s));
            if (s == NULL)
                return -1;
            ow->slots = s;
            ow->slot_cap = cap;
        }
        slot = (uint32_t)ow->nslots++;
        ow->slots[slot].gen = 0;
    }
    ow->slots[slot].next_free = 0;
    ow->slots[slot].gen = (ow->slots[slot].gen + 1) & 0xfff;
    ow->slots[slot].ep = ep;
    ep->id = (ow->slots[slot].gen << OFI_SLOT_BITS) | (slot + 1);
    return 0;
}

/* Free @ep's slot: its ep is NULL (a frame naming it finds nothing), and
 * the free list threads through next_free. */
static void ep_id_free(ofi_worker_t *ow, ofi_ep_t *ep)
{
    uint32_t slot = (ep->id & OFI_SLOT_MASK) - 1;

    ow->slots[slot].ep = NULL;
    ow->slots[slot].next_free = ow->free_slot;
    ow->free_slot = slot + 1;
}

/* Check a peer's address blob against ours: same magic, version and
 * provider, and a name whose shape this provider uses. */
static rdmx_status_t parse_address(ofi_worker_t *ow, const unsigned char *a,
                                   size_t len, const unsigned char **name_p,
                                   size_t *name_len_p)
{
    size_t n;

    if (len < OFI_ADDR_HDR || rdmx_get_le32(a) != OFI_ADDR_MAGIC)
        return rdmx__error(RDMX_ERR_UNREACHABLE,
                           "the peer's transport address is not a libfabric "
                           "one (this worker uses backend ofi: both sides "
                           "need the same --transport family)");
    n = rdmx_get_le16(a + 6);
    if (a[4] != 1 || n == 0 || n > OFI_NAME_MAX || len != OFI_ADDR_HDR + n)
        return rdmx__error(RDMX_ERR_UNREACHABLE,
                           "malformed ofi address (%zu bytes)", len);
    if (memchr(a + 16, '\0', OFI_PROV_MAX) == NULL ||
        strcmp((const char *)a + 16, ow->ctx->prov) != 0)
        return rdmx__error(RDMX_ERR_UNREACHABLE,
                           "the peer's ofi provider is %.32s, this worker "
                           "uses %s",
                           memchr(a + 16, '\0', OFI_PROV_MAX)
                               ? (const char *)a + 16
                               : "(malformed)",
                           ow->ctx->prov);
    switch (ow->ctx->info->addr_format) {
    case FI_SOCKADDR_IN:
        if (n != 16)
            return rdmx__error(RDMX_ERR_UNREACHABLE,
                               "malformed ofi address (IPv4 name of %zu "
                               "bytes)",
                               n);
        break;
    case FI_SOCKADDR_IN6:
        if (n != 28)
            return rdmx__error(RDMX_ERR_UNREACHABLE,
                               "malformed ofi address (IPv6 name of %zu "
                               "bytes)",
                               n);
        break;
    case FI_ADDR_STR:
        /* (shm opens whatever name it is given: only its own shape) */
        if (a[OFI_ADDR_HDR + n - 1] != '\0' ||
            memchr(a + OFI_ADDR_HDR, '\0', n) != a + OFI_ADDR_HDR + n - 1 ||
            (strstr(ow->ctx->prov, "shm") != NULL &&
             strncmp((const char *)a + OFI_ADDR_HDR, "fi_shm://", 9) != 0))
            return rdmx__error(RDMX_ERR_UNREACHABLE,
                               "malformed ofi address (string name)");
        break;
    default:
        break;
    }
    *name_p = a + OFI_ADDR_HDR;
    *name_len_p = n;
    return RDMX_OK;
}

/* A peer's AV entry stays while the worker lives, used or not: removing
 * it on one side while the other still uses it loses messages (rxm, with
 * FI_AV_REMOVE_CLEANUP, closes the connection the other side is about to
 * send a new connection's BIND on; shm unmaps a region its progress may
 * still touch). Idle entries go only when the AV is full (shm: 256
 * peers): see peer_get. */
static void peer_put(ofi_worker_t *ow, ofi_peer_t *p)
{
    (void)ow;
    p->refs--;
}

/* A send or read toward @peer came back from the provider. */
void rdmx__ofi_peer_io_done(ofi_worker_t *ow, ofi_peer_t *peer)
{
    peer->inflight--;
    ow->inflight--;
}

/* Remove the AV entries of peers no endpoint uses and nothing in flight
 * names; returns how many went. */
static unsigned peers_evict_idle(ofi_worker_t *ow)
{
    rdmx_list_t *e, *t;
    unsigned n = 0;

    rdmx_list_for_each_safe(e, t, &ow->peers)
    {
        ofi_peer_t *p = rdmx_container_of(e, ofi_peer_t, link);
        if (p->refs == 0 && p->inflight == 0) {
            fi_av_remove(ow->av, &p->fi_addr, 1, 0);
            peer_tab_set(ow, p->fi_addr, NULL);
            rdmx_list_del(&p->link);
            rdmx__ofi_bell_peer_close(ow, p);
            free(p);
            n++;
        }
    }
    return n;
}

static rdmx_status_t peer_get(ofi_worker_t *ow, const unsigned char *name,
                              size_t n, ofi_peer_t **peer_p)
{
    rdmx_list_t *e;
    ofi_peer_t *p;
    int ret;

    rdmx_list_for_each(e, &ow->peers)
    {
        p = rdmx_container_of(e, ofi_peer_t, link);
        if (p->name_len == n && !memcmp(p->name, name, n)) {
            p->refs++;
            *peer_p = p;
            return RDMX_OK;
        }
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "endpoint: out of memory");
    memcpy(p->name, name, n);
    p->name_len = n;
    ret = fi_av_insert(ow->av, p->name, 1, &p->fi_addr, 0, NULL);
    if (ret != 1 && peers_evict_idle(ow) != 0) /* (a full AV: shm) */
        ret = fi_av_insert(ow->av, p->name, 1, &p->fi_addr, 0, NULL);
    if (ret != 1) {
        free(p);
        return rdmx__error(RDMX_ERR_UNREACHABLE,
                           "ofi %s: the peer's address was refused "
                           "(fi_av_insert: %s)",
                           ow->ctx->prov,
                           ret < 0 ? fi_strerror(-ret) : "not inserted");
    }
    p->refs = 1;
    rdmx_list_insert_tail(&ow->peers, &p->link);
    peer_tab_set(ow, p->fi_addr, p);
    *peer_p = p;
    return RDMX_OK;
}

rdmx_status_t rdmx__ofi_ep_create(void *tw, const void *addr, size_t len,
                                  rdmx_tep_t **tep_p)
{
    ofi_worker_t *ow = tw;
    const unsigned char *name = NULL;
    size_t n = 0;
    rdmx_status_t st;
    ofi_ep_t *ep;

    if ((st = parse_address(ow, addr, len, &name, &n)) != RDMX_OK)
        return st;
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "endpoint: out of memory");
    if (ep_id_alloc(ow, ep) != 0) {
        free(ep);
        return rdmx__error(RDMX_ERR_NO_RESOURCE, "endpoint: no free id");
    }
    if ((st = peer_get(ow, name, n, &ep->peer)) != RDMX_OK) {
        ep_id_free(ow, ep);
        free(ep);
        return st;
    }
    /* (FI_MR_ENDPOINT: picks the peer worker's key from a table) */
    ep->peer->instance = rdmx_get_le64((const unsigned char *)addr + 8);
    rdmx__ofi_bell_peer_open(ow, ep->peer, addr);
    rdmx_list_init(&ep->tep.link);
    rdmx_list_init(&ep->reqs);
    rdmx_list_init(&ep->rts);
    rdmx_list_init(&ep->rdescs);
    rdmx_list_init(&ep->rmas);
    rdmx_list_init(&ep->flushes);
    ep->worker = ow;
    ep->seq = ++ow->ep_seq;
    rdmx_list_insert_tail(&ow->eps, &ep->link);
    *tep_p = &ep->tep;
    return RDMX_OK;
}

rdmx_transport_t rdmx__ofi_ep_transport(rdmx_tep_t *tep)
{
    return ((ofi_ep_t *)tep)->worker->ctx->medium;
}

/* Never blocks: requests still queued complete as canceled on the next
 * progress; those the provider holds complete when it says so. */
rdmx_status_t rdmx__ofi_ep_close(void *tw, rdmx_tep_t *tep, int force,
                                 void *closer, void **req_p)
{
    ofi_worker_t *ow = tw;
    ofi_ep_t *ep = (ofi_ep_t *)tep;

    (void)force;
    (void)closer;
    (void)req_p;
    rdmx__ofi_ep_drop_reqs(ep);
    rdmx__ofi_ep_drop_rndv(ep);
    rdmx__ofi_ep_drop_rma(ep);
    rdmx__ofi_ep_drop_joins(ep);
    ep_id_free(ow, ep);
    rdmx_list_del(&ep->link);
    peer_put(ow, ep->peer);
    free(ep);
    return RDMX_OK;
}

/* A connection-level error on @peer: every endpoint toward it fails (one
 * AV entry carries them all). */
void rdmx__ofi_peer_failed(ofi_worker_t *ow, ofi_peer_t *peer, rdmx_status_t st,
                           const char *why)
{
    rdmx_list_t *e, *t;

    rdmx_list_for_each_safe(e, t, &ow->eps)
    {
        ofi_ep_t *ep = rdmx_container_of(e, ofi_ep_t, link);
        if (ep->peer == peer && !ep->tep.failed)
            rdmx__tp_ep_failed(&ep->tep, st, why);
    }
}
