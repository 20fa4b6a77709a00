/*
 * unit_options: the tools' command-line parsers (tools/common/options.h).
 *
 * - opt_size accepts digits with k/m/g/t in either case, an optional "i"
 *   after the multiplier and an optional "b" ("64k", "1MiB", "4096B",
 *   "1ki"), each a power of 1024; it rejects empty and signed text,
 *   blanks, unknown suffixes, trailing characters and sizes over SIZE_MAX.
 * - opt_uint takes plain decimal numbers within its bounds only.
 * - opt_duration takes decimals with us/ms/s or the caller's unit, exactly
 *   to the nanosecond, and rejects other units, exponents and overflow;
 *   opt_ns_to_ms rounds up.
 * - opt_port takes 0..65535; opt_address splits host:port and [v6]:port as
 *   rdmx_addr_parse does.
 * - A failing parser leaves its out-parameter alone and says why in
 *   opt_error().
 * No network, no UCX context.
 */
#define _GNU_SOURCE
#include "harness.h"

#include "options.h"

#include <stdio.h>
#include <string.h>

#define SENTINEL 0x5a5a5a5a5a5a5a5aull

static void size_ok(const char *text, uint64_t want)
{
    size_t v = (size_t)SENTINEL;

    CHECKF(opt_size(text, &v) == 0, "opt_size(\"%s\") failed: %s", text,
           opt_error());
    CHECKF(v == want, "opt_size(\"%s\") = %zu, expected %llu", text, v,
           (unsigned long long)want);
}

/* Rejected, the out-parameter untouched, and a reason containing @p why. */
static void size_bad(const char *text, const char *why)
{
    size_t v = (size_t)SENTINEL;

    CHECKF(opt_size(text, &v) == -1, "opt_size(\"%s\") accepted: %zu",
           text ? text : "NULL", v);
    CHECKF(v == (size_t)SENTINEL, "opt_size(\"%s\") wrote %zu on failure",
           text ? text : "NULL", v);
    CHECKF(strstr(opt_error(), why) != NULL,
           "opt_size(\"%s\"): reason \"%s\", expected \"%s\"",
           text ? text : "NULL", opt_error(), why);
}

static void test_size(void)
{
    char big[64];

    size_ok("0", 0);
    size_ok("4096", 4096);
    size_ok("007", 7);
    size_ok("100b", 100);
    size_ok("100B", 100);
    size_ok("1k", 1024);
    size_ok("64K", 64 << 10);
    size_ok("64KiB", 64 << 10);
    size_ok("64kib", 64 << 10);
    size_ok("64KB", 64 << 10);
    size_ok("64kb", 64 << 10);
    size_ok("64ki", 64 << 10);
    size_ok("1m", 1 << 20);
    size_ok("1M", 1 << 20);
    size_ok("1MiB", 1 << 20);
    size_ok("3g", 3ull << 30);
    size_ok("1GiB", 1ull << 30);
    size_ok("2t", 2ull << 40);
    size_ok("1TiB", 1ull << 40);
    snprintf(big, sizeof(big), "%llu", (unsigned long long)SIZE_MAX);
    size_ok(big, SIZE_MAX);

    size_bad("", "empty");
    size_bad(NULL, "missing");
    size_bad("k", "not a number");
    size_bad("-1", "not a number");
    size_bad("+1", "not a number");
    size_bad(" 1", "not a number");
    size_bad("0x10", "unknown suffix 'x10'");
    size_bad("1.5m", "unknown suffix '.5m'");
    size_bad("12q", "unknown suffix 'q'");
    size_bad("1 k", "unknown suffix ' k'");
    size_bad("1k ", "trailing characters ' '");
    size_bad("1kk", "trailing characters 'k'");
    size_bad("1kbb", "trailing characters 'b'");
    size_bad("1iB", "unknown suffix 'iB'");
    size_bad("1bi", "trailing characters 'i'");
    size_bad("18446744073709551616", "too large"); /* 2^64 */
    size_bad("99999999999999999999999", "too large");
    size_bad("16777216t", "too large"); /* 2^64 */
    size_bad("17179869184g", "too large");
}

static void uint_ok(const char *text, uint64_t lo, uint64_t hi, uint64_t want)
{
    uint64_t v = SENTINEL;

    CHECKF(opt_uint(text, lo, hi, &v) == 0, "opt_uint(\"%s\") failed: %s",
           text, opt_error());
    CHECK_EQ_U64(v, want);
}

static void uint_bad(const char *text, uint64_t lo, uint64_t hi,
                     const char *why)
{
    uint64_t v = SENTINEL;

    CHECKF(opt_uint(text, lo, hi, &v) == -1, "opt_uint(\"%s\") accepted",
           text ? text : "NULL");
    CHECK_EQ_U64(v, SENTINEL);
    CHECKF(strstr(opt_error(), why) != NULL,
           "opt_uint(\"%s\"): reason \"%s\", expected \"%s\"",
           text ? text : "NULL", opt_error(), why);
}

static void test_uint(void)
{
    uint_ok("0", 0, 10, 0);
    uint_ok("10", 0, 10, 10);
    uint_ok("256", 1, 256, 256);
    uint_ok("18446744073709551615", 0, UINT64_MAX, UINT64_MAX);

    uint_bad("0", 1, 256, "must be at least 1");
    uint_bad("257", 1, 256, "must be at most 256");
    uint_bad("18446744073709551616", 0, UINT64_MAX, "too large");
    uint_bad("4k", 0, UINT64_MAX, "trailing characters 'k'");
    uint_bad("1.0", 0, UINT64_MAX, "trailing characters '.0'");
    uint_bad("", 0, 10, "empty");
    uint_bad("-1", 0, 10, "not a number");
    uint_bad(" 1", 0, 10, "not a number");
    uint_bad("abc", 0, 10, "not a number");
    uint_bad(NULL, 0, 10, "missing");
}

static void duration_ok(const char *text, uint64_t unit, uint64_t want_ns)
{
    uint64_t ns = SENTINEL;

    CHECKF(opt_duration(text, unit, &ns) == 0,
           "opt_duration(\"%s\") failed: %s", text, opt_error());
    CHECKF(ns == want_ns, "opt_duration(\"%s\") = %llu ns, expected %llu",
           text, (unsigned long long)ns, (unsigned long long)want_ns);
}

static void duration_bad(const char *text, uint64_t unit, const char *why)
{
    uint64_t ns = SENTINEL;

    CHECKF(opt_duration(text, unit, &ns) == -1,
           "opt_duration(\"%s\") accepted: %llu ns", text ? text : "NULL",
           (unsigned long long)ns);
    CHECK_EQ_U64(ns, SENTINEL);
    CHECKF(strstr(opt_error(), why) != NULL,
           "opt_duration(\"%s\"): reason \"%s\", expected \"%s\"",
           text ? text : "NULL", opt_error(), why);
}

static void test_duration(void)
{
    duration_ok("250", OPT_MS, 250 * OPT_MS);
    duration_ok("250ms", OPT_S, 250 * OPT_MS);
    duration_ok("0.25s", OPT_MS, 250 * OPT_MS);
    duration_ok("250000us", OPT_S, 250 * OPT_MS);
    duration_ok("3", OPT_S, 3 * OPT_S);
    duration_ok("0.5", OPT_S, OPT_S / 2);
    duration_ok(".5", OPT_S, OPT_S / 2);
    duration_ok("2.", OPT_S, 2 * OPT_S);
    duration_ok("0", OPT_S, 0);
    duration_ok("1.000000001s", OPT_MS, OPT_S + 1);
    duration_ok("1.5us", OPT_S, 1500);
    duration_ok("0.0001us", OPT_S, 0); /* below 1 ns */
    duration_ok("18446744073.709551615s", OPT_MS, 18446744073709551615ull);

    duration_bad("", OPT_S, "empty");
    duration_bad(NULL, OPT_S, "missing");
    duration_bad(".", OPT_S, "not a number");
    duration_bad("s", OPT_S, "not a number");
    duration_bad("-1", OPT_S, "not a number");
    duration_bad(" 1", OPT_S, "not a number");
    duration_bad("1e3", OPT_S, "unknown unit 'e3'");
    duration_bad("5m", OPT_S, "unknown unit 'm'");
    duration_bad("5 s", OPT_S, "trailing characters ' s'");
    duration_bad("5ss", OPT_S, "unknown unit 'ss'");
    duration_bad("1.2.3", OPT_S, "trailing characters '.3'");
    duration_bad("0.0000000001", OPT_S, "more than 9 decimals");
    duration_bad("18446744074s", OPT_S, "too large");
    duration_bad("18446744073.709551616s", OPT_S, "too large");
    duration_bad("99999999999999999999", OPT_NS, "too large");

    CHECK_EQ_U64(opt_ns_to_ms(0), 0);
    CHECK_EQ_U64(opt_ns_to_ms(1), 1);
    CHECK_EQ_U64(opt_ns_to_ms(OPT_MS), 1);
    CHECK_EQ_U64(opt_ns_to_ms(OPT_MS + 1), 2);
    CHECK_EQ_U64(opt_ns_to_ms(5 * OPT_S), 5000);
}

static void test_port_address(void)
{
    char host[16], small[4];
    uint16_t port = 7;

    CHECK(opt_port("0", &port) == 0 && port == 0);
    CHECK(opt_port("65535", &port) == 0 && port == 65535);
    port = 7;
    CHECK(opt_port("65536", &port) == -1 && port == 7);
    CHECK(strstr(opt_error(), "at most 65535") != NULL);
    CHECK(opt_port("80x", &port) == -1 && port == 7);
    CHECK(opt_port("", &port) == -1 && port == 7);

    CHECK(opt_address("127.0.0.1:11311", host, sizeof(host), &port) == 0);
    CHECK(strcmp(host, "127.0.0.1") == 0 && port == 11311);
    CHECK(opt_address("[::1]:0", host, sizeof(host), &port) == 0);
    CHECK(strcmp(host, "::1") == 0 && port == 0);

    strcpy(host, "unchanged");
    port = 7;
    CHECK(opt_address("nohost", host, sizeof(host), &port) == -1);
    CHECKF(strcmp(opt_error(), "expected host:port") == 0,
           "opt_address(\"nohost\"): reason \"%s\"", opt_error());
    CHECK(opt_address("h:65536", host, sizeof(host), &port) == -1);
    CHECKF(strstr(opt_error(), "65535") != NULL && !strstr(opt_error(), "h:"),
           "opt_address(\"h:65536\"): reason \"%s\"", opt_error());
    CHECK(opt_address("::1:80", host, sizeof(host), &port) == -1);
    CHECK(opt_address("h:", host, sizeof(host), &port) == -1);
    CHECK(opt_address(":80", host, sizeof(host), &port) == -1);
    CHECK(opt_address(NULL, host, sizeof(host), &port) == -1);
    CHECK(opt_address("long.host:1", small, sizeof(small), &port) == -1);
    CHECK(strcmp(host, "unchanged") == 0 && port == 7);
}

int main(void)
{
    th_init("unit_options", 30);
    test_size();
    test_uint();
    test_duration();
    test_port_address();
    th_log("ok");
    return 0;
}
