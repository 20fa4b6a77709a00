/*
 * UCX status codes in rdmx's terms.
 */
#include "core/internal.h"

/* Map a UCX status to ours. Connection-level failures keep their meaning;
 * anything unexpected is an I/O error. */
rdmx_status_t rdmx__from_ucs(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return RDMX_OK;
    case UCS_INPROGRESS:
        return RDMX_INPROGRESS;
    case UCS_ERR_NO_MEMORY:
        return RDMX_ERR_NO_MEMORY;
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
        return RDMX_ERR_NO_RESOURCE;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
        return RDMX_ERR_TIMEOUT;
    case UCS_ERR_CANCELED:
        return RDMX_ERR_CANCELED;
    case UCS_ERR_NO_ELEM:
        return RDMX_ERR_NOT_FOUND;
    case UCS_ERR_MESSAGE_TRUNCATED:
        return RDMX_ERR_TOO_BIG;
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
        return RDMX_ERR_CONN_REFUSED;
    case UCS_ERR_CONNECTION_RESET:
        return RDMX_ERR_CONN_RESET;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_INVALID_ADDR:
        return RDMX_ERR_UNREACHABLE;
    case UCS_ERR_BUSY:
        return RDMX_ERR_BUSY;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE:
        return RDMX_ERR_UNSUPPORTED;
    case UCS_ERR_INVALID_PARAM:
        return RDMX_ERR_INVALID;
    default:
        return RDMX_ERR_IO;
    }
}
