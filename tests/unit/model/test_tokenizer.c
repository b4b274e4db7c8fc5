/* tests/unit/model/test_tokenizer.c - SentencePiece BPE from GGUF metadata:
 * llama2.c-compatible encoding of the expected_greedy.json prompts, decode,
 * byte fallback, and streaming decode that never emits half a character; the
 * 512-token vocabulary of stories260K and a 32,000-token one. */
#include "moon_test.h"
#include "moonlet/gguf.h"
#include "moonlet/model.h"
#include "moonlet/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STORIES MOON_MODELS_DIR "/stories260K/stories260K.gguf"

static moon_gguf_t      *g;
static moon_tokenizer_t *tok;

static int setup(void)
{
    if (moon_gguf_open(STORIES, &g) != MOON_OK || moon_tokenizer_create(g, &tok) != MOON_OK) {
        return 1;
    }
    return 0;
}

static int teardown(void)
{
    moon_tokenizer_destroy(tok);
    moon_gguf_close(g);
    return 0;
}

static void check_encode(const char *text, const int32_t *want, size_t n_want)
{
    int32_t ids[256];
    size_t  n = 0;

    CU_ASSERT_EQUAL_FATAL(moon_tokenizer_encode(tok, text, strlen(text), true, ids, 256, &n),
                          MOON_OK);
    CU_ASSERT_EQUAL(n, n_want);
    for (size_t i = 0; i < n && i < n_want; i++) {
        CU_ASSERT_EQUAL(ids[i], want[i]);
    }
}

static void test_encode_matches_llama2c(void)
{
    static const int32_t once[]  = {1, 403, 407, 261, 378};
    static const int32_t lily[]  = {1, 317, 269, 274, 287};
    static const int32_t empty[] = {1};

    CU_ASSERT_EQUAL(moon_tokenizer_n_vocab(tok), 512);
    CU_ASSERT_EQUAL(moon_tokenizer_bos(tok), 1);
    CU_ASSERT_EQUAL(moon_tokenizer_eos(tok), 2);
    check_encode("Once upon a time", once, 5);
    check_encode("Lily and Tom", lily, 5);
    check_encode("", empty, 1);
}

static void test_encode_too_small_buffer(void)
{
    int32_t ids[2];
    size_t  n = 99;

    CU_ASSERT_EQUAL(moon_tokenizer_encode(tok, "Once upon a time", 16, true, ids, 2, &n),
                    MOON_ERR_NO_RESOURCE);
    CU_ASSERT_EQUAL(n, 99);
}

static void roundtrip(const moon_tokenizer_t *t, const char *text)
{
    int32_t ids[512];
    char    out[2048];
    size_t  n = 0, len = 0;

    CU_ASSERT_EQUAL_FATAL(moon_tokenizer_encode(t, text, strlen(text), true, ids, 512, &n),
                          MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_tokenizer_decode(t, -1, ids, n, out, sizeof(out), &len), MOON_OK);
    /* the dummy prefix space is dropped after BOS */
    CU_ASSERT_EQUAL(len, strlen(text));
    CU_ASSERT_STRING_EQUAL(out, text);
}

static void test_decode_roundtrip_with_byte_fallback(void)
{
    roundtrip(tok, "Once upon a time, there was a little girl named Lily.");
    roundtrip(tok, "caf\xc3\xa9 \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80!"); /* café 世界 😀 */
    roundtrip(tok, "tabs\tand\nnewlines  double  spaces");
}

/* Streaming: concatenated output equals the text, and every chunk is valid,
 * complete UTF-8 (no chunk ends inside a character). */
static void stream_check(const moon_tokenizer_t *t, const char *text)
{
    int32_t           ids[512];
    char              all[4096], out[4096];
    size_t            n = 0, len, total = 0;
    moon_tok_stream_t st;

    CU_ASSERT_EQUAL_FATAL(moon_tokenizer_encode(t, text, strlen(text), true, ids, 512, &n),
                          MOON_OK);
    moon_tok_stream_init(&st, t, ids[0]);
    for (size_t i = 1; i < n; i++) {
        CU_ASSERT_EQUAL_FATAL(moon_tok_stream_push(&st, ids[i], out, sizeof(out), &len), MOON_OK);
        if (len > 0) {
            uint8_t last = (uint8_t)out[len - 1];
            CU_ASSERT(last < 0x80 || (last & 0xc0) == 0x80);
            /* the lead byte of the last character must be complete */
            size_t j = len - 1;
            while (j > 0 && ((uint8_t)out[j] & 0xc0) == 0x80) {
                j--;
            }
            {
                uint8_t lead = (uint8_t)out[j];
                size_t  need = lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
                CU_ASSERT_EQUAL(len - j, need);
            }
        }
        memcpy(all + total, out, len);
        total += len;
    }
    moon_tok_stream_flush(&st, out, sizeof(out), &len);
    CU_ASSERT_EQUAL(len, 0);
    all[total] = '\0';
    CU_ASSERT_STRING_EQUAL(all, text);
}

static void test_stream_never_splits_characters(void)
{
    stream_check(tok, "\xe4\xb8\x96\xe7\x95\x8c and \xf0\x9f\x98\x80 and caf\xc3\xa9");
    stream_check(tok, "plain ascii text");
}

static void test_stream_invalid_bytes_become_replacement(void)
{
    moon_tok_stream_t st;
    char              out[256];
    size_t            len;

    /* byte tokens are id 3 + byte in this vocabulary */
    moon_tok_stream_init(&st, tok, 1);
    CU_ASSERT_EQUAL(moon_tok_stream_push(&st, 3 + 0xe4, out, sizeof(out), &len), MOON_OK);
    CU_ASSERT_EQUAL(len, 0); /* held back: incomplete */
    CU_ASSERT_EQUAL(moon_tok_stream_push(&st, 3 + 'A', out, sizeof(out), &len), MOON_OK);
    CU_ASSERT_EQUAL(len, 4);
    CU_ASSERT(memcmp(out,
                     "\xef\xbf\xbd"
                     "A",
                     4) == 0);
    CU_ASSERT_EQUAL(moon_tok_stream_push(&st, 3 + 0xff, out, sizeof(out), &len), MOON_OK);
    CU_ASSERT(len == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0);
    CU_ASSERT_EQUAL(moon_tok_stream_push(&st, 3 + 0xf0, out, sizeof(out), &len), MOON_OK);
    moon_tok_stream_flush(&st, out, sizeof(out), &len);
    CU_ASSERT(len == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0);
    CU_ASSERT_EQUAL(moon_tok_stream_push(&st, 512, out, sizeof(out), &len), MOON_ERR_INVALID_PARAM);
}

static void test_vocab_32000(void)
{
    moon_model_config_t c = {.dim        = 32,
                             .hidden_dim = 64,
                             .n_layers   = 1,
                             .n_heads    = 4,
                             .n_kv_heads = 4,
                             .vocab_size = 32000,
                             .seq_len    = 64,
                             .norm_eps   = 1e-5f,
                             .rope_theta = 10000.0f};
    char                path[128];
    moon_gguf_t        *g2 = NULL;
    moon_tokenizer_t   *t2 = NULL;
    int32_t             ids[64];
    size_t              n;

    snprintf(path, sizeof(path), "/tmp/moon_test_tok32k_%d.gguf", (int)getpid());
    CU_ASSERT_EQUAL_FATAL(moon_model_write_random(&c, MOON_GGML_F32, 1, path), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gguf_open(path, &g2), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_tokenizer_create(g2, &t2), MOON_OK);
    CU_ASSERT_EQUAL(moon_tokenizer_n_vocab(t2), 32000);
    /* 259 is U+2581, 260.. single letters, 286.. U+2581 + base-26 letters: " ab" = 286 + 26 */
    CU_ASSERT_EQUAL(moon_tokenizer_encode(t2, "ab", 2, false, ids, 64, &n), MOON_OK);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(ids[0], 286 + 26);
    roundtrip(t2, "zebra \xe2\x82\xac 42");
    stream_check(t2, "\xe2\x82\xac\xe2\x82\xac mixed \xc3\xa9");
    moon_tokenizer_destroy(t2);
    moon_gguf_close(g2);
    unlink(path);
}

MOON_TEST_MAIN("tokenizer", setup, teardown, test_encode_matches_llama2c,
               test_encode_too_small_buffer, test_decode_roundtrip_with_byte_fallback,
               test_stream_never_splits_characters, test_stream_invalid_bytes_become_replacement,
               test_vocab_32000)
