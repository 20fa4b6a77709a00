/*
 * Logging to stderr, filtered by level. The level comes from the environment
 * variable RDMX_LOG (error, warn, info, debug); the default is warn.
 */
#ifndef RDMX_UTIL_LOG_H
#define RDMX_UTIL_LOG_H

typedef enum {
    RDMX_LOG_ERROR = 0,
    RDMX_LOG_WARN = 1,
    RDMX_LOG_INFO = 2,
    RDMX_LOG_DEBUG = 3,
} rdmx_log_level_t;

extern int rdmx__log_level;

void rdmx__log(rdmx_log_level_t level, const char *file, int line,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define rdmx_log(level, ...)                                                   \
    do {                                                                       \
        if ((int)(level) <= rdmx__log_level)                                   \
            rdmx__log((level), __FILE__, __LINE__, __VA_ARGS__);               \
    } while (0)

#define rdmx_error(...) rdmx_log(RDMX_LOG_ERROR, __VA_ARGS__)
#define rdmx_warn(...)  rdmx_log(RDMX_LOG_WARN, __VA_ARGS__)
#define rdmx_info(...)  rdmx_log(RDMX_LOG_INFO, __VA_ARGS__)
#define rdmx_debug(...) rdmx_log(RDMX_LOG_DEBUG, __VA_ARGS__)

#endif /* RDMX_UTIL_LOG_H */
