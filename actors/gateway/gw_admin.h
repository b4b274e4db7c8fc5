/* actors/gw_admin.h - the gateway's admin route, /v1/admin/weights, behind
 * its own bearer key (--admin-key; without one the route is off: 404):
 *   POST {"model": "NEW.gguf", "version": V (optional), "full": false}
 *        pushes the checkpoint (a path on the gateway's host) into the
 *        cluster and answers when it serves, with the figures:
 *        {"object":"weights.push","version":V,"old_version":O,
 *         "total_bytes":..,"moved_bytes":..,"skipped_bytes":..,"chunks":..,
 *         "chunks_moved":..,"instances":..,"stage_s":..,"switch_s":..}
 *        or an error object: 409 a push is under way, 400 a checkpoint the
 *        cluster cannot take (another architecture or tokenizer, corrupt),
 *        404 no such file, 503 an instance lost or too slow, 500 else.
 *   GET  {"object":"weights.state","version":V,"phase":"idle",
 *         "push_version":..,"pushes":..,"failed":..,"last_error":..,
 *         "instances":[{"role":"prefill","index":0,"version":V},..]}
 * A POST waits on a thread of its own (its connection suspended) so the
 * server's threads go on serving during the push; one push at a time. */
#ifndef MOON_ACTORS_GW_ADMIN_H
#define MOON_ACTORS_GW_ADMIN_H

#include "gw_errors.h"
#include "moonlet/weights_client.h"

#include <stddef.h>

typedef struct moon_gw_admin     moon_gw_admin_t;
typedef struct moon_gw_admin_job moon_gw_admin_job_t;

#define MOON_GW_ADMIN_PATH "/v1/admin/weights"

/* key and client are borrowed for the admin's life. MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_admin_create(const char *key, moon_weights_client_t *client,
                                   moon_gw_admin_t **admin_p);
/* Waits for a push thread under way (at most a few seconds: it gives up
 * waiting and answers 503) and frees. NULL: no-op. */
void moon_gw_admin_destroy(moon_gw_admin_t *admin);
/* 1 when the Authorization header value (may be NULL) is "Bearer KEY". */
int moon_gw_admin_authorised(const moon_gw_admin_t *admin, const char *authorization);
/* GET: the state as JSON (moon_free it) and its HTTP status; blocks for the
 * broadcaster's answer (milliseconds). */
char *moon_gw_admin_get(moon_gw_admin_t *admin, int *http_p, size_t *len_p);
/* POST: starts the push of the body's checkpoint on a thread; done(arg) is
 * called from that thread when the answer is ready (resume the connection
 * there). Returns the job, or NULL with err set (answer it now: a bad body,
 * a push under way, no memory). */
moon_gw_admin_job_t *moon_gw_admin_post(moon_gw_admin_t *admin, const char *body, size_t len,
                                        void (*done)(void *arg), void *arg, moon_gw_error_t *err);
/* 1 once the job's answer is ready. */
int moon_gw_admin_job_ready(moon_gw_admin_job_t *job);
/* The answer (JSON, moon_free it) and its status; joins and frees the job. */
char *moon_gw_admin_job_take(moon_gw_admin_job_t *job, int *http_p, size_t *len_p);

#endif /* MOON_ACTORS_GW_ADMIN_H */
