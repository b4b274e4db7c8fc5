/* actors/plugin/plugin_hooks.h - where plugins meet the request path: the
 * conductor's gate (request filters with their deadlines, and the request
 * events it sees) and the decode instances' token events. With no plugin
 * loaded a hook costs one test of a global (moon_plugin_observes) or of a
 * NULL gate. Each gate belongs to one conductor (its thread). */
#ifndef MOON_ACTORS_PLUGIN_HOOKS_H
#define MOON_ACTORS_PLUGIN_HOOKS_H

#include "moonlet/plugin.h"
#include "plugin_host.h"
#include "moonlet/serve_msgs.h"

/* 1 when some observer wants events of kind (moon_plugin_ev_t). */
static inline int moon_plugin_observes(uint32_t kind)
{
    return (moon_plugin_ev_mask_ & kind) != 0;
}

/* Sends ev (a template: kind and fields set, spans unset; borrowed) with key
 * and message (NULL: "") from self to every observer of ev->kind. Best
 * effort: failures are counted in a limited log line. */
void moon_plugin_emit(moon_actor_t *self, const moon_plugin_event_t *ev, const char *key,
                      const char *message);

/* Decode: a token went to the client (index 0: the first, ttft_ns set).
 * FIRST_TOKEN leaves at once; TOKEN is queued (per thread) until
 * moon_plugin_tokens_flush, which the decode instance calls where its own
 * step batch leaves, or when the queue is full. */
void moon_plugin_token_slow(moon_actor_t *self, moon_addr_t client, uint64_t request_id,
                            uint32_t index, uint32_t token, uint64_t ttft_ns);
static inline void moon_plugin_token(moon_actor_t *self, moon_addr_t client, uint64_t request_id,
                                     uint32_t index, uint32_t token, uint64_t ttft_ns)
{
    if (moon_plugin_ev_mask_ & (MOON_PLUGIN_EV_TOKEN | MOON_PLUGIN_EV_FIRST_TOKEN)) {
        moon_plugin_token_slow(self, client, request_id, index, token, ttft_ns);
    }
}

/* Sends the queued tokens to the TOKEN observers, one TOKENS each. */
void moon_plugin_tokens_flush_slow(moon_actor_t *self);

static inline void moon_plugin_tokens_flush(moon_actor_t *self)
{
    if (moon_plugin_ev_mask_ & MOON_PLUGIN_EV_TOKEN) {
        moon_plugin_tokens_flush_slow(self);
    }
}

/* ---- the conductor's gate -------------------------------------------------- */
typedef struct moon_plugin_gate moon_plugin_gate_t;

/* NULL in *gate_p (MOON_OK) when no filter and no observer is registered.
 * max_requests bounds the requests waiting for verdicts. */
moon_status_t moon_plugin_gate_create(uint32_t max_requests, moon_plugin_gate_t **gate_p);
/* Releases what waits (nothing is answered). NULL: no-op. */
void moon_plugin_gate_destroy(moon_plugin_gate_t *gate);

/* What the filters decided on a request. */
typedef struct {
    const moon_serve_submit_t *m;   /* the SUBMIT to go on with (a reference: outcome_fini) */
    int32_t                   *ids; /* its tokens (owned: outcome_fini frees them) */
    uint32_t                   n;
    int                        rejected;
    uint32_t                   http_status, retry_after_s;
    char                       message[256];
} moon_plugin_outcome_t;
void moon_plugin_outcome_fini(moon_plugin_outcome_t *out);

/* A validated request with its tokens ids (n; ownership moves to the gate
 * on MOON_INPROGRESS). MOON_OK: no filter, go on (ids still the caller's);
 * MOON_INPROGRESS: FILTER sent, the outcome comes from on_verdict or
 * on_timer; MOON_ERR_NO_RESOURCE: too many requests wait for verdicts
 * (reject it); MOON_ERR_NO_MEMORY. */
moon_status_t moon_plugin_gate_filter(moon_plugin_gate_t *gate, moon_actor_t *self,
                                      const moon_serve_submit_t *m, int32_t *ids, uint32_t n);
/* A VERDICT, or a TIMER of the gate's. MOON_OK: *out is ready (the request
 * passed every filter, or was rejected); MOON_INPROGRESS: sent to the next
 * filter; MOON_ERR_NOT_FOUND: stale (the request was decided already). */
moon_status_t moon_plugin_gate_on_verdict(moon_plugin_gate_t *gate, moon_actor_t *self,
                                          const moon_msg_hdr_t *msg, moon_plugin_outcome_t *out);
moon_status_t moon_plugin_gate_on_timer(moon_plugin_gate_t *gate, moon_actor_t *self,
                                        const moon_msg_hdr_t *msg, moon_plugin_outcome_t *out);

/* A CANCEL of (client, request_id): MOON_OK when it waited for a filter
 * (then nothing waits any more and the caller answers it; its n prompt
 * tokens in *n_prompt_p); MOON_ERR_NOT_FOUND when it did not. */
moon_status_t moon_plugin_gate_cancel(moon_plugin_gate_t *gate, moon_actor_t *self,
                                      moon_addr_t client, uint64_t request_id,
                                      uint32_t *n_prompt_p);

/* Request events the conductor sees (no-ops with a NULL gate or without
 * observers of them). */
void moon_plugin_gate_admitted(moon_plugin_gate_t *gate, moon_actor_t *self,
                               const moon_serve_submit_t *m, uint32_t n_prompt, int32_t prefill,
                               int32_t decode);
void moon_plugin_gate_rejected(moon_plugin_gate_t *gate, moon_actor_t *self,
                               const moon_serve_submit_t *m, uint32_t n_prompt,
                               moon_status_t status, uint32_t http_status, const char *why);
void moon_plugin_gate_finished(moon_plugin_gate_t *gate, moon_actor_t *self, moon_addr_t client,
                               uint64_t request_id, uint32_t finish, uint32_t n_completion);
/* Store events (MOON_STORE_EVENT_U64S u64 each: kind, key lo, key hi, ...). */
void moon_plugin_gate_store(moon_plugin_gate_t *gate, moon_actor_t *self, const uint64_t *ev,
                            uint32_t n_events, uint32_t u64s_per_event);

#endif /* MOON_ACTORS_PLUGIN_HOOKS_H */
