/* actors/instance/serve_instance.c - pieces prefill and decode instances share. */
#include "serve_instance.h"

#include "moonlet/log.h"
#include "engine_runner.h"
#include "serve_calibrate.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

moon_status_t moon_serve_model_tag(const char *path, uint32_t block_tokens, moon_kv_tag_t *tag_p)
{
    XXH3_state_t *st = XXH3_createState();
    FILE         *f  = fopen(path, "rb");
    char          buf[1 << 16];
    size_t        n;
    uint64_t      salt[2] = {block_tokens, 4 /* fp32 KV */};

    if (st == NULL || f == NULL) {
        MOON_ERROR("model tag: cannot read %s", path);
        XXH3_freeState(st);
        if (f != NULL) {
            fclose(f);
        }
        return st == NULL ? MOON_ERR_NO_MEMORY : MOON_ERR_NOT_FOUND;
    }
    XXH3_64bits_reset(st);
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        XXH3_64bits_update(st, buf, n);
    }
    XXH3_64bits_update(st, salt, sizeof(salt));
    tag_p->model_id       = XXH3_64bits_digest(st);
    tag_p->weight_version = 0;
    fclose(f);
    XXH3_freeState(st);
    return MOON_OK;
}

void moon_serve_report_load(moon_actor_t *self, const moon_serve_instance_args_t *a,
                            uint32_t queued_tokens, uint32_t queued_reqs, uint32_t running,
                            uint32_t free_blocks, const uint64_t counters[3])
{
    moon_serve_load_t *m = moon_msg_new(MOON_MSG_SERVE_LOAD, 0);

    if (m == NULL) {
        return; /* the next report carries the same state */
    }
    m->instance           = a->instance;
    m->role               = a->role;
    m->queued_tokens      = queued_tokens;
    m->queued_reqs        = queued_reqs;
    m->running            = running;
    m->free_blocks        = free_blocks;
    m->total_blocks       = a->n_blocks;
    m->n_cache_hit_tokens = counters[0];
    m->n_store_hit_tokens = counters[1];
    m->n_computed_tokens  = counters[2];
    moon_tell(self, a->conductor, &m->hdr);
}

moon_status_t moon_serve_copy_span(void *dst, moon_span_t *dspan, const void *src,
                                   moon_span_t sspan, uint32_t elem_bytes, int is_str)
{
    void *out;

    if (sspan.n == 0) {
        return is_str ? moon_msg_set_str(dst, dspan, "") : MOON_OK;
    }
    out = moon_msg_span_alloc(dst, dspan, sspan.n, elem_bytes, is_str);
    if (out == NULL) {
        return MOON_ERR_NO_RESOURCE;
    }
    memcpy(out, MOON_SPAN_PTR(src, sspan), (size_t)sspan.n * elem_bytes);
    return MOON_OK;
}

moon_status_t moon_serve_hello(moon_actor_t *self, const moon_serve_instance_args_t *a,
                               moon_engine_t *engine, moon_kv_cache_t *kv)
{
    moon_sched_cost_t   cost = {0};
    int                 pre  = a->role != MOON_SERVE_ROLE_DECODE;
    int                 dec  = a->role != MOON_SERVE_ROLE_PREFILL;
    moon_serve_hello_t *m;
    moon_status_t       status =
        moon_serve_calibrate(engine, kv, moon_model_config(a->model)->vocab_size,
                             pre ? a->prefill_chunk : 0, dec ? a->engine.max_batch : 0, &cost);

    if (status != MOON_OK) {
        MOON_ERROR("instance %u: engine calibration failed: %s", a->instance,
                   moon_status_str(status));
        return status;
    }
    m = moon_msg_new(MOON_MSG_SERVE_HELLO, 0);
    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->instance     = a->instance;
    m->role         = a->role;
    m->total_blocks = a->n_blocks;
    m->max_batch    = a->engine.max_batch;
    m->a0           = cost.a0;
    m->a1           = cost.a1;
    m->a2           = cost.a2;
    m->d0           = cost.d0;
    m->d1           = cost.d1;
    m->d2           = cost.d2;
    return moon_tell(self, a->conductor, &m->hdr);
}

moon_status_t moon_serve_instance_start(moon_actor_t *self, const moon_serve_instance_args_t *a,
                                        moon_engine_t *engine, moon_kv_cache_t *kv,
                                        moon_engine_runner_t **runner_p, uint64_t *timer_p)
{
    uint64_t      period = a->load_period_ns ? a->load_period_ns : 50000000ull;
    moon_status_t status =
        moon_engine_runner_create(moon_actor_runtime(self), moon_actor_addr(self), a->threaded,
                                  a->engine.pin ? (int32_t)a->engine.first_core : -1, runner_p);

    if (status == MOON_OK) {
        status = moon_timer_start(self, period, period, 0, timer_p);
    }
    if (status == MOON_OK) {
        status = moon_serve_hello(self, a, engine, kv);
    }
    return status;
}
