/* tests/unit/model/test_tokenizer_bpe.c - byte-level BPE (tokenizer.ggml.model
 * = gpt2): the Llama 3 (llama-bpe) and Qwen 3 (qwen2) vocabularies give the
 * ids of their own tokenizers (the npm packages' transformers.js, goldens in
 * tests/data/tokenizer) on a corpus of several languages, code, emoji, white
 * space runs and special tokens; decoding is byte-exact, streaming too, with
 * tokens cut anywhere; BOS/EOS follow the vocabulary's flags; the GPT-2 and
 * SmolLM splits; bad vocabularies get MOON_ERR_CORRUPT.
 *
 * With arguments it is the npm cross-check's other half (tests/scripts/
 * tokenizer_xcheck.sh): test_tokenizer_bpe --xcheck VOCAB.gguf CORPUS IDS
 * encodes every case with the full converted vocabulary and compares. */
#include "moon_test.h"
#include "moon_test_vocab.h"
#include "moonlet/gguf.h"
#include "moonlet/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DATA MOON_TEST_DATA_DIR "/tokenizer"
#define MAX_IDS 16384

static moon_test_goldens_t gold;

static char tmp_path[64];

static moon_tokenizer_t *family(const char *fam, const moon_test_vocab_opts_t *o)
{
    char              path[256];
    moon_tokenizer_t *tok = NULL;

    snprintf(path, sizeof(path), DATA "/%s.vocab", fam);
    CU_ASSERT_EQUAL_FATAL(moon_test_vocab_gguf(path, o, tmp_path), 0);
    CU_ASSERT_EQUAL_FATAL(moon_test_open_tokenizer(tmp_path, &tok), MOON_OK);
    return tok;
}

static void test_goldens(const char *fam)
{
    moon_test_goldens_t *gd  = &gold;
    moon_tokenizer_t    *tok = family(fam, &(moon_test_vocab_opts_t){0});
    char                 path[256];

    CU_ASSERT_EQUAL_FATAL(moon_test_goldens_corpus(gd, DATA "/corpus.txt", NULL), 0);
    snprintf(path, sizeof(path), DATA "/%s.ids", fam);
    CU_ASSERT_EQUAL_FATAL(moon_test_goldens_ids(gd, path), 0);
    CU_ASSERT(gd->n_cases >= 40);
    CU_ASSERT_EQUAL(moon_test_goldens_check(tok, gd, fam), 0);
    free(gd->corpus);
    moon_tokenizer_destroy(tok);
}

static void test_llama3_goldens(void)
{
    test_goldens("llama3");
}

static void test_qwen3_goldens(void)
{
    test_goldens("qwen3");
}

/* Every case decodes to its own bytes (special tokens aside: they decode to
 * nothing), whole and streamed one token at a time. */
static void test_decode_byte_exact(void)
{
    moon_tokenizer_t *tok = family("llama3", &(moon_test_vocab_opts_t){0});
    int32_t           ids[MAX_IDS];
    static char       out[1 << 16], streamed[1 << 16];

    CU_ASSERT_EQUAL_FATAL(moon_test_goldens_corpus(&gold, DATA "/corpus.txt", NULL), 0);
    for (size_t c = 0; c < gold.n_cases; c++) {
        size_t            n = 0, len = 0, slen = 0, piece;
        moon_tok_stream_t st;
        if (strstr(gold.cases[c], "<|") != NULL &&
            strstr(gold.cases[c], "<|") < gold.cases[c] + gold.lens[c]) {
            continue; /* special tokens decode to nothing */
        }
        CU_ASSERT_EQUAL_FATAL(
            moon_tokenizer_encode(tok, gold.cases[c], gold.lens[c], true, ids, MAX_IDS, &n),
            MOON_OK);
        CU_ASSERT_EQUAL(ids[0], 128000); /* Llama 3 adds <|begin_of_text|> */
        CU_ASSERT_EQUAL_FATAL(moon_tokenizer_decode(tok, -1, ids, n, out, sizeof(out), &len),
                              MOON_OK);
        CU_ASSERT_EQUAL(len, gold.lens[c]);
        CU_ASSERT(memcmp(out, gold.cases[c], MOON_MIN(len, gold.lens[c])) == 0);
        moon_tok_stream_init(&st, tok, -1);
        for (size_t i = 0; i < n; i++) {
            CU_ASSERT_EQUAL_FATAL(
                moon_tok_stream_push(&st, ids[i], streamed + slen, sizeof(streamed) - slen, &piece),
                MOON_OK);
            slen += piece;
        }
        moon_tok_stream_flush(&st, streamed + slen, sizeof(streamed) - slen, &piece);
        slen += piece;
        CU_ASSERT_EQUAL(slen, gold.lens[c]);
        CU_ASSERT(memcmp(streamed, gold.cases[c], MOON_MIN(slen, gold.lens[c])) == 0);
    }
    free(gold.corpus);
    moon_tokenizer_destroy(tok);
}

/* An emoji cut across byte tokens: the stream holds the bytes back until the
 * character is whole. */
static void test_stream_holds_partial_characters(void)
{
    moon_tokenizer_t *tok   = family("llama3", &(moon_test_vocab_opts_t){0});
    const char       *emoji = "\xf0\x9f\xa6\x99"; /* U+1F999 llama */
    int32_t           ids[8];
    char              out[4096];
    size_t            n = 0, len = 0, total = 0;
    moon_tok_stream_t st;

    CU_ASSERT_EQUAL_FATAL(moon_tokenizer_encode(tok, emoji, 4, false, ids, 8, &n), MOON_OK);
    CU_ASSERT_FATAL(n >= 2); /* no single token for it */
    moon_tok_stream_init(&st, tok, -1);
    for (size_t i = 0; i + 1 < n; i++) {
        CU_ASSERT_EQUAL(moon_tok_stream_push(&st, ids[i], out, sizeof(out), &len), MOON_OK);
        total += len;
    }
    CU_ASSERT_EQUAL(total, 0);
    CU_ASSERT_EQUAL(moon_tok_stream_push(&st, ids[n - 1], out, sizeof(out), &len), MOON_OK);
    CU_ASSERT_EQUAL(len, 4);
    CU_ASSERT(memcmp(out, emoji, 4) == 0);
    moon_tokenizer_destroy(tok);
}

/* Qwen adds no BOS; special tokens are never split and decode to nothing. */
static void test_qwen_specials(void)
{
    moon_tokenizer_t *tok  = family("qwen3", &(moon_test_vocab_opts_t){0});
    const char       *text = "<|im_start|>user\nhi<|im_end|>";
    int32_t           ids[64];
    char              out[256];
    size_t            n = 0, len = 0;

    CU_ASSERT_EQUAL_FATAL(moon_tokenizer_encode(tok, text, strlen(text), true, ids, 64, &n),
                          MOON_OK);
    CU_ASSERT_FATAL(n >= 3);
    CU_ASSERT_EQUAL(ids[0], 151644);     /* <|im_start|>, no BOS before it */
    CU_ASSERT_EQUAL(ids[n - 1], 151645); /* <|im_end|> */
    CU_ASSERT_EQUAL(moon_tokenizer_decode(tok, -1, ids, n, out, sizeof(out), &len), MOON_OK);
    CU_ASSERT_STRING_EQUAL(out, "user\nhi");
    /* too small an id buffer: NO_RESOURCE */
    CU_ASSERT_EQUAL(moon_tokenizer_encode(tok, text, strlen(text), true, ids, 2, &n),
                    MOON_ERR_NO_RESOURCE);
    moon_tokenizer_destroy(tok);
}

/* Invalid UTF-8 still encodes (as byte tokens) and decodes to its bytes. */
static void test_invalid_utf8_round_trips(void)
{
    moon_tokenizer_t *tok    = family("qwen3", &(moon_test_vocab_opts_t){0});
    const char        text[] = "a\xff\xc3(\xe2\x82 \xf0\x9f";
    int32_t           ids[64];
    char              out[256];
    size_t            n = 0, len = 0;

    CU_ASSERT_EQUAL_FATAL(moon_tokenizer_encode(tok, text, sizeof(text) - 1, false, ids, 64, &n),
                          MOON_OK);
    CU_ASSERT_EQUAL(moon_tokenizer_decode(tok, -1, ids, n, out, sizeof(out), &len), MOON_OK);
    CU_ASSERT_EQUAL(len, sizeof(text) - 1);
    CU_ASSERT(memcmp(out, text, sizeof(text) - 1) == 0);
    moon_tokenizer_destroy(tok);
}

/* A byte-level vocabulary of the 256 bytes and the merges "Ġ 1", "Ġ1 2",
 * "1 2" (Ġ is the space), split by pre: where a pre-tokenizer cuts shows in
 * which merges apply. */
static moon_tokenizer_t *synthetic(const char *pre)
{
    static const char  *extra[]  = {"\xc4\xa0"
                                      "1",
                                    "\xc4\xa0"
                                      "12",
                                    "12"};
    static const char  *merges[] = {"\xc4\xa0 1",
                                    "\xc4\xa0"
                                     "1 2",
                                    "1 2"};
    char                tokens_buf[259][8];
    const char         *tokens[259];
    moon_gguf_writer_t *w   = NULL;
    moon_tokenizer_t   *tok = NULL;

    for (uint32_t b = 0, k = 0; b < 256; b++) {
        int      printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        uint32_t cp        = printable ? b : 256 + k++;
        char    *o         = tokens_buf[b];
        if (cp < 0x80) {
            o[0] = (char)cp, o[1] = '\0';
        } else {
            o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), o[2] = '\0';
        }
        tokens[b] = o;
    }
    for (int i = 0; i < 3; i++) {
        tokens[256 + i] = extra[i];
    }
    CU_ASSERT_EQUAL_FATAL(moon_gguf_writer_create(&w), MOON_OK);
    moon_gguf_writer_kv_str(w, "tokenizer.ggml.model", "gpt2");
    moon_gguf_writer_kv_str(w, "tokenizer.ggml.pre", pre);
    moon_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", tokens, 259);
    moon_gguf_writer_kv_arr_str(w, "tokenizer.ggml.merges", merges, 3);
    moon_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 0);
    moon_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", 0);
    CU_ASSERT_EQUAL_FATAL(moon_gguf_writer_write(w, tmp_path), MOON_OK);
    moon_gguf_writer_destroy(w);
    CU_ASSERT_EQUAL_FATAL(moon_test_open_tokenizer(tmp_path, &tok), MOON_OK);
    return tok;
}

/* The pieces of text's tokens joined by '|'. */
static void pieces(const moon_tokenizer_t *tok, const char *text, char *out, size_t cap)
{
    int32_t ids[64];
    size_t  n = 0, o = 0;

    CU_ASSERT_EQUAL_FATAL(moon_tokenizer_encode(tok, text, strlen(text), false, ids, 64, &n),
                          MOON_OK);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t      len;
        const char *p = moon_tokenizer_piece(tok, -1, ids[i], &len);
        CU_ASSERT_FATAL(p != NULL && o + len + 2 < cap);
        if (i > 0) {
            out[o++] = '|';
        }
        memcpy(out + o, p, len);
        o += len;
        out[o] = '\0';
    }
}

/* GPT-2 keeps a space and a run of digits one piece; Llama 3 cuts digits
 * three at a time and keeps the space apart; Qwen 2 and SmolLM cut every
 * digit. Trailing white space: \s+(?!\S) leaves the last space to the word. */
static void test_pre_tokenizer_splits(void)
{
    static const struct {
        const char *pre, *text, *want;
    } cases[] = {
        {"gpt2", "x 12", "x| 12"},
        {"llama-bpe", "x 12", "x| |12"},
        {"qwen2", "x 12", "x| |1|2"},
        {"smollm", "x 12", "x| |1|2"},
        {"gpt2", "x   12", "x| | | 12"},
        {"smollm", "x   12", "x| | | |1|2"},
        {"llama-bpe", "1212", "12|1|2"},
        {"gpt2", "1212 ", "12|12| "},
        {"llama-bpe", "12 \n 12", "12| |\n| |12"},
    };
    char out[256];

    for (size_t i = 0; i < MOON_ARRAY_SIZE(cases); i++) {
        moon_tokenizer_t *tok = synthetic(cases[i].pre);
        pieces(tok, cases[i].text, out, sizeof(out));
        if (strcmp(out, cases[i].want) != 0) {
            fprintf(stderr, "pre %s, \"%s\": got \"%s\", want \"%s\"\n", cases[i].pre,
                    cases[i].text, out, cases[i].want);
        }
        CU_ASSERT_STRING_EQUAL(out, cases[i].want);
        moon_tokenizer_destroy(tok);
    }
}

static void test_bad_vocabularies_are_refused(void)
{
    moon_tokenizer_t *tok = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_test_vocab_gguf(DATA "/qwen3.vocab",
                                               &(moon_test_vocab_opts_t){.drop_merges = 1},
                                               tmp_path),
                          0);
    CU_ASSERT_EQUAL(moon_test_open_tokenizer(tmp_path, &tok), MOON_ERR_CORRUPT);
    CU_ASSERT_EQUAL_FATAL(moon_test_vocab_gguf(DATA "/qwen3.vocab",
                                               &(moon_test_vocab_opts_t){.pre = "no-such-pre"},
                                               tmp_path),
                          0);
    CU_ASSERT_EQUAL(moon_test_open_tokenizer(tmp_path, &tok), MOON_ERR_CORRUPT);
    CU_ASSERT_EQUAL_FATAL(moon_test_vocab_gguf(DATA "/qwen3.vocab",
                                               &(moon_test_vocab_opts_t){.model = "bert"},
                                               tmp_path),
                          0);
    CU_ASSERT_EQUAL(moon_test_open_tokenizer(tmp_path, &tok), MOON_ERR_CORRUPT);
    CU_ASSERT_PTR_NULL(tok);
}

static int setup(void)
{
    int fd;
    snprintf(tmp_path, sizeof(tmp_path), "/tmp/moon_bpe_XXXXXX");
    fd = mkstemp(tmp_path);
    if (fd < 0) {
        return 1;
    }
    close(fd);
    return 0;
}

static int teardown(void)
{
    unlink(tmp_path);
    return 0;
}

/* The npm cross-check: the full converted vocabulary against the package's
 * ids of the same corpus. */
static int xcheck(const char *vocab, const char *corpus, const char *ids)
{
    moon_tokenizer_t *tok = NULL;
    int               bad;

    if (moon_test_open_tokenizer(vocab, &tok) != MOON_OK ||
        moon_test_goldens_corpus(&gold, corpus, NULL) != 0 ||
        moon_test_goldens_ids(&gold, ids) != 0) {
        fprintf(stderr, "xcheck: cannot load %s, %s or %s\n", vocab, corpus, ids);
        return 1;
    }
    bad = moon_test_goldens_check(tok, &gold, vocab);
    printf("xcheck %s: %zu cases, %d differ\n", vocab, gold.n_cases, bad);
    free(gold.corpus);
    moon_tokenizer_destroy(tok);
    return bad != 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--xcheck") == 0) {
        return xcheck(argv[2], argv[3], argv[4]);
    }
    return MOON_TEST_RUN("tokenizer_bpe", setup, teardown, test_llama3_goldens, test_qwen3_goldens,
                         test_decode_byte_exact, test_stream_holds_partial_characters,
                         test_qwen_specials, test_invalid_utf8_round_trips,
                         test_pre_tokenizer_splits, test_bad_vocabularies_are_refused);
}
