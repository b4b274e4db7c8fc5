/* tests/unit/model/test_convert.c - converting the llama2.c stories260K
 * checkpoint + tok512.bin reproduces the bundled GGUF (same metadata values,
 * byte-identical tensors), and a bad checkpoint is refused cleanly. */
#include "moon_test.h"
#include "moonlet/gguf.h"
#include "moonlet/log.h"
#include "moonlet/model.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DATA MOON_TEST_DATA_DIR "/stories260K"

static void test_reproduces_bundled_gguf(void)
{
    char         out[128];
    moon_gguf_t *a = NULL, *b = NULL;

    snprintf(out, sizeof(out), "/tmp/moon_test_convert_%d.gguf", (int)getpid());
    CU_ASSERT_EQUAL_FATAL(moon_model_convert_llama2c(DATA "/stories260K.bin", DATA "/tok512.bin",
                                                     out, "stories260K", "MIT"),
                          MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gguf_open(out, &a), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gguf_open(MOON_MODELS_DIR "/stories260K/stories260K.gguf", &b),
                          MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_n_kv(a), moon_gguf_n_kv(b));
    CU_ASSERT_EQUAL_FATAL(moon_gguf_n_tensors(a), moon_gguf_n_tensors(b));
    CU_ASSERT_EQUAL(moon_gguf_n_tensors(a), 47);
    for (uint64_t i = 0; i < moon_gguf_n_tensors(a); i++) {
        const moon_gguf_tensor_t *x = moon_gguf_tensor(a, i), *y = moon_gguf_tensor(b, i);
        CU_ASSERT_STRING_EQUAL(x->name, y->name);
        CU_ASSERT(x->bytes == y->bytes && memcmp(x->data, y->data, x->bytes) == 0);
    }
    {
        const char *s1, *s2;
        uint64_t    l1, l2;
        CU_ASSERT_EQUAL(moon_gguf_get_arr_str(a, "tokenizer.ggml.tokens", 259, &s1, &l1), MOON_OK);
        CU_ASSERT_EQUAL(moon_gguf_get_arr_str(b, "tokenizer.ggml.tokens", 259, &s2, &l2), MOON_OK);
        CU_ASSERT(l1 == 4 && l1 == l2 && memcmp(s1, "\xe2\x96\x81t", 4) == 0 &&
                  memcmp(s1, s2, l1) == 0);
    }
    moon_gguf_close(a);
    moon_gguf_close(b);
    unlink(out);
}

static void test_bad_checkpoint_refused(void)
{
    char  out[128];
    FILE *f;

    snprintf(out, sizeof(out), "/tmp/moon_test_convert_bad_%d.bin", (int)getpid());
    f = fopen(out, "wb");
    fwrite("\x40\x00\x00\x00\xac\x00", 1, 6, f);
    fclose(f);
    moon_log_set_level(0);
    CU_ASSERT_EQUAL(
        moon_model_convert_llama2c(out, DATA "/tok512.bin", "/tmp/never.gguf", NULL, NULL),
        MOON_ERR_CORRUPT);
    CU_ASSERT_EQUAL(moon_model_convert_llama2c("/nonexistent", DATA "/tok512.bin",
                                               "/tmp/never.gguf", NULL, NULL),
                    MOON_ERR_NOT_FOUND);
    moon_log_set_level(MOON_LOG_WARN);
    unlink(out);
}

MOON_TEST_MAIN("convert", NULL, NULL, test_reproduces_bundled_gguf, test_bad_checkpoint_refused)
