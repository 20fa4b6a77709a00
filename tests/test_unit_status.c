/*
 * unit_status: the library's pure helpers behave as documented.
 *
 * - Every status of RDMX_STATUS_LIST has its symbolic name (exactly the
 *   enumerator's spelling) and its description; values outside the list
 *   still get a printable, non-empty string.
 * - rdmx_addr_parse splits "host:port" and "[v6]:port", rejects missing or
 *   out-of-range ports and missing separators, and never writes past the
 *   host buffer it is given.
 * - rdmx_host_is_loopback recognises 127/8, ::1 and localhost, and nothing
 *   else.
 * - rdmx_transport_parse / rdmx_transport_name round-trip the four names
 *   and reject anything else; rdmx_version matches the header's version.
 * No network, no UCX context.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <stdio.h>
#include <string.h>

static const struct {
    rdmx_status_t status;
    const char *name;
    const char *desc;
} statuses[] = {
#define ENTRY_(n, v, d) {n, #n, d},
    RDMX_STATUS_LIST(ENTRY_)
#undef ENTRY_
};

static void test_statuses(void)
{
    size_t i, j, n = sizeof(statuses) / sizeof(statuses[0]);
    const int unknown[] = {2, 3, 100, -22, -1000, 0x7fffffff};

    CHECK(n >= 23);
    for (i = 0; i < n; i++) {
        const char *name = rdmx_status_name(statuses[i].status);
        const char *str = rdmx_strerror(statuses[i].status);

        CHECKF(name != NULL && strcmp(name, statuses[i].name) == 0,
               "rdmx_status_name(%d) = %s, expected %s",
               (int)statuses[i].status, name ? name : "NULL", statuses[i].name);
        CHECKF(str != NULL && strcmp(str, statuses[i].desc) == 0 &&
                   str[0] != '\0',
               "rdmx_strerror(%s) = %s", statuses[i].name, str ? str : "NULL");
        /* Values are unique; OK is 0, INPROGRESS 1, errors negative. */
        for (j = 0; j < i; j++)
            CHECK(statuses[j].status != statuses[i].status);
        if (statuses[i].status != RDMX_OK &&
            statuses[i].status != RDMX_INPROGRESS)
            CHECK(statuses[i].status < 0);
    }
    CHECK(RDMX_OK == 0 && RDMX_INPROGRESS == 1);
    for (i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        const char *name = rdmx_status_name((rdmx_status_t)unknown[i]);
        const char *str = rdmx_strerror((rdmx_status_t)unknown[i]);

        CHECKF(name != NULL && name[0] != '\0',
               "rdmx_status_name(%d) gave no string", unknown[i]);
        CHECKF(str != NULL && str[0] != '\0',
               "rdmx_strerror(%d) gave no string", unknown[i]);
    }
    CHECK(rdmx_error_detail() != NULL);
}

static void parse_ok(const char *addr, const char *want_host,
                     unsigned want_port)
{
    char host[256];
    uint16_t port = 12345;

    memset(host, 'x', sizeof(host));
    CHECKF(rdmx_addr_parse(addr, host, sizeof(host), &port) == RDMX_OK,
           "rdmx_addr_parse(\"%s\") failed: %s (%s)", addr,
           rdmx_status_name(rdmx_addr_parse(addr, host, sizeof(host), &port)),
           rdmx_error_detail());
    CHECKF(strcmp(host, want_host) == 0 && port == want_port,
           "rdmx_addr_parse(\"%s\") = \"%s\" port %u, expected \"%s\" %u", addr,
           host, (unsigned)port, want_host, want_port);
}

static void parse_bad(const char *addr)
{
    char host[256];
    uint16_t port = 0;
    rdmx_status_t st = rdmx_addr_parse(addr, host, sizeof(host), &port);

    CHECKF(st == RDMX_ERR_INVALID,
           "rdmx_addr_parse(\"%s\") returned %s, expected RDMX_ERR_INVALID",
           addr ? addr : "NULL", rdmx_status_name(st));
}

static void test_addr_parse(void)
{
    char small[8];
    uint16_t port = 0;
    rdmx_status_t st;

    parse_ok("h:1", "h", 1);
    parse_ok("[::1]:80", "::1", 80);
    parse_ok("127.0.0.1:13337", "127.0.0.1", 13337);
    parse_ok("localhost:0", "localhost", 0);
    parse_ok("example.org:65535", "example.org", 65535);
    parse_ok("[fe80::1:2]:443", "fe80::1:2", 443);

    parse_bad("nohost");
    parse_bad("h:99999");
    parse_bad("h:65536");
    parse_bad("h:");
    parse_bad("h:-1");
    parse_bad("h:12ab");
    parse_bad("[::1]");
    parse_bad("[::1:80");
    parse_bad("");
    parse_bad(NULL);

    /* A host longer than the buffer: an error, and nothing written past
     * the size given. */
    {
        char buf[40];
        size_t i;

        memset(buf, 0x5a, sizeof(buf));
        st = rdmx_addr_parse("averylonghostname:1", buf, 8, &port);
        CHECKF(st == RDMX_ERR_TOO_BIG || st == RDMX_ERR_INVALID,
               "host too long for the buffer: %s", rdmx_status_name(st));
        for (i = 8; i < sizeof(buf); i++)
            CHECKF(buf[i] == 0x5a,
                   "rdmx_addr_parse wrote byte %zu of a "
                   "host buffer of 8",
                   i);
    }
    /* Exactly fitting (7 chars + NUL). */
    CHECK_OK(rdmx_addr_parse("abcdefg:9", small, sizeof(small), &port));
    CHECK(strcmp(small, "abcdefg") == 0 && port == 9);
}

static void test_loopback(void)
{
    const char *yes[] = {"127.0.0.1", "127.1.2.3", "127.255.255.254", "::1",
                         "localhost"};
    const char *no[] = {"0.0.0.0",  "10.0.0.1", "128.0.0.1", "192.168.1.1",
                        "::",       "fe80::1",  "",          "example.org",
                        "1.127.0.0"};
    size_t i;

    for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        CHECKF(rdmx_host_is_loopback(yes[i]), "\"%s\" is loopback", yes[i]);
    for (i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        CHECKF(!rdmx_host_is_loopback(no[i]), "\"%s\" is not loopback", no[i]);
}

static void test_transport(void)
{
    static const struct {
        const char *name;
        rdmx_transport_t t;
    } good[] = {{"auto", RDMX_TRANSPORT_AUTO},
                {"shm", RDMX_TRANSPORT_SHM},
                {"tcp", RDMX_TRANSPORT_TCP},
                {"rdma", RDMX_TRANSPORT_RDMA}};
    const char *bad[] = {"", "tcpx", "sh", "rdma ", "ib", "all"};
    size_t i;

    for (i = 0; i < 4; i++) {
        rdmx_transport_t t = (rdmx_transport_t)99;
        const char *name;

        CHECK_OK(rdmx_transport_parse(good[i].name, &t));
        CHECK(t == good[i].t);
        name = rdmx_transport_name(good[i].t);
        CHECK(name != NULL && strcmp(name, good[i].name) == 0);
    }
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rdmx_transport_t t = RDMX_TRANSPORT_TCP;

        CHECKF(rdmx_transport_parse(bad[i], &t) == RDMX_ERR_INVALID,
               "rdmx_transport_parse(\"%s\") accepted", bad[i]);
    }
    CHECK(rdmx_transport_parse(NULL, NULL) == RDMX_ERR_INVALID);
    CHECK(rdmx_transport_name((rdmx_transport_t)99) == NULL);
    CHECK(rdmx_transport_name((rdmx_transport_t)-1) == NULL);
}

static void test_version(void)
{
    char want[32];
    const char *v = rdmx_version();

    snprintf(want, sizeof(want), "%d.%d.%d", RDMX_VERSION_MAJOR,
             RDMX_VERSION_MINOR, RDMX_VERSION_PATCH);
    CHECKF(v != NULL && strcmp(v, want) == 0, "rdmx_version() = %s, not %s",
           v ? v : "NULL", want);
}

/* A program built against newer headers, or another major version, is
 * refused by name; one built against an older release of the same major
 * version runs. */
static void test_version_check(void)
{
    const unsigned newer[] = {
        RDMX_VERSION_NUMBER + 1,
        RDMX_VERSION_NUMBER_OF(RDMX_VERSION_MAJOR, RDMX_VERSION_MINOR + 1, 0),
        RDMX_VERSION_NUMBER_OF(RDMX_VERSION_MAJOR + 1, 0, 0),
    };
    rdmx_context_t *ctx = NULL;
    rdmx_status_t st;

    for (size_t i = 0; i < sizeof(newer) / sizeof(newer[0]); i++) {
        st = rdmx_context_create_v(newer[i], NULL, &ctx);
        CHECKF(st == RDMX_ERR_UNSUPPORTED, "api 0x%06x: %s", newer[i],
               rdmx_status_name(st));
        CHECKF(strstr(rdmx_error_detail(), "built against rdmx") != NULL &&
                   strstr(rdmx_error_detail(), RDMX_VERSION_STRING) != NULL,
               "detail: %s", rdmx_error_detail());
    }
    st = rdmx_context_create_v(RDMX_VERSION_NUMBER_OF(RDMX_VERSION_MAJOR, 0, 0),
                               NULL, &ctx);
    CHECKF(st == RDMX_OK, "older api of the same major: %s (%s)",
           rdmx_status_name(st), rdmx_error_detail());
    rdmx_context_destroy(ctx);
    CHECK(rdmx_context_create(NULL, &ctx) == RDMX_OK);
    rdmx_context_destroy(ctx);
}

int main(void)
{
    th_init("unit_status", 30);
    test_statuses();
    test_addr_parse();
    test_loopback();
    test_transport();
    test_version();
    test_version_check();
    th_log("ok");
    return 0;
}
