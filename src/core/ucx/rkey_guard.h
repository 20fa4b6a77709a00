/*
 * The UCX backend's guard for a peer's remote key on UCX before 1.19: the
 * shared-memory segments a key names are checked, and held, before
 * ucp_ep_rkey_unpack sees it (docs/CORE.md, "A remote key whose memory is
 * gone"). Only src/core/ucx/ includes this.
 */
#ifndef RDMX_CORE_UCX_RKEY_GUARD_H
#define RDMX_CORE_UCX_RKEY_GUARD_H

#include <rdmx/status.h>
#include <stddef.h>
#include <ucp/api/ucp.h>

/* What a memory domain's part of a packed key is, by the domain's index. */
enum { RKG_OTHER = 0, RKG_SYSV, RKG_POSIX };

#define RKG_MDS 64 /* a packed key's memory-domain map is 64 bits */

typedef struct {
    int active;                  /* UCX before 1.19 */
    unsigned char kind[RKG_MDS]; /* RKG_* by memory-domain index */
} rdmx_rkey_guard_t;

/* System V segments attached for the time of one unpack. */
typedef struct {
    unsigned n;
    void *addr[RKG_MDS];
} rdmx_rkey_pins_t;

/* Learn the context's memory domains (ucp_context_print_info); inactive
 * from UCX 1.19 on, whose unpack fails cleanly. */
void rdmx__rkey_guard_init(rdmx_rkey_guard_t *g, ucp_context_h ucp);

/* Check the packed key @key of @len bytes before it is unpacked: its parts
 * must lie within @len, and each System V segment it names must exist
 * (it is attached into @pins, which keeps it until rdmx__rkey_guard_done)
 * and each POSIX one be there to open. RDMX_OK (nothing held on error),
 * or RDMX_ERR_BAD_DESCRIPTOR with the reason. */
rdmx_status_t rdmx__rkey_guard_check(const rdmx_rkey_guard_t *g,
                                     const void *key, size_t len,
                                     rdmx_rkey_pins_t *pins);

/* Let go of what rdmx__rkey_guard_check held (after the unpack). */
void rdmx__rkey_guard_done(rdmx_rkey_pins_t *pins);

#endif /* RDMX_CORE_UCX_RKEY_GUARD_H */
