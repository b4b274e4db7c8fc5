/* tests/unit/model/test_quant_dot.c - the quantised-weight kernels of the
 * fast CPU path (cpu/quant_dot.c, cpu/arch/x86/avx2_quant.c) on random
 * blocks: activations quantised to Q8 stay within half a step of the input;
 * each plain C dot equals the F32 dot of the dequantised weights and
 * dequantised activations (integer parts exact, float rounding only) and is
 * within the activation quantisation's bound of the F32 dot; each AVX2 and
 * AVX-512 dot equals the plain C one where the CPU has them. */
#include "cpu/cpu_internal.h"
#include "model_test_util.h"
#include "moonlet/gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 1024 /* four super-blocks, 32 blocks */

typedef struct {
    moon_ggml_type_t type;
    qdot_fn          scalar;
    qdot_fn          avx2;   /* NULL off x86 */
    qdot_fn          avx512; /* NULL where there is none */
} kern_t;

static const kern_t kerns[] = {
#ifdef MOON_X86
    {MOON_GGML_Q8_0, moon_cpu_qdot_q8_0_scalar, moon_cpu_qdot_q8_0_avx2, NULL},
    {MOON_GGML_Q4_0, moon_cpu_qdot_q4_0_scalar, moon_cpu_qdot_q4_0_avx2, NULL},
    {MOON_GGML_Q4_K, moon_cpu_qdot_q4_k_scalar, moon_cpu_qdot_q4_k_avx2, moon_cpu_qdot_q4_k_avx512},
    {MOON_GGML_Q5_K, moon_cpu_qdot_q5_k_scalar, moon_cpu_qdot_q5_k_avx2, NULL},
    {MOON_GGML_Q6_K, moon_cpu_qdot_q6_k_scalar, moon_cpu_qdot_q6_k_avx2, moon_cpu_qdot_q6_k_avx512},
#else
    {MOON_GGML_Q8_0, moon_cpu_qdot_q8_0_scalar, NULL, NULL},
    {MOON_GGML_Q4_0, moon_cpu_qdot_q4_0_scalar, NULL, NULL},
    {MOON_GGML_Q4_K, moon_cpu_qdot_q4_k_scalar, NULL, NULL},
    {MOON_GGML_Q5_K, moon_cpu_qdot_q5_k_scalar, NULL, NULL},
    {MOON_GGML_Q6_K, moon_cpu_qdot_q6_k_scalar, NULL, NULL},
#endif
};

static unsigned seed = 7;

static void fill(float *x, uint32_t n, float scale)
{
    mt_fill_quant_input(x, n, scale, 64, &seed);
}

/* xf[i] = d q[i]: the activation the integer kernels see */
static void act_values(int wtype, const void *xq, uint32_t n, float *xf, float *step)
{
    uint32_t bs = moon_cpu_act_is_k(wtype) ? MOON_GGML_QK_K : MOON_GGML_QK;
    for (uint32_t i = 0; i < n; i++) {
        float         d;
        const int8_t *q;
        if (moon_cpu_act_is_k(wtype)) {
            const moon_q8k_t *b = (const moon_q8k_t *)xq + i / bs;
            d = b->d, q = b->qs;
        } else {
            const moon_q8b_t *b = (const moon_q8b_t *)xq + i / bs;
            d = b->d, q = b->qs;
        }
        xf[i]   = d * (float)q[i % bs];
        step[i] = d;
    }
}

static void test_act_quant_bounds(void)
{
    static float   x[N], xf[N], step[N];
    static uint8_t xq[N / 32 * 40];
    int            types[2] = {MOON_GGML_Q8_0, MOON_GGML_Q4_K};

    for (int t = 0; t < 2; t++) {
        fill(x, N, 3.0f);
        moon_cpu_quantize_act(types[t], x, N, xq);
        act_values(types[t], xq, N, xf, step);
        for (uint32_t i = 0; i < N; i++) {
            CU_ASSERT(fabsf(xf[i] - x[i]) <= step[i] * 0.5f + 1e-6f);
        }
        CU_ASSERT(xf[64] == 0.0f && xf[95] == 0.0f);
        if (types[t] == MOON_GGML_Q8_0) {
            CU_ASSERT(step[64] == 0.0f); /* an all-zero block: d 0, no NaN */
        }
        if (types[t] == MOON_GGML_Q4_K) {
            const moon_q8k_t *b = (const moon_q8k_t *)xq;
            for (int j = 0; j < 16; j++) {
                int s = 0;
                for (int k = 0; k < 16; k++) {
                    CU_ASSERT(b->qs[16 * j + k] >= -127);
                    s += b->qs[16 * j + k];
                }
                CU_ASSERT_EQUAL(b->bsums[j], s);
            }
        }
    }
    CU_ASSERT_EQUAL(moon_cpu_act_row_bytes(MOON_GGML_Q4_K, 512), 2 * sizeof(moon_q8k_t));
    CU_ASSERT_EQUAL(moon_cpu_act_row_bytes(MOON_GGML_Q8_0, 64), 2 * sizeof(moon_q8b_t));
}

/* For each type, many random rows: the plain C kernel against the dequantised
 * reference, then the AVX2 kernel against the plain C one. */
static void test_kernels_match_reference(void)
{
    /* wq holds a row of any type (F32 the widest): sized for the kernels'
     * types only, GCC flagged the F32 branch of the inlined quantiser */
    static float   w[N], wf[N], x[N], xf[N], step[N];
    static uint8_t wq[N * 4], xq[N / 32 * 40];
#ifdef MOON_X86
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    int avx512 = avx2 && __builtin_cpu_supports("avx512bw");
#else
    int avx2 = 0, avx512 = 0;
#endif

    for (size_t k = 0; k < sizeof(kerns) / sizeof(kerns[0]); k++) {
        int bad_exact = 0, bad_bound = 0, bad_isa = 0, bad_wide = 0;
        for (int trial = 0; trial < 40; trial++) {
            double exact = 0.0, f32 = 0.0, bound = 0.0, mag = 0.0;
            float  got;
            fill(w, N, 0.05f + 0.01f * (float)trial);
            fill(x, N, 2.0f);
            moon_ggml_quantize(kerns[k].type, w, wq, N);
            moon_ggml_dequantize(kerns[k].type, wq, wf, N);
            moon_cpu_quantize_act((int)kerns[k].type, x, N, xq);
            act_values((int)kerns[k].type, xq, N, xf, step);
            for (uint32_t i = 0; i < N; i++) {
                exact += (double)wf[i] * xf[i];
                f32 += (double)wf[i] * x[i];
                bound += fabs((double)wf[i]) * step[i] * 0.5;
                mag += fabs((double)wf[i] * xf[i]);
            }
            got = kerns[k].scalar(wq, xq, N);
            /* integer parts exact: only float rounding of the block sums */
            bad_exact += fabs(got - exact) > 1e-5 * mag + 1e-6;
            bad_bound += fabs(got - f32) > bound + 1e-5 * mag + 1e-6;
            if (avx2 && kerns[k].avx2 != NULL) {
                float v = kerns[k].avx2(wq, xq, N);
                bad_isa += fabs(v - got) > 1e-5 * mag + 1e-6;
            }
            if (avx512 && kerns[k].avx512 != NULL) {
                float v = kerns[k].avx512(wq, xq, N);
                bad_wide += fabs(v - got) > 1e-5 * mag + 1e-6;
            }
        }
        if (bad_exact + bad_bound + bad_isa + bad_wide) {
            fprintf(stderr,
                    "%s: %d off the exact dot, %d past the bound, %d avx2 != scalar, "
                    "%d avx512 != scalar\n",
                    moon_ggml_type_name(kerns[k].type), bad_exact, bad_bound, bad_isa, bad_wide);
        }
        CU_ASSERT_EQUAL(bad_exact, 0);
        CU_ASSERT_EQUAL(bad_bound, 0);
        CU_ASSERT_EQUAL(bad_isa, 0);
        CU_ASSERT_EQUAL(bad_wide, 0);
    }
}

/* A Q8_0 block may hold -128 (another writer's file): the AVX2 sign trick
 * must still give the plain C result. */
static void test_q8_0_minus_128(void)
{
    uint8_t    blk[34];
    moon_q8b_t y;
    uint16_t   one  = moon_f32_to_fp16(1.0f);
    int        want = 0;

    memcpy(blk, &one, 2);
    y.d = 1.0f;
    for (int i = 0; i < 32; i++) {
        blk[2 + i] = (uint8_t)(int8_t)(i % 2 ? -128 : 100 - 7 * i);
        y.qs[i]    = (int8_t)(i % 3 ? -127 : 127 - i);
        want += (int8_t)blk[2 + i] * y.qs[i];
    }
    CU_ASSERT_DOUBLE_EQUAL(moon_cpu_qdot_q8_0_scalar(blk, &y, 32), (double)want, 0.5);
#ifdef MOON_X86
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
        CU_ASSERT_DOUBLE_EQUAL(moon_cpu_qdot_q8_0_avx2(blk, &y, 32), (double)want, 0.5);
    }
#endif
}

MOON_TEST_MAIN("quant_dot", NULL, NULL, test_act_quant_bounds, test_kernels_match_reference,
               test_q8_0_minus_128)
