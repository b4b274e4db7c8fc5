/* launch/loadgen/loadgen_opts.c - the option tables of `moonlet bench` (moonlet/config.h)
 * and the workload positional. vLLM's `bench serve` spellings are a second
 * table writing the same fields, so its command lines carry over. */
#include "loadgen_opts.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const formats[] = {"auto", "tokens", "words", NULL};

#define BO(_f) MOON_CONFIG_AT(moon_loadgen_opts_t, _f)
#define BIG 1e18

static const moon_config_field_t bench_fields[] = {
    {"base-url", MOON_CONFIG_STRING, BO(base_url), .dflt = "http://127.0.0.1:8000",
     .doc = "server root url (the api is under /v1)"},
    {"endpoint", MOON_CONFIG_STRING, BO(endpoint), .dflt = "completions",
     .doc = "completions | chat | a path such as /v1/completions"},
    {"model", MOON_CONFIG_STRING, BO(model), .dflt = NULL,
     .doc = "model id sent in requests (unset: the first of get /v1/models)"},
    {"api-key", MOON_CONFIG_STRING, BO(api_key), .dflt = NULL,
     .doc = "sent as 'authorization: bearer key'"},
    {"timeout-s", MOON_CONFIG_DOUBLE, BO(timeout_s), .dflt = "600",
     .doc = "per-request time limit in seconds (0: none)", .dmax = BIG},
    {"num-prompts", MOON_CONFIG_U32, BO(num_prompts), .dflt = "0",
     .doc = "requests to send (0: 100; trace: every record)", .max = 10000000},
    {"rate", MOON_CONFIG_DOUBLE, BO(rate), .dflt = "0",
     .doc = "mean arrivals per second with gamma gaps (0: all at once)", .dmax = BIG},
    {"burstiness", MOON_CONFIG_DOUBLE, BO(burstiness), .dflt = "1",
     .doc = "gamma shape of the gaps: 1 poisson, < 1 burstier, > 1 steadier", .dmin = 1e-3,
     .dmax = 1e3},
    {"max-concurrency", MOON_CONFIG_U32, BO(max_concurrency), .dflt = "0",
     .doc = "most requests in flight at once (0: no limit)", .max = 1000000},
    {"seed", MOON_CONFIG_U64, BO(seed), .dflt = "0",
     .doc = "workload seed (same seed, same bytes)"},
    {"time-scale", MOON_CONFIG_DOUBLE, BO(time_scale), .dflt = "1",
     .doc = "trace: send each record at timestamp x this (0.5: twice as fast)", .dmin = 1e-9,
     .dmax = BIG},
    {"prompt-format", MOON_CONFIG_ENUM, BO(prompt_format), .dflt = "auto",
     .doc     = "tokens (token-id arrays), words (text), auto: tokens, words for chat",
     .choices = formats},
    {"vocab", MOON_CONFIG_U32, BO(vocab), .dflt = "512",
     .doc = "token ids are drawn from 3..n-1 (0..2 are special)", .min = 4, .max = 100000000},
    {"input-len", MOON_CONFIG_U32, BO(input_len), .dflt = "128", .doc = "random: prompt tokens",
     .min = 1, .max = 100000000},
    {"output-len", MOON_CONFIG_U32, BO(output_len), .dflt = "64",
     .doc = "random, shared-prefix: output tokens per request", .min = 1, .max = 100000000},
    {"range-ratio", MOON_CONFIG_DOUBLE, BO(range_ratio), .dflt = "0",
     .doc = "random: lengths uniform in len*(1-r) .. len*(1+r)", .dmax = 1},
    {"num-prefixes", MOON_CONFIG_U32, BO(num_prefixes), .dflt = "4",
     .doc = "shared-prefix: distinct system prompts", .min = 1, .max = 1000000},
    {"prefix-len", MOON_CONFIG_U32, BO(prefix_len), .dflt = "128",
     .doc = "shared-prefix: system prompt tokens", .min = 1, .max = 100000000},
    {"turns", MOON_CONFIG_U32, BO(turns), .dflt = "3", .doc = "shared-prefix: user turns per chat",
     .min = 1, .max = 10000},
    {"question-len", MOON_CONFIG_U32, BO(question_len), .dflt = "16",
     .doc = "shared-prefix: tokens per user turn", .min = 1, .max = 100000000},
    {"block-scale", MOON_CONFIG_U32, BO(block_scale), .dflt = "512",
     .doc = "trace: tokens per 512-token block; lengths scale by n/512", .min = 1, .max = 512},
    {"max-context", MOON_CONFIG_U32, BO(max_context), .dflt = "0",
     .doc = "clamp input + output tokens to n, output first (0: no clamp)"},
    {"ignore-eos", MOON_CONFIG_BOOL, BO(ignore_eos), .dflt = "1",
     .doc = "ask for exactly max_tokens (sends ignore_eos)"},
    {"temperature", MOON_CONFIG_DOUBLE, BO(temperature), .dflt = "0", .doc = "sampling temperature",
     .dmax = 100},
    {"slo-ttft-ms", MOON_CONFIG_DOUBLE, BO(slo_ttft_ms), .dflt = "0",
     .doc = "goodput slo on time to first token (0: none)", .dmax = BIG},
    {"slo-tpot-ms", MOON_CONFIG_DOUBLE, BO(slo_tpot_ms), .dflt = "0",
     .doc = "goodput slo on time per output token (0: none)", .dmax = BIG},
    {"slo-e2el-ms", MOON_CONFIG_DOUBLE, BO(slo_e2el_ms), .dflt = "0",
     .doc = "goodput slo on end-to-end latency (0: none)", .dmax = BIG},
    {"result-file", MOON_CONFIG_STRING, BO(result_file), .dflt = NULL,
     .doc = "write the json result here"},
    {"plot-dir", MOON_CONFIG_STRING, BO(plot_dir), .dflt = NULL,
     .doc = "write png plots here (needs gnuplot)"},
    {"label", MOON_CONFIG_STRING, BO(label), .dflt = NULL,
     .doc = "free text copied into the result"},
    {"progress", MOON_CONFIG_BOOL, BO(progress), .dflt = "1",
     .doc = "progress bar on stderr when it is a terminal"},
    MOON_CONFIG_END,
};

/* vLLM's names for the same fields (same defaults, so a default is never
 * mistaken for a caller's setting). */
static const moon_config_field_t vllm_fields[] = {
    {"request-rate", MOON_CONFIG_DOUBLE, BO(rate), .dflt = "0", .doc = "= --rate", .dmax = BIG},
    {"goodput", MOON_CONFIG_STRING, BO(goodput), .dflt = NULL,
     .doc = "'ttft:ms tpot:ms e2el:ms' = --slo-ttft-ms, --slo-tpot-ms, --slo-e2el-ms"},
    {"random-input-len", MOON_CONFIG_U32, BO(input_len), .dflt = "128", .doc = "= --input-len",
     .min = 1, .max = 100000000},
    {"random-output-len", MOON_CONFIG_U32, BO(output_len), .dflt = "64", .doc = "= --output-len",
     .min = 1, .max = 100000000},
    {"random-range-ratio", MOON_CONFIG_DOUBLE, BO(range_ratio), .dflt = "0",
     .doc = "= --range-ratio", .dmax = 1},
    MOON_CONFIG_END,
};
#undef BO

const moon_config_table_t moon_loadgen_config_table = {
    "bench", "moonlet bench random|shared-prefix|trace FILE [options]", NULL, bench_fields};
const moon_config_table_t moon_loadgen_vllm_table = {"bench-vllm", "vllm bench serve spellings",
                                                     NULL, vllm_fields};

static void seterr(char *err, size_t err_len, const char *fmt, const char *a)
{
    if (err != NULL && err_len > 0) {
        snprintf(err, err_len, fmt, a);
    }
}

static moon_status_t set_positionals(const moon_config_t *cfg, moon_loadgen_opts_t *opts, char *err,
                                     size_t err_len)
{
    const char *w = moon_config_arg(cfg, 0);
    int         n = moon_config_n_args(cfg);

    if (w == NULL) {
        seterr(err, err_len, "missing workload: random, shared-prefix or trace FILE%s", "");
        return MOON_ERR_INVALID_PARAM;
    }
    if (strcmp(w, "random") == 0) {
        opts->workload = MOON_LOADGEN_WL_RANDOM;
    } else if (strcmp(w, "shared-prefix") == 0) {
        opts->workload = MOON_LOADGEN_WL_SHARED_PREFIX;
    } else if (strcmp(w, "trace") == 0) {
        opts->workload   = MOON_LOADGEN_WL_TRACE;
        opts->trace_path = moon_config_arg(cfg, 1);
        if (opts->trace_path == NULL) {
            seterr(err, err_len, "trace: missing FILE%s", "");
            return MOON_ERR_INVALID_PARAM;
        }
    } else {
        seterr(err, err_len, "unknown workload '%s' (random, shared-prefix, trace FILE)", w);
        return MOON_ERR_INVALID_PARAM;
    }
    if (n > (opts->workload == MOON_LOADGEN_WL_TRACE ? 2 : 1)) {
        seterr(err, err_len, "unexpected argument '%s'",
               moon_config_arg(cfg, opts->workload == MOON_LOADGEN_WL_TRACE ? 2 : 1));
        return MOON_ERR_INVALID_PARAM;
    }
    return MOON_OK;
}

/* vLLM's --goodput: space-separated KEY:MS pairs, KEY ttft, tpot or e2el. */
static moon_status_t parse_goodput(moon_loadgen_opts_t *opts, char *err, size_t err_len)
{
    const char *p = opts->goodput;

    while (p != NULL && *p != '\0') {
        static const char *const keys[] = {"ttft:", "tpot:", "e2el:"};
        double *slos[] = {&opts->slo_ttft_ms, &opts->slo_tpot_ms, &opts->slo_e2el_ms};
        char   *end    = NULL;
        int     k      = 0;

        while (*p == ' ') {
            p++;
        }
        if (*p == '\0') {
            break;
        }
        while (k < 3 && strncmp(p, keys[k], 5) != 0) {
            k++;
        }
        if (k < 3) {
            *slos[k] = strtod(p + 5, &end);
        }
        if (k == 3 || end == p + 5 || !(*slos[k] > 0) || !isfinite(*slos[k]) ||
            (*end != ' ' && *end != '\0')) {
            seterr(err, err_len, "--goodput: '%s' is not 'ttft:MS tpot:MS e2el:MS' (MS > 0)",
                   opts->goodput);
            return MOON_ERR_INVALID_PARAM;
        }
        p = end;
    }
    return MOON_OK;
}

static moon_status_t check_values(moon_loadgen_opts_t *opts, char *err, size_t err_len)
{
    moon_status_t status = parse_goodput(opts, err, err_len);

    if (status != MOON_OK) {
        return status;
    }
    if (strcmp(opts->endpoint, "completions") != 0 && strcmp(opts->endpoint, "chat") != 0 &&
        opts->endpoint[0] != '/') {
        seterr(err, err_len, "--endpoint: '%s' is not completions, chat or a /path",
               opts->endpoint);
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_loadgen_opts_is_chat(opts) && opts->prompt_format == MOON_LOADGEN_FMT_TOKENS) {
        seterr(err, err_len, "--prompt-format tokens: chat messages carry text, use words%s", "");
        return MOON_ERR_INVALID_PARAM;
    }
    if (strncmp(opts->base_url, "http://", 7) != 0 && strncmp(opts->base_url, "https://", 8) != 0) {
        seterr(err, err_len, "--base-url: '%s' is not an http:// or https:// URL", opts->base_url);
        return MOON_ERR_INVALID_PARAM;
    }
    return MOON_OK;
}

/* Defaults into opts and a parser over both tables. */
static moon_status_t make_config(moon_loadgen_opts_t *opts, moon_config_t **cfg_p, char *err,
                                 size_t err_len)
{
    moon_config_t *cfg = NULL;
    moon_status_t  status;

    memset(opts, 0, sizeof(*opts));
    status = moon_config_defaults(&moon_loadgen_config_table, opts);
    if (status == MOON_OK) {
        status = moon_config_defaults(&moon_loadgen_vllm_table, opts);
    }
    if (status == MOON_OK) {
        status = moon_config_create(&cfg);
    }
    if (status == MOON_OK) {
        status = moon_config_add(cfg, &moon_loadgen_config_table, opts);
        if (status == MOON_OK) {
            status = moon_config_add(cfg, &moon_loadgen_vllm_table, opts);
        }
        if (status != MOON_OK) {
            seterr(err, err_len, "%s", moon_config_error(cfg));
            moon_config_destroy(cfg);
            return status;
        }
    }
    if (status != MOON_OK) {
        seterr(err, err_len, "option table: %s", moon_status_str(status));
        return status;
    }
    *cfg_p = cfg;
    return MOON_OK;
}

moon_status_t moon_loadgen_opts_finish(const moon_config_t *cfg, moon_loadgen_opts_t *opts,
                                       char *err, size_t err_len)
{
    moon_status_t status = set_positionals(cfg, opts, err, err_len);

    if (status == MOON_OK) {
        status = check_values(opts, err, err_len);
    }
    if (opts->num_prompts == 0 && opts->workload != MOON_LOADGEN_WL_TRACE) {
        opts->num_prompts = 100;
    }
    return status;
}

moon_status_t moon_loadgen_opts_parse(int argc, char **argv, moon_loadgen_opts_t *opts, char *err,
                                      size_t err_len)
{
    moon_config_t *cfg = NULL;
    moon_status_t  status;

    if (err != NULL && err_len > 0) {
        err[0] = '\0';
    }
    status = make_config(opts, &cfg, err, err_len);
    if (status != MOON_OK) {
        return status;
    }
    status = moon_config_parse(cfg, argc, argv);
    if (status != MOON_OK) {
        seterr(err, err_len, "%s", moon_config_error(cfg));
    } else if (moon_config_help_requested(cfg)) {
        opts->help = 1;
    } else {
        status = moon_loadgen_opts_finish(cfg, opts, err, err_len);
    }
    moon_config_destroy(cfg);
    return status;
}

int moon_loadgen_opts_is_chat(const moon_loadgen_opts_t *opts)
{
    return strcmp(opts->endpoint, "chat") == 0 ||
           (opts->endpoint[0] == '/' && strstr(opts->endpoint, "chat") != NULL);
}

int moon_loadgen_opts_tokens(const moon_loadgen_opts_t *opts)
{
    if (opts->prompt_format == MOON_LOADGEN_FMT_AUTO) {
        return !moon_loadgen_opts_is_chat(opts);
    }
    return opts->prompt_format == MOON_LOADGEN_FMT_TOKENS;
}
