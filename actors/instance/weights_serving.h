/* actors/weights_serving.h - what the serving actors keep of weight
 * versions during a push (weights_msgs.h):
 *  - an instance's set: the engines of the versions it holds (one, or two
 *    while the old version drains), each over its own model; requests pick
 *    their engine by the version the conductor stamped on them;
 *  - the conductor's gate: the version new requests are stamped with, and
 *    the count of requests still running on the old one, whose end retires
 *    it everywhere.
 * Both are touched only by their actor's turns. */
#ifndef MOON_ACTORS_WEIGHTS_SERVING_H
#define MOON_ACTORS_WEIGHTS_SERVING_H

#include "engine_runner.h"
#include "moonlet/actor.h"
#include "moonlet/dist.h"
#include "moonlet/model.h"

#define MOON_WEIGHTS_MAX_HELD 2u

typedef struct {
    uint64_t            version;
    moon_engine_t      *engine;     /* owned */
    moon_model_t       *model;      /* owned; NULL: the deployment's (the cluster's) */
    moon_dist_region_t *region;     /* owned: the memory model points into; may be NULL */
    moon_addr_t         recycle_to; /* gets region back when the version retires */
} moon_weights_held_t;

typedef struct {
    moon_weights_held_t  held[MOON_WEIGHTS_MAX_HELD];
    uint32_t             n_held;
    uint64_t             retire_pending; /* a version to drop once the engine is idle */
    int                  has_pending;
    moon_dist_t         *dist; /* borrowed */
    moon_engine_config_t engine_cfg;
} moon_weights_set_t;

/* Starts a set holding version (the deployment's weights) run by engine
 * (owned by the set from here on). engine_cfg is copied: the engines of
 * later versions are made with it. */
MOON_API void moon_weights_set_init(moon_weights_set_t *set, moon_dist_t *dist,
                                    const moon_engine_config_t *engine_cfg, uint64_t version,
                                    moon_engine_t *engine);
/* Destroys every engine, model and region held. */
MOON_API void moon_weights_set_fini(moon_weights_set_t *set);
/* The engine of version; NULL when the set does not hold it. */
MOON_API moon_engine_t *moon_weights_set_engine(const moon_weights_set_t *set, uint64_t version);
/* The newest version held. */
MOON_API uint64_t moon_weights_set_latest(const moon_weights_set_t *set);
/* Handles INSTALL (builds an engine for the new model beside the old one and
 * answers INSTALLED) and RETIRE (drops a version, at once when runner is
 * idle, else at the next moon_weights_set_poll). Returns 1 when msg was one
 * of them. */
MOON_API int moon_weights_set_handle(moon_weights_set_t *set, moon_actor_t *self,
                                     const moon_engine_runner_t *runner, const moon_msg_hdr_t *msg);
/* Call when the engine went idle: a RETIRE that waited is done now (self:
 * the instance, which hands the retired region back to its receiver). */
MOON_API void moon_weights_set_poll(moon_weights_set_t *set, moon_actor_t *self,
                                    const moon_engine_runner_t *runner);

typedef struct {
    uint64_t serving;  /* version new requests are stamped with */
    uint64_t old;      /* the version draining */
    uint32_t n_old;    /* requests still on it */
    int      draining; /* old is still held by the instances */
} moon_weights_gate_t;

/* FLIP: new requests get version from now on; n_running_old is how many in
 * flight run on the current one. Returns 1 when the old version can be
 * retired at once (nothing runs on it). */
MOON_API int moon_weights_gate_flip(moon_weights_gate_t *gate, uint64_t version,
                                    uint32_t n_running_old);
/* A request of version ended. Returns 1 when that makes the old version
 * retirable (send RETIRE gate->old to every instance). */
MOON_API int moon_weights_gate_release(moon_weights_gate_t *gate, uint64_t version);

#endif /* MOON_ACTORS_WEIGHTS_SERVING_H */
