/* model/cpu/parallel.c - the steps of a forward pass split across the
 * thread pool (the caller is thread 0): each job runs on every thread with
 * its ith/nth, or inline below a size where waking the workers costs more;
 * a small decode batch splits by rows for the whole pass instead. */
#include "cpu/cpu_internal.h"

#include <math.h>

static void run_job(void *arg, uint32_t ith, uint32_t nth)
{
    cpu_state_t *s   = arg;
    job_t       *j   = &s->job;
    uint32_t     dim = s->m->cfg.dim;

    switch (j->kind) {
    case JOB_MATMUL:
#ifdef MOON_X86
        if (moon_cpu_bt_ok(s, j)) {
            /* every matrix of the step shares x: transpose it once per thread */
            float *xt = s->xt + (size_t)ith * s->max_cols * BT_MAX_B;
            int    dp = moon_cpu_bt_dp_ok(s, j);
            moon_cpu_bt_transpose_x(j->x, j->b, j->w[0]->cols, (j->b + 15) / 16, xt);
            if (dp) {
                moon_cpu_bt_pack_bf16(xt, j->w[0]->cols, (j->b + 15) / 16);
            }
            for (uint32_t i = 0; i < j->n_mats; i++) {
                uint32_t rows = j->w[i]->rows;
                moon_cpu_matmul_bt(j->w[i], j->y[i], xt, s->yt + (size_t)ith * BT_CHUNK * BT_MAX_B,
                                   j->b, rows * ith / nth, rows * (ith + 1) / nth, dp);
            }
            break;
        }
#endif
        for (uint32_t i = 0; i < j->n_mats; i++) {
            /* slices start on 16-row boundaries (the outer-product panels) */
            uint32_t rows = j->w[i]->rows;
            uint32_t r0   = (rows * ith / nth) & ~15u;
            uint32_t r1   = ith + 1 == nth ? rows : (rows * (ith + 1) / nth) & ~15u;
            moon_cpu_matmul_slice(s, ith, j->w[i], j->y[i], j->x, j->b, r0, r1);
        }
        break;
    case JOB_ATTN:
        moon_cpu_attn_rows(s, ith, nth);
        break;
    case JOB_ATTN_GEMM:
#ifdef MOON_HAVE_OPENBLAS
        moon_cpu_attn_gemm_heads(s, ith, nth);
#endif
        break;
    case JOB_RMSNORM:
        for (uint32_t bi = j->b * ith / nth; bi < j->b * (ith + 1) / nth; bi++) {
            const float *x  = j->in + (size_t)bi * dim;
            float       *o  = j->out + (size_t)bi * dim;
            float        ss = 0.0f;
            for (uint32_t i = 0; i < dim; i++) {
                ss += x[i] * x[i];
            }
            ss = 1.0f / sqrtf(ss / (float)dim + s->m->cfg.norm_eps);
            for (uint32_t i = 0; i < dim; i++) {
                o[i] = j->norm_w[i] * (ss * x[i]);
            }
        }
        break;
    case JOB_SWIGLU: {
        size_t n  = (size_t)j->b * s->m->cfg.hidden_dim;
        size_t i0 = n * ith / nth, i1 = n * (ith + 1) / nth;
        s->swiglu(s->hb + i0, s->hb2 + i0, i1 - i0);
        break;
    }
    }
}

/* Below s->par_min_macs multiply-adds (tuning cpu-par-min-macs, 2^19) a step
 * runs on the calling thread: waking the workers would cost more than the
 * work (tiny models, e.g. stories260K). */

/* A decode step whose largest matmul (all batch rows; the classifier, in
 * small models) is below s->split_max_macs multiply-adds (tuning
 * cpu-split-max-macs, 2^22) splits the batch across the
 * threads for the whole pass: one dispatch per step instead of one or more
 * per layer, attention and the serial steps (norms, RoPE, residuals) on every
 * thread, but each thread reads all the weights. Chosen from split vs unsplit
 * decode, 2 threads (Zen 5), largest step at batch 4/8/32: stories260K 0.13M/
 * 0.26M/1.0M: +1/+59/+59 %; dim 128 1M/2.1M/8.4M: +8/+16/-3 %; dim 256
 * 4.2M/8.4M/34M: -12/-1/-5 %; dim 512 from 17M: -4 to -26 %. */

void moon_cpu_run_maybe_par(cpu_state_t *s, uint64_t macs)
{
    if (macs < s->par_min_macs) {
        run_job(s, 0, 1);
    } else {
        moon_tp_run(s->tp, run_job, s);
    }
}

void moon_cpu_par_matmul(cpu_state_t *s, uint32_t b, const float *x, const moon_tensor_t *w0,
                         float *y0, const moon_tensor_t *w1, float *y1, const moon_tensor_t *w2,
                         float *y2)
{
    job_t *j  = &s->job;
    j->kind   = JOB_MATMUL;
    j->b      = b;
    j->x      = x;
    j->w[0]   = w0;
    j->y[0]   = y0;
    j->w[1]   = w1;
    j->y[1]   = y1;
    j->w[2]   = w2;
    j->y[2]   = y2;
    j->n_mats = w2 ? 3 : w1 ? 2 : 1;
    moon_cpu_run_maybe_par(s, (uint64_t)b * w0->cols *
                                  ((uint64_t)w0->rows + (w1 ? w1->rows : 0) + (w2 ? w2->rows : 0)));
}

void moon_cpu_par_rmsnorm(cpu_state_t *s, uint32_t b, float *out, const float *in, const float *w)
{
    s->job.kind   = JOB_RMSNORM;
    s->job.b      = b;
    s->job.out    = out;
    s->job.in     = in;
    s->job.norm_w = w;
    moon_cpu_run_maybe_par(s, (uint64_t)b * s->m->cfg.dim * 4);
}

/* One thread's share of a split decode step: rows [b0, b1) of the batch go
 * through the whole forward pass on this thread alone, in a view of the state
 * whose row buffers start at row b0 and whose scratch is this thread's. Rows
 * of a decode batch are independent sequences, so the threads share nothing
 * writable but the KV cache, where each row writes its own slot. */
void moon_cpu_run_split(void *arg, uint32_t ith, uint32_t nth)
{
    const cpu_state_t         *s  = arg;
    const moon_model_config_t *c  = &s->m->cfg;
    cpu_state_t               *v  = (cpu_state_t *)((char *)s->views + ith * s->view_stride);
    uint32_t                   b0 = s->split_b * ith / nth, b1 = s->split_b * (ith + 1) / nth;
    uint32_t                   n = b1 - b0, kv_dim = c->n_kv_heads * c->head_dim;
    size_t                     wc = s->max_cols;

    if (n == 0) {
        return;
    }
    *v     = *s;
    v->x   = s->x + (size_t)b0 * c->dim;
    v->xb  = s->xb + (size_t)b0 * c->dim;
    v->q   = s->q + (size_t)b0 * s->q_dim;
    v->ao  = v->q;
    v->hb  = s->hb + (size_t)b0 * c->hidden_dim;
    v->hb2 = s->hb2 + (size_t)b0 * c->hidden_dim;
    if (s->kv_owned) {
        v->k = s->k + (size_t)b0 * kv_dim;
        v->v = s->v + (size_t)b0 * kv_dim;
    } else { /* inside this thread's rows of hb2, as cpu_create lays them out */
        v->k = v->hb2;
        v->v = v->hb2 + (size_t)n * kv_dim;
    }
    v->seq          = s->seq + b0;
    v->pos          = s->pos + b0;
    v->att          = s->att + (size_t)ith * c->seq_len;
    v->kc           = s->kc + (size_t)ith * c->seq_len * c->head_dim; /* an F16 cache's rows */
    v->vc           = s->vc + (size_t)ith * c->seq_len * c->head_dim;
    v->wtile        = s->wtile + (size_t)ith * TILE_ROWS * wc;
    v->xq           = s->xq + (size_t)ith * s->xq_stride;
    v->pack         = s->pack + (size_t)ith * OP_KC * 16 * OP_PV;
    v->xt           = s->xt + (size_t)ith * wc * BT_MAX_B;
    v->yt           = s->yt + (size_t)ith * BT_CHUNK * BT_MAX_B;
    v->nth          = 1;
    v->par_min_macs = UINT64_MAX; /* every step inline: no nested run on the pool */
    moon_cpu_forward_batch(v, s->split_tokens + b0, n,
                           s->split_logits ? s->split_logits + (size_t)b0 * c->vocab_size : NULL, 1,
                           0, NULL);
}
