/* model/cpu/ops.c - one thread's share (ith of nth) of a parallel step:
 * matmul slices (NT kernels, outer-product or batch-in-lanes GEMM, sgemm,
 * dots) and attention rows (decode) or heads (prefill GEMMs). */
#include "cpu/cpu_internal.h"

#include <math.h>
#include <string.h>
#ifdef MOON_HAVE_OPENBLAS
#include <cblas.h>
#endif

static void matmul_nt(cpu_state_t *s, nt_kernel_t kern, const moon_tensor_t *w, float *y,
                      const float *x, uint32_t b, uint32_t r0, uint32_t r1)
{
    const uint8_t *base = (const uint8_t *)w->data;
    dot_fn         dot  = s->dot[w->type];
    uint32_t       K    = w->cols;
    uint32_t       r    = r0;

    for (; r + kern.mr <= r1; r += kern.mr) {
        const uint8_t *wr = base + (size_t)r * w->row_bytes;
        uint32_t       bi = 0;
        for (; bi + kern.nb <= b; bi += kern.nb) {
            kern.fn(wr, w->row_bytes, x + (size_t)bi * K, K, y + (size_t)bi * w->rows + r, w->rows);
        }
        for (; bi < b; bi++) {
            for (uint32_t i = 0; i < kern.mr; i++) {
                y[(size_t)bi * w->rows + r + i] =
                    dot(wr + (size_t)i * w->row_bytes, x + (size_t)bi * K, K);
            }
        }
    }
    for (; r < r1; r++) {
        for (uint32_t bi = 0; bi < b; bi++) {
            y[(size_t)bi * w->rows + r] =
                dot(base + (size_t)r * w->row_bytes, x + (size_t)bi * K, K);
        }
    }
}

#ifdef MOON_HAVE_OPENBLAS
#define MOON_SGEMM 1
#else
#define MOON_SGEMM 0
#endif

#define QROWS 16 /* weight rows per pass over the batch: they stay in L1 */

/* Quantised weights: the batch's activation rows quantised to Q8 once, then
 * integer dots block by block (no dequantised tile). */
static void matmul_q(cpu_state_t *s, uint32_t ith, const moon_tensor_t *w, float *y, const float *x,
                     uint32_t b, uint32_t r0, uint32_t r1)
{
    qdot_fn        qdot = s->qdot[w->type];
    uint32_t       K    = w->cols;
    size_t         xrow = moon_cpu_act_row_bytes((int)w->type, K);
    uint8_t       *xq   = s->xq + (size_t)ith * s->xq_stride;
    const uint8_t *base = (const uint8_t *)w->data;

    for (uint32_t bi = 0; bi < b; bi++) {
        moon_cpu_quantize_act((int)w->type, x + (size_t)bi * K, K, xq + bi * xrow);
    }
    for (uint32_t t0 = r0; t0 < r1; t0 += QROWS) {
        uint32_t t1 = MOON_MIN(t0 + QROWS, r1);
        for (uint32_t bi = 0; bi < b; bi++) {
            float *yr = y + (size_t)bi * w->rows;
            for (uint32_t r = t0; r < t1; r++) {
                yr[r] = qdot(base + (size_t)r * w->row_bytes, xq + bi * xrow, K);
            }
        }
    }
}

/* Quantised weights times a batch as an integer GEMM (cpu/qgemm.c): the
 * batch quantised once, each panel of QG_ROWS weight rows unpacked once and
 * multiplied by every batch row. The panel lives in the thread's wtile. */
static void matmul_qg(cpu_state_t *s, uint32_t ith, const moon_tensor_t *w, float *y,
                      const float *x, uint32_t b, uint32_t r0, uint32_t r1)
{
    uint32_t        K = w->cols;
    moon_qg_act_t   a;
    moon_qg_panel_t p;
    void           *panel = s->wtile + (size_t)ith * TILE_ROWS * s->max_cols;

    s->qg_quantize(x, b, K, moon_cpu_qg_block((int)w->type), s->xq + (size_t)ith * s->xq_stride,
                   &a);
    for (uint32_t r = r0; r < r1; r += QG_ROWS) {
        uint32_t nr = MOON_MIN(QG_ROWS, r1 - r);
        s->qg_pack(w, r, nr, panel, &p);
        for (uint32_t x0 = 0; x0 < b; x0 += QG_NB) {
            s->qg_tile(&p, &a, x0, MOON_MIN(QG_NB, b - x0), y + (size_t)x0 * w->rows + r, w->rows,
                       nr);
        }
    }
}

/* y[bi][r] for rows [r0, r1) of w, all batch rows. */
void moon_cpu_matmul_slice(cpu_state_t *s, uint32_t ith, const moon_tensor_t *w, float *y,
                           const float *x, uint32_t b, uint32_t r0, uint32_t r1)
{
    dot_fn   dot  = s->dot[w->type];
    float   *tile = s->wtile + (size_t)ith * TILE_ROWS * s->max_cols;
    uint32_t cols = w->cols;

    if (r0 >= r1) {
        return;
    }
#ifdef MOON_X86
    /* F16 prefill batches stay on the dequantised tiles through sgemm: 110M,
     * 1 thread, loaded machine: prefill 512 274-378 tok/s vs 239-264 here */
    if (s->nt_isa == 512 && b >= s->op_min_b &&
        (w->type == MOON_GGML_F32 || w->type == MOON_GGML_BF16 ||
         (w->type == MOON_GGML_F16 && (b <= 64 || !MOON_SGEMM)))) {
        moon_cpu_matmul_op(s, ith, w, y, x, b, r0, r1);
        return;
    }
#endif
    /* quantised weights times batches from cpu-qgemm-min-b (8) on: the
     * integer GEMM where the CPU has AVX-512 VNNI (engine_tuning.c: figures) */
    if (s->qg_tile != NULL && b >= s->qg_min_b && !s->exact_quant &&
        moon_cpu_qg_block((int)w->type) != 0) {
        matmul_qg(s, ith, w, y, x, b, r0, r1);
        return;
    }
    /* Without the integer GEMM (no AVX-512 VNNI), large batches of quantised
     * weights run faster as dequantised tiles through sgemm: 110M, 1 thread,
     * loaded machine: prefill 512 Q4_K_M 324-446 tok/s vs 246-341 with the one-row integer kernels,
     * Q8_0 288-301 vs 215-225; decode b32 is faster on the integer kernels (Q4_K_M 166 vs 113, Q8_0
     * 165 vs 125), b1 2-12x. Between 32 and 512 untuned (32). */
    if (s->qdot[w->type] != NULL && !s->exact_quant && (b <= s->q8_max_b || !MOON_SGEMM)) {
        matmul_q(s, ith, w, y, x, b, r0, r1);
        return;
    }
    if (b > 1 && b <= 64) {
        nt_kernel_t kern = moon_cpu_nt_kernel_for(s, w, b);
        if (kern.fn != NULL) {
            matmul_nt(s, kern, w, y, x, b, r0, r1);
            return;
        }
    }
    if (b == 1 && dot != NULL) {
        const uint8_t *base = (const uint8_t *)w->data;
        for (uint32_t r = r0; r < r1; r++) {
            y[r] = dot(base + (size_t)r * w->row_bytes, x, cols);
        }
        return;
    }
#ifdef MOON_HAVE_OPENBLAS
    if (b > 1 && w->type == MOON_GGML_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)(r1 - r0), (int)cols,
                    1.0f, x, (int)cols, (const float *)w->data + (size_t)r0 * cols, (int)cols, 0.0f,
                    y + r0, (int)w->rows);
        return;
    }
#endif
    for (uint32_t t0 = r0; t0 < r1; t0 += TILE_ROWS) {
        uint32_t nt = MOON_MIN(TILE_ROWS, r1 - t0);
        for (uint32_t r = 0; r < nt; r++) {
            moon_tensor_row(w, t0 + r, tile + (size_t)r * cols);
        }
#ifdef MOON_HAVE_OPENBLAS
        if (b > 1) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)nt, (int)cols, 1.0f,
                        x, (int)cols, tile, (int)cols, 0.0f, y + t0, (int)w->rows);
            continue;
        }
#endif
        for (uint32_t bi = 0; bi < b; bi++) {
            for (uint32_t r = 0; r < nt; r++) {
                y[(size_t)bi * w->rows + t0 + r] =
                    s->dot_f32(tile + (size_t)r * cols, x + (size_t)bi * cols, cols);
            }
        }
    }
}

void moon_cpu_attn_rows(cpu_state_t *s, uint32_t ith, uint32_t nth)
{
    const moon_model_config_t *c      = &s->m->cfg;
    uint32_t                   hs     = c->head_dim;
    uint32_t                   kv_mul = c->n_heads / c->n_kv_heads;
    uint32_t                   total  = s->job.b * c->n_heads;
    uint32_t                   p0 = total * ith / nth, p1 = total * (ith + 1) / nth;
    float                     *att   = s->att + (size_t)ith * c->seq_len;
    float                     *tmp   = s->kc + (size_t)ith * c->seq_len * hs; /* an F16 row */
    float                      scale = 1.0f / sqrtf((float)hs);
    uint32_t                   l     = s->job.layer;

    for (uint32_t p = p0; p < p1; p++) {
        uint32_t             bi = p / c->n_heads, h = p % c->n_heads;
        uint32_t             pos = s->pos[bi], kvh = h / kv_mul;
        const moon_kv_seq_t *sq = s->seq[bi];
        const float         *q  = s->q + (size_t)bi * s->q_dim + h * hs;
        float               *o  = s->ao + (size_t)bi * s->q_dim + h * hs;
        float                sum;

#ifdef MOON_X86
        if (s->nt_isa == 512 && hs <= 128 && (s->kv->elem_bytes == 4 || hs % 16 == 0)) {
            moon_cpu_attn_head_avx512(s, sq, l, kvh * hs, pos + 1, q, o, att, scale);
            continue;
        }
#endif
        for (uint32_t t = 0; t <= pos; t++) {
            const float *k = moon_kv_load(s->kv, sq, l, 0, t, kvh * hs, hs, tmp);
            att[t]         = s->dot_f32(k, q, hs) * scale;
        }
        sum = s->softmax_exp(att, pos + 1);
        memset(o, 0, hs * sizeof(float));
        for (uint32_t t = 0; t <= pos; t++) {
            s->axpy(o, att[t] / sum, moon_kv_load(s->kv, sq, l, 1, t, kvh * hs, hs, tmp), hs);
        }
    }
}

#ifdef MOON_HAVE_OPENBLAS
/* Floats [off, off + n) of a K or V vector copied (converted) into dst. */
static void kv_gather(const moon_kv_cache_t *kv, const moon_kv_seq_t *sq, uint32_t l,
                      uint32_t which, uint32_t t, uint32_t off, uint32_t n, float *dst)
{
    const float *src = moon_kv_load(kv, sq, l, which, t, off, n, dst);
    if (src != dst) {
        memcpy(dst, src, n * sizeof(float));
    }
}

/* Prefill attention as two GEMMs per head: rows 0..b of one sequence at
 * consecutive positions pos[0].., each head's K/V gathered from the paged
 * cache into a contiguous scratch. Heads are split across threads. */
void moon_cpu_attn_gemm_heads(cpu_state_t *s, uint32_t ith, uint32_t nth)
{
    const moon_model_config_t *c        = &s->m->cfg;
    uint32_t                   hs       = c->head_dim;
    uint32_t                   kv_mul   = c->n_heads / c->n_kv_heads;
    uint32_t                   b        = s->job.b;
    uint32_t                   p0       = s->pos[0];
    uint32_t                   ctx      = p0 + b; /* keys the last row sees */
    uint32_t                   l        = s->job.layer;
    const moon_kv_seq_t       *sq       = s->seq[0];
    float                     *kc       = s->kc + (size_t)ith * c->seq_len * hs;
    float                     *vc       = s->vc + (size_t)ith * c->seq_len * hs;
    float                     *sc       = s->sc + (size_t)ith * ATTN_QCHUNK * c->seq_len;
    uint32_t                   last_kvh = UINT32_MAX;

    for (uint32_t h = c->n_heads * ith / nth; h < c->n_heads * (ith + 1) / nth; h++) {
        uint32_t kvh = h / kv_mul;
        if (kvh != last_kvh) {
            for (uint32_t t = 0; t < ctx; t++) {
                kv_gather(s->kv, sq, l, 0, t, kvh * hs, hs, kc + (size_t)t * hs);
                kv_gather(s->kv, sq, l, 1, t, kvh * hs, hs, vc + (size_t)t * hs);
            }
            last_kvh = kvh;
        }
        /* query rows in chunks of ATTN_QCHUNK: each sees keys 0..p0 + its last row */
        for (uint32_t i0 = 0; i0 < b; i0 += ATTN_QCHUNK) {
            uint32_t nb = MOON_MIN(ATTN_QCHUNK, b - i0);
            uint32_t nk = p0 + i0 + nb;
            /* S (nb, nk) = Q_h K_h^T / sqrt(hs) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb, (int)nk, (int)hs,
                        1.0f / sqrtf((float)hs), s->q + (size_t)i0 * s->q_dim + h * hs,
                        (int)s->q_dim, kc, (int)hs, 0.0f, sc, (int)nk);
            /* causal softmax: row i sees positions 0..p0 + i */
            for (uint32_t r = 0; r < nb; r++) {
                float   *row = sc + (size_t)r * nk;
                uint32_t n   = p0 + i0 + r + 1;
                float    inv = 1.0f / s->softmax_exp(row, n);
                for (uint32_t t = 0; t < n; t++) {
                    row[t] *= inv;
                }
                memset(row + n, 0, (nk - n) * sizeof(float));
            }
            /* O_h (nb, hs) = P V_h */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nb, (int)hs, (int)nk, 1.0f,
                        sc, (int)nk, vc, (int)hs, 0.0f, s->ao + (size_t)i0 * s->q_dim + h * hs,
                        (int)s->q_dim);
        }
    }
}
#endif

#ifdef MOON_X86
/* Whether a matmul step runs on the batch-in-lanes kernels: AVX-512, a batch
 * of bt_min_b..BT_MAX_B rows, every matrix F32 or BF16 with cols % 16 == 0. */
int moon_cpu_bt_ok(const cpu_state_t *s, const job_t *j)
{
    if (s->nt_isa != 512 || j->b < s->bt_min_b || j->b > BT_MAX_B) {
        return 0;
    }
    for (uint32_t i = 0; i < j->n_mats; i++) {
        const moon_tensor_t *w = j->w[i];
        if (w->cols % 16 != 0 || (w->type != MOON_GGML_F32 && w->type != MOON_GGML_BF16)) {
            return 0;
        }
    }
    return 1;
}
#endif

#ifdef MOON_X86
/* Whether a batch-in-lanes step runs on BF16 products: enabled, and every
 * matrix BF16. */
int moon_cpu_bt_dp_ok(const cpu_state_t *s, const job_t *j)
{
    if (!s->bf16_dp) {
        return 0;
    }
    for (uint32_t i = 0; i < j->n_mats; i++) {
        if (j->w[i]->type != MOON_GGML_BF16) {
            return 0;
        }
    }
    return 1;
}
#endif
