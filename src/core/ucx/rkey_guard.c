/*
 * A peer's remote key, checked before UCX before 1.19 unpacks it.
 *
 * Such a UCX attaches the shared-memory segments a key names while it
 * unpacks it. When one is gone (its owner freed it or exited: a System V
 * segment is destroyed with its last attachment, a POSIX one with its
 * owner's descriptor), the unpack fails, and its cleanup then releases
 * the parts it never unpacked, taking whatever the pool's memory held for
 * them: the process dies (UCX fixed it in 1.19, "Keep md_map consistent
 * with tl_rkey"). A lender that lets go of its memory early, or dies
 * mid-call, would take its server down with it.
 *
 * So before ucp_ep_rkey_unpack, for UCX before 1.19:
 *  - the key's parts must lie within its length (UCX reads them unchecked);
 *  - each System V segment it names is attached here first, as UCX will
 *    attach it. If that fails, UCX's would, and the key is refused; if it
 *    works, the segment now lives until this attachment ends, after the
 *    unpack, so UCX's own attach finds it.
 *  - each POSIX segment is opened the way UCX will open it; if that fails,
 *    the key is refused. This cannot hold it: UCX opens it again by its
 *    name, so an owner that exits in the microseconds between still
 *    brings the crash. (rdmx allocates System V segments where they work.)
 *
 * Which part is which: a packed key is
 *     u64 memory-domain map | u8 memory type |
 *     for each domain in the map: u8 size, that many bytes | (more)
 * where a domain is named by its index in the lender's UCX context. That
 * context is read here as this process's own, as ucp_context_print_info
 * lists it: both run rdmx over shared memory on one host, with the same
 * library and the same transports, which give the same list. A part is
 * treated as a segment only where the domain is "sysv" or "posix" and the
 * part has that domain's size; anything else goes to UCX as before.
 */
#define _GNU_SOURCE
#include "core/ucx/rkey_guard.h"

#include "core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <unistd.h>

/* UCX 1.13-1.18's packed parts (uct_sysv_packed_rkey_t and
 * uct_posix_packed_rkey_t, both packed structs). */
#define SYSV_PART      12 /* u32 shmid, u64 owner's address */
#define POSIX_PART_MIN 24 /* u64 segment id, u64 address, u64 length */
#define POSIX_PROCFS   (1ull << 63)
#define POSIX_SHM_OPEN (1ull << 62)
#define POSIX_PID_NS   (1ull << 60)
#define POSIX_ID_MASK  ((1ull << 60) - 1)
#define POSIX_PID_BITS 30

void rdmx__rkey_guard_init(rdmx_rkey_guard_t *g, ucp_context_h ucp)
{
    unsigned major, minor, release;
    char *text = NULL, *line, *save = NULL;
    size_t size = 0;
    FILE *f;

    memset(g, 0, sizeof(*g));
    ucp_get_version(&major, &minor, &release);
    if (major != 1 || minor >= 19)
        return;
    f = open_memstream(&text, &size);
    if (f == NULL)
        return; /* (unguarded, as before) */
    ucp_context_print_info(ucp, f);
    fclose(f);
    /* "#            md 1  :  component 1  sysv " */
    for (line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        unsigned md, cmpt;
        char name[64];
        if (sscanf(line, "# md %u : component %u %63s", &md, &cmpt, name) !=
                3 ||
            md >= RKG_MDS)
            continue;
        if (strcmp(name, "sysv") == 0)
            g->kind[md] = RKG_SYSV;
        else if (strcmp(name, "posix") == 0)
            g->kind[md] = RKG_POSIX;
    }
    free(text);
    g->active = 1;
}

static rdmx_status_t refuse(rdmx_rkey_pins_t *pins, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static rdmx_status_t refuse(rdmx_rkey_pins_t *pins, const char *fmt, ...)
{
    char why[200];
    va_list ap;

    rdmx__rkey_guard_done(pins);
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return rdmx__error(RDMX_ERR_BAD_DESCRIPTOR, "%s", why);
}

/* Is the POSIX segment of @id there to open, as UCX would open it? 1 when
 * it is, or when this cannot tell (a name this does not know). */
static int posix_there(uint64_t id)
{
    char path[96];
    int fd;

    if ((id & POSIX_PROCFS) && !(id & POSIX_PID_NS)) {
        uint64_t mmid = id & POSIX_ID_MASK;
        snprintf(path, sizeof(path), "/proc/%d/fd/%d",
                 (int)(mmid & ((1ull << POSIX_PID_BITS) - 1)),
                 (int)(mmid >> POSIX_PID_BITS));
    } else if (id & POSIX_SHM_OPEN) {
        snprintf(path, sizeof(path), "/dev/shm/ucx_shm_posix_%llx",
                 (unsigned long long)(id & POSIX_ID_MASK));
    } else {
        return 1;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno != ENOENT && errno != ESRCH;
}

rdmx_status_t rdmx__rkey_guard_check(const rdmx_rkey_guard_t *g,
                                     const void *key, size_t len,
                                     rdmx_rkey_pins_t *pins)
{
    const unsigned char *p = key, *end = p + len;
    uint64_t map;

    pins->n = 0;
    if (!g->active)
        return RDMX_OK;
    if (len < 9)
        return refuse(pins, "remote key of %zu bytes, too short", len);
    memcpy(&map, p, sizeof(map)); /* (UCX's own byte order) */
    p += 9;                       /* (the map and the memory type) */
    for (unsigned md = 0; md < RKG_MDS; md++) {
        size_t size;
        if (!(map & (1ull << md)))
            continue;
        if (p >= end)
            return refuse(pins, "remote key ends inside its part %u", md);
        size = *p++;
        if (size > (size_t)(end - p))
            return refuse(pins, "remote key's part %u runs past its end", md);
        if (g->kind[md] == RKG_SYSV && size == SYSV_PART) {
            uint32_t shmid;
            void *a;
            int id;
            memcpy(&shmid, p, sizeof(shmid));
            id = (int)shmid;
            /* (as UCX attaches it: what fails here would fail there) */
            a = shmat(id, NULL, 0);
            if (a == (void *)-1)
                return refuse(pins,
                              errno == EINVAL || errno == EIDRM
                                  ? "the lender's shared memory (System V "
                                    "segment %d) is gone"
                                  : "the lender's shared memory (System V "
                                    "segment %d) cannot be attached",
                              id);
            pins->addr[pins->n++] = a;
        } else if (g->kind[md] == RKG_POSIX && size >= POSIX_PART_MIN) {
            uint64_t id;
            memcpy(&id, p, sizeof(id));
            if (!posix_there(id))
                return refuse(pins,
                              "the lender's shared memory (POSIX segment "
                              "%llx) is gone",
                              (unsigned long long)id);
        }
        p += size;
    }
    return RDMX_OK;
}

void rdmx__rkey_guard_done(rdmx_rkey_pins_t *pins)
{
    for (unsigned i = 0; i < pins->n; i++)
        shmdt(pins->addr[i]);
    pins->n = 0;
}
