/* launch/cli/cmd_calibrate.c - `moonlet calibrate`: times the engine on a model
 * exactly as a serving instance does at start-up (moon_serve_calibrate: the
 * conductor's predictions come from the same fit) and writes a profile with
 * the fitted coefficients: the base
 * profile's device, network and store, the model's shape, a "fitted" section
 * (profile.h). The simulator then replays with this machine's costs
 * (moonlet replay --profile FILE). With --trace it then replays a slice of
 * the trace on a real in-process cluster and refits from what the requests
 * took in service (calibrate_service.h): the start-up timing alone predicts
 * an idle engine, not a serving one. */
#include "calibrate_service.h"
#include "cli.h"
#include "commands.h"
#include "profile.h"
#include "serve_calibrate.h"
#include "trace.h"

#include "moonlet/alloc.h"
#include "moonlet/config.h"
#include "moonlet/log.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *model, *base, *out, *name;
    int         backend;
    uint32_t    threads, max_chunk, max_batch;
    /* the in-service step (--trace) */
    const char *trace, *policy;
    uint64_t    skip_requests, max_requests;
    uint32_t    nodes_prefill, nodes_decode, block_tokens, block_scale, max_context, runs;
    double      time_scale;
} cal_opts_t;

#define CAL_HANDOFF_CALLS 2000u

static const char *const backends[] = {"ref", "cpu", "cuda", "cost", NULL};

#define CO(_f) MOON_CONFIG_AT(cal_opts_t, _f)
static const moon_config_field_t cal_fields[] = {
    {"model", MOON_CONFIG_STRING, CO(model), .doc = "gguf model file to time"},
    {"out", MOON_CONFIG_STRING, CO(out), .doc = "profile file to write"},
    {"base", MOON_CONFIG_STRING, CO(base), .dflt = "stories260k-cpu",
     .doc = "profile whose device, network and store the fitted one keeps"},
    {"name", MOON_CONFIG_STRING, CO(name), .doc = "the new profile's name (default: base-fitted)"},
    {"backend", MOON_CONFIG_ENUM, CO(backend), .dflt = "cpu", .doc = "engine backend",
     .choices = backends},
    {"threads", MOON_CONFIG_U32, CO(threads), .dflt = "1",
     .doc = "engine threads (0: all cores), as the instance serves", .max = 1024},
    {"max-chunk", MOON_CONFIG_U32, CO(max_chunk), .dflt = "128",
     .doc = "prefill tokens per call, as the instance serves", .min = 1, .max = 65536},
    {"max-batch", MOON_CONFIG_U32, CO(max_batch), .dflt = "32",
     .doc = "decode batch, as the instance serves (batches timed up to it)", .min = 1, .max = 256},
    {"trace", MOON_CONFIG_STRING, CO(trace),
     .doc = "refit in service: replay a slice of this trace on a real in-process cluster"},
    {"skip-requests", MOON_CONFIG_U64, CO(skip_requests), .dflt = "0",
     .doc = "--trace: the slice starts past this many requests (its arrivals from 0)"},
    {"max-requests", MOON_CONFIG_U64, CO(max_requests), .dflt = "300",
     .doc = "--trace: requests in the slice", .min = 1},
    {"time-scale", MOON_CONFIG_DOUBLE, CO(time_scale), .dflt = "1",
     .doc = "--trace: arrival = timestamp x this", .dmin = 1e-9, .dmax = 1e9},
    {"nodes-prefill", MOON_CONFIG_U32, CO(nodes_prefill), .dflt = "1",
     .doc = "--trace: prefill instances", .min = 1, .max = 64},
    {"nodes-decode", MOON_CONFIG_U32, CO(nodes_decode), .dflt = "1",
     .doc = "--trace: decode instances", .min = 1, .max = 64},
    {"service-runs", MOON_CONFIG_U32, CO(runs), .dflt = "2",
     .doc = "--trace: real replays of the slice, pooled (the load moves between them)", .min = 1,
     .max = 16},
    {"policy", MOON_CONFIG_STRING, CO(policy), .dflt = "least-loaded",
     .doc = "--trace: conductor policy"},
    {"block-tokens", MOON_CONFIG_U32, CO(block_tokens), .dflt = "16",
     .doc = "--trace: kv block size", .min = 1, .max = 65536},
    {"block-scale", MOON_CONFIG_U32, CO(block_scale), .dflt = "0",
     .doc = "--trace: tokens per 512-token trace block (0: as traced)", .max = 512},
    {"max-context", MOON_CONFIG_U32, CO(max_context), .dflt = "0",
     .doc = "--trace: clamp output to c-1 and input to c-output tokens (0: no clamp)",
     .max = 1u << 30},
    MOON_CONFIG_END,
};
#undef CO
static const moon_config_table_t cal_table = {"calibrate", "moonlet calibrate", NULL, cal_fields};

/* The fit of the engine of (m, ecfg) on this machine, as an instance would
 * time it at start-up: a KV cache of max_batch + 1 contexts. */
static moon_status_t fit_engine(const moon_model_t *m, const moon_engine_config_t *ecfg,
                                moon_cost_fit_t *fit_p)
{
    const moon_model_config_t *mc  = moon_model_config(m);
    moon_engine_t             *eng = NULL;
    moon_kv_cache_t           *kv  = NULL;
    moon_kv_config_t           kc  = moon_model_kv_config(
                   mc, 16, (ecfg->max_batch + 1) * ((mc->seq_len + 15) / 16), ecfg->max_batch + 1);
    moon_sched_cost_t cost;
    moon_status_t     status = moon_engine_create(m, ecfg, &eng);

    memset(&cost, 0, sizeof(cost));
    if (status == MOON_OK) { /* the cache a serving instance of this backend holds */
        status = moon_backend_kv_type(ecfg->kind, MOON_KV_AUTO, &kc.elem_type);
    }
    if (status == MOON_OK) {
        status = moon_kv_cache_create(&kc, &kv);
    }
    if (status == MOON_OK) {
        status =
            moon_serve_calibrate(eng, kv, mc->vocab_size, ecfg->max_chunk, ecfg->max_batch, &cost);
    }
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(eng);
    if (status == MOON_OK) {
        *fit_p = (moon_cost_fit_t){.enabled = 1,
                                   .a0      = cost.a0,
                                   .a1      = cost.a1,
                                   .a2      = cost.a2,
                                   .d0      = cost.d0,
                                   .d1      = cost.d1,
                                   .d2      = cost.d2};
    }
    return status;
}

/* The slice [skip, skip + max) of the scaled trace, arrivals from 0, into
 * *slice_p (a view: its requests' ids stay the trace's). 0 or -1 (said). */
static int load_slice(const cal_opts_t *o, moon_trace_t **trace_p, moon_trace_t *slice_p)
{
    moon_trace_opts_t topts = {.max_reqs = (size_t)(o->skip_requests + o->max_requests)};
    moon_trace_t     *t     = NULL;
    uint64_t          t0;

    if (moon_trace_load(o->trace, &topts, &t, NULL) != MOON_OK) {
        return -1; /* the loader said why */
    }
    if (o->block_scale > 0 || o->max_context > 0) {
        moon_trace_t *scaled = NULL;
        moon_status_t status = moon_trace_scale(
            t, o->block_scale ? o->block_scale : t->block_tokens, o->max_context, &scaled);
        moon_trace_destroy(t);
        if (status != MOON_OK) {
            fprintf(stderr, "moonlet calibrate: --block-scale must be at most the trace's block\n");
            return -1;
        }
        t = scaled;
    }
    if (t->n_reqs <= o->skip_requests) {
        fprintf(stderr, "moonlet calibrate: %s has %zu requests, none past --skip-requests\n",
                o->trace, t->n_reqs);
        moon_trace_destroy(t);
        return -1;
    }
    *slice_p        = *t;
    slice_p->n_reqs = t->n_reqs - (size_t)o->skip_requests;
    slice_p->reqs   = moon_calloc(slice_p->n_reqs, sizeof(*slice_p->reqs));
    if (slice_p->reqs == NULL) {
        moon_trace_destroy(t);
        return -1;
    }
    t0 = t->reqs[o->skip_requests].timestamp_ms;
    for (size_t i = 0; i < slice_p->n_reqs; i++) {
        slice_p->reqs[i] = t->reqs[o->skip_requests + i];
        slice_p->reqs[i].timestamp_ms -= t0;
    }
    *trace_p = t;
    return 0;
}

/* The in-service step (--trace) on p; 0 or -1 (said). */
static int refit_in_service(const cal_opts_t *o, moon_profile_t *p, moon_cal_service_report_t *rep)
{
    moon_trace_t             *t = NULL, slice;
    moon_cal_service_config_t sc;
    moon_status_t             status;

    if (load_slice(o, &t, &slice) != 0) {
        return -1;
    }
    sc     = (moon_cal_service_config_t){.trace         = &slice,
                                         .model_path    = o->model,
                                         .policy        = o->policy,
                                         .nodes_prefill = o->nodes_prefill,
                                         .nodes_decode  = o->nodes_decode,
                                         .block_tokens  = o->block_tokens,
                                         .threads       = o->threads ? o->threads : 1,
                                         .real_runs     = o->runs,
                                         .time_scale    = o->time_scale,
                                         .seed          = 1};
    status = moon_calibrate_service(&sc, p, rep);
    moon_free(slice.reqs);
    moon_trace_destroy(t);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet calibrate: the in-service step failed: %s\n",
                moon_status_str(status));
        return -1;
    }
    return 0;
}

int moon_cmd_calibrate(int argc, char **argv)
{
    cal_opts_t                o;
    moon_profile_t            p;
    moon_model_t             *m = NULL;
    moon_engine_config_t      ecfg;
    moon_cost_fit_t           fit;
    moon_cal_service_report_t rep;
    moon_status_t             status;
    char                      source[128];
    moon_config_t            *cfg      = NULL;
    const moon_cli_table_t    tables[] = {{&cal_table, &o}};
    int                       rc;

    memset(&o, 0, sizeof(o));
    rc = moon_cli_parse("calibrate",
                        "usage: moonlet calibrate --model M.gguf --out PROFILE.json [options]\n"
                        "  times the engine as a serving instance does at start-up and writes a\n"
                        "  profile fitted to this machine\n",
                        tables, 1, 0, argc, argv, &cfg);
    if (rc >= 0) {
        return rc;
    }
    if (o.model == NULL || o.out == NULL) {
        moon_config_destroy(cfg);
        return moon_cli_usage_error("calibrate", "--model and --out are required");
    }
    if (moon_profile_load(o.base, NULL, &p, NULL) != MOON_OK ||
        moon_model_load(o.model, &m) != MOON_OK) {
        fprintf(stderr, "moonlet calibrate: cannot load %s\n", m == NULL ? o.model : o.base);
        moon_model_destroy(m);
        moon_config_destroy(cfg);
        return 1;
    }
    memset(&ecfg, 0, sizeof(ecfg));
    ecfg.kind      = (moon_backend_kind_t)o.backend;
    ecfg.n_threads = o.threads;
    ecfg.max_batch = o.max_batch;
    ecfg.max_chunk = o.max_chunk;
    ecfg.cost      = moon_profile_cost(&p);
    status         = fit_engine(m, &ecfg, &fit);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet calibrate: timing the %s engine failed: %s\n", backends[o.backend],
                moon_status_str(status));
        moon_model_destroy(m);
        return 1;
    }
    /* what each call costs a serving instance on top: its engine thread's round trip */
    p.fit_handoff_s = 0.0;
    if (ecfg.kind != MOON_BACKEND_COST &&
        moon_serve_calibrate_handoff(CAL_HANDOFF_CALLS, &p.fit_handoff_s) != MOON_OK) {
        fprintf(stderr, "moonlet calibrate: timing the engine hand-off failed\n");
        moon_model_destroy(m);
        return 1;
    }
    p.shape                  = *moon_model_config(m);
    p.weight_bytes_per_param = (double)moon_model_weight_bytes(m) / moon_cost_params(&p.shape);
    {
        moon_kv_type_t kvt = MOON_KV_F32; /* the serving instances' cache (auto) */
        moon_backend_kv_type(ecfg.kind, MOON_KV_AUTO, &kvt);
        p.kv_bytes_per_elem = moon_kv_type_bytes(kvt);
    }
    snprintf(source, sizeof(source),
             "moonlet calibrate: %s backend, %u threads, chunk %u, batch %u%s", backends[o.backend],
             o.threads, o.max_chunk, o.max_batch, o.trace ? ", in service" : "");
    memset(&rep, 0, sizeof(rep));
    if (moon_profile_set_fit(&p, &fit, source) != MOON_OK ||
        (o.trace != NULL && refit_in_service(&o, &p, &rep) != 0)) {
        moon_model_destroy(m);
        moon_config_destroy(cfg);
        return 1;
    }
    fit = p.fit;
    if (o.name != NULL) {
        snprintf(p.name, sizeof(p.name), "%s", o.name);
    } else {
        size_t n = strlen(p.name) > 56 ? 56 : strlen(p.name);
        snprintf(p.name + n, sizeof(p.name) - n, "-fitted");
    }
    snprintf(p.doc, sizeof(p.doc), "%s fitted on this machine (%s)", o.model, source);
    rc = moon_profile_write(&p, o.out) == MOON_OK ? 0 : 1;
    if (rc == 0) {
        printf("{\"profile\": \"%s\", \"a0\": %.6g, \"a1\": %.6g, \"a2\": %.6g, \"d0\": %.6g, "
               "\"d1\": %.6g, \"d2\": %.6g, \"handoff_s\": %.6g",
               o.out, fit.a0, fit.a1, fit.a2, fit.d0, fit.d1, fit.d2, p.fit_handoff_s);
        if (o.trace != NULL) {
            /* the slice replayed real and simulated with the refitted profile */
            printf(", \"request_s\": %.6g, \"step_gap_s\": %.6g, \"latency_s\": %.6g, "
                   "\"slice_requests\": %u, "
                   "\"slice_real_ttft_median_s\": %.6g, \"slice_sim_ttft_median_s\": %.6g, "
                   "\"slice_real_tbt_median_s\": %.6g, \"slice_sim_tbt_median_s\": %.6g",
                   p.fit_request_s, p.fit_step_gap_s, p.network.latency_s, rep.n_requests,
                   rep.real_ttft_median_s, rep.sim_ttft_median_s, rep.real_tbt_median_s,
                   rep.sim_tbt_median_s);
        }
        printf("}\n");
    }
    moon_model_destroy(m);
    moon_config_destroy(cfg); /* the string options borrowed argv until here */
    return rc;
}
