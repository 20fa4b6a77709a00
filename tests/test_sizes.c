/*
 * sizes: prints the size of the public structs and handles worth knowing
 * (informative), and proves the ABI rule that makes the param structs
 * extensible: field_mask is the first member of every *_params_t, so new
 * fields can be appended and older callers keep working.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <stddef.h>
#include <stdio.h>

#define SHOW(type) printf("%-28s %4zu bytes\n", #type, sizeof(type))

#define FIRST_FIELD_MASK(type)                                                 \
    do {                                                                       \
        CHECKF(offsetof(type, field_mask) == 0,                                \
               #type ".field_mask is at offset %zu",                           \
               offsetof(type, field_mask));                                    \
        CHECK(sizeof(((type *)0)->field_mask) == sizeof(uint64_t));            \
    } while (0)

int main(void)
{
    th_init("sizes", 10);

    SHOW(rdmx_context_params_t);
    SHOW(rdmx_worker_params_t);
    SHOW(rdmx_ep_params_t);
    SHOW(rdmx_listener_params_t);
    SHOW(rdmx_worker_stats_t);
    SHOW(rdmx_notify_t);
    SHOW(rdmx_status_t);
    SHOW(rdmx_transport_t);
    SHOW(rdmx_cb_t);

    FIRST_FIELD_MASK(rdmx_context_params_t);
    FIRST_FIELD_MASK(rdmx_worker_params_t);
    FIRST_FIELD_MASK(rdmx_ep_params_t);
    FIRST_FIELD_MASK(rdmx_listener_params_t);

    /* The stats are plain uint64_t counters, nothing else. */
    CHECK(sizeof(rdmx_worker_stats_t) % sizeof(uint64_t) == 0);
    /* Status codes fit the int32 the test server sends them in. */
    CHECK(sizeof(rdmx_status_t) <= sizeof(int32_t));
    printf("version %s\n", rdmx_version());
    return 0;
}
