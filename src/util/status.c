/*
 * Status strings and the per-thread error detail (rdmx_error_detail()):
 * every layer records why a call failed with rdmx__error().
 */
#include "util/error.h"

#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>

static __thread char error_detail[256];

const char *rdmx_strerror(rdmx_status_t status)
{
    switch (status) {
#define RDMX_STATUS_STR_(name, value, desc)                                    \
    case name:                                                                 \
        return desc;
        RDMX_STATUS_LIST(RDMX_STATUS_STR_)
#undef RDMX_STATUS_STR_
    }
    return "unknown status";
}

const char *rdmx_status_name(rdmx_status_t status)
{
    switch (status) {
#define RDMX_STATUS_NAME_(name, value, desc)                                   \
    case name:                                                                 \
        return #name;
        RDMX_STATUS_LIST(RDMX_STATUS_NAME_)
#undef RDMX_STATUS_NAME_
    }
    return "RDMX_UNKNOWN";
}

const char *rdmx_error_detail(void)
{
    return error_detail;
}

/* (The name in parentheses: error.h may define rdmx__error as a macro.) */
rdmx_status_t(rdmx__error)(rdmx_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_detail, sizeof(error_detail), fmt, ap);
    va_end(ap);
    rdmx_debug("%s: %s", rdmx_status_name(status), error_detail);
    return status;
}

