/*
 * "host:port" on the command line (options.h), through librdmx's own
 * parser so that the tools accept exactly what rdmx_connect() and the
 * listeners accept. Apart from options.c: programs without librdmx link
 * the numeric parsers alone.
 */
#include "options.h"

#include <rdmx/rdmx.h>

#include <string.h>

int opt_address(const char *text, char *host, size_t host_size,
                uint16_t *port_p)
{
    static const char prefix[] = "address '";
    const char *detail;
    size_t n;

    if (text == NULL) {
        return opt__fail("missing");
    }
    if (rdmx_addr_parse(text, host, host_size, port_p) == RDMX_OK) {
        return 0; /* it writes host and port only on success */
    }
    /* "address 'TEXT': why": keep the why, the caller prints TEXT */
    detail = rdmx_error_detail();
    n = strlen(text);
    if (strncmp(detail, prefix, sizeof(prefix) - 1) == 0 &&
        strncmp(detail + sizeof(prefix) - 1, text, n) == 0 &&
        strncmp(detail + sizeof(prefix) - 1 + n, "': ", 3) == 0) {
        detail += sizeof(prefix) - 1 + n + 3;
    }
    return opt__fail("%s", detail[0] ? detail : "expected host:port");
}
