/* actors/gateway/gw_answer.c - usage and errors of a DONE (see gw_answer.h). */
#include "gw_answer.h"

void moon_gw_usage_of_done(const moon_serve_event_t *ev, int details, moon_gw_usage_t *u)
{
    *u = (moon_gw_usage_t){
        .prompt_tokens     = ev->n_prompt,
        .completion_tokens = ev->n_completion,
        .cached_tokens     = ev->n_cached,
        .details           = details,
        .prefill_instance  = ev->prefill_instance,
        .decode_instance   = ev->decode_instance,
        .queue_s           = (double)ev->queue_ns * 1e-9,
        .prefill_s         = (double)ev->prefill_ns * 1e-9,
        .transfer_s        = (double)ev->transfer_ns * 1e-9,
        .ttft_s            = (double)ev->ttft_ns * 1e-9,
        .weight_version    = ev->weight_version,
    };
}

int moon_gw_done_error(uint32_t finish, moon_status_t status, const char *message,
                       moon_gw_error_t *err)
{
    if (finish == MOON_FINISH_CANCELLED) {
        moon_gw_error_set(err, 503, NULL, NULL, "the request was cancelled by the server");
        return 1;
    }
    return moon_gw_error_from_done(finish, status, message, err);
}
