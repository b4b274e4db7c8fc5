/* moonlet/status.h - the one status enum of Moonlet (STYLE §4). Every fallible
 * function returns moon_status_t; foreign codes (ucs_status_t, MPI error
 * classes, cudaError_t) are converted only at the backend boundary. */
#ifndef MOONLET_STATUS_H
#define MOONLET_STATUS_H

#include "moonlet/defs.h"

MOON_EXTERN_C_BEGIN

typedef enum {
    MOON_OK                = 0,
    MOON_INPROGRESS        = 1, /* accepted; completion arrives as a message */
    MOON_ERR_NO_MEMORY     = -1,
    MOON_ERR_INVALID_PARAM = -2, /* caller bug, bad config or bad input; nothing changed */
    MOON_ERR_NO_RESOURCE   = -3, /* transient: pool, mailbox or store full, retry */
    MOON_ERR_TIMED_OUT     = -4,
    MOON_ERR_NO_ACTOR      = -5,  /* address stale or never valid, name not registered */
    MOON_ERR_NOT_FOUND     = -6,  /* key, file or entry does not exist */
    MOON_ERR_IO            = -7,  /* operating-system I/O failed (errno logged) */
    MOON_ERR_UNSUPPORTED   = -8,  /* feature not built in or not available here */
    MOON_ERR_ACTOR_FAILED  = -9,  /* a linked/supervised actor failed (escalation) */
    MOON_ERR_CANCELED      = -10, /* operation canceled before completion */
    MOON_ERR_EXISTS        = -11, /* name or key already taken */
    MOON_ERR_CORRUPT       = -12, /* data failed an integrity check */
    MOON_ERR_FIRST_PEER    = -20, /* -20..-29: a remote rank or actor failed */
    MOON_ERR_PEER_LOST     = -20,
    MOON_ERR_PEER_REJECTED = -21, /* the peer refused the request (bad message, no handler) */
    MOON_ERR_LAST_PEER     = -29,
} moon_status_t;

/* Short lowercase description of a status; never NULL, also for unknown values. */
MOON_API const char *moon_status_str(moon_status_t status);

static inline int moon_status_is_peer(moon_status_t status)
{
    return status <= MOON_ERR_FIRST_PEER && status >= MOON_ERR_LAST_PEER;
}

MOON_EXTERN_C_END

#endif /* MOONLET_STATUS_H */
