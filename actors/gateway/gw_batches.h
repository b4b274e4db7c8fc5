/* actors/gateway/gw_batches.h - the OpenAI Batch API on the gateway:
 * /v1/files (upload with purpose=batch, list, retrieve, content, delete) and
 * /v1/batches (create, retrieve, list, cancel), served from --data-dir DIR.
 *
 * A batch runs through the batch engine (actors/batch, the code path of
 * `moonlet batch`) on a runner thread of its own, one batch at a time in
 * the order they were created, its requests in their own SLO class
 * (--batch-slo-class, below interactive traffic). Its states are OpenAI's:
 *
 *   validating -> in_progress -> finalizing -> completed
 *        |              |--> cancelling -> cancelled     (POST .../cancel)
 *        '--> failed    '--> failed (the engine could not go on), expired (24 h)
 *
 * DIR/batches/ID.json holds the batch object (rewritten at each change of
 * state, through a temporary file and a rename), DIR/batches/ID.jsonl the
 * engine's answers. A server restarted on DIR lists its files and batches,
 * and one that was in progress goes on where it stopped: the engine resumes
 * its answers file, so each line is answered exactly once. At finalizing,
 * the answers with status 200 become the output file, the others (error
 * lines, requests the gateway would refuse) the error file (purpose
 * batch_output, in the file store; request_counts completed and failed).
 *
 * Errors are OpenAI error objects: 400 bad input (multipart, JSON, purpose,
 * endpoint, completion_window), 404 unknown ids, 405, 413 over --file-limit,
 * 507 "storage_full" when the file system refuses a write (a full disk, a
 * quota, a file size limit), 500 else.
 *
 * Threading: the HTTP entry points are called from the server's threads and
 * take the service's mutex; the runner thread drives the engine. */
#ifndef MOON_ACTORS_GW_BATCHES_H
#define MOON_ACTORS_GW_BATCHES_H

#include "moonlet/actor.h"
#include "moonlet/config.h"

#include <stddef.h>
#include <stdint.h>

/* The service's options: one row each in moon_gw_batches_config_table
 * (flags --data-dir ..., variables MOON_BATCHES_DATA_DIR ...). Strings are
 * borrowed. */
typedef struct {
    const char *data_dir;         /* --data-dir: files and batches; NULL: the routes are off */
    uint64_t    file_limit_bytes; /* --file-limit 256m: largest upload (more: 413) */
    uint32_t    max_inflight;     /* --batch-inflight 16: a batch's requests in the cluster */
    uint32_t    slo_class;        /* --batch-slo-class 2: their class (0 is interactive) */
    uint64_t    max_requests;     /* --batch-max-requests 50000: request lines per batch */
} moon_gw_batches_config_t;

MOON_API extern const moon_config_table_t moon_gw_batches_config_table;

/* The table's defaults, then MOON_BATCHES_* variables. MOON_ERR_INVALID_PARAM:
 * a malformed variable (logged). */
MOON_API moon_status_t moon_gw_batches_config_default(moon_gw_batches_config_t *cfg);

/* What the runner needs (borrowed for the call; strings copied). */
typedef struct {
    moon_runtime_t *rt;                  /* the runner's serve client lives here */
    moon_addr_t     conductor;           /* where the requests go */
    const char     *model_path;          /* GGUF (tokenizer, template), as the gateway's */
    const char     *model_name;          /* the id requests name; NULL: the file's stem */
    const char     *fingerprint;         /* system_fingerprint; NULL: the engine's */
    uint32_t        n_prefill, n_decode; /* instances to wait for before a batch runs */
} moon_gw_batches_args_t;

typedef struct moon_gw_batches moon_gw_batches_t;

/* Opens cfg->data_dir (made if absent), reads its files and batches and
 * starts the runner (batches left in progress go on). MOON_ERR_IO (logged):
 * the folder cannot be made or read; MOON_ERR_INVALID_PARAM; MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_gw_batches_open(const moon_gw_batches_config_t *cfg,
                                            const moon_gw_batches_args_t   *args,
                                            moon_gw_batches_t             **batches_p);
/* Stops the runner (from any thread but a runtime worker; blocks): the batch
 * running stops sending, its requests in flight finish (at most the engine's
 * drain timeout) and it stays in_progress, to go on at the next open. The
 * routes keep answering (new batches wait). Idempotent. */
MOON_API void moon_gw_batches_stop(moon_gw_batches_t *b);
/* Stops and frees. Call after the HTTP server that used it stopped. NULL: no-op. */
MOON_API void moon_gw_batches_close(moon_gw_batches_t *b);

/* 1 when url is one of the service's routes (/v1/files..., /v1/batches...). */
int moon_gw_batches_route(const char *url);
/* The largest body url takes (uploads: the file limit). */
uint64_t moon_gw_batches_body_limit(const moon_gw_batches_t *b, const char *url,
                                    uint64_t dflt_bytes);
/* Answers one request (method, url without the query, the Content-Type
 * header or NULL, the body): returns the body (moon_malloc'd; NULL only when
 * out of memory) with *http_p and *type_p (static: JSON, or the file's
 * bytes for .../content). Errors are OpenAI error objects, each logged. */
char *moon_gw_batches_handle(moon_gw_batches_t *b, const char *method, const char *url,
                             const char *content_type, const char *body, size_t len, int *http_p,
                             const char **type_p, size_t *len_p);

#endif /* MOON_ACTORS_GW_BATCHES_H */
