/*
 * rdmx-kvd: the rdmx key-value cache server.
 *
 * Parses its options into a server configuration, runs the KV server
 * (src/kv/server.h: the store over one registered region, the kv.* and
 * lambda.* handlers; docs/KV.md, docs/LAMBDA.md) until SIGINT or SIGTERM,
 * then stops it.
 */
#define _GNU_SOURCE
#include <rdmx/rdmx.h>

#include "kv/server.h"
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KVD_DEFAULT_LISTEN "127.0.0.1:11311"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: rdmx-kvd [options]\n"
        "  -l, --listen HOST:PORT     address (default " KVD_DEFAULT_LISTEN ")\n"
        "  -m, --memory SIZE          value memory, registered at start\n"
        "                             (default 64m; k/m/g suffixes)\n"
        "  -w, --workers N            server threads (default: one per CPU)\n"
        "  -c, --max-connections N    clients at once (default 1024); more\n"
        "                             get RDMX_ERR_BUSY at once. Each costs a\n"
        "                             file descriptor or two: see ulimit -n\n"
        "      --max-key BYTES        longest key (default 250, at most 65535)\n"
        "      --max-value SIZE       largest value (default 1m)\n"
        "      --inline-threshold SIZE values up to this size are answered\n"
        "                             inline; larger ones are RDMA-written\n"
        "                             into the caller's buffer (default 4k)\n"
        "      --eviction lru|none    full memory: evict least recently used\n"
        "                             (default) or refuse writes (NO_MEMORY)\n"
        "      --auth-secret-file F   require clients to prove this secret\n"
        "      --transport T          auto|shm|tcp|rdma (UCX) or ofi[:PROVIDER]\n"
        "                             (libfabric: ofi:tcp, ofi:shm, ...)\n"
        "                             (default: RDMX_TRANSPORT or auto)\n"
        "Lambdas (lambda.eval/call/native: sandboxed Lua 5.4 with kv.get/put/\n"
        "delete/exists over this store; see docs/LAMBDA.md):\n"
        "      --no-lambda            do not serve lambdas\n"
        "      --plugin-dir DIR       load the native plugins DIR/*.so at start\n"
        "                             (refused if DIR or a plugin is world-\n"
        "                             writable)\n"
        "      --lambda-max-instructions N  work units per call (default 10M)\n"
        "      --lambda-max-memory SIZE     Lua memory per call (default 64m)\n"
        "      --lambda-max-time MS   wall-clock limit per call besides the\n"
        "                             caller's deadline (default 1000; a call\n"
        "                             holds its server thread meanwhile)\n"
        "      --lambda-cache N       compiled functions kept (default 256)\n"
        "  -h, --help\n"
        "Stops cleanly on SIGTERM or SIGINT. Prints its address at start.\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"memory", required_argument, NULL, 'm'},
        {"workers", required_argument, NULL, 'w'},
        {"max-connections", required_argument, NULL, 'c'},
        {"max-key", required_argument, NULL, 'K'},
        {"max-value", required_argument, NULL, 'V'},
        {"inline-threshold", required_argument, NULL, 'I'},
        {"eviction", required_argument, NULL, 'E'},
        {"auth-secret-file", required_argument, NULL, 'A'},
        {"transport", required_argument, NULL, 'T'},
        {"no-lambda", no_argument, NULL, 'N'},
        {"plugin-dir", required_argument, NULL, 'P'},
        {"lambda-max-instructions", required_argument, NULL, 'i'},
        {"lambda-max-memory", required_argument, NULL, 'M'},
        {"lambda-max-time", required_argument, NULL, 't'},
        {"lambda-cache", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    rdmx_kv_server_config_t cfg = {
        .listen = KVD_DEFAULT_LISTEN,
        .memory = 64u << 20,
        .max_connections = 1024,
        .max_key = 250,
        .max_value = 1u << 20,
        .inline_threshold = 4096,
        .eviction = RDMX_KV_EVICT_LRU,
    };
    rdmx_lambda_params_t *lp = &cfg.lambda_params;
    const char *secret_file = NULL;
    int no_lambda = 0;
    char secret[4096];
    size_t secret_len = 0;
    char host[256], lam[64] = "off";
    uint16_t port;
    rdmx_kv_server_t *srv;
    rdmx_kv_server_info_t info;
    rdmx_kv_server_stats_t stats;
    sigset_t stop_signals;
    rdmx_status_t st;
    int c, sig;

    while ((c = getopt_long(argc, argv, "l:m:w:c:h", opts, NULL)) != -1) {
        switch (c) {
        case 'l': cfg.listen = optarg; break;
        case 'm':
            if (opt_size(optarg, &cfg.memory) || cfg.memory < (1u << 20)) {
                fprintf(stderr, "rdmx-kvd: --memory '%s': a size of at "
                                "least 1m\n", optarg);
                return 2;
            }
            break;
        case 'w': cfg.workers = (unsigned)atoi(optarg); break;
        case 'c': {
            char *end;
            unsigned long n = strtoul(optarg, &end, 10);
            if (*end != '\0' || n == 0 || n > 10000000 || optarg[0] == '-') {
                fprintf(stderr, "rdmx-kvd: --max-connections '%s': a number "
                                "of at least 1\n", optarg);
                return 2;
            }
            cfg.max_connections = (unsigned)n;
            break;
        }
        case 'K':
            if (opt_size(optarg, &cfg.max_key) || cfg.max_key == 0 ||
                cfg.max_key > 65535) {
                fprintf(stderr, "rdmx-kvd: --max-key '%s': 1..65535\n",
                        optarg);
                return 2;
            }
            break;
        case 'V':
            if (opt_size(optarg, &cfg.max_value) || cfg.max_value == 0) {
                fprintf(stderr, "rdmx-kvd: --max-value '%s': a size\n",
                        optarg);
                return 2;
            }
            break;
        case 'I':
            if (opt_size(optarg, &cfg.inline_threshold)) {
                fprintf(stderr, "rdmx-kvd: --inline-threshold '%s': a size\n",
                        optarg);
                return 2;
            }
            break;
        case 'E':
            if (strcmp(optarg, "lru") == 0) {
                cfg.eviction = RDMX_KV_EVICT_LRU;
            } else if (strcmp(optarg, "none") == 0) {
                cfg.eviction = RDMX_KV_EVICT_NONE;
            } else {
                fprintf(stderr, "rdmx-kvd: --eviction lru|none\n");
                return 2;
            }
            break;
        case 'A': secret_file = optarg; break;
        case 'T':
            cfg.context.field_mask |= RDMX_CONTEXT_PARAM_FIELD_TRANSPORT |
                                      RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME;
            cfg.context.transport_name = optarg;
            if (rdmx_transport_parse(optarg, &cfg.context.transport) !=
                RDMX_OK) {
                fprintf(stderr, "rdmx-kvd: --transport "
                                "auto|shm|tcp|rdma|ofi[:PROVIDER]\n");
                return 2;
            }
            break;
        case 'N': no_lambda = 1; break;
        case 'P':
            lp->field_mask |= RDMX_LAMBDA_PARAM_FIELD_PLUGIN_DIR;
            lp->plugin_dir = optarg;
            break;
        case 'i': {
            size_t v;
            if (opt_size(optarg, &v) || v < 1000) {
                fprintf(stderr, "rdmx-kvd: --lambda-max-instructions '%s': "
                                "a number of at least 1000\n", optarg);
                return 2;
            }
            lp->field_mask |= RDMX_LAMBDA_PARAM_FIELD_MAX_INSTRUCTIONS;
            lp->max_instructions = v;
            break;
        }
        case 'M':
            if (opt_size(optarg, &lp->max_memory) ||
                lp->max_memory < (256u << 10)) {
                fprintf(stderr, "rdmx-kvd: --lambda-max-memory '%s': a size "
                                "of at least 256k\n", optarg);
                return 2;
            }
            lp->field_mask |= RDMX_LAMBDA_PARAM_FIELD_MAX_MEMORY;
            break;
        case 't': {
            size_t v;
            if (opt_size(optarg, &v) || v > 3600000) {
                fprintf(stderr, "rdmx-kvd: --lambda-max-time '%s': "
                                "milliseconds, 0..3600000\n", optarg);
                return 2;
            }
            lp->field_mask |= RDMX_LAMBDA_PARAM_FIELD_MAX_TIME;
            /* (0 on the command line: only the caller's deadline) */
            lp->max_time_ms = v == 0 ? RDMX_TIMEOUT_INFINITE : (int)v;
            break;
        }
        case 'C': {
            size_t v;
            if (opt_size(optarg, &v) || v > 1000000) {
                fprintf(stderr, "rdmx-kvd: --lambda-cache '%s': 0..1000000\n",
                        optarg);
                return 2;
            }
            lp->field_mask |= RDMX_LAMBDA_PARAM_FIELD_CACHE_ENTRIES;
            lp->cache_entries = (unsigned)v;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (secret_file != NULL) {
        FILE *f = fopen(secret_file, "r");
        if (f == NULL) {
            fprintf(stderr, "rdmx-kvd: %s: %s\n", secret_file,
                    strerror(errno));
            return 2;
        }
        secret_len = fread(secret, 1, sizeof(secret), f);
        fclose(f);
        while (secret_len > 0 && (secret[secret_len - 1] == '\n' ||
                                  secret[secret_len - 1] == '\r'))
            secret_len--;
        if (secret_len == 0) {
            fprintf(stderr, "rdmx-kvd: %s: empty secret\n", secret_file);
            return 2;
        }
        cfg.auth_secret = secret;
        cfg.auth_secret_len = secret_len;
    }
    if (rdmx_addr_parse(cfg.listen, host, sizeof(host), &port) == RDMX_OK &&
        rdmx_host_is_loopback(host) && getenv("UCX_NET_DEVICES") == NULL) {
        cfg.context.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
        cfg.context.net_devices = "lo";
    }
    cfg.context.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NAME;
    cfg.context.name = "rdmx-kvd";
    cfg.lambda = !no_lambda;

    /* SIGINT and SIGTERM wait for sigwait below: blocked here, before any
     * thread starts, so that every thread inherits the mask. */
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    if ((st = rdmx__kv_server_create(&cfg, &srv)) != RDMX_OK ||
        (st = rdmx__kv_server_start(srv)) != RDMX_OK) {
        fprintf(stderr, "rdmx-kvd: %s: %s\n", rdmx_strerror(st),
                rdmx_error_detail());
        return 1;
    }
    rdmx__kv_server_info(srv, &info);
    rdmx__kv_server_stats(srv, &stats);
    if (stats.lambda_on)
        snprintf(lam, sizeof(lam), "on, %llu natives",
                 (unsigned long long)stats.lambda.natives);
    rdmx_addr_parse(cfg.listen, host, sizeof(host), &port);
    {
        /* The backend: the spec when it names libfabric's, else UCX. */
        const char *spec = cfg.context.transport_name;
        if (spec == NULL && !(cfg.context.field_mask &
                              RDMX_CONTEXT_PARAM_FIELD_TRANSPORT))
            spec = getenv("RDMX_TRANSPORT");
        printf("rdmx-kvd: listening on %s:%u (memory %zu MiB, %u workers, "
               "transport %s, backend %s, lambda %s)\n",
               host, info.port, cfg.memory >> 20, info.workers,
               rdmx_transport_name(info.transport),
               spec != NULL && !strncmp(spec, "ofi", 3) ? spec : "ucx", lam);
    }
    fflush(stdout);

    while (sigwait(&stop_signals, &sig) != 0)
        ;
    printf("rdmx-kvd: shutting down\n");
    fflush(stdout);
    rdmx__kv_server_destroy(srv);
    return 0;
}
