/* launch/sim/sim_driver.c - the replay client actor (sim_driver.h): one timer at
 * a time, for the next arrival; each request's events put in order (its
 * first token comes from the prefill, the rest from the decode: a fault's
 * delay or loss can reorder them, serve_order.h), then into the records. */
#include "sim_driver.h"

#include "moonlet/serve_client.h"
#include "moonlet/serve_order.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"

typedef struct {
    moon_sim_driver_args_t a;
    uint64_t               t0_ns; /* virtual time of the trace's 0 */
    size_t                 next;  /* next request to submit */
    size_t                 n_done;
    int32_t               *tokens; /* (max input_length) prompt scratch */
    moon_serve_order_t    *order;  /* (n_reqs) each request's stream */
} driver_t;

/* A timer's cookie with this bit: request (cookie & ~bit)'s stream waits
 * for a token; else the next arrival's. */
#define DRIVER_WAIT_TIMER (1ull << 63)

static moon_status_t arm(moon_actor_t *self, driver_t *d)
{
    uint64_t now = moon_now(moon_actor_runtime(self)), at, timer;

    if (d->next >= d->a.trace->n_reqs) {
        return MOON_OK;
    }
    at = d->t0_ns + moon_trace_arrival_ns(&d->a.trace->reqs[d->next], d->a.time_scale);
    return moon_timer_start(self, at > now ? at - now : 0, 0, 0, &timer);
}

static moon_status_t driver_init(moon_actor_t *self, const void *args)
{
    driver_t                     *d      = moon_actor_state(self);
    const moon_sim_driver_args_t *a      = args;
    uint32_t                      max_in = 0;

    if (a == NULL || a->trace == NULL || a->recs == NULL || a->recs->n != a->trace->n_reqs ||
        !(a->time_scale > 0.0) || a->first_token_id >= a->vocab_size) {
        MOON_ERROR("replay driver: bad arguments");
        return MOON_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < a->trace->n_reqs; i++) {
        max_in = a->trace->reqs[i].input_length > max_in ? a->trace->reqs[i].input_length : max_in;
    }
    d->tokens = moon_malloc((size_t)max_in * sizeof(int32_t));
    d->order  = moon_calloc(a->trace->n_reqs + 1, sizeof(*d->order));
    if (d->tokens == NULL || d->order == NULL) {
        moon_free(d->tokens);
        moon_free(d->order);
        return MOON_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < a->trace->n_reqs; i++) {
        moon_serve_order_init(&d->order[i], 0);
    }
    d->a     = *a;
    d->t0_ns = moon_now(moon_actor_runtime(self)) + a->start_ns;
    return arm(self, d);
}

static void driver_fini(moon_actor_t *self)
{
    driver_t *d = moon_actor_state(self);

    for (size_t i = 0; d->order != NULL && i < d->a.trace->n_reqs; i++) {
        moon_serve_order_fini(&d->order[i]);
    }
    moon_free(d->order);
    moon_free(d->tokens);
}

static void ended(moon_actor_t *self, driver_t *d)
{
    d->n_done++;
    if (d->a.progress != NULL) {
        moon_progress_update(d->a.progress, d->n_done,
                             (double)(moon_now(moon_actor_runtime(self)) - d->t0_ns) * 1e-9);
    }
    if (d->n_done == d->a.trace->n_reqs) {
        if (d->a.done != NULL) {
            atomic_store(d->a.done, 1); /* release: the records are complete */
        } else {
            moon_runtime_shutdown(moon_actor_runtime(self), 0);
        }
    }
}

/* Submits request i now; a refused submit is recorded as an error. */
static moon_status_t submit(moon_actor_t *self, driver_t *d, size_t i, uint64_t now)
{
    const moon_trace_req_t *r = &d->a.trace->reqs[i];
    moon_serve_params_t     p;
    moon_status_t           status;

    moon_sim_records_arrive(d->a.recs, (uint32_t)i, now - d->t0_ns, r->input_length);
    status = moon_trace_fill_tokens(r, d->a.trace->block_tokens, d->a.first_token_id,
                                    d->a.vocab_size, d->a.seed, d->tokens);
    if (status == MOON_OK) {
        moon_serve_params_default(&p);
        p.tokens     = d->tokens;
        p.n_tokens   = r->input_length;
        p.max_tokens = r->output_length;
        p.flags      = MOON_SERVE_F_IGNORE_EOS;
        status       = moon_serve_submit(self, d->a.conductor, i, &p);
    }
    if (status != MOON_OK) {
        MOON_WARN("replay driver: request %zu (trace line %u) not submitted: %s", i, r->line,
                  moon_status_str(status));
        moon_sim_records_finish(d->a.recs, (uint32_t)i, now - d->t0_ns, MOON_SIM_REQ_ERROR);
        ended(self, d);
    }
    return MOON_OK;
}

static void driver_in_order(void *arg, const moon_msg_hdr_t *msg);

static moon_status_t driver_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    driver_t *d      = moon_actor_state(self);
    uint64_t  now    = moon_now(moon_actor_runtime(self));
    uint64_t  cookie = ((const moon_sys_timer_t *)(const void *)msg)->cookie;

    if (cookie & DRIVER_WAIT_TIMER) { /* a stream's wait for a token that may never come */
        uint64_t id = cookie & ~DRIVER_WAIT_TIMER;
        if (id < d->a.trace->n_reqs &&
            moon_serve_order_expire(&d->order[id], now, MOON_SERVE_ORDER_WAIT_NS - 1,
                                    driver_in_order, self) == 2) {
            moon_serve_cancel(self, d->a.conductor, id);
        }
        return MOON_OK;
    }
    /* every request due by now (equal timestamps go together, in trace order) */
    while (d->next < d->a.trace->n_reqs &&
           d->t0_ns + moon_trace_arrival_ns(&d->a.trace->reqs[d->next], d->a.time_scale) <= now) {
        submit(self, d, d->next, now);
        d->next++;
    }
    return arm(self, d);
}

static moon_sim_req_status_t status_of(uint32_t finish)
{
    switch (finish) {
    case MOON_FINISH_STOP:
    case MOON_FINISH_LENGTH:
        return MOON_SIM_REQ_OK;
    case MOON_FINISH_REJECTED:
        return MOON_SIM_REQ_REJECTED;
    default:
        return MOON_SIM_REQ_ERROR;
    }
}

/* A request's event in order (the order's callback; arg: the actor). */
static void driver_in_order(void *arg, const moon_msg_hdr_t *msg)
{
    moon_actor_t      *self = arg;
    driver_t          *d    = moon_actor_state(self);
    uint64_t           now  = moon_now(moon_actor_runtime(self)) - d->t0_ns;
    moon_serve_event_t ev;
    moon_sim_record_t *x;
    uint32_t           id;

    if (moon_serve_event_of(msg, &ev) != MOON_OK || ev.request_id >= d->a.trace->n_reqs) {
        return;
    }
    id = (uint32_t)ev.request_id;
    if (ev.kind == MOON_SERVE_EV_TOKEN) {
        moon_sim_records_token(d->a.recs, id, now);
        return;
    }
    x = &d->a.recs->recs[id];
    /* the instances were noted at placement (sim_run.c reads them off PREFILL) */
    moon_sim_records_place(d->a.recs, id, x->prefill, x->decode, ev.n_cached);
    if (ev.finish != MOON_FINISH_REJECTED) {
        moon_sim_records_prefill_start(d->a.recs, id, x->arrival_ns + ev.queue_ns);
        moon_sim_records_service(d->a.recs, id, ev.ttft_ns);
    }
    if (ev.finish == MOON_FINISH_ERROR) {
        MOON_WARN("replay driver: request %u failed: %s", id, ev.message ? ev.message : "");
    }
    moon_sim_records_finish(d->a.recs, id, now, status_of(ev.finish));
    ended(self, d);
}

/* Feeds a TOKEN or DONE of request id to its stream; a wait that begins
 * gets its deadline's timer. */
static void driver_feed(moon_actor_t *self, driver_t *d, uint64_t id, const moon_msg_hdr_t *msg)
{
    moon_serve_order_t *o = &d->order[id];
    int                 waited;
    uint64_t            timer;

    waited = moon_serve_order_waiting(o);
    moon_serve_order_feed(o, msg, moon_now(moon_actor_runtime(self)), driver_in_order, self);
    if (!waited && moon_serve_order_waiting(o) &&
        moon_timer_start(self, MOON_SERVE_ORDER_WAIT_NS, 0, DRIVER_WAIT_TIMER | id, &timer) !=
            MOON_OK) {
        MOON_WARN("replay driver: no timer for request %llu's wait", (unsigned long long)id);
    }
}

static moon_status_t driver_on_event(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    driver_t          *d = moon_actor_state(self);
    moon_serve_event_t ev;

    if (msg->type == MOON_MSG_SERVE_TOKENS) { /* a decode step's tokens */
        for (uint32_t i = 0, n = moon_serve_tokens_count(msg); i < n; i++) {
            moon_serve_token_t *t = moon_serve_tokens_split(msg, i);
            if (t != NULL && t->request_id < d->a.trace->n_reqs) {
                driver_feed(self, d, t->request_id, &t->hdr);
            }
            moon_msg_release(t != NULL ? &t->hdr : NULL);
        }
        return MOON_OK;
    }
    if (moon_serve_event_of(msg, &ev) != MOON_OK || ev.request_id >= d->a.trace->n_reqs) {
        MOON_ERROR("replay driver: an event for no request of the trace");
        return MOON_ERR_CORRUPT;
    }
    driver_feed(self, d, ev.request_id, msg);
    return MOON_OK;
}

const moon_actor_ops_t moon_sim_driver_ops = {
    .name        = "replay-driver",
    .state_bytes = sizeof(driver_t),
    .init        = driver_init,
    .fini        = driver_fini,
    .on_msg      = {[MOON_MSG_SYS_TIMER]    = driver_on_timer,
                    [MOON_MSG_SERVE_TOKEN]  = driver_on_event,
                    [MOON_MSG_SERVE_TOKENS] = driver_on_event,
                    [MOON_MSG_SERVE_DONE]   = driver_on_event},
};
