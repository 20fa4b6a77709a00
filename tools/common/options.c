/*
 * Sizes, counts, durations and ports on the command line (options.h).
 * libc only: the bench programs that do not link librdmx use these too.
 */
#include "options.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Why the last parser of this thread failed (opt_error). */
static _Thread_local char g_error[192];

int opt__fail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(g_error, sizeof(g_error), fmt, ap);
    va_end(ap);
    return -1;
}

const char *opt_error(void)
{
    return g_error[0] ? g_error : "no error";
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static char lower(char c)
{
    if (c >= 'A' && c <= 'Z')
        return (char)(c - 'A' + 'a');
    return c;
}

/*
 * The decimal digits at the start of @p s into *v_p, and where they end
 * into *end_p. -1 (reason recorded) when @p s does not start with a digit
 * or the number does not fit in 64 bits. Reads the digits once.
 */
static int leading_digits(const char *s, uint64_t *v_p, const char **end_p)
{
    uint64_t v = 0;

    if (!is_digit(*s)) {
        opt__fail(*s == '\0' ? "empty" : "not a number");
        return -1;
    }
    for (; is_digit(*s); s++) {
        unsigned d = (unsigned)(*s - '0');

        if (v > (UINT64_MAX - d) / 10) {
            opt__fail("too large");
            return -1;
        }
        v = v * 10 + d;
    }
    *v_p = v;
    *end_p = s;
    return 0;
}

int opt_size(const char *text, size_t *size_p)
{
    const char *end = text;
    uint64_t v = 0, mult = 1;

    if (text == NULL || leading_digits(text, &v, &end) < 0) {
        return text == NULL ? opt__fail("missing") : -1;
    }
    switch (lower(*end)) {
    case 'k':
        mult = (uint64_t)1 << 10;
        break;
    case 'm':
        mult = (uint64_t)1 << 20;
        break;
    case 'g':
        mult = (uint64_t)1 << 30;
        break;
    case 't':
        mult = (uint64_t)1 << 40;
        break;
    case 'b':
    case '\0':
        break;
    default:
        return opt__fail("unknown suffix '%s' (k, m, g or t: 64k, 1MiB)", end);
    }
    if (mult > 1) {
        end++;
        end += lower(*end) == 'i'; /* "KiB" */
    }
    end += lower(*end) == 'b'; /* "KB", "KiB", "100B" */
    if (*end != '\0') {
        return opt__fail("trailing characters '%s'", end);
    }
    if (v > UINT64_MAX / mult || v * mult > (uint64_t)SIZE_MAX) {
        return opt__fail("too large");
    }
    *size_p = (size_t)(v * mult);
    return 0;
}

int opt_uint(const char *text, uint64_t lo, uint64_t hi, uint64_t *value_p)
{
    const char *end = text;
    uint64_t v = 0;

    if (text == NULL || leading_digits(text, &v, &end) < 0) {
        return text == NULL ? opt__fail("missing") : -1;
    }
    if (*end != '\0') {
        return opt__fail("trailing characters '%s'", end);
    }
    if (v < lo) {
        return opt__fail("must be at least %llu", (unsigned long long)lo);
    }
    if (v > hi) {
        return opt__fail("must be at most %llu", (unsigned long long)hi);
    }
    *value_p = v;
    return 0;
}

int opt_duration(const char *text, uint64_t unit_ns, uint64_t *ns_p)
{
    static const struct {
        const char *name;
        uint64_t ns;
    } units[] = {{"us", OPT_US}, {"ms", OPT_MS}, {"s", OPT_S}};
    const char *p = text;
    uint64_t whole = 0, frac = 0, scale = 1, mult = unit_ns, part;
    unsigned nfrac = 0;

    if (text == NULL) {
        return opt__fail("missing");
    }
    if (unit_ns == 0) {
        return opt__fail("no unit for a bare number");
    }
    if (is_digit(*p) && leading_digits(p, &whole, &p) < 0) {
        return -1;
    }
    if (*p == '.') {
        for (p++; is_digit(*p); p++, nfrac++) {
            if (nfrac == 9) {
                return opt__fail("more than 9 decimals");
            }
            frac = frac * 10 + (uint64_t)(*p - '0');
            scale *= 10;
        }
    }
    if (p == text || (p == text + 1 && *text == '.')) {
        return opt__fail(*text == '\0' ? "empty" : "not a number");
    }
    if (*p != '\0') {
        size_t i;

        for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            if (strcmp(p, units[i].name) == 0) {
                mult = units[i].ns;
                break;
            }
        }
        if (i == sizeof(units) / sizeof(units[0])) {
            return opt__fail(lower(*p) >= 'a' && lower(*p) <= 'z'
                                 ? "unknown unit '%s' (us, ms or s)"
                                 : "trailing characters '%s'",
                             p);
        }
    }
    if (frac > UINT64_MAX / mult) {
        return opt__fail("too large");
    }
    part = frac * mult / scale; /* below 1 ns: dropped */
    if (whole > (UINT64_MAX - part) / mult) {
        return opt__fail("too large");
    }
    *ns_p = whole * mult + part;
    return 0;
}

int opt_port(const char *text, uint16_t *port_p)
{
    uint64_t v = 0;

    if (opt_uint(text, 0, 65535, &v) < 0) {
        return -1;
    }
    *port_p = (uint16_t)v;
    return 0;
}
