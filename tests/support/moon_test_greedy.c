/* tests/support/moon_test_greedy.c - reference greedy continuations. */
#include "moon_test_greedy.h"

#include "moon_test.h"

#include <stdlib.h>

moon_kv_type_t moon_test_cluster_kv_type(void)
{
    moon_kv_type_t t = MOON_KV_F32;

    /* cannot fail for the CPU backend; no CUnit assertion: callers' setups
     * run outside a suite */
    (void)moon_backend_kv_type(MOON_BACKEND_CPU, MOON_KV_AUTO, &t);
    return t;
}

uint32_t moon_test_greedy(const moon_model_t *m, const int32_t *prompt, uint32_t n,
                          uint32_t max_new, int32_t *out)
{
    const moon_model_config_t *mc = moon_model_config(m);
    moon_engine_config_t       ec = {.kind = MOON_BACKEND_REF, .max_batch = 1, .max_chunk = 512};
    moon_kv_config_t           kc = moon_model_kv_config(mc, 16, mc->seq_len / 16, 1);
    moon_engine_t             *e  = NULL;
    moon_kv_cache_t           *kv = NULL;
    float                     *logits = calloc(mc->vocab_size, sizeof(float));
    uint32_t                   seq, got = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(logits);
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ec, &e), MOON_OK);
    kc.elem_type = moon_test_cluster_kv_type();
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kc, &kv), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_seq_create(kv, &seq), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_engine_prefill(e, kv, seq, prompt, n, logits, NULL), MOON_OK);
    while (got < max_new) {
        int32_t t = moon_argmax(logits, mc->vocab_size);
        if (t == 1 || t == 2) {
            break; /* BOS or EOS */
        }
        out[got++] = t;
        if (got == max_new || moon_engine_decode(e, kv, &seq, &t, 1, logits, NULL) != MOON_OK) {
            break;
        }
    }
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(e);
    free(logits);
    return got;
}

uint32_t moon_test_greedy_file(const char *path, const int32_t *prompt, uint32_t n,
                               uint32_t max_new, int32_t *out)
{
    moon_model_t *m = NULL;
    uint32_t      got;

    CU_ASSERT_EQUAL_FATAL(moon_model_load(path, &m), MOON_OK);
    got = moon_test_greedy(m, prompt, n, max_new, out);
    moon_model_destroy(m);
    return got;
}
