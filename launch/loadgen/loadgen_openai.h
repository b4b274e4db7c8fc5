/* launch/loadgen/loadgen_openai.h - the OpenAI wire format as `moonlet bench` speaks
 * it: the JSON body of a streamed completions or chat completions request,
 * and the decoding of one streamed chunk (the data of one SSE event). Pure
 * functions over cJSON; thread-safe. */
#ifndef MOON_LAUNCH_BENCH_OPENAI_H
#define MOON_LAUNCH_BENCH_OPENAI_H

#include "loadgen_opts.h"
#include "loadgen_workload.h"

#include "moonlet/status.h"

#include <stddef.h>
#include <stdint.h>

/* Writes the body for req: {"model", "prompt" (token-id array or text) |
 * "messages", "max_tokens", "stream": true, "stream_options":
 * {"include_usage": true}, "temperature", and "ignore_eos": true when asked}.
 * Completions send the messages' contents concatenated (text joined by
 * '\n'); chat sends them as messages with their roles. *body_p is a
 * NUL-terminated string the caller frees with moon_free. Errors:
 * MOON_ERR_NO_MEMORY. */
moon_status_t moon_loadgen_openai_body(const moon_loadgen_opts_t *opts, const char *model,
                                       const moon_loadgen_workload_t *wl,
                                       const moon_loadgen_req_t *req, char **body_p);

typedef struct {
    int      done;      /* the data was "[DONE]" */
    int      has_text;  /* choices[0].text or choices[0].delta.content is non-empty */
    size_t   text_len;  /* its bytes */
    int      has_usage; /* a usage object with completion_tokens */
    uint32_t prompt_tokens, completion_tokens;
    uint32_t cached_tokens; /* usage.prompt_tokens_details.cached_tokens (prefix cache), or 0 */
    int      has_details;   /* usage.moonlet_details (a Moonlet server asked for them) */
    int32_t  prefill_instance, decode_instance; /* its instances (-1: not placed) */
    double   queue_s;                           /* its server-side queue time */
    char     finish_reason[32];                 /* "" when absent */
    int      has_error;                         /* an "error" object (or string) */
    char     error[192];                        /* its message, truncated */
} moon_loadgen_chunk_t;

/* Decodes one event's data into *chunk (zeroed first). MOON_ERR_CORRUPT when
 * it is neither "[DONE]" nor a JSON object (chunk->error says so). */
moon_status_t moon_loadgen_openai_chunk(const char *data, size_t len, moon_loadgen_chunk_t *chunk);

/* The error message of a non-streamed error body ({"error": {"message"}} or
 * any text): copied, truncated, into out. */
void moon_loadgen_openai_error_text(const char *body, size_t len, char *out, size_t out_len);

/* The first model id of a GET /v1/models body ({"data": [{"id": ...}]}),
 * copied into *model_p (the caller's, moon_free). MOON_ERR_NOT_FOUND when the
 * body lists none; MOON_ERR_NO_MEMORY. */
moon_status_t moon_loadgen_openai_first_model(const char *body, size_t len, char **model_p);

#endif /* MOON_LAUNCH_BENCH_OPENAI_H */
