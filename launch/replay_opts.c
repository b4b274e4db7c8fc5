/* launch/replay_opts.c - strict parsing of `moonlet replay` options: one
 * table of options, each with its kind and range (replay_opts.h). */
#include "replay_opts.h"

#include "profile.h"

#include "moonlet/defs.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char moon_replay_usage[] =
    "usage: moonlet replay --trace T.jsonl --sim --out DIR [options]\n"
    "       moonlet replay --list-policies\n"
    "replays a Mooncake trace against a simulated cluster (virtual time, the real\n"
    "conductor/prefill/decode actors, modeled compute and transfers)\n"
    "  --trace PATH          Mooncake JSONL trace\n"
    "  --sim                 simulate the cluster (without: a running cluster over HTTP)\n"
    "  --nodes-prefill P     prefill instances (default 8)\n"
    "  --nodes-decode D      decode instances (default 8)\n"
    "  --colocated           P + D instances that each prefill and decode (baseline)\n"
    "  --policy NAME         conductor policy (default: moonlet); NAME+reject for early\n"
    "                        rejection\n"
    "  --compare LIST        comma-separated policies or \"all\", drawn on one plot\n"
    "  --ttft-slo-ms MS      TTFT SLO (default 30000)\n"
    "  --tbt-slo-ms MS       TBT SLO (default 100)\n"
    "  --time-scale X        arrival = timestamp * X (default 1; 0.5 = twice the rate)\n"
    "  --seed N              seed of the executor and the policies (default 1)\n"
    "  --out DIR             output folder: requests.csv, summary.json, *.png\n"
    "  --profile NAME|PATH   hardware/model profile (default " MOON_PROFILE_DEFAULT ")\n"
    "  --block-tokens N      KV block size (default 512)\n"
    "  --max-requests N      only the first N requests\n"
    "  --list-policies       print the policies and exit\n";

typedef enum { O_FLAG, O_STR, O_U32, O_U64, O_MS, O_POS } okind_t;

typedef struct {
    const char *name;
    okind_t     kind;
    size_t      off;
    double      min, max; /* numbers: inclusive range */
} opt_t;

#define OFF(m) offsetof(moon_replay_opts_t, m)

static const opt_t opts_table[] = {
    {"--trace", O_STR, OFF(trace), 0, 0},
    {"--out", O_STR, OFF(out), 0, 0},
    {"--profile", O_STR, OFF(profile), 0, 0},
    {"--policy", O_STR, OFF(policy), 0, 0},
    {"--compare", O_STR, OFF(compare), 0, 0},
    {"--sim", O_FLAG, OFF(sim), 0, 0},
    {"--colocated", O_FLAG, OFF(colocated), 0, 0},
    {"--list-policies", O_FLAG, OFF(list_policies), 0, 0},
    {"--help", O_FLAG, OFF(help), 0, 0},
    {"--nodes-prefill", O_U32, OFF(nodes_prefill), 1, 4096},
    {"--nodes-decode", O_U32, OFF(nodes_decode), 1, 4096},
    {"--block-tokens", O_U32, OFF(block_tokens), 1, 65536},
    {"--max-requests", O_U64, OFF(max_requests), 1, 1e15},
    {"--seed", O_U64, OFF(seed), 0, 1.8e19},
    {"--ttft-slo-ms", O_MS, OFF(ttft_slo_s), 1e-3, 1e9},
    {"--tbt-slo-ms", O_MS, OFF(tbt_slo_s), 1e-3, 1e9},
    {"--time-scale", O_POS, OFF(time_scale), 1e-9, 1e9},
};

static int fail(char *err, size_t n, const char *fmt, ...) MOON_PRINTF(3, 4);

static int fail(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

static int set_value(const opt_t *o, const char *v, moon_replay_opts_t *opts, char *err, size_t n)
{
    char  *end;
    void  *dst = (char *)opts + o->off;
    double d;

    if (o->kind == O_STR) {
        if (v[0] == '\0') {
            return fail(err, n, "%s: empty value", o->name);
        }
        *(const char **)dst = v;
        return 0;
    }
    errno = 0;
    if (o->kind == O_U32 || o->kind == O_U64) {
        unsigned long long u;

        if (v[0] < '0' || v[0] > '9') {
            return fail(err, n, "%s: '%s' is not a non-negative integer", o->name, v);
        }
        u = strtoull(v, &end, 10);
        if (errno != 0 || *end != '\0') {
            return fail(err, n, "%s: '%s' is not a non-negative integer", o->name, v);
        }
        if ((double)u < o->min || (double)u > o->max) {
            return fail(err, n, "%s: %s is out of range [%.0f, %.0f]", o->name, v, o->min, o->max);
        }
        if (o->kind == O_U32) {
            *(uint32_t *)dst = (uint32_t)u;
        } else {
            *(uint64_t *)dst = u;
        }
        return 0;
    }
    d = strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !isfinite(d)) {
        return fail(err, n, "%s: '%s' is not a number", o->name, v);
    }
    if (d < o->min || d > o->max) {
        return fail(err, n, "%s: %s is out of range (must be > 0)", o->name, v);
    }
    *(double *)dst = o->kind == O_MS ? d * 1e-3 : d;
    return 0;
}

int moon_replay_opts_parse(int argc, char **argv, moon_replay_opts_t *opts, char *err,
                           size_t err_len)
{
    memset(opts, 0, sizeof(*opts));
    opts->profile       = MOON_PROFILE_DEFAULT;
    opts->nodes_prefill = 8;
    opts->nodes_decode  = 8;
    opts->block_tokens  = 512;
    opts->seed          = 1;
    opts->ttft_slo_s    = 30.0;
    opts->tbt_slo_s     = 0.1;
    opts->time_scale    = 1.0;
    err[0]              = '\0';
    for (int i = 1; i < argc; i++) {
        const char  *arg = argv[i];
        const char  *eq  = strchr(arg, '=');
        size_t       len = eq ? (size_t)(eq - arg) : strlen(arg);
        const opt_t *o   = NULL;

        for (size_t k = 0; k < sizeof(opts_table) / sizeof(opts_table[0]); k++) {
            if (strlen(opts_table[k].name) == len && strncmp(opts_table[k].name, arg, len) == 0) {
                o = &opts_table[k];
            }
        }
        if (o == NULL) {
            return fail(err, err_len, "unknown option '%s' (moonlet replay --help)", arg);
        }
        if (o->kind == O_FLAG) {
            if (eq != NULL) {
                return fail(err, err_len, "%s takes no value", o->name);
            }
            *(int *)(void *)((char *)opts + o->off) = 1;
            continue;
        }
        if (eq == NULL && i + 1 >= argc) {
            return fail(err, err_len, "%s needs a value", o->name);
        }
        if (set_value(o, eq ? eq + 1 : argv[++i], opts, err, err_len) != 0) {
            return -1;
        }
    }
    if (opts->help || opts->list_policies) {
        return 0;
    }
    if (opts->trace == NULL) {
        return fail(err, err_len, "--trace is required");
    }
    if (opts->sim && opts->out == NULL) {
        return fail(err, err_len, "--out is required with --sim");
    }
    if (opts->policy != NULL && opts->compare != NULL) {
        return fail(err, err_len, "--policy and --compare exclude each other");
    }
    return 0;
}

int moon_replay_split_compare(const char *list, char *buf, size_t buf_len,
                              const char *names[MOON_REPLAY_MAX_COMPARE], const char *const *all,
                              uint32_t n_all)
{
    int   n = 0;
    char *save, *tok;

    if (strcmp(list, "all") == 0) {
        if (n_all == 0 || n_all > MOON_REPLAY_MAX_COMPARE) {
            return -1;
        }
        for (uint32_t i = 0; i < n_all; i++) {
            names[i] = all[i];
        }
        return (int)n_all;
    }
    if (strlen(list) + 1 > buf_len) {
        return -1;
    }
    memcpy(buf, list, strlen(list) + 1);
    for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        if (n == MOON_REPLAY_MAX_COMPARE) {
            return -1;
        }
        for (int k = 0; k < n; k++) {
            if (strcmp(names[k], tok) == 0) {
                return -1;
            }
        }
        names[n++] = tok;
    }
    return n > 0 ? n : -1;
}
