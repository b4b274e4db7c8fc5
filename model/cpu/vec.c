/* model/cpu/vec.c - the plain C kernels (dot products, axpy, SwiGLU,
 * softmax), which the ISA kernels must agree with, and the choice of kernels
 * for this CPU at create. */
#include "cpu/cpu_internal.h"

#include <math.h>

float moon_cpu_dot_f32_scalar(const void *w, const float *x, uint32_t n)
{
    const float *a    = w;
    float        s[4] = {0};
    uint32_t     i    = 0;
    for (; i + 4 <= n; i += 4) {
        s[0] += a[i] * x[i];
        s[1] += a[i + 1] * x[i + 1];
        s[2] += a[i + 2] * x[i + 2];
        s[3] += a[i + 3] * x[i + 3];
    }
    for (; i < n; i++) {
        s[0] += a[i] * x[i];
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

float moon_cpu_dot_bf16_scalar(const void *w, const float *x, uint32_t n)
{
    const uint16_t *a = w;
    float           s = 0.0f;
    for (uint32_t i = 0; i < n; i++) {
        s += moon_bf16_to_f32(a[i]) * x[i];
    }
    return s;
}

/* as moon_cpu_dot_f32_scalar (same sums, F16 widening is exact) */
float moon_cpu_dot_f16_scalar(const void *w, const float *x, uint32_t n)
{
    const uint16_t *a    = w;
    float           s[4] = {0};
    uint32_t        i    = 0;
    for (; i + 4 <= n; i += 4) {
        s[0] += moon_fp16_to_f32(a[i]) * x[i];
        s[1] += moon_fp16_to_f32(a[i + 1]) * x[i + 1];
        s[2] += moon_fp16_to_f32(a[i + 2]) * x[i + 2];
        s[3] += moon_fp16_to_f32(a[i + 3]) * x[i + 3];
    }
    for (; i < n; i++) {
        s[0] += moon_fp16_to_f32(a[i]) * x[i];
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

void moon_cpu_axpy_scalar(float *y, float a, const float *x, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        y[i] += a * x[i];
    }
}

/* h = silu(h) * h3 */
void moon_cpu_swiglu_scalar(float *h, const float *h3, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = h[i];
        h[i]    = g * (1.0f / (1.0f + expf(-g))) * h3[i];
    }
}

/* a[t] = exp(a[t] - max a) for t < n (n >= 1); returns their sum */
float moon_cpu_softmax_exp_scalar(float *a, uint32_t n)
{
    float max = -INFINITY, sum = 0.0f;

    for (uint32_t t = 0; t < n; t++) {
        max = a[t] > max ? a[t] : max;
    }
    for (uint32_t t = 0; t < n; t++) {
        a[t] = expf(a[t] - max);
        sum += a[t];
    }
    return sum;
}

/* Picks the widest kernels the CPU runs. isa (tuning cpu-isa, MOON_CPU_ISA)
 * avx2 or scalar caps the choice (tests run every path on one machine). */
void moon_cpu_pick_kernels(cpu_state_t *s, int isa)
{
    s->dot_f32              = moon_cpu_dot_f32_scalar;
    s->dot[MOON_GGML_F32]   = moon_cpu_dot_f32_scalar;
    s->dot[MOON_GGML_BF16]  = moon_cpu_dot_bf16_scalar;
    s->dot[MOON_GGML_F16]   = moon_cpu_dot_f16_scalar;
    s->axpy                 = moon_cpu_axpy_scalar;
    s->swiglu               = moon_cpu_swiglu_scalar;
    s->softmax_exp          = moon_cpu_softmax_exp_scalar;
    s->nt_isa               = 0;
    s->qg_tile              = NULL;
    s->f16c                 = 0;
    s->qdot[MOON_GGML_Q8_0] = moon_cpu_qdot_q8_0_scalar;
    s->qdot[MOON_GGML_Q4_0] = moon_cpu_qdot_q4_0_scalar;
    s->qdot[MOON_GGML_Q4_K] = moon_cpu_qdot_q4_k_scalar;
    s->qdot[MOON_GGML_Q5_K] = moon_cpu_qdot_q5_k_scalar;
    s->qdot[MOON_GGML_Q6_K] = moon_cpu_qdot_q6_k_scalar;
    if (isa == MOON_CPU_ISA_SCALAR) {
        return;
    }
#ifdef MOON_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c")) {
        s->qdot[MOON_GGML_Q8_0] = moon_cpu_qdot_q8_0_avx2;
        s->qdot[MOON_GGML_Q4_0] = moon_cpu_qdot_q4_0_avx2;
        s->qdot[MOON_GGML_Q4_K] = moon_cpu_qdot_q4_k_avx2;
        s->qdot[MOON_GGML_Q5_K] = moon_cpu_qdot_q5_k_avx2;
        s->qdot[MOON_GGML_Q6_K] = moon_cpu_qdot_q6_k_avx2;
    }
    if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("f16c") &&
        isa != MOON_CPU_ISA_AVX2) {
        s->qdot[MOON_GGML_Q4_K] = moon_cpu_qdot_q4_k_avx512;
        s->qdot[MOON_GGML_Q6_K] = moon_cpu_qdot_q6_k_avx512;
    }
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
        isa != MOON_CPU_ISA_AVX2) {
        s->qg_tile     = moon_cpu_qg_tile_vnni;
        s->qg_quantize = moon_cpu_qg_quantize_avx512;
        s->qg_pack     = moon_cpu_qg_pack_avx512;
    }
    if (__builtin_cpu_supports("avx512f") && isa != MOON_CPU_ISA_AVX2) {
        s->dot_f32             = moon_cpu_dot_f32_avx512;
        s->dot[MOON_GGML_F32]  = moon_cpu_dot_f32_avx512;
        s->dot[MOON_GGML_BF16] = moon_cpu_dot_bf16_avx512;
        s->dot[MOON_GGML_F16]  = moon_cpu_dot_f16_avx512;
        s->axpy                = moon_cpu_axpy_avx512;
        s->swiglu              = moon_cpu_swiglu_avx512;
        s->softmax_exp         = moon_cpu_softmax_exp_avx512;
        s->nt_isa              = 512;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        s->dot_f32             = moon_cpu_dot_f32_avx2;
        s->dot[MOON_GGML_F32]  = moon_cpu_dot_f32_avx2;
        s->dot[MOON_GGML_BF16] = moon_cpu_dot_bf16_avx2;
        s->axpy                = moon_cpu_axpy_avx2;
        s->nt_isa              = 2;
        if (__builtin_cpu_supports("f16c")) {
            s->dot[MOON_GGML_F16] = moon_cpu_dot_f16_avx2;
            s->f16c               = 1;
        }
    }
#endif
}

/* The batched NT kernel for this matmul, or fn NULL (then GEMM or dots). */
nt_kernel_t moon_cpu_nt_kernel_for(const cpu_state_t *s, const moon_tensor_t *w, uint32_t b)
{
    nt_kernel_t k = {NULL, 0, 0, 0};

    if (s->nt_isa == 0 || b < 2 || b > 64) {
        return k;
    }
#ifdef MOON_X86
    if (s->nt_isa == 512 && w->cols % 16 == 0) {
        k.mr    = NT_MR;
        k.nb    = NT_NB;
        k.kstep = 16;
        k.fn    = w->type == MOON_GGML_F32    ? moon_cpu_nt_4x6_f32
                  : w->type == MOON_GGML_BF16 ? moon_cpu_nt_4x6_bf16
                  : w->type == MOON_GGML_F16  ? moon_cpu_nt_4x6_f16
                                              : NULL;
    } else if (s->nt_isa == 2 && w->cols % 8 == 0) {
        k.mr    = NT2_MR;
        k.nb    = NT2_NB;
        k.kstep = 8;
        k.fn    = w->type == MOON_GGML_F32              ? moon_cpu_nt_3x4_f32_avx2
                  : w->type == MOON_GGML_BF16           ? moon_cpu_nt_3x4_bf16_avx2
                  : w->type == MOON_GGML_F16 && s->f16c ? moon_cpu_nt_3x4_f16_avx2
                                                        : NULL;
    }
#endif
    return k;
}
