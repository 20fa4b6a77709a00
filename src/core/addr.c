/*
 * Address strings: "host:port", "[v6]:port"; loopback detection; version.
 */
#include "core/internal.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *rdmx_version(void)
{
    return RDMX_VERSION_STRING;
}

rdmx_status_t rdmx_addr_parse(const char *address, char *host,
                              size_t host_size, uint16_t *port_p)
{
    const char *colon, *hbeg, *hend;
    char *end;
    unsigned long port;

    if (address == NULL || host == NULL || port_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "address: NULL argument");
    if (address[0] == '[') {
        hbeg = address + 1;
        hend = strchr(hbeg, ']');
        if (hend == NULL || hend[1] != ':')
            return rdmx__error(RDMX_ERR_INVALID,
                               "address '%s': expected [v6addr]:port",
                               address);
        colon = hend + 1;
    } else {
        hbeg = address;
        colon = strrchr(address, ':');
        if (colon == NULL)
            return rdmx__error(RDMX_ERR_INVALID,
                               "address '%s': expected host:port", address);
        hend = colon;
        if (memchr(hbeg, ':', (size_t)(hend - hbeg)) != NULL)
            return rdmx__error(RDMX_ERR_INVALID,
                               "address '%s': write IPv6 as [addr]:port",
                               address);
    }
    if (hend == hbeg)
        return rdmx__error(RDMX_ERR_INVALID, "address '%s': empty host",
                           address);
    if ((size_t)(hend - hbeg) >= host_size)
        return rdmx__error(RDMX_ERR_INVALID, "address '%s': host too long",
                           address);
    if (colon[1] == '\0')
        return rdmx__error(RDMX_ERR_INVALID, "address '%s': empty port",
                           address);
    port = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || port > 65535 || colon[1] == '-' || colon[1] == '+')
        return rdmx__error(RDMX_ERR_INVALID,
                           "address '%s': port must be 0..65535", address);
    memcpy(host, hbeg, (size_t)(hend - hbeg));
    host[hend - hbeg] = '\0';
    *port_p = (uint16_t)port;
    return RDMX_OK;
}

int rdmx_host_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;

    if (host == NULL)
        return 0;
    if (!strcmp(host, "localhost") || !strcmp(host, "ip6-localhost"))
        return 1;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}
