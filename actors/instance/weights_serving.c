/* actors/weights_serving.c - an instance's weight versions and the
 * conductor's version gate (weights_serving.h). */
#include "weights_serving.h"

#include "moonlet/log.h"
#include "moonlet/weights_msgs.h"

#include <string.h>

void moon_weights_set_init(moon_weights_set_t *set, moon_dist_t *dist,
                           const moon_engine_config_t *engine_cfg, uint64_t version,
                           moon_engine_t *engine)
{
    memset(set, 0, sizeof(*set));
    set->dist              = dist;
    set->engine_cfg        = *engine_cfg;
    set->engine_cfg.tuning = NULL; /* borrowed for create only */
    set->held[0].version   = version;
    set->held[0].engine    = engine;
    set->n_held            = engine != NULL;
}

/* A region no model uses any more goes back to the receiver when self can
 * send it (NULL: at fini), else is freed. */
static void give_back(moon_weights_set_t *set, moon_actor_t *self, moon_dist_region_t *region,
                      moon_addr_t to)
{
    moon_weights_retire_t *m = NULL;

    if (region != NULL && self != NULL && to != MOON_ADDR_NONE) {
        m = moon_msg_new(MOON_MSG_WEIGHTS_RETIRE, 0);
    }
    if (m != NULL) {
        m->region = (uint64_t)(uintptr_t)region;
        if (moon_send(self, to, &m->hdr) != MOON_OK) {
            moon_msg_release(&m->hdr);
            m = NULL;
        }
    }
    if (region != NULL && m == NULL) {
        moon_dist_region_deregister(set->dist, region);
    }
}

static void drop(moon_weights_set_t *set, moon_actor_t *self, uint32_t i)
{
    moon_weights_held_t *h = &set->held[i];

    moon_engine_destroy(h->engine);
    moon_model_destroy(h->model);
    give_back(set, self, h->region, h->recycle_to);
    memmove(&set->held[i], &set->held[i + 1], (set->n_held - i - 1) * sizeof(*h));
    set->n_held--;
    memset(&set->held[set->n_held], 0, sizeof(*h));
}

void moon_weights_set_fini(moon_weights_set_t *set)
{
    while (set->n_held > 0) {
        drop(set, NULL, set->n_held - 1);
    }
}

moon_engine_t *moon_weights_set_engine(const moon_weights_set_t *set, uint64_t version)
{
    for (uint32_t i = 0; i < set->n_held; i++) {
        if (set->held[i].version == version) {
            return set->held[i].engine;
        }
    }
    return NULL;
}

uint64_t moon_weights_set_latest(const moon_weights_set_t *set)
{
    uint64_t v = 0;

    for (uint32_t i = 0; i < set->n_held; i++) {
        v = MOON_MAX(v, set->held[i].version);
    }
    return v;
}

static void retire(moon_weights_set_t *set, moon_actor_t *self, uint64_t version)
{
    for (uint32_t i = 0; i < set->n_held; i++) {
        if (set->held[i].version == version && set->n_held > 1) {
            MOON_INFO("weights: version %llu retired", (unsigned long long)version);
            drop(set, self, i);
            return;
        }
    }
}

static void answer_installed(moon_actor_t *self, moon_addr_t to, uint64_t version,
                             moon_status_t status, const char *why)
{
    moon_weights_installed_t *m = moon_msg_new(MOON_MSG_WEIGHTS_INSTALLED, strlen(why) + 2);

    if (m != NULL) {
        m->version = version;
        m->status  = status;
        moon_msg_set_str(m, &m->message, why);
        moon_tell(self, to, &m->hdr);
    }
}

static void install(moon_weights_set_t *set, moon_actor_t *self, const moon_weights_install_t *m)
{
    moon_model_t       *model  = (moon_model_t *)(uintptr_t)m->model;
    moon_dist_region_t *region = (moon_dist_region_t *)(uintptr_t)m->region;
    moon_engine_t      *engine = NULL;
    moon_status_t       status = MOON_OK;
    const char         *why    = "";

    if (moon_addr_rank(m->hdr.src) != moon_addr_rank(moon_actor_addr(self))) {
        /* the pointers mean nothing here: a bug or a forged message */
        MOON_ERROR("weights: INSTALL from another rank ignored");
        return;
    }
    if (set->n_held >= MOON_WEIGHTS_MAX_HELD || moon_weights_set_engine(set, m->version)) {
        status = MOON_ERR_NO_RESOURCE;
        why    = "the instance still drains the previous version";
    } else {
        status = moon_engine_create(model, &set->engine_cfg, &engine);
        why    = status == MOON_OK ? "" : "no engine for the new weights";
    }
    if (status != MOON_OK) {
        MOON_ERROR("weights: install of version %llu failed: %s (%s)",
                   (unsigned long long)m->version, why, moon_status_str(status));
        moon_model_destroy(model);
        give_back(set, self, region, m->recycle_to);
    } else {
        set->held[set->n_held++] =
            (moon_weights_held_t){m->version, engine, model, region, m->recycle_to};
    }
    answer_installed(self, m->ack_to, m->version, status, why);
}

int moon_weights_set_handle(moon_weights_set_t *set, moon_actor_t *self,
                            const moon_engine_runner_t *runner, const moon_msg_hdr_t *msg)
{
    if (msg->type == MOON_MSG_WEIGHTS_INSTALL) {
        install(set, self, (const moon_weights_install_t *)msg);
        return 1;
    }
    if (msg->type == MOON_MSG_WEIGHTS_RETIRE) {
        const moon_weights_retire_t *m = (const void *)msg;
        if (runner != NULL && moon_engine_runner_busy(runner)) {
            /* the pass in flight may run it: drop it when the pass ends */
            set->retire_pending = m->version;
            set->has_pending    = 1;
        } else {
            retire(set, self, m->version);
        }
        return 1;
    }
    return 0;
}

void moon_weights_set_poll(moon_weights_set_t *set, moon_actor_t *self,
                           const moon_engine_runner_t *runner)
{
    if (set->has_pending && (runner == NULL || !moon_engine_runner_busy(runner))) {
        set->has_pending = 0;
        retire(set, self, set->retire_pending);
    }
}

int moon_weights_gate_flip(moon_weights_gate_t *gate, uint64_t version, uint32_t n_running_old)
{
    gate->old      = gate->serving;
    gate->serving  = version;
    gate->n_old    = n_running_old;
    gate->draining = n_running_old > 0;
    return n_running_old == 0;
}

int moon_weights_gate_release(moon_weights_gate_t *gate, uint64_t version)
{
    if (!gate->draining || version != gate->old || gate->n_old == 0) {
        return 0;
    }
    if (--gate->n_old == 0) {
        gate->draining = 0;
        return 1;
    }
    return 0;
}
