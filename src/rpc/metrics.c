/*
 * Per-handler metrics: counters and a log-linear latency histogram.
 */
#include "rpc/internal.h"

#include <string.h>

static unsigned bucket_of(uint64_t ns)
{
    unsigned e, idx;

    if (ns < RDMX_HIST_SUB)
        return (unsigned)ns;
    e = 63u - (unsigned)__builtin_clzll(ns); /* >= 4 */
    idx = (e - 3) * RDMX_HIST_SUB +
          (unsigned)((ns >> (e - 4)) & (RDMX_HIST_SUB - 1));
    return idx < RDMX_HIST_BUCKETS ? idx : RDMX_HIST_BUCKETS - 1;
}

/* The middle of bucket @idx, in ns. */
static uint64_t bucket_value(unsigned idx)
{
    unsigned e, sub;
    uint64_t lo, width;

    if (idx < RDMX_HIST_SUB)
        return idx;
    e = idx / RDMX_HIST_SUB + 3;
    sub = idx % RDMX_HIST_SUB;
    width = 1ull << (e - 4);
    lo = (1ull << e) + sub * width;
    return lo + width / 2;
}

void rdmx__hist_add(rdmx_hist_t *h, uint64_t ns)
{
    RDMX_COUNT_ADD(h->bucket[bucket_of(ns)], 1);
    RDMX_COUNT_ADD(h->count, 1);
    if (ns > h->max)
        __atomic_store_n(&h->max, ns, __ATOMIC_RELAXED);
}

void rdmx__hist_merge(rdmx_hist_t *into, const rdmx_hist_t *from)
{
    uint64_t max = RDMX_COUNT_READ(from->max);

    for (unsigned i = 0; i < RDMX_HIST_BUCKETS; i++)
        into->bucket[i] += RDMX_COUNT_READ(from->bucket[i]);
    into->count += RDMX_COUNT_READ(from->count);
    if (max > into->max)
        into->max = max;
}

uint64_t rdmx__hist_quantile(const rdmx_hist_t *h, double q)
{
    uint64_t rank, seen = 0, total = 0;

    /* Sum the buckets: racy readers may see count and buckets disagree. */
    for (unsigned i = 0; i < RDMX_HIST_BUCKETS; i++)
        total += h->bucket[i];
    if (total == 0)
        return 0;
    rank = (uint64_t)(q * (double)total);
    if (rank >= total)
        rank = total - 1;
    for (unsigned i = 0; i < RDMX_HIST_BUCKETS; i++) {
        seen += h->bucket[i];
        if (seen > rank) {
            uint64_t v = bucket_value(i);
            return v > h->max && h->max != 0 ? h->max : v;
        }
    }
    return h->max;
}

void rdmx__counters_merge(rdmx_rpc_counters_t *into,
                          const rdmx_rpc_counters_t *from)
{
    into->calls += RDMX_COUNT_READ(from->calls);
    into->errors += RDMX_COUNT_READ(from->errors);
    into->timeouts += RDMX_COUNT_READ(from->timeouts);
    into->bytes_in += RDMX_COUNT_READ(from->bytes_in);
    into->bytes_out += RDMX_COUNT_READ(from->bytes_out);
    rdmx__hist_merge(&into->hist, &from->hist);
}

void rdmx__counters_export(const rdmx_rpc_counters_t *c, const char *name,
                           rdmx_rpc_metrics_t *out)
{
    memset(out, 0, sizeof(*out));
    strncpy(out->name, name, sizeof(out->name) - 1);
    out->calls = c->calls;
    out->errors = c->errors;
    out->timeouts = c->timeouts;
    out->bytes_in = c->bytes_in;
    out->bytes_out = c->bytes_out;
    out->p50_ns = rdmx__hist_quantile(&c->hist, 0.50);
    out->p99_ns = rdmx__hist_quantile(&c->hist, 0.99);
    out->p999_ns = rdmx__hist_quantile(&c->hist, 0.999);
    out->max_ns = c->hist.max;
}
