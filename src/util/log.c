/*
 * Logging: one line per message on stderr, "rdmx LEVEL file:line: text".
 */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int log_level_from_env(void)
{
    const char *v = getenv("RDMX_LOG");
    if (v == NULL)
        return RDMX_LOG_WARN;
    if (!strcmp(v, "error"))
        return RDMX_LOG_ERROR;
    if (!strcmp(v, "info"))
        return RDMX_LOG_INFO;
    if (!strcmp(v, "debug"))
        return RDMX_LOG_DEBUG;
    return RDMX_LOG_WARN;
}

int rdmx__log_level = RDMX_LOG_WARN;

__attribute__((constructor)) static void log_init(void)
{
    rdmx__log_level = log_level_from_env();
}

void rdmx__log(rdmx_log_level_t level, const char *file, int line,
               const char *fmt, ...)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    const char *base = strrchr(file, '/');
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    fprintf(stderr, "rdmx %s %s:%d: %s\n", names[level],
            base ? base + 1 : file, line, text);
}
