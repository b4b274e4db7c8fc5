/* model/rope.c - the rotary position embedding's rotations, for every
 * backend (they tabulate or compute them with this one formula, so all of
 * them rotate identically): plain, linear scaling, Llama 3.1's frequency
 * factors, and YaRN as llama.cpp's ggml computes it (rope_yarn). */
#include "model_internal.h"

#include <math.h>

/* YaRN: the pair index where a frequency makes n_rot rotations over the
 * original context (ggml_rope_yarn_corr_dim). */
static float yarn_corr_dim(float n_dims, float n_ctx_orig, float n_rot, float base)
{
    return n_dims * logf(n_ctx_orig / (n_rot * 2.0f * 3.14159265358979f)) / (2.0f * logf(base));
}

/* YaRN's weight of the unscaled angle for pair j: 1 below the fast bound
 * (high frequencies keep their angle), 0 above the slow one (low
 * frequencies are interpolated), linear between. */
static float yarn_ramp(const moon_model_config_t *c, uint32_t j)
{
    float n_dims = (float)c->head_dim, ctx = (float)c->rope_yarn_orig_ctx;
    float lo = floorf(yarn_corr_dim(n_dims, ctx, c->rope_yarn_beta_fast, c->rope_theta));
    float hi = ceilf(yarn_corr_dim(n_dims, ctx, c->rope_yarn_beta_slow, c->rope_theta));
    float y;

    lo = fmaxf(0.0f, lo);
    hi = fminf(n_dims - 1.0f, hi);
    y  = ((float)j - lo) / fmaxf(0.001f, hi - lo);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

void moon_model_rope_cos_sin(const moon_model_t *m, uint32_t pos, uint32_t j, float *cos_p,
                             float *sin_p)
{
    const moon_model_config_t *c = &m->cfg;
    float extrap = (float)pos * (1.0f / powf(c->rope_theta, (float)(2 * j) / (float)c->head_dim));
    float val    = extrap;
    float mscale = 1.0f;

    if (c->rope_freq_scale != 1.0f) {
        val *= c->rope_freq_scale;
    }
    if (c->rope_yarn_orig_ctx != 0) {
        float mix = yarn_ramp(c, j);
        val       = val * (1.0f - mix) + extrap * mix;
        /* interpolated attention is flatter: both q and k grow by this */
        mscale = 1.0f + 0.1f * logf(1.0f / c->rope_freq_scale);
    }
    if (m->rope_freqs != NULL) {
        val /= m->rope_freqs[j];
    }
    *cos_p = cosf(val) * mscale;
    *sin_p = sinf(val) * mscale;
}
