/* actors/instance/serve_instance.c - pieces prefill and decode instances share. */
#include "serve_instance.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/tokenizer.h"
#include "engine_runner.h"
#include "calib_cache.h"
#include "kv_pool.h"
#include "serve_calibrate.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

int32_t moon_serve_numa_core(const moon_serve_instance_args_t *a)
{
    if (!a->numa || a->virtual_kv) {
        return MOON_KV_POOL_NUMA_OFF;
    }
    return a->engine.pin ? (int32_t)a->engine.first_core : -1;
}

moon_status_t moon_serve_model_tag(const char *path, uint32_t block_tokens, moon_kv_type_t kv_type,
                                   moon_kv_tag_t *tag_p)
{
    XXH3_state_t *st = XXH3_createState();
    FILE         *f  = fopen(path, "rb");
    char          buf[1 << 16];
    size_t        n;
    uint64_t      salt[2] = {block_tokens, moon_kv_type_bytes(kv_type)};

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

/* Records the report in memo; 0 when it equals the last one sent and that
 * was recent (nothing to send). */
static int load_memo_update(moon_serve_load_memo_t *memo, uint64_t now_ns,
                            const moon_serve_load_memo_t *cur)
{
    if (memo->sent_ns != 0 && now_ns - memo->sent_ns < MOON_SERVE_LOAD_REFRESH_NS &&
        memo->queued_tokens == cur->queued_tokens && memo->queued_reqs == cur->queued_reqs &&
        memo->running == cur->running && memo->free_blocks == cur->free_blocks &&
        memcmp(memo->counters, cur->counters, sizeof(cur->counters)) == 0) {
        return 0;
    }
    *memo         = *cur;
    memo->sent_ns = now_ns != 0 ? now_ns : 1;
    return 1;
}

void moon_serve_report_load(moon_actor_t *self, const moon_serve_instance_args_t *a,
                            moon_serve_load_memo_t *memo, uint32_t queued_tokens,
                            uint32_t queued_reqs, uint32_t running, uint32_t free_blocks,
                            const uint64_t counters[3])
{
    moon_serve_load_memo_t cur = {queued_tokens,
                                  queued_reqs,
                                  running,
                                  free_blocks,
                                  {counters[0], counters[1], counters[2]},
                                  0};
    moon_serve_load_t     *m;

    if (a->busy_ns != NULL && queued_reqs + running > 0) {
        atomic_store_explicit(a->busy_ns, moon_now(moon_actor_runtime(self)), memory_order_relaxed);
    }
    if (!load_memo_update(memo, moon_now(moon_actor_runtime(self)), &cur)) {
        return;
    }
    m = moon_msg_new(MOON_MSG_SERVE_LOAD, 0);
    if (m == NULL) {
        memo->sent_ns = 0; /* not sent: the next report goes */
        return;
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

moon_status_t moon_serve_sampler_open(moon_sampler_t *s, uint32_t vocab,
                                      const moon_tokenizer_t *tok, const moon_serve_sampling_t *sp,
                                      const uint32_t *toks, uint32_t n, uint32_t n_resumed)
{
    moon_sampler_ctl_t ctl = {0};
    int32_t           *ban = NULL, *bias_ids = NULL;
    float             *bias  = NULL;
    uint32_t           n_ban = 0, n_gen = MOON_MIN(n_resumed, n);
    moon_status_t      status;

    status = moon_sampler_init(s, vocab, sp->temperature, sp->top_p > 0.0f ? sp->top_p : 1.0f,
                               sp->top_k, sp->seed);
    if (status != MOON_OK) {
        return status;
    }
    ctl.presence_penalty   = sp->presence_penalty;
    ctl.frequency_penalty  = sp->frequency_penalty;
    ctl.repetition_penalty = sp->repetition_penalty;
    ctl.min_p              = sp->min_p;
    ctl.min_tokens         = sp->min_tokens;
    if (sp->min_tokens > n_gen) {
        ban = moon_malloc(((size_t)sp->n_stop_ids + 2) * sizeof(int32_t));
        if (ban == NULL) {
            status = MOON_ERR_NO_MEMORY;
            goto out;
        }
        if (!(sp->flags & MOON_SERVE_F_IGNORE_EOS) && tok != NULL) {
            int32_t special[2] = {moon_tokenizer_eos(tok), moon_tokenizer_bos(tok)};
            for (int i = 0; i < 2; i++) {
                if (special[i] >= 0 && (uint32_t)special[i] < vocab) {
                    ban[n_ban++] = special[i];
                }
            }
        }
        for (uint32_t i = 0; i < sp->n_stop_ids; i++) {
            ban[n_ban++] = (int32_t)sp->stop_ids[i];
        }
        ctl.ban_ids = ban;
        ctl.n_ban   = n_ban;
    }
    if (sp->n_bias > 0) {
        bias_ids = moon_malloc((size_t)sp->n_bias * sizeof(int32_t));
        bias     = moon_malloc((size_t)sp->n_bias * sizeof(float));
        if (bias_ids == NULL || bias == NULL) {
            status = MOON_ERR_NO_MEMORY;
            goto out;
        }
        for (uint32_t i = 0; i < sp->n_bias; i++) {
            bias_ids[i] = (int32_t)sp->logit_bias[2 * i];
            memcpy(&bias[i], &sp->logit_bias[2 * i + 1], 4);
        }
        ctl.bias_ids = bias_ids;
        ctl.bias     = bias;
        ctl.n_bias   = sp->n_bias;
    }
    status = moon_sampler_set_ctl(s, &ctl, (const int32_t *)toks, n - n_gen);
    for (uint32_t i = n - n_gen; status == MOON_OK && i < n; i++) {
        moon_sampler_accept(s, (int32_t)toks[i]);
    }
out:
    moon_free(ban);
    moon_free(bias_ids);
    moon_free(bias);
    if (status != MOON_OK) {
        moon_sampler_fini(s);
    }
    return status;
}

moon_status_t moon_serve_lp_put(void *msg, moon_span_t *span, const moon_serve_lp_t *lp)
{
    uint32_t *out;

    if (lp->k == 0) {
        return MOON_OK;
    }
    out = moon_msg_span_alloc(msg, span, 2 * lp->k, 4, 0);
    if (out == NULL) {
        return MOON_ERR_NO_RESOURCE;
    }
    for (uint32_t i = 0; i < lp->k; i++) {
        out[2 * i] = (uint32_t)lp->ids[i];
        memcpy(&out[2 * i + 1], &lp->lps[i], 4);
    }
    return MOON_OK;
}

moon_serve_token_t *moon_serve_token_new(uint64_t request_id, uint32_t index, uint32_t token,
                                         const char *text, size_t n, uint64_t version,
                                         const moon_serve_lp_t *lp)
{
    moon_serve_token_t *m =
        moon_msg_new(MOON_MSG_SERVE_TOKEN, n + 1 + (lp != NULL ? 8 * lp->k + 8 : 0));

    if (m == NULL) {
        return NULL;
    }
    if (lp != NULL) {
        m->logprob = lp->lp;
        moon_serve_lp_put(m, &m->top, lp); /* room reserved above */
    }
    m->request_id = request_id;
    m->index      = index;
    m->token      = token;
    moon_msg_set_str(m, &m->text, text); /* room reserved above */
    m->weight_version = version;
    return m;
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

/* The fit from the calibration cache when it has this engine's, else timed
 * now (and filed there). The cost engine's fit is computed, not timed: never
 * cached. */
static moon_status_t calibrate(const moon_serve_instance_args_t *a, moon_engine_t *engine,
                               moon_kv_cache_t *kv, moon_sched_cost_t *cost)
{
    int              pre    = a->role != MOON_SERVE_ROLE_DECODE;
    int              dec    = a->role != MOON_SERVE_ROLE_PREFILL;
    moon_calib_key_t key    = {.model_id      = a->tag.model_id,
                               .backend       = a->engine.kind,
                               .threads       = a->engine.n_threads,
                               .pin           = a->engine.pin,
                               .max_batch     = dec ? a->engine.max_batch : 0,
                               .prefill_chunk = pre ? a->prefill_chunk : 0,
                               .ctx           = moon_kv_cache_config(kv)->max_seq_len,
                               .prefill       = pre,
                               .decode        = dec};
    int              cached = a->calibration_cache != NULL && a->calibration_cache[0] != '\0' &&
                 a->engine.kind != MOON_BACKEND_COST;
    moon_status_t status;

    if (cached && moon_calib_cache_load(a->calibration_cache, &key, cost) == MOON_OK) {
        return MOON_OK;
    }
    status = moon_serve_calibrate(engine, kv, moon_model_config(a->model)->vocab_size,
                                  key.prefill_chunk, key.max_batch, cost);
    if (status == MOON_OK && cached) {
        moon_calib_cache_store(a->calibration_cache, &key, cost); /* a miss next time: logged */
    }
    return status;
}

moon_status_t moon_serve_hello(moon_actor_t *self, const moon_serve_instance_args_t *a,
                               moon_engine_t *engine, moon_kv_cache_t *kv)
{
    moon_sched_cost_t   cost   = {0};
    moon_status_t       status = calibrate(a, engine, kv, &cost);
    moon_serve_hello_t *m;

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
