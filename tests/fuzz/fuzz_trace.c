/* tests/fuzz/fuzz_trace.c - libFuzzer target for the Mooncake trace reader
 * (JSONL from users' files): parse, and when it parses, scale it as
 * `--block-scale 16 --max-context 512` does and fill one request's tokens. */
#include "fuzz_target.h"
#include "trace.h"

#include "moonlet/log.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    moon_trace_t      *t = NULL, *scaled = NULL;
    moon_trace_opts_t  o = {.max_reqs = 64};
    moon_trace_error_t err;

    moon_log_set_level(0);
    if (moon_trace_parse((const char *)data, size, &o, &t, &err) != MOON_OK) {
        return 0;
    }
    if (t->n_reqs > 0 && moon_trace_scale(t, 16, 512, &scaled) == MOON_OK) {
        const moon_trace_req_t *r   = &scaled->reqs[0];
        int32_t                *tok = malloc(((size_t)r->input_length + 1) * sizeof(int32_t));

        if (tok != NULL) {
            moon_trace_fill_tokens(r, scaled->block_tokens, 3, 512, 1, tok);
            free(tok);
        }
        moon_trace_destroy(scaled);
    }
    moon_trace_destroy(t);
    return 0;
}
