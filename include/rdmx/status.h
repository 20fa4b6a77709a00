/*
 * rdmx — status codes.
 *
 * Every rdmx function that can fail returns an rdmx_status_t. RDMX_OK is 0,
 * RDMX_INPROGRESS is 1 (the operation was started and its callback will
 * run), and every error is negative. The list below is the only place the
 * codes and their strings are defined.
 */
#ifndef RDMX_STATUS_H
#define RDMX_STATUS_H

#include <rdmx/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, description) */
#define RDMX_STATUS_LIST(X)                                                    \
    X(RDMX_OK, 0, "success")                                                   \
    X(RDMX_INPROGRESS, 1, "operation in progress")                             \
    X(RDMX_ERR_INVALID, -1, "invalid argument")                                \
    X(RDMX_ERR_NO_MEMORY, -2, "out of memory")                                 \
    X(RDMX_ERR_NO_RESOURCE, -3, "resources exhausted, progress and retry")     \
    X(RDMX_ERR_TIMEOUT, -4, "timed out")                                       \
    X(RDMX_ERR_CANCELED, -5, "canceled")                                       \
    X(RDMX_ERR_NOT_FOUND, -6, "not found")                                     \
    X(RDMX_ERR_TOO_BIG, -7, "message or buffer too big or too small")          \
    X(RDMX_ERR_OUT_OF_RANGE, -8, "offset or length outside the region")        \
    X(RDMX_ERR_CONN_REFUSED, -9, "connection refused")                         \
    X(RDMX_ERR_CONN_RESET, -10, "connection reset by peer")                    \
    X(RDMX_ERR_CONN_CLOSED, -11, "connection closed")                          \
    X(RDMX_ERR_UNREACHABLE, -12, "address unreachable or unresolvable")        \
    X(RDMX_ERR_ADDR_IN_USE, -13, "address already in use")                     \
    X(RDMX_ERR_PROTO, -14, "protocol error")                                   \
    X(RDMX_ERR_BAD_DESCRIPTOR, -15, "corrupt or unsupported descriptor")       \
    X(RDMX_ERR_DENIED, -16, "permission denied")                               \
    X(RDMX_ERR_UNSUPPORTED, -17, "not supported")                              \
    X(RDMX_ERR_BUSY, -18, "busy")                                              \
    X(RDMX_ERR_IO, -19, "transport I/O error")                                 \
    X(RDMX_ERR_EXISTS, -20, "already exists")                                  \
    X(RDMX_ERR_INTERNAL, -21, "internal error")

typedef enum {
#define RDMX_STATUS_ENUM_(name, value, desc) name = value,
    RDMX_STATUS_LIST(RDMX_STATUS_ENUM_)
#undef RDMX_STATUS_ENUM_
} rdmx_status_t;

/** A short, constant description of @p status ("connection refused"). */
RDMX_API const char *rdmx_strerror(rdmx_status_t status);

/** The symbolic name of @p status ("RDMX_ERR_CONN_REFUSED"). */
RDMX_API const char *rdmx_status_name(rdmx_status_t status);

/**
 * Detail of the last error an rdmx call returned on this thread: what was
 * wrong, with the values involved ("put: offset 4096 + length 8 exceeds
 * descriptor length 4096"). Valid until the next rdmx call on this thread;
 * an empty string when no detail was recorded.
 */
RDMX_API const char *rdmx_error_detail(void);

#ifdef __cplusplus
}
#endif

#endif /* RDMX_STATUS_H */
