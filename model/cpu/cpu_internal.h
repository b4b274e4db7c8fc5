/* model/cpu/cpu_internal.h - what the files of the fast CPU backend share
 * (moon_backend_cpu_ops, model/cpu/forward_cpu.c): the backend state, the
 * parallel step, block sizes and the kernels. Layout (ggml-cpu's):
 *   forward_cpu.c        the forward pass and the backend ops (create, prefill, decode)
 *   cpu/parallel.c       the steps split across the thread pool (ith/nth), split decode
 *   cpu/ops.c            one thread's share of a step: matmul slices, attention rows
 *   cpu/vec.c            plain C kernels, and the choice of kernels at create
 *   cpu/quant_dot.c      activations to Q8, quantised-weight dots in plain C
 *   cpu/qgemm.c          quantised weights x a batch as an integer GEMM: panels, plain C tile
 *   cpu/arch/x86/        AVX2 and AVX-512 kernels: vec (dot, axpy, SwiGLU, softmax,
 *                        batched NT), op (outer-product GEMM), bt (batch in lanes),
 *                        attn (decode attention head), avx2_quant and
 *                        avx512_quant (quantised dots), avx512_qgemm (the
 *                        integer GEMM's VNNI tile)
 * Kernels run on any thread, on the buffers they are given; the state belongs
 * to the engine's thread (and the pool's threads during a step). */
#ifndef MOON_MODEL_CPU_INTERNAL_H
#define MOON_MODEL_CPU_INTERNAL_H

#include "model_internal.h"
#include "threadpool.h"

#if defined(__x86_64__)
#define MOON_X86 1
#endif

#define TILE_ROWS 64    /* weight rows dequantized at a time for GEMM */
#define ATTN_QCHUNK 128 /* query rows per score block in prefill attention */

typedef float (*dot_fn)(const void *w, const float *x, uint32_t n);
/* A quantised weight row times an activation row quantised to Q8 (xq). */
typedef float (*qdot_fn)(const void *w, const void *xq, uint32_t n);

/* Activation blocks (ggml's q8_0 and q8_K, with a float scale): q in
 * [-127, 127], x ~ d q. Q8_0/Q4_0 weights pair with moon_q8b_t, the K-quants
 * with moon_q8k_t (bsums: sums of q over each 16 values). */
typedef struct {
    float  d;
    int8_t qs[MOON_GGML_QK];
} moon_q8b_t;

typedef struct {
    float   d;
    int8_t  qs[MOON_GGML_QK_K];
    int16_t bsums[MOON_GGML_QK_K / 16];
} moon_q8k_t;

/* The integer GEMM's operands (cpu/qgemm.c). */
#define QG_ROWS 16 /* weight rows per panel: one 512-bit vector of int32 lanes */
#define QG_NB 8    /* activation rows per register block of the ISA tile */

/* QG_ROWS weight rows unpacked: w = s v + o per block of bs values. */
typedef struct {
    uint32_t bs;   /* 32, or 16 (Q6_K) */
    uint32_t nblk; /* K / bs */
    uint8_t *q;    /* [K / 4][QG_ROWS][4]: values k..k+3 of row r in lane r */
    float   *s;    /* [nblk][QG_ROWS] */
    float   *o;    /* [nblk][QG_ROWS] */
} moon_qg_panel_t;

/* Activation rows quantised per block of bs: x ~ d q. */
typedef struct {
    uint32_t bs, nblk, K;
    int8_t  *q;  /* [b][K] */
    float   *ds; /* [b][nblk][2]: d, d sum(q) */
} moon_qg_act_t;

/* rows [x0, x0 + nx) (nx <= QG_NB) times the panel's first nr rows:
 * y[j ldy + r] */
typedef void (*qg_tile_fn)(const moon_qg_panel_t *p, const moon_qg_act_t *a, uint32_t x0,
                           uint32_t nx, float *y, uint32_t ldy, uint32_t nr);

/* rows r0..r0+nr of w (nr <= QG_ROWS; zero rows after them) into buf
 * (moon_cpu_qg_panel_bytes), and p describing it */
typedef void (*qg_pack_fn)(const moon_tensor_t *w, uint32_t r0, uint32_t nr, void *buf,
                           moon_qg_panel_t *p);
/* b rows of K floats quantised per block of bs into buf (moon_cpu_qg_act_bytes) */
typedef void (*qg_quantize_fn)(const float *x, uint32_t b, uint32_t K, uint32_t bs, void *buf,
                               moon_qg_act_t *a);

typedef void (*axpy_fn)(float *y, float a, const float *x, uint32_t n);
typedef void (*swiglu_fn)(float *h, const float *h3, size_t n);
typedef float (*softmax_exp_fn)(float *a, uint32_t n);

typedef struct cpu_state cpu_state_t;

/* One parallel step: which op and its operands. */
typedef enum { JOB_MATMUL, JOB_ATTN, JOB_ATTN_GEMM, JOB_RMSNORM, JOB_SWIGLU } job_kind_t;

typedef struct {
    job_kind_t kind;
    uint32_t   b; /* batch rows */
    /* matmul: up to 3 matrices sharing x */
    const moon_tensor_t *w[3];
    float               *y[3]; /* (b, w->rows) */
    uint32_t             n_mats;
    const float         *x; /* (b, cols) */
    /* attention */
    uint32_t layer;
    /* rmsnorm: out = norm(in) * weight, rows of dim */
    const float *norm_w;
    float       *out;
    const float *in;
} job_t;

struct cpu_state {
    const moon_model_t *m;
    moon_tp_t          *tp;
    uint32_t            nth;
    uint32_t            max_b;
    dot_fn              dot[31];     /* by ggml type; NULL: dequantize the row first */
    qdot_fn             qdot[31];    /* by ggml type: quantised weights x Q8 activations */
    int                 exact_quant; /* cpu-q8-act off: dequantised rows x F32 activations */
    uint32_t            q8_max_b;    /* cpu-q8-max-b: larger batches (prefill) through sgemm */
    qg_tile_fn          qg_tile;     /* the integer GEMM's tile, or NULL (no AVX-512 VNNI) */
    qg_quantize_fn      qg_quantize; /* and its activation quantiser and panel pack */
    qg_pack_fn          qg_pack;
    uint32_t            qg_min_b; /* cpu-qgemm-min-b: batches from here take it */
    dot_fn              dot_f32;
    axpy_fn             axpy;
    swiglu_fn           swiglu;
    softmax_exp_fn      softmax_exp;
    int                 nt_isa;   /* batched NT kernels: 512, 2 (AVX2) or 0 (none) */
    int                 f16c;     /* AVX2 path: the CPU has F16C (F16 weights widened) */
    uint32_t            op_min_b; /* outer-product matmuls from this batch on (AVX-512) */
    float              *x;        /* (max_b, dim) residual stream */
    float              *xb;       /* (max_b, dim) */
    float              *q;        /* (max_b, q_dim) */
    float              *k;        /* (max_b, kv_dim); inside hb2 when kv_owned is 0 */
    float              *v;        /* (max_b, kv_dim); inside hb2 when kv_owned is 0 */
    int                 kv_owned;
    float              *ao;  /* (max_b, q_dim) attention output: aliases q (each (row, head)
                              * slice of q is dead once its output is written) */
    float         *hb;       /* (max_b, hidden) */
    float         *hb2;      /* (max_b, hidden) */
    float         *att;      /* (nth, seq_len) attention scores */
    uint32_t       q_dim;    /* n_heads * head_dim: q and ao rows */
    uint32_t       max_cols; /* the widest matrix row: max(dim, q_dim, hidden) */
    float         *wtile;    /* (nth, TILE_ROWS, max_cols) dequantized weight rows */
    uint8_t       *xq;       /* (nth, xq_stride) activation rows quantised to Q8 */
    size_t         xq_stride;
    float         *pack;     /* (nth, OP_KC, 16 OP_PV) packed weight panel (outer-product path) */
    float         *xt;       /* (nth, max_cols, BT_MAX_B) X transposed (batch-in-lanes path) */
    float         *yt;       /* (nth, BT_CHUNK, BT_MAX_B) its outputs before the store */
    uint32_t       bt_min_b; /* batch-in-lanes matmuls from this batch on (to BT_MAX_B) */
    int            bf16_dp;  /* BF16 weights x BF16-rounded activations there (AVX512_BF16) */
    uint64_t       par_min_macs;   /* a step of fewer multiply-adds runs on the calling thread */
    uint64_t       split_max_macs; /* decode splits the batch across threads below this step size */
    uint64_t       row_max_macs;   /* multiply-adds of one row's largest matmul step */
    cpu_state_t   *views; /* (nth, view_stride bytes) per-thread views for a split decode */
    size_t         view_stride;
    const int32_t *split_tokens; /* split decode: the step's tokens and logits */
    float         *split_logits;
    uint32_t       split_b;
    float         *rope;      /* (seq_len, head_dim / 2, 2) cos, sin */
    uint32_t       rope_rows; /* positions [0, rope_rows) of rope filled */
    float         *kc;        /* (nth, seq_len, head_dim) one head's K gathered from the blocks */
    float         *vc;        /* (nth, seq_len, head_dim) one head's V */
    float         *sc;        /* (nth, ATTN_QCHUNK, seq_len) attention scores of a prefill chunk */
    uint32_t       max_chunk;
    /* per call */
    moon_kv_cache_t      *kv;
    const moon_kv_seq_t **seq; /* (max_b) sequence of each batch row */
    uint32_t             *pos; /* (max_b) position of each batch row */
    job_t                 job;
};

/* Register blocks of the batched NT kernels (AVX-512, AVX2). */
#define NT_MR 4
#define NT_NB 6
#define NT2_MR 3
#define NT2_NB 4

/* Outer-product GEMM (cpu/arch/x86/avx512_op.c) */
#define OP_KC 128 /* k chunk: a packed 32-row F32 panel chunk is 16 KiB */
#define OP_NB 8   /* batch rows per register block (8 x 2 zmm accumulators) */
#define OP_PV 3   /* panel rows / 16 */
/* from s->op_min_b rows on (tuning cpu-op-min-b, 4: below, the NT kernels) */

/* Batch-in-lanes GEMM (cpu/arch/x86/avx512_bt.c) */
#define BT_MR 12
#define BT_MAX_B 32
/* BT_MIN_B is s->bt_min_b (tuning cpu-bt-min-b, 29: below, the padded lanes cost
 * more than the outer-product path's packing) */
#define BT_CHUNK 48 /* output rows gathered in the thread's yt before the transposed store */

typedef void (*nt_kernel_fn)(const uint8_t *w, size_t row_bytes, const float *x, uint32_t K,
                             float *y, uint32_t ldy);

/* A register-blocked NT kernel: mr weight rows x nb batch rows, K % kstep == 0. */
typedef struct {
    nt_kernel_fn fn;
    uint32_t     mr, nb, kstep;
} nt_kernel_t;

/* ---- cpu/vec.c ---- */
float moon_cpu_dot_f32_scalar(const void *w, const float *x, uint32_t n);
float moon_cpu_dot_bf16_scalar(const void *w, const float *x, uint32_t n);
float moon_cpu_dot_f16_scalar(const void *w, const float *x, uint32_t n);
void  moon_cpu_axpy_scalar(float *y, float a, const float *x, uint32_t n);
void  moon_cpu_swiglu_scalar(float *h, const float *h3, size_t n);
float moon_cpu_softmax_exp_scalar(float *a, uint32_t n);
/* Sets s's kernels: the widest the CPU runs, capped by isa (MOON_CPU_ISA_*). */
void moon_cpu_pick_kernels(cpu_state_t *s, int isa);
/* The batched NT kernel for a matmul of b rows by w, or fn NULL (then GEMM or dots). */
nt_kernel_t moon_cpu_nt_kernel_for(const cpu_state_t *s, const moon_tensor_t *w, uint32_t b);

/* ---- cpu/quant_dot.c ---- */
int    moon_cpu_act_is_k(int wtype); /* whether wtype's activations are moon_q8k_t */
size_t moon_cpu_act_row_bytes(int wtype, uint32_t n);
void   moon_cpu_quantize_act(int wtype, const float *x, uint32_t n, void *out);
void   moon_cpu_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m);
float  moon_cpu_qdot_q8_0_scalar(const void *w, const void *xq, uint32_t n);
float  moon_cpu_qdot_q4_0_scalar(const void *w, const void *xq, uint32_t n);
float  moon_cpu_qdot_q4_k_scalar(const void *w, const void *xq, uint32_t n);
float  moon_cpu_qdot_q5_k_scalar(const void *w, const void *xq, uint32_t n);
float  moon_cpu_qdot_q6_k_scalar(const void *w, const void *xq, uint32_t n);

/* ---- cpu/qgemm.c: quantised weights x a batch as an integer GEMM ---- */
uint32_t moon_cpu_qg_block(int wtype); /* bs, or 0: no integer GEMM for the type */
size_t   moon_cpu_qg_act_bytes(uint32_t b, uint32_t K);
size_t   moon_cpu_qg_panel_bytes(uint32_t K);
void     moon_cpu_qg_quantize(const float *x, uint32_t b, uint32_t K, uint32_t bs, void *buf,
                              moon_qg_act_t *a);
void     moon_cpu_qg_pack(const moon_tensor_t *w, uint32_t r0, uint32_t nr, void *buf,
                          moon_qg_panel_t *p); /* a qg_pack_fn */
/* rows: QG_ROWS rows of K values, row-major; values k0.. into the panel's q */
void moon_cpu_qg_interleave(const uint8_t *rows, uint32_t K, uint32_t k0, uint8_t *q);
void moon_cpu_qg_tile_scalar(const moon_qg_panel_t *p, const moon_qg_act_t *a, uint32_t x0,
                             uint32_t nx, float *y, uint32_t ldy, uint32_t nr);

/* ---- cpu/ops.c: one thread's share of a step ---- */
void moon_cpu_matmul_slice(cpu_state_t *s, uint32_t ith, const moon_tensor_t *w, float *y,
                           const float *x, uint32_t b, uint32_t r0, uint32_t r1);
void moon_cpu_attn_rows(cpu_state_t *s, uint32_t ith, uint32_t nth);
#ifdef MOON_HAVE_OPENBLAS
void moon_cpu_attn_gemm_heads(cpu_state_t *s, uint32_t ith, uint32_t nth);
#endif
#ifdef MOON_X86
int moon_cpu_bt_ok(const cpu_state_t *s, const job_t *j);
int moon_cpu_bt_dp_ok(const cpu_state_t *s, const job_t *j);
#endif

/* ---- cpu/parallel.c: steps over the pool ---- */
void moon_cpu_run_maybe_par(cpu_state_t *s, uint64_t macs);
void moon_cpu_par_matmul(cpu_state_t *s, uint32_t b, const float *x, const moon_tensor_t *w0,
                         float *y0, const moon_tensor_t *w1, float *y1, const moon_tensor_t *w2,
                         float *y2);
void moon_cpu_par_rmsnorm(cpu_state_t *s, uint32_t b, float *out, const float *in, const float *w);
void moon_cpu_run_split(void *arg, uint32_t ith, uint32_t nth); /* a moon_tp_run job */

/* ---- forward_cpu.c ---- */
void moon_cpu_forward_batch(cpu_state_t *s, const int32_t *tokens, uint32_t b, float *logits,
                            int all_logits, int one_seq, float *hidden);

#ifdef MOON_X86
/* ---- cpu/arch/x86/avx2.c ---- */
float moon_cpu_dot_f32_avx2(const void *w, const float *x, uint32_t n);
float moon_cpu_dot_bf16_avx2(const void *w, const float *x, uint32_t n);
float moon_cpu_dot_f16_avx2(const void *w, const float *x, uint32_t n); /* + F16C */
void  moon_cpu_axpy_avx2(float *y, float a, const float *x, uint32_t n);
void  moon_cpu_nt_3x4_f32_avx2(const uint8_t *w, size_t row_bytes, const float *x, uint32_t K,
                               float *y, uint32_t ldy);
void  moon_cpu_nt_3x4_bf16_avx2(const uint8_t *w, size_t row_bytes, const float *x, uint32_t K,
                                float *y, uint32_t ldy);
void  moon_cpu_nt_3x4_f16_avx2(const uint8_t *w, size_t row_bytes, const float *x, uint32_t K,
                               float *y, uint32_t ldy); /* + F16C */

/* ---- cpu/arch/x86/avx2_quant.c (AVX2, FMA, F16C) ---- */
float moon_cpu_qdot_q8_0_avx2(const void *w, const void *xq, uint32_t n);
float moon_cpu_qdot_q4_0_avx2(const void *w, const void *xq, uint32_t n);
float moon_cpu_qdot_q4_k_avx2(const void *w, const void *xq, uint32_t n);
float moon_cpu_qdot_q5_k_avx2(const void *w, const void *xq, uint32_t n);
float moon_cpu_qdot_q6_k_avx2(const void *w, const void *xq, uint32_t n);

/* ---- cpu/arch/x86/avx512_quant.c (AVX-512 BW, F16C) ---- */
float moon_cpu_qdot_q4_k_avx512(const void *w, const void *xq, uint32_t n);
float moon_cpu_qdot_q6_k_avx512(const void *w, const void *xq, uint32_t n);

/* ---- cpu/arch/x86/avx512_qgemm.c (AVX-512 VNNI) ---- */
void moon_cpu_qg_tile_vnni(const moon_qg_panel_t *p, const moon_qg_act_t *a, uint32_t x0,
                           uint32_t nx, float *y, uint32_t ldy, uint32_t nr);
void moon_cpu_qg_quantize_avx512(const float *x, uint32_t b, uint32_t K, uint32_t bs, void *buf,
                                 moon_qg_act_t *a);
void moon_cpu_qg_pack_avx512(const moon_tensor_t *w, uint32_t r0, uint32_t nr, void *buf,
                             moon_qg_panel_t *p);

/* ---- cpu/arch/x86/avx512_vec.c ---- */
float moon_cpu_dot_f32_avx512(const void *w, const float *x, uint32_t n);
float moon_cpu_dot_bf16_avx512(const void *w, const float *x, uint32_t n);
float moon_cpu_dot_f16_avx512(const void *w, const float *x, uint32_t n);
void  moon_cpu_axpy_avx512(float *y, float a, const float *x, uint32_t n);
void  moon_cpu_swiglu_avx512(float *h, const float *h3, size_t n);
float moon_cpu_softmax_exp_avx512(float *a, uint32_t n);
void  moon_cpu_nt_4x6_f32(const uint8_t *w, size_t row_bytes, const float *x, uint32_t K, float *y,
                          uint32_t ldy);
void  moon_cpu_nt_4x6_bf16(const uint8_t *w, size_t row_bytes, const float *x, uint32_t K, float *y,
                           uint32_t ldy);
void  moon_cpu_nt_4x6_f16(const uint8_t *w, size_t row_bytes, const float *x, uint32_t K, float *y,
                          uint32_t ldy);

/* ---- cpu/arch/x86/avx512_op.c ---- */
void moon_cpu_matmul_op(cpu_state_t *s, uint32_t ith, const moon_tensor_t *w, float *y,
                        const float *x, uint32_t b, uint32_t r0, uint32_t r1);

/* ---- cpu/arch/x86/avx512_bt.c ---- */
void moon_cpu_bt_transpose_x(const float *x, uint32_t b, uint32_t K, uint32_t nvec, float *xt);
void moon_cpu_bt_pack_bf16(float *xt, uint32_t K, uint32_t nvec);
void moon_cpu_matmul_bt(const moon_tensor_t *w, float *y, const float *xt, float *yt, uint32_t b,
                        uint32_t r0, uint32_t r1, int dp);

/* ---- cpu/arch/x86/avx512_attn.c ---- */
void moon_cpu_attn_head_avx512(const cpu_state_t *s, const moon_kv_seq_t *sq, uint32_t l,
                               uint32_t off, uint32_t n, const float *q, float *o, float *att,
                               float scale);
#endif /* MOON_X86 */

#endif /* MOON_MODEL_CPU_INTERNAL_H */
