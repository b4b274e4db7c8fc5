/* actors/gateway/gw_errors.h - OpenAI error objects: what the gateway answers when a
 * request cannot be served, as {"error": {"message", "type", "param", "code"}}
 * with the HTTP status that goes with it.
 *
 *   status  type                    code (default)          when
 *   400     invalid_request_error   null                    bad JSON (a key twice, data after
 *                                                           the value, a NUL), wrong types,
 *                                                           missing fields, a field over its
 *                                                           cap, prompt over the context,
 *                                                           ambiguous HTTP framing
 *   401     invalid_request_error   invalid_api_key         --api-key set, Bearer missing/wrong
 *   404     invalid_request_error   not_found               unknown route; model_not_found
 *   405     invalid_request_error   method_not_allowed      known route, other method
 *   408     invalid_request_error   request_timeout         body not received in time
 *   413     invalid_request_error   request_too_large       body over the limit
 *   429     rate_limit_error        rate_limit_exceeded     early rejection, or the gateway at
 *                                                           its max-requests (Retry-After)
 *   500     server_error            internal_error          a failure in the cluster
 *   501     invalid_request_error   not_implemented         a Transfer-Encoding other than chunked
 *   503     server_error            service_unavailable     not ready, a role down, full
 * Plain data, no threads of its own. */
#ifndef MOON_ACTORS_GW_ERRORS_H
#define MOON_ACTORS_GW_ERRORS_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

#include <stdint.h>

typedef struct {
    int         http;      /* HTTP status; 0: no error */
    const char *type;      /* static */
    const char *code;      /* static; NULL: JSON null */
    char        param[64]; /* "" : JSON null */
    char        message[320];
    uint32_t    retry_after_s; /* 429: the Retry-After header (0: none) */
} moon_gw_error_t;

/* Fills err: type and default code from http (code non-NULL overrides it),
 * param (NULL: null) and the printf-style message. Retry-After 1 s for 429. */
void moon_gw_error_set(moon_gw_error_t *err, int http, const char *code, const char *param,
                       const char *fmt, ...) MOON_PRINTF(5, 6);

/* The error object as compact JSON, moon_malloc'd (moon_free it); NULL when
 * out of memory. */
char *moon_gw_error_json(const moon_gw_error_t *err);

/* What a DONE that ended a request without an answer means for HTTP:
 * rejected -> 429, error with MOON_ERR_INVALID_PARAM -> 400, with
 * MOON_ERR_NO_RESOURCE, a lost peer or actor -> 503, other errors -> 500.
 * Returns 1 and fills err for those; 0 for stop, length and cancelled. */
int moon_gw_error_from_done(uint32_t finish, moon_status_t status, const char *message,
                            moon_gw_error_t *err);

#endif /* MOON_ACTORS_GW_ERRORS_H */
