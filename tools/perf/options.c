/*
 * rdmx-perf: the command line — the tests, their defaults, and every
 * option (rdmx-perf --help). Numbers, sizes and durations go through the
 * tools' shared parsers (tools/common/options.h).
 */
#include "perf.h"

#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>

const perf_test_t g_tests[TEST_COUNT] = {
    [TEST_SEND_LAT] = {"send_lat", false, true, false, 0, 0},
    [TEST_SEND_BW] = {"send_bw", true, false, false, 0, 0},
    [TEST_PUT_LAT] = {"put_lat", false, true, false, 0, 0},
    [TEST_PUT_BW] = {"put_bw", true, false, false, 0, 0},
    [TEST_GET_LAT] = {"get_lat", false, false, false, 0, 0},
    [TEST_GET_BW] = {"get_bw", true, false, false, 0, 0},
    [TEST_ATOMIC_LAT] = {"atomic_lat", false, false, false, 0, 0},
    [TEST_RPC_LAT] = {"rpc_lat", false, false, true, 64, 1},
    [TEST_RPC_RATE] = {"rpc_rate", true, false, true, 64, 32},
    [TEST_RPC_BULK] = {"rpc_bulk", false, false, true, 64u << 20, 1},
    [TEST_RPC_BULK_PUSH] = {"rpc_bulk_push", false, false, true, 64u << 20, 1},
    [TEST_LAMBDA_LAT] = {"lambda_lat", false, false, true, 0, 1},
};

/* --help, or after a bad command line. */
static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: rdmx-perf --listen [HOST:]PORT [--once] [--transport T]\n"
        "                 [--server-workers N] [--poll busy|adaptive|sleep] "
        "[--rpc-only]\n"
        "                 [--metrics-listen HOST:PORT]\n"
        "       rdmx-perf HOST:PORT -t TEST[,TEST...|all|rpc] [-s "
        "SIZE[,SIZE...] "
        "| -a]\n"
        "                 [-n ITERS] [-w WARMUP] [-W WINDOW] "
        "[--flush window|end]\n"
        "                 [--batch] [--no-rings] [-T THREADS] "
        "[--server-workers N] [--poll "
        "MODE] "
        "[--rpc-only]\n"
        "                 [--transport T] [--json] [--timeout S] "
        "[--function FILE]\n"
        "\n"
        "tests: send_lat send_bw put_lat put_bw get_lat get_bw "
        "atomic_lat (all: these)\n"
        "       rpc_lat rpc_rate rpc_bulk rpc_bulk_push (rpc: these)\n"
        "       lambda_lat (an empty Lua function: by id, with its source, "
        "without\n"
        "               the server's cache, each against a plain RPC)\n"
        "  -s SIZE      message size in bytes; k/m/g suffixes are "
        "binary (default 8;\n"
        "               rpc_lat/rpc_rate 64, rpc_bulk* 64m; lambda_lat: "
        "input, 0)\n"
        "  -a           sweep sizes 8 B .. 8 MiB in powers of 4\n"
        "  -n ITERS     measured iterations, per thread for rpc_* (default "
        "%d, fewer\n"
        "               above 64 KiB; rpc_rate 10x)\n"
        "  -w WARMUP    warm-up iterations (default ITERS/10, at most %d; "
        "rpc_* %d)\n"
        "  -W WINDOW    operations in flight in *_bw tests (default %d), "
        "calls in\n"
        "               flight per thread in rpc_rate (32) and rpc_bulk* "
        "(1)\n"
        "  --flush M    put_bw/get_bw: flush after each window (window, "
        "default)\n"
        "               or only at the end, like ucx_perftest (end)\n"
        "  --batch      rpc_rate: each call of a burst but its last with "
        "RDMX_RPC_MORE\n"
        "               (the burst leaves as one message)\n"
        "  --no-rings   rpc_*: every call as messages, none written into the "
        "server's\n"
        "               request ring over shared memory (docs/RPC_RINGS.md)\n"
        "  -T THREADS   rpc_*: client threads, each with its own worker and "
        "channel (1)\n"
        "  --server-workers N  RPC server worker threads (server's default, "
        "else 1)\n"
        "  --poll MODE  RPC server polling: busy (default), adaptive, sleep\n"
        "  --function FILE  lambda_lat: call this Lua function instead of "
        "the empty\n"
        "               one (\"return\"; its output must be at most 64 KiB)\n"
        "  --rpc-only   server: run only an RPC server on PORT (until "
        "SIGINT/SIGTERM;\n"
        "               --once: until it had no client for 2 s); client: "
        "connect the\n"
        "               channels straight to it (several client processes)\n"
        "  --metrics-listen HOST:PORT  --rpc-only server: serve GET /metrics\n"
        "               and /health over HTTP (docs/OPERATIONS.md)\n"
        "  --transport  auto|shm|tcp|rdma, or ofi[:PROVIDER] for libfabric\n"
        "               (default auto, or "
        "RDMX_TRANSPORT)\n"
        "  --json       one JSON object per result line\n"
        "  --once       server: exit after the first client\n"
        "  --timeout S  give up when a test takes longer (default %d s, "
        "0: never)\n"
        "Loopback addresses use UCX_NET_DEVICES=lo unless it is set.\n",
        DEFAULT_ITERS, DEFAULT_WARMUP, DEFAULT_WARMUP * 10, DEFAULT_WINDOW,
        DEFAULT_TIMEOUT_S);
}

/* "rdmx-perf: bad OPT 'ARG': why" after an opt_* parser failed; -1. */
static int bad(const char *opt, const char *arg)
{
    fprintf(stderr, "rdmx-perf: bad %s '%s': %s\n", opt, arg, opt_error());
    return -1;
}

/* -t TEST[,TEST...|all|rpc] into o->tests. */
static int parse_tests(const char *arg, opts_t *o)
{
    char buf[256], *save = NULL;

    if (strlen(arg) >= sizeof(buf)) {
        fprintf(stderr, "rdmx-perf: -t: list too long\n");
        return -1;
    }
    snprintf(buf, sizeof(buf), "%s", arg);
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        bool found = false;

        if (strcmp(tok, "all") == 0 || strcmp(tok, "rpc") == 0) {
            for (int i = 0; i < TEST_COUNT; i++) {
                if (g_tests[i].rpc == (tok[0] == 'r') && i != TEST_LAMBDA_LAT) {
                    o->tests[i] = true;
                }
            }
            continue;
        }
        for (int i = 0; i < TEST_COUNT; i++) {
            if (strcmp(tok, g_tests[i].name) == 0) {
                o->tests[i] = found = true;
            }
        }
        if (!found) {
            fprintf(stderr, "rdmx-perf: unknown test '%s'\n", tok);
            return -1;
        }
    }
    return 0;
}

/* -s SIZE[,SIZE...]: 1 byte .. SIZE_MAX / 2 each, at most MAX_SIZES. */
static int parse_sizes(const char *arg, opts_t *o)
{
    char buf[512], *save = NULL;

    if (strlen(arg) >= sizeof(buf)) {
        fprintf(stderr, "rdmx-perf: -s: list too long\n");
        return -1;
    }
    snprintf(buf, sizeof(buf), "%s", arg);
    o->nsizes = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        size_t v;

        if (o->nsizes == MAX_SIZES) {
            fprintf(stderr, "rdmx-perf: bad size '%s': more than %d sizes\n",
                    tok, MAX_SIZES);
            return -1;
        }
        if (opt_size(tok, &v) < 0) {
            return bad("size", tok);
        }
        if (v == 0 || v > SIZE_MAX / 2) {
            fprintf(stderr, "rdmx-perf: bad size '%s': %s\n", tok,
                    v == 0 ? "must be at least 1 byte" : "too large");
            return -1;
        }
        o->sizes[o->nsizes++] = v;
    }
    return o->nsizes ? 0 : -1;
}

enum {
    OPT_LISTEN = 256,
    OPT_TRANSPORT,
    OPT_JSON,
    OPT_ONCE,
    OPT_TIMEOUT,
    OPT_FLUSH,
    OPT_BATCH,
    OPT_NO_RINGS,
    OPT_SERVER_WORKERS,
    OPT_POLL,
    OPT_RPC_ONLY,
    OPT_FUNCTION,
    OPT_METRICS_LISTEN,
};

/* Option @p c of getopt_long() with its argument @p arg (but -a and -h,
 * which parse_args handles): 0, or -1 after a message. */
static int parse_option(int c, const char *arg, opts_t *o)
{
    uint64_t v;

    switch (c) {
    case 't':
        return parse_tests(arg, o);
    case 's':
        o->sizes_set = true;
        return parse_sizes(arg, o);
    case 'T':
        if (opt_uint(arg, 1, RPC_MAX_THREADS, &v) < 0) {
            return bad("-T", arg);
        }
        o->threads = (unsigned)v;
        return 0;
    case OPT_SERVER_WORKERS:
        if (opt_uint(arg, 1, RPC_MAX_WORKERS, &v) < 0) {
            return bad("--server-workers", arg);
        }
        o->server_workers = (unsigned)v;
        return 0;
    case OPT_POLL:
        if (strcmp(arg, "busy") == 0) {
            o->poll = RDMX_RPC_POLL_BUSY;
        } else if (strcmp(arg, "adaptive") == 0) {
            o->poll = RDMX_RPC_POLL_ADAPTIVE;
        } else if (strcmp(arg, "sleep") == 0) {
            o->poll = RDMX_RPC_POLL_SLEEP;
        } else {
            fprintf(stderr, "rdmx-perf: bad --poll '%s'\n", arg);
            return -1;
        }
        return 0;
    case OPT_FUNCTION:
        o->function = arg;
        return 0;
    case OPT_RPC_ONLY:
        o->rpc_only = true;
        return 0;
    case OPT_METRICS_LISTEN:
        o->metrics_listen = arg;
        return 0;
    case 'n':
        return opt_uint(arg, 1, UINT64_MAX, &o->iters) < 0 ? bad("-n", arg) : 0;
    case 'w':
        return opt_uint(arg, 0, UINT64_MAX, &o->warmup) < 0 ? bad("-w", arg)
                                                            : 0;
    case 'W':
        if (opt_uint(arg, 1, 65536, &o->window) < 0) {
            return bad("-W", arg);
        }
        o->window_set = true;
        return 0;
    case OPT_LISTEN:
        o->listen = arg;
        return 0;
    case OPT_TRANSPORT:
        if (rdmx_transport_parse(arg, &o->transport) != RDMX_OK) {
            fprintf(stderr, "rdmx-perf: bad --transport '%s'\n", arg);
            return -1;
        }
        o->transport_set = true;
        o->transport_name = arg;
        return 0;
    case OPT_JSON:
        o->json = true;
        return 0;
    case OPT_FLUSH:
        if (strcmp(arg, "window") != 0 && strcmp(arg, "end") != 0) {
            fprintf(stderr, "rdmx-perf: bad --flush '%s'\n", arg);
            return -1;
        }
        o->flush_windows = strcmp(arg, "window") == 0;
        return 0;
    case OPT_ONCE:
        o->once = true;
        return 0;
    case OPT_BATCH:
        o->batch = true;
        return 0;
    case OPT_NO_RINGS:
        o->no_rings = true;
        return 0;
    case OPT_TIMEOUT: /* whole seconds for alarm(), rounded up */
        if (opt_duration(arg, OPT_S, &v) < 0) {
            return bad("--timeout", arg);
        }
        if (v > 86400 * OPT_S) {
            fprintf(stderr, "rdmx-perf: bad --timeout '%s': at most 86400 s\n",
                    arg);
            return -1;
        }
        o->timeout_s = (unsigned)((v + OPT_S - 1) / OPT_S);
        return 0;
    default:
        usage(stderr);
        return -1;
    }
}

/* --function FILE: its source into o->function_src (at most 1 MiB). */
static int load_function(opts_t *o)
{
    FILE *f = fopen(o->function, "rb");
    size_t cap = 1u << 20;

    o->function_src = malloc(cap);
    if (f == NULL || o->function_src == NULL) {
        fprintf(stderr, "rdmx-perf: --function %s: %s\n", o->function,
                strerror(errno));
        if (f != NULL) {
            fclose(f);
        }
        return -1;
    }
    o->function_len = fread(o->function_src, 1, cap, f);
    fclose(f);
    if (o->function_len == cap) {
        fprintf(stderr, "rdmx-perf: --function %s: over 1 MiB\n", o->function);
        return -1;
    }
    return 0;
}

/* The server's address, or --listen's (a bare port means all interfaces),
 * into o->listen and o->host. */
static int parse_address(opts_t *o)
{
    const char *addr;
    uint16_t port;

    if (o->listen != NULL && strchr(o->listen, ':') == NULL) {
        if (opt_port(o->listen, &port) < 0) {
            return bad("--listen", o->listen);
        }
        snprintf(o->listen_buf, sizeof(o->listen_buf), "0.0.0.0:%s", o->listen);
        o->listen = o->listen_buf;
    }
    addr = o->listen ? o->listen : o->address;
    if (opt_address(addr, o->host, sizeof(o->host), &port) < 0) {
        return bad("address", addr);
    }
    return 0;
}

int perf_parse_args(int argc, char **argv, opts_t *o)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"transport", required_argument, NULL, OPT_TRANSPORT},
        {"json", no_argument, NULL, OPT_JSON},
        {"once", no_argument, NULL, OPT_ONCE},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"flush", required_argument, NULL, OPT_FLUSH},
        {"batch", no_argument, NULL, OPT_BATCH},
        {"no-rings", no_argument, NULL, OPT_NO_RINGS},
        {"server-workers", required_argument, NULL, OPT_SERVER_WORKERS},
        {"poll", required_argument, NULL, OPT_POLL},
        {"rpc-only", no_argument, NULL, OPT_RPC_ONLY},
        {"function", required_argument, NULL, OPT_FUNCTION},
        {"metrics-listen", required_argument, NULL, OPT_METRICS_LISTEN},
        {"threads", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool sweep = false, have_tests = false;
    int c;

    memset(o, 0, sizeof(*o));
    o->sizes[0] = 8;
    o->nsizes = 1;
    o->warmup = UINT64_MAX;
    o->window = DEFAULT_WINDOW;
    o->timeout_s = DEFAULT_TIMEOUT_S;
    o->flush_windows = true;
    o->threads = 1;
    o->poll = -1;
    while ((c = getopt_long(argc, argv, "t:s:an:w:W:T:h", longopts, NULL)) !=
           -1) {
        if (c == 'h') {
            usage(stdout);
            exit(0);
        }
        if (c == 'a') {
            sweep = true;
            o->sizes_set = true;
            continue;
        }
        if (parse_option(c, optarg, o) < 0) {
            return -1;
        }
        have_tests |= c == 't';
    }
    if (sweep) {
        o->nsizes = 0;
        for (size_t s = 8; s <= 8u << 20; s *= 4) {
            o->sizes[o->nsizes++] = s;
        }
    }
    if (o->metrics_listen != NULL && (o->listen == NULL || !o->rpc_only)) {
        fprintf(stderr, "rdmx-perf: --metrics-listen: only with --listen "
                        "and --rpc-only\n");
        return -1;
    }
    if (o->listen != NULL) {
        if (optind != argc) {
            usage(stderr);
            return -1;
        }
        return parse_address(o);
    }
    if (optind + 1 != argc || !have_tests) {
        usage(stderr);
        return -1;
    }
    o->address = argv[optind];
    if (o->function != NULL && load_function(o) < 0) {
        return -1;
    }
    return parse_address(o);
}
