/* actors/instance/calib_cache.h - an instance's start-up calibration kept on
 * disk, so that a restarted deployment (a requeued Slurm job, a rolled
 * serve) skips timing its engine again. A fit is filed under a key naming
 * everything its times depend on: the model's bytes (the store tag's model
 * id), the backend, the engine's threads and pinning, the decode batch, the
 * prefill chunk, the context, which parts were fitted, the CPU model and the
 * host's processor count. A key that differs in any of them is a miss. */
#ifndef MOON_ACTORS_CALIB_CACHE_H
#define MOON_ACTORS_CALIB_CACHE_H

#include "moonlet/model.h"
#include "moonlet/sched_cost.h"

#include <stddef.h>

typedef struct {
    uint64_t            model_id; /* 0: unknown model, nothing is cached */
    moon_backend_kind_t backend;
    uint32_t            threads, pin, max_batch, prefill_chunk, ctx;
    int                 prefill, decode; /* which halves the fit has */
} moon_calib_key_t;

/* The key's text (one line, no newline) into buf; its length, or 0 when it
 * does not fit. */
size_t moon_calib_key_text(const moon_calib_key_t *key, char *buf, size_t cap);

/* Reads the fit filed under key in dir into cost's a0..a2 / d0..d2 (the
 * halves the key names; other fields untouched). MOON_ERR_NOT_FOUND: no file,
 * another key's (a hash collision) or a file that does not parse (logged: it
 * is calibrated again and overwritten). */
moon_status_t moon_calib_cache_load(const char *dir, const moon_calib_key_t *key,
                                    moon_sched_cost_t *cost);

/* Files cost's fit under key in dir (created if missing), written whole to a
 * temporary file and renamed: ranks of one host starting together each see
 * a whole file or none. MOON_ERR_IO (logged). */
moon_status_t moon_calib_cache_store(const char *dir, const moon_calib_key_t *key,
                                     const moon_sched_cost_t *cost);

#endif /* MOON_ACTORS_CALIB_CACHE_H */
