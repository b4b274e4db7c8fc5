/* model/cpu/arch/x86/avx512_bt.c - the batch-in-lanes GEMM (AVX-512, and
 * AVX512_BF16 products where the CPU has them). */
#include "cpu/arch/x86/x86.h"

#include <string.h>

#ifdef MOON_X86

/* Batched matmul with the batch in the vector lanes (AVX-512, batches of
 * BT_MIN_B..BT_MAX_B rows): X is transposed once per step into the thread's
 * xt (k-major, batch rows padded with zeros to 16 nvec), then BT_MR weight
 * rows at a time run down k: each weight W[r][k] is broadcast straight from
 * the row-major matrix (a BF16 pair widened with a shift and a mask) and
 * multiplies X^T[k][0..16 nvec) into accumulators holding y[0..b)[r]. Every
 * weight is read once, in row order, with no packing; each output is one
 * sequential sum over k (the reference's order). */

/* xt[k * 16 nvec + j] = x[j][k] for j < b, 0 for b <= j < 16 nvec. */
__attribute__((target("avx512f"))) void
moon_cpu_bt_transpose_x(const float *x, uint32_t b, uint32_t K, uint32_t nvec, float *xt)
{
    uint32_t ldt = 16 * nvec;

    for (uint32_t v = 0; v < nvec; v++) {
        for (uint32_t k = 0; k < K; k += 16) {
            __m512 r[16];
            for (uint32_t i = 0; i < 16; i++) {
                uint32_t j = 16 * v + i;
                r[i]       = j < b ? _mm512_loadu_ps(x + (size_t)j * K + k) : _mm512_setzero_ps();
            }
            moon_cpu_op_tr16(r, xt + (size_t)k * ldt + 16 * v, ldt);
        }
    }
}

/* Asks for the line at byte offset off of row i + mr into L2: the same column
 * of the next block of rows, so the block after this one finds its weights
 * there (one block ahead: 12 rows x K, tens of KiB). Past the last row it
 * names memory the loop never reads, which a prefetch may (it never faults);
 * the address is formed as an integer for that reason. */
__attribute__((always_inline)) static inline void
bt_prefetch_next(const uint8_t *w, size_t row_bytes, int i, int mr, size_t off)
{
    _mm_prefetch((const char *)((uintptr_t)w + (size_t)(i + mr) * row_bytes + off), _MM_HINT_T1);
}

/* The accumulators of a block: mr rows of nvec vectors of batch lanes. */
__attribute__((target("avx512f"), always_inline)) static inline void
bt_acc_zero(__m512 acc[][2], const int mr, const int nvec)
{
    for (int i = 0; i < mr; i++) {
        for (int v = 0; v < nvec; v++) {
            acc[i][v] = _mm512_setzero_ps();
        }
    }
}

__attribute__((target("avx512f"), always_inline)) static inline void
bt_acc_store(__m512 acc[][2], float *yt, size_t ldt, const int mr, const int nvec)
{
    for (int i = 0; i < mr; i++) {
        for (int v = 0; v < nvec; v++) {
            _mm512_store_ps(yt + (size_t)i * ldt + 16 * v, acc[i][v]);
        }
    }
}

/* yt[i][0 .. 16 nvec) = sum over k < K of W[i][k] * xt[k][..] for the mr
 * rows at w (F32 or BF16 rows of row_bytes). Inlined into one function per
 * (type, mr, nvec). */
__attribute__((target("avx512f"), always_inline)) static inline void
bt_block(const uint8_t *w, size_t row_bytes, const float *xt, uint32_t K, float *yt, const int bf16,
         const int mr, const int nvec)
{
    __m512 acc[BT_MR][2];
    size_t ldt = 16 * (size_t)nvec;

    bt_acc_zero(acc, mr, nvec);
    for (uint32_t k0 = 0; k0 < K; k0 += 16) {
        for (int i = 0; i < mr; i++) { /* each row's next line (farther ahead measured slower) */
            _mm_prefetch((const char *)w + (size_t)i * row_bytes + (bf16 ? 2 : 4) * k0 + 64,
                         _MM_HINT_T0);
            bt_prefetch_next(w, row_bytes, i, mr, (bf16 ? 2 : 4) * (size_t)k0);
        }
        if (!bf16) {
            for (uint32_t k = k0; k < k0 + 16; k++) {
                __m512 xv[2];
                for (int v = 0; v < nvec; v++) {
                    xv[v] = _mm512_load_ps(xt + k * ldt + 16 * v);
                }
                for (int i = 0; i < mr; i++) {
                    __m512 wb = _mm512_set1_ps(((const float *)(w + (size_t)i * row_bytes))[k]);
                    for (int v = 0; v < nvec; v++) {
                        acc[i][v] = _mm512_fmadd_ps(wb, xv[v], acc[i][v]);
                    }
                }
            }
        } else {
            const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
            for (uint32_t k = k0; k < k0 + 16; k += 2) {
                __m512 x0[2], x1[2];
                for (int v = 0; v < nvec; v++) {
                    x0[v] = _mm512_load_ps(xt + k * ldt + 16 * v);
                    x1[v] = _mm512_load_ps(xt + (k + 1) * ldt + 16 * v);
                }
                for (int i = 0; i < mr; i++) {
                    uint32_t pair;
                    memcpy(&pair, w + (size_t)i * row_bytes + 2 * (size_t)k, sizeof(pair));
                    __m512i p  = _mm512_set1_epi32((int)pair);
                    __m512  w0 = _mm512_castsi512_ps(_mm512_slli_epi32(p, 16));
                    __m512  w1 = _mm512_castsi512_ps(_mm512_and_si512(p, hi));
                    for (int v = 0; v < nvec; v++) {
                        acc[i][v] = _mm512_fmadd_ps(w0, x0[v], acc[i][v]);
                        acc[i][v] = _mm512_fmadd_ps(w1, x1[v], acc[i][v]);
                    }
                }
            }
        }
    }
    bt_acc_store(acc, yt, ldt, mr, nvec);
}

/* The same with BF16 products (AVX512_BF16 vdpbf16ps): xt holds X^T with its
 * k pairs packed, lane j of pair p = (bf16 x[j][2p], bf16 x[j][2p + 1]), and
 * each weight pair, broadcast as it lies in the row, multiplies it in one
 * instruction that adds both products into the f32 accumulator. Twice the
 * products per instruction of the widening path, with no widening; the
 * activations are rounded to BF16 (see moon_cpu_bt_pack_bf16). */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void
bt_block_dp(const uint8_t *w, size_t row_bytes, const float *xt, uint32_t K, float *yt,
            const int mr, const int nvec)
{
    __m512 acc[BT_MR][2];
    size_t ldt = 16 * (size_t)nvec;

    bt_acc_zero(acc, mr, nvec);
    for (uint32_t k0 = 0; k0 < K; k0 += 32) {
        for (int i = 0; i < mr; i++) {
            _mm_prefetch((const char *)w + (size_t)i * row_bytes + 2 * k0 + 64, _MM_HINT_T0);
            bt_prefetch_next(w, row_bytes, i, mr, 2 * (size_t)k0);
        }
        for (uint32_t k = k0; k < k0 + 32 && k < K; k += 2) {
            __m512bh xp[2];
            for (int v = 0; v < nvec; v++) {
                xp[v] = (__m512bh)_mm512_load_si512(xt + (k / 2) * ldt + 16 * v);
            }
            for (int i = 0; i < mr; i++) {
                uint32_t pair;
                memcpy(&pair, w + (size_t)i * row_bytes + 2 * (size_t)k, sizeof(pair));
                __m512bh wp = (__m512bh)_mm512_set1_epi32((int)pair);
                for (int v = 0; v < nvec; v++) {
                    acc[i][v] = _mm512_dpbf16_ps(acc[i][v], wp, xp[v]);
                }
            }
        }
    }
    bt_acc_store(acc, yt, ldt, mr, nvec);
}

/* xt (moon_cpu_bt_transpose_x's f32 X^T, K even) rewritten in place as BF16 pairs for
 * bt_block_dp: pair p of lane j = (x[j][2p], x[j][2p + 1]) rounded to nearest
 * even; pair p lands where row 2p was read, before row 2p + 2 is. */
__attribute__((target("avx512f,avx512bf16"))) void moon_cpu_bt_pack_bf16(float *xt, uint32_t K,
                                                                         uint32_t nvec)
{
    size_t ldt = 16 * (size_t)nvec;

    for (uint32_t p = 0; p < K / 2; p++) {
        for (uint32_t v = 0; v < nvec; v++) {
            __m512  lo = _mm512_load_ps(xt + 2 * p * ldt + 16 * v);
            __m512  hi = _mm512_load_ps(xt + (2 * p + 1) * ldt + 16 * v);
            __m512i l  = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
            __m512i h  = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi));
            _mm512_store_si512(xt + p * ldt + 16 * v, _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
        }
    }
}

typedef void (*bt_block_fn)(const uint8_t *w, size_t row_bytes, const float *xt, uint32_t K,
                            float *yt);
#define BT_BLOCK_INST(_bf16, _mr, _nvec)                                                           \
    __attribute__((target("avx512f"))) static void bt_block_##_bf16##_##_mr##_##_nvec(             \
        const uint8_t *w, size_t row_bytes, const float *xt, uint32_t K, float *yt)                \
    {                                                                                              \
        bt_block(w, row_bytes, xt, K, yt, _bf16, _mr, _nvec);                                      \
    }
#define BT_BLOCK_INSTS(_bf16, _nvec)                                                               \
    BT_BLOCK_INST(_bf16, 12, _nvec)                                                                \
    BT_BLOCK_INST(_bf16, 4, _nvec)                                                                 \
    BT_BLOCK_INST(_bf16, 1, _nvec)
BT_BLOCK_INSTS(0, 1)
BT_BLOCK_INSTS(0, 2)
BT_BLOCK_INSTS(1, 1)
BT_BLOCK_INSTS(1, 2)
#define BT_DP_INST(_mr, _nvec)                                                                     \
    __attribute__((target("avx512f,avx512bf16"))) static void bt_block_2_##_mr##_##_nvec(          \
        const uint8_t *w, size_t row_bytes, const float *xt, uint32_t K, float *yt)                \
    {                                                                                              \
        bt_block_dp(w, row_bytes, xt, K, yt, _mr, _nvec);                                          \
    }
BT_DP_INST(12, 1)
BT_DP_INST(4, 1)
BT_DP_INST(1, 1)
BT_DP_INST(12, 2)
BT_DP_INST(4, 2)
BT_DP_INST(1, 2)

/* [F32, BF16 widened, BF16 products][nvec - 1][12 rows, 4 rows, 1 row] */
static const bt_block_fn bt_blocks[3][2][3] = {
    {{bt_block_0_12_1, bt_block_0_4_1, bt_block_0_1_1},
     {bt_block_0_12_2, bt_block_0_4_2, bt_block_0_1_2}},
    {{bt_block_1_12_1, bt_block_1_4_1, bt_block_1_1_1},
     {bt_block_1_12_2, bt_block_1_4_2, bt_block_1_1_2}},
    {{bt_block_2_12_1, bt_block_2_4_1, bt_block_2_1_1},
     {bt_block_2_12_2, bt_block_2_4_2, bt_block_2_1_2}},
};

/* y[j][0 .. rc) = yt[0 .. rc)[j] for j < b: yt (rc rows of 16 nvec outputs,
 * one per batch row) back into the row-major output, 16 x 16 at a time. */
__attribute__((target("avx512f"))) static void bt_store(const float *yt, uint32_t rc, uint32_t nvec,
                                                        float *y, uint32_t ldy, uint32_t b)
{
    uint32_t ldt = 16 * nvec, g = 0;

    for (; g + 16 <= rc; g += 16) {
        for (uint32_t v = 0; v < nvec; v++) {
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                r[i] = _mm512_load_ps(yt + (size_t)(g + i) * ldt + 16 * v);
            }
            moon_cpu_tr16_regs(r);
            for (uint32_t j = 0; j < 16 && 16 * v + j < b; j++) {
                _mm512_storeu_ps(y + (size_t)(16 * v + j) * ldy + g, r[j]);
            }
        }
    }
    for (; g < rc; g++) {
        for (uint32_t j = 0; j < b; j++) {
            y[(size_t)j * ldy + g] = yt[(size_t)g * ldt + j];
        }
    }
}

/* Y[bi][r] = W[r] . X[bi] for rows [r0, r1), b <= BT_MAX_B batch rows; x is
 * already transposed into xt (moon_cpu_bt_transpose_x); yt: BT_CHUNK x BT_MAX_B
 * scratch of the thread. */
void moon_cpu_matmul_bt(const moon_tensor_t *w, float *y, const float *xt, float *yt, uint32_t b,
                        uint32_t r0, uint32_t r1, int dp)
{
    const uint8_t *base = (const uint8_t *)w->data;
    uint32_t       nvec = (b + 15) / 16;
    int            bf16 = dp ? 2 : w->type == MOON_GGML_BF16;

    for (uint32_t c0 = r0; c0 < r1; c0 += BT_CHUNK) {
        uint32_t rc = MOON_MIN(BT_CHUNK, r1 - c0);
        for (uint32_t r = 0; r < rc;) {
            uint32_t left = rc - r;
            uint32_t sel  = left >= 12 ? 0 : left >= 4 ? 1 : 2;
            bt_blocks[bf16][nvec - 1][sel](base + (size_t)(c0 + r) * w->row_bytes, w->row_bytes, xt,
                                           w->cols, yt + (size_t)r * 16 * nvec);
            r += sel == 0 ? 12 : sel == 1 ? 4 : 1;
        }
        bt_store(yt, rc, nvec, y + c0, w->rows, b);
    }
}

#endif /* MOON_X86 */
