/* tests/unit/model/test_qgemm.c - the integer GEMM of the fast CPU path
 * (cpu/qgemm.c, cpu/arch/x86/avx512_qgemm.c) on random matrices of each
 * quantised type: row counts that leave a partial panel, batches that leave
 * a partial register block, and row lengths that are not whole super-blocks
 * (Q8_0 / Q4_0). The plain C tile equals the F64 product of the
 * dequantised weights and dequantised activations (integer parts exact,
 * float rounding only) and is within the activation quantisation's bound of
 * the F32 product; the activations stay within half a step; each AVX-512
 * piece (quantiser, pack, VNNI tile) equals the plain C one bit for
 * bit where the CPU has it. */
#include "cpu/cpu_internal.h"
#include "model_test_util.h"
#include "moonlet/gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 37 /* two whole panels and 5 rows */
#define B 11    /* a register block of 8 and 3 */

static unsigned seed = 11;

static void fill(float *x, size_t n, float scale)
{
    mt_fill_quant_input(x, n, scale, 32, &seed);
}

static int have_vnni(void)
{
#ifdef MOON_X86
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

/* y (B x ROWS) through panels of QG_ROWS with the given pieces */
static void gemm(const moon_tensor_t *w, const float *x, float *y, void *abuf, void *pbuf,
                 qg_quantize_fn quant, qg_pack_fn pack, qg_tile_fn tile)
{
    moon_qg_act_t   a;
    moon_qg_panel_t p;

    quant(x, B, w->cols, moon_cpu_qg_block((int)w->type), abuf, &a);
    for (uint32_t r = 0; r < w->rows; r += QG_ROWS) {
        uint32_t nr = MOON_MIN(QG_ROWS, w->rows - r);
        pack(w, r, nr, pbuf, &p);
        for (uint32_t x0 = 0; x0 < B; x0 += QG_NB) {
            tile(&p, &a, x0, MOON_MIN(QG_NB, B - x0), y + (size_t)x0 * w->rows + r, w->rows, nr);
        }
    }
}

static void check_type(moon_ggml_type_t type, uint32_t K)
{
    size_t   rb        = moon_ggml_type_bytes(type, K);
    float   *wf        = malloc((size_t)ROWS * K * sizeof(float));
    float   *wd        = malloc((size_t)ROWS * K * sizeof(float));
    float   *x         = malloc((size_t)B * K * sizeof(float));
    float   *y         = malloc((size_t)B * ROWS * sizeof(float));
    float   *yv        = malloc((size_t)B * ROWS * sizeof(float));
    uint8_t *wq        = malloc((size_t)ROWS * rb);
    uint8_t *abuf      = malloc(moon_cpu_qg_act_bytes(B, K));
    uint8_t *av        = malloc(moon_cpu_qg_act_bytes(B, K));
    uint8_t *pbuf      = malloc(moon_cpu_qg_panel_bytes(K));
    int      bad_exact = 0, bad_bound = 0, bad_step = 0;
    uint32_t bs = moon_cpu_qg_block((int)type);

    CU_ASSERT_FATAL(wf && wd && x && y && yv && wq && abuf && av && pbuf);
    fill(wf, (size_t)ROWS * K, 0.05f);
    fill(x, (size_t)B * K, 2.0f);
    for (uint32_t r = 0; r < ROWS; r++) {
        moon_ggml_quantize(type, wf + (size_t)r * K, wq + r * rb, K);
        moon_ggml_dequantize(type, wq + r * rb, wd + (size_t)r * K, K);
    }
    moon_tensor_t w = {.type = type, .rows = ROWS, .cols = K, .row_bytes = rb, .data = wq};

    gemm(&w, x, y, abuf, pbuf, moon_cpu_qg_quantize, moon_cpu_qg_pack, moon_cpu_qg_tile_scalar);
    {
        moon_qg_act_t a;
        moon_cpu_qg_quantize(x, B, K, bs, abuf, &a);
        for (uint32_t bi = 0; bi < B; bi++) {
            for (uint32_t k = 0; k < K; k++) {
                float d = a.ds[((size_t)bi * a.nblk + k / bs) * 2];
                float v = d * (float)a.q[(size_t)bi * K + k];
                bad_step += fabsf(v - x[(size_t)bi * K + k]) > d * 0.5f + 1e-6f;
            }
        }
        for (uint32_t bi = 0; bi < B; bi++) {
            for (uint32_t r = 0; r < ROWS; r++) {
                double exact = 0.0, f32 = 0.0, bound = 0.0, mag = 0.0;
                for (uint32_t k = 0; k < K; k++) {
                    double wv = wd[(size_t)r * K + k];
                    double d  = a.ds[((size_t)bi * a.nblk + k / bs) * 2];
                    double xq = d * a.q[(size_t)bi * K + k];
                    exact += wv * xq;
                    f32 += wv * x[(size_t)bi * K + k];
                    bound += fabs(wv) * d * 0.5;
                    mag += fabs(wv * xq);
                }
                double got = y[(size_t)bi * ROWS + r];
                bad_exact += fabs(got - exact) > 1e-5 * mag + 1e-6;
                bad_bound += fabs(got - f32) > bound + 1e-5 * mag + 1e-6;
            }
        }
    }
    if (bad_exact + bad_bound + bad_step) {
        fprintf(stderr, "%s K=%u: %d off the exact product, %d past the bound, %d off a step\n",
                moon_ggml_type_name(type), K, bad_exact, bad_bound, bad_step);
    }
    CU_ASSERT_EQUAL(bad_exact, 0);
    CU_ASSERT_EQUAL(bad_bound, 0);
    CU_ASSERT_EQUAL(bad_step, 0);
#ifdef MOON_X86
    if (have_vnni()) {
        moon_qg_act_t a, b;
        moon_cpu_qg_quantize(x, B, K, bs, abuf, &a);
        moon_cpu_qg_quantize_avx512(x, B, K, bs, av, &b);
        CU_ASSERT(memcmp(abuf, av,
                         moon_cpu_qg_act_bytes(B, K) -
                             (size_t)B * (K / 16 - K / bs) * 2 * sizeof(float)) == 0);
        gemm(&w, x, yv, av, pbuf, moon_cpu_qg_quantize_avx512, moon_cpu_qg_pack_avx512,
             moon_cpu_qg_tile_vnni);
        CU_ASSERT(memcmp(y, yv, (size_t)B * ROWS * sizeof(float)) == 0);
    } else {
        printf("  no AVX-512 VNNI here: the ISA pieces were not checked\n");
    }
#endif
    free(wf), free(wd), free(x), free(y), free(yv), free(wq), free(abuf), free(av), free(pbuf);
}

static void test_types(void)
{
    moon_ggml_type_t k_types[] = {MOON_GGML_Q4_K, MOON_GGML_Q5_K, MOON_GGML_Q6_K};

    for (size_t i = 0; i < 3; i++) {
        check_type(k_types[i], 512);
    }
    /* rows of 96: not whole super-blocks, and a 32-value interleave tail */
    check_type(MOON_GGML_Q8_0, 96);
    check_type(MOON_GGML_Q8_0, 512);
    check_type(MOON_GGML_Q4_0, 96);
    check_type(MOON_GGML_Q4_0, 512);
}

/* Which types take the GEMM, and at which block size. */
static void test_blocks(void)
{
    CU_ASSERT_EQUAL(moon_cpu_qg_block(MOON_GGML_Q4_K), 32);
    CU_ASSERT_EQUAL(moon_cpu_qg_block(MOON_GGML_Q6_K), 16);
    CU_ASSERT_EQUAL(moon_cpu_qg_block(MOON_GGML_F16), 0);
    CU_ASSERT_EQUAL(moon_cpu_qg_block(MOON_GGML_F32), 0);
}

MOON_TEST_MAIN("qgemm", NULL, NULL, test_types, test_blocks)
