/* model/cuda/backend_cuda.cu - the CUDA backend behind moon_model_backend_ops_t
 * (built with MOON_WITH_CUDA). Weights live on the device as F32 (dequantized
 * at create; wq/wk/wv and w1/w3 stacked so each group is one GEMM); matmuls
 * are cuBLAS sgemm; RMSNorm (fused with the residual add), RoPE (adjacent
 * pairs, or NeoX's halves), qwen2's Q/K/V biases and qwen3's per-head Q/K
 * norms, SwiGLU and attention over the paged KV cache are kernels, each
 * with a CPU twin in forward_ref.c. Decode steps replay a CUDA graph per batch size. The host
 * KV cache stays authoritative: the backend keeps a device mirror of the
 * block pool, uploads the blocks a call reads that someone else wrote since
 * (kv->writer tags), and writes the new tokens' K/V back to the host, so
 * export/import and mixing backends keep working. One stream of its own;
 * calls are synchronous. */
#ifndef _Noreturn
#define _Noreturn __attribute__((noreturn)) /* C11 keyword in moonlet/log.h */
#endif
extern "C" {
#include "model_internal.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"
}

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CK(_call)                                                                                  \
    do {                                                                                           \
        cudaError_t _e = (_call);                                                                  \
        if (_e != cudaSuccess) {                                                                   \
            MOON_ERROR("cuda: %s failed: %s", #_call, cudaGetErrorString(_e));                     \
            return MOON_ERR_IO;                                                                    \
        }                                                                                          \
    } while (0)
#define CB(_call)                                                                                  \
    do {                                                                                           \
        cublasStatus_t _s = (_call);                                                               \
        if (_s != CUBLAS_STATUS_SUCCESS) {                                                         \
            MOON_ERROR("cublas: %s failed: %d", #_call, (int)_s);                                  \
            return MOON_ERR_IO;                                                                    \
        }                                                                                          \
    } while (0)

typedef struct {
    float *attn_norm, *ffn_norm; /* (dim) */
    float *wqkv;                 /* (q_dim + 2 kv_dim, dim): wq, wk, wv stacked, one GEMM */
    float *wo;                   /* (dim, q_dim) */
    float *w13;                  /* (2 hidden, dim): w1 (gate) over w3 (up), one GEMM */
    float *w2;                   /* (dim, hidden) */
    float *bqkv;                 /* (q_dim + 2 kv_dim) Q/K/V biases (qwen2), or NULL */
    float *qk_norm; /* (2 head_dim) per-head Q then K RMSNorm weights (qwen3), or NULL */
} d_layer_t;

typedef struct {
    const moon_model_t *m;
    cublasHandle_t      blas;
    cudaStream_t        stream;
    void               *d_blas_ws; /* cuBLAS workspace (graph capture) */
    uint32_t            max_b;
    uint32_t            n_sms;                              /* multiprocessors */
    float              *d_embd, *d_out, *d_out_norm;        /* (vocab, dim), (vocab, dim), (dim) */
    d_layer_t          *layers;                             /* host array of device pointers */
    float    *d_x, *d_xb, *d_qkv, *d_ao, *d_h13, *d_logits; /* activations, (max_b) rows */
    float    *d_rope;                                       /* (seq_len, head_dim) cos, sin */
    int32_t  *d_tokens, *d_pos;                             /* (max_b) */
    uint32_t *d_tables;                                     /* (max_b, max_blocks_per_seq) */
    uint32_t *h_tables;
    /* pinned host staging (copies from pageable memory serialise) */
    int32_t              *h_pos, *h_tokens; /* (max_b) */
    float                *h_logits;         /* (max_batch, vocab) */
    float                *h_rows; /* (max_batch, 2 n_layers, kv_dim): decode's new K/V rows */
    uint32_t              max_batch;
    float                *d_kv;       /* mirror of the host block pool */
    uint64_t              kv_id;      /* the cache d_kv mirrors (0: none) */
    const moon_kv_seq_t **rows;       /* (max_b) a call's rows' sequences */
    uint64_t              mirror_id;  /* tag of blocks d_kv holds as is */
    uint64_t              n_uploaded; /* blocks uploaded (debug log) */
    /* decode steps replay a CUDA graph per batch size (captured on first use:
     * one launch instead of ~9 per layer); MOON_CUDA_GRAPHS=0 turns it off */
    int              use_graphs;
    cudaGraphExec_t *graphs;       /* (max_b + 1) */
    uint8_t         *graph_failed; /* (max_b + 1) */
    /* the device: CUDA's current device is per thread, and the engine is
     * called from whichever worker runs its instance */
    int dev;
} cuda_state_t;

#define ATT_WARPS_MAX 32 /* k_attention: warps per (row, head), at most */
#define ATT_VEC 4        /* head_dim <= 32 * ATT_VEC */

/* ---- kernels (CPU twins: forward_ref.c) ----------------------------------------- */

__global__ void k_embed(float *x, const float *embd, const int32_t *tok, uint32_t dim)
{
    uint32_t b = blockIdx.x;
    for (uint32_t i = threadIdx.x; i < dim; i += blockDim.x) {
        x[(size_t)b * dim + i] = embd[(size_t)tok[b] * dim + i];
    }
}

/* Row b (a block of 256 threads): with y, x += y first; then
 * o = w * x / rms(x). o may be y (y is read before o is written). */
__global__ void k_add_rmsnorm(float *x, const float *y, float *o, const float *w, uint32_t dim,
                              float eps)
{
    __shared__ float red[256];
    uint32_t         b  = blockIdx.x;
    float           *xr = x + (size_t)b * dim;
    float            ss = 0.0f;
    for (uint32_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i];
        if (y != NULL) {
            v += y[(size_t)b * dim + i];
            xr[i] = v;
        }
        ss += v * v;
    }
    red[threadIdx.x] = ss;
    __syncthreads();
    for (uint32_t s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            red[threadIdx.x] += red[threadIdx.x + s];
        }
        __syncthreads();
    }
    ss = rsqrtf(red[0] / (float)dim + eps);
    for (uint32_t i = threadIdx.x; i < dim; i += blockDim.x) {
        o[(size_t)b * dim + i] = w[i] * (ss * xr[i]);
    }
}

/* Row b of qkv before RoPE, as the CPU path does it: the Q/K/V biases
 * (qwen2; NULL: none), then each Q and K head RMS-normed with the per-head
 * weights (qwen3; NULL: none), a warp per head. */
__global__ void k_qkv_prep(float *qkv, uint32_t stride, const float *bias, const float *qk_norm,
                           uint32_t n_q_heads, uint32_t n_kv_heads, uint32_t hs, float eps)
{
    float   *row  = qkv + (size_t)blockIdx.x * stride;
    uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;

    if (bias != NULL) {
        for (uint32_t i = threadIdx.x; i < (n_q_heads + 2 * n_kv_heads) * hs; i += blockDim.x) {
            row[i] += bias[i];
        }
        __syncthreads();
    }
    if (qk_norm == NULL) {
        return;
    }
    for (uint32_t h = warp; h < n_q_heads + n_kv_heads; h += n_warps) {
        float       *x  = row + (size_t)h * hs; /* K heads follow the Q heads */
        const float *w  = qk_norm + (h < n_q_heads ? 0 : hs);
        float        ss = 0.0f;
        for (uint32_t j = lane; j < hs; j += 32) {
            ss += x[j] * x[j];
        }
        for (int o = 16; o > 0; o /= 2) {
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        }
        ss = rsqrtf(ss / (float)hs + eps);
        for (uint32_t j = lane; j < hs; j += 32) {
            x[j] = w[j] * (ss * x[j]);
        }
    }
}

/* Row b of qkv (stride floats apart: q (q_dim = n_heads * hs), k, v
 * (kv_dim)): RoPE on q in place and on k at pos[b]; the rotated k and v into
 * the cache. Pairs are adjacent values, or with neox (qwen2, qwen3) values j
 * and j + hs / 2 of each head, by the angle of pair j either way. */
__global__ void k_rope_store(float *qkv, uint32_t stride, const float *rope, const int32_t *pos,
                             const uint32_t *tables, uint32_t tstride, float *kv, uint32_t q_dim,
                             uint32_t kv_dim, uint32_t hs, uint32_t bt, size_t block_floats,
                             size_t layer_floats, uint32_t layer, int neox)
{
    uint32_t     b   = blockIdx.x;
    int32_t      p   = pos[b];
    const float *cs  = rope + (size_t)p * hs;
    uint32_t     blk = tables[(size_t)b * tstride + (uint32_t)p / bt];
    float       *kd  = kv + (size_t)blk * block_floats + (size_t)layer * layer_floats +
                (size_t)((uint32_t)p % bt) * kv_dim;
    float       *vd = kd + (size_t)bt * kv_dim;
    float       *qq = qkv + (size_t)b * stride;
    const float *kk = qq + q_dim;
    const float *vv = kk + kv_dim;

    if (neox) {
        for (uint32_t t = threadIdx.x; t < q_dim / 2; t += blockDim.x) {
            uint32_t j = t % (hs / 2), i0 = t / (hs / 2) * hs + j, i1 = i0 + hs / 2;
            float    fcr = cs[2 * j], fci = cs[2 * j + 1];
            float    q0 = qq[i0], q1 = qq[i1];
            qq[i0] = q0 * fcr - q1 * fci;
            qq[i1] = q0 * fci + q1 * fcr;
            if (i0 < kv_dim) {
                float k0 = kk[i0], k1 = kk[i1];
                kd[i0] = k0 * fcr - k1 * fci;
                kd[i1] = k0 * fci + k1 * fcr;
            }
        }
        for (uint32_t i = threadIdx.x; i < kv_dim; i += blockDim.x) {
            vd[i] = vv[i];
        }
        return;
    }
    for (uint32_t i = 2 * threadIdx.x; i < q_dim; i += 2 * blockDim.x) {
        float fcr = cs[i % hs], fci = cs[i % hs + 1];
        float q0 = qq[i], q1 = qq[i + 1];
        qq[i]     = q0 * fcr - q1 * fci;
        qq[i + 1] = q0 * fci + q1 * fcr;
        if (i < kv_dim) {
            float k0 = kk[i], k1 = kk[i + 1];
            kd[i]     = k0 * fcr - k1 * fci;
            kd[i + 1] = k0 * fci + k1 * fcr;
            vd[i]     = vv[i];
            vd[i + 1] = vv[i + 1];
        }
    }
}

/* One block per (row, head), of up to ATT_WARPS_MAX warps. Each warp takes
 * every n_warps-th cached position with an online softmax (running max m,
 * sum l and weighted V in registers: no buffer that grows with the context);
 * the warps' states are merged at the end. Lanes split the head dimension.
 * A warp's positions are a chain of dependent loads, so few rows (decode)
 * get many warps each. */
__global__ void k_attention(float *out, const float *qkv, uint32_t stride, const float *kv,
                            const int32_t *pos, const uint32_t *tables, uint32_t tstride,
                            uint32_t n_heads, uint32_t kv_mul, uint32_t hs, uint32_t q_dim,
                            uint32_t kv_dim, uint32_t bt, size_t block_floats, size_t layer_floats,
                            uint32_t layer)
{
    __shared__ float sm[ATT_WARPS_MAX], sl[ATT_WARPS_MAX], so[ATT_WARPS_MAX][32 * ATT_VEC];
    uint32_t         b = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
    uint32_t         warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
    uint32_t         n = (uint32_t)pos[b] + 1, kvh = h / kv_mul;
    const float     *qh    = qkv + (size_t)b * stride + h * hs;
    const float     *base  = kv + (size_t)layer * layer_floats + kvh * hs;
    float            scale = rsqrtf((float)hs), m = -INFINITY, l = 0.0f;
    float            q[ATT_VEC], o[ATT_VEC];

    for (uint32_t j = 0; j < ATT_VEC; j++) {
        uint32_t i = lane + 32 * j;
        q[j]       = i < hs ? qh[i] * scale : 0.0f;
        o[j]       = 0.0f;
    }
    for (uint32_t t = warp; t < n; t += n_warps) {
        uint32_t     blk = tables[(size_t)b * tstride + t / bt];
        const float *k   = base + (size_t)blk * block_floats + (size_t)(t % bt) * kv_dim;
        const float *v   = k + (size_t)bt * kv_dim;
        float        d   = 0.0f, mn, c, pr;
        for (uint32_t j = 0; j < ATT_VEC; j++) {
            uint32_t i = lane + 32 * j;
            d += i < hs ? q[j] * k[i] : 0.0f;
        }
        for (int off = 16; off > 0; off >>= 1) {
            d += __shfl_xor_sync(0xffffffffu, d, off);
        }
        mn = fmaxf(m, d);
        c  = expf(m - mn); /* 0 on the first position (m = -inf) */
        pr = expf(d - mn);
        l  = l * c + pr;
        for (uint32_t j = 0; j < ATT_VEC; j++) {
            uint32_t i = lane + 32 * j;
            o[j]       = o[j] * c + (i < hs ? pr * v[i] : 0.0f);
        }
        m = mn;
    }
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
    for (uint32_t j = 0; j < ATT_VEC; j++) {
        so[warp][lane + 32 * j] = o[j];
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < hs; i += blockDim.x) {
        float mx = -INFINITY, sum = 0.0f, acc = 0.0f;
        for (uint32_t w = 0; w < n_warps; w++) {
            mx = fmaxf(mx, sm[w]);
        }
        for (uint32_t w = 0; w < n_warps; w++) {
            float f = sl[w] > 0.0f ? expf(sm[w] - mx) : 0.0f; /* a warp with no position */
            sum += sl[w] * f;
            acc += so[w][i] * f;
        }
        out[(size_t)b * q_dim + h * hs + i] = acc / sum;
    }
}

/* h13 rows are (gate (hidden), up (hidden)): gate = silu(gate) * up in place. */
__global__ void k_swiglu(float *h13, uint32_t hidden, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float *g = h13 + (i / hidden) * 2 * hidden + i % hidden;
        float  v = *g;
        *g       = v * (1.0f / (1.0f + expf(-v))) * g[hidden];
    }
}

/* ---- host side ----------------------------------------------------------------- */

/* Tensor t dequantized to F32 into d (rows * cols floats already allocated). */
static moon_status_t upload_rows(const moon_tensor_t *t, float *d)
{
    size_t n = (size_t)t->rows * t->cols;
    float *h = (float *)moon_malloc(n * sizeof(float));

    if (h == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t r = 0; r < t->rows; r++) {
        moon_tensor_row(t, r, h + (size_t)r * t->cols);
    }
    if (cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        moon_free(h);
        MOON_ERROR("cuda: weight upload failed");
        return MOON_ERR_IO;
    }
    moon_free(h);
    return MOON_OK;
}

/* The tensors stacked row-wise into one new device matrix. */
static moon_status_t upload_stacked(const moon_tensor_t *const *ts, int n, float **d_p)
{
    size_t        rows = 0, off = 0;
    moon_status_t status = MOON_OK;

    for (int i = 0; i < n; i++) {
        rows += ts[i]->rows;
    }
    if (cudaMalloc((void **)d_p, rows * ts[0]->cols * sizeof(float)) != cudaSuccess) {
        *d_p = NULL;
        MOON_ERROR("cuda: no device memory for %zu weight rows", rows);
        return MOON_ERR_NO_MEMORY;
    }
    for (int i = 0; i < n && status == MOON_OK; i++) {
        status = upload_rows(ts[i], *d_p + off);
        off += (size_t)ts[i]->rows * ts[i]->cols;
    }
    return status;
}

static moon_status_t upload_vec(const float *h, uint32_t n, float **d_p)
{
    CK(cudaMalloc((void **)d_p, n * sizeof(float)));
    CK(cudaMemcpy(*d_p, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return MOON_OK;
}

/* A layer's Q/K/V biases as one vector in qkv's layout, and its per-head
 * Q and K norm weights side by side, where the architecture has them. */
static moon_status_t upload_qkv_extras(const moon_model_config_t *c, const moon_layer_t *L,
                                       d_layer_t *D)
{
    uint32_t      q_dim = moon_model_q_dim(c), kv_dim = c->n_kv_heads * c->head_dim;
    moon_status_t status = MOON_OK;

    if (L->bq != NULL) {
        float *h = (float *)moon_malloc((size_t)(q_dim + 2 * kv_dim) * sizeof(float));
        if (h == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        memcpy(h, L->bq, q_dim * sizeof(float));
        memcpy(h + q_dim, L->bk, kv_dim * sizeof(float));
        memcpy(h + q_dim + kv_dim, L->bv, kv_dim * sizeof(float));
        status = upload_vec(h, q_dim + 2 * kv_dim, &D->bqkv);
        moon_free(h);
    }
    if (status == MOON_OK && L->q_norm != NULL) {
        float *h = (float *)moon_malloc(2 * (size_t)c->head_dim * sizeof(float));
        if (h == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        memcpy(h, L->q_norm, c->head_dim * sizeof(float));
        memcpy(h + c->head_dim, L->k_norm, c->head_dim * sizeof(float));
        status = upload_vec(h, 2 * c->head_dim, &D->qk_norm);
        moon_free(h);
    }
    return status;
}

static void drop_graphs(cuda_state_t *s)
{
    for (uint32_t b = 0; s->graphs != NULL && s->graph_failed != NULL && b <= s->max_b; b++) {
        if (s->graphs[b] != NULL) {
            cudaGraphExecDestroy(s->graphs[b]);
            s->graphs[b] = NULL;
        }
        s->graph_failed[b] = 0;
    }
}

static void cuda_destroy(void *state)
{
    cuda_state_t *s = (cuda_state_t *)state;

    if (s == NULL) {
        return;
    }
    (void)cudaSetDevice(s->dev); /* its memory is freed there */
    MOON_DEBUG_LOG("cuda: %llu KV blocks uploaded", (unsigned long long)s->n_uploaded);
    drop_graphs(s);
    for (uint32_t l = 0; s->layers != NULL && l < s->m->cfg.n_layers; l++) {
        d_layer_t *L = &s->layers[l];
        void *w[] = {L->attn_norm, L->ffn_norm, L->wqkv, L->wo, L->w13, L->w2, L->bqkv, L->qk_norm};

        for (void *d : w) {
            cudaFree(d);
        }
    }
    if (s->d_out != s->d_embd) {
        cudaFree(s->d_out);
    }
    if (s->blas != NULL) {
        cublasDestroy(s->blas);
    }
    if (s->stream != NULL) {
        cudaStreamDestroy(s->stream);
    }
    {
        /* cudaFree, cudaFreeHost and moon_free take NULL: a half-built state goes too */
        void *dev[]  = {s->d_embd, s->d_out_norm, s->d_x,      s->d_xb,     s->d_qkv,
                        s->d_ao,   s->d_h13,      s->d_logits, s->d_rope,   s->d_tokens,
                        s->d_pos,  s->d_tables,   s->d_kv,     s->d_blas_ws};
        void *host[] = {s->h_pos, s->h_tokens, s->h_logits, s->h_rows};
        void *heap[] = {s->graphs, s->graph_failed, s->h_tables, s->rows, s->layers, s};

        for (void *d : dev) {
            cudaFree(d);
        }
        for (void *h : host) {
            cudaFreeHost(h);
        }
        moon_free_array(heap, MOON_ARRAY_SIZE(heap));
    }
}

static moon_status_t cuda_create_inner(cuda_state_t *s, const moon_engine_config_t *cfg)
{
    const moon_model_config_t *c      = &s->m->cfg;
    uint32_t                   kv_dim = c->n_kv_heads * c->head_dim;
    size_t                     B, ws = (size_t)32 << 20; /* NVIDIA's advice for Hopper */
    moon_status_t              status;
    int                        n_dev = 0;

    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev <= 0) {
        return MOON_ERR_UNSUPPORTED;
    }
    s->dev = (int)(cfg->gpu % (uint32_t)n_dev);
    CK(cudaSetDevice(s->dev));
    if (c->head_dim > 32 * ATT_VEC) {
        MOON_ERROR("cuda: head_dim %u is over the attention kernel's %d", c->head_dim,
                   32 * ATT_VEC);
        return MOON_ERR_UNSUPPORTED;
    }
    s->max_b        = cfg->max_batch > cfg->max_chunk ? cfg->max_batch : cfg->max_chunk;
    B               = s->max_b;
    s->use_graphs   = cfg->tuning->cuda_graphs; /* set by moon_engine_create */
    s->graphs       = (cudaGraphExec_t *)moon_calloc(B + 1, sizeof(cudaGraphExec_t));
    s->graph_failed = (uint8_t *)moon_calloc(B + 1, 1);
    s->layers       = (d_layer_t *)moon_calloc(c->n_layers, sizeof(d_layer_t));
    s->rows         = (const moon_kv_seq_t **)moon_malloc(B * sizeof(*s->rows));
    s->max_batch    = cfg->max_batch > 0 ? cfg->max_batch : 1;
    if (s->graphs == NULL || s->graph_failed == NULL || s->layers == NULL || s->rows == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    CK(cudaMallocHost((void **)&s->h_pos, B * sizeof(int32_t)));
    CK(cudaMallocHost((void **)&s->h_tokens, B * sizeof(int32_t)));
    CK(cudaMallocHost((void **)&s->h_logits, (size_t)s->max_batch * c->vocab_size * sizeof(float)));
    CK(cudaMallocHost((void **)&s->h_rows,
                      (size_t)s->max_batch * 2 * c->n_layers * kv_dim * sizeof(float)));
    {
        int dev = 0, sms = 0;
        CK(cudaGetDevice(&dev));
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        s->n_sms = (uint32_t)sms;
    }
    CK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    CK(cudaMalloc(&s->d_blas_ws, ws));
    CB(cublasCreate(&s->blas));
    CB(cublasSetStream(s->blas, s->stream));
    CB(cublasSetWorkspace(s->blas, s->d_blas_ws, ws));
    {
        const moon_tensor_t *e[1] = {&s->m->tok_embd}, *o[1] = {&s->m->output};
        if ((status = upload_stacked(e, 1, &s->d_embd)) != MOON_OK) {
            return status;
        }
        if (s->m->output.data == s->m->tok_embd.data) {
            s->d_out = s->d_embd;
        } else if ((status = upload_stacked(o, 1, &s->d_out)) != MOON_OK) {
            return status;
        }
    }
    if ((status = upload_vec(s->m->output_norm, c->dim, &s->d_out_norm)) != MOON_OK) {
        return status;
    }
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const moon_layer_t  *L      = &s->m->layers[l];
        d_layer_t           *D      = &s->layers[l];
        const moon_tensor_t *qkv[3] = {&L->wq, &L->wk, &L->wv}, *w13[2] = {&L->w1, &L->w3};
        const moon_tensor_t *wo[1] = {&L->wo}, *w2[1] = {&L->w2};
        if ((status = upload_vec(L->attn_norm, c->dim, &D->attn_norm)) != MOON_OK ||
            (status = upload_vec(L->ffn_norm, c->dim, &D->ffn_norm)) != MOON_OK ||
            (status = upload_stacked(qkv, 3, &D->wqkv)) != MOON_OK ||
            (status = upload_stacked(wo, 1, &D->wo)) != MOON_OK ||
            (status = upload_stacked(w13, 2, &D->w13)) != MOON_OK ||
            (status = upload_stacked(w2, 1, &D->w2)) != MOON_OK ||
            (status = upload_qkv_extras(c, L, D)) != MOON_OK) {
            return status;
        }
    }
    CK(cudaMalloc((void **)&s->d_x, B * c->dim * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_xb, B * c->dim * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_qkv, B * (moon_model_q_dim(c) + 2 * kv_dim) * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_ao, B * moon_model_q_dim(c) * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_h13, B * 2 * c->hidden_dim * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_logits, B * c->vocab_size * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_tokens, B * sizeof(int32_t)));
    CK(cudaMalloc((void **)&s->d_pos, B * sizeof(int32_t)));
    {
        float *rope = (float *)moon_malloc((size_t)c->seq_len * c->head_dim * sizeof(float));
        if (rope == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        for (uint32_t p = 0; p < c->seq_len; p++) {
            for (uint32_t i = 0; i < c->head_dim; i += 2) {
                float *cs = rope + (size_t)p * c->head_dim + i; /* rope_freqs and scaling too */
                moon_model_rope_cos_sin(s->m, p, i / 2, &cs[0], &cs[1]);
            }
        }
        status = upload_vec(rope, c->seq_len * c->head_dim, &s->d_rope);
        moon_free(rope);
    }
    return status;
}

static moon_status_t cuda_create(const moon_model_t *m, const moon_engine_config_t *cfg,
                                 void **state_p)
{
    cuda_state_t *s = (cuda_state_t *)moon_calloc(1, sizeof(cuda_state_t));
    moon_status_t status;

    if (s == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    s->m   = m;
    status = cuda_create_inner(s, cfg);
    if (status != MOON_OK) {
        cuda_destroy(s);
        return status;
    }
    *state_p = s;
    return MOON_OK;
}

/* Y (b, out) = X (b, in) W^T, W row-major (out, in), rows of X and Y ldx and
 * ldy floats apart: column-major Y^T = W^T' X^T. */
static moon_status_t gemm(cuda_state_t *s, const float *W, uint32_t out, uint32_t in,
                          const float *X, uint32_t ldx, float *Y, uint32_t ldy, uint32_t b)
{
    const float one = 1.0f, zero = 0.0f;
    CB(cublasSgemm(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)b, (int)in, &one, W, (int)in,
                   X, (int)ldx, &zero, Y, (int)ldy));
    return MOON_OK;
}

/* Device mirrors get ids of their own (never 0, the host's tag in kv->writer). */
static uint64_t next_mirror_id(void)
{
    static uint64_t last;
    return __atomic_add_fetch(&last, 1, __ATOMIC_RELAXED);
}

/* Makes the device mirror match kv for the blocks of the first n_tables
 * rows' sequences (a prefill's rows share one: n_tables = 1) and uploads
 * their block tables: uploads only the blocks whose tag is not this
 * mirror's (written on the host, or by another mirror, since this one last
 * had them). A cache the mirror does not hold (by id: a new cache may sit
 * at an old one's address) gets a new mirror, sized for it. */
static moon_status_t sync_kv_in(cuda_state_t *s, moon_kv_cache_t *kv,
                                const moon_kv_seq_t *const *seqs, uint32_t n_tables)
{
    size_t floats = kv->block_elems * kv->cfg.n_blocks;

    if (s->kv_id != kv->id) {
        drop_graphs(s); /* they hold the old mirror's pointers and geometry */
        cudaFree(s->d_kv);
        cudaFree(s->d_tables);
        moon_free(s->h_tables);
        s->d_kv      = NULL;
        s->d_tables  = NULL;
        s->kv_id     = 0;
        s->mirror_id = next_mirror_id(); /* nothing tagged with an older id is here */
        s->h_tables =
            (uint32_t *)moon_malloc((size_t)s->max_b * kv->max_blocks_per_seq * sizeof(uint32_t));
        if (s->h_tables == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        CK(cudaMalloc((void **)&s->d_kv, floats * sizeof(float)));
        CK(cudaMalloc((void **)&s->d_tables,
                      (size_t)s->max_b * kv->max_blocks_per_seq * sizeof(uint32_t)));
        s->kv_id = kv->id;
    }
    for (uint32_t i = 0; i < n_tables; i++) {
        const moon_kv_seq_t *sq = seqs[i];
        memcpy(s->h_tables + (size_t)i * kv->max_blocks_per_seq, sq->blocks,
               sq->n_blocks * sizeof(uint32_t));
        for (uint32_t k = 0; k < sq->n_blocks; k++) {
            uint32_t blk = sq->blocks[k];
            size_t   off = (size_t)blk * kv->block_elems;
            if (kv->writer[blk] == s->mirror_id) {
                continue;
            }
            CK(cudaMemcpyAsync(s->d_kv + off, (float *)kv->data + off,
                               kv->block_elems * sizeof(float), cudaMemcpyHostToDevice, s->stream));
            kv->writer[blk] = s->mirror_id;
            s->n_uploaded++;
        }
    }
    CK(cudaMemcpyAsync(s->d_tables, s->h_tables,
                       (size_t)n_tables * kv->max_blocks_per_seq * sizeof(uint32_t),
                       cudaMemcpyHostToDevice, s->stream));
    return MOON_OK;
}

/* The runs of the new tokens' K/V (rows at h_pos[]): a run is consecutive
 * slots of one block, whose K and V rows of every layer are 2 * n_layers
 * rows, block_tokens * kv_dim floats apart. fn(s, kv, i, n, off) per run of
 * rows i .. i+n, off its first float in the pool. */
typedef moon_status_t (*run_fn)(cuda_state_t *s, moon_kv_cache_t *kv, uint32_t i, uint32_t n,
                                size_t off);

static moon_status_t for_each_run(cuda_state_t *s, moon_kv_cache_t *kv, uint32_t b, run_fn fn)
{
    uint32_t      bt = kv->cfg.block_tokens;
    moon_status_t status;

    for (uint32_t i = 0; i < b;) {
        uint32_t p = (uint32_t)s->h_pos[i], n = 1;
        while (i + n < b && s->rows[i + n] == s->rows[i] && (uint32_t)s->h_pos[i + n] == p + n &&
               (p + n) % bt != 0) {
            n++;
        }
        status = fn(s, kv, i, n,
                    (size_t)s->rows[i]->blocks[p / bt] * kv->block_elems +
                        (size_t)(p % bt) * kv->kv_dim);
        if (status != MOON_OK) {
            return status;
        }
        i += n;
    }
    return MOON_OK;
}

/* A prefill's runs (whole blocks, mostly) straight into the host pool. */
static moon_status_t run_to_pool(cuda_state_t *s, moon_kv_cache_t *kv, uint32_t i, uint32_t n,
                                 size_t off)
{
    size_t pitch = (size_t)kv->cfg.block_tokens * kv->kv_dim * sizeof(float);

    (void)i;
    CK(cudaMemcpy2DAsync((float *)kv->data + off, pitch, s->d_kv + off, pitch,
                         (size_t)n * kv->kv_dim * sizeof(float), 2 * kv->cfg.n_layers,
                         cudaMemcpyDeviceToHost, s->stream));
    return MOON_OK;
}

/* A decode row (one slot) into its pinned staging rows ... */
static moon_status_t run_to_stage(cuda_state_t *s, moon_kv_cache_t *kv, uint32_t i, uint32_t n,
                                  size_t off)
{
    size_t row = kv->kv_dim * sizeof(float), rows = 2 * kv->cfg.n_layers;

    (void)n; /* decode rows are distinct sequences: one slot each */
    CK(cudaMemcpy2DAsync(s->h_rows + (size_t)i * rows * kv->kv_dim, row, s->d_kv + off,
                         (size_t)kv->cfg.block_tokens * row, row, rows, cudaMemcpyDeviceToHost,
                         s->stream));
    return MOON_OK;
}

/* ... and, once the stream is done, from there into the host pool. */
static moon_status_t stage_to_pool(cuda_state_t *s, moon_kv_cache_t *kv, uint32_t i, uint32_t n,
                                   size_t off)
{
    size_t       rows = 2 * kv->cfg.n_layers;
    const float *src  = s->h_rows + (size_t)i * rows * kv->kv_dim;

    (void)n;
    for (size_t r = 0; r < rows; r++) {
        memcpy((float *)kv->data + off + r * kv->cfg.block_tokens * kv->kv_dim,
               src + r * kv->kv_dim, kv->kv_dim * sizeof(float));
    }
    return MOON_OK;
}

/* Enqueues the whole pass on s->stream for b rows whose tokens, positions
 * and block tables are on the device: embedding, the layers, and logits.
 * decode: the rows are b distinct sequences, each with its table; else a
 * prefill chunk of one sequence (one table). logit_rows: the last rows that
 * get logits (decode b, prefill 1, every row for prefill_rows, or 0). Only
 * launches: a decode pass can be captured into a graph. */
static moon_status_t enqueue_pass(cuda_state_t *s, const moon_kv_cache_t *kv, uint32_t b,
                                  int decode, uint32_t logit_rows)
{
    const moon_model_config_t *c      = &s->m->cfg;
    uint32_t                   kv_dim = c->n_kv_heads * c->head_dim;
    uint32_t                   q_dim  = moon_model_q_dim(c);
    uint32_t                   qkv_n = q_dim + 2 * kv_dim, h2 = 2 * c->hidden_dim;
    uint32_t                   tstride = decode ? kv->max_blocks_per_seq : 0; /* row -> table */
    cudaStream_t               st      = s->stream;
    /* under two blocks per multiprocessor (decode): more warps per (row, head) */
    uint32_t      att_w = b * c->n_heads < 2 * s->n_sms ? ATT_WARPS_MAX : 8;
    moon_status_t status;

    k_embed<<<b, 128, 0, st>>>(s->d_x, s->d_embd, s->d_tokens, c->dim);
    k_add_rmsnorm<<<b, 256, 0, st>>>(s->d_x, NULL, s->d_xb, s->layers[0].attn_norm, c->dim,
                                     c->norm_eps);
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const d_layer_t *L    = &s->layers[l];
        const float     *next = l + 1 < c->n_layers ? s->layers[l + 1].attn_norm : s->d_out_norm;
        size_t           n    = (size_t)b * c->hidden_dim;
        if ((status = gemm(s, L->wqkv, qkv_n, c->dim, s->d_xb, c->dim, s->d_qkv, qkv_n, b)) !=
            MOON_OK) {
            return status;
        }
        if (L->bqkv != NULL || L->qk_norm != NULL) {
            k_qkv_prep<<<b, 128, 0, st>>>(s->d_qkv, qkv_n, L->bqkv, L->qk_norm, c->n_heads,
                                          c->n_kv_heads, c->head_dim, c->norm_eps);
        }
        k_rope_store<<<b, 128, 0, st>>>(s->d_qkv, qkv_n, s->d_rope, s->d_pos, s->d_tables, tstride,
                                        s->d_kv, q_dim, kv_dim, c->head_dim, kv->cfg.block_tokens,
                                        kv->block_elems, kv->layer_elems, l, (int)c->rope_neox);
        k_attention<<<b * c->n_heads, 32 * att_w, 0, st>>>(
            s->d_ao, s->d_qkv, qkv_n, s->d_kv, s->d_pos, s->d_tables, tstride, c->n_heads,
            c->n_heads / c->n_kv_heads, c->head_dim, q_dim, kv_dim, kv->cfg.block_tokens,
            kv->block_elems, kv->layer_elems, l);
        if ((status = gemm(s, L->wo, c->dim, q_dim, s->d_ao, q_dim, s->d_xb, c->dim, b)) !=
            MOON_OK) {
            return status;
        }
        k_add_rmsnorm<<<b, 256, 0, st>>>(s->d_x, s->d_xb, s->d_xb, L->ffn_norm, c->dim,
                                         c->norm_eps);
        if ((status = gemm(s, L->w13, h2, c->dim, s->d_xb, c->dim, s->d_h13, h2, b)) != MOON_OK) {
            return status;
        }
        k_swiglu<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(s->d_h13, c->hidden_dim, n);
        if ((status = gemm(s, L->w2, c->dim, c->hidden_dim, s->d_h13, h2, s->d_xb, c->dim, b)) !=
            MOON_OK) {
            return status;
        }
        /* the residual, then the next layer's attention norm (the output norm after the last) */
        k_add_rmsnorm<<<b, 256, 0, st>>>(s->d_x, s->d_xb, s->d_xb, next, c->dim, c->norm_eps);
    }
    if (logit_rows > 0) {
        float *x_in = s->d_xb + (size_t)(b - logit_rows) * c->dim;
        if ((status = gemm(s, s->d_out, c->vocab_size, c->dim, x_in, c->dim, s->d_logits,
                           c->vocab_size, logit_rows)) != MOON_OK) {
            return status;
        }
    }
    CK(cudaGetLastError());
    return MOON_OK;
}

/* Decode steps of b rows replay a graph of the pass, captured on first use.
 * A capture that fails leaves that batch size to plain launches for the
 * engine's life (until its mirror moves). */
static moon_status_t run_pass(cuda_state_t *s, const moon_kv_cache_t *kv, uint32_t b, int decode,
                              uint32_t logit_rows)
{
    cudaGraph_t   g = NULL;
    moon_status_t status;
    cudaError_t   e;

    if (!s->use_graphs || !decode || logit_rows != b || s->graph_failed[b]) {
        return enqueue_pass(s, kv, b, decode, logit_rows);
    }
    if (s->graphs[b] == NULL) {
        CK(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
        status = enqueue_pass(s, kv, b, decode, logit_rows);
        e      = cudaStreamEndCapture(s->stream, &g);
        if (status == MOON_OK && e == cudaSuccess) {
            e = cudaGraphInstantiate(&s->graphs[b], g, 0);
        }
        if (status != MOON_OK || e != cudaSuccess) {
            MOON_WARN("cuda: no graph for decode batch %u (%s, %s): plain launches", b,
                      moon_status_str(status), cudaGetErrorString(e));
            (void)cudaGetLastError();
            s->graphs[b]       = NULL;
            s->graph_failed[b] = 1;
        }
        if (g != NULL) {
            cudaGraphDestroy(g);
        }
        if (s->graphs[b] == NULL) {
            return enqueue_pass(s, kv, b, decode, logit_rows);
        }
    }
    CK(cudaGraphLaunch(s->graphs[b], s->stream));
    return MOON_OK;
}

/* What a pass gives back: logits (NULL: none) of the last row, or of every
 * row for a decode or when every_row; hidden (NULL: none): every row's
 * final normed hidden states (prefill_rows). */
typedef struct {
    float *logits;
    float *hidden;
    int    every_row;
} pass_out_t;

/* b rows (s->rows[], positions s->h_pos[]): see enqueue_pass for decode.
 * The new tokens' K/V reach the host pool before it returns (a prefill's
 * straight, a decode's through pinned staging); the blocks keep this
 * mirror's tag: host and device hold the same bytes. Logits of up to
 * max_batch rows come back through pinned staging, more (a prefill_rows
 * chunk) straight into the caller's memory. */
static moon_status_t forward_rows(cuda_state_t *s, moon_kv_cache_t *kv, const int32_t *tokens,
                                  uint32_t b, const pass_out_t *out, int decode)
{
    const moon_model_config_t *c = &s->m->cfg;
    uint32_t      logit_rows     = out->logits == NULL ? 0 : decode || out->every_row ? b : 1;
    size_t        n_logits       = (size_t)logit_rows * c->vocab_size;
    float        *logits_to      = logit_rows <= s->max_batch ? s->h_logits : out->logits;
    moon_status_t status;

    if (decode && b > s->max_batch) {
        return MOON_ERR_INVALID_PARAM;
    }
    if ((status = sync_kv_in(s, kv, s->rows, decode ? b : 1)) != MOON_OK) {
        return status;
    }
    memcpy(s->h_tokens, tokens, b * sizeof(int32_t));
    CK(cudaMemcpyAsync(s->d_tokens, s->h_tokens, b * sizeof(int32_t), cudaMemcpyHostToDevice,
                       s->stream));
    CK(cudaMemcpyAsync(s->d_pos, s->h_pos, b * sizeof(int32_t), cudaMemcpyHostToDevice, s->stream));
    if ((status = run_pass(s, kv, b, decode, logit_rows)) != MOON_OK) {
        return status;
    }
    if (logit_rows > 0) {
        CK(cudaMemcpyAsync(logits_to, s->d_logits, n_logits * sizeof(float), cudaMemcpyDeviceToHost,
                           s->stream));
    }
    if (out->hidden != NULL) {
        CK(cudaMemcpyAsync(out->hidden, s->d_xb, (size_t)b * c->dim * sizeof(float),
                           cudaMemcpyDeviceToHost, s->stream));
    }
    if ((status = for_each_run(s, kv, b, decode ? run_to_stage : run_to_pool)) != MOON_OK) {
        return status;
    }
    CK(cudaStreamSynchronize(s->stream));
    if (logit_rows > 0 && logits_to != out->logits) {
        memcpy(out->logits, s->h_logits, n_logits * sizeof(float));
    }
    return decode ? for_each_run(s, kv, b, stage_to_pool) : MOON_OK;
}

/* A failed call may leave the mirror's blocks unlike the host's: a new id
 * makes the next call upload every block it reads. */
static moon_status_t forward(cuda_state_t *s, moon_kv_cache_t *kv, const int32_t *tokens,
                             uint32_t b, const pass_out_t *out, int decode)
{
    moon_status_t status = forward_rows(s, kv, tokens, b, out, decode);

    if (status != MOON_OK) {
        (void)cudaStreamSynchronize(s->stream);
        s->mirror_id = next_mirror_id();
    }
    return status;
}

/* A prefill chunk of n tokens at the end of sequence seq. */
static moon_status_t prefill_chunk(cuda_state_t *s, moon_kv_cache_t *kv, uint32_t seq,
                                   const int32_t *tokens, uint32_t n, const pass_out_t *out)
{
    const moon_kv_seq_t *sq = &kv->seqs[seq];

    if (n > s->max_b) {
        return MOON_ERR_INVALID_PARAM;
    }
    CK(cudaSetDevice(s->dev));
    for (uint32_t i = 0; i < n; i++) {
        s->rows[i]  = sq;
        s->h_pos[i] = (int32_t)(sq->n_tokens + i);
    }
    return forward(s, kv, tokens, n, out, 0);
}

static moon_status_t cuda_prefill(void *state, moon_kv_cache_t *kv, uint32_t seq,
                                  const int32_t *tokens, uint32_t n, float *logits,
                                  double *modeled_s_p)
{
    pass_out_t out = {logits, NULL, 0};

    (void)modeled_s_p;
    return prefill_chunk((cuda_state_t *)state, kv, seq, tokens, n, &out);
}

static moon_status_t cuda_prefill_rows(void *state, moon_kv_cache_t *kv, uint32_t seq,
                                       const int32_t *tokens, uint32_t n, float *logits,
                                       float *hidden, double *modeled_s_p)
{
    pass_out_t out = {logits, hidden, 1};

    (void)modeled_s_p;
    return prefill_chunk((cuda_state_t *)state, kv, seq, tokens, n, &out);
}

static moon_status_t cuda_decode(void *state, moon_kv_cache_t *kv, const uint32_t *seq_ids,
                                 const int32_t *tokens, uint32_t n_seqs, float *logits,
                                 double *modeled_s_p)
{
    cuda_state_t *s   = (cuda_state_t *)state;
    pass_out_t    out = {logits, NULL, 0};

    (void)modeled_s_p;
    if (n_seqs > s->max_b) {
        return MOON_ERR_INVALID_PARAM;
    }
    CK(cudaSetDevice(s->dev));
    for (uint32_t i = 0; i < n_seqs; i++) {
        s->rows[i]  = &kv->seqs[seq_ids[i]];
        s->h_pos[i] = (int32_t)s->rows[i]->n_tokens;
    }
    return forward(s, kv, tokens, n_seqs, &out, 1);
}

extern "C" const moon_model_backend_ops_t moon_backend_cuda_ops = {
    "cuda",      cuda_create,         cuda_destroy,      cuda_prefill,
    cuda_decode, 1 /* tags_writes */, cuda_prefill_rows,
};
