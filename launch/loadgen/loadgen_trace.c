/* launch/loadgen/loadgen_trace.c - Mooncake trace -> `moonlet bench` workload: the
 * trace reader (trace.h, shared with the simulator) loads and shrinks the
 * trace, its deterministic block tokens become the prompts, and the output
 * lengths scale like the blocks (see loadgen_trace.h). */
#include "loadgen_trace.h"

#include "trace.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>

uint32_t moon_loadgen_trace_scale(uint32_t len, uint32_t block_tokens)
{
    uint64_t scaled =
        ((uint64_t)len * block_tokens + MOON_LOADGEN_TRACE_BLOCK - 1) / MOON_LOADGEN_TRACE_BLOCK;

    return scaled < 1 ? 1 : (uint32_t)scaled;
}

/* Builds request i from trace request r (already at opts->block_scale). */
static moon_status_t make_req(const moon_loadgen_opts_t *opts, const moon_trace_t *trace,
                              const moon_trace_req_t *r, uint32_t first_id, uint32_t vocab,
                              moon_loadgen_req_t *req)
{
    uint32_t      n_in  = r->input_length;
    uint32_t      n_out = moon_loadgen_trace_scale(r->output_length, opts->block_scale);
    moon_status_t status;

    moon_loadgen_clamp(opts->max_context, &n_in, &n_out);
    /* room for the whole prompt: the clamp keeps its first n_in ids */
    status = moon_loadgen_req_alloc(req, r->input_length, 1);
    if (status != MOON_OK) {
        return status;
    }
    /* int32_t and uint32_t may alias; the ids are below vocab, so positive */
    status = moon_trace_fill_tokens(r, trace->block_tokens, first_id, vocab, opts->seed,
                                    (int32_t *)req->ids);
    if (status != MOON_OK) {
        return status;
    }
    req->n_ids      = n_in;
    req->max_tokens = n_out;
    req->msgs[0]    = (moon_loadgen_msg_t){MOON_LOADGEN_ROLE_USER, 0, n_in};
    return MOON_OK;
}

moon_status_t moon_loadgen_trace_workload(const moon_loadgen_opts_t *opts,
                                          moon_loadgen_workload_t  **wl_p)
{
    moon_trace_opts_t        topts = {.block_tokens = MOON_LOADGEN_TRACE_BLOCK,
                                      .max_reqs     = opts->num_prompts};
    moon_trace_t            *trace = NULL, *shrunk = NULL;
    moon_loadgen_workload_t *wl;
    uint64_t                 t0;
    uint32_t                 first_id, vocab;
    moon_status_t            status;

    status = moon_trace_load(opts->trace_path, &topts, &trace, NULL);
    if (status != MOON_OK) {
        return status; /* logged by the reader, with the line */
    }
    if (opts->block_scale < MOON_LOADGEN_TRACE_BLOCK) {
        status = moon_trace_shrink(trace, opts->block_scale, 0, 0, &shrunk);
        moon_trace_destroy(trace);
        if (status != MOON_OK) {
            return status;
        }
        trace = shrunk;
    }
    wl = moon_loadgen_workload_alloc((uint32_t)trace->n_reqs);
    if (wl == NULL) {
        moon_trace_destroy(trace);
        return MOON_ERR_NO_MEMORY;
    }
    wl->words        = !moon_loadgen_opts_tokens(opts);
    wl->block_tokens = trace->block_tokens;
    first_id         = wl->words ? 0 : 3; /* 0..2 are special (unk, bos, eos) */
    vocab            = wl->words ? moon_loadgen_n_words() : opts->vocab;
    t0               = moon_trace_arrival_ns(&trace->reqs[0], opts->time_scale);
    for (size_t i = 0; i < trace->n_reqs && status == MOON_OK; i++) {
        const moon_trace_req_t *r = &trace->reqs[i];

        status                = make_req(opts, trace, r, first_id, vocab, &wl->reqs[i]);
        wl->reqs[i].arrival_s = (double)(moon_trace_arrival_ns(r, opts->time_scale) - t0) * 1e-9;
    }
    moon_trace_destroy(trace);
    if (status != MOON_OK) {
        moon_loadgen_workload_destroy(wl);
        return status;
    }
    *wl_p = wl;
    return MOON_OK;
}
