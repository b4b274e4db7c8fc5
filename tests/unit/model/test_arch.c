/* tests/unit/model/test_arch.c - the architectures a GGUF may name: llama,
 * qwen2 and qwen3 load with their extra tensors (biases, Q/K norms,
 * rope_freqs, linear rope scaling), tied embeddings bind the classifier to
 * token_embd; YaRN's keys read; an unknown architecture, an unsupported rope scaling, and a
 * qwen2 file without its biases are refused with an error, never a crash; the
 * CUDA backend refuses what it does not run (and is absent without CUDA). */
#include "moon_test.h"
#include "moonlet/gguf.h"
#include "moonlet/log.h"
#include "moonlet/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static moon_model_config_t shape(uint32_t arch)
{
    return (moon_model_config_t){.dim             = 32,
                                 .hidden_dim      = 64,
                                 .n_layers        = 1,
                                 .n_heads         = 4,
                                 .n_kv_heads      = 2,
                                 .vocab_size      = 300,
                                 .seq_len         = 32,
                                 .norm_eps        = 1e-5f,
                                 .rope_theta      = 10000.0f,
                                 .arch            = arch,
                                 .rope_freq_scale = 1.0f};
}

static char path[128];

static void write_model(uint32_t arch, int rope_freqs)
{
    moon_model_config_t c = shape(arch);
    snprintf(path, sizeof(path), "/tmp/moon_test_arch_%d.gguf", (int)getpid());
    CU_ASSERT_EQUAL_FATAL(
        moon_model_write_random_ex(
            &c,
            &(moon_model_write_opts_t){.type = MOON_GGML_F32, .seed = 3, .rope_freqs = rope_freqs},
            path),
        MOON_OK);
}

static uint8_t *read_all(size_t *len_p)
{
    FILE    *f = fopen(path, "rb");
    uint8_t *buf;
    long     n;

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n);
    CU_ASSERT_FATAL(buf != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len_p = (size_t)n;
    return buf;
}

/* Replaces every occurrence of from by to (same length) in the file's bytes:
 * the architecture's name and its key prefix together. */
static uint8_t *renamed(const char *from, const char *to, size_t *len_p)
{
    uint8_t *b = read_all(len_p);
    size_t   n = strlen(from);

    for (size_t i = 0; i + n <= *len_p; i++) {
        if (memcmp(b + i, from, n) == 0) {
            memcpy(b + i, to, n);
        }
    }
    return b;
}

static void test_each_arch_loads(void)
{
    for (uint32_t arch = MOON_ARCH_LLAMA; arch <= MOON_ARCH_QWEN3; arch++) {
        moon_model_t *m = NULL;
        write_model(arch, arch == MOON_ARCH_LLAMA);
        CU_ASSERT_EQUAL_FATAL(moon_model_load(path, &m), MOON_OK);
        CU_ASSERT_EQUAL(moon_model_config(m)->arch, arch);
        CU_ASSERT_EQUAL(moon_model_config(m)->rope_neox, arch != MOON_ARCH_LLAMA);
        CU_ASSERT_STRING_EQUAL(moon_model_arch_name(arch), arch == 0   ? "llama"
                                                           : arch == 1 ? "qwen2"
                                                                       : "qwen3");
        moon_model_destroy(m);
        unlink(path);
    }
    CU_ASSERT_STRING_EQUAL(moon_model_arch_name(99), "?");
}

static void test_unknown_arch_refused(void)
{
    size_t        len;
    uint8_t      *b;
    moon_model_t *m = NULL;

    write_model(MOON_ARCH_QWEN2, 0);
    b = renamed("qwen2", "gemma", &len);
    moon_log_set_level(0);
    CU_ASSERT_EQUAL(moon_model_load_memory(b, len, &m), MOON_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(m);
    free(b);
    /* a qwen2 file whose biases are gone (renamed away): corrupt */
    b = renamed("attn_v.bias", "attn_v.bia_", &len);
    CU_ASSERT_EQUAL(moon_model_load_memory(b, len, &m), MOON_ERR_CORRUPT);
    free(b);
    /* the same tensors under llama: biases are optional there, and bind */
    b = renamed("qwen2", "llama", &len);
    CU_ASSERT_EQUAL_FATAL(moon_model_load_memory(b, len, &m), MOON_OK);
    CU_ASSERT_EQUAL(moon_model_config(m)->rope_neox, 0);
    moon_model_destroy(m);
    free(b);
    unlink(path);
    /* a qwen3 file without its Q/K norms */
    write_model(MOON_ARCH_QWEN3, 0);
    b = renamed("attn_k_norm", "attn_k_nor_", &len);
    CU_ASSERT_EQUAL(moon_model_load_memory(b, len, &m), MOON_ERR_CORRUPT);
    free(b);
    unlink(path);
    moon_log_set_level(MOON_LOG_WARN);
}

static void test_rope_scaling(void)
{
    moon_model_config_t c = shape(MOON_ARCH_LLAMA);
    moon_model_t       *m = NULL;
    size_t              len;
    uint8_t            *b;

    c.rope_freq_scale = 0.25f;
    snprintf(path, sizeof(path), "/tmp/moon_test_arch_%d.gguf", (int)getpid());
    CU_ASSERT_EQUAL_FATAL(
        moon_model_write_random_ex(&c, &(moon_model_write_opts_t){.type = MOON_GGML_F32}, path),
        MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_model_load(path, &m), MOON_OK);
    CU_ASSERT_DOUBLE_EQUAL(moon_model_config(m)->rope_freq_scale, 0.25, 1e-7);
    moon_model_destroy(m);
    /* a scaling type nobody supports: refused, naming those that are */
    moon_log_set_level(0);
    b = renamed("linear", "longro", &len);
    CU_ASSERT_EQUAL(moon_model_load_memory(b, len, &m), MOON_ERR_UNSUPPORTED);
    free(b);
    moon_log_set_level(MOON_LOG_WARN);
    unlink(path);
    /* yarn as gen-model writes it: factor, original context, llama.cpp's
     * default betas (greedy_check.sh checks its tokens against llama.cpp) */
    c.rope_yarn_orig_ctx = 16;
    CU_ASSERT_EQUAL_FATAL(
        moon_model_write_random_ex(&c, &(moon_model_write_opts_t){.type = MOON_GGML_F32}, path),
        MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_model_load(path, &m), MOON_OK);
    CU_ASSERT_EQUAL(moon_model_config(m)->rope_yarn_orig_ctx, 16);
    CU_ASSERT_DOUBLE_EQUAL(moon_model_config(m)->rope_freq_scale, 0.25, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(moon_model_config(m)->rope_yarn_beta_fast, 32.0, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(moon_model_config(m)->rope_yarn_beta_slow, 1.0, 1e-7);
    moon_model_destroy(m);
    /* yarn without the context it was trained at: corrupt */
    b = renamed("original_context_length", "original_context_lengtx", &len);
    moon_log_set_level(0);
    CU_ASSERT_EQUAL(moon_model_load_memory(b, len, &m), MOON_ERR_CORRUPT);
    moon_log_set_level(MOON_LOG_WARN);
    free(b);
    unlink(path);
}

/* CUDA builds: the backend refuses qwen models instead of running them wrong. */
static void test_cuda_refuses_qwen(void)
{
    moon_model_t        *m   = NULL;
    moon_engine_t       *eng = NULL;
    moon_engine_config_t e   = {.kind = MOON_BACKEND_CUDA, .max_batch = 2, .max_chunk = 8};

    write_model(MOON_ARCH_QWEN3, 0);
    CU_ASSERT_EQUAL_FATAL(moon_model_load(path, &m), MOON_OK);
    moon_log_set_level(0);
    CU_ASSERT_EQUAL(moon_engine_create(m, &e, &eng), MOON_ERR_UNSUPPORTED);
    moon_log_set_level(MOON_LOG_WARN);
    CU_ASSERT_PTR_NULL(eng);
    moon_model_destroy(m);
    unlink(path);
}

MOON_TEST_MAIN("arch", NULL, NULL, test_each_arch_loads, test_unknown_arch_refused,
               test_rope_scaling, test_cuda_refuses_qwen)
