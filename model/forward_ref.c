/* model/forward_ref.c - the reference forward pass, in llama2.c style: one
 * token at a time, plain loops, one comment per step. Single-threaded. Every
 * other backend is tested against this one. */
#include "model_internal.h"
#include "moonlet/alloc.h"

#include <math.h>
#include <string.h>

typedef struct {
    const moon_model_t *m;
    float              *x;   /* (dim) residual stream */
    float              *xb;  /* (max(dim, q_dim)) */
    float              *xb2; /* (dim) */
    float              *hb;  /* (hidden) */
    float              *hb2; /* (hidden) */
    float              *q;   /* (q_dim) n_heads * head_dim */
    float              *k;   /* (kv_dim) */
    float              *v;   /* (kv_dim) */
    float              *att; /* (seq_len) */
    float              *row; /* (max(dim, q_dim, hidden)) one dequantized weight row */
} ref_state_t;

static void rmsnorm(float *o, const float *x, const float *w, uint32_t n, float eps)
{
    float ss = 0.0f;
    for (uint32_t j = 0; j < n; j++) {
        ss += x[j] * x[j];
    }
    ss = 1.0f / sqrtf(ss / (float)n + eps);
    for (uint32_t j = 0; j < n; j++) {
        o[j] = w[j] * (ss * x[j]);
    }
}

static void softmax(float *x, uint32_t n)
{
    float max = x[0], sum = 0.0f;
    for (uint32_t i = 1; i < n; i++) {
        max = x[i] > max ? x[i] : max;
    }
    for (uint32_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (uint32_t i = 0; i < n; i++) {
        x[i] /= sum;
    }
}

/* out (rows) = W (rows, cols) . x (cols) */
static void matvec(ref_state_t *s, float *out, const float *x, const moon_tensor_t *w)
{
    for (uint32_t r = 0; r < w->rows; r++) {
        float sum = 0.0f;
        moon_tensor_row(w, r, s->row);
        for (uint32_t c = 0; c < w->cols; c++) {
            sum += s->row[c] * x[c];
        }
        out[r] = sum;
    }
}

/* One token at position pos of sequence sq; logits and hidden (its final
 * normed hidden state, dim floats) may be NULL. */
static void forward_token(ref_state_t *s, moon_kv_cache_t *kv, const moon_kv_seq_t *sq,
                          int32_t token, uint32_t pos, float *logits, float *hidden)
{
    const moon_model_t        *m      = s->m;
    const moon_model_config_t *c      = &m->cfg;
    uint32_t                   dim    = c->dim;
    uint32_t                   hs     = c->head_dim;
    uint32_t                   q_dim  = c->n_heads * hs;
    uint32_t                   kv_dim = c->n_kv_heads * hs;
    uint32_t                   kv_mul = c->n_heads / c->n_kv_heads;

    /* copy the token embedding into x */
    moon_tensor_row(&m->tok_embd, (uint32_t)token, s->x);

    for (uint32_t l = 0; l < c->n_layers; l++) {
        const moon_layer_t *L = &m->layers[l];

        /* attention rmsnorm */
        rmsnorm(s->xb, s->x, L->attn_norm, dim, c->norm_eps);

        /* qkv matmuls for this position */
        matvec(s, s->q, s->xb, &L->wq);
        matvec(s, s->k, s->xb, &L->wk);
        matvec(s, s->v, s->xb, &L->wv);

        /* biases (qwen2) */
        if (L->bq != NULL) {
            for (uint32_t i = 0; i < q_dim; i++) {
                s->q[i] += L->bq[i];
            }
            for (uint32_t i = 0; i < kv_dim; i++) {
                s->k[i] += L->bk[i];
                s->v[i] += L->bv[i];
            }
        }

        /* per-head RMSNorm of q and k (qwen3) */
        if (L->q_norm != NULL) {
            for (uint32_t h = 0; h < c->n_heads; h++) {
                rmsnorm(s->q + h * hs, s->q + h * hs, L->q_norm, hs, c->norm_eps);
            }
            for (uint32_t h = 0; h < c->n_kv_heads; h++) {
                rmsnorm(s->k + h * hs, s->k + h * hs, L->k_norm, hs, c->norm_eps);
            }
        }

        /* RoPE: rotate pair j of each head of q and k by its angle; the pair
         * is (2j, 2j + 1) (llama) or (j, j + hs / 2) (NeoX: qwen) */
        for (uint32_t i = 0; i < q_dim; i += hs) {
            for (uint32_t j = 0; j < hs / 2; j++) {
                float    fcr, fci;
                uint32_t a = c->rope_neox ? i + j : i + 2 * j;
                uint32_t b = c->rope_neox ? i + j + hs / 2 : i + 2 * j + 1;
                moon_model_rope_cos_sin(m, pos, j, &fcr, &fci);
                for (int which = 0; which < (i < kv_dim ? 2 : 1); which++) {
                    float *vec = which == 0 ? s->q : s->k;
                    float  v0 = vec[a], v1 = vec[b];
                    vec[a] = v0 * fcr - v1 * fci;
                    vec[b] = v0 * fci + v1 * fcr;
                }
            }
        }

        /* save k, v into this position's slot of the paged cache */
        moon_kv_store(kv, sq, l, 0, pos, s->k);
        moon_kv_store(kv, sq, l, 1, pos, s->v);

        /* multihead attention over positions 0..pos */
        for (uint32_t h = 0; h < c->n_heads; h++) {
            const float *q   = s->q + h * hs;
            float       *xb  = s->xb + h * hs;
            uint32_t     kvh = h / kv_mul;
            for (uint32_t t = 0; t <= pos; t++) {
                const float *k     = moon_kv_load(kv, sq, l, 0, t, kvh * hs, hs, s->row);
                float        score = 0.0f;
                for (uint32_t i = 0; i < hs; i++) {
                    score += q[i] * k[i];
                }
                s->att[t] = score / sqrtf((float)hs);
            }
            softmax(s->att, pos + 1);
            memset(xb, 0, hs * sizeof(float));
            for (uint32_t t = 0; t <= pos; t++) {
                const float *v = moon_kv_load(kv, sq, l, 1, t, kvh * hs, hs, s->row);
                for (uint32_t i = 0; i < hs; i++) {
                    xb[i] += s->att[t] * v[i];
                }
            }
        }

        /* output projection (q_dim to dim), residual */
        matvec(s, s->xb2, s->xb, &L->wo);
        for (uint32_t i = 0; i < dim; i++) {
            s->x[i] += s->xb2[i];
        }

        /* ffn rmsnorm, then w2(silu(w1 x) * w3 x), residual */
        rmsnorm(s->xb, s->x, L->ffn_norm, dim, c->norm_eps);
        matvec(s, s->hb, s->xb, &L->w1);
        matvec(s, s->hb2, s->xb, &L->w3);
        for (uint32_t i = 0; i < c->hidden_dim; i++) {
            float val = s->hb[i];
            s->hb[i]  = val * (1.0f / (1.0f + expf(-val))) * s->hb2[i];
        }
        matvec(s, s->xb, s->hb, &L->w2);
        for (uint32_t i = 0; i < dim; i++) {
            s->x[i] += s->xb[i];
        }
    }

    /* final rmsnorm and classifier */
    if (logits == NULL && hidden == NULL) {
        return;
    }
    rmsnorm(s->x, s->x, m->output_norm, dim, c->norm_eps);
    if (hidden != NULL) {
        memcpy(hidden, s->x, dim * sizeof(float));
    }
    if (logits != NULL) {
        matvec(s, logits, s->x, &m->output);
    }
}

static void ref_destroy(void *state)
{
    ref_state_t *s = state;

    if (s == NULL) {
        return;
    }
    MOON_FREE_ALL(s->x, s->xb, s->xb2, s->hb, s->hb2, s->q, s->k, s->v, s->att, s->row, s);
}

static moon_status_t ref_create(const moon_model_t *m, const moon_engine_config_t *cfg,
                                void **state_p)
{
    const moon_model_config_t *c      = &m->cfg;
    ref_state_t               *s      = moon_calloc(1, sizeof(*s));
    uint32_t                   kv_dim = c->n_kv_heads * c->head_dim;
    uint32_t                   wide   = MOON_MAX(c->dim, moon_model_q_dim(c));

    (void)cfg;
    if (s == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    s->m   = m;
    s->x   = moon_malloc(c->dim * sizeof(float));
    s->xb  = moon_malloc(wide * sizeof(float));
    s->xb2 = moon_malloc(c->dim * sizeof(float));
    s->hb  = moon_malloc(c->hidden_dim * sizeof(float));
    s->hb2 = moon_malloc(c->hidden_dim * sizeof(float));
    s->q   = moon_malloc(moon_model_q_dim(c) * sizeof(float));
    s->k   = moon_malloc(kv_dim * sizeof(float));
    s->v   = moon_malloc(kv_dim * sizeof(float));
    s->att = moon_malloc(c->seq_len * sizeof(float));
    s->row = moon_malloc(MOON_MAX(wide, c->hidden_dim) * sizeof(float));
    if (!s->x || !s->xb || !s->xb2 || !s->hb || !s->hb2 || !s->q || !s->k || !s->v || !s->att ||
        !s->row) {
        ref_destroy(s);
        return MOON_ERR_NO_MEMORY;
    }
    *state_p = s;
    return MOON_OK;
}

static moon_status_t ref_prefill(void *state, moon_kv_cache_t *kv, uint32_t seq,
                                 const int32_t *tokens, uint32_t n, float *logits,
                                 double *modeled_s_p)
{
    const moon_kv_seq_t *sq = &kv->seqs[seq];

    (void)modeled_s_p;
    for (uint32_t i = 0; i < n; i++) {
        forward_token(state, kv, sq, tokens[i], sq->n_tokens + i, i + 1 == n ? logits : NULL, NULL);
    }
    return MOON_OK;
}

static moon_status_t ref_prefill_rows(void *state, moon_kv_cache_t *kv, uint32_t seq,
                                      const int32_t *tokens, uint32_t n, float *logits,
                                      float *hidden, double *modeled_s_p)
{
    ref_state_t         *s  = state;
    const moon_kv_seq_t *sq = &kv->seqs[seq];

    (void)modeled_s_p;
    for (uint32_t i = 0; i < n; i++) {
        forward_token(s, kv, sq, tokens[i], sq->n_tokens + i,
                      logits ? logits + (size_t)i * s->m->cfg.vocab_size : NULL,
                      hidden ? hidden + (size_t)i * s->m->cfg.dim : NULL);
    }
    return MOON_OK;
}

static moon_status_t ref_decode(void *state, moon_kv_cache_t *kv, const uint32_t *seqs,
                                const int32_t *tokens, uint32_t n_seqs, float *logits,
                                double *modeled_s_p)
{
    ref_state_t *s = state;

    (void)modeled_s_p;
    for (uint32_t b = 0; b < n_seqs; b++) {
        const moon_kv_seq_t *sq = &kv->seqs[seqs[b]];
        forward_token(s, kv, sq, tokens[b], sq->n_tokens,
                      logits ? logits + (size_t)b * s->m->cfg.vocab_size : NULL, NULL);
    }
    return MOON_OK;
}

const moon_model_backend_ops_t moon_backend_ref_ops = {
    .name         = "ref",
    .create       = ref_create,
    .destroy      = ref_destroy,
    .prefill      = ref_prefill,
    .decode       = ref_decode,
    .prefill_rows = ref_prefill_rows,
    .kv_f16       = 1,
};
