/* model/cpu/arch/x86/avx512_attn.c - one (row, head) of decode attention
 * over the paged KV cache in AVX-512 registers. */
#include "cpu/arch/x86/x86.h"

#ifdef MOON_X86

/* Lane j of the result = the sum of the 16 lanes of d[idx(j)], idx = the
 * order in which the shuffles leave the rows (an involution): callers put row
 * j's vector at d[op_hsum_idx[j]]. */
static const uint8_t op_hsum_idx[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

__attribute__((target("avx512f"))) static inline __m512 hsum16x16(const __m512 d[16])
{
    __m512 e[8], f[4], g[2];

    for (int j = 0; j < 8; j++) {
        e[j] = _mm512_add_ps(_mm512_shuffle_f32x4(d[j], d[j + 8], 0x44),
                             _mm512_shuffle_f32x4(d[j], d[j + 8], 0xee));
    }
    for (int j = 0; j < 4; j++) {
        f[j] = _mm512_add_ps(_mm512_shuffle_f32x4(e[j], e[j + 4], 0x88),
                             _mm512_shuffle_f32x4(e[j], e[j + 4], 0xdd));
    }
    for (int j = 0; j < 2; j++) {
        g[j] = _mm512_add_ps(_mm512_shuffle_ps(f[j], f[j + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(f[j], f[j + 2], _MM_SHUFFLE(3, 2, 3, 2)));
    }
    return _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* One (row, head) of decode attention over positions [0, n), head_dim <= 128
 * (a head_dim that is not a multiple of 16 ends in a masked vector; an F16
 * cache needs a multiple of 16): q in registers, 16 positions' dot products
 * reduced together, softmax with the vector exp, the output accumulated in
 * registers (the reference's order over positions). K/V rows are walked
 * block by block of the paged cache (no division per position); an F16
 * cache's rows widen to F32 as they load (vcvtph2ps: exact). */
/* Vector i of a head at p: the last (i == lv) masked by lm when tail is set;
 * f16: p holds fp16 elements (never with tail). */
__attribute__((target("avx512f"), always_inline)) static inline __m512
head_load(const uint8_t *p, uint32_t i, uint32_t lv, __mmask16 lm, const int tail, const int f16)
{
    if (f16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32 * i)));
    }
    return tail && i == lv ? _mm512_maskz_loadu_ps(lm, p + 64 * i) : _mm512_loadu_ps(p + 64 * i);
}

/* Inlined three times: F32 with tail 0 (head_dim % 16 == 0, plain loads) and
 * tail 1, and F16 (tail 0). */
__attribute__((target("avx512f"), always_inline)) static inline void
attn_head_body(const cpu_state_t *s, const moon_kv_seq_t *sq, uint32_t l, uint32_t off, uint32_t n,
               const float *q, float *o, float *att, float scale, const int tail, const int f16)
{
    const moon_kv_cache_t *kv = s->kv;
    uint32_t               hs = s->m->cfg.head_dim, bt = kv->cfg.block_tokens;
    uint32_t               nv = (hs + 15) / 16, lv = nv - 1; /* lv: the last, maybe partial */
    __mmask16              lm = (__mmask16)(hs % 16 ? (1u << (hs % 16)) - 1 : 0xffffu);
    size_t                 es = f16 ? 2 : 4;
    size_t                 ld = kv->kv_dim * es; /* bytes from one position to the next */
    size_t                 ob = off * es;
    __m512                 qv[8], ov[8];
    float                  inv;

    for (uint32_t i = 0; i < nv; i++) {
        qv[i] =
            tail && i == lv ? _mm512_maskz_loadu_ps(lm, q + 16 * i) : _mm512_loadu_ps(q + 16 * i);
        ov[i] = _mm512_setzero_ps();
    }
    {
        const uint8_t *k  = (const uint8_t *)moon_kv_ptr(kv, sq, l, 0, 0) + ob; /* position t */
        uint32_t       tb = 0;                                                  /* t % bt */
        for (uint32_t t0 = 0; t0 < n; t0 += 16) {
            uint32_t m = MOON_MIN(16, n - t0);
            __m512   d[16], sc;
            for (uint32_t j = 0; j < 16; j++) {
                d[op_hsum_idx[j]] = _mm512_setzero_ps();
            }
            for (uint32_t j = 0; j < m; j++) {
                __m512 acc = _mm512_mul_ps(head_load(k, 0, lv, lm, tail, f16), qv[0]);
                for (uint32_t i = 1; i < nv; i++) {
                    acc = _mm512_fmadd_ps(head_load(k, i, lv, lm, tail, f16), qv[i], acc);
                }
                d[op_hsum_idx[j]] = acc;
                if (++tb == bt) {
                    tb = 0;
                    k = t0 + j + 1 < n ? (const uint8_t *)moon_kv_ptr(kv, sq, l, 0, t0 + j + 1) + ob
                                       : k;
                } else {
                    k += ld;
                }
            }
            sc = _mm512_mul_ps(hsum16x16(d), _mm512_set1_ps(scale));
            _mm512_mask_storeu_ps(att + t0, (__mmask16)((1u << m) - 1), sc);
        }
    }
    inv = 1.0f / moon_cpu_softmax_exp_avx512(att, n);
    if (nv == 1) {
        /* one vector per position: 4 accumulators, so the FMAs do not wait on
         * each other's latency (small heads; stories260K's are 8 floats) */
        __m512 o1 = _mm512_setzero_ps(), o2 = _mm512_setzero_ps(), o3 = _mm512_setzero_ps();
        for (uint32_t t0 = 0; t0 < n; t0 += bt) {
            const uint8_t *v  = (const uint8_t *)moon_kv_ptr(kv, sq, l, 1, t0) + ob;
            uint32_t       t1 = MOON_MIN(n, t0 + bt), t = t0;
            for (; t + 4 <= t1; t += 4, v += 4 * ld) {
                ov[0] = _mm512_fmadd_ps(_mm512_set1_ps(att[t]), head_load(v, 0, 0, lm, tail, f16),
                                        ov[0]);
                o1    = _mm512_fmadd_ps(_mm512_set1_ps(att[t + 1]),
                                        head_load(v + ld, 0, 0, lm, tail, f16), o1);
                o2    = _mm512_fmadd_ps(_mm512_set1_ps(att[t + 2]),
                                        head_load(v + 2 * ld, 0, 0, lm, tail, f16), o2);
                o3    = _mm512_fmadd_ps(_mm512_set1_ps(att[t + 3]),
                                        head_load(v + 3 * ld, 0, 0, lm, tail, f16), o3);
            }
            for (; t < t1; t++, v += ld) {
                ov[0] = _mm512_fmadd_ps(_mm512_set1_ps(att[t]), head_load(v, 0, 0, lm, tail, f16),
                                        ov[0]);
            }
        }
        ov[0] = _mm512_add_ps(_mm512_add_ps(ov[0], o1), _mm512_add_ps(o2, o3));
        _mm512_mask_storeu_ps(o, lm, _mm512_mul_ps(ov[0], _mm512_set1_ps(inv)));
        return;
    }
    for (uint32_t t0 = 0; t0 < n; t0 += bt) {
        const uint8_t *v = (const uint8_t *)moon_kv_ptr(kv, sq, l, 1, t0) + ob;
        for (uint32_t t = t0; t < MOON_MIN(n, t0 + bt); t++, v += ld) {
            __m512 a = _mm512_set1_ps(att[t] * inv);
            for (uint32_t i = 0; i < nv; i++) {
                ov[i] = _mm512_fmadd_ps(a, head_load(v, i, lv, lm, tail, f16), ov[i]);
            }
        }
    }
    for (uint32_t i = 0; i < nv; i++) {
        _mm512_mask_storeu_ps(o + 16 * i, tail && i == lv ? lm : 0xffff, ov[i]);
    }
}

__attribute__((target("avx512f"))) void
moon_cpu_attn_head_avx512(const cpu_state_t *s, const moon_kv_seq_t *sq, uint32_t l, uint32_t off,
                          uint32_t n, const float *q, float *o, float *att, float scale)
{
    if (s->kv->elem_bytes == 2) {
        attn_head_body(s, sq, l, off, n, q, o, att, scale, 0, 1);
    } else if (s->m->cfg.head_dim % 16 == 0) {
        attn_head_body(s, sq, l, off, n, q, o, att, scale, 0, 0);
    } else {
        attn_head_body(s, sq, l, off, n, q, o, att, scale, 1, 0);
    }
}

#endif /* MOON_X86 */
