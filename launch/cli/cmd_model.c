/* launch/cli/cmd_model.c - model subcommands of `moonlet`: convert, gen-model, quantize,
 * generate. Single-threaded front ends over moon_model; their options are
 * configuration tables (flags only), generate's plus the engine's tuning. */
#include "cli.h"
#include "commands.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/model.h"
#ifdef MOON_WITH_HF
#include "moonlet/hf.h"
#endif

#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- convert ---------------------------------------------------------------- */
typedef struct {
    const char *checkpoint, *tokenizer, *out, *name, *license, *hf, *type;
} convert_opts_t;

#define CONVERT_AT(_f) MOON_CONFIG_AT(convert_opts_t, _f)
static const moon_config_field_t convert_fields[] = {
    {"hf", MOON_CONFIG_STRING, CONVERT_AT(hf), .dflt = NULL,
     .doc = "Hugging Face checkpoint folder (config.json, tokenizer.json, *.safetensors)"},
    {"type", MOON_CONFIG_STRING, CONVERT_AT(type), .dflt = NULL,
     .doc = "with --hf: F32, F16, BF16 or a type moonlet quantize takes (Q8_0, Q4_K_M...); "
            "default: the checkpoint's own dtypes"},
    {"checkpoint", MOON_CONFIG_STRING, CONVERT_AT(checkpoint), .dflt = NULL,
     .doc = "llama2.c checkpoint (legacy format)"},
    {"tokenizer", MOON_CONFIG_STRING, CONVERT_AT(tokenizer), .dflt = NULL,
     .doc = "llama2.c tokenizer.bin (with --checkpoint)"},
    {"out", MOON_CONFIG_STRING, CONVERT_AT(out), .dflt = NULL,
     .doc = "GGUF file to write, required"},
    {"name", MOON_CONFIG_STRING, CONVERT_AT(name), .dflt = NULL, .doc = "general.name"},
    {"license", MOON_CONFIG_STRING, CONVERT_AT(license), .dflt = NULL, .doc = "general.license"},
    MOON_CONFIG_END,
};
static const moon_config_table_t convert_table = {"convert", "moonlet convert", NULL,
                                                  convert_fields};

int moon_cmd_convert(int argc, char **argv)
{
    convert_opts_t         o;
    const moon_cli_table_t tables[] = {{&convert_table, &o}};
    moon_config_t         *cfg      = NULL;
    moon_status_t          status;
    int                    rc;

    rc = moon_cli_parse(
        "convert",
        "usage: moonlet convert --hf DIR --out MODEL.gguf [--type F16|Q8_0|Q4_K_M...]\n"
        "       moonlet convert --checkpoint MODEL.bin --tokenizer TOK.bin "
        "--out MODEL.gguf [--name NAME] [--license LICENSE]\n"
        "  converts a Hugging Face checkpoint (Llama, Mistral, Qwen 2/2.5/3) or a\n"
        "  llama2.c checkpoint (legacy format, F32) into GGUF v3\n",
        tables, 1, 0, argc, argv, &cfg);
    if (rc >= 0) {
        return rc;
    }
    if (o.hf != NULL) {
        if (o.out == NULL) {
            moon_config_destroy(cfg);
            return moon_cli_usage_error("convert", "--hf needs --out");
        }
#ifdef MOON_WITH_HF
        status = moon_hf_convert(o.hf, o.out, o.type);
#else
        status = MOON_ERR_UNSUPPORTED;
        fprintf(stderr, "moonlet convert: built without libcjson: no --hf\n");
#endif
        moon_config_destroy(cfg);
        if (status != MOON_OK) {
            fprintf(stderr, "moonlet convert: %s\n", moon_status_str(status));
            return status == MOON_ERR_INVALID_PARAM ? 2 : 1;
        }
        return 0;
    }
    if (o.checkpoint == NULL || o.tokenizer == NULL || o.out == NULL) {
        moon_config_destroy(cfg);
        return moon_cli_usage_error("convert", "--checkpoint, --tokenizer and --out are required");
    }
    status = moon_model_convert_llama2c(o.checkpoint, o.tokenizer, o.out, o.name, o.license);
    moon_config_destroy(cfg);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet convert: %s\n", moon_status_str(status));
        return 1;
    }
    return 0;
}

/* ---- gen-model -------------------------------------------------------------- */
/* The whole file at path, NUL terminated, in *text_p (moon_malloc'd). */
static moon_status_t read_text_file(const char *path, char **text_p)
{
    FILE  *f = fopen(path, "rb");
    char  *s = NULL;
    size_t n = 0, cap = 0, got;

    if (f == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    do {
        if (n + 4096 + 1 > cap) {
            char *ns;
            cap = (n + 4096 + 1) * 2;
            ns  = moon_realloc(s, cap);
            if (ns == NULL) {
                moon_free(s);
                fclose(f);
                return MOON_ERR_NO_MEMORY;
            }
            s = ns;
        }
        got = fread(s + n, 1, 4096, f);
        n += got;
    } while (got > 0);
    fclose(f);
    s[n]    = 0;
    *text_p = s;
    return MOON_OK;
}

typedef struct {
    const char *out;
    uint32_t    dim, hidden, layers, heads, kv_heads, head_dim, vocab, seq_len;
    int         type, arch, rope_freqs, untied, rope_scaling;
    uint64_t    seed;
    double      rope_theta, rope_factor;
    uint32_t    rope_orig_ctx;
    const char *vocab_path;
    const char *chat_template_path;
} gen_model_opts_t;

static const char *const arch_choices[] = {"llama", "qwen2", "qwen3", NULL}; /* moon_model_arch_t */
enum { ROPE_NONE, ROPE_LINEAR, ROPE_YARN };
static const char *const rope_scaling_choices[] = {"none", "linear", "yarn", NULL};

static const char *const      type_choices[] = {"f32",  "f16",  "bf16", "q8_0", "q4_0",
                                                "q4_k", "q5_k", "q6_k", NULL};
static const moon_ggml_type_t type_values[]  = {MOON_GGML_F32,  MOON_GGML_F16,  MOON_GGML_BF16,
                                                MOON_GGML_Q8_0, MOON_GGML_Q4_0, MOON_GGML_Q4_K,
                                                MOON_GGML_Q5_K, MOON_GGML_Q6_K};

#define GEN_AT(_f) MOON_CONFIG_AT(gen_model_opts_t, _f)
static const moon_config_field_t gen_model_fields[] = {
    {"out", MOON_CONFIG_STRING, GEN_AT(out), .dflt = NULL, .doc = "GGUF file to write, required"},
    {"dim", MOON_CONFIG_U32, GEN_AT(dim), .dflt = "768", .doc = "model width", .min = 1,
     .max = 1u << 16},
    {"hidden", MOON_CONFIG_U32, GEN_AT(hidden), .dflt = "2048", .doc = "feed-forward width",
     .min = 1, .max = 1u << 18},
    {"layers", MOON_CONFIG_U32, GEN_AT(layers), .dflt = "12", .doc = "transformer layers", .min = 1,
     .max = 1024},
    {"heads", MOON_CONFIG_U32, GEN_AT(heads), .dflt = "12", .doc = "attention heads", .min = 1,
     .max = 1024},
    {"kv-heads", MOON_CONFIG_U32, GEN_AT(kv_heads), .dflt = "0",
     .doc = "key/value heads (0: as many as --heads)", .max = 1024},
    {"head-dim", MOON_CONFIG_U32, GEN_AT(head_dim), .dflt = "0",
     .doc = "size of each attention head (0: dim / heads; Qwen 3 0.6B: dim 1024, 16 heads of 128)",
     .max = 1u << 16},
    {"vocab", MOON_CONFIG_U32, GEN_AT(vocab), .dflt = "32000", .doc = "vocabulary size", .min = 1,
     .max = 1u << 22},
    {"seq-len", MOON_CONFIG_U32, GEN_AT(seq_len), .dflt = "1024", .doc = "context length", .min = 1,
     .max = 1u << 22},
    {"type", MOON_CONFIG_ENUM, GEN_AT(type), .dflt = "f32", .doc = "weight type",
     .choices = type_choices},
    {"seed", MOON_CONFIG_U64, GEN_AT(seed), .dflt = "1", .doc = "weights' random seed"},
    {"arch", MOON_CONFIG_ENUM, GEN_AT(arch), .dflt = "llama",
     .doc     = "architecture: llama, qwen2 (Q/K/V biases), qwen3 (Q/K norms)",
     .choices = arch_choices},
    {"rope-theta", MOON_CONFIG_DOUBLE, GEN_AT(rope_theta), .dflt = "10000", .doc = "RoPE base",
     .dmin = 1.0, .dmax = 1e9},
    {"rope-scaling", MOON_CONFIG_ENUM, GEN_AT(rope_scaling), .dflt = "none",
     .doc     = "rope scaling: none, linear, yarn (Qwen's long contexts)",
     .choices = rope_scaling_choices},
    {"rope-factor", MOON_CONFIG_DOUBLE, GEN_AT(rope_factor), .dflt = "4",
     .doc = "context extension factor of --rope-scaling", .dmin = 1.0, .dmax = 1024.0},
    {"rope-orig-ctx", MOON_CONFIG_U32, GEN_AT(rope_orig_ctx), .dflt = "0",
     .doc = "yarn: the context trained at (0: --seq-len / --rope-factor)", .max = 1u << 22},
    {"rope-freqs", MOON_CONFIG_BOOL, GEN_AT(rope_freqs), .dflt = "0",
     .doc = "add Llama 3.1's rope_freqs.weight (frequency factors)"},
    {"untied", MOON_CONFIG_BOOL, GEN_AT(untied), .dflt = "0",
     .doc = "write a classifier of its own (output.weight; default: tied to the embeddings)"},
    {"vocab-file", MOON_CONFIG_STRING, GEN_AT(vocab_path), .dflt = NULL,
     .doc = "GGUF whose tokenizer.* keys to copy (sets the vocabulary size; "
            "model/convert/hf_tokenizer.mjs writes one)"},
    {"chat-template", MOON_CONFIG_STRING, GEN_AT(chat_template_path), .dflt = NULL,
     .doc = "Jinja file to write as tokenizer.chat_template (default: the vocabulary's, if any)"},
    MOON_CONFIG_END,
};
static const moon_config_table_t gen_model_table = {"gen-model", "moonlet gen-model", NULL,
                                                    gen_model_fields};

int moon_cmd_gen_model(int argc, char **argv)
{
    gen_model_opts_t       o;
    const moon_cli_table_t tables[] = {{&gen_model_table, &o}};
    moon_config_t         *cfg      = NULL;
    moon_model_config_t    c        = {0};
    moon_status_t          status;
    char                  *chat_template = NULL;
    int                    rc;

    rc = moon_cli_parse(
        "gen-model",
        "usage: moonlet gen-model --out M.gguf [options]\n"
        "  writes a random-weight model (llama, qwen2, qwen3) of any shape as GGUF\n",
        tables, 1, 0, argc, argv, &cfg);
    if (rc >= 0) {
        return rc;
    }
    if (o.out == NULL) {
        moon_config_destroy(cfg);
        return moon_cli_usage_error("gen-model", "--out is required");
    }
    c.dim        = o.dim;
    c.hidden_dim = o.hidden;
    c.n_layers   = o.layers;
    c.n_heads    = o.heads;
    c.n_kv_heads = o.kv_heads != 0 ? o.kv_heads : o.heads;
    c.head_dim   = o.head_dim;
    c.vocab_size = o.vocab;
    c.seq_len    = o.seq_len;
    c.norm_eps   = 1e-5f;
    c.rope_theta = (float)o.rope_theta;
    c.arch       = (uint32_t)o.arch;
    if (o.rope_scaling != ROPE_NONE) {
        c.rope_freq_scale = (float)(1.0 / o.rope_factor);
    }
    if (o.rope_scaling == ROPE_YARN) {
        c.rope_yarn_orig_ctx  = o.rope_orig_ctx != 0
                                    ? o.rope_orig_ctx
                                    : MOON_MAX(1u, (uint32_t)(o.seq_len / o.rope_factor));
        c.rope_yarn_beta_fast = 32.0f;
        c.rope_yarn_beta_slow = 1.0f;
    }
    if (o.chat_template_path != NULL) {
        status = read_text_file(o.chat_template_path, &chat_template);
        if (status != MOON_OK) {
            fprintf(stderr, "moonlet gen-model: cannot read %s: %s\n", o.chat_template_path,
                    moon_status_str(status));
            moon_config_destroy(cfg);
            return 1;
        }
    }
    status = moon_model_write_random_ex(&c,
                                        &(moon_model_write_opts_t){.type = type_values[o.type],
                                                                   .seed = o.seed,
                                                                   .rope_freqs    = o.rope_freqs,
                                                                   .untied        = o.untied,
                                                                   .vocab_path    = o.vocab_path,
                                                                   .chat_template = chat_template},
                                        o.out);
    moon_free(chat_template);
    moon_config_destroy(cfg);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet gen-model: %s\n", moon_status_str(status));
        return 1;
    }
    return 0;
}

/* ---- quantize ------------------------------------------------------------------ */
typedef struct {
    const char *type;
} quantize_opts_t;

static const moon_config_field_t quantize_fields[] = {
    {"type", MOON_CONFIG_STRING, MOON_CONFIG_AT(quantize_opts_t, type), .dflt = "Q4_K_M",
     .doc = "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q4_K_M or Q5_K_M (llama.cpp's mixes: "
            "Q6_K for output and some attn_v / ffn_down)"},
    MOON_CONFIG_END,
};
static const moon_config_table_t quantize_table = {"quantize", "moonlet quantize", NULL,
                                                   quantize_fields};

int moon_cmd_quantize(int argc, char **argv)
{
    quantize_opts_t        o;
    const moon_cli_table_t tables[] = {{&quantize_table, &o}};
    moon_config_t         *cfg      = NULL;
    moon_status_t          status;
    int                    rc;

    rc = moon_cli_parse("quantize",
                        "usage: moonlet quantize IN.gguf OUT.gguf [--type Q4_K_M]\n"
                        "  writes IN with its matrices quantized (vectors and keys kept)\n",
                        tables, 1, 2, argc, argv, &cfg);
    if (rc >= 0) {
        return rc;
    }
    if (moon_config_n_args(cfg) != 2) {
        moon_config_destroy(cfg);
        return moon_cli_usage_error("quantize", "IN.gguf and OUT.gguf are required");
    }
    status = moon_model_quantize(moon_config_arg(cfg, 0), moon_config_arg(cfg, 1), o.type);
    moon_config_destroy(cfg);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet quantize: %s\n", moon_status_str(status));
        return status == MOON_ERR_INVALID_PARAM ? 2 : 1;
    }
    return 0;
}

/* ---- perturb-model ---------------------------------------------------------- */
typedef struct {
    const char *model, *out, *tensors;
    double      scale;
    uint64_t    seed;
} perturb_opts_t;

#define PERTURB_AT(_f) MOON_CONFIG_AT(perturb_opts_t, _f)
static const moon_config_field_t perturb_fields[] = {
    {"model", MOON_CONFIG_STRING, PERTURB_AT(model), .dflt = NULL,
     .doc = "GGUF model to copy, required"},
    {"out", MOON_CONFIG_STRING, PERTURB_AT(out), .dflt = NULL,
     .doc = "GGUF file to write, required"},
    {"tensors", MOON_CONFIG_STRING, PERTURB_AT(tensors), .dflt = "blk.0.",
     .doc = "change the f32 tensors whose name contains this (empty: all)"},
    {"scale", MOON_CONFIG_DOUBLE, PERTURB_AT(scale), .dflt = "0.5",
     .doc = "each element is scaled by 1 + scale * u, u uniform in [-1, 1)", .dmin = 0, .dmax = 10},
    {"seed", MOON_CONFIG_U64, PERTURB_AT(seed), .dflt = "1", .doc = "seed of the noise", .min = 0,
     .max = UINT64_MAX},
    MOON_CONFIG_END,
};
static const moon_config_table_t perturb_table = {"perturb-model", "moonlet perturb-model", NULL,
                                                  perturb_fields};

int moon_cmd_perturb_model(int argc, char **argv)
{
    perturb_opts_t         o;
    const moon_cli_table_t tables[] = {{&perturb_table, &o}};
    moon_config_t         *cfg      = NULL;
    uint32_t               n        = 0;
    moon_status_t          status;
    int                    rc;

    rc = moon_cli_parse("perturb-model",
                        "usage: moonlet perturb-model --model A.gguf --out B.gguf [--tensors "
                        "PATTERN] [--scale S] [--seed N]\n"
                        "  writes a copy of a model with some tensors changed (the rest "
                        "bit-identical): a second version for weight pushes\n",
                        tables, 1, 0, argc, argv, &cfg);
    if (rc >= 0) {
        return rc;
    }
    if (o.model == NULL || o.out == NULL) {
        moon_config_destroy(cfg);
        return moon_cli_usage_error("perturb-model", "--model and --out are required");
    }
    status = moon_model_write_perturbed(o.model, o.out, o.tensors ? o.tensors : "", (float)o.scale,
                                        o.seed, &n);
    moon_config_destroy(cfg);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet perturb-model: %s\n", moon_status_str(status));
        return 1;
    }
    printf("%u tensors changed\n", n);
    return 0;
}

/* ---- generate --------------------------------------------------------------- */
typedef struct {
    const char *model, *prompt, *prompt_file;
    uint32_t    max_tokens, top_k, threads;
    double      temperature, top_p;
    uint64_t    seed;
    int         backend; /* index in backend_choices */
    int         print_ids;
} generate_opts_t;

static const char *const         backend_choices[] = {"ref", "cpu", "cuda", NULL};
static const moon_backend_kind_t backend_values[]  = {MOON_BACKEND_REF, MOON_BACKEND_CPU,
                                                      MOON_BACKEND_CUDA};

#define GENERATE_AT(_f) MOON_CONFIG_AT(generate_opts_t, _f)
static const moon_config_field_t generate_fields[] = {
    {"model", MOON_CONFIG_STRING, GENERATE_AT(model), .dflt = NULL,
     .doc = "GGUF model file, or a Hugging Face folder (converted once into DIR/moonlet.gguf), "
            "required"},
    {"prompt", MOON_CONFIG_STRING, GENERATE_AT(prompt), .dflt = "",
     .doc = "prompt text (-: read it from stdin)"},
    {"prompt-file", MOON_CONFIG_STRING, GENERATE_AT(prompt_file), .dflt = NULL,
     .doc = "read the prompt from this file"},
    {"max-tokens", MOON_CONFIG_U32, GENERATE_AT(max_tokens), .dflt = "64",
     .doc = "new tokens to generate at most", .max = 1u << 20},
    {"temperature", MOON_CONFIG_DOUBLE, GENERATE_AT(temperature), .dflt = "0",
     .doc = "sampling temperature (0: greedy)", .dmax = 100},
    {"top-p", MOON_CONFIG_DOUBLE, GENERATE_AT(top_p), .dflt = "1",
     .doc = "nucleus sampling mass, above 0 (1: off)", .dmax = 1},
    {"top-k", MOON_CONFIG_U32, GENERATE_AT(top_k), .dflt = "0",
     .doc = "sample among the k likeliest (0: off)"},
    {"seed", MOON_CONFIG_U64, GENERATE_AT(seed), .dflt = "1", .doc = "sampling seed"},
    {"backend", MOON_CONFIG_ENUM, GENERATE_AT(backend), .dflt = "cpu",
     .doc     = "engine backend (cuda falls back to cpu where there is no gpu)",
     .choices = backend_choices},
    {"threads", MOON_CONFIG_U32, GENERATE_AT(threads), .dflt = "0",
     .doc = "cpu threads (0: every online core)", .max = 1024},
    {"print-ids", MOON_CONFIG_BOOL, GENERATE_AT(print_ids), .dflt = "0",
     .doc = "print token ids instead of text: the prompt's on stderr, the new ones on stdout"},
    MOON_CONFIG_END,
};
static const moon_config_table_t generate_table = {"generate", "moonlet generate", NULL,
                                                   generate_fields};

typedef enum { STOP_MAX_TOKENS, STOP_EOS, STOP_CONTEXT } stop_reason_t;
static const char *const stop_names[] = {"max-tokens", "end of text",
                                         "context full (the model's seq_len)"};

/* What one generation holds; gen_fini frees it all. */
typedef struct {
    moon_model_t              *model;
    moon_engine_t             *eng;
    moon_kv_cache_t           *kv;
    const moon_tokenizer_t    *tok;
    const moon_model_config_t *c;
    moon_sampler_t             smp;
    uint32_t                   seq;
    int32_t                   *ids;
    float                     *logits;
    char                      *out;
    size_t                     n_ids;
    int                        print_ids;
} gen_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void gen_fini(gen_t *g)
{
    moon_free(g->ids);
    moon_free(g->logits);
    moon_free(g->out);
    moon_sampler_fini(&g->smp);
    moon_kv_cache_destroy(g->kv);
    moon_engine_destroy(g->eng);
    moon_model_destroy(g->model);
}

/* Loads the model, creates the engine, KV cache, sampler and buffers, and
 * tokenizes prompt. Returns 0, or the exit status (the error printed). */
static int gen_setup(gen_t *g, const generate_opts_t *o, const moon_engine_tuning_t *tuning,
                     const char *prompt)
{
    moon_engine_config_t ecfg = {0};
    moon_kv_config_t     kcfg;
    moon_status_t        status;
    size_t               len = strlen(prompt);
    char                 converted[4096];
    const char *path = moon_cli_model_path("generate", o->model, converted, sizeof(converted));

    if (path == NULL) {
        return 1;
    }
    status = moon_model_load(path, &g->model);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet generate: load %s: %s\n", o->model, moon_status_str(status));
        return 1;
    }
    g->c   = moon_model_config(g->model);
    g->tok = moon_model_tokenizer(g->model);
    if (g->tok == NULL) {
        fprintf(stderr, "moonlet generate: %s has no tokenizer\n", o->model);
        return 1;
    }
    ecfg.kind      = backend_values[o->backend];
    ecfg.n_threads = o->threads;
    ecfg.max_batch = 1;
    ecfg.max_chunk = 128;
    ecfg.tuning    = tuning;
    status         = moon_engine_create(g->model, &ecfg, &g->eng);
    if (status == MOON_ERR_UNSUPPORTED && ecfg.kind == MOON_BACKEND_CUDA) {
        /* a build without CUDA, or no usable GPU here: the CPU path */
        fprintf(stderr, "moonlet generate: no CUDA backend here (no GPU, or a build without "
                        "MOON_WITH_CUDA): running on the CPU\n");
        ecfg.kind = MOON_BACKEND_CPU;
        status    = moon_engine_create(g->model, &ecfg, &g->eng);
    }
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet generate: engine (--backend %s, --threads %u): %s\n",
                backend_choices[o->backend], o->threads, moon_status_str(status));
        return 1;
    }
    kcfg   = moon_model_kv_config(g->c, 16, (g->c->seq_len + 15) / 16, 1);
    status = moon_backend_kv_type(ecfg.kind, MOON_KV_AUTO, &kcfg.elem_type); /* as serve's */
    if (status == MOON_OK) {
        status = moon_kv_cache_create(&kcfg, &g->kv);
    }
    if (status == MOON_OK) {
        status = moon_kv_seq_create(g->kv, &g->seq);
    }
    if (status == MOON_OK) {
        status = moon_sampler_init(&g->smp, g->c->vocab_size, (float)o->temperature,
                                   (float)o->top_p, o->top_k, o->seed);
    }
    g->ids    = moon_malloc((len + 2) * sizeof(*g->ids));
    g->logits = moon_malloc(g->c->vocab_size * sizeof(float));
    g->out    = moon_malloc(MOON_TOK_STREAM_OUT_MAX(g->tok));
    if (status == MOON_OK && (g->ids == NULL || g->logits == NULL || g->out == NULL)) {
        status = MOON_ERR_NO_MEMORY;
    }
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet generate: setup: %s\n", moon_status_str(status));
        return 1;
    }
    status = moon_tokenizer_encode(g->tok, prompt, len, true, g->ids, len + 2, &g->n_ids);
    if (status != MOON_OK || g->n_ids >= g->c->seq_len) {
        fprintf(stderr, "moonlet generate: the prompt (%zu tokens) does not fit the context (%u)\n",
                g->n_ids, g->c->seq_len);
        return 1;
    }
    return 0;
}

/* Prefills the prompt, then samples and decodes up to max_new tokens, the
 * text on stdout; the stop reason and the rates on stderr. */
static int gen_run(gen_t *g, uint32_t max_new)
{
    moon_tok_stream_t st;
    size_t            out_len, out_max = MOON_TOK_STREAM_OUT_MAX(g->tok);
    stop_reason_t     stop  = STOP_MAX_TOKENS;
    uint32_t          n_new = 0;
    double            t0    = now_s(), t1;
    moon_status_t     status;

    for (size_t i = 0; i < g->n_ids; i += 128) {
        uint32_t n = (uint32_t)MOON_MIN(g->n_ids - i, 128);
        status     = moon_engine_prefill(g->eng, g->kv, g->seq, g->ids + i, n, g->logits, NULL);
        if (status != MOON_OK) {
            fprintf(stderr, "moonlet generate: prefill: %s\n", moon_status_str(status));
            return 1;
        }
    }
    t1 = now_s();
    if (g->print_ids) {
        fprintf(stderr, "moonlet generate: prompt ids:");
        for (size_t i = 0; i < g->n_ids; i++) {
            fprintf(stderr, " %d", (int)g->ids[i]);
        }
        fputc('\n', stderr);
    }
    moon_tok_stream_init(&st, g->tok, g->ids[g->n_ids - 1]);
    while (n_new < max_new) {
        int32_t next = moon_sampler_sample(&g->smp, g->logits);
        if (next == moon_tokenizer_eos(g->tok) || next == moon_tokenizer_bos(g->tok)) {
            stop = STOP_EOS;
            break;
        }
        if (g->print_ids) {
            printf("%s%d", n_new > 0 ? " " : "", (int)next);
        } else if (moon_tok_stream_push(&st, next, g->out, out_max, &out_len) == MOON_OK) {
            fwrite(g->out, 1, out_len, stdout); /* ids past the vocabulary print nothing */
        }
        fflush(stdout);
        n_new++;
        if (n_new == max_new) {
            break;
        }
        if (moon_kv_seq_len(g->kv, g->seq) >= g->c->seq_len) {
            stop = STOP_CONTEXT;
            break;
        }
        status = moon_engine_decode(g->eng, g->kv, &g->seq, &next, 1, g->logits, NULL);
        if (status != MOON_OK) {
            fprintf(stderr, "\nmoonlet generate: decode: %s\n", moon_status_str(status));
            return 1;
        }
    }
    moon_tok_stream_flush(&st, g->out, out_max, &out_len);
    if (!g->print_ids) {
        fwrite(g->out, 1, out_len, stdout);
    }
    fputc('\n', stdout);
    fflush(stdout);
    {
        double t2 = now_s();
        fprintf(stderr, "moonlet generate: stop: %s after %u new tokens\n", stop_names[stop],
                n_new);
        fprintf(stderr,
                "moonlet generate: prompt %zu tokens in %.3f s, %u new tokens in %.3f s "
                "(%.1f tokens/s)\n",
                g->n_ids, t1 - t0, n_new, t2 - t1, t2 > t1 ? n_new / (t2 - t1) : 0.0);
    }
    return 0;
}

int moon_cmd_generate(int argc, char **argv)
{
    generate_opts_t        o;
    moon_engine_tuning_t   tuning;
    const moon_cli_table_t tables[] = {{&generate_table, &o}, {&moon_engine_tuning_table, &tuning}};
    moon_config_t         *cfg      = NULL;
    gen_t                  g;
    char                  *text = NULL;
    const char            *prompt;
    int                    rc;

    rc = moon_cli_parse("generate",
                        "usage: moonlet generate --model M.gguf [--prompt TEXT | --prompt - | "
                        "--prompt-file FILE] [options]\n"
                        "  generates a continuation of the prompt: the text on stdout, the stop "
                        "reason and the rates on stderr\n",
                        tables, MOON_ARRAY_SIZE(tables), 0, argc, argv, &cfg);
    if (rc >= 0) {
        return rc;
    }
    if (o.model == NULL) {
        rc = moon_cli_usage_error("generate", "--model is required");
    } else if (o.prompt_file != NULL && o.prompt[0] != '\0') {
        rc = moon_cli_usage_error("generate", "--prompt and --prompt-file exclude each other");
    } else if (!(o.top_p > 0)) {
        rc = moon_cli_usage_error("generate", "--top-p: '%g' is not in (0, 1]", o.top_p);
    }
    if (rc >= 0) {
        moon_config_destroy(cfg);
        return rc;
    }
    prompt = o.prompt;
    if (o.prompt_file != NULL || strcmp(o.prompt, "-") == 0) {
        if (moon_cli_read_text("generate", o.prompt_file != NULL ? o.prompt_file : "-", &text) !=
            MOON_OK) {
            moon_config_destroy(cfg);
            return 1;
        }
        prompt = text;
    }
    memset(&g, 0, sizeof(g));
    rc = gen_setup(&g, &o, &tuning, prompt);
    if (rc == 0) {
        g.print_ids = o.print_ids;
        rc          = gen_run(&g, o.max_tokens);
    }
    gen_fini(&g);
    moon_free(text);
    moon_config_destroy(cfg);
    return rc;
}
