/* base/status.c - text of the status codes. */
#include "moonlet/status.h"

const char *moon_status_str(moon_status_t status)
{
    switch (status) {
    case MOON_OK:
        return "ok";
    case MOON_INPROGRESS:
        return "in progress";
    case MOON_ERR_NO_MEMORY:
        return "out of memory";
    case MOON_ERR_INVALID_PARAM:
        return "invalid parameter";
    case MOON_ERR_NO_RESOURCE:
        return "no resource (retry)";
    case MOON_ERR_TIMED_OUT:
        return "timed out";
    case MOON_ERR_NO_ACTOR:
        return "no such actor";
    case MOON_ERR_NOT_FOUND:
        return "not found";
    case MOON_ERR_IO:
        return "i/o error";
    case MOON_ERR_UNSUPPORTED:
        return "unsupported";
    case MOON_ERR_ACTOR_FAILED:
        return "actor failed";
    case MOON_ERR_CANCELED:
        return "canceled";
    case MOON_ERR_EXISTS:
        return "already exists";
    case MOON_ERR_CORRUPT:
        return "data corrupt";
    case MOON_ERR_PEER_LOST:
        return "peer lost";
    case MOON_ERR_PEER_REJECTED:
        return "peer rejected the request";
    default:
        return moon_status_is_peer(status) ? "peer error" : "unknown status";
    }
}
