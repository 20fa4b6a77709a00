/*
 * Command-line values shared by the tools (rdmx-perf, rdmx-demo, rdmx-kv,
 * rdmx-kvd) and the bench programs: sizes, counts, durations, ports and
 * addresses, each parsed whole and checked the same way everywhere.
 *
 * Every opt_* parser reads all of @p text. On success it writes its
 * out-parameter and returns 0. On failure it writes nothing, returns -1,
 * and opt_error() says why ("not a number", "trailing characters 'x'",
 * "too large", ...), for a message such as
 *
 * @code
 *     size_t size;
 *
 *     if (opt_size(optarg, &size) < 0) {
 *         fprintf(stderr, "rdmx-kv: --size '%s': %s\n", optarg, opt_error());
 *         return 2;
 *     }
 * @endcode
 *
 * Numbers are decimal digits only: no sign, no leading or trailing blanks,
 * no hexadecimal. Range checks beyond what the out-parameter holds are the
 * caller's (opt_uint takes its bounds). The numeric parsers need only libc;
 * opt_address needs librdmx (link rdmx_static after this library).
 */
#ifndef RDMX_TOOLS_OPTIONS_H
#define RDMX_TOOLS_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a bare number counts in opt_duration, and its suffixes' values. */
#define OPT_NS ((uint64_t)1)
#define OPT_US ((uint64_t)1000)
#define OPT_MS ((uint64_t)1000000)
#define OPT_S  ((uint64_t)1000000000)

/**
 * A size in bytes: digits, then optionally a binary multiplier k, m, g or t
 * (either case; 2^10, 2^20, 2^30, 2^40), an "i" after it and a "b":
 * "4096", "64k", "64K", "64KiB", "64kb", "1m", "1GiB", "100B". Rejects
 * anything else, and sizes that do not fit in a size_t.
 */
int opt_size(const char *text, size_t *size_p);

/**
 * An unsigned decimal number from @p lo to @p hi (no suffix): counts,
 * thread numbers, iterations.
 */
int opt_uint(const char *text, uint64_t lo, uint64_t hi, uint64_t *value_p);

/**
 * A duration in nanoseconds: a decimal number, with a fraction of up to 9
 * digits ("250", "0.5", ".25"), then optionally a unit: "us", "ms" or "s".
 * A bare number counts @p unit_ns (OPT_MS for an option in milliseconds,
 * OPT_S for one in seconds): with OPT_MS, "250", "250ms", "0.25s" and
 * "250000us" are the same. Rejects durations over UINT64_MAX ns (584
 * years).
 */
int opt_duration(const char *text, uint64_t unit_ns, uint64_t *ns_p);

/** @p ns in whole milliseconds, rounded up: 1 us is 1 ms, not 0. */
static inline uint64_t opt_ns_to_ms(uint64_t ns)
{
    return ns / OPT_MS + (ns % OPT_MS != 0);
}

/** A TCP port, 0..65535 (decimal). */
int opt_port(const char *text, uint16_t *port_p);

/**
 * "host:port" or "[v6addr]:port" split into @p host (at most
 * @p host_size - 1 characters) and the port, by rdmx_addr_parse(); the
 * port may be 0. Needs librdmx.
 */
int opt_address(const char *text, char *host, size_t host_size,
                uint16_t *port_p);

/**
 * Why the last opt_* call of this thread failed: a short phrase without
 * the text that was parsed, e.g. "unknown suffix 'q' (k, m, g, t; KiB,
 * MB ...)". Valid until the next opt_* call of the same thread.
 */
const char *opt_error(void);

/* Internal to this library: record why a parser failed; returns -1. */
int opt__fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#ifdef __cplusplus
}
#endif

#endif
