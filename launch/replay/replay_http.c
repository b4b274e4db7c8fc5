/* launch/replay/replay_http.c - a trace replayed over HTTP into replay records
 * (replay_http.h). */
#include "replay_http.h"

#include "loadgen_http.h"
#include "loadgen_opts.h"
#include "loadgen_workload.h"

#include "moonlet/alloc.h"
#include "moonlet/defs.h"

#include <curl/curl.h>
#include <stdio.h>

static uint64_t ns_of(double s)
{
    return s > 0 ? (uint64_t)(s * 1e9 + 0.5) : 0;
}

/* Request i's result as the replay records it: arrival = send (the bench
 * client sends at the trace's time), tokens at the chunks' times. */
static void record(moon_sim_records_t *recs, uint32_t i, const moon_loadgen_result_t *res)
{
    uint64_t t0 = ns_of(res->send_s), t = t0 + ns_of(res->ttft_s);

    moon_sim_records_arrive(recs, i, t0, res->n_in);
    if (res->has_details) {
        moon_sim_records_place(recs, i, res->prefill_instance, res->decode_instance, res->n_cached);
        if (res->prefill_instance >= 0) {
            moon_sim_records_prefill_start(recs, i, t0 + ns_of(res->queue_s));
        }
    }
    if (!res->ok) {
        moon_sim_records_finish(recs, i, t0 + ns_of(res->e2el_s),
                                res->http_status == 429 ? MOON_SIM_REQ_REJECTED
                                                        : MOON_SIM_REQ_ERROR);
        return;
    }
    if (res->n_chunks > 0) {
        moon_sim_records_token(recs, i, t);
        for (uint32_t k = 0; k < res->n_itl; k++) {
            t += ns_of(res->itl_s[k]);
            moon_sim_records_token(recs, i, t);
        }
    }
    moon_sim_records_finish(recs, i, t0 + ns_of(res->e2el_s), MOON_SIM_REQ_OK);
}

/* The bench client's options for o: its trace workload, as `moonlet bench
 * trace` would get them on the command line (bufs keep the numbers). */
static moon_status_t bench_opts_of(const moon_replay_opts_t *o, moon_loadgen_opts_t *b,
                                   char bufs[4][32])
{
    char *argv[16] = {"bench", "trace", (char *)o->trace, "--base-url", (char *)o->url};
    int   argc     = 5;
    char  err[256];

    snprintf(bufs[0], 32, "%.17g", o->time_scale);
    argv[argc++] = "--time-scale";
    argv[argc++] = bufs[0];
    if (o->block_scale > 0) {
        snprintf(bufs[1], 32, "%u", o->block_scale);
        argv[argc++] = "--block-scale";
        argv[argc++] = bufs[1];
    }
    if (o->max_context > 0) {
        snprintf(bufs[2], 32, "%u", o->max_context);
        argv[argc++] = "--max-context";
        argv[argc++] = bufs[2];
    }
    if (o->max_requests > 0) {
        snprintf(bufs[3], 32, "%llu", (unsigned long long)o->max_requests);
        argv[argc++] = "--num-prompts";
        argv[argc++] = bufs[3];
    }
    if (moon_loadgen_opts_parse(argc, argv, b, err, sizeof(err)) != MOON_OK) {
        fprintf(stderr, "moonlet replay: %s\n", err);
        return MOON_ERR_INVALID_PARAM;
    }
    b->details = 1;
    return MOON_OK;
}

moon_status_t moon_replay_http_run(const moon_replay_opts_t *o, moon_sim_records_t *recs)
{
    moon_loadgen_opts_t      b;
    moon_loadgen_workload_t *wl      = NULL;
    moon_loadgen_result_t   *results = NULL;
    char                    *model   = NULL;
    char                     bufs[4][32];
    double                   duration = 0;
    moon_status_t            status   = bench_opts_of(o, &b, bufs);

    if (status != MOON_OK) {
        return status;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "moonlet replay: libcurl failed to initialise\n");
        return MOON_ERR_IO;
    }
    status = moon_loadgen_workload_create(&b, &wl);
    if (status == MOON_OK) {
        status = moon_loadgen_http_first_model(&b, &model);
        if (status != MOON_OK) {
            fprintf(stderr, "moonlet replay: no model id from %s/v1/models: %s\n", o->url,
                    moon_status_str(status));
        }
    }
    if (status == MOON_OK) {
        results = moon_calloc(wl->n_reqs, sizeof(*results));
        status  = results != NULL ? moon_sim_records_init(recs, wl->n_reqs) : MOON_ERR_NO_MEMORY;
    }
    if (status == MOON_OK) {
        fprintf(stderr, "moonlet replay: %u requests to %s (model %s)\n", wl->n_reqs, o->url,
                model);
        status = moon_loadgen_http_run(&b, model, wl, results, &duration);
        if (status != MOON_OK) {
            moon_sim_records_fini(recs);
        }
    }
    if (status == MOON_OK) {
        for (uint32_t i = 0; i < wl->n_reqs; i++) {
            record(recs, i, &results[i]);
        }
    }
    if (results != NULL) {
        moon_loadgen_results_fini(results, wl->n_reqs);
    }
    moon_free(results);
    moon_free(model);
    moon_loadgen_workload_destroy(wl);
    curl_global_cleanup();
    return status;
}
