/*
 * The per-thread error detail behind rdmx_error_detail(), for every layer.
 */
#ifndef RDMX_UTIL_ERROR_H
#define RDMX_UTIL_ERROR_H

#include <rdmx/status.h>

/* Record a detail message for rdmx_error_detail() and return @status. */
rdmx_status_t rdmx__error(rdmx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __clang_analyzer__
/* The same call, written so that the static analyzer (clang-tidy's
 * clang-analyzer-* checks) sees that the result is @status: without it, it
 * follows error paths as if they could return RDMX_OK. */
#define rdmx__error(status, ...)                                               \
    __extension__({                                                            \
        rdmx_status_t rdmx__error_status_ = (status);                          \
        (void)rdmx__error(rdmx__error_status_, __VA_ARGS__);                   \
        rdmx__error_status_;                                                   \
    })
#endif

#endif /* RDMX_UTIL_ERROR_H */
