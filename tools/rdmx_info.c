/*
 * rdmx-info: what this build of rdmx has, and which path each kind of
 * operation takes against a server (as ucx_info and fi_info do for their
 * stacks). docs/OPERATIONS.md, "rdmx-info", gives the output and the exit
 * status; the warnings come from the function rdmx-kvd and /health use
 * (rpc/health.h).
 */
#define _GNU_SOURCE
#include <rdmx/rdmx.h>

#include "options.h"
#include "core/upper.h"
#include "rpc/health.h"
#include "util/time.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Exit statuses (docs/OPERATIONS.md). */
enum { INFO_FAST = 0, INFO_SLOW = 1, INFO_USAGE = 2, INFO_ERROR = 3 };

#ifndef RDMX_BUILD_TYPE
#define RDMX_BUILD_TYPE "unknown"
#endif
#ifndef RDMX_BUILD_CC
#define RDMX_BUILD_CC "unknown"
#endif
#ifndef RDMX_BUILD_UCX
#define RDMX_BUILD_UCX "unknown"
#endif
#ifndef RDMX_BUILD_MHD
#define RDMX_BUILD_MHD "unknown"
#endif
#ifndef RDMX_BUILD_SANITIZE
#define RDMX_BUILD_SANITIZE "off"
#endif
/* First UCX release whose atomics rdmx cannot use under peer failure
 * detection (docs/CORE.md, "UCX versions"), as major * 100 + minor. */
#define UCX_NO_ATOMICS 116

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: rdmx-info [options]\n"
        "Prints the version, build options, backends, the transports this\n"
        "host can open and its devices; with --server, connects and prints\n"
        "the path messages, RMA and atomics take, with a WARNING for each\n"
        "slow path (docs/OPERATIONS.md).\n"
        "  -s, --server HOST:PORT     an rdmx RPC server (rdmx-kvd, ...)\n"
        "      --transport T          auto|shm|tcp|rdma|ofi[:PROVIDER] to ask\n"
        "                             for (default: RDMX_TRANSPORT or auto)\n"
        "  -m, --memory SIZE          memory that would be registered, for\n"
        "                             the memlock check (default 0)\n"
        "      --auth-secret-file F   the server's secret\n"
        "  -t, --timeout MS           connect and ping limit (default 5000)\n"
        "  -V, --version              print the version and exit\n"
        "  -h, --help\n"
        "exit: 0 fast path, 1 a WARNING was printed, 2 usage, 3 error\n");
}

/* The UCX version this build was compiled against, major * 100 + minor. */
static unsigned build_ucx_version(void)
{
    unsigned major = 0, minor = 0;

    if (sscanf(RDMX_BUILD_UCX, "%u.%u", &major, &minor) != 2)
        return 0;
    return major * 100 + minor;
}

/* Print the names in @dir (a /sys class) on one line, or "(none)". */
static void list_dir(const char *what, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    printf("  %-5s", what);
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        printf(" %s", e->d_name);
        n++;
    }
    if (d != NULL)
        closedir(d);
    printf("%s   (%s)\n", n ? "" : " (none)", dir);
}

/* Set by the user (1) or not (0): UCX_MM_ERROR_HANDLING, which the UCX
 * backend sets for contexts that may use shared memory. */
static int user_mm_env;

/* This tool makes contexts of several transports in one process: a tcp
 * context after a shared-memory one would find the backend's
 * UCX_MM_ERROR_HANDLING unused, and UCX would warn about it. */
static void ucx_env_for(rdmx_transport_t t)
{
    if (!user_mm_env && t == RDMX_TRANSPORT_TCP)
        unsetenv("UCX_MM_ERROR_HANDLING");
}

/* Make a context for the transport spec @spec ("shm", "ofi:tcp", ...);
 * NULL with the reason in @why when it cannot be made. */
static rdmx_context_t *try_context(const char *spec, const char *net_devices,
                                   char *why, size_t why_len)
{
    rdmx_context_params_t cp = {.field_mask =
                                    RDMX_CONTEXT_PARAM_FIELD_TRANSPORT |
                                    RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME |
                                    RDMX_CONTEXT_PARAM_FIELD_NAME,
                                .transport_name = spec,
                                .name = "rdmx-info"};
    rdmx_context_t *ctx;
    rdmx_status_t st;

    if (net_devices != NULL) {
        cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
        cp.net_devices = net_devices;
    }
    if ((st = rdmx_transport_parse(spec, &cp.transport)) == RDMX_OK)
        ucx_env_for(cp.transport);
    if (st != RDMX_OK || (st = rdmx_context_create(&cp, &ctx)) != RDMX_OK) {
        snprintf(why, why_len, "%s: %s", rdmx_strerror(st),
                 rdmx_error_detail());
        return NULL;
    }
    return ctx;
}

/* The backends built in, and the transports this host can open through
 * each: one context of each. */
static void list_transports(const char *net_devices)
{
    static const char *const specs[] = {"shm",  "tcp",     "rdma",
                                        "auto", "ofi:tcp", "ofi:shm"};
    rdmx_context_t *ctx;
    char why[512];

    if ((ctx = try_context("ofi", net_devices, why, sizeof(why))) != NULL) {
        printf("backends: ucx, ofi\n");
        rdmx_context_destroy(ctx);
    } else {
        printf("backends: ucx (ofi: %s)\n", why);
    }
    printf("transports:\n");
    for (unsigned i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        if ((ctx = try_context(specs[i], net_devices, why, sizeof(why))) ==
            NULL) {
            printf("  %-8s not available (%s)\n", specs[i], why);
            continue;
        }
        if (strcmp(specs[i], "auto") == 0)
            printf("  %-8s -> %s\n", specs[i],
                   rdmx_transport_name(rdmx_context_transport(ctx)));
        else
            printf("  %-8s available (%s)\n", specs[i],
                   rdmx_context_backend(ctx));
        rdmx_context_destroy(ctx);
    }
}

/* The path put/get take on a connection over @t from a context whose
 * one-sided access goes by the transport (@one_sided) or not, and that
 * maps the peer's rdmx_mem_alloc memory (@maps: auto on one host). */
static const char *rma_path(rdmx_transport_t t, int one_sided, int maps,
                            int ofi)
{
    const char *env = getenv("RDMX_RMA");

    if (one_sided)
        return ofi ? "one-sided (the libfabric provider's RMA)"
               : t == RDMX_TRANSPORT_SHM ? "one-sided (shared memory)"
                                         : "one-sided (RDMA)";
    if (maps)
        return "mapped (copies into and out of the peer's rdmx_mem_alloc "
               "memory over shared memory; other memory carried by rdmx)";
    if (t == RDMX_TRANSPORT_TCP)
        return "emulated (carried by rdmx over messages to the target's "
               "worker)";
    if (env != NULL && strcmp(env, "rdmx") == 0)
        return "carried by rdmx over messages (RDMX_RMA=rdmx)";
    return "carried by rdmx over messages (this backend's choice)";
}

/* The path atomics take, as rma_path. */
static const char *atomics_path(rdmx_transport_t t, int one_sided,
                                int rma_one_sided, int ofi)
{
    const char *env = getenv("RDMX_ATOMICS");
    unsigned ucx = build_ucx_version();

    if (one_sided)
        return ofi ? "one-sided (the libfabric provider's atomics)"
               : t == RDMX_TRANSPORT_SHM ? "one-sided (shared memory)"
                                         : "one-sided (RDMA)";
    if (t == RDMX_TRANSPORT_TCP)
        return "emulated (carried by rdmx over messages to the target's "
               "worker)";
    if (env != NULL && strcmp(env, "rdmx") == 0)
        return "carried by rdmx over messages (RDMX_ATOMICS=rdmx)";
    if (rma_one_sided && !ofi && (ucx == 0 || ucx >= UCX_NO_ATOMICS))
        return "carried by rdmx over messages (UCX " RDMX_BUILD_UCX
               " has none under peer failure detection)";
    return "carried by rdmx over messages to the target's worker";
}

/* Print the warnings of @f; return how many. */
static unsigned print_warnings(const rdmx_health_facts_t *f)
{
    char w[RDMX_HEALTH_WARNINGS_MAX][RDMX_HEALTH_WARNING_LEN];
    unsigned n = rdmx__health_warnings(f, w, RDMX_HEALTH_WARNINGS_MAX);

    for (unsigned i = 0; i < n && i < RDMX_HEALTH_WARNINGS_MAX; i++)
        printf("WARNING: %s\n", w[i]);
    return n;
}

/* Connect to @server over a context asking for @cp's transport, ping it,
 * and print the paths; the connection's transport into @chosen_p. */
static int probe_server(const char *server, const rdmx_context_params_t *cp,
                        const void *secret, size_t secret_len, int timeout_ms,
                        rdmx_transport_t *chosen_p)
{
    rdmx_channel_params_t chp = {.field_mask =
                                     RDMX_CHANNEL_PARAM_FIELD_TIMEOUT |
                                     RDMX_CHANNEL_PARAM_FIELD_CONNECT_TIMEOUT,
                                 .timeout_ms = timeout_ms,
                                 .connect_timeout_ms = timeout_ms};
    rdmx_context_t *ctx = NULL;
    rdmx_worker_t *w = NULL;
    rdmx_channel_t *ch = NULL;
    rdmx_ep_t *ep;
    rdmx_status_t st;
    struct timespec t0, t1;
    const char *backend;
    int rma, atomics, ofi, maps;
    char resp[64];
    size_t len;
    int ret = INFO_ERROR;

    if (secret != NULL) {
        chp.field_mask |= RDMX_CHANNEL_PARAM_FIELD_AUTH_SECRET;
        chp.auth_secret = secret;
        chp.auth_secret_len = secret_len;
    }
    ucx_env_for(cp->transport);
    if ((st = rdmx_context_create(cp, &ctx)) != RDMX_OK ||
        (st = rdmx_worker_create(ctx, NULL, &w)) != RDMX_OK ||
        (st = rdmx_channel_create(w, server, &chp, &ch)) != RDMX_OK ||
        (st = rdmx_channel_wait_ready(ch, timeout_ms)) != RDMX_OK)
        goto fail;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if ((st = rdmx_call(ch, "rdmx.ping", NULL, 0, resp, sizeof(resp), NULL,
                        &len)) != RDMX_OK)
        goto fail;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if ((ep = rdmx_channel_ep(ch)) == NULL) {
        st = RDMX_ERR_CONN_CLOSED;
        goto fail;
    }
    *chosen_p = rdmx_ep_transport(ep);
    rdmx__worker_lock(w);
    maps = rdmx__ep_maps_peer(ep);
    rdmx__worker_unlock(w);
    backend = rdmx_context_backend(ctx);
    ofi = strncmp(backend, "ofi", 3) == 0;
    rdmx__context_one_sided(ctx, &rma, &atomics);
    printf("server: %s (rdmx.ping answered in %.3f ms)\n", server,
           (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
               (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    printf("backend: %s\n", backend);
    printf("path: messages  %s\n", rdmx_transport_name(*chosen_p));
    printf("path: rma       %s\n", rma_path(*chosen_p, rma, maps, ofi));
    printf("path: atomics   %s\n", atomics_path(*chosen_p, atomics, rma, ofi));
    ret = INFO_FAST;
    goto out;
fail:
    fprintf(stderr, "rdmx-info: %s: %s (%s)\n", server, rdmx_strerror(st),
            rdmx_error_detail());
out:
    rdmx_channel_destroy(ch);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    return ret;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"server", required_argument, NULL, 's'},
        {"transport", required_argument, NULL, 'T'},
        {"memory", required_argument, NULL, 'm'},
        {"auth-secret-file", required_argument, NULL, 'A'},
        {"timeout", required_argument, NULL, 't'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    rdmx_context_params_t cp = {.field_mask = RDMX_CONTEXT_PARAM_FIELD_NAME,
                                .name = "rdmx-info"};
    rdmx_health_facts_t f = {.requested = RDMX_TRANSPORT_AUTO};
    const char *server = NULL, *secret_file = NULL, *env;
    const char *net_devices = NULL;
    char secret[4096], host[256];
    size_t secret_len = 0, memory = 0;
    uint16_t port;
    int c, timeout_ms = 5000, ret;

    user_mm_env = getenv("UCX_MM_ERROR_HANDLING") != NULL;
    while ((c = getopt_long(argc, argv, "s:m:t:Vh", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            server = optarg;
            break;
        case 'T':
            if (rdmx_transport_parse(optarg, &cp.transport) != RDMX_OK) {
                fprintf(stderr, "rdmx-info: --transport "
                                "auto|shm|tcp|rdma|ofi[:PROVIDER]\n");
                return INFO_USAGE;
            }
            cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_TRANSPORT |
                             RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME;
            cp.transport_name = optarg;
            break;
        case 'm':
            if (opt_size(optarg, &memory)) {
                fprintf(stderr, "rdmx-info: --memory '%s': a size\n", optarg);
                return INFO_USAGE;
            }
            break;
        case 'A':
            secret_file = optarg;
            break;
        case 't': {
            size_t v;
            if (opt_size(optarg, &v) || v == 0 || v > 3600000) {
                fprintf(stderr,
                        "rdmx-info: --timeout '%s': milliseconds, "
                        "1..3600000\n",
                        optarg);
                return INFO_USAGE;
            }
            timeout_ms = (int)v;
            break;
        }
        case 'V':
            printf("rdmx-info (rdmx %s)\n", rdmx_version());
            return INFO_FAST;
        case 'h':
            usage(stdout);
            return INFO_FAST;
        default:
            usage(stderr);
            return INFO_USAGE;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return INFO_USAGE;
    }
    if (secret_file != NULL) {
        FILE *sf = fopen(secret_file, "r");
        if (sf == NULL) {
            fprintf(stderr, "rdmx-info: %s: %s\n", secret_file,
                    strerror(errno));
            return INFO_USAGE;
        }
        secret_len = fread(secret, 1, sizeof(secret), sf);
        fclose(sf);
        while (secret_len > 0 && (secret[secret_len - 1] == '\n' ||
                                  secret[secret_len - 1] == '\r'))
            secret_len--;
    }
    /* A loopback server: keep UCX on lo, as rdmx-kvd and rdmx-kv do. */
    if (server != NULL &&
        rdmx_addr_parse(server, host, sizeof(host), &port) == RDMX_OK &&
        rdmx_host_is_loopback(host) && getenv("UCX_NET_DEVICES") == NULL) {
        cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
        cp.net_devices = net_devices = "lo";
    }
    if (cp.field_mask & RDMX_CONTEXT_PARAM_FIELD_TRANSPORT)
        f.requested = cp.transport;
    else if ((env = getenv("RDMX_TRANSPORT")) != NULL)
        rdmx_transport_parse(env, &f.requested);
    f.memory = memory;
    f.memlock_limit = rdmx__health_memlock_limit();
    printf("rdmx %s\n", rdmx_version());
    printf("build: %s, %s, sanitizers %s, UCX %s, libmicrohttpd %s\n",
           RDMX_BUILD_TYPE, RDMX_BUILD_CC, RDMX_BUILD_SANITIZE, RDMX_BUILD_UCX,
           RDMX_BUILD_MHD);
    /* The listing opens a context of each backend on the devices
     * UCX_NET_DEVICES names, if any (the libfabric backend takes its tcp
     * interface from the same name). */
    list_transports(net_devices != NULL ? net_devices
                                        : getenv("UCX_NET_DEVICES"));
    printf("devices:\n");
    list_dir("rdma", "/sys/class/infiniband");
    list_dir("net", "/sys/class/net");
    if (f.memlock_limit == UINT64_MAX)
        printf("memlock: unlimited\n");
    else
        printf("memlock: %llu bytes (ulimit -l)\n",
               (unsigned long long)f.memlock_limit);
    /* (the library's clock: docs/CORE.md, "The clock") */
    if (rdmx__clock.use_tsc)
        printf("clock: tsc at %.0f MHz\n",
               1000.0 * 4294967296.0 / (double)rdmx__clock.mult);
    else
        printf("clock: CLOCK_MONOTONIC\n");
    fflush(stdout);

    if (server != NULL) {
        ret = probe_server(server, &cp, secret_file ? secret : NULL, secret_len,
                           timeout_ms, &f.chosen);
        if (ret != INFO_FAST)
            return ret;
    } else {
        rdmx_context_t *ctx;
        rdmx_status_t st;

        ucx_env_for(cp.transport);
        st = rdmx_context_create(&cp, &ctx);
        if (st != RDMX_OK) {
            fprintf(stderr, "rdmx-info: %s (%s)\n", rdmx_strerror(st),
                    rdmx_error_detail());
            return INFO_ERROR;
        }
        f.chosen = rdmx_context_transport(ctx);
        printf("context: %s (%s)\n", rdmx_transport_name(f.chosen),
               rdmx_context_backend(ctx));
        rdmx_context_destroy(ctx);
    }
    return print_warnings(&f) > 0 ? INFO_SLOW : INFO_FAST;
}
