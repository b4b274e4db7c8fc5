/* actors/batch/batch.h - the batch engine: answers a file of OpenAI batch
 * requests through a serving cluster, the one code path behind `moonlet
 * batch` (and, later, the gateway's /v1/batches).
 *
 * Input: JSON Lines, one request a line: {"custom_id": "...", "method":
 * "POST", "url": "/v1/completions" or "/v1/chat/completions", "body": {...}}
 * (blank lines are not requests). Output: JSON Lines in OpenAI's batch output
 * format, one line per request line, in the order answers come:
 *
 *   {"id":"batch_req_<N>","custom_id":C,"response":{"status_code":200,
 *    "request_id":"req_..","body":<the gateway's response body>},"error":null}
 *
 * N is the request's line number in the input (1-based; it is how a rerun
 * knows what is answered). The body is parsed, prepared and formatted by the
 * gateway's own code (gw_openai.h, gw_format.h, gw_answer.h), so it is the
 * gateway's answer to the same request byte for byte (the id and created
 * differ); a request the gateway would answer with an error gets that status
 * and error body ("stream" is ignored: a batch answer is always whole). A
 * line that is no request at all (not a JSON object, no
 * string custom_id, a custom_id seen on an earlier line, a method other than
 * POST, an unknown url, no body object, a line over line_limit_bytes) gets
 * "response":null and "error":{"code":..,"message":..} (custom_id null when
 * it has none). Every request line is answered exactly once.
 *
 * Resumable: the output file is opened for appending; lines it already
 * answers are not sent again (a partial last line, left by a kill, is
 * dropped first). Each answer is one write() of a whole line, fsynced every
 * fsync_ms and at the end, so a run killed at any point and run again yields
 * every line exactly once.
 *
 * Threading: moon_batch_run blocks the calling thread (not a runtime
 * worker) and drives the cluster through a serve client in queue mode. */
#ifndef MOON_ACTORS_BATCH_H
#define MOON_ACTORS_BATCH_H

#include "moonlet/config.h"
#include "moonlet/serve_client.h"

#include <signal.h>
#include <stdint.h>

/* Where a run stands (progress callbacks and the result). */
typedef struct {
    uint64_t total;             /* request lines in the input */
    uint64_t done;              /* answered, earlier runs included */
    uint64_t resumed;           /* answered by an earlier run (not sent again) */
    uint64_t n_ok;              /* this run: 200 answers */
    uint64_t n_failed;          /* this run: error lines (request or line errors) */
    uint64_t completion_tokens; /* this run */
    uint64_t prompt_tokens;     /* this run */
    uint32_t in_flight;
    double   elapsed_s; /* since the run started */
} moon_batch_progress_t;

/* Called on the run's thread after each answer and at least every 100 ms. */
typedef void (*moon_batch_progress_fn)(void *arg, const moon_batch_progress_t *p);

/* The engine's options: one row each in moon_batch_config_table (flags
 * --input ..., variables MOON_BATCH_INPUT ...). Strings are borrowed. */
typedef struct {
    const char *input_path;  /* --input: the requests (JSONL) */
    const char *output_path; /* --output: the answers (JSONL), appended to */
    /* not in the table (the front end's options: `moonlet batch --model-name
     * --max-inflight`; moon_batch_config_default sets max_inflight 64): */
    const char *model_name;    /* the id requests must name (a body's "model");
                                  NULL: the model file's stem */
    uint32_t max_inflight;     /* requests in the cluster at once */
    uint64_t line_limit_bytes; /* --line-limit 4m: a longer line is an error line */
    uint32_t slo_class;        /* --slo-class 0: the class the requests run in */
    uint32_t fsync_ms;         /* --fsync-ms 1000: answers reach the disk at least this often */
    uint32_t stall_timeout_s;  /* --stall-timeout 300: no event for this long with requests
                                  in flight: they are cancelled and answered with an error */
    uint32_t drain_timeout_s;  /* --drain-timeout 30: after a stop, how long requests in
                                  flight may finish (the rest are cancelled, left unanswered
                                  for the next run) */
} moon_batch_config_t;

MOON_API extern const moon_config_table_t moon_batch_config_table;

/* The table's defaults, then MOON_BATCH_* variables for fields at their
 * default; model_name NULL, max_inflight 64. MOON_ERR_INVALID_PARAM: a malformed variable (logged).
 */
MOON_API moon_status_t moon_batch_config_default(moon_batch_config_t *cfg);

/* What a run needs besides its options (borrowed for the call). */
typedef struct {
    moon_serve_client_t   *client;      /* queue mode (no on_event), its conductor up */
    const char            *model_path;  /* GGUF: tokenizer, context, chat template */
    const char            *fingerprint; /* system_fingerprint; NULL: "fp_" + a hash of the name */
    moon_batch_progress_fn progress;    /* optional */
    void                  *arg;
    /* optional: set (by a signal handler) to stop: no new request, those in
     * flight finish within drain_timeout_s, the answers are synced */
    const volatile sig_atomic_t *stop;
} moon_batch_env_t;

/* Runs the batch. *result_p (optional) gets the last progress. MOON_OK:
 * every request line is answered; MOON_ERR_CANCELED: stopped before (what
 * was answered is on disk: run again to go on); MOON_ERR_INVALID_PARAM: bad
 * options, or an output file that is not this input's (a line answers an
 * input line with another custom_id, or is not an answer line: nothing
 * written); MOON_ERR_NOT_FOUND / MOON_ERR_IO: a file (logged);
 * MOON_ERR_NO_MEMORY; the model's load status. */
MOON_API moon_status_t moon_batch_run(const moon_batch_config_t *cfg, const moon_batch_env_t *env,
                                      moon_batch_progress_t *result_p);

#endif /* MOON_ACTORS_BATCH_H */
