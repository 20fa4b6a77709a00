/*
 * The per-thread error detail behind rdmx_error_detail(), for every layer.
 */
#ifndef RDMX_UTIL_ERROR_H
#define RDMX_UTIL_ERROR_H

#include <rdmx/status.h>

/* Record a detail message for rdmx_error_detail() and return @status. */
rdmx_status_t rdmx__error(rdmx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif /* RDMX_UTIL_ERROR_H */
