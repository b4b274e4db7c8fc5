/* actors/gateway/gw_format.h - OpenAI response bodies and Server-Sent Events, byte
 * for byte what OpenAI's API sends (compact JSON, fields in this order):
 *
 *  completion: {"id":"cmpl-..","object":"text_completion","created":T,"model":M,
 *               "system_fingerprint":F,"choices":[{"index":0,"text":..,"logprobs":null,
 *               "finish_reason":R}],"usage":{...}}
 *  chat:       {"id":"chatcmpl-..","object":"chat.completion",...,"choices":[{"index":0,
 *               "message":{"role":"assistant","content":..},"logprobs":null,
 *               "finish_reason":R}],"usage":{...}}
 *  usage:      {"prompt_tokens":P,"completion_tokens":C,"total_tokens":P+C,
 *               "prompt_tokens_details":{"cached_tokens":K},"moonlet":{"weight_version":V}}
 *               (the weights that generated every token; system_fingerprint ends
 *               in "_v" V too), and when the request
 *               asked for "moonlet_details": true (an extension, like vLLM's
 *               ignore_eos) also "moonlet_details":{"prefill_instance":I,
 *               "decode_instance":J,"queue_s":Q,"prefill_s":S,"transfer_s":X,
 *               "ttft_s":F}: where the request ran and the server's times, what
 *               `moonlet replay` over HTTP puts in its per-request CSV
 *  stream:     "data: " chunk "\n\n" per piece (object "text_completion" or
 *              "chat.completion.chunk"; chat's first delta is {"role":"assistant",
 *              "content":""}, its last {} with the finish reason), with include_usage
 *              every chunk has "usage":null and a last chunk has "choices":[] and the
 *              usage; then "data: [DONE]\n\n".
 * Every function returns moon_malloc'd NUL-terminated text (moon_free it), its
 * length in *len_p, or NULL when out of memory. Pure: any thread. */
#ifndef MOON_ACTORS_GW_FORMAT_H
#define MOON_ACTORS_GW_FORMAT_H

#include "gw_errors.h"

#include <stddef.h>
#include <stdint.h>

#define MOON_GW_SSE_DONE "data: [DONE]\n\n"

typedef struct {
    const char *id;            /* "cmpl-<n>" or "chatcmpl-<n>" */
    const char *model;         /* the served model's id */
    const char *fingerprint;   /* system_fingerprint */
    int64_t     created;       /* Unix seconds */
    int         chat;          /* chat completion objects */
    int         include_usage; /* streams: "usage":null in every chunk, usage chunk at the end */
    uint32_t    index;         /* the choice's "index" (n > 1: one per sequence) */
    const char *logprobs;      /* the next response's or chunk's "logprobs" value, JSON text
                                  (gw_logprobs.h; borrowed, set per call); NULL: null */
} moon_gw_resp_meta_t;

typedef struct {
    uint32_t prompt_tokens;
    uint32_t completion_tokens;
    uint32_t cached_tokens; /* prompt tokens whose KV came from the prefix cache */
    int      details;       /* add "moonlet_details" (the fields below) */
    int32_t  prefill_instance, decode_instance; /* -1: not placed */
    double   queue_s, prefill_s, transfer_s, ttft_s;
    uint64_t weight_version; /* "moonlet":{"weight_version":V}, always */
} moon_gw_usage_t;

/* The whole (non-streamed) answer. finish: "stop", "length"... */
char *moon_gw_format_response(const moon_gw_resp_meta_t *m, const char *text, const char *finish,
                              const moon_gw_usage_t *u, size_t *len_p);
/* One SSE chunk. role: chat's opening chunk (text ignored). text: the piece
 * (NULL: chat's empty closing delta / completions' ""). finish: NULL (JSON
 * null) until the last. */
char *moon_gw_format_chunk(const moon_gw_resp_meta_t *m, int role, const char *text,
                           const char *finish, size_t *len_p);
/* The usage chunk of include_usage streams. */
char *moon_gw_format_usage_chunk(const moon_gw_resp_meta_t *m, const moon_gw_usage_t *u,
                                 size_t *len_p);
/* An error in a stream already answered 200: "data: {"error":{...}}\n\n". */
char *moon_gw_format_error_event(const moon_gw_error_t *err, size_t *len_p);
/* GET /v1/models (list 1) or /v1/models/{id} (list 0): {"object":"model",
 * "id":..,"created":..,"owned_by":"moonlet","max_model_len":n_ctx,
 * "moonlet":{"weight_version":V}} (weight_version < 0: no moonlet object),
 * in {"object":"list","data":[...]} for the list. */
char *moon_gw_format_models(const char *model, int64_t created, uint32_t n_ctx,
                            int64_t weight_version, int list, size_t *len_p);

#endif /* MOON_ACTORS_GW_FORMAT_H */
