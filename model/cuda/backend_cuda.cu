/* model/cuda/backend_cuda.cu - the CUDA backend behind moon_model_backend_ops_t
 * (built with MOON_WITH_CUDA). Weights live on the device as F32 (dequantized
 * at create); matmuls are cuBLAS sgemm; RMSNorm, RoPE, SwiGLU, the residual
 * adds and attention over the paged KV cache are kernels, each with a CPU
 * twin in forward_ref.c. The host KV cache stays authoritative: the backend
 * keeps a device mirror of the block pool, uploads the blocks a call reads
 * that someone else wrote since (kv->writer tags), and writes the new
 * tokens' K/V back to the host, so export/import and mixing backends keep
 * working. One stream; calls are synchronous. */
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
    float *attn_norm, *ffn_norm;           /* (dim) */
    float *wq, *wk, *wv, *wo, *w1, *w2, *w3; /* row-major (out, in) */
} d_layer_t;

typedef struct {
    const moon_model_t *m;
    cublasHandle_t      blas;
    uint32_t            max_b;
    float              *d_embd, *d_out, *d_out_norm; /* (vocab, dim), (vocab, dim), (dim) */
    d_layer_t          *layers;                       /* host array of device pointers */
    float *d_x, *d_xb, *d_q, *d_k, *d_v, *d_ao, *d_hb, *d_hb2, *d_logits;
    float *d_rope;                                    /* (seq_len, head_dim) cos, sin */
    int32_t *d_tokens, *d_pos;                        /* (max_b) */
    uint32_t *d_tables;                               /* (max_b, max_blocks_per_seq) */
    uint32_t *h_tables;
    int32_t  *h_pos;
    float    *d_kv;                                   /* mirror of the host block pool */
    size_t    kv_floats;
    const moon_kv_cache_t *kv_owner;
    uint64_t  mirror_id;                              /* tag of blocks d_kv holds as is */
    uint64_t  n_uploaded;                             /* blocks uploaded (debug log) */
    size_t    max_att_smem;                           /* dynamic shared memory of k_attention */
} cuda_state_t;

/* ---- kernels (CPU twins: forward_ref.c) ----------------------------------------- */

__global__ void k_embed(float *x, const float *embd, const int32_t *tok, uint32_t dim)
{
    uint32_t b = blockIdx.x;
    for (uint32_t i = threadIdx.x; i < dim; i += blockDim.x) {
        x[(size_t)b * dim + i] = embd[(size_t)tok[b] * dim + i];
    }
}

__global__ void k_rmsnorm(float *o, const float *x, const float *w, uint32_t dim, float eps)
{
    __shared__ float red[256];
    uint32_t         b  = blockIdx.x;
    float            ss = 0.0f;
    for (uint32_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = x[(size_t)b * dim + i];
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
        o[(size_t)b * dim + i] = w[i] * (ss * x[(size_t)b * dim + i]);
    }
}

/* RoPE on q (dim) and k (kv_dim) of row b at pos[b]; then K/V into the cache. */
__global__ void k_rope_store(float *q, float *k, const float *v, const float *rope,
                             const int32_t *pos, const uint32_t *tables, uint32_t max_blocks,
                             float *kv, uint32_t dim, uint32_t kv_dim, uint32_t hs, uint32_t bt,
                             size_t block_floats, size_t layer_floats, uint32_t layer)
{
    uint32_t     b  = blockIdx.x;
    int32_t      p  = pos[b];
    const float *cs = rope + (size_t)p * hs;
    uint32_t     blk = tables[(size_t)b * max_blocks + (uint32_t)p / bt];
    float       *kd  = kv + (size_t)blk * block_floats + (size_t)layer * layer_floats +
                      (size_t)((uint32_t)p % bt) * kv_dim;
    float       *vd  = kd + (size_t)bt * kv_dim;

    for (uint32_t i = 2 * threadIdx.x; i < dim; i += 2 * blockDim.x) {
        float fcr = cs[i % hs], fci = cs[i % hs + 1];
        float *qq = q + (size_t)b * dim;
        float q0 = qq[i], q1 = qq[i + 1];
        qq[i]     = q0 * fcr - q1 * fci;
        qq[i + 1] = q0 * fci + q1 * fcr;
        if (i < kv_dim) {
            float *kk = k + (size_t)b * kv_dim;
            float  k0 = kk[i], k1 = kk[i + 1];
            kd[i]     = k0 * fcr - k1 * fci;
            kd[i + 1] = k0 * fci + k1 * fcr;
            vd[i]     = v[(size_t)b * kv_dim + i];
            vd[i + 1] = v[(size_t)b * kv_dim + i + 1];
        }
    }
}

/* One block per (row, head): scores in shared memory, softmax, weighted V. */
__global__ void k_attention(float *out, const float *q, const float *kv, const int32_t *pos,
                            const uint32_t *tables, uint32_t max_blocks, uint32_t n_heads,
                            uint32_t kv_mul, uint32_t hs, uint32_t dim, uint32_t kv_dim,
                            uint32_t bt, size_t block_floats, size_t layer_floats, uint32_t layer)
{
    extern __shared__ float att[];
    __shared__ float        red[256];
    uint32_t                b = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
    uint32_t                n = (uint32_t)pos[b] + 1, kvh = h / kv_mul;
    const float            *qh = q + (size_t)b * dim + h * hs;
    float                   scale = rsqrtf((float)hs), max = -INFINITY, sum = 0.0f;

    for (uint32_t t = threadIdx.x; t < n; t += blockDim.x) {
        uint32_t     blk = tables[(size_t)b * max_blocks + t / bt];
        const float *k   = kv + (size_t)blk * block_floats + (size_t)layer * layer_floats +
                         (size_t)(t % bt) * kv_dim + kvh * hs;
        float d = 0.0f;
        for (uint32_t i = 0; i < hs; i++) {
            d += qh[i] * k[i];
        }
        att[t] = d * scale;
        max    = fmaxf(max, att[t]);
    }
    red[threadIdx.x] = max;
    __syncthreads();
    for (uint32_t s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        }
        __syncthreads();
    }
    max = red[0];
    __syncthreads();
    for (uint32_t t = threadIdx.x; t < n; t += blockDim.x) {
        att[t] = expf(att[t] - max);
        sum += att[t];
    }
    red[threadIdx.x] = sum;
    __syncthreads();
    for (uint32_t s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            red[threadIdx.x] += red[threadIdx.x + s];
        }
        __syncthreads();
    }
    sum = red[0];
    for (uint32_t i = threadIdx.x; i < hs; i += blockDim.x) {
        float o = 0.0f;
        for (uint32_t t = 0; t < n; t++) {
            uint32_t     blk = tables[(size_t)b * max_blocks + t / bt];
            const float *v   = kv + (size_t)blk * block_floats + (size_t)layer * layer_floats +
                             ((size_t)bt + t % bt) * kv_dim + kvh * hs;
            o += att[t] * v[i];
        }
        out[(size_t)b * dim + h * hs + i] = o / sum;
    }
}

__global__ void k_add(float *x, const float *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] += y[i];
    }
}

__global__ void k_swiglu(float *h, const float *h3, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = h[i];
        h[i]    = g * (1.0f / (1.0f + expf(-g))) * h3[i];
    }
}

/* ---- host side ----------------------------------------------------------------- */

static moon_status_t upload_tensor(const moon_tensor_t *t, float **d_p)
{
    size_t n    = (size_t)t->rows * t->cols;
    float *h    = (float *)moon_malloc(n * sizeof(float));
    float *d    = NULL;

    if (h == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t r = 0; r < t->rows; r++) {
        moon_tensor_row(t, r, h + (size_t)r * t->cols);
    }
    if (cudaMalloc((void **)&d, n * sizeof(float)) != cudaSuccess ||
        cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        moon_free(h);
        cudaFree(d);
        MOON_ERROR("cuda: weight upload failed");
        return MOON_ERR_NO_MEMORY;
    }
    moon_free(h);
    *d_p = d;
    return MOON_OK;
}

static moon_status_t upload_vec(const float *h, uint32_t n, float **d_p)
{
    CK(cudaMalloc((void **)d_p, n * sizeof(float)));
    CK(cudaMemcpy(*d_p, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return MOON_OK;
}

static void cuda_destroy(void *state)
{
    cuda_state_t *s = (cuda_state_t *)state;

    if (s == NULL) {
        return;
    }
    MOON_DEBUG_LOG("cuda: %llu KV blocks uploaded", (unsigned long long)s->n_uploaded);
    if (s->layers != NULL) {
        for (uint32_t l = 0; l < s->m->cfg.n_layers; l++) {
            d_layer_t *L = &s->layers[l];
            cudaFree(L->attn_norm);
            cudaFree(L->ffn_norm);
            cudaFree(L->wq);
            cudaFree(L->wk);
            cudaFree(L->wv);
            cudaFree(L->wo);
            cudaFree(L->w1);
            cudaFree(L->w2);
            cudaFree(L->w3);
        }
    }
    if (s->d_out != s->d_embd) {
        cudaFree(s->d_out);
    }
    cudaFree(s->d_embd);
    cudaFree(s->d_out_norm);
    cudaFree(s->d_x);
    cudaFree(s->d_xb);
    cudaFree(s->d_q);
    cudaFree(s->d_k);
    cudaFree(s->d_v);
    cudaFree(s->d_ao);
    cudaFree(s->d_hb);
    cudaFree(s->d_hb2);
    cudaFree(s->d_logits);
    cudaFree(s->d_rope);
    cudaFree(s->d_tokens);
    cudaFree(s->d_pos);
    cudaFree(s->d_tables);
    cudaFree(s->d_kv);
    if (s->blas != NULL) {
        cublasDestroy(s->blas);
    }
    moon_free(s->h_tables);
    moon_free(s->h_pos);
    moon_free(s->layers);
    moon_free(s);
}

static moon_status_t cuda_create_inner(cuda_state_t *s, const moon_engine_config_t *cfg)
{
    const moon_model_config_t *c      = &s->m->cfg;
    uint32_t                   kv_dim = c->n_kv_heads * c->head_dim;
    size_t                     B;
    moon_status_t              status;
    int                        n_dev = 0;

    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev <= 0) {
        return MOON_ERR_UNSUPPORTED;
    }
    s->max_b = cfg->max_batch > cfg->max_chunk ? cfg->max_batch : cfg->max_chunk;
    B        = s->max_b;
    {
        /* k_attention holds a row's scores in shared memory: opt in to all the
         * device allows beside its static 1 KiB (227 KiB on Hopper: 57k tokens) */
        int dev = 0, optin = 0;
        CK(cudaGetDevice(&dev));
        CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        s->max_att_smem = (size_t)optin - 256 * sizeof(float);
        CK(cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)s->max_att_smem));
    }
    CB(cublasCreate(&s->blas));
    s->layers = (d_layer_t *)moon_calloc(c->n_layers, sizeof(d_layer_t));
    if (s->layers == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = upload_tensor(&s->m->tok_embd, &s->d_embd);
    if (status != MOON_OK) {
        return status;
    }
    if (s->m->output.data == s->m->tok_embd.data) {
        s->d_out = s->d_embd;
    } else if ((status = upload_tensor(&s->m->output, &s->d_out)) != MOON_OK) {
        return status;
    }
    if ((status = upload_vec(s->m->output_norm, c->dim, &s->d_out_norm)) != MOON_OK) {
        return status;
    }
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const moon_layer_t *L = &s->m->layers[l];
        d_layer_t          *D = &s->layers[l];
        if ((status = upload_vec(L->attn_norm, c->dim, &D->attn_norm)) != MOON_OK ||
            (status = upload_vec(L->ffn_norm, c->dim, &D->ffn_norm)) != MOON_OK ||
            (status = upload_tensor(&L->wq, &D->wq)) != MOON_OK ||
            (status = upload_tensor(&L->wk, &D->wk)) != MOON_OK ||
            (status = upload_tensor(&L->wv, &D->wv)) != MOON_OK ||
            (status = upload_tensor(&L->wo, &D->wo)) != MOON_OK ||
            (status = upload_tensor(&L->w1, &D->w1)) != MOON_OK ||
            (status = upload_tensor(&L->w2, &D->w2)) != MOON_OK ||
            (status = upload_tensor(&L->w3, &D->w3)) != MOON_OK) {
            return status;
        }
    }
    CK(cudaMalloc((void **)&s->d_x, B * c->dim * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_xb, B * c->dim * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_q, B * c->dim * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_k, B * kv_dim * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_v, B * kv_dim * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_ao, B * c->dim * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_hb, B * c->hidden_dim * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_hb2, B * c->hidden_dim * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_logits, B * c->vocab_size * sizeof(float)));
    CK(cudaMalloc((void **)&s->d_tokens, B * sizeof(int32_t)));
    CK(cudaMalloc((void **)&s->d_pos, B * sizeof(int32_t)));
    s->h_pos = (int32_t *)moon_malloc(B * sizeof(int32_t));
    {
        float *rope = (float *)moon_malloc((size_t)c->seq_len * c->head_dim * sizeof(float));
        if (rope == NULL || s->h_pos == NULL) {
            moon_free(rope);
            return MOON_ERR_NO_MEMORY;
        }
        for (uint32_t p = 0; p < c->seq_len; p++) {
            for (uint32_t i = 0; i < c->head_dim; i += 2) {
                float freq = 1.0f / powf(c->rope_theta, (float)i / (float)c->head_dim);
                rope[(size_t)p * c->head_dim + i]     = cosf((float)p * freq);
                rope[(size_t)p * c->head_dim + i + 1] = sinf((float)p * freq);
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

/* Y (b, out) = X (b, in) W^T, W row-major (out, in): column-major Y^T = W^T' X^T. */
static moon_status_t gemm(cuda_state_t *s, const float *W, uint32_t out, uint32_t in,
                          const float *X, float *Y, uint32_t b)
{
    const float one = 1.0f, zero = 0.0f;
    CB(cublasSgemm(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)b, (int)in, &one, W, (int)in,
                   X, (int)in, &zero, Y, (int)out));
    return MOON_OK;
}

/* Device mirrors get ids of their own (never 0, the host's tag in kv->writer). */
static uint64_t next_mirror_id(void)
{
    static uint64_t last;
    return __atomic_add_fetch(&last, 1, __ATOMIC_RELAXED);
}

/* Makes the device mirror match kv for the blocks of the given rows'
 * sequences: uploads only the blocks whose tag is not this mirror's (written
 * on the host, or by another mirror, since this one last had them). */
static moon_status_t sync_kv_in(cuda_state_t *s, moon_kv_cache_t *kv,
                                const moon_kv_seq_t *const *seqs, uint32_t b)
{
    size_t floats = kv->block_floats * kv->cfg.n_blocks;

    if (s->kv_owner != kv || s->kv_floats != floats) {
        cudaFree(s->d_kv);
        cudaFree(s->d_tables);
        moon_free(s->h_tables);
        s->d_kv      = NULL;
        s->d_tables  = NULL;
        s->kv_owner  = NULL;
        s->mirror_id = next_mirror_id(); /* nothing tagged with an older id is here */
        s->h_tables  = (uint32_t *)moon_malloc((size_t)s->max_b * kv->max_blocks_per_seq *
                                               sizeof(uint32_t));
        if (s->h_tables == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        CK(cudaMalloc((void **)&s->d_kv, floats * sizeof(float)));
        CK(cudaMalloc((void **)&s->d_tables,
                      (size_t)s->max_b * kv->max_blocks_per_seq * sizeof(uint32_t)));
        s->kv_owner  = kv;
        s->kv_floats = floats;
    }
    for (uint32_t i = 0; i < b; i++) {
        const moon_kv_seq_t *sq = seqs[i];
        memcpy(s->h_tables + (size_t)i * kv->max_blocks_per_seq, sq->blocks,
               sq->n_blocks * sizeof(uint32_t));
        for (uint32_t k = 0; k < sq->n_blocks; k++) {
            uint32_t blk = sq->blocks[k];
            size_t   off = (size_t)blk * kv->block_floats;
            if (kv->writer[blk] == s->mirror_id) {
                continue;
            }
            CK(cudaMemcpy(s->d_kv + off, kv->data + off, kv->block_floats * sizeof(float),
                          cudaMemcpyHostToDevice));
            kv->writer[blk] = s->mirror_id;
            s->n_uploaded++;
        }
    }
    CK(cudaMemcpy(s->d_tables, s->h_tables,
                  (size_t)b * kv->max_blocks_per_seq * sizeof(uint32_t), cudaMemcpyHostToDevice));
    return MOON_OK;
}

/* Copies the new tokens' K/V (rows at h_pos[]) back to the host. A run of
 * consecutive slots in one block is one 2-D copy: its K and V rows of every
 * layer are 2 * n_layers rows, block_tokens * kv_dim floats apart. The
 * blocks stay tagged with this mirror: host and device hold the same bytes. */
static moon_status_t sync_kv_out(cuda_state_t *s, moon_kv_cache_t *kv,
                                 const moon_kv_seq_t *const *seqs, uint32_t b)
{
    uint32_t bt    = kv->cfg.block_tokens;
    size_t   pitch = (size_t)bt * kv->kv_dim * sizeof(float);

    for (uint32_t i = 0; i < b;) {
        uint32_t p    = (uint32_t)s->h_pos[i];
        uint32_t blk  = seqs[i]->blocks[p / bt];
        uint32_t n    = 1;
        size_t   off;
        while (i + n < b && seqs[i + n] == seqs[i] && (uint32_t)s->h_pos[i + n] == p + n &&
               (p + n) % bt != 0) {
            n++;
        }
        off = (size_t)blk * kv->block_floats + (size_t)(p % bt) * kv->kv_dim;
        CK(cudaMemcpy2DAsync(kv->data + off, pitch, s->d_kv + off, pitch,
                             (size_t)n * kv->kv_dim * sizeof(float), 2 * kv->cfg.n_layers,
                             cudaMemcpyDeviceToHost, 0));
        i += n;
    }
    CK(cudaStreamSynchronize(0));
    return MOON_OK;
}

static moon_status_t forward_rows(cuda_state_t *s, moon_kv_cache_t *kv,
                                  const moon_kv_seq_t *const *seqs, const int32_t *tokens,
                                  uint32_t b, float *logits, int all_logits)
{
    const moon_model_config_t *c      = &s->m->cfg;
    uint32_t                   kv_dim = c->n_kv_heads * c->head_dim;
    moon_status_t              status;
    int32_t                    last   = 0;
    size_t                     smem;

    for (uint32_t i = 0; i < b; i++) {
        last = s->h_pos[i] > last ? s->h_pos[i] : last;
    }
    smem = ((size_t)last + 1) * sizeof(float); /* k_attention's scores of the longest row */
    if (b > s->max_b || smem > s->max_att_smem) {
        MOON_ERROR("cuda: a context of %d tokens is over this device's attention limit (%zu)",
                   (int)last + 1, s->max_att_smem / sizeof(float));
        return MOON_ERR_UNSUPPORTED;
    }
    status = sync_kv_in(s, kv, seqs, b);
    if (status != MOON_OK) {
        return status;
    }
    CK(cudaMemcpy(s->d_tokens, tokens, b * sizeof(int32_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s->d_pos, s->h_pos, b * sizeof(int32_t), cudaMemcpyHostToDevice));
    k_embed<<<b, 128>>>(s->d_x, s->d_embd, s->d_tokens, c->dim);
    for (uint32_t l = 0; l < c->n_layers; l++) {
        d_layer_t *L = &s->layers[l];
        size_t     n;
        k_rmsnorm<<<b, 256>>>(s->d_xb, s->d_x, L->attn_norm, c->dim, c->norm_eps);
        if ((status = gemm(s, L->wq, c->dim, c->dim, s->d_xb, s->d_q, b)) != MOON_OK ||
            (status = gemm(s, L->wk, kv_dim, c->dim, s->d_xb, s->d_k, b)) != MOON_OK ||
            (status = gemm(s, L->wv, kv_dim, c->dim, s->d_xb, s->d_v, b)) != MOON_OK) {
            return status;
        }
        k_rope_store<<<b, 128>>>(s->d_q, s->d_k, s->d_v, s->d_rope, s->d_pos, s->d_tables,
                                 kv->max_blocks_per_seq, s->d_kv, c->dim, kv_dim, c->head_dim,
                                 kv->cfg.block_tokens, kv->block_floats, kv->layer_floats, l);
        k_attention<<<b * c->n_heads, 256, smem>>>(
            s->d_ao, s->d_q, s->d_kv, s->d_pos, s->d_tables, kv->max_blocks_per_seq, c->n_heads,
            c->n_heads / c->n_kv_heads, c->head_dim, c->dim, kv_dim, kv->cfg.block_tokens,
            kv->block_floats, kv->layer_floats, l);
        if ((status = gemm(s, L->wo, c->dim, c->dim, s->d_ao, s->d_xb, b)) != MOON_OK) {
            return status;
        }
        n = (size_t)b * c->dim;
        k_add<<<(unsigned)((n + 255) / 256), 256>>>(s->d_x, s->d_xb, n);
        k_rmsnorm<<<b, 256>>>(s->d_xb, s->d_x, L->ffn_norm, c->dim, c->norm_eps);
        if ((status = gemm(s, L->w1, c->hidden_dim, c->dim, s->d_xb, s->d_hb, b)) != MOON_OK ||
            (status = gemm(s, L->w3, c->hidden_dim, c->dim, s->d_xb, s->d_hb2, b)) != MOON_OK) {
            return status;
        }
        n = (size_t)b * c->hidden_dim;
        k_swiglu<<<(unsigned)((n + 255) / 256), 256>>>(s->d_hb, s->d_hb2, n);
        if ((status = gemm(s, L->w2, c->dim, c->hidden_dim, s->d_hb, s->d_xb, b)) != MOON_OK) {
            return status;
        }
        n = (size_t)b * c->dim;
        k_add<<<(unsigned)((n + 255) / 256), 256>>>(s->d_x, s->d_xb, n);
    }
    CK(cudaGetLastError());
    if (logits != NULL) {
        uint32_t rows  = all_logits ? b : 1;
        float   *x_in  = s->d_x + (all_logits ? 0 : (size_t)(b - 1) * c->dim);
        k_rmsnorm<<<rows, 256>>>(s->d_xb, x_in, s->d_out_norm, c->dim, c->norm_eps);
        if ((status = gemm(s, s->d_out, c->vocab_size, c->dim, s->d_xb, s->d_logits, rows)) !=
            MOON_OK) {
            return status;
        }
        CK(cudaMemcpy(logits, s->d_logits, (size_t)rows * c->vocab_size * sizeof(float),
                      cudaMemcpyDeviceToHost));
    }
    CK(cudaDeviceSynchronize());
    return sync_kv_out(s, kv, seqs, b);
}

/* A failed call may leave the mirror's blocks unlike the host's: a new id
 * makes the next call upload every block it reads. */
static moon_status_t forward(cuda_state_t *s, moon_kv_cache_t *kv,
                             const moon_kv_seq_t *const *seqs, const int32_t *tokens, uint32_t b,
                             float *logits, int all_logits)
{
    moon_status_t status = forward_rows(s, kv, seqs, tokens, b, logits, all_logits);

    if (status != MOON_OK) {
        s->mirror_id = next_mirror_id();
    }
    return status;
}

static moon_status_t cuda_prefill(void *state, moon_kv_cache_t *kv, uint32_t seq,
                                  const int32_t *tokens, uint32_t n, float *logits,
                                  double *modeled_s_p)
{
    cuda_state_t        *s = (cuda_state_t *)state;
    const moon_kv_seq_t *seqs[1024];
    const moon_kv_seq_t *sq = &kv->seqs[seq];

    (void)modeled_s_p;
    if (n > s->max_b || n > 1024) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < n; i++) {
        seqs[i]     = sq;
        s->h_pos[i] = (int32_t)(sq->n_tokens + i);
    }
    return forward(s, kv, seqs, tokens, n, logits, 0);
}

static moon_status_t cuda_decode(void *state, moon_kv_cache_t *kv, const uint32_t *seq_ids,
                                 const int32_t *tokens, uint32_t n_seqs, float *logits,
                                 double *modeled_s_p)
{
    cuda_state_t        *s = (cuda_state_t *)state;
    const moon_kv_seq_t *seqs[1024];

    (void)modeled_s_p;
    if (n_seqs > s->max_b || n_seqs > 1024) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < n_seqs; i++) {
        seqs[i]     = &kv->seqs[seq_ids[i]];
        s->h_pos[i] = (int32_t)seqs[i]->n_tokens;
    }
    return forward(s, kv, seqs, tokens, n_seqs, logits, 1);
}

extern "C" const moon_model_backend_ops_t moon_backend_cuda_ops = {
    "cuda", cuda_create, cuda_destroy, cuda_prefill, cuda_decode, 1 /* tags_writes */,
};
