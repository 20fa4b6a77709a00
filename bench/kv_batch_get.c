/*
 * kv_batch_get — the C side of bench/python_kv.py: the same batches the
 * Python module's batch_get_into runs, through the C client.
 *
 *   kv_batch_get SERVERS COUNT SIZE ROUNDS           batches
 *   kv_batch_get SERVERS COUNT SIZE ROUNDS --single  single-key latency
 *
 * One context, worker (no progress thread) and KV client; one buffer of
 * COUNT x SIZE bytes from malloc, registered with rdmx_mem_register (as
 * the module registers a numpy array). First stores COUNT values of SIZE
 * bytes under "bench/COUNTxSIZE/I" (not timed), then runs ROUNDS + 1
 * batches (the first not counted) that read every key into its slot of the
 * buffer, each timed with clock_gettime(MONOTONIC) — or, with --single,
 * ROUNDS reads of key 0 into slot 0 with rdmx_kv_get, each timed. The
 * transport comes from RDMX_TRANSPORT, the network devices from
 * UCX_NET_DEVICES.
 *
 * A batch is batch_get() below: one rdmx_kv_batch_get over the buffer's
 * region — what the module does (python/batch.c, batch_get).
 *
 * Output, one line on stdout:
 *   kv_batch_get count=N size=S rounds=R median_us=.. min_us=.. gbps=..
 * (--single: the latency of one read in median_us and min_us; gbps from
 * the median). Exit status 0 if every read returned its value in full.
 *
 * Build (bench/python_kv.py does this, after make):
 *   cc -O2 -I include -I build/include -o kv_batch_get bench/kv_batch_get.c \
 *      -L build/lib -Wl,-rpath,build/lib -lrdmx
 */
#define _GNU_SOURCE
#include <rdmx/rdmx.h>

#include "kv_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY_MAX 64

typedef struct {
    char key[KEY_MAX];
    size_t klen;
    char *buf;
    rdmx_status_t status;
    size_t length;
} item_t;

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Read every item's key into its slot of the region: one
 * rdmx_kv_batch_get (the server writes every slot, one request per
 * server), as the module does (python/batch.c, batch_get). */
static void batch_get(rdmx_kv_t *kv, rdmx_worker_t *w, rdmx_mr_t *mr,
                      item_t *items, size_t n, size_t size)
{
    static rdmx_kv_batch_item_t *b;
    static size_t bn;
    rdmx_status_t st;

    (void)w;
    if (bn < n) {
        free(b);
        b = calloc(n, sizeof(*b));
        bn = b != NULL ? n : 0;
        if (b == NULL) {
            for (size_t i = 0; i < n; i++)
                items[i].status = RDMX_ERR_NO_MEMORY;
            return;
        }
    }
    for (size_t i = 0; i < n; i++) {
        b[i].key = items[i].key;
        b[i].klen = items[i].klen;
        b[i].mr = mr;
        b[i].buf = items[i].buf;
        b[i].size = size;
    }
    st = rdmx_kv_batch_get(kv, b, n, NULL);
    for (size_t i = 0; i < n; i++) {
        items[i].status = st == RDMX_OK ? b[i].status : st;
        items[i].length = b[i].length;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    kv_client_t c = {NULL, NULL, NULL};
    rdmx_mr_t *mr = NULL;
    item_t *items = NULL;
    double *t = NULL;
    char *buf = NULL;
    size_t count, size, rounds, bad = 0;
    int single, rc = 1;
    rdmx_status_t st;

    if (argc < 5) {
        fprintf(stderr, "usage: kv_batch_get SERVERS COUNT SIZE ROUNDS "
                        "[--single]\n");
        return 2;
    }
    count = strtoul(argv[2], NULL, 10);
    size = strtoul(argv[3], NULL, 10);
    rounds = strtoul(argv[4], NULL, 10);
    single = argc > 5 && strcmp(argv[5], "--single") == 0;
    if (count == 0 || size == 0 || rounds == 0) {
        fprintf(stderr, "kv_batch_get: COUNT, SIZE and ROUNDS must be > 0\n");
        return 2;
    }
    items = calloc(count, sizeof(*items));
    t = calloc(rounds + 1, sizeof(*t));
    if (items == NULL || t == NULL ||
        posix_memalign((void **)&buf, 4096, count * size) != 0) {
        fprintf(stderr, "kv_batch_get: out of memory\n");
        goto out;
    }
    memset(buf, 0x5a, count * size);
    if ((st = kv_client_open(&c, argv[1])) != RDMX_OK ||
        (st = rdmx_mem_register(c.ctx, buf, count * size,
                                RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, &mr)) !=
            RDMX_OK) {
        fprintf(stderr, "kv_batch_get: set-up: %s: %s\n",
                rdmx_status_name(st), rdmx_error_detail());
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        rdmx_kv_op_params_t p = {.field_mask = RDMX_KV_OP_PARAM_FIELD_MR,
                                 .mr = mr};
        items[i].klen = (size_t)snprintf(items[i].key, KEY_MAX,
                                         "bench/%zux%zu/%zu", count, size, i);
        items[i].buf = buf + i * size;
        if ((st = rdmx_kv_put(c.kv, items[i].key, items[i].klen, items[i].buf,
                              size, &p, NULL)) != RDMX_OK) {
            fprintf(stderr, "kv_batch_get: put: %s: %s\n",
                    rdmx_status_name(st), rdmx_error_detail());
            goto out;
        }
    }
    if (single) {
        rdmx_kv_op_params_t p = {.field_mask = RDMX_KV_OP_PARAM_FIELD_MR,
                                 .mr = mr};
        rdmx_kv_meta_t meta;
        for (size_t r = 0; r <= rounds; r++) {
            double t0 = now_us();
            st = rdmx_kv_get(c.kv, items[0].key, items[0].klen, buf, size, &p,
                             &meta);
            t[r] = now_us() - t0;
            bad += st != RDMX_OK || meta.length != size;
        }
    } else {
        for (size_t r = 0; r <= rounds; r++) {
            double t0 = now_us();
            batch_get(c.kv, c.w, mr, items, count, size);
            t[r] = now_us() - t0;
            for (size_t i = 0; i < count; i++)
                bad += items[i].status != RDMX_OK || items[i].length != size;
        }
    }
    /* the first round warms up */
    qsort(t + 1, rounds, sizeof(*t), cmp_double);
    {
        double med = t[1 + rounds / 2], min = t[1];
        double bytes = single ? (double)size : (double)count * size;
        printf("kv_batch_get count=%zu size=%zu rounds=%zu median_us=%.2f "
               "min_us=%.2f gbps=%.3f\n",
               single ? (size_t)1 : count, size, rounds, med, min,
               bytes / med / 1e3);
    }
    if (bad != 0)
        fprintf(stderr, "kv_batch_get: %zu reads failed or came short\n", bad);
    rc = bad != 0;
out:
    if (mr != NULL)
        rdmx_mem_deregister(mr);
    kv_client_close(&c);
    free(buf);
    free(t);
    free(items);
    return rc;
}
