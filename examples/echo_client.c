/*
 * echo_client — calls "echo" and "upper" on an echo_server and checks the
 * answers; then prints the server's "rdmx.stats".
 *
 *   echo_client [HOST:PORT] [MESSAGE]     (default 127.0.0.1:13370)
 *
 * Exit 0 when every answer was right.
 */
#include <rdmx/rdmx.h>

#include <ctype.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *address = argc > 1 ? argv[1] : "127.0.0.1:13370";
    const char *msg = argc > 2 ? argv[2] : "hello, rdmx";
    size_t len = strlen(msg), got = 0;
    char resp[65536], want[4096];
    rdmx_context_t *ctx;
    rdmx_worker_t *w;
    rdmx_channel_t *ch;
    rdmx_status_t st;
    int ok = 1;

    if (len >= sizeof(want)) {
        fprintf(stderr, "echo_client: message too long\n");
        return 2;
    }
    if ((st = rdmx_context_create(NULL, &ctx)) != RDMX_OK ||
        (st = rdmx_worker_create(ctx, NULL, &w)) != RDMX_OK ||
        (st = rdmx_channel_create(w, address, NULL, &ch)) != RDMX_OK ||
        (st = rdmx_channel_wait_ready(ch, 5000)) != RDMX_OK) {
        fprintf(stderr, "echo_client: %s: %s\n", rdmx_strerror(st),
                rdmx_error_detail());
        return 2;
    }
    st = rdmx_call(ch, "echo", msg, len, resp, sizeof(resp), NULL, &got);
    if (st != RDMX_OK || got != len || memcmp(resp, msg, len) != 0) {
        fprintf(stderr, "echo: %s: %s\n", rdmx_strerror(st),
                rdmx_error_detail());
        ok = 0;
    } else {
        printf("echo:  %.*s\n", (int)got, resp);
    }
    for (size_t i = 0; i < len; i++)
        want[i] = (char)toupper((unsigned char)msg[i]);
    st = rdmx_call(ch, "upper", msg, len, resp, sizeof(resp), NULL, &got);
    if (st != RDMX_OK || got != len || memcmp(resp, want, len) != 0) {
        fprintf(stderr, "upper: %s: %s\n", rdmx_strerror(st),
                rdmx_error_detail());
        ok = 0;
    } else {
        printf("upper: %.*s\n", (int)got, resp);
    }
    st = rdmx_call(ch, "no-such-handler", msg, len, resp, sizeof(resp), NULL,
                   &got);
    if (st != RDMX_ERR_NOT_FOUND) {
        fprintf(stderr, "unknown handler: got %s\n", rdmx_status_name(st));
        ok = 0;
    } else {
        printf("no-such-handler: %s (%s)\n", rdmx_status_name(st),
               rdmx_error_detail());
    }
    st = rdmx_call(ch, "rdmx.stats", NULL, 0, resp, sizeof(resp) - 1, NULL,
                   &got);
    if (st != RDMX_OK) {
        fprintf(stderr, "rdmx.stats: %s: %s\n", rdmx_strerror(st),
                rdmx_error_detail());
        ok = 0;
    } else {
        resp[got] = '\0';
        printf("--- rdmx.stats ---\n%s", resp);
    }
    rdmx_channel_destroy(ch);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    printf("%s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
