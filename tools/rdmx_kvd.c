/*
 * rdmx-kvd: the rdmx key-value cache server.
 *
 * Parses its options into a server configuration, runs the KV server
 * (src/kv/server.h: the store over one registered region, the kv.* and
 * lambda.* handlers; docs/KV.md, docs/LAMBDA.md) until SIGINT or SIGTERM,
 * then stops it. Prints the slow-path warnings at start and, with
 * --metrics-listen, serves /metrics and /health (docs/OPERATIONS.md).
 */
#define _GNU_SOURCE
#include <rdmx/rdmx.h>

#include "kv/server.h"
#include "options.h"
#include "rpc/health.h"
#include "rpc/internal.h" /* rdmx__rpc_server_context */

#include <errno.h>
#include <getopt.h>
#ifdef RDMX_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KVD_DEFAULT_LISTEN "127.0.0.1:11311"
#define KVD_SHORT_OPTS     "l:m:w:c:h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: rdmx-kvd [options]\n"
        "  -l, --listen HOST:PORT     address (default " KVD_DEFAULT_LISTEN
        ")\n"
        "  -m, --memory SIZE          memory for items (keys, values and\n"
        "                             headers), registered at start\n"
        "                             (default 64m; k/m/g suffixes)\n"
        "  -w, --workers N            server threads (default: one per CPU)\n"
        "  -c, --max-connections N    clients at once (default 1024); more\n"
        "                             get RDMX_ERR_BUSY at once. Each costs a\n"
        "                             file descriptor or two: see ulimit -n\n"
        "      --max-key BYTES        longest key (default 250, at most "
        "65535)\n"
        "      --max-value SIZE       largest value (default 1m)\n"
        "      --inline-threshold SIZE values up to this size are answered\n"
        "                             inline; larger ones are RDMA-written\n"
        "                             into the caller's buffer (default 16k)\n"
        "      --no-mapped-gets       never tell a client where a value lies\n"
        "                             in the store (over shared memory it\n"
        "                             then copies the value itself)\n"
        "      --eviction lru|none    full memory: evict least recently used\n"
        "                             (default) or refuse writes (NO_MEMORY)\n"
        "      --auth-secret-file F   require clients to prove this secret\n"
        "      --transport T          auto|shm|tcp|rdma (UCX) or "
        "ofi[:PROVIDER]\n"
        "                             (libfabric: ofi:tcp, ofi:shm, ...)\n"
        "                             (default: RDMX_TRANSPORT or auto)\n"
        "      --metrics-listen HOST:PORT  serve GET /metrics (Prometheus)\n"
        "                             and GET /health (JSON) over HTTP\n"
        "Lambdas (lambda.eval/call/native: sandboxed Lua 5.4 with kv.get/put/\n"
        "delete/exists over this store; see docs/LAMBDA.md):\n"
        "      --no-lambda            do not serve lambdas\n"
        "      --plugin-dir DIR       load the native plugins DIR/*.so at "
        "start\n"
        "                             (refused if DIR or a plugin is world-\n"
        "                             writable)\n"
        "      --lambda-max-instructions N  work units per call (default 10M)\n"
        "      --lambda-max-memory SIZE     Lua memory per call (default 64m)\n"
        "      --lambda-max-time MS   wall-clock limit per call besides the\n"
        "                             caller's deadline (default 1000; a call\n"
        "                             holds its server thread meanwhile)\n"
        "      --lambda-cache N       compiled functions kept (default 256)\n"
        "      --lambda-reuse-states  accepted and ignored: every call begins\n"
        "                             from a pristine state, as fast as a\n"
        "                             reused one was (docs/LAMBDA.md)\n"
        "      --config FILE          options from FILE, one \"name = value\"\n"
        "                             a line (names without the dashes);\n"
        "                             the command line wins\n"
        "  -h, --help\n"
        "Stops cleanly on SIGTERM or SIGINT. Prints its address at start;\n"
        "under systemd (Type=notify) tells it when it is ready.\n");
}

/* What the options set: the server's configuration and the daemon's. */
typedef struct {
    rdmx_kv_server_config_t cfg;
    const char *secret_file;    /* --auth-secret-file */
    const char *metrics_listen; /* --metrics-listen */
    const char *config_file;    /* --config */
    int no_lambda;              /* --no-lambda */
} kvd_options_t;

static const struct option kvd_opts[] = {
    {"listen", required_argument, NULL, 'l'},
    {"memory", required_argument, NULL, 'm'},
    {"workers", required_argument, NULL, 'w'},
    {"max-connections", required_argument, NULL, 'c'},
    {"max-key", required_argument, NULL, 'K'},
    {"max-value", required_argument, NULL, 'V'},
    {"inline-threshold", required_argument, NULL, 'I'},
    {"no-mapped-gets", no_argument, NULL, 'G'},
    {"eviction", required_argument, NULL, 'E'},
    {"auth-secret-file", required_argument, NULL, 'A'},
    {"transport", required_argument, NULL, 'T'},
    {"no-lambda", no_argument, NULL, 'N'},
    {"plugin-dir", required_argument, NULL, 'P'},
    {"lambda-max-instructions", required_argument, NULL, 'i'},
    {"lambda-max-memory", required_argument, NULL, 'M'},
    {"lambda-max-time", required_argument, NULL, 't'},
    {"lambda-cache", required_argument, NULL, 'C'},
    {"lambda-reuse-states", no_argument, NULL, 'R'},
    {"metrics-listen", required_argument, NULL, 'H'},
    {"config", required_argument, NULL, 'F'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

/*
 * Apply option @c (its code in kvd_opts) with its argument @arg, which
 * must live as long as the process (argv, or the config file's copy).
 * Returns 0, or 2 after printing why @arg is refused.
 */
static int kvd_option(kvd_options_t *o, int c, const char *arg)
{
    rdmx_kv_server_config_t *cfg = &o->cfg;
    rdmx_lambda_params_t *lp = &cfg->lambda_params;

    /* getopt_long and the config file reader give every option that takes
     * a value a non-NULL @arg, which the analyzer cannot see. */
    /* NOLINTBEGIN(clang-analyzer-core.NonNullParamChecker) */
    switch (c) {
    case 'l': cfg->listen = arg; break;
    case 'm':
        if (opt_size(arg, &cfg->memory) || cfg->memory < (1u << 20)) {
            fprintf(stderr, "rdmx-kvd: --memory '%s': a size of at "
                            "least 1m\n", arg);
            return 2;
        }
        break;
    case 'w': cfg->workers = (unsigned)atoi(arg); break;
    case 'c': {
        char *end;
        unsigned long n = strtoul(arg, &end, 10);
        if (*end != '\0' || n == 0 || n > 10000000 || arg[0] == '-') {
            fprintf(stderr, "rdmx-kvd: --max-connections '%s': a number "
                            "of at least 1\n", arg);
            return 2;
        }
        cfg->max_connections = (unsigned)n;
        break;
    }
    case 'K':
        if (opt_size(arg, &cfg->max_key) || cfg->max_key == 0 ||
            cfg->max_key > 65535) {
            fprintf(stderr, "rdmx-kvd: --max-key '%s': 1..65535\n",
                    arg);
            return 2;
        }
        break;
    case 'V':
        if (opt_size(arg, &cfg->max_value) || cfg->max_value == 0) {
            fprintf(stderr, "rdmx-kvd: --max-value '%s': a size\n",
                    arg);
            return 2;
        }
        break;
    case 'I':
        if (opt_size(arg, &cfg->inline_threshold)) {
            fprintf(stderr, "rdmx-kvd: --inline-threshold '%s': a size\n",
                    arg);
            return 2;
        }
        break;
    case 'E':
        if (strcmp(arg, "lru") == 0) {
            cfg->eviction = RDMX_KV_EVICT_LRU;
        } else if (strcmp(arg, "none") == 0) {
            cfg->eviction = RDMX_KV_EVICT_NONE;
        } else {
            fprintf(stderr, "rdmx-kvd: --eviction lru|none\n");
            return 2;
        }
        break;
    case 'A': o->secret_file = arg; break;
    case 'T':
        cfg->context.field_mask |= RDMX_CONTEXT_PARAM_FIELD_TRANSPORT |
                                   RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME;
        cfg->context.transport_name = arg;
        if (rdmx_transport_parse(arg, &cfg->context.transport) !=
            RDMX_OK) {
            fprintf(stderr, "rdmx-kvd: --transport "
                            "auto|shm|tcp|rdma|ofi[:PROVIDER]\n");
            return 2;
        }
        break;
    case 'N': o->no_lambda = 1; break;
    case 'G':
        cfg->no_mapped_gets = 1;
        break;
    case 'P':
        lp->field_mask |= RDMX_LAMBDA_PARAM_FIELD_PLUGIN_DIR;
        lp->plugin_dir = arg;
        break;
    case 'i': {
        size_t v;
        if (opt_size(arg, &v) || v < 1000) {
            fprintf(stderr, "rdmx-kvd: --lambda-max-instructions '%s': "
                            "a number of at least 1000\n", arg);
            return 2;
        }
        lp->field_mask |= RDMX_LAMBDA_PARAM_FIELD_MAX_INSTRUCTIONS;
        lp->max_instructions = v;
        break;
    }
    case 'M':
        if (opt_size(arg, &lp->max_memory) ||
            lp->max_memory < (256u << 10)) {
            fprintf(stderr, "rdmx-kvd: --lambda-max-memory '%s': a size "
                            "of at least 256k\n", arg);
            return 2;
        }
        lp->field_mask |= RDMX_LAMBDA_PARAM_FIELD_MAX_MEMORY;
        break;
    case 't': {
        size_t v;
        if (opt_size(arg, &v) || v > 3600000) {
            fprintf(stderr, "rdmx-kvd: --lambda-max-time '%s': "
                            "milliseconds, 0..3600000\n", arg);
            return 2;
        }
        lp->field_mask |= RDMX_LAMBDA_PARAM_FIELD_MAX_TIME;
        /* (0 on the command line: only the caller's deadline) */
        lp->max_time_ms = v == 0 ? RDMX_TIMEOUT_INFINITE : (int)v;
        break;
    }
    case 'C': {
        size_t v;
        if (opt_size(arg, &v) || v > 1000000) {
            fprintf(stderr, "rdmx-kvd: --lambda-cache '%s': 0..1000000\n",
                    arg);
            return 2;
        }
        lp->field_mask |= RDMX_LAMBDA_PARAM_FIELD_CACHE_ENTRIES;
        lp->cache_entries = (unsigned)v;
        break;
    }
    case 'R': /* reused states are gone; fresh ones cost no more */
        break;
    case 'H': o->metrics_listen = arg; break;
    case 'F': o->config_file = arg; break;
    default: return 2;
    }
    /* NOLINTEND(clang-analyzer-core.NonNullParamChecker) */
    return 0;
}

/* The config file's values, kept for the process's lifetime (options
 * point into them); a static root, so that leak checkers see them held. */
typedef struct kvd_config_value {
    struct kvd_config_value *next;
    char text[];
} kvd_config_value_t;

static kvd_config_value_t *kvd_config_values;

/* A copy of @text that lives as long as the process; NULL: no memory. */
static const char *config_keep(const char *text)
{
    size_t len = strlen(text);
    kvd_config_value_t *v = malloc(sizeof(*v) + len + 1);

    if (v == NULL)
        return NULL;
    memcpy(v->text, text, len + 1);
    v->next = kvd_config_values;
    kvd_config_values = v;
    return v->text;
}

/* A config file's boolean value: 1 yes, 0 no, -1 neither. */
static int config_bool(const char *v)
{
    if (!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1") ||
        !strcmp(v, "on"))
        return 1;
    if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0") ||
        !strcmp(v, "off"))
        return 0;
    return -1;
}

/*
 * Apply the config file @path: one "name = value" per line, name a long
 * option without its dashes ("memory = 1g"); blank lines and lines whose
 * first non-blank character is '#' are skipped; a value may be quoted
 * ("..."); an option without argument takes yes/no (true/false, on/off,
 * 1/0). Values are copied for the process's lifetime. Lines are at most
 * 4095 bytes. Returns 0, or 2 after printing "rdmx-kvd: FILE:LINE: why".
 */
static int kvd_config_load(kvd_options_t *o, const char *path)
{
    char line[4096];
    unsigned lineno = 0;
    int ret = 0;
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        fprintf(stderr, "rdmx-kvd: --config %s: %s\n", path,
                strerror(errno));
        return 2;
    }
    while (ret == 0 && fgets(line, sizeof(line), f) != NULL) {
        char *name = line, *value, *end;
        const struct option *opt;

        lineno++;
        if (strchr(line, '\n') == NULL && !feof(f)) {
            fprintf(stderr, "rdmx-kvd: %s:%u: line too long\n", path, lineno);
            ret = 2;
            break;
        }
        line[strcspn(line, "\r\n")] = '\0';
        name += strspn(name, " \t");
        if (*name == '\0' || *name == '#')
            continue;
        end = name + strcspn(name, " \t=");
        value = end + strspn(end, " \t");
        if (*value == '=')
            value++;
        value += strspn(value, " \t");
        *end = '\0';
        for (char *e = value + strlen(value);
             e > value && (e[-1] == ' ' || e[-1] == '\t');)
            *--e = '\0';
        if (value[0] == '"' && strlen(value) >= 2 &&
            value[strlen(value) - 1] == '"') {
            value[strlen(value) - 1] = '\0';
            value++;
        }
        for (opt = kvd_opts; opt->name != NULL; opt++)
            if (strcmp(opt->name, name) == 0)
                break;
        if (opt->name == NULL || opt->val == 'F' || opt->val == 'h') {
            fprintf(stderr, "rdmx-kvd: %s:%u: unknown option '%s'\n", path,
                    lineno, name);
            ret = 2;
        } else if (opt->has_arg == no_argument) {
            int b = config_bool(value);
            if (b < 0) {
                fprintf(stderr, "rdmx-kvd: %s:%u: %s: yes or no\n", path,
                        lineno, name);
                ret = 2;
            } else if (b) {
                ret = kvd_option(o, opt->val, NULL);
            }
        } else if (*value == '\0') {
            fprintf(stderr, "rdmx-kvd: %s:%u: %s needs a value\n", path,
                    lineno, name);
            ret = 2;
        } else {
            const char *copy = config_keep(value);
            if (copy == NULL) {
                fprintf(stderr, "rdmx-kvd: out of memory\n");
                ret = 2;
            } else {
                ret = kvd_option(o, opt->val, copy);
            }
        }
        if (ret != 0)
            fprintf(stderr, "rdmx-kvd: (in %s, line %u)\n", path, lineno);
    }
    fclose(f);
    return ret;
}

/*
 * The levels among the stats answer's lines (gauges in /metrics); every
 * other line only grows and is a counter. "pid" is left out.
 */
static int kv_stat_is_gauge(const char *name)
{
    static const char *const gauges[] = {"uptime",
                                         "curr_connections",
                                         "curr_items",
                                         "bytes",
                                         "limit_maxbytes",
                                         "free_bytes",
                                         "largest_free_block",
                                         "reserved_items",
                                         "pending_items",
                                         "pending_bytes",
                                         "lambda_cache_entries",
                                         "lambda_natives",
                                         NULL};

    if (strncmp(name, "alloc_", 6) == 0 || strncmp(name, "hash_", 5) == 0)
        return 1;
    for (unsigned i = 0; gauges[i] != NULL; i++)
        if (strcmp(name, gauges[i]) == 0)
            return 1;
    return 0;
}

/* One line of the stats answer as a metric rdmx_kv_NAME[_total]. */
static void kv_metric(rdmx_metrics_page_t *page, const char *name,
                      uint64_t value)
{
    char metric[128], help[160];
    int gauge = kv_stat_is_gauge(name);

    if (strcmp(name, "pid") == 0)
        return;
    snprintf(metric, sizeof(metric), "rdmx_kv_%s%s", name,
             gauge ? "" : "_total");
    snprintf(help, sizeof(help), "The stats answer's %s (docs/KV.md).",
             name);
    rdmx_metrics_page_add(page, metric,
                          gauge ? RDMX_METRIC_GAUGE : RDMX_METRIC_COUNTER,
                          help, NULL, value);
}

/* The collect callback of the metrics endpoint: every line of the stats
 * answer, read as kv.stats reads them (rdmx__kv_server_stats: the store's
 * and the lambda engine's counters copied under their mutexes, the RPC
 * server's relaxed loads). */
static void kv_metrics(rdmx_metrics_page_t *page, void *arg)
{
    rdmx_kv_server_stats_t st;

    rdmx__kv_server_stats(arg, &st);
#define KV_METRIC(field, name)                                                 \
    if ((name)[0] != '\0')                                                     \
        kv_metric(page, name, st.field);
    RDMX_KV_SERVER_STATS(KV_METRIC)
#undef KV_METRIC
    if (st.lambda_on) {
#define KV_LAMBDA_METRIC(field, name) kv_metric(page, name, st.lambda.field);
        RDMX_KV_LAMBDA_STATS(KV_LAMBDA_METRIC)
#undef KV_LAMBDA_METRIC
    }
}

/* The slow-path warnings (rpc/health.h) of the server as started, on
 * stderr; /health lists the same, from the same facts. */
static void print_warnings(const rdmx_kv_server_config_t *cfg,
                           const rdmx_kv_server_info_t *info)
{
    char w[RDMX_HEALTH_WARNINGS_MAX][RDMX_HEALTH_WARNING_LEN];
    rdmx_health_facts_t f;
    unsigned n;

    rdmx__health_facts_of_server(info->rpc, cfg->memory, &f);
    n = rdmx__health_warnings(&f, w, RDMX_HEALTH_WARNINGS_MAX);
    for (unsigned i = 0; i < n && i < RDMX_HEALTH_WARNINGS_MAX; i++)
        fprintf(stderr, "rdmx-kvd: WARNING: %s\n", w[i]);
}

int main(int argc, char **argv)
{
    kvd_options_t o = {.cfg = {
                           .listen = KVD_DEFAULT_LISTEN,
                           .memory = 64u << 20,
                           .max_connections = 1024,
                           .max_key = 250,
                           .max_value = 1u << 20,
                           .inline_threshold = 16384,
                           .eviction = RDMX_KV_EVICT_LRU,
                       }};
    rdmx_kv_server_config_t cfg;
    const char *secret_file;
    const char *metrics_listen;
    rdmx_metrics_http_t *metrics = NULL;
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

    /* First the config file, then the command line over it: a first pass
     * finds --config, the second applies the rest in order. */
    opterr = 0;
    while ((c = getopt_long(argc, argv, KVD_SHORT_OPTS, kvd_opts, NULL)) !=
           -1) {
        if (c == 'F')
            o.config_file = optarg;
    }
    if (o.config_file != NULL && kvd_config_load(&o, o.config_file) != 0)
        return 2;
    opterr = 1;
    optind = 0;
    while ((c = getopt_long(argc, argv, KVD_SHORT_OPTS, kvd_opts, NULL)) !=
           -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c == '?' || c == ':') {
            usage(stderr);
            return 2;
        }
        if (kvd_option(&o, c, optarg) != 0)
            return 2;
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    cfg = o.cfg;
    secret_file = o.secret_file;
    metrics_listen = o.metrics_listen;
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
    cfg.lambda = !o.no_lambda;

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
    printf("rdmx-kvd: listening on %s:%u (memory %zu MiB, %u workers, "
           "transport %s%s, backend %s, lambda %s)\n",
           host, info.port, cfg.memory >> 20, info.workers,
           rdmx_transport_name(info.transport),
           rdmx__context_requested(rdmx__rpc_server_context(info.rpc)) ==
                       RDMX_TRANSPORT_AUTO &&
                   info.transport == RDMX_TRANSPORT_TCP
               ? " (auto: shared memory to clients on this host)"
               : "",
           rdmx_context_backend(rdmx__rpc_server_context(info.rpc)), lam);
    fflush(stdout);
    print_warnings(&cfg, &info);
    if (metrics_listen != NULL) {
        rdmx_metrics_http_params_t mp = {
            .field_mask = RDMX_METRICS_HTTP_PARAM_FIELD_ADDRESS |
                          RDMX_METRICS_HTTP_PARAM_FIELD_RPC_SERVER |
                          RDMX_METRICS_HTTP_PARAM_FIELD_COLLECT_CB |
                          RDMX_METRICS_HTTP_PARAM_FIELD_MEMORY,
            .address = metrics_listen,
            .rpc_server = info.rpc,
            .collect_cb = kv_metrics,
            .collect_arg = srv,
            .memory = cfg.memory};
        char mhost[256];
        uint16_t mport;

        if ((st = rdmx_metrics_http_create(&mp, &metrics)) != RDMX_OK) {
            fprintf(stderr, "rdmx-kvd: --metrics-listen: %s: %s\n",
                    rdmx_strerror(st), rdmx_error_detail());
            rdmx__kv_server_destroy(srv);
            return 1;
        }
        rdmx_addr_parse(metrics_listen, mhost, sizeof(mhost), &mport);
        printf("rdmx-kvd: metrics on http://%s:%u/metrics\n", mhost,
               rdmx_metrics_http_port(metrics));
        fflush(stdout);
    }
#ifdef RDMX_HAVE_SYSTEMD
    /* Ready: listening, and the metrics endpoint too if asked for. */
    sd_notifyf(0, "READY=1\nSTATUS=listening on %s:%u", host, info.port);
#endif

    while (sigwait(&stop_signals, &sig) != 0)
        ;
#ifdef RDMX_HAVE_SYSTEMD
    sd_notify(0, "STOPPING=1");
#endif
    printf("rdmx-kvd: shutting down\n");
    fflush(stdout);
    rdmx_metrics_http_destroy(metrics);
    rdmx__kv_server_destroy(srv);
    return 0;
}
