/*
 * Context: the backend's context, the transport choice, and the registry
 * of regions (so a notification or an atomic can name its region).
 */
#include "core/internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const transport_names[] = {"auto", "shm", "tcp", "rdma"};

const char *rdmx_transport_name(rdmx_transport_t transport)
{
    if ((unsigned)transport >= sizeof(transport_names) / sizeof(char *))
        return NULL;
    return transport_names[transport];
}

/* Is @name an ofi spec: "ofi" or "ofi:PROVIDER"? */
static int is_ofi_spec(const char *name)
{
    return name != NULL && !strncmp(name, "ofi", 3) &&
           (name[3] == '\0' || (name[3] == ':' && name[4] != '\0'));
}

/* The medium an ofi spec names (rdmx_transport_parse). */
static rdmx_transport_t ofi_medium(const char *name)
{
    static const char *const rdma[] = {"efa", "verbs", "cxi", "psm", "opx"};
    const char *p = name[3] == ':' ? name + 4 : "";

    if (!strncmp(p, "tcp", 3))
        return RDMX_TRANSPORT_TCP;
    if (!strcmp(p, "shm"))
        return RDMX_TRANSPORT_SHM;
    for (unsigned i = 0; i < sizeof(rdma) / sizeof(rdma[0]); i++)
        if (!strncmp(p, rdma[i], strlen(rdma[i])))
            return RDMX_TRANSPORT_RDMA;
    return RDMX_TRANSPORT_AUTO;
}

rdmx_status_t rdmx_transport_parse(const char *name,
                                   rdmx_transport_t *transport_p)
{
    if (is_ofi_spec(name) && strlen(name) < 64) {
        *transport_p = ofi_medium(name);
        return RDMX_OK;
    }
    for (unsigned i = 0; name && i < 4; i++) {
        if (!strcmp(name, transport_names[i])) {
            *transport_p = (rdmx_transport_t)i;
            return RDMX_OK;
        }
    }
    return rdmx__error(RDMX_ERR_INVALID,
                       "transport '%s': expected auto, shm, tcp, rdma or "
                       "ofi[:PROVIDER]",
                       name ? name : "(null)");
}

const char *rdmx_context_backend(const rdmx_context_t *context)
{
    if (context->tp->ctx_describe != NULL)
        return context->tp->ctx_describe(context->tctx);
    return context->tp->name;
}

uint64_t rdmx__context_spin_ns(const rdmx_context_t *ctx)
{
    return ctx->spin_ns;
}

int rdmx__context_poll_yields(const rdmx_context_t *ctx)
{
    return ctx->transport_used == RDMX_TRANSPORT_TCP;
}

rdmx_transport_t rdmx_context_transport(const rdmx_context_t *context)
{
    return context->transport_used;
}

rdmx_transport_t rdmx__context_requested(const rdmx_context_t *ctx)
{
    return ctx->transport;
}

void rdmx__context_one_sided(const rdmx_context_t *ctx, int *rma_p,
                             int *atomics_p)
{
    *rma_p = ctx->tp_rma;
    *atomics_p = ctx->tp_atomics;
}

/* Does this host have an RDMA device (InfiniBand, RoCE, iWARP)? */
static int have_rdma_device(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    struct dirent *e;
    int found = 0;

    if (d == NULL)
        return 0;
    while (!found && (e = readdir(d)) != NULL)
        found = e->d_name[0] != '.';
    closedir(d);
    return found;
}

rdmx_status_t rdmx_context_create_v(unsigned api_version,
                                    const rdmx_context_params_t *params,
                                    rdmx_context_t **context_p)
{
    rdmx_context_params_t p = {0};
    rdmx_context_t *ctx;
    rdmx_status_t status;
    const char *env, *spec = NULL;

    if (context_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "context_create: NULL output");
    /* Within a major version a library reads every struct of the headers
     * it is at least as new as. */
    if ((api_version >> 16) != RDMX_VERSION_MAJOR ||
        api_version > RDMX_VERSION_NUMBER)
        return rdmx__error(RDMX_ERR_UNSUPPORTED,
                           "this program was built against rdmx %u.%u.%u, "
                           "but the librdmx it runs with is %s: install "
                           "librdmx %u.%u.%u or newer of major version %u",
                           api_version >> 16, (api_version >> 8) & 0xff,
                           api_version & 0xff, RDMX_VERSION_STRING,
                           api_version >> 16, (api_version >> 8) & 0xff,
                           api_version & 0xff, api_version >> 16);
    if (params != NULL)
        p = *params;
    if ((p.field_mask & RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME) &&
        p.transport_name != NULL) {
        if (rdmx_transport_parse(p.transport_name, &p.transport) != RDMX_OK)
            return RDMX_ERR_INVALID;
        spec = p.transport_name;
    } else if (!(p.field_mask & RDMX_CONTEXT_PARAM_FIELD_TRANSPORT)) {
        p.transport = RDMX_TRANSPORT_AUTO;
        env = getenv("RDMX_TRANSPORT");
        if (env != NULL && *env != '\0' &&
            rdmx_transport_parse(env, &p.transport) != RDMX_OK)
            return rdmx__error(RDMX_ERR_INVALID,
                               "RDMX_TRANSPORT='%s': expected auto, shm, tcp, "
                               "rdma or ofi[:PROVIDER]",
                               env);
        spec = env;
    }
    if (!is_ofi_spec(spec))
        spec = NULL;
#ifndef RDMX_HAVE_OFI
    if (spec != NULL)
        return rdmx__error(RDMX_ERR_UNSUPPORTED,
                           "transport %s: this librdmx was built without "
                           "libfabric",
                           spec);
#endif
    if (rdmx_transport_name(p.transport) == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "context: unknown transport %d",
                           (int)p.transport);
    if (spec == NULL && p.transport == RDMX_TRANSPORT_RDMA &&
        !have_rdma_device())
        return rdmx__error(RDMX_ERR_UNSUPPORTED,
                           "transport rdma: no RDMA device on this host "
                           "(/sys/class/infiniband is empty); use shm or tcp");

    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "context: out of memory");
    ctx->transport = p.transport;
    ctx->transport_used = p.transport;
    snprintf(ctx->backend_spec, sizeof(ctx->backend_spec), "%s",
             spec != NULL ? spec : "ucx");
    if (spec == NULL && p.transport == RDMX_TRANSPORT_AUTO)
        ctx->transport_used =
            have_rdma_device() ? RDMX_TRANSPORT_RDMA : RDMX_TRANSPORT_TCP;
    ctx->spin_ns = RDMX_SPIN_NS;
    if ((env = getenv("RDMX_SPIN_US")) != NULL && *env != '\0') {
        char *end;
        unsigned long spin_us = strtoul(env, &end, 10);
        if (*end != '\0' || spin_us > 1000000)
            rdmx_warn("RDMX_SPIN_US='%s' ignored: microseconds, "
                      "0..1000000", env);
        else
            ctx->spin_ns = (uint64_t)spin_us * 1000;
    }
    snprintf(ctx->name, sizeof(ctx->name), "%s",
             (p.field_mask & RDMX_CONTEXT_PARAM_FIELD_NAME) && p.name ? p.name
                                                                      : "rdmx");
    ctx->next_region_id = 1;
    pthread_mutex_init(&ctx->mr_lock, NULL);
    if (rdmx_ptrmap_init(&ctx->regions) != 0) {
        status = rdmx__error(RDMX_ERR_NO_MEMORY, "context: out of memory");
        goto err_free;
    }

    /* Who moves one-sided data (docs/SECURITY.md): the transport where it
     * enforces registrations itself (RDMA hardware checks every access
     * against the key) or is the host's shared memory (the kernel's
     * rules for same-host processes bound it); rdmx, checked by the
     * target, everywhere else — above all tcp, where UCX would emulate
     * put/get in software without any check. RDMX_RMA=rdmx carries them
     * on every transport. */
    ctx->tp_rma = p.transport == RDMX_TRANSPORT_RDMA ||
                  p.transport == RDMX_TRANSPORT_SHM ||
                  (p.transport == RDMX_TRANSPORT_AUTO && have_rdma_device());
    if ((env = getenv("RDMX_RMA")) != NULL && !strcmp(env, "rdmx"))
        ctx->tp_rma = 0;
    /* A peer on this host reached over UCX's shared memory is inside the
     * kernel's boundary for shared memory (same user: docs/SECURITY.md)
     * on any transport setting, auto included: its rdmx_mem_alloc memory
     * is mapped and copied (rdmx__ep_maps_peer), without UCX's one-sided
     * features, whose software handlers tcp peers would reach. */
    ctx->map_peers = spec == NULL && !(env != NULL && !strcmp(env, "rdmx"));
    /* ofi (docs/FABRIC.md, "One-sided access"): the provider's own on
     * shared memory and RDMA providers, carried on tcp and unknown ones;
     * RDMX_RMA=transport takes the provider's there too. */
    if (spec != NULL)
        ctx->tp_rma = (p.transport == RDMX_TRANSPORT_SHM ||
                       p.transport == RDMX_TRANSPORT_RDMA ||
                       (env != NULL && !strcmp(env, "transport"))) &&
                      !(env != NULL && !strcmp(env, "rdmx"));
    /* Over tcp UCX moves a large message only as messages the receiver
     * copies in; elsewhere its rendezvous may write straight into the
     * receiver's memory, from the sender's side (access.c). */
    ctx->rndv_safe = p.transport == RDMX_TRANSPORT_TCP || spec != NULL;
    if ((status = rdmx__random(ctx->grant_key, sizeof(ctx->grant_key))) !=
        RDMX_OK)
        goto err_map;
    ctx->tp = &rdmx_tp_ucx;
#ifdef RDMX_HAVE_OFI
    if (spec != NULL)
        ctx->tp = &rdmx_tp_ofi;
#endif
    status = ctx->tp->ctx_create(
        ctx, p.transport,
        (p.field_mask & RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES) ? p.net_devices
                                                               : NULL,
        ctx->tp_rma, &ctx->tctx);
    if (status != RDMX_OK)
        goto err_map;
    if (ctx->tp->ctx_transport != NULL)
        ctx->transport_used = ctx->tp->ctx_transport(ctx->tctx);
    ctx->tp_atomics = ctx->tp_rma && ctx->tp->has_atomics != NULL &&
                      ctx->tp->atomic != NULL &&
                      ctx->tp->has_atomics(ctx->tctx);
    /* RDMX_ATOMICS=rdmx: carry atomics in rdmx even where the transport
     * has its own (checked by the target against the region; the tests
     * run that path on every UCX version). */
    if ((env = getenv("RDMX_ATOMICS")) != NULL && !strcmp(env, "rdmx"))
        ctx->tp_atomics = 0;
    *context_p = ctx;
    return RDMX_OK;

err_map:
    rdmx_ptrmap_cleanup(&ctx->regions);
err_free:
    pthread_mutex_destroy(&ctx->mr_lock);
    free(ctx);
    return status;
}

void rdmx_context_destroy(rdmx_context_t *context)
{
    if (context == NULL)
        return;
    /* Regions still registered would trip UCX's cache at cleanup: release
     * them here; their handles are invalid from now on. */
    if (context->regions.count != 0) {
        rdmx_warn("context destroyed with %zu regions still registered; "
                  "releasing them",
                  context->regions.count);
        for (size_t i = 0; i <= context->regions.mask; i++) {
            rdmx_mr_t *mr = context->regions.slots[i].value;
            if (context->regions.slots[i].key != NULL) {
                context->regions.slots[i].key = NULL;
                rdmx__mr_release(mr);
            }
        }
        context->regions.count = 0;
    }
    context->tp->ctx_destroy(context->tctx);
    rdmx_ptrmap_cleanup(&context->regions);
    pthread_mutex_destroy(&context->mr_lock);
    free(context);
}
