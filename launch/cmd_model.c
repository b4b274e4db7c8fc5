/* launch/cmd_model.c - model subcommands of `moonlet`: convert, gen-model,
 * generate. Single-threaded front ends over moon_model. */
#include "commands.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Value of "--name VALUE" or "--name=VALUE" in argv, else dflt. */
static const char *opt(int argc, char **argv, const char *name, const char *dflt)
{
    size_t n = strlen(name);

    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], name, n) == 0) {
            if (argv[i][n] == '=') {
                return argv[i] + n + 1;
            }
            if (argv[i][n] == '\0' && i + 1 < argc) {
                return argv[i + 1];
            }
        }
    }
    return dflt;
}

static int has_flag(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], name) == 0) {
            return 1;
        }
    }
    return 0;
}

static int parse_type(const char *s, moon_ggml_type_t *t)
{
    static const struct {
        const char      *name;
        moon_ggml_type_t type;
    } types[] = {{"f32", MOON_GGML_F32},
                 {"f16", MOON_GGML_F16},
                 {"bf16", MOON_GGML_BF16},
                 {"q8_0", MOON_GGML_Q8_0},
                 {"q4_0", MOON_GGML_Q4_0}};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (strcmp(s, types[i].name) == 0) {
            *t = types[i].type;
            return 1;
        }
    }
    return 0;
}

int moon_cmd_convert(int argc, char **argv)
{
    const char   *ckpt = opt(argc, argv, "--checkpoint", NULL);
    const char   *tok  = opt(argc, argv, "--tokenizer", NULL);
    const char   *out  = opt(argc, argv, "--out", NULL);
    moon_status_t status;

    if (has_flag(argc, argv, "--help") || ckpt == NULL || tok == NULL || out == NULL) {
        fprintf(stderr, "usage: moonlet convert --checkpoint MODEL.bin --tokenizer TOK.bin "
                        "--out MODEL.gguf [--name NAME] [--license LICENSE]\n"
                        "  converts a llama2.c checkpoint (legacy format) into GGUF v3 (F32)\n");
        return has_flag(argc, argv, "--help") ? 0 : 2;
    }
    status = moon_model_convert_llama2c(ckpt, tok, out, opt(argc, argv, "--name", NULL),
                                        opt(argc, argv, "--license", NULL));
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet convert: %s\n", moon_status_str(status));
        return 1;
    }
    return 0;
}

int moon_cmd_gen_model(int argc, char **argv)
{
    moon_model_config_t c = {0};
    moon_ggml_type_t    type;
    const char         *out = opt(argc, argv, "--out", NULL);
    moon_status_t       status;

    if (has_flag(argc, argv, "--help") || out == NULL ||
        !parse_type(opt(argc, argv, "--type", "f32"), &type)) {
        fprintf(stderr,
                "usage: moonlet gen-model --out M.gguf [--dim 768] [--hidden 2048] [--layers 12]\n"
                "       [--heads 12] [--kv-heads HEADS] [--vocab 32000] [--seq-len 1024]\n"
                "       [--type f32|f16|bf16|q8_0|q4_0] [--seed 1]\n");
        return has_flag(argc, argv, "--help") ? 0 : 2;
    }
    c.dim        = (uint32_t)atoi(opt(argc, argv, "--dim", "768"));
    c.hidden_dim = (uint32_t)atoi(opt(argc, argv, "--hidden", "2048"));
    c.n_layers   = (uint32_t)atoi(opt(argc, argv, "--layers", "12"));
    c.n_heads    = (uint32_t)atoi(opt(argc, argv, "--heads", "12"));
    c.n_kv_heads = (uint32_t)atoi(opt(argc, argv, "--kv-heads", opt(argc, argv, "--heads", "12")));
    c.vocab_size = (uint32_t)atoi(opt(argc, argv, "--vocab", "32000"));
    c.seq_len    = (uint32_t)atoi(opt(argc, argv, "--seq-len", "1024"));
    c.norm_eps   = 1e-5f;
    c.rope_theta = 10000.0f;
    status =
        moon_model_write_random(&c, type, strtoull(opt(argc, argv, "--seed", "1"), NULL, 10), out);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet gen-model: %s\n", moon_status_str(status));
        return 1;
    }
    return 0;
}

int moon_cmd_generate(int argc, char **argv)
{
    const char                *path    = opt(argc, argv, "--model", NULL);
    const char                *prompt  = opt(argc, argv, "--prompt", "");
    int                        max_new = atoi(opt(argc, argv, "--max-tokens", "64"));
    const char                *be      = opt(argc, argv, "--backend", "cpu");
    moon_model_t              *model   = NULL;
    moon_engine_t             *eng     = NULL;
    moon_kv_cache_t           *kv      = NULL;
    const moon_tokenizer_t    *tok;
    const moon_model_config_t *c;
    moon_engine_config_t       ecfg = {0};
    moon_kv_config_t           kcfg;
    moon_sampler_t             smp = {0};
    moon_tok_stream_t          st;
    int32_t                   *ids    = NULL;
    float                     *logits = NULL;
    char                      *out    = NULL;
    size_t                     n_ids  = 0, out_len;
    uint32_t                   seq;
    int                        rc = 1;
    moon_status_t              status;

    if (has_flag(argc, argv, "--help") || path == NULL || max_new < 0) {
        fprintf(stderr, "usage: moonlet generate --model M.gguf --prompt TEXT --max-tokens N\n"
                        "       [--temperature 0] [--top-p 1] [--top-k 0] [--seed 1]\n"
                        "       [--backend ref|cpu|cuda] [--threads N]\n");
        return has_flag(argc, argv, "--help") ? 0 : 2;
    }
    status = moon_model_load(path, &model);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet generate: load %s: %s\n", path, moon_status_str(status));
        return 1;
    }
    c   = moon_model_config(model);
    tok = moon_model_tokenizer(model);
    if (tok == NULL) {
        fprintf(stderr, "moonlet generate: %s has no tokenizer\n", path);
        goto out;
    }
    ecfg.kind      = strcmp(be, "ref") == 0    ? MOON_BACKEND_REF
                     : strcmp(be, "cuda") == 0 ? MOON_BACKEND_CUDA
                                               : MOON_BACKEND_CPU;
    ecfg.n_threads = (uint32_t)atoi(opt(argc, argv, "--threads", "0"));
    ecfg.max_batch = 1;
    ecfg.max_chunk = 128;
    status         = moon_engine_create(model, &ecfg, &eng);
    if (status == MOON_ERR_UNSUPPORTED && ecfg.kind == MOON_BACKEND_CUDA) {
        /* a build without CUDA, or no usable GPU here: the CPU path */
        fprintf(stderr, "moonlet generate: no CUDA backend here (no GPU, or a build without "
                        "MOON_WITH_CUDA): running on the CPU\n");
        ecfg.kind = MOON_BACKEND_CPU;
        status    = moon_engine_create(model, &ecfg, &eng);
    }
    if (status == MOON_OK) {
        kcfg   = moon_model_kv_config(c, 16, (c->seq_len + 15) / 16, 1);
        status = moon_kv_cache_create(&kcfg, &kv);
    }
    if (status == MOON_OK) {
        status = moon_kv_seq_create(kv, &seq);
    }
    if (status == MOON_OK) {
        status = moon_sampler_init(&smp, c->vocab_size,
                                   strtof(opt(argc, argv, "--temperature", "0"), NULL),
                                   strtof(opt(argc, argv, "--top-p", "1"), NULL),
                                   (uint32_t)atoi(opt(argc, argv, "--top-k", "0")),
                                   strtoull(opt(argc, argv, "--seed", "1"), NULL, 10));
    }
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet generate: setup: %s\n", moon_status_str(status));
        goto out;
    }
    ids    = moon_malloc((strlen(prompt) + 2) * sizeof(*ids));
    logits = moon_malloc(c->vocab_size * sizeof(float));
    out    = moon_malloc(MOON_TOK_STREAM_OUT_MAX(tok));
    if (ids == NULL || logits == NULL || out == NULL) {
        goto out;
    }
    status =
        moon_tokenizer_encode(tok, prompt, strlen(prompt), true, ids, strlen(prompt) + 2, &n_ids);
    if (status != MOON_OK || n_ids >= c->seq_len) {
        fprintf(stderr, "moonlet generate: prompt does not fit the context\n");
        goto out;
    }
    for (size_t i = 0; i < n_ids; i += 128) {
        uint32_t n = (uint32_t)MOON_MIN(n_ids - i, 128);
        status     = moon_engine_prefill(eng, kv, seq, ids + i, n, logits, NULL);
        if (status != MOON_OK) {
            fprintf(stderr, "moonlet generate: prefill: %s\n", moon_status_str(status));
            goto out;
        }
    }
    moon_tok_stream_init(&st, tok, ids[n_ids - 1]);
    for (int i = 0; i < max_new && moon_kv_seq_len(kv, seq) < c->seq_len; i++) {
        int32_t next = moon_sampler_sample(&smp, logits);
        if (next == moon_tokenizer_eos(tok) || next == moon_tokenizer_bos(tok)) {
            break;
        }
        if (moon_tok_stream_push(&st, next, out, MOON_TOK_STREAM_OUT_MAX(tok), &out_len) ==
            MOON_OK) {
            fwrite(out, 1, out_len, stdout); /* ids past the tokenizer's vocabulary print nothing */
        }
        fflush(stdout);
        if (i + 1 == max_new) {
            break;
        }
        status = moon_engine_decode(eng, kv, &seq, &next, 1, logits, NULL);
        if (status != MOON_OK) {
            fprintf(stderr, "\nmoonlet generate: decode: %s\n", moon_status_str(status));
            goto out;
        }
    }
    moon_tok_stream_flush(&st, out, MOON_TOK_STREAM_OUT_MAX(tok), &out_len);
    fwrite(out, 1, out_len, stdout);
    fputc('\n', stdout);
    rc = 0;
out:
    moon_free(ids);
    moon_free(logits);
    moon_free(out);
    moon_sampler_fini(&smp);
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(eng);
    moon_model_destroy(model);
    return rc;
}
