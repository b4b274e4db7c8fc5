/* model/cpu/arch/x86/avx512_op.c - the outer-product GEMM (AVX-512): weight
 * panels packed transposed into L1, batch row blocks broadcast over them. */
#include "cpu/arch/x86/x86.h"

#include <string.h>

#ifdef MOON_X86

/* Batched matmul in outer-product form (AVX-512, batches of s->op_min_b rows or
 * more): each thread packs a panel of 16 or 32 weight rows, OP_KC columns at
 * a time, transposed into its L1-sized scratch (k-major: P[k][r], BF16 or F16 widened
 * to F32 once here), then every batch row block runs over it with a
 * broadcast of X[bi][k] times P[k][0..31] into 16-lane accumulators that hold
 * y[bi][r..r+31] (no horizontal sums; a k chunk's partial sums go through y).
 * The weight panel is read from memory once per step and reused by every
 * batch row from L1; the next panel is prefetched while this one is computed
 * (prefetcht0, spread over the kernel calls), so the weight stream overlaps
 * the FMAs. Each output is one sequential sum over k (the reference's order
 * within a row). */

/* Packs rows [0, 16 * pv) x columns [k0, k0 + kc) of w (rows of row_bytes)
 * into P[k][r], r < 16 * pv; a last group of kc % 16 columns is padded with
 * zeros to 16 (P holds OP_KC rows of k). */
#define OP_PACK_FN(_name, _elem_t, _load)                                                          \
    __attribute__((target("avx512f"))) static void _name(                                          \
        const uint8_t *w, size_t row_bytes, uint32_t k0, uint32_t kc, uint32_t pv, float *P)       \
    {                                                                                              \
        uint32_t ldp = 16 * pv;                                                                    \
        for (uint32_t v = 0; v < pv; v++) {                                                        \
            const uint8_t *col = w + (size_t)16 * v * row_bytes + (size_t)k0 * sizeof(_elem_t);    \
            uint32_t       k   = 0;                                                                \
            for (; k + 16 <= kc; k += 16, col += 16 * sizeof(_elem_t)) {                           \
                __m512         r[16];                                                              \
                const uint8_t *p = col;                                                            \
                for (int i = 0; i < 16; i++, p += row_bytes) {                                     \
                    r[i] = _load((const _elem_t *)p);                                              \
                }                                                                                  \
                moon_cpu_op_tr16(r, P + (size_t)k * ldp + 16 * v, ldp);                            \
            }                                                                                      \
            if (k < kc) {                                                                          \
                __m512         r[16];                                                              \
                const uint8_t *p = col;                                                            \
                for (int i = 0; i < 16; i++, p += row_bytes) {                                     \
                    _elem_t tail[16] = {0};                                                        \
                    memcpy(tail, p, (kc - k) * sizeof(_elem_t));                                   \
                    r[i] = _load(tail);                                                            \
                }                                                                                  \
                moon_cpu_op_tr16(r, P + (size_t)k * ldp + 16 * v, ldp);                            \
            }                                                                                      \
        }                                                                                          \
    }
OP_PACK_FN(op_pack_f32, float, _mm512_loadu_ps)
OP_PACK_FN(op_pack_bf16, uint16_t, moon_cpu_bf16x16)
OP_PACK_FN(op_pack_f16, uint16_t, moon_cpu_f16x16)

/* y[j][0 .. 16 pv) (+)= sum over k < kc of x[j][k] * P[k][..], j < nb; first:
 * start from zero, else from y. Prefetches pf_lines lines from pf (the next
 * panel) spread over the loop. Inlined into one function per (pv, nb). */
__attribute__((target("avx512f"), always_inline)) static inline void
op_block(const float *P, uint32_t kc, const float *x, uint32_t ldx, float *y, uint32_t ldy,
         int first, const char *pf, uint32_t pf_lines, const int pv, const int nb)
{
    __m512   acc[OP_NB][OP_PV];
    uint32_t ppk = (pf_lines + kc - 1) / kc; /* lines per k step */

    for (int j = 0; j < nb; j++) {
        for (int v = 0; v < pv; v++) {
            acc[j][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + (size_t)j * ldy + 16 * v);
        }
    }
    for (uint32_t k = 0; k < kc; k++) {
        __m512 wv[OP_PV];
        if (k * ppk < pf_lines) {
            for (uint32_t q = 0; q < ppk; q++) {
                _mm_prefetch(pf + (size_t)64 * (k * ppk + q), _MM_HINT_T0);
            }
        }
        for (int v = 0; v < pv; v++) {
            wv[v] = _mm512_load_ps(P + (size_t)k * 16 * pv + 16 * v);
        }
        for (int j = 0; j < nb; j++) {
            __m512 xb = _mm512_set1_ps(x[(size_t)j * ldx + k]);
            for (int v = 0; v < pv; v++) {
                acc[j][v] = _mm512_fmadd_ps(wv[v], xb, acc[j][v]);
            }
        }
    }
    for (int j = 0; j < nb; j++) {
        for (int v = 0; v < pv; v++) {
            _mm512_storeu_ps(y + (size_t)j * ldy + 16 * v, acc[j][v]);
        }
    }
}

typedef void (*op_block_fn)(const float *P, uint32_t kc, const float *x, uint32_t ldx, float *y,
                            uint32_t ldy, int first, const char *pf, uint32_t pf_lines);
#define OP_BLOCK_INST(_pv, _nb)                                                                    \
    __attribute__((target("avx512f"))) static void op_block_##_pv##_##_nb(                         \
        const float *P, uint32_t kc, const float *x, uint32_t ldx, float *y, uint32_t ldy,         \
        int first, const char *pf, uint32_t pf_lines)                                              \
    {                                                                                              \
        op_block(P, kc, x, ldx, y, ldy, first, pf, pf_lines, _pv, _nb);                            \
    }
OP_BLOCK_INST(1, 1)
OP_BLOCK_INST(1, 2)
OP_BLOCK_INST(1, 4)
OP_BLOCK_INST(1, 8)
OP_BLOCK_INST(2, 1)
OP_BLOCK_INST(2, 2)
OP_BLOCK_INST(2, 4)
OP_BLOCK_INST(2, 8)
OP_BLOCK_INST(3, 1)
OP_BLOCK_INST(3, 2)
OP_BLOCK_INST(3, 4)
OP_BLOCK_INST(3, 8)

/* [pv - 1][log2 nb] */
static const op_block_fn op_blocks[OP_PV][4] = {
    {op_block_1_1, op_block_1_2, op_block_1_4, op_block_1_8},
    {op_block_2_1, op_block_2_2, op_block_2_4, op_block_2_8},
    {op_block_3_1, op_block_3_2, op_block_3_4, op_block_3_8},
};

/* Y[bi][r] = W[r] . X[bi] for rows [r0, r1) and all b batch rows by the
 * outer-product kernels (w F32, BF16 or F16, any cols): panels of 32 (then
 * 16) rows, the last r1 - r0 < 16 rows by dots. */
void moon_cpu_matmul_op(cpu_state_t *s, uint32_t ith, const moon_tensor_t *w, float *y,
                        const float *x, uint32_t b, uint32_t r0, uint32_t r1)
{
    const uint8_t *base = (const uint8_t *)w->data;
    float         *P    = s->pack + (size_t)ith * OP_KC * 16 * OP_PV;
    uint32_t       K    = w->cols;
    uint32_t       ldy  = w->rows;
    void (*pack)(const uint8_t *, size_t, uint32_t, uint32_t, uint32_t, float *) =
        w->type == MOON_GGML_BF16  ? op_pack_bf16
        : w->type == MOON_GGML_F16 ? op_pack_f16
                                   : op_pack_f32;
    uint32_t n_blocks = b / OP_NB + (uint32_t)__builtin_popcount(b % OP_NB);
    uint32_t n_calls  = (K + OP_KC - 1) / OP_KC * n_blocks; /* kernel calls per panel */
    uint32_t r        = r0;

    while (r + 16 <= r1) {
        uint32_t    pv   = MOON_MIN(OP_PV, (r1 - r) / 16);
        uint32_t    rn   = r + 16 * pv;
        uint32_t    nxt  = MOON_MIN(16 * OP_PV, (r1 - rn) & ~15u); /* rows of the next panel */
        const char *pf   = (const char *)(base + (size_t)rn * w->row_bytes);
        uint32_t    pf_n = (uint32_t)((size_t)nxt * w->row_bytes / 64); /* its cache lines */
        uint32_t    per  = (pf_n + n_calls - 1) / n_calls;
        uint32_t    call = 0;

        for (uint32_t k0 = 0; k0 < K; k0 += OP_KC) {
            uint32_t kc = MOON_MIN(OP_KC, K - k0);
            pack(base + (size_t)r * w->row_bytes, w->row_bytes, k0, kc, pv, P);
            for (uint32_t bi = 0; bi < b; call++) {
                uint32_t left  = b - bi;
                uint32_t lg    = left >= 8 ? 3 : left >= 4 ? 2 : left >= 2 ? 1 : 0;
                uint32_t done  = MOON_MIN(pf_n, per * call);
                uint32_t lines = MOON_MIN(per, pf_n - done);
                op_blocks[pv - 1][lg](P, kc, x + (size_t)bi * K + k0, K, y + (size_t)bi * ldy + r,
                                      ldy, k0 == 0, pf + (size_t)64 * done, lines);
                bi += 1u << lg;
            }
        }
        r = rn;
    }
    for (; r < r1; r++) {
        for (uint32_t bi = 0; bi < b; bi++) {
            y[(size_t)bi * ldy + r] =
                s->dot[w->type](base + (size_t)r * w->row_bytes, x + (size_t)bi * K, K);
        }
    }
}

#endif /* MOON_X86 */
