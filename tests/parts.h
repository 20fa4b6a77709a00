/*
 * Tests made of parts: a failed check inside a part is reported and the
 * test goes on with the next part (run_part); parts_failed() says how many
 * failed. Used by kv_ops and lambda_rpc, so one bug does not hide others.
 */
#ifndef RDMX_TEST_PARTS_H
#define RDMX_TEST_PARTS_H

#include "harness.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

/* Report a failed check of the running part and leave it. */
__attribute__((noreturn, format(printf, 3, 4))) void
part_fail(const char *file, int line, const char *fmt, ...);

/* Run @p fn as the part @p name; its failures end it, not the test. */
void run_part(const char *name, void (*fn)(void));

/* Parts that failed so far (plus failures counted outside a part). */
int parts_failed(void);

/* Count a failure found outside any part (e.g. at teardown). */
void parts_add_failure(void);

#define EXPECT(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond))                                                           \
            part_fail(__FILE__, __LINE__, __VA_ARGS__);                        \
    } while (0)

#define EXPECT_ST(expr, want)                                                  \
    do {                                                                       \
        rdmx_status_t st_ = (expr);                                            \
        if (st_ != (want)) {                                                   \
            char d_[512];                                                      \
            snprintf(d_, sizeof(d_), "%s", rdmx_error_detail());               \
            part_fail(__FILE__, __LINE__,                                      \
                      "%s returned %s, expected %s; detail: %s", #expr,        \
                      rdmx_status_name(st_), rdmx_status_name(want),           \
                      d_[0] ? d_ : "(none)");                                  \
        }                                                                      \
    } while (0)

#define EXPECT_OK(expr) EXPECT_ST(expr, RDMX_OK)

#define EXPECT_EQ(a, b)                                                        \
    do {                                                                       \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                       \
        if (a_ != b_)                                                          \
            part_fail(__FILE__, __LINE__, "%s == %s: %" PRIu64 " != %" PRIu64, \
                      #a, #b, a_, b_);                                         \
    } while (0)

#endif /* RDMX_TEST_PARTS_H */
