/* actors/gateway/gw_bridge.h - where the HTTP threads and the actor runtime meet.
 *
 * In: an HTTP thread builds a request's SUBMIT (moon_serve_submit_build,
 * reply_to = the gateway actor), pushes the request onto the inbound ring
 * (Concurrency Kit ck_ring, many producers, the actor the one consumer) and
 * sends the SUBMIT to the conductor itself (no hop through the actor on the
 * way in); the push that finds the actor idle sends it one GW_WAKE message.
 * The actor drains the ring on GW_WAKE, and whenever an event names a
 * request it does not know yet: it keeps each request in its table (ck_ht,
 * by request id); a cancel item becomes a CANCEL to the conductor.
 *
 * Out: the actor hands each TOKEN and DONE message of a request (retained,
 * not copied) to that request's queue (ck_fifo_spsc: the actor produces, the
 * connection's HTTP thread consumes) and resumes the connection if it was
 * parked waiting. DONE ends the actor's part of the request.
 *
 * A request is reference counted: the HTTP side, the actor (from submit to
 * DONE) and each cancel item in the ring hold one. After moon_gw_req_close()
 * the actor never touches the connection again. */
#ifndef MOON_ACTORS_GW_BRIDGE_H
#define MOON_ACTORS_GW_BRIDGE_H

#include "moonlet/actor.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_order.h"

/* The gateway's own message (id 120, a free range): "the inbound ring has
 * items". Registered by moon_gw_bridge_create. */
#define MOON_GW_WAKE_FIELDS(F, T) F(T, u64, n)
/* id 121: "stop admitting, tell when the last request ended" (gateway.h). */
#define MOON_GW_DRAIN_FIELDS(F, T) F(T, u64, n)
#define MOON_GW_MSGS(X)                                                                            \
    X(MOON_MSG_GW_WAKE, moon_gw_wake_t, MOON_GW_WAKE_FIELDS)                                       \
    X(MOON_MSG_GW_DRAIN, moon_gw_drain_t, MOON_GW_DRAIN_FIELDS)
MOON_MSG_DECLARE_IN(MOON_GW_MSGS, GATEWAY, MOON_MSG_GW_END)

typedef struct moon_gw_bridge moon_gw_bridge_t;
typedef struct moon_gw_req    moon_gw_req_t;

/* Parks (suspend) and wakes (resume) a connection; called with the
 * request's wake lock held (a wake never comes before its park). */
typedef void (*moon_gw_conn_fn)(void *conn);

/* The connection a request answers (copied by submit). */
typedef struct {
    moon_gw_conn_fn park, wake;
    void           *arg;           /* passed to park and wake */
    uint64_t        token_wake_ns; /* 0: every event wakes a parked connection; else a
                                      TOKEN wakes it at most once per this long
                                      (UINT64_MAX: never; a whole answer waits for DONE
                                      with no wake-up between); DONE always */
    uint64_t arrival_ns;           /* when the request arrived (moon_now); 0: at submit */
    int      first_token_wakes;    /* the first TOKEN wakes it too, whatever token_wake_ns */
} moon_gw_conn_t;

/* Per-request figures the actor keeps (read by the HTTP side only after DONE). */
typedef struct {
    uint64_t arrival_ns;     /* set by submit */
    uint64_t first_token_ns; /* 0 until the first TOKEN */
    uint64_t last_token_ns;
    uint32_t n_tokens;
} moon_gw_req_times_t;

/* Creates the bridge of the actor `actor` in rt, whose requests go to
 * conductor (capacity: requests in flight
 * on the inbound ring at once, rounded up to a power of two). Called from
 * the actor's init. MOON_ERR_NO_MEMORY, or the message registration's status. */
moon_status_t moon_gw_bridge_create(moon_runtime_t *rt, moon_addr_t actor, moon_addr_t conductor,
                                    uint32_t capacity, moon_gw_bridge_t **bridge_p);
/* From the actor's fini, after the HTTP daemon stopped (no HTTP thread may
 * touch the bridge any more): aborts what is left and frees. Requests the
 * HTTP side still referenced are freed with their last reference. */
void moon_gw_bridge_destroy(moon_gw_bridge_t *bridge);

/* ---- HTTP side (any thread) ------------------------------------------------ */
/* Submits: builds SUBMIT {request id, params} (params borrowed for the call),
 * queues the request for the actor, sends the SUBMIT and wakes the actor
 * (a send that fails ends the request with a DONE error). conn is copied.
 * *req_p gets the HTTP side's reference (close it). MOON_ERR_NO_RESOURCE: the
 * ring is full (answer 503); MOON_ERR_INVALID_PARAM: params refused by the
 * SUBMIT builder; MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_bridge_submit(moon_gw_bridge_t *bridge, const moon_serve_params_t *params,
                                    const moon_gw_conn_t *conn, moon_gw_req_t **req_p);
/* Submits the n (1..MOON_SERVE_MAX_CHOICES) choices of one prompt as one
 * SUBMIT (n_choices n, serve_msgs.h: one prefill, the KV forked on the
 * decode instance): choice i is reqs[i] (id: choice 0's + i), answering
 * conns[i], and resumes alone after a loss (its own seed). As submit
 * otherwise; on an error nothing was submitted. */
moon_status_t moon_gw_bridge_submit_choices(moon_gw_bridge_t          *bridge,
                                            const moon_serve_params_t *params,
                                            const moon_gw_conn_t *conns, uint32_t n,
                                            moon_gw_req_t **reqs);
uint64_t      moon_gw_req_id(const moon_gw_req_t *req);
/* Next TOKEN or DONE message of the request (the caller owns one reference:
 * moon_msg_release it), NULL if none is queued now. The connection's thread only. */
const moon_msg_hdr_t *moon_gw_req_next(moon_gw_req_t *req);
/* Parks the connection (park(conn) under the wake lock) if nothing is
 * queued: returns 1 parked, 0 events are waiting or the request was poked
 * (call next again). */
int moon_gw_req_park(moon_gw_req_t *req);
/* Wakes the connection now if it is parked, and keeps it from parking
 * again (its client hung up: the connection must run to see it). Any thread. */
void moon_gw_req_poke(moon_gw_req_t *req);
/* The HTTP side is done with the request (its connection is closing): no
 * wake after this returns; cancel != 0 and the request not finished: CANCEL
 * goes to the cluster (its KV freed). Drops the HTTP side's reference. */
void moon_gw_req_close(moon_gw_req_t *req, int cancel);
/* The actor's figures (valid once DONE was read from next). */
const moon_gw_req_times_t *moon_gw_req_times(const moon_gw_req_t *req);

/* ---- actor side (the gateway actor's turns) -------------------------------- */
/* Drains the inbound ring: requests into the table, cancels as CANCEL, a
 * SUBMIT that could not be sent as its request's DONE error. */
void moon_gw_bridge_drain(moon_gw_bridge_t *bridge, moon_actor_t *self);
/* The request a TOKEN or DONE names (the ring drained first when the table
 * lacks it), NULL if unknown (stray or late). */
moon_gw_req_t *moon_gw_bridge_find(moon_gw_bridge_t *bridge, moon_actor_t *self,
                                   uint64_t request_id);
/* Actor-owned figures of a live request (update them before deliver). */
moon_gw_req_times_t *moon_gw_req_times_mut(moon_gw_req_t *req);
/* Queues msg (retained) for the request's connection and wakes it. A DONE
 * ends the request on the actor's side (it leaves the table). */
void moon_gw_bridge_deliver(moon_gw_bridge_t *bridge, moon_gw_req_t *req,
                            const moon_msg_hdr_t *msg);
/* Ends every request (those still on the inbound ring too) with a DONE error
 * (the gateway stopping): their connections wake and finish. Cancel items
 * are dropped. */
void moon_gw_bridge_abort(moon_gw_bridge_t *bridge, moon_status_t status, const char *message);
/* Ends every live request with a DONE error of status (conductor lost);
 * returns how many. */
uint32_t moon_gw_bridge_fail_all(moon_gw_bridge_t *bridge, moon_status_t status,
                                 const char *message);
/* Sends CANCEL for every live request, those on the ring too (the gateway
 * stopping: their KV freed). */
void moon_gw_bridge_cancel_all(moon_gw_bridge_t *bridge, moon_actor_t *self);
/* A TOKEN of req (index, token id) arrived: returns 1 to deliver it, 0 to
 * drop it (its index was delivered already: sent before an instance's loss
 * and again by the resumed request). Keeps the ids for a resume. */
int moon_gw_bridge_note_token(moon_gw_req_t *req, uint32_t index, uint32_t token);
/* req's DONE said an instance serving it was lost (MOON_SERVE_RESUMABLE):
 * submits it again under a new id with the tokens it received, so its
 * stream goes on where it stopped. MOON_OK: resubmitted (do not deliver the
 * DONE); MOON_ERR_INVALID_PARAM: its client left or it was resumed
 * max_resumes times; MOON_ERR_NO_MEMORY or the send's status: deliver the
 * DONE instead. */
moon_status_t moon_gw_bridge_resume(moon_gw_bridge_t *bridge, moon_actor_t *self,
                                    moon_gw_req_t *req, uint32_t max_resumes);
/* Receives a request's TOKENs and its DONE in order (moon_gw_bridge_order). */
typedef void (*moon_gw_event_fn)(void *arg, moon_gw_req_t *req, const moon_msg_hdr_t *msg);
/* A TOKEN or DONE of req: its first token comes from the prefill instance,
 * the rest from the decode (serve_msgs.h), so they are put back in order
 * (serve_order.h) first: what is now in order goes to fn, in order. */
void moon_gw_bridge_order(moon_gw_req_t *req, const moon_msg_hdr_t *msg, uint64_t now_ns,
                          moon_gw_event_fn fn, void *arg);
/* Ends the streams that waited MOON_SERVE_ORDER_WAIT_NS for a token that
 * never came with a resumable DONE to fn (so they resume from the tokens
 * their clients have); those whose DONE had not come are cancelled in the
 * cluster. Returns how many. */
uint32_t moon_gw_bridge_order_expire(moon_gw_bridge_t *bridge, moon_actor_t *self, uint64_t now_ns,
                                     moon_gw_event_fn fn, void *arg);
/* Ends every live request that arrived deadline_ns or more before now_ns
 * with a DONE error (MOON_ERR_TIMED_OUT) and cancels it in the cluster;
 * returns how many. deadline_ns 0: none. */
uint32_t moon_gw_bridge_expire(moon_gw_bridge_t *bridge, moon_actor_t *self, uint64_t now_ns,
                               uint64_t deadline_ns);
/* Requests in flight (submitted, not DONE) as the actor sees them. */
uint32_t moon_gw_bridge_n_live(const moon_gw_bridge_t *bridge);

#endif /* MOON_ACTORS_GW_BRIDGE_H */
