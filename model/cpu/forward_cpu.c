/* model/cpu/forward_cpu.c - the fast CPU backend. A prefill chunk of B tokens
 * (or a decode batch of B sequences) goes through each layer as one batch:
 * the weight matmuls are GEMMs (on AVX-512 our outer-product kernels for F32
 * and BF16 from 4 rows, batch-in-lanes kernels for 29-32 rows, which for BF16
 * weights multiply BF16-rounded activations with vdpbf16ps where the CPU has
 * it; else OpenBLAS sgemm on each thread's slice of output rows; other weight
 * types are dequantized tile by tile), batch-1 matvecs
 * use AVX-512/AVX2 kernels chosen at create by a runtime CPU check, and
 * attention runs over the paged KV cache split by (token, head). Threads: a
 * pool of n_threads (the caller is thread 0); work is split by ith/nth rows,
 * except that a decode batch of a small model splits by batch rows for the
 * whole pass (run_split). Steps too small to pay for a dispatch run on the
 * calling thread. Every buffer is allocated at create: prefill and decode
 * never allocate. This file holds the pass and the backend ops; the kernels,
 * the per-thread ops and the threading are under cpu/ (cpu/cpu_internal.h). */
#include "cpu/cpu_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef MOON_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* In-place RMSNorm of one head's n values (the reference's order of sums). */
static void head_rmsnorm(float *x, const float *w, uint32_t n, float eps)
{
    float ss = 0.0f;
    for (uint32_t j = 0; j < n; j++) {
        ss += x[j] * x[j];
    }
    ss = 1.0f / sqrtf(ss / (float)n + eps);
    for (uint32_t j = 0; j < n; j++) {
        x[j] = w[j] * (ss * x[j]);
    }
}

/* NeoX RoPE of one head: pair (j, j + hs / 2) by the angle of pair j. */
static void rope_neox(float *x, const float *cs, uint32_t hs)
{
    for (uint32_t j = 0; j < hs / 2; j++) {
        float fcr = cs[2 * j], fci = cs[2 * j + 1];
        float v0 = x[j], v1 = x[j + hs / 2];
        x[j]          = v0 * fcr - v1 * fci;
        x[j + hs / 2] = v0 * fci + v1 * fcr;
    }
}

/* The whole forward pass for b batch rows whose tokens, sequences and
 * positions are set; logits of row i go to logits + i * vocab when
 * all_logits, else only the last row's to logits (NULL: none); all_logits
 * with hidden (b, dim; NULL: none): every row's final normed hidden state. */
void moon_cpu_forward_batch(cpu_state_t *s, const int32_t *tokens, uint32_t b, float *logits,
                            int all_logits, int one_seq, float *hidden)
{
    const moon_model_t        *m      = s->m;
    const moon_model_config_t *c      = &m->cfg;
    uint32_t                   dim    = c->dim;
    uint32_t                   hs     = c->head_dim;
    uint32_t                   q_dim  = s->q_dim;
    uint32_t                   kv_dim = c->n_kv_heads * hs;

    for (uint32_t bi = 0; bi < b; bi++) {
        moon_tensor_row(&m->tok_embd, (uint32_t)tokens[bi], s->x + (size_t)bi * dim);
    }
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const moon_layer_t *L = &m->layers[l];

        /* attention: norm, q/k/v projections as one GEMM step */
        moon_cpu_par_rmsnorm(s, b, s->xb, s->x, L->attn_norm);
        moon_cpu_par_matmul(s, b, s->xb, &L->wq, s->q, &L->wk, s->k, &L->wv, s->v);

        /* biases (qwen2), per-head Q/K norms (qwen3), RoPE from the table,
         * then K/V into each row's cache slot */
        for (uint32_t bi = 0; bi < b; bi++) {
            const float *cs = s->rope + (size_t)s->pos[bi] * hs;
            float       *q  = s->q + (size_t)bi * q_dim;
            float       *k  = s->k + (size_t)bi * kv_dim;
            if (L->bq != NULL) {
                float *v = s->v + (size_t)bi * kv_dim;
                for (uint32_t i = 0; i < q_dim; i++) {
                    q[i] += L->bq[i];
                }
                for (uint32_t i = 0; i < kv_dim; i++) {
                    k[i] += L->bk[i];
                    v[i] += L->bv[i];
                }
            }
            if (L->q_norm != NULL) {
                for (uint32_t i = 0; i < q_dim; i += hs) {
                    head_rmsnorm(q + i, L->q_norm, hs, c->norm_eps);
                }
                for (uint32_t i = 0; i < kv_dim; i += hs) {
                    head_rmsnorm(k + i, L->k_norm, hs, c->norm_eps);
                }
            }
            if (c->rope_neox) {
                for (uint32_t i = 0; i < q_dim; i += hs) {
                    rope_neox(q + i, cs, hs);
                    if (i < kv_dim) {
                        rope_neox(k + i, cs, hs);
                    }
                }
            } else {
                for (uint32_t i = 0; i < q_dim; i += 2) {
                    float fcr = cs[(i % hs)], fci = cs[(i % hs) + 1];
                    float q0 = q[i], q1 = q[i + 1];
                    q[i]     = q0 * fcr - q1 * fci;
                    q[i + 1] = q0 * fci + q1 * fcr;
                    if (i < kv_dim) {
                        float k0 = k[i], k1 = k[i + 1];
                        k[i]     = k0 * fcr - k1 * fci;
                        k[i + 1] = k0 * fci + k1 * fcr;
                    }
                }
            }
            moon_kv_store(s->kv, s->seq[bi], l, 0, s->pos[bi], k);
            moon_kv_store(s->kv, s->seq[bi], l, 1, s->pos[bi], s->v + (size_t)bi * kv_dim);
        }
        s->job.kind = JOB_ATTN;
#ifdef MOON_HAVE_OPENBLAS
        if (one_seq && b >= 8) {
            s->job.kind = JOB_ATTN_GEMM;
        }
#endif
        s->job.b     = b;
        s->job.layer = l;
        moon_cpu_run_maybe_par(s, (uint64_t)b * c->n_heads * hs * 2 * (s->pos[b - 1] + 1));

        /* output projection (q_dim to dim) and residual */
        moon_cpu_par_matmul(s, b, s->ao, &L->wo, s->xb, NULL, NULL, NULL, NULL);
        for (size_t i = 0; i < (size_t)b * dim; i++) {
            s->x[i] += s->xb[i];
        }

        /* SwiGLU feed-forward and residual */
        moon_cpu_par_rmsnorm(s, b, s->xb, s->x, L->ffn_norm);
        moon_cpu_par_matmul(s, b, s->xb, &L->w1, s->hb, &L->w3, s->hb2, NULL, NULL);
        s->job.kind = JOB_SWIGLU;
        s->job.b    = b;
        moon_cpu_run_maybe_par(s, (uint64_t)b * c->hidden_dim * 16);
        moon_cpu_par_matmul(s, b, s->hb, &L->w2, s->xb, NULL, NULL, NULL, NULL);
        for (size_t i = 0; i < (size_t)b * dim; i++) {
            s->x[i] += s->xb[i];
        }
    }
    if (logits == NULL && hidden == NULL) {
        return;
    }
    if (all_logits) {
        moon_cpu_par_rmsnorm(s, b, s->xb, s->x, m->output_norm);
        if (hidden != NULL) {
            memcpy(hidden, s->xb, (size_t)b * dim * sizeof(float));
        }
        if (logits != NULL) {
            moon_cpu_par_matmul(s, b, s->xb, &m->output, logits, NULL, NULL, NULL, NULL);
        }
    } else {
        moon_cpu_par_rmsnorm(s, 1, s->xb, s->x + (size_t)(b - 1) * dim, m->output_norm);
        moon_cpu_par_matmul(s, 1, s->xb, &m->output, logits, NULL, NULL, NULL, NULL);
    }
}

/* ---- backend ops --------------------------------------------------------------- */

static void cpu_destroy(void *state)
{
    cpu_state_t *s = state;

    if (s == NULL) {
        return;
    }
    moon_tp_destroy(s->tp);
    if (s->kv_owned) {
        MOON_FREE_ALL(s->k, s->v);
    }
    MOON_FREE_ALL(s->x, s->xb, s->q, s->hb, s->hb2, s->att, s->wtile, s->xq, s->pack, s->xt, s->yt,
                  s->rope, s->kc, s->vc, s->sc, (void *)s->seq, s->pos, s->views, s);
}

static moon_status_t cpu_create(const moon_model_t *m, const moon_engine_config_t *cfg,
                                void **state_p)
{
    const moon_model_config_t  *c      = &m->cfg;
    const moon_engine_tuning_t *t      = cfg->tuning; /* set by moon_engine_create */
    cpu_state_t                *s      = moon_calloc(1, sizeof(*s));
    uint32_t                    kv_dim = c->n_kv_heads * c->head_dim;
    size_t                      B;
    long                        ncpu;
    moon_status_t               status;

    if (s == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    ncpu     = sysconf(_SC_NPROCESSORS_ONLN);
    s->m     = m;
    s->nth   = cfg->n_threads ? cfg->n_threads : (uint32_t)(ncpu > 0 ? ncpu : 1);
    s->max_b = MOON_MAX(cfg->max_batch, cfg->max_chunk);
    B        = s->max_b;
    moon_cpu_pick_kernels(s, t->cpu_isa);
    s->exact_quant    = !t->cpu_q8_act;
    s->q8_max_b       = t->cpu_q8_max_b;
    s->qg_min_b       = t->cpu_qgemm_min_b;
    s->op_min_b       = t->cpu_op_min_b;
    s->bt_min_b       = t->cpu_bt_min_b;
    s->par_min_macs   = t->cpu_par_min_macs;
    s->split_max_macs = t->cpu_split_max_macs;
    s->q_dim          = moon_model_q_dim(c);
    s->max_cols       = MOON_MAX(MOON_MAX(c->dim, s->q_dim), c->hidden_dim);
    /* the largest matmul step of one row: QKV (not less than wo), w1 + w3, w2 or
     * the classifier */
    s->row_max_macs = MOON_MAX(
        MOON_MAX((uint64_t)c->dim * (s->q_dim + 2 * kv_dim), (uint64_t)c->dim * 2 * c->hidden_dim),
        MOON_MAX((uint64_t)c->hidden_dim * c->dim, (uint64_t)c->dim * c->vocab_size));
#ifdef MOON_X86
    /* BF16 products in the batch-in-lanes steps unless cpu-bf16-dp is off
     * (exact mode: activations stay F32 there too) */
    s->bf16_dp = __builtin_cpu_supports("avx512bf16") && t->cpu_bf16_dp;
#endif
    if (!t->cpu_nt) {
        s->nt_isa = 0; /* A/B knob for benchmarks: batched matmuls through sgemm */
    }
#ifdef MOON_HAVE_OPENBLAS
    openblas_set_num_threads(1); /* parallelism comes from our own pool */
#endif
    status = moon_tp_create(s->nth, (int)cfg->pin, cfg->first_core, &s->tp);
    if (status != MOON_OK) {
        cpu_destroy(s);
        return status;
    }
    s->x   = moon_aligned_alloc(64, B * c->dim * sizeof(float));
    s->xb  = moon_aligned_alloc(64, B * c->dim * sizeof(float));
    s->q   = moon_aligned_alloc(64, B * s->q_dim * sizeof(float));
    s->hb  = moon_aligned_alloc(64, B * c->hidden_dim * sizeof(float));
    s->hb2 = moon_aligned_alloc(64, B * c->hidden_dim * sizeof(float));
    /* k and v live only from the QKV matmul to the cache write, hb2 only in
     * the FFN: share hb2's memory when both fit in it (2 kv_dim <= hidden) */
    if (2 * kv_dim <= c->hidden_dim && s->hb2 != NULL) {
        s->k = s->hb2;
        s->v = s->hb2 + B * kv_dim;
    } else {
        s->kv_owned = 1;
        s->k        = moon_aligned_alloc(64, B * kv_dim * sizeof(float));
        s->v        = moon_aligned_alloc(64, B * kv_dim * sizeof(float));
    }
    s->att   = moon_malloc((size_t)s->nth * c->seq_len * sizeof(float));
    s->wtile = moon_aligned_alloc(64, (size_t)s->nth * TILE_ROWS * s->max_cols * sizeof(float));
    /* Q8 activations: at most 36 bytes per 32 values (moon_q8b_t), 292 per 256 */
    s->xq_stride =
        (MOON_MAX(B * s->max_cols / MOON_GGML_QK * 40, moon_cpu_qg_act_bytes(B, s->max_cols)) +
         63) &
        ~(size_t)63;
    s->xq        = moon_aligned_alloc(64, (size_t)s->nth * s->xq_stride);
    s->pack      = moon_aligned_alloc(64, (size_t)s->nth * OP_KC * 16 * OP_PV * sizeof(float));
    s->xt        = moon_aligned_alloc(64, (size_t)s->nth * s->max_cols * BT_MAX_B * sizeof(float));
    s->yt        = moon_aligned_alloc(64, (size_t)s->nth * BT_CHUNK * BT_MAX_B * sizeof(float));
    s->rope      = moon_malloc((size_t)c->seq_len * c->head_dim * sizeof(float));
    s->max_chunk = cfg->max_chunk;
    s->kc        = moon_malloc((size_t)s->nth * c->seq_len * c->head_dim * sizeof(float));
    s->vc        = moon_malloc((size_t)s->nth * c->seq_len * c->head_dim * sizeof(float));
    s->sc        = moon_malloc((size_t)s->nth * ATTN_QCHUNK * c->seq_len * sizeof(float));
    s->seq       = moon_malloc(B * sizeof(*s->seq));
    s->pos       = moon_malloc(B * sizeof(*s->pos));
    s->ao        = s->q;
    s->view_stride =
        (sizeof(cpu_state_t) + MOON_CACHE_LINE - 1) / MOON_CACHE_LINE * MOON_CACHE_LINE;
    s->views = moon_aligned_alloc(MOON_CACHE_LINE, s->nth * s->view_stride);
    if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->hb || !s->hb2 || !s->att || !s->wtile ||
        !s->xq || !s->pack || !s->rope || !s->kc || !s->vc || !s->sc || !s->seq || !s->pos ||
        !s->views) {
        cpu_destroy(s);
        return MOON_ERR_NO_MEMORY;
    }
    *state_p = s;
    return MOON_OK;
}

/* Fills the RoPE table up to position n (exclusive) on first use, so its
 * memory follows the longest context run, not the model's seq_len (a
 * 128K-context model's table is 64 MiB at head_dim 128). The same float
 * formula as the reference, so both rotate identically. Engine thread, before
 * any step of the call. */
static void rope_fill(cpu_state_t *s, uint32_t n)
{
    uint32_t hs = s->m->cfg.head_dim;

    for (; s->rope_rows < n; s->rope_rows++) {
        for (uint32_t i = 0; i < hs; i += 2) {
            float *cs = s->rope + (size_t)s->rope_rows * hs + i;
            moon_model_rope_cos_sin(s->m, s->rope_rows, i / 2, &cs[0], &cs[1]);
        }
    }
}

/* A prefill chunk of one sequence: the last row's logits, or with all every
 * row's logits and hidden states (either NULL). */
static moon_status_t prefill_chunk(cpu_state_t *s, moon_kv_cache_t *kv, uint32_t seq,
                                   const int32_t *tokens, uint32_t n, float *logits, int all,
                                   float *hidden)
{
    const moon_kv_seq_t *sq = &kv->seqs[seq];

    if (n > s->max_b) {
        return MOON_ERR_INVALID_PARAM;
    }
    s->kv = kv;
    for (uint32_t i = 0; i < n; i++) {
        s->seq[i] = sq;
        s->pos[i] = sq->n_tokens + i;
    }
    rope_fill(s, sq->n_tokens + n);
    moon_cpu_forward_batch(s, tokens, n, logits, all, 1, hidden);
    return MOON_OK;
}

static moon_status_t cpu_prefill(void *state, moon_kv_cache_t *kv, uint32_t seq,
                                 const int32_t *tokens, uint32_t n, float *logits,
                                 double *modeled_s_p)
{
    (void)modeled_s_p;
    return prefill_chunk(state, kv, seq, tokens, n, logits, 0, NULL);
}

static moon_status_t cpu_prefill_rows(void *state, moon_kv_cache_t *kv, uint32_t seq,
                                      const int32_t *tokens, uint32_t n, float *logits,
                                      float *hidden, double *modeled_s_p)
{
    (void)modeled_s_p;
    return prefill_chunk(state, kv, seq, tokens, n, logits, 1, hidden);
}

static moon_status_t cpu_decode(void *state, moon_kv_cache_t *kv, const uint32_t *seqs,
                                const int32_t *tokens, uint32_t n_seqs, float *logits,
                                double *modeled_s_p)
{
    cpu_state_t *s = state;

    (void)modeled_s_p;
    if (n_seqs > s->max_b) {
        return MOON_ERR_INVALID_PARAM;
    }
    s->kv = kv;
    for (uint32_t i = 0; i < n_seqs; i++) {
        s->seq[i] = &kv->seqs[seqs[i]];
        s->pos[i] = kv->seqs[seqs[i]].n_tokens;
        rope_fill(s, s->pos[i] + 1);
    }
    if (s->nth > 1 && n_seqs >= s->nth && (uint64_t)n_seqs * s->row_max_macs < s->split_max_macs) {
        /* small steps: one dispatch per decode step instead of one per matmul */
        s->split_tokens = tokens;
        s->split_logits = logits;
        s->split_b      = n_seqs;
        moon_tp_run(s->tp, moon_cpu_run_split, s);
        return MOON_OK;
    }
    moon_cpu_forward_batch(s, tokens, n_seqs, logits, 1, 0, NULL);
    return MOON_OK;
}

const moon_model_backend_ops_t moon_backend_cpu_ops = {
    .name         = "cpu",
    .create       = cpu_create,
    .destroy      = cpu_destroy,
    .prefill      = cpu_prefill,
    .decode       = cpu_decode,
    .prefill_rows = cpu_prefill_rows,
    .kv_f16       = 1,
};
