/* tests/e2e/plugins/plugin_probe.c - a plugin for the tests and the benchmark,
 * its behaviour chosen by ARGS (comma-separated):
 *   crash_every=N   the observer "probe" (FINISHED events) fails on every N-th
 *                   event: its supervisor restarts it, serving goes on
 *   place=WHERE     where "probe" runs (default 0)
 *   filter=silent   a filter "probe" that never answers (fail=open|closed)
 *   filter=pass     a pass-through filter (answers accept at once)
 *   tokens=1        "probe" also observes every token (TOKENS, one per step)
 *   store=1         "probe" also observes store events (logs the first stored)
 *   clamp=N         a filter "probe" that lets every request through with
 *                   max_tokens lowered to N (a changed parameter)
 * "probe" also sends itself a message of its own (an id of the plugin range)
 * at start, and logs each incarnation, so the test sees restarts. */
#include "moonlet/plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_HELLO_FIELDS(F, T) F(T, u64, incarnation)
#define PROBE_MSGS(X) X(PROBE_MSG_HELLO, probe_hello_t, PROBE_HELLO_FIELDS)
MOON_MSG_DECLARE_IN(PROBE_MSGS, PLUGIN, PROBE_MSG_END)
MOON_MSG_DEFINE(PROBE_MSGS, probe_msg_descs)

typedef struct {
    uint32_t crash_every;
    int      filter; /* 0 none, 1 silent, 2 pass, 3 clamp */
    uint32_t clamp;
} probe_args_t;

typedef struct {
    probe_args_t a;
    uint64_t     n_events, n_tokens, n_stored;
} probe_t;

static uint64_t incarnations;

static moon_status_t probe_on_event(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    probe_t                   *p = moon_actor_state(self);
    const moon_plugin_event_t *e = (const void *)msg;

    if (e->kind == MOON_PLUGIN_EV_STORED || e->kind == MOON_PLUGIN_EV_EVICTED) {
        if (p->n_stored++ == 0) {
            MOON_WARN("probe: first store event: %s %016llx%016llx", moon_plugin_ev_str(e->kind),
                      (unsigned long long)e->key_hi, (unsigned long long)e->key_lo);
        }
        return MOON_OK;
    }
    p->n_events++;
    if (p->a.crash_every > 0 && p->n_events % p->a.crash_every == 0) {
        MOON_WARN("probe: failing on purpose after %llu events", (unsigned long long)p->n_events);
        return MOON_ERR_INVALID_PARAM; /* the actor fails: its supervisor restarts it */
    }
    return MOON_OK;
}

static moon_status_t probe_on_tokens(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    probe_t                    *p = moon_actor_state(self);
    const moon_plugin_tokens_t *t = (const void *)msg;

    if (t->client.n == 0 || t->request_id.n != t->client.n || t->index.n != t->client.n ||
        t->token.n != t->client.n) {
        MOON_WARN("probe: a TOKENS with %u clients, %u ids, %u indexes, %u tokens", t->client.n,
                  t->request_id.n, t->index.n, t->token.n);
        return MOON_ERR_INVALID_PARAM;
    }
    if (p->n_tokens == 0) {
        MOON_WARN("probe: first tokens: %u in one message, token %u at index %u", t->client.n,
                  ((const uint32_t *)MOON_SPAN_PTR(t, t->token))[0],
                  ((const uint32_t *)MOON_SPAN_PTR(t, t->index))[0]);
    }
    p->n_tokens += t->client.n;
    return MOON_OK;
}

static moon_status_t probe_on_filter(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    probe_t *p = moon_actor_state(self);

    if (p->a.filter == 2) {
        return moon_plugin_answer(self, (const void *)msg, MOON_PLUGIN_ACCEPT, 0, 0, NULL);
    }
    if (p->a.filter == 3) {
        const moon_plugin_filter_req_t *q = (const void *)msg;
        moon_plugin_verdict_t          *v = moon_msg_new(MOON_MSG_PLUGIN_VERDICT, 8);
        if (v == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        v->token       = q->token;
        v->verdict     = MOON_PLUGIN_ACCEPT;
        v->max_tokens  = p->a.clamp;
        v->temperature = -1.0f; /* unchanged */
        moon_msg_set_str(v, &v->message, "");
        if (moon_send(self, msg->src, &v->hdr) != MOON_OK) {
            moon_msg_release(&v->hdr);
        }
    }
    return MOON_OK; /* silent: never answers */
}

static moon_status_t probe_on_hello(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    MOON_WARN("probe: incarnation %llu is up",
              (unsigned long long)((const probe_hello_t *)msg)->incarnation);
    return MOON_OK;
}

static moon_status_t probe_init(moon_actor_t *self, const void *args)
{
    probe_t       *p = moon_actor_state(self);
    probe_hello_t *h = moon_msg_new(PROBE_MSG_HELLO, 0);

    p->a = *(const probe_args_t *)args;
    if (h != NULL) {
        h->incarnation = ++incarnations;
        if (moon_send(self, moon_actor_addr(self), &h->hdr) != MOON_OK) {
            moon_msg_release(&h->hdr);
        }
    }
    return MOON_OK;
}

static const moon_actor_ops_t probe_ops = {
    .name        = "probe",
    .state_bytes = sizeof(probe_t),
    .init        = probe_init,
    .on_msg      = {[MOON_MSG_PLUGIN_EVENT]  = probe_on_event,
                    [MOON_MSG_PLUGIN_TOKENS] = probe_on_tokens,
                    [MOON_MSG_PLUGIN_FILTER] = probe_on_filter,
                    [PROBE_MSG_HELLO]        = probe_on_hello},
};

static moon_status_t probe_plugin_init(moon_plugin_host_t *host, const char *args)
{
    probe_args_t           pa    = {0};
    moon_plugin_actor_t    actor = {.name         = "probe",
                                    .ops          = &probe_ops,
                                    .args         = &pa,
                                    .args_bytes   = sizeof(pa),
                                    .place        = "0",
                                    .max_restarts = 1000};
    moon_plugin_filter_t   f     = {.actor = "probe", .deadline_ms = 300};
    moon_plugin_observer_t obs   = {.actor = "probe", .events = MOON_PLUGIN_EV_FINISHED};
    char                   copy[256], place[64] = "0", *save = NULL;
    moon_status_t          status;

    snprintf(copy, sizeof(copy), "%s", args);
    for (char *o = strtok_r(copy, ",", &save); o != NULL; o = strtok_r(NULL, ",", &save)) {
        if (strncmp(o, "crash_every=", 12) == 0) {
            pa.crash_every = (uint32_t)strtoul(o + 12, NULL, 10);
        } else if (strncmp(o, "place=", 6) == 0) {
            snprintf(place, sizeof(place), "%s", o + 6);
        } else if (strcmp(o, "filter=silent") == 0 || strcmp(o, "filter=pass") == 0) {
            pa.filter = strcmp(o, "filter=pass") == 0 ? 2 : 1;
        } else if (strcmp(o, "fail=open") == 0 || strcmp(o, "fail=closed") == 0) {
            f.fail_open = strcmp(o, "fail=open") == 0;
        } else if (strncmp(o, "clamp=", 6) == 0) {
            pa.filter = 3;
            pa.clamp  = (uint32_t)strtoul(o + 6, NULL, 10);
        } else if (strcmp(o, "store=1") == 0) {
            obs.events |= MOON_PLUGIN_EV_STORED | MOON_PLUGIN_EV_EVICTED;
        } else if (strcmp(o, "tokens=1") == 0) {
            obs.events |= MOON_PLUGIN_EV_TOKEN;
        } else {
            MOON_ERROR("probe: unknown option '%s'", o);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    actor.place = place;
    status      = moon_plugin_register_msgs(host, probe_msg_descs);
    if (status == MOON_OK) {
        status = moon_plugin_register_actor(host, &actor);
    }
    if (status == MOON_OK && pa.filter != 0) {
        status = moon_plugin_register_filter(host, &f);
    }
    if (status == MOON_OK) {
        status = moon_plugin_register_observer(host, &obs);
    }
    return status;
}

MOON_PLUGIN_DEFINE("probe", probe_plugin_init, NULL);
