/* actors/gw_weights.h - the gateway's view of weight versions: on each
 * stats tick it asks the broadcaster ("weights", when the cluster has one)
 * for its state and turns the answer into metrics and the version
 * /v1/models shows:
 *   moonlet:weights_version{role="prefill|decode",instance="I"}  gauge: the
 *     version each instance runs new requests on;
 *   moonlet:weights_serving_version  gauge: the cluster's;
 *   moonlet:weights_push_duration_seconds  histogram: from a push to every
 *     instance holding a checked copy;
 *   moonlet:weights_switch_duration_seconds  histogram: then to new
 *     requests running on it everywhere.
 * A push is observed once, whoever made it (the admin route, a trainer).
 * Touched only by the gateway actor's turns (the registry locks itself). */
#ifndef MOON_ACTORS_GW_WEIGHTS_H
#define MOON_ACTORS_GW_WEIGHTS_H

#include "gw_metrics.h"
#include "moonlet/actor.h"
#include "moonlet/dist.h"
#include "moonlet/weights_msgs.h"

#define MOON_GW_M_WEIGHTS_VERSION "moonlet:weights_version"
#define MOON_GW_M_WEIGHTS_SERVING "moonlet:weights_serving_version"
#define MOON_GW_M_WEIGHTS_PUSH "moonlet:weights_push_duration_seconds"
#define MOON_GW_M_WEIGHTS_SWITCH "moonlet:weights_switch_duration_seconds"

typedef struct {
    moon_dist_t       *dist; /* borrowed; NULL: in one process (no broadcaster) */
    moon_gw_metrics_t *metrics;
    moon_addr_t        bcast; /* found by name; NONE until then */
    uint32_t           n_ok_seen;
    uint64_t           asked, answered;
} moon_gw_weights_t;

/* Declares the families above (serving version 0). MOON_ERR_* of declare. */
moon_status_t moon_gw_weights_init(moon_gw_weights_t *w, moon_dist_t *dist,
                                   moon_gw_metrics_t *metrics);
/* The stats tick: asks the broadcaster (found by name) for its state; one
 * question at a time. */
void moon_gw_weights_poll(moon_gw_weights_t *w, moon_actor_t *self);
/* The broadcaster's STATE_REPLY: gauges set, pushes not seen yet observed.
 * Returns the serving version. */
uint64_t moon_gw_weights_on_state(moon_gw_weights_t *w, const moon_weights_state_reply_t *r);

#endif /* MOON_ACTORS_GW_WEIGHTS_H */
