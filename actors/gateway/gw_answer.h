/* actors/gateway/gw_answer.h - what a request's DONE means for an OpenAI
 * answer: its usage object, or the error it ended with. One definition for
 * the gateway (gw_http.c) and the batch engine (actors/batch), so a batch
 * line's response body is the gateway's for the same request. Pure: any
 * thread. */
#ifndef MOON_ACTORS_GW_ANSWER_H
#define MOON_ACTORS_GW_ANSWER_H

#include "gw_errors.h"
#include "gw_format.h"
#include "moonlet/serve_client.h"

/* The usage of a DONE event (details: the request asked for moonlet_details). */
void moon_gw_usage_of_done(const moon_serve_event_t *ev, int details, moon_gw_usage_t *u);

/* A DONE that is not an answer: fills err and returns 1 (cancelled by the
 * server: 503; the others as moon_gw_error_from_done); 0 for stop and length. */
int moon_gw_done_error(uint32_t finish, moon_status_t status, const char *message,
                       moon_gw_error_t *err);

#endif /* MOON_ACTORS_GW_ANSWER_H */
