/* launch/bench_opts.c - the option table of `moonlet bench` and its strict
 * parser. Each row names a flag, where its value goes, its default (parsed
 * by the same code as argv, so a default is checked like user input), its
 * range and one help line. vLLM's `bench serve` spellings are accepted as
 * aliases so its command lines carry over. */
#include "bench_opts.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { KIND_STR, KIND_U32, KIND_U64, KIND_F64, KIND_BOOL } kind_t;

typedef struct {
    const char *name;  /* "--flag" */
    const char *alias; /* vLLM's spelling, or NULL */
    kind_t      kind;
    size_t      offset; /* into moon_bench_opts_t */
    const char *dflt;   /* NULL: unset (strings NULL, numbers 0) */
    double      min, max;
    const char *help;
} opt_row_t;

#define OFF(_f) offsetof(moon_bench_opts_t, _f)
#define BIG 1e18

static const opt_row_t rows[] = {
    {"--base-url", NULL, KIND_STR, OFF(base_url), "http://127.0.0.1:8000", 0, 0,
     "server root URL (the API is under /v1)"},
    {"--endpoint", NULL, KIND_STR, OFF(endpoint), "completions", 0, 0,
     "completions | chat | a path such as /v1/completions"},
    {"--model", NULL, KIND_STR, OFF(model), NULL, 0, 0,
     "model id sent in requests (default: the first of GET /v1/models)"},
    {"--api-key", NULL, KIND_STR, OFF(api_key), NULL, 0, 0, "sent as 'Authorization: Bearer KEY'"},
    {"--timeout-s", NULL, KIND_F64, OFF(timeout_s), "600", 0, BIG,
     "per-request time limit in seconds (0: none)"},
    {"--num-prompts", NULL, KIND_U32, OFF(num_prompts), NULL, 0, 1e7,
     "requests to send (random, shared-prefix: 100; trace: every record)"},
    {"--rate", "--request-rate", KIND_F64, OFF(rate), "0", 0, BIG,
     "mean arrivals per second, Gamma gaps (0: all at once)"},
    {"--burstiness", NULL, KIND_F64, OFF(burstiness), "1", 1e-3, 1e3,
     "Gamma shape of the gaps: 1 Poisson, <1 burstier, >1 more regular"},
    {"--max-concurrency", NULL, KIND_U32, OFF(max_concurrency), "0", 0, 1e6,
     "most requests in flight at once (0: no limit)"},
    {"--seed", NULL, KIND_U64, OFF(seed), "0", 0, 0, "workload seed (same seed, same bytes)"},
    {"--time-scale", NULL, KIND_F64, OFF(time_scale), "1", 0, BIG,
     "trace: send each record at timestamp x this (0.5: twice as fast)"},
    {"--prompt-format", NULL, KIND_STR, OFF(prompt_format), NULL, 0, 0,
     "tokens (token-id arrays) | words (default: tokens, words for chat)"},
    {"--vocab", NULL, KIND_U32, OFF(vocab), "512", 4, 1e8,
     "token ids are drawn from 3..N-1 (0..2 are special)"},
    {"--input-len", "--random-input-len", KIND_U32, OFF(input_len), "128", 1, 1e8,
     "random: prompt tokens"},
    {"--output-len", "--random-output-len", KIND_U32, OFF(output_len), "64", 1, 1e8,
     "random, shared-prefix: output tokens per request"},
    {"--range-ratio", "--random-range-ratio", KIND_F64, OFF(range_ratio), "0", 0, 1,
     "random: lengths uniform in len*(1-r) .. len*(1+r)"},
    {"--num-prefixes", NULL, KIND_U32, OFF(num_prefixes), "4", 1, 1e6,
     "shared-prefix: distinct system prompts"},
    {"--prefix-len", NULL, KIND_U32, OFF(prefix_len), "128", 1, 1e8,
     "shared-prefix: system prompt tokens"},
    {"--turns", NULL, KIND_U32, OFF(turns), "3", 1, 1e4, "shared-prefix: user turns per chat"},
    {"--question-len", NULL, KIND_U32, OFF(question_len), "16", 1, 1e8,
     "shared-prefix: tokens per user turn"},
    {"--block-scale", NULL, KIND_U32, OFF(block_scale), "512", 1, 512,
     "trace: tokens per 512-token block; lengths scale by N/512"},
    {"--max-context", NULL, KIND_U32, OFF(max_context), "0", 0, 1e9,
     "clamp input + output tokens to N (0: no clamp)"},
    {"--ignore-eos", NULL, KIND_BOOL, OFF(ignore_eos), "1", 0, 1,
     "ask for exactly max_tokens (sends ignore_eos)"},
    {"--temperature", NULL, KIND_F64, OFF(temperature), "0", 0, 100, "sampling temperature"},
    {"--slo-ttft-ms", NULL, KIND_F64, OFF(slo_ttft_ms), "0", 0, BIG,
     "goodput SLO on time to first token (0: none)"},
    {"--slo-tpot-ms", NULL, KIND_F64, OFF(slo_tpot_ms), "0", 0, BIG,
     "goodput SLO on time per output token (0: none)"},
    {"--slo-e2el-ms", NULL, KIND_F64, OFF(slo_e2el_ms), "0", 0, BIG,
     "goodput SLO on end-to-end latency (0: none)"},
    {"--result-file", NULL, KIND_STR, OFF(result_file), NULL, 0, 0, "write the JSON result here"},
    {"--plot-dir", NULL, KIND_STR, OFF(plot_dir), NULL, 0, 0,
     "write PNG plots here (needs gnuplot)"},
    {"--label", NULL, KIND_STR, OFF(label), NULL, 0, 0, "free text copied into the result"},
    {"--progress", NULL, KIND_BOOL, OFF(progress), "1", 0, 1,
     "progress bar on stderr when it is a terminal"},
};

static void seterr(char *err, size_t err_len, const char *fmt, const char *a, const char *b)
{
    if (err != NULL && err_len > 0) {
        snprintf(err, err_len, fmt, a, b);
    }
}

/* Parses text into the row's field; 0 on success. */
static int set_value(const opt_row_t *row, const char *text, moon_bench_opts_t *opts)
{
    char  *field = (char *)opts + row->offset;
    char  *end   = NULL;
    double d;

    switch (row->kind) {
    case KIND_STR:
        *(const char **)field = text;
        return 0;
    case KIND_BOOL:
        if (strcmp(text, "1") == 0 || strcmp(text, "true") == 0 || strcmp(text, "yes") == 0) {
            *(int *)field = 1;
        } else if (strcmp(text, "0") == 0 || strcmp(text, "false") == 0 ||
                   strcmp(text, "no") == 0) {
            *(int *)field = 0;
        } else {
            return -1;
        }
        return 0;
    case KIND_U64: {
        unsigned long long v;
        if (text[0] == '\0' || text[0] == '-' || text[0] == '+') {
            return -1;
        }
        errno = 0;
        v     = strtoull(text, &end, 10);
        if (errno != 0 || *end != '\0') {
            return -1;
        }
        *(uint64_t *)field = v;
        return 0;
    }
    case KIND_U32:
        if (text[0] == '\0' || text[0] == '-' || text[0] == '+') {
            return -1;
        }
        errno = 0;
        d     = (double)strtoull(text, &end, 10);
        if (errno != 0 || *end != '\0' || d < row->min || d > row->max) {
            return -1;
        }
        *(uint32_t *)field = (uint32_t)d;
        return 0;
    case KIND_F64:
        if (text[0] == '\0') {
            return -1;
        }
        errno = 0;
        d     = strtod(text, &end);
        if (errno != 0 || *end != '\0' || !isfinite(d) || d < row->min || d > row->max) {
            return -1;
        }
        *(double *)field = d;
        return 0;
    }
    return -1;
}

static int is_bool_text(const char *s)
{
    static const char *const words[] = {"0", "1", "true", "false", "yes", "no"};

    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        if (strcmp(s, words[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

static const opt_row_t *find_row(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if ((strlen(rows[i].name) == len && strncmp(rows[i].name, name, len) == 0) ||
            (rows[i].alias != NULL && strlen(rows[i].alias) == len &&
             strncmp(rows[i].alias, name, len) == 0)) {
            return &rows[i];
        }
    }
    return NULL;
}

static moon_status_t set_defaults(moon_bench_opts_t *opts, char *err, size_t err_len)
{
    memset(opts, 0, sizeof(*opts));
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (rows[i].dflt != NULL && set_value(&rows[i], rows[i].dflt, opts) != 0) {
            seterr(err, err_len, "%s: bad default '%s'", rows[i].name, rows[i].dflt);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    return MOON_OK;
}

static moon_status_t set_positional(moon_bench_opts_t *opts, const char *arg, int *n_pos, char *err,
                                    size_t err_len)
{
    if (*n_pos == 0) {
        if (strcmp(arg, "random") == 0) {
            opts->workload = MOON_BENCH_WL_RANDOM;
        } else if (strcmp(arg, "shared-prefix") == 0) {
            opts->workload = MOON_BENCH_WL_SHARED_PREFIX;
        } else if (strcmp(arg, "trace") == 0) {
            opts->workload = MOON_BENCH_WL_TRACE;
        } else {
            seterr(err, err_len, "unknown workload '%s' (random, shared-prefix, trace FILE)%s", arg,
                   "");
            return MOON_ERR_INVALID_PARAM;
        }
    } else if (*n_pos == 1 && opts->workload == MOON_BENCH_WL_TRACE) {
        opts->trace_path = arg;
    } else {
        seterr(err, err_len, "unexpected argument '%s'%s", arg, "");
        return MOON_ERR_INVALID_PARAM;
    }
    (*n_pos)++;
    return MOON_OK;
}

static moon_status_t check_values(const moon_bench_opts_t *opts, int n_pos, char *err,
                                  size_t err_len)
{
    if (n_pos == 0) {
        seterr(err, err_len, "missing workload: random, shared-prefix or trace FILE%s%s", "", "");
        return MOON_ERR_INVALID_PARAM;
    }
    if (opts->workload == MOON_BENCH_WL_TRACE && opts->trace_path == NULL) {
        seterr(err, err_len, "trace: missing FILE%s%s", "", "");
        return MOON_ERR_INVALID_PARAM;
    }
    if (opts->prompt_format != NULL && strcmp(opts->prompt_format, "tokens") != 0 &&
        strcmp(opts->prompt_format, "words") != 0) {
        seterr(err, err_len, "--prompt-format: '%s' is not tokens or words%s", opts->prompt_format,
               "");
        return MOON_ERR_INVALID_PARAM;
    }
    if (strcmp(opts->endpoint, "completions") != 0 && strcmp(opts->endpoint, "chat") != 0 &&
        opts->endpoint[0] != '/') {
        seterr(err, err_len, "--endpoint: '%s' is not completions, chat or a /path%s",
               opts->endpoint, "");
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_bench_opts_is_chat(opts) && moon_bench_opts_tokens(opts)) {
        seterr(err, err_len, "--prompt-format tokens: chat messages carry text, use words%s%s", "",
               "");
        return MOON_ERR_INVALID_PARAM;
    }
    if (strncmp(opts->base_url, "http://", 7) != 0 && strncmp(opts->base_url, "https://", 8) != 0) {
        seterr(err, err_len, "--base-url: '%s' is not an http:// or https:// URL%s", opts->base_url,
               "");
        return MOON_ERR_INVALID_PARAM;
    }
    return MOON_OK;
}

moon_status_t moon_bench_opts_parse(int argc, char **argv, moon_bench_opts_t *opts, char *err,
                                    size_t err_len)
{
    int           n_pos = 0;
    moon_status_t status;

    status = set_defaults(opts, err, err_len);
    if (status != MOON_OK) {
        return status;
    }
    for (int i = 1; i < argc; i++) {
        const char      *arg = argv[i];
        const char      *eq, *value;
        const opt_row_t *row;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            opts->help = 1;
            return MOON_OK;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            status = set_positional(opts, arg, &n_pos, err, err_len);
            if (status != MOON_OK) {
                return status;
            }
            continue;
        }
        eq  = strchr(arg, '=');
        row = find_row(arg, eq != NULL ? (size_t)(eq - arg) : strlen(arg));
        if (row == NULL) {
            seterr(err, err_len, "unknown option '%s' (moonlet bench --help)%s", arg, "");
            return MOON_ERR_INVALID_PARAM;
        }
        if (eq != NULL) {
            value = eq + 1;
        } else if (row->kind == KIND_BOOL && (i + 1 >= argc || !is_bool_text(argv[i + 1]))) {
            value = "1"; /* a bare boolean flag turns it on */
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            seterr(err, err_len, "%s: missing value%s", row->name, "");
            return MOON_ERR_INVALID_PARAM;
        }
        if (set_value(row, value, opts) != 0) {
            seterr(err, err_len, "%s: bad value '%s'", row->name, value);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    if (opts->num_prompts == 0 && opts->workload != MOON_BENCH_WL_TRACE) {
        opts->num_prompts = 100;
    }
    return check_values(opts, n_pos, err, err_len);
}

void moon_bench_opts_usage(FILE *f)
{
    fprintf(f, "usage: moonlet bench random|shared-prefix|trace FILE [OPTIONS]\n"
               "  drives an OpenAI-compatible server with streamed requests and reports\n"
               "  TTFT, TPOT, ITL, E2EL, throughput and goodput as `vllm bench serve` does\n\n"
               "options (--flag VALUE or --flag=VALUE):\n");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char name[64];
        snprintf(name, sizeof(name), "%s%s%s", rows[i].name, rows[i].alias ? ", " : "",
                 rows[i].alias ? rows[i].alias : "");
        fprintf(f, "  %-38s %s", name, rows[i].help);
        if (rows[i].dflt != NULL) {
            fprintf(f, " [%s]", rows[i].dflt);
        }
        fputc('\n', f);
    }
}

int moon_bench_opts_is_chat(const moon_bench_opts_t *opts)
{
    return strcmp(opts->endpoint, "chat") == 0 ||
           (opts->endpoint[0] == '/' && strstr(opts->endpoint, "chat") != NULL);
}

int moon_bench_opts_tokens(const moon_bench_opts_t *opts)
{
    if (opts->prompt_format == NULL) {
        return !moon_bench_opts_is_chat(opts);
    }
    return strcmp(opts->prompt_format, "tokens") == 0;
}
