/*
 * bulk_client — zero-copy bulk arguments: upload and download SIZE bytes
 * (default 1 GiB) through an echo_server's "checksum" and "fill" handlers.
 * The call carries a descriptor of the client's registered buffer; the
 * server moves the data with one RDMA read (upload) or write (download)
 * and answers when it is done.
 *
 *   bulk_client [HOST:PORT] [SIZE_MIB]    (default 127.0.0.1:13370, 1024)
 */
#include <rdmx/rdmx.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *address = argc > 1 ? argv[1] : "127.0.0.1:13370";
    size_t size = (argc > 2 ? strtoull(argv[2], NULL, 10) : 1024) << 20;
    /* The server's handler checksums or fills the whole buffer on its
     * worker thread (seconds for 1 GiB): give calls time, and do not take
     * the silence meanwhile for a dead server. */
    rdmx_channel_params_t cp = {.field_mask =
                                    RDMX_CHANNEL_PARAM_FIELD_TIMEOUT |
                                    RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT |
                                    RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT,
                                .timeout_ms = 120000,
                                .heartbeat_ms = 1000,
                                .heartbeat_timeout_ms = 60000};
    rdmx_context_t *ctx;
    rdmx_worker_t *w;
    rdmx_channel_t *ch;
    rdmx_mr_t *mr;
    unsigned char *buf;
    uint64_t want = 0xcbf29ce484222325ull, got = 0;
    size_t len;
    rdmx_status_t st;
    double t0;

    if ((st = rdmx_context_create(NULL, &ctx)) != RDMX_OK ||
        (st = rdmx_worker_create(ctx, NULL, &w)) != RDMX_OK ||
        (st = rdmx_mem_alloc(ctx, size, RDMX_ACCESS_READ | RDMX_ACCESS_WRITE,
                             &mr)) != RDMX_OK ||
        (st = rdmx_channel_create(w, address, &cp, &ch)) != RDMX_OK ||
        (st = rdmx_channel_wait_ready(ch, 5000)) != RDMX_OK) {
        fprintf(stderr, "bulk_client: %s: %s\n", rdmx_strerror(st),
                rdmx_error_detail());
        return 2;
    }
    buf = rdmx_mr_addr(mr);
    for (size_t i = 0; i < size; i++)
        buf[i] = (unsigned char)(i * 13 + 1);
    for (size_t i = 0; i < size; i++)
        want = (want ^ buf[i]) * 0x100000001b3ull;

    /* upload: the server reads our buffer (READ right only) */
    rdmx_rpc_bulk_t up = {mr, 0, size, RDMX_ACCESS_READ};
    rdmx_call_params_t p = {
        .field_mask = RDMX_CALL_PARAM_FIELD_BULK, .bulk = &up, .nbulk = 1};
    t0 = now();
    st = rdmx_call(ch, "checksum", NULL, 0, &got, sizeof(got), &p, &len);
    if (st != RDMX_OK || len != sizeof(got) || got != want) {
        fprintf(stderr, "upload: %s %s (checksum %llx, want %llx)\n",
                rdmx_strerror(st), rdmx_error_detail(),
                (unsigned long long)got, (unsigned long long)want);
        return 1;
    }
    printf("upload   %zu MiB in %.3f s, checksum matches\n", size >> 20,
           now() - t0);

    /* download: the server writes our buffer (WRITE right only) */
    rdmx_rpc_bulk_t down = {mr, 0, size, RDMX_ACCESS_WRITE};
    p.bulk = &down;
    memset(buf, 0, size);
    t0 = now();
    st = rdmx_call(ch, "fill", NULL, 0, NULL, 0, &p, &len);
    if (st != RDMX_OK) {
        fprintf(stderr, "download: %s %s\n", rdmx_strerror(st),
                rdmx_error_detail());
        return 1;
    }
    for (size_t i = 0; i < size; i++) {
        if (buf[i] != (unsigned char)(i * 7)) {
            fprintf(stderr, "download: byte %zu is %u, want %u\n", i, buf[i],
                    (unsigned char)(i * 7));
            return 1;
        }
    }
    printf("download %zu MiB in %.3f s, every byte checked\n", size >> 20,
           now() - t0);
    rdmx_channel_destroy(ch);
    rdmx_mem_deregister(mr);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    return 0;
}
