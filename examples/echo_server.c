/*
 * echo_server — a small rdmx RPC server: "echo" returns its request,
 * "upper" answers with the request in upper case, and two bulk handlers
 * move data zero-copy through the caller's memory descriptor:
 * "checksum" pulls the caller's buffer (RDMA read) and answers its 64-bit
 * FNV-1a hash; "fill" pushes (RDMA write) bytes i*7 into it. Both answer
 * from the completion callback of the transfer (deferred answers).
 *
 *   echo_server [HOST:PORT] [WORKERS]     (default 127.0.0.1:13370, 1)
 *
 * Stops on SIGINT/SIGTERM.
 */
#include <rdmx/rdmx.h>

#include <ctype.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static rdmx_context_t *ctx;

typedef struct {
    rdmx_rpc_req_t *req;
    rdmx_mr_t *mr;
    unsigned char *buf;
    size_t len;
    int fill;
} bulk_t;

static void bulk_done(rdmx_status_t st, size_t length, void *arg)
{
    bulk_t *b = arg;
    uint64_t h = 0xcbf29ce484222325ull;

    (void)length;
    if (st != RDMX_OK) {
        rdmx_rpc_respond_error(b->req, st, "transfer failed: %s",
                               rdmx_strerror(st));
    } else if (b->fill) {
        rdmx_rpc_respond(b->req, NULL, 0);
    } else {
        for (size_t i = 0; i < b->len; i++)
            h = (h ^ b->buf[i]) * 0x100000001b3ull;
        rdmx_rpc_respond(b->req, &h, sizeof(h));
    }
    rdmx_mem_deregister(b->mr);
    free(b);
}

/* checksum / fill: one descriptor, moved in one RDMA operation. */
static void bulk(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_rmem_t *rmem;
    rdmx_op_params_t op;
    rdmx_status_t st;
    bulk_t *b;

    if (rdmx_rpc_req_bulk_count(req) != 1) {
        rdmx_rpc_respond_error(req, RDMX_ERR_INVALID, "expected one buffer");
        return;
    }
    if ((st = rdmx_rpc_req_bulk(req, 0, &rmem)) != RDMX_OK) {
        rdmx_rpc_respond_error(req, st, "%s", rdmx_error_detail());
        return;
    }
    b = calloc(1, sizeof(*b));
    b->req = req;
    b->fill = arg != NULL;
    b->len = rdmx_rmem_length(rmem);
    /* registered (and zeroed) memory of our own for the transfer */
    if ((st = rdmx_mem_alloc(ctx, b->len ? b->len : 1, RDMX_ACCESS_READ,
                             &b->mr)) != RDMX_OK) {
        rdmx_rpc_respond_error(req, st, "%s", rdmx_error_detail());
        free(b);
        return;
    }
    b->buf = rdmx_mr_addr(b->mr);
    if (b->fill)
        for (size_t i = 0; i < b->len; i++)
            b->buf[i] = (unsigned char)(i * 7);
    /* bulk_done(b) runs when the transfer completes */
    op = (rdmx_op_params_t){.field_mask =
                                RDMX_OP_PARAM_FIELD_CB | RDMX_OP_PARAM_FIELD_MR,
                            .cb = bulk_done,
                            .arg = b,
                            .mr = b->mr};
    st = b->fill
             ? rdmx_put_nb(rdmx_rpc_req_ep(req), rmem, 0, b->buf, b->len, &op)
             : rdmx_get_nb(rdmx_rpc_req_ep(req), rmem, 0, b->buf, b->len, &op);
    if (st != RDMX_INPROGRESS)
        bulk_done(st, b->len, b);
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void echo(rdmx_rpc_req_t *req, void *arg)
{
    size_t len;
    const void *data = rdmx_rpc_req_data(req, &len);

    (void)arg;
    rdmx_rpc_respond(req, data, len);
}

static void upper(rdmx_rpc_req_t *req, void *arg)
{
    size_t len;
    const char *data = rdmx_rpc_req_data(req, &len);
    char *out = malloc(len ? len : 1);

    (void)arg;
    if (out == NULL) {
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY, "out of memory");
        return;
    }
    for (size_t i = 0; i < len; i++)
        out[i] = (char)toupper((unsigned char)data[i]);
    rdmx_rpc_respond(req, out, len);
    free(out);
}

int main(int argc, char **argv)
{
    const char *address = argc > 1 ? argv[1] : "127.0.0.1:13370";
    rdmx_rpc_server_params_t sp = {
        .field_mask = RDMX_RPC_SERVER_PARAM_FIELD_ADDRESS |
                      RDMX_RPC_SERVER_PARAM_FIELD_WORKERS,
        .address = address,
        .workers = argc > 2 ? (unsigned)atoi(argv[2]) : 1,
    };
    rdmx_rpc_server_t *srv;
    rdmx_status_t st;

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if ((st = rdmx_context_create(NULL, &ctx)) != RDMX_OK ||
        (st = rdmx_rpc_server_create(ctx, &sp, &srv)) != RDMX_OK ||
        (st = rdmx_rpc_server_register(srv, "echo", echo, NULL,
                                       RDMX_RPC_IDEMPOTENT)) != RDMX_OK ||
        (st = rdmx_rpc_server_register(srv, "upper", upper, NULL, 0)) !=
            RDMX_OK ||
        (st = rdmx_rpc_server_register(srv, "checksum", bulk, NULL, 0)) !=
            RDMX_OK ||
        (st = rdmx_rpc_server_register(srv, "fill", bulk, (void *)1, 0)) !=
            RDMX_OK ||
        (st = rdmx_rpc_server_start(srv)) != RDMX_OK) {
        fprintf(stderr, "echo_server: %s: %s\n", rdmx_strerror(st),
                rdmx_error_detail());
        return 1;
    }
    printf("echo_server: listening on port %u\n", rdmx_rpc_server_port(srv));
    fflush(stdout);
    while (!stop)
        pause();
    rdmx_rpc_server_destroy(srv);
    rdmx_context_destroy(ctx);
    return 0;
}
