/* tests/unit/model/test_head_dim.c - models whose attention heads are not
 * dim / n_heads wide (Qwen 3 0.6B: dim 1024, 16 heads of 128; GGUF
 * attention.key_length). The logits of the REF and CPU backends at every
 * position of a prompt against a plain double-precision forward pass written
 * here from the shape and the GGUF's raw F32 tensors (no model.c binding, no
 * forward_ref.c), for Llama (adjacent-pair RoPE) and Qwen 3 (per-head Q/K
 * norms, NeoX RoPE), heads wider and narrower than dim / n_heads, with GQA.
 * Tolerance: 1e-4 x max(1, max |reference logit|). Also: the loader refuses a
 * value_length other than key_length (UNSUPPORTED) and heads that do not
 * split dim without a key_length (CORRUPT); gen-model refuses an odd head. */
#include "model_test_util.h"
#include "moonlet/gguf.h"

#include <stdlib.h>
#include <string.h>

#define TOL 1e-4f
#define N_TOK 24

typedef struct {
    const moon_model_config_t *c;
    const moon_gguf_t         *g;
    double                    *kc, *vc; /* (n_layers, N_TOK, kv_dim) */
} ref_t;

/* Row r of an F32 matrix tensor (ne[0] = cols). */
static const float *row_of(const moon_gguf_t *g, const char *name, uint32_t r, uint32_t cols)
{
    const moon_gguf_tensor_t *t = moon_gguf_find_tensor(g, name);

    CU_ASSERT_FATAL(t != NULL && t->type == MOON_GGML_F32 && t->ne[0] == cols);
    return (const float *)t->data + (size_t)r * cols;
}

/* y (rows) = W x, W the named (rows, cols) tensor */
static void mv(const moon_gguf_t *g, const char *name, const double *x, uint32_t rows,
               uint32_t cols, double *y)
{
    for (uint32_t r = 0; r < rows; r++) {
        const float *w = row_of(g, name, r, cols);
        double       s = 0.0;
        for (uint32_t i = 0; i < cols; i++) {
            s += (double)w[i] * x[i];
        }
        y[r] = s;
    }
}

static void rms(const moon_gguf_t *g, const char *wname, const double *x, uint32_t n, double eps,
                double *y)
{
    const float *w  = row_of(g, wname, 0, n);
    double       ss = 0.0;

    for (uint32_t i = 0; i < n; i++) {
        ss += x[i] * x[i];
    }
    ss = 1.0 / sqrt(ss / n + eps);
    for (uint32_t i = 0; i < n; i++) {
        y[i] = w[i] * x[i] * ss;
    }
}

/* RoPE on each head of n_heads in v at pos: pair j is (2j, 2j+1) for llama,
 * (j, j + hd/2) for NeoX; angle pos * theta^(-2j / hd). */
static void rope(const moon_model_config_t *c, double *v, uint32_t n_heads, uint32_t pos)
{
    uint32_t hd = c->head_dim;

    for (uint32_t h = 0; h < n_heads; h++) {
        for (uint32_t j = 0; j < hd / 2; j++) {
            double   a  = pos * pow(c->rope_theta, -2.0 * j / hd);
            uint32_t i0 = h * hd + (c->arch == MOON_ARCH_LLAMA ? 2 * j : j);
            uint32_t i1 = i0 + (c->arch == MOON_ARCH_LLAMA ? 1 : hd / 2);
            double   x0 = v[i0], x1 = v[i1];
            v[i0] = x0 * cos(a) - x1 * sin(a);
            v[i1] = x0 * sin(a) + x1 * cos(a);
        }
    }
}

/* The logits after token tok at position pos (earlier positions' K/V kept). */
static void ref_token(ref_t *R, int32_t tok, uint32_t pos, double *logits)
{
    const moon_model_config_t *c = R->c;
    const moon_gguf_t         *g = R->g;
    uint32_t dim = c->dim, hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    uint32_t H = c->hidden_dim;
    double  *x = calloc(dim, sizeof(double)), *h = calloc(dim, sizeof(double));
    double  *q = calloc(qd, sizeof(double)), *o = calloc(qd, sizeof(double));
    double  *y = calloc(dim, sizeof(double)), *att = calloc(N_TOK, sizeof(double));
    double  *g1 = calloc(H, sizeof(double)), *g3 = calloc(H, sizeof(double));
    double   eps = c->norm_eps;
    char     name[64];

    for (uint32_t i = 0; i < dim; i++) {
        x[i] = row_of(g, "token_embd.weight", (uint32_t)tok, dim)[i];
    }
    for (uint32_t l = 0; l < c->n_layers; l++) {
        double *k = R->kc + ((size_t)l * N_TOK + pos) * kvd;
        double *v = R->vc + ((size_t)l * N_TOK + pos) * kvd;
#define W(_s) (snprintf(name, sizeof(name), "blk.%u.%s", l, (_s)), name)
        rms(g, W("attn_norm.weight"), x, dim, eps, h);
        mv(g, W("attn_q.weight"), h, qd, dim, q);
        mv(g, W("attn_k.weight"), h, kvd, dim, k);
        mv(g, W("attn_v.weight"), h, kvd, dim, v);
        if (c->arch == MOON_ARCH_QWEN3) {
            for (uint32_t i = 0; i < qd; i += hd) {
                rms(g, W("attn_q_norm.weight"), q + i, hd, eps, q + i);
            }
            for (uint32_t i = 0; i < kvd; i += hd) {
                rms(g, W("attn_k_norm.weight"), k + i, hd, eps, k + i);
            }
        }
        rope(c, q, c->n_heads, pos);
        rope(c, k, c->n_kv_heads, pos);
        for (uint32_t hh = 0; hh < c->n_heads; hh++) {
            uint32_t kvh = hh / (c->n_heads / c->n_kv_heads);
            double   mx = -INFINITY, sum = 0.0;
            for (uint32_t t = 0; t <= pos; t++) {
                const double *kt = R->kc + ((size_t)l * N_TOK + t) * kvd + kvh * hd;
                double        d  = 0.0;
                for (uint32_t i = 0; i < hd; i++) {
                    d += q[hh * hd + i] * kt[i];
                }
                att[t] = d / sqrt((double)hd);
                mx     = fmax(mx, att[t]);
            }
            for (uint32_t t = 0; t <= pos; t++) {
                att[t] = exp(att[t] - mx);
                sum += att[t];
            }
            for (uint32_t i = 0; i < hd; i++) {
                double acc = 0.0;
                for (uint32_t t = 0; t <= pos; t++) {
                    acc += att[t] * R->vc[((size_t)l * N_TOK + t) * kvd + kvh * hd + i];
                }
                o[hh * hd + i] = acc / sum;
            }
        }
        mv(g, W("attn_output.weight"), o, dim, qd, y); /* n_heads * head_dim -> dim */
        for (uint32_t i = 0; i < dim; i++) {
            x[i] += y[i];
        }
        rms(g, W("ffn_norm.weight"), x, dim, eps, h);
        mv(g, W("ffn_gate.weight"), h, H, dim, g1);
        mv(g, W("ffn_up.weight"), h, H, dim, g3);
        for (uint32_t i = 0; i < H; i++) {
            g1[i] = g1[i] / (1.0 + exp(-g1[i])) * g3[i];
        }
        mv(g, W("ffn_down.weight"), g1, dim, H, y);
        for (uint32_t i = 0; i < dim; i++) {
            x[i] += y[i];
        }
#undef W
    }
    rms(g, "output_norm.weight", x, dim, eps, h);
    mv(g, "token_embd.weight", h, c->vocab_size, dim, logits); /* tied classifier */
    free(x), free(h), free(q), free(o), free(y), free(att), free(g1), free(g3);
}

/* Largest |ours - want| relative to max(1, max |want|). */
static float rel_diff_d(const float *ours, const double *want, uint32_t n)
{
    double md = 0.0, mw = 1.0;

    for (uint32_t i = 0; i < n; i++) {
        md = fmax(md, fabs(ours[i] - want[i]));
        mw = fmax(mw, fabs(want[i]));
    }
    return (float)(md / mw);
}

/* Every position of a prompt, decoded token by token on REF and CPU, and the
 * CPU's prefill of the whole prompt (its last logits), against ref_token. */
static void check_shape(moon_model_config_t shape, uint64_t seed)
{
    char                       path[256];
    moon_model_t              *m = mt_random_model(&shape, MOON_GGML_F32, seed, path, sizeof(path));
    moon_gguf_t               *g = NULL;
    ref_t                      R;
    moon_backend_kind_t        kinds[2] = {MOON_BACKEND_REF, MOON_BACKEND_CPU};
    moon_engine_t             *eng[2]   = {NULL, NULL};
    moon_kv_cache_t           *kv[3]    = {NULL, NULL, NULL};
    uint32_t                   seq[3];
    int32_t                    toks[N_TOK];
    uint64_t                   rng = seed;
    double                    *want;
    float                     *got, worst = 0.0f;
    const moon_model_config_t *c;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    c = moon_model_config(m);
    CU_ASSERT_EQUAL(c->head_dim, shape.head_dim);
    CU_ASSERT_NOT_EQUAL(c->head_dim * c->n_heads, c->dim);
    CU_ASSERT_EQUAL_FATAL(moon_gguf_open(path, &g), MOON_OK);
    R.c = &shape;
    R.g = g;
    R.kc =
        calloc((size_t)shape.n_layers * N_TOK * shape.n_kv_heads * shape.head_dim, sizeof(double));
    R.vc =
        calloc((size_t)shape.n_layers * N_TOK * shape.n_kv_heads * shape.head_dim, sizeof(double));
    want = malloc((size_t)N_TOK * shape.vocab_size * sizeof(double));
    got  = malloc((size_t)shape.vocab_size * sizeof(float));
    for (int i = 0; i < N_TOK; i++) {
        toks[i] = (int32_t)(moon_test_rand(&rng) % shape.vocab_size);
        ref_token(&R, toks[i], (uint32_t)i, want + (size_t)i * shape.vocab_size);
    }
    for (int e = 0; e < 2; e++) {
        moon_engine_config_t ecfg = {
            .kind = kinds[e], .n_threads = 2, .max_batch = 2, .max_chunk = N_TOK};
        moon_kv_config_t kcfg = moon_model_kv_config(c, 4, 2 * N_TOK / 4, 1);
        CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ecfg, &eng[e]), MOON_OK);
        CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv[e]), MOON_OK);
        CU_ASSERT_EQUAL_FATAL(moon_kv_seq_create(kv[e], &seq[e]), MOON_OK);
        for (int i = 0; i < N_TOK; i++) {
            CU_ASSERT_EQUAL_FATAL(
                moon_engine_decode(eng[e], kv[e], &seq[e], &toks[i], 1, got, NULL), MOON_OK);
            worst = fmaxf(worst,
                          rel_diff_d(got, want + (size_t)i * shape.vocab_size, shape.vocab_size));
        }
    }
    { /* CPU prefill of the whole prompt (GEMM attention over the chunk) */
        moon_kv_config_t kcfg = moon_model_kv_config(c, 4, 2 * N_TOK / 4, 1);
        CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv[2]), MOON_OK);
        CU_ASSERT_EQUAL_FATAL(moon_kv_seq_create(kv[2], &seq[2]), MOON_OK);
        CU_ASSERT_EQUAL_FATAL(moon_engine_prefill(eng[1], kv[2], seq[2], toks, N_TOK, got, NULL),
                              MOON_OK);
        worst = fmaxf(worst, rel_diff_d(got, want + (size_t)(N_TOK - 1) * shape.vocab_size,
                                        shape.vocab_size));
    }
    printf("\n  %s dim %u, %u/%u heads of %u: max rel diff vs the plain pass %.2e ",
           moon_model_arch_name(c->arch), c->dim, c->n_heads, c->n_kv_heads, c->head_dim,
           (double)worst);
    CU_ASSERT(worst <= TOL);
    for (int i = 0; i < 3; i++) {
        moon_kv_cache_destroy(kv[i]);
    }
    moon_engine_destroy(eng[0]);
    moon_engine_destroy(eng[1]);
    moon_gguf_close(g);
    moon_model_destroy(m);
    unlink(path);
    free(R.kc), free(R.vc), free(want), free(got);
}

static moon_model_config_t shape_of(uint32_t arch, uint32_t dim, uint32_t heads, uint32_t kv,
                                    uint32_t head_dim)
{
    moon_model_config_t c = mt_shape(dim, 2 * dim, 2, heads, kv, 300, 64);

    c.arch     = arch;
    c.head_dim = head_dim;
    return c;
}

static void test_against_plain_pass(void)
{
    check_shape(shape_of(MOON_ARCH_QWEN3, 64, 4, 2, 32), 7);  /* Qwen 3 0.6B's ratio: 2x wider */
    check_shape(shape_of(MOON_ARCH_QWEN3, 128, 4, 4, 16), 8); /* narrower */
    check_shape(shape_of(MOON_ARCH_LLAMA, 64, 2, 1, 48), 9);  /* MQA, 96 wide Q */
}

/* Replaces the first occurrence of from by to (same length) in buf. */
static uint8_t *patch(uint8_t *buf, size_t len, const char *from, const char *to)
{
    size_t n = strlen(from);

    for (size_t i = 0; i + n <= len; i++) {
        if (memcmp(buf + i, from, n) == 0) {
            memcpy(buf + i, to, n);
            return buf + i + n;
        }
    }
    CU_FAIL("key not in the file");
    return NULL;
}

static void test_bad_head_sizes(void)
{
    moon_model_config_t c = shape_of(MOON_ARCH_QWEN3, 96, 5, 1, 16); /* 5 heads do not split 96 */
    char                path[256];
    moon_model_t       *m = mt_random_model(&c, MOON_GGML_F32, 3, path, sizeof(path));
    uint8_t            *buf;
    size_t              len;
    uint32_t            v = 18;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(moon_model_config(m)->head_dim, 16);
    moon_model_destroy(m);
    buf = (uint8_t *)moon_test_read_file(path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    /* value_length 18 (the u32 after the key's name and type) */
    memcpy(patch(buf, len, "qwen3.attention.value_length", "qwen3.attention.value_length") + 4, &v,
           4);
    m = NULL;
    CU_ASSERT_EQUAL(moon_model_load_memory(buf, len, &m), MOON_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(m);
    /* no key_length nor value_length: 96 / 5 is no head size */
    patch(buf, len, "qwen3.attention.value_length", "qwen3.attention.xalue_length");
    patch(buf, len, "qwen3.attention.key_length", "qwen3.attention.xey_length");
    CU_ASSERT_EQUAL(moon_model_load_memory(buf, len, &m), MOON_ERR_CORRUPT);
    CU_ASSERT_PTR_NULL(m);
    free(buf);
    unlink(path);
    /* the writer: an odd head, or none where heads do not split dim */
    c.head_dim = 15;
    CU_ASSERT_EQUAL(moon_model_write_random(&c, MOON_GGML_F32, 1, path), MOON_ERR_INVALID_PARAM);
    c.head_dim = 0;
    CU_ASSERT_EQUAL(moon_model_write_random(&c, MOON_GGML_F32, 1, path), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
}

MOON_TEST_MAIN("head_dim", NULL, NULL, test_against_plain_pass, test_bad_head_sizes)
