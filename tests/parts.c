/* Tests made of parts (parts.h). */
#include "parts.h"

#include <setjmp.h>
#include <stdarg.h>

static jmp_buf part_jmp;
static int failures;
static const char *part_name = "setup";

void part_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    th_log("FAIL %s:%d (part %s; continuing with the next part): %s", file,
           line, part_name, msg);
    failures++;
    longjmp(part_jmp, 1);
}

void run_part(const char *name, void (*fn)(void))
{
    double t0 = th_now_ms();

    part_name = name;
    if (setjmp(part_jmp) == 0) {
        fn();
        th_log("%s: ok (%.0f ms)", name, th_now_ms() - t0);
    } else {
        th_log("%s: FAILED (%.0f ms)", name, th_now_ms() - t0);
    }
}

int parts_failed(void)
{
    return failures;
}

void parts_add_failure(void)
{
    failures++;
}
