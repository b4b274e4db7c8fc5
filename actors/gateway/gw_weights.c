/* actors/gw_weights.c - weight versions into the gateway's metrics
 * (gw_weights.h). */
#include "gw_weights.h"

#include "moonlet/log.h"

#include <stdio.h>

/* Seconds: a tiny model's delta push takes milliseconds, a large one minutes. */
static const double push_s[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,   0.25, 0.5,
                                1.0,   2.5,    5.0,   10.0, 30.0,  60.0, 120.0, 300.0};

moon_status_t moon_gw_weights_init(moon_gw_weights_t *w, moon_dist_t *dist,
                                   moon_gw_metrics_t *metrics)
{
    moon_status_t status;

    w->dist      = dist;
    w->metrics   = metrics;
    w->bcast     = MOON_ADDR_NONE;
    w->n_ok_seen = 0;
    w->asked = w->answered = 0;
    status                 = moon_weights_msgs_register();
    if (status == MOON_OK) {
        status =
            moon_gw_metrics_declare(metrics, MOON_GW_M_WEIGHTS_VERSION, MOON_GW_GAUGE,
                                    "Weight version each instance runs new requests on.", NULL, 0);
    }
    if (status == MOON_OK) {
        status = moon_gw_metrics_declare(metrics, MOON_GW_M_WEIGHTS_SERVING, MOON_GW_GAUGE,
                                         "Weight version the cluster serves new requests with.",
                                         NULL, 0);
    }
    if (status == MOON_OK) {
        status = moon_gw_metrics_declare(
            metrics, MOON_GW_M_WEIGHTS_PUSH, MOON_GW_HISTOGRAM,
            "Histogram of weight pushes, from the push to every instance holding it, in seconds.",
            push_s, MOON_ARRAY_SIZE(push_s));
    }
    if (status == MOON_OK) {
        status = moon_gw_metrics_declare(
            metrics, MOON_GW_M_WEIGHTS_SWITCH, MOON_GW_HISTOGRAM,
            "Histogram of weight switches, from every instance holding the new version to new "
            "requests running on it, in seconds.",
            push_s, MOON_ARRAY_SIZE(push_s));
    }
    if (status == MOON_OK) {
        status = moon_gw_metrics_set_gauge(metrics, MOON_GW_M_WEIGHTS_SERVING, NULL, 0);
    }
    return status;
}

void moon_gw_weights_poll(moon_gw_weights_t *w, moon_actor_t *self)
{
    moon_weights_state_t *q;

    if (w->dist == NULL) {
        return;
    }
    if (w->bcast == MOON_ADDR_NONE &&
        moon_dist_whereis(w->dist, "weights", 0, &w->bcast) != MOON_OK) {
        w->bcast = MOON_ADDR_NONE;
        return;
    }
    if (w->asked != w->answered && w->asked - w->answered < 20) {
        return; /* the last one is unanswered: the broadcaster is busy */
    }
    q = moon_msg_new(MOON_MSG_WEIGHTS_STATE, 0);
    if (q != NULL) {
        q->req = ++w->asked;
        moon_tell(self, w->bcast, &q->hdr);
    }
}

uint64_t moon_gw_weights_on_state(moon_gw_weights_t *w, const moon_weights_state_reply_t *r)
{
    const uint64_t *inst   = MOON_SPAN_PTR(r, r->inst);
    const uint64_t *recent = MOON_SPAN_PTR(r, r->recent);
    uint32_t        n_new = r->n_ok - w->n_ok_seen, n_recent = r->recent.n / 2;
    char            labels[64];

    w->answered = r->req > w->answered ? r->req : w->answered;
    for (uint32_t i = 0; i + 2 < r->inst.n; i += 3) {
        snprintf(labels, sizeof(labels), "role=\"%s\",instance=\"%u\"",
                 inst[i] == 0   ? "prefill"
                 : inst[i] == 1 ? "decode"
                                : "colocated",
                 (unsigned)inst[i + 1]);
        moon_gw_metrics_set_gauge(w->metrics, MOON_GW_M_WEIGHTS_VERSION, labels,
                                  (double)inst[i + 2]);
    }
    moon_gw_metrics_set_gauge(w->metrics, MOON_GW_M_WEIGHTS_SERVING, NULL, (double)r->version);
    /* the pushes since the last answer (at most the ones it still lists) */
    if (r->n_ok < w->n_ok_seen) {
        n_new = 0; /* another broadcaster (a restarted cluster): start over */
    }
    for (uint32_t i = n_recent - (n_new < n_recent ? n_new : n_recent); i < n_recent; i++) {
        moon_gw_metrics_observe(w->metrics, MOON_GW_M_WEIGHTS_PUSH, NULL,
                                (double)recent[2 * i] * 1e-9);
        moon_gw_metrics_observe(w->metrics, MOON_GW_M_WEIGHTS_SWITCH, NULL,
                                (double)recent[2 * i + 1] * 1e-9);
    }
    w->n_ok_seen = r->n_ok;
    return r->version;
}
