/*
 * libfabric loaded when the first ofi context is made, not when librdmx
 * is (docs/FABRIC.md, "Loading libfabric"). Debian's libfabric pulls in
 * every provider's libraries at load time, and one of them (the PSM
 * provider's libinfinipath) installs handlers for SIGSEGV, SIGBUS, SIGILL,
 * SIGABRT, SIGINT and SIGTERM in its constructor that turn a crash or a
 * termination request into exit(1): a process that only uses UCX must not
 * get them, nor pay for loading them, and one that uses libfabric keeps
 * the handlers it had: loading puts back every disposition that changed.
 *
 * RDMX_OFI_LIBRARY names another file (a libfabric built for EFA, say).
 *
 * libfabric exports six functions rdmx calls (everything else is inline
 * over the fid operation tables); ofi_int.h maps their names to the
 * pointers below, so the backend's code reads as plain libfabric.
 */
#include "core/ofi/ofi_int.h"

#include "util/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OFI_LIB_NAME "libfabric.so.1"

rdmx_ofi_lib_t rdmx__ofi_lib;

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static char lib_error[512]; /* empty: loaded */
static const char *lib_name = OFI_LIB_NAME;

/* dlopen @name, keeping every signal's disposition as it was. */
static void *open_keeping_signals(const char *name)
{
    static struct sigaction before[NSIG]; /* (once per process) */
    struct sigaction now;
    void *h;
    int sig;

    for (sig = 1; sig < NSIG; sig++)
        if (sigaction(sig, NULL, &before[sig]) != 0)
            before[sig].sa_handler = SIG_ERR; /* (not a signal to keep) */
    h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    for (sig = 1; sig < NSIG; sig++) {
        if (before[sig].sa_handler == SIG_ERR ||
            sigaction(sig, NULL, &now) != 0 ||
            (now.sa_handler == before[sig].sa_handler &&
             now.sa_flags == before[sig].sa_flags))
            continue;
        sigaction(sig, &before[sig], NULL);
        rdmx_debug("ofi: loading %s changed the handler of %s: put back", name,
                   strsignal(sig));
    }
    return h;
}

static void lib_open(void)
{
    const char *env = getenv("RDMX_OFI_LIBRARY"), *missing = NULL;
    rdmx_ofi_lib_t l;
    void *h;

    if (env != NULL && env[0] != '\0')
        lib_name = env;
    h = open_keeping_signals(lib_name);
    if (h == NULL) {
        snprintf(lib_error, sizeof(lib_error), "%s", dlerror());
        return;
    }
    /* (the default version of each, as linking against it would bind) */
#define OFI_SYM(field, name)                                                   \
    do {                                                                       \
        *(void **)&l.field = dlsym(h, name);                                   \
        if (l.field == NULL && missing == NULL)                                \
            missing = name;                                                    \
    } while (0)
    OFI_SYM(getinfo, "fi_getinfo");
    OFI_SYM(freeinfo, "fi_freeinfo");
    OFI_SYM(dupinfo, "fi_dupinfo");
    OFI_SYM(fabric, "fi_fabric");
    OFI_SYM(strerror, "fi_strerror");
    OFI_SYM(version, "fi_version");
#undef OFI_SYM
    if (missing != NULL) {
        snprintf(lib_error, sizeof(lib_error), "it has no %s", missing);
        dlclose(h);
        return;
    }
    if (FI_MAJOR(l.version()) != FI_MAJOR_VERSION ||
        l.version() < FI_VERSION(1, 17)) {
        snprintf(lib_error, sizeof(lib_error),
                 "it is version %u.%u; rdmx needs %u.x, at least 1.17",
                 FI_MAJOR(l.version()), FI_MINOR(l.version()),
                 FI_MAJOR_VERSION);
        dlclose(h);
        return;
    }
    rdmx__ofi_lib = l; /* (the handle stays open for the process's life) */
}

rdmx_status_t rdmx__ofi_lib_load(void)
{
    pthread_once(&lib_once, lib_open);
    if (lib_error[0] != '\0')
        return rdmx__error(RDMX_ERR_UNSUPPORTED,
                           "the libfabric backend cannot load %s: %s "
                           "(install libfabric1, or name the library in "
                           "RDMX_OFI_LIBRARY)",
                           lib_name, lib_error);
    return RDMX_OK;
}
