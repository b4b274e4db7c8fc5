/* launch/replay/replay_opts.c - strict parsing of `moonlet replay` options: one
 * table of options, each with its kind and range (replay_opts.h). */
#include "replay_opts.h"

#include "profile.h"

#include "moonlet/config.h"
#include "moonlet/defs.h"
#include "moonlet/sched_policy.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char moon_replay_usage[] =
    "usage: moonlet replay --trace T.jsonl --sim --out DIR [options]\n"
    "       moonlet replay --trace T.jsonl --url URL --out DIR [options]\n"
    "       moonlet replay --list-policies\n"
    "replays a Mooncake trace against a simulated cluster (virtual time, the real\n"
    "conductor/prefill/decode actors, modeled compute and transfers), or without\n"
    "--sim against a running server over HTTP (the bench client's trace workload)\n";

static const char *const backend_names[] = {"ref", "cpu", "cuda", "cost", NULL};

#define RO(_f) MOON_CONFIG_AT(moon_replay_opts_t, _f)
static const moon_config_field_t replay_fields[] = {
    {"trace", MOON_CONFIG_STRING, RO(trace), .doc = "mooncake jsonl trace"},
    {"sim", MOON_CONFIG_BOOL, RO(sim), .dflt = "0", .doc = "simulate the cluster (virtual time)"},
    {"real", MOON_CONFIG_BOOL, RO(real), .dflt = "0",
     .doc = "replay against a real cluster of the same actors in this process (wall clock)"},
    {"url", MOON_CONFIG_STRING, RO(url), .dflt = "http://127.0.0.1:8000",
     .doc = "without --sim / --real: the running server replayed against over HTTP"},
    {"model", MOON_CONFIG_STRING, RO(model), .doc = "--real: the gguf the instances serve"},
    {"workers", MOON_CONFIG_U32, RO(workers), .dflt = "1", .doc = "--real: runtime worker threads",
     .min = 1, .max = 1024},
    {"backend", MOON_CONFIG_ENUM, RO(backend), .dflt = "cpu",
     .doc     = "--real: the engine (cost: the profile's modeled times on the wall clock)",
     .choices = backend_names},
    {"threads", MOON_CONFIG_U32, RO(threads), .dflt = "1",
     .doc = "--real: engine threads per instance", .min = 1, .max = 1024},
    {"nodes-prefill", MOON_CONFIG_U32, RO(nodes_prefill), .dflt = "8", .doc = "prefill instances",
     .min = 1, .max = 4096},
    {"nodes-decode", MOON_CONFIG_U32, RO(nodes_decode), .dflt = "8", .doc = "decode instances",
     .min = 1, .max = 4096},
    {"colocated", MOON_CONFIG_BOOL, RO(colocated), .dflt = "0",
     .doc = "p + d instances that each prefill and decode (baseline)"},
    {"policy", MOON_CONFIG_STRING, RO(policy),
     .doc = "conductor policy (name+reject: early rejection; default moonlet)"},
    {"compare", MOON_CONFIG_STRING, RO(compare),
     .doc = "comma-separated policies or all, drawn on one plot"},
    {"ttft-slo-ms", MOON_CONFIG_DOUBLE, RO(ttft_slo_s), .dflt = "30000", .doc = "ttft slo, ms",
     .dmin = 1e-3, .dmax = 1e9},
    {"tbt-slo-ms", MOON_CONFIG_DOUBLE, RO(tbt_slo_s), .dflt = "100", .doc = "tbt slo, ms",
     .dmin = 1e-3, .dmax = 1e9},
    {"time-scale", MOON_CONFIG_DOUBLE, RO(time_scale), .dflt = "1",
     .doc = "arrival = timestamp x this (0.5: twice the rate)", .dmin = 1e-9, .dmax = 1e9},
    {"shed-after", MOON_CONFIG_DOUBLE, RO(shed_after),
     .dflt = MOON_XSTR(MOON_SCHED_SHED_AFTER_DEFAULT), .doc = MOON_SCHED_SHED_AFTER_DOC,
     .dmin = 1e-3, .dmax = 1},
    {"shed-share", MOON_CONFIG_DOUBLE, RO(shed_share),
     .dflt = MOON_XSTR(MOON_SCHED_SHED_SHARE_DEFAULT), .doc = MOON_SCHED_SHED_SHARE_DOC,
     .dmin = 1e-3, .dmax = 1},
    {"seed", MOON_CONFIG_U64, RO(seed), .dflt = "1", .doc = "seed of the executor and policies"},
    {"faults", MOON_CONFIG_STRING, RO(faults),
     .doc = "--sim: seeded chaos, e.g. kill=decode:0@1.5,pause=prefill:1@2+3,drop=0.001,"
            "random=3 (launch/sim/sim_faults.h)"},
    {"out", MOON_CONFIG_STRING, RO(out), .doc = "output folder: requests.csv, summary.json, plots"},
    {"profile", MOON_CONFIG_STRING, RO(profile), .dflt = MOON_PROFILE_DEFAULT,
     .doc = "hardware/model profile: a name in launch/sim/profiles or a file"},
    {"block-tokens", MOON_CONFIG_U32, RO(block_tokens), .dflt = "512", .doc = "kv block size",
     .min = 1, .max = 65536},
    {"max-requests", MOON_CONFIG_U64, RO(max_requests), .dflt = "0",
     .doc = "only the first n requests (0: all)"},
    {"block-scale", MOON_CONFIG_U32, RO(block_scale), .dflt = "0",
     .doc = "tokens per 512-token trace block: lengths scale by n/512 (0: as traced)", .max = 512},
    {"max-context", MOON_CONFIG_U32, RO(max_context), .dflt = "0",
     .doc = "clamp output to c-1 and input to c-output tokens (0: no clamp)", .max = 1u << 30},
    {"list-policies", MOON_CONFIG_BOOL, RO(list_policies), .dflt = "0",
     .doc = "print the policies and exit"},
    MOON_CONFIG_END,
};
#undef RO

const moon_config_table_t moon_replay_config_table = {"replay", "moonlet replay", NULL,
                                                      replay_fields};

static int fail(char *err, size_t n, const char *fmt, ...) MOON_PRINTF(3, 4);

static int fail(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

int moon_replay_opts_parse(int argc, char **argv, moon_replay_opts_t *opts, char *err,
                           size_t err_len)
{
    moon_config_t *cfg = NULL;
    int            rc  = 0;

    err[0] = '\0';
    if (moon_config_defaults(&moon_replay_config_table, opts) != MOON_OK ||
        moon_config_create(&cfg) != MOON_OK ||
        moon_config_add(cfg, &moon_replay_config_table, opts) != MOON_OK) {
        moon_config_destroy(cfg);
        return fail(err, err_len, "out of memory");
    }
    if (moon_config_parse(cfg, argc, argv) != MOON_OK) {
        rc = fail(err, err_len, "%s (moonlet replay --help)", moon_config_error(cfg));
    } else if (moon_config_n_args(cfg) > 0) {
        rc = fail(err, err_len, "unexpected argument '%s'", moon_config_arg(cfg, 0));
    }
    opts->help = moon_config_help_requested(cfg);
    moon_config_destroy(cfg);
    if (rc != 0) {
        return rc;
    }
    return moon_replay_opts_finish(opts, err, err_len);
}

int moon_replay_opts_finish(moon_replay_opts_t *opts, char *err, size_t err_len)
{
    err[0] = '\0';
    opts->ttft_slo_s *= 1e-3; /* the table reads milliseconds */
    opts->tbt_slo_s *= 1e-3;
    if (opts->help || opts->list_policies) {
        return 0;
    }
    if (opts->max_context == 1) {
        return fail(err, err_len, "--max-context: 1 leaves no room for a prompt (0 or >= 2)");
    }
    if ((opts->trace != NULL && opts->trace[0] == '\0') ||
        (opts->out != NULL && opts->out[0] == '\0') || opts->profile[0] == '\0') {
        return fail(err, err_len, "--trace, --out and --profile take a non-empty value");
    }
    if (opts->trace == NULL) {
        return fail(err, err_len, "--trace is required");
    }
    if (opts->out == NULL) {
        return fail(err, err_len, "--out is required");
    }
    if (!opts->sim && !opts->real &&
        (opts->policy != NULL || opts->compare != NULL || opts->colocated ||
         opts->shed_after != MOON_SCHED_SHED_AFTER_DEFAULT ||
         opts->shed_share != MOON_SCHED_SHED_SHARE_DEFAULT)) {
        return fail(err, err_len,
                    "over HTTP the server places requests: --policy, --compare, --colocated "
                    "and --shed-* need --sim or --real (or moonlet serve's own flags)");
    }
    if (opts->sim && opts->real) {
        return fail(err, err_len, "--sim and --real exclude each other");
    }
    if (opts->real && opts->model == NULL) {
        return fail(err, err_len, "--real needs --model");
    }
    if (opts->policy != NULL && opts->compare != NULL) {
        return fail(err, err_len, "--policy and --compare exclude each other");
    }
    if (opts->faults != NULL && (!opts->sim || opts->colocated)) {
        return fail(err, err_len,
                    "--faults injects into the simulated disaggregated cluster: it needs --sim "
                    "and no --colocated");
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
