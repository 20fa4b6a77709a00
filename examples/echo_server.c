/*
 * echo_server — the smallest rdmx RPC server: "echo" returns its request,
 * "upper" deferred-answers with the request in upper case.
 *
 *   echo_server [HOST:PORT] [WORKERS]     (default 127.0.0.1:13370, 1)
 *
 * Stops on SIGINT/SIGTERM.
 */
#include <rdmx/rdmx.h>

#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

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
        .field_mask = RDMX_RPC_SERVER_FIELD_ADDRESS |
                      RDMX_RPC_SERVER_FIELD_WORKERS,
        .address = address,
        .workers = argc > 2 ? (unsigned)atoi(argv[2]) : 1,
    };
    rdmx_context_t *ctx;
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
