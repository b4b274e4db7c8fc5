/* tests/unit/model/model_test_util.h - helpers shared by the model tests:
 * random models in /tmp, logits comparison. Single-threaded. */
#ifndef MOON_MODEL_TEST_UTIL_H
#define MOON_MODEL_TEST_UTIL_H

#include "moon_test.h"
#include "moonlet/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static inline moon_model_config_t mt_shape(uint32_t dim, uint32_t hidden, uint32_t layers,
                                           uint32_t heads, uint32_t kv_heads, uint32_t vocab,
                                           uint32_t seq_len)
{
    moon_model_config_t c = {.dim        = dim,
                             .hidden_dim = hidden,
                             .n_layers   = layers,
                             .n_heads    = heads,
                             .n_kv_heads = kv_heads,
                             .vocab_size = vocab,
                             .seq_len    = seq_len,
                             .norm_eps   = 1e-5f,
                             .rope_theta = 10000.0f};
    return c;
}

/* Writes a random model to a per-process temp path and loads it. */
static inline moon_model_t *mt_random_model(const moon_model_config_t *c, moon_ggml_type_t type,
                                            uint64_t seed, char *path, size_t path_len)
{
    moon_model_t *m = NULL;

    snprintf(path, path_len, "/tmp/moon_test_model_%d_%llu_%d.gguf", (int)getpid(),
             (unsigned long long)seed, (int)type);
    if (moon_model_write_random(c, type, seed, path) != MOON_OK) {
        return NULL;
    }
    if (moon_model_load(path, &m) != MOON_OK) {
        return NULL;
    }
    return m;
}

/* Uniform in [-1, 1) from the generator state *seed. */
static inline float mt_frand(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* x: random in [-scale, scale), an outlier (8x) every 97 values, and the 32
 * values from zero_at all zero (a block with d = 0): what the quantised
 * kernels' tests feed them. */
static inline void mt_fill_quant_input(float *x, size_t n, float scale, size_t zero_at,
                                       unsigned *seed)
{
    for (size_t i = 0; i < n; i++) {
        x[i] = mt_frand(seed) * scale * (i % 97 == 5 ? 8.0f : 1.0f);
    }
    memset(x + zero_at, 0, 32 * sizeof(float));
}

/* Largest |a - b| over n, relative to max(1, max |b|). */
static inline float mt_rel_diff(const float *a, const float *b, uint32_t n)
{
    float md = 0.0f, mb = 1.0f;
    for (uint32_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        md      = d > md ? d : md;
        mb      = fabsf(b[i]) > mb ? fabsf(b[i]) : mb;
    }
    return md / mb;
}

#ifdef MOON_WITH_CUDA
#include <cuda_runtime_api.h>

/* 1 (and the test reports itself skipped) when no GPU is usable here. */
static inline int mt_no_cuda_device(void)
{
    int n_dev = 0;

    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev <= 0) {
        moon_test_skip("no device");
        return 1;
    }
    return 0;
}
#endif

#endif /* MOON_MODEL_TEST_UTIL_H */
