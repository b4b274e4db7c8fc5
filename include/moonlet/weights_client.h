/* moonlet/weights_client.h - the C API of weight pushes, from a plain
 * thread of a process that runs the cluster's runtime (the tests, a
 * trainer in the same MPI job, the gateway's admin route goes through the
 * same messages): push a checkpoint file, read the outcome, ask the state.
 * A small actor of the client's receives the broadcaster's answers; the
 * calls are safe from any thread but not from a handler. */
#ifndef MOON_ACTORS_WEIGHTS_CLIENT_H
#define MOON_ACTORS_WEIGHTS_CLIENT_H

#include "moonlet/actor.h"
#include "moonlet/dist.h"

typedef struct moon_weights_client moon_weights_client_t;

/* The outcome of a push (PUSH_REPLY). Bytes are per link of the chain. */
typedef struct {
    uint64_t      req;
    moon_status_t status;
    uint64_t      version;     /* serving now: the new one on success, else the old */
    uint64_t      old_version; /* serving before */
    uint64_t      total_bytes, moved_bytes, skipped_bytes;
    uint64_t      read_bytes; /* of the checkpoint, by the broadcaster (a trainer's
                               * image pushed again: only what changed) */
    uint32_t n_chunks, n_moved, n_instances;
    double   stage_s;      /* push to every instance holding a checked copy */
    double   switch_s;     /* then to new requests running on it everywhere */
    char     message[320]; /* why it failed ("" on success) */
} moon_weights_result_t;

#define MOON_WEIGHTS_STATE_MAX_INST 128u
typedef struct {
    uint64_t version;      /* serving */
    uint32_t phase;        /* 0 idle, 1 offering, 2 streaming, 3 installing, 4 switching,
                            * 5 fetching a trainer's image */
    uint64_t push_version; /* of the push under way (0: none) */
    uint32_t n_pushes, n_failed;
    uint32_t n_inst;
    struct {
        uint32_t role, index;
        uint64_t version;
    } inst[MOON_WEIGHTS_STATE_MAX_INST];
    char last_error[320];
} moon_weights_state_info_t;

/* Spawns the client's actor in rt (running) talking to the broadcaster
 * bcast (moon_serve_cluster_weights). */
MOON_API moon_status_t moon_weights_client_create(moon_runtime_t *rt, moon_addr_t bcast,
                                                  moon_weights_client_t **client_p);
/* Stops the actor and frees (a push under way goes on). NULL: no-op. */
MOON_API void moon_weights_client_destroy(moon_weights_client_t *client);
/* Starts a push of the GGUF at path (read by the broadcaster's rank) as
 * version (0: the serving one + 1), MOON_WEIGHTS_F_* flags; *req_p names
 * its outcome, read with moon_weights_client_next. */
MOON_API moon_status_t moon_weights_push_file(moon_weights_client_t *client, const char *path,
                                              uint64_t version, uint32_t flags, uint64_t *req_p);
/* Starts a push of the checkpoint image held in reg, a region of this
 * process (moon_dist_region_alloc): its first bytes bytes are the GGUF
 * image. The broadcaster gets it one-sided: reg must stay registered and
 * unchanged until the outcome of *req_p was read. Trainers use
 * moon_weights_push_image (weights_image.h) rather than this. */
MOON_API moon_status_t moon_weights_push_region(moon_weights_client_t    *client,
                                                const moon_dist_region_t *reg, uint64_t bytes,
                                                uint64_t version, uint32_t flags, uint64_t *req_p);
/* What changed in a trainer's image since an earlier push of it: the
 * image's id (not 0), the generation this push makes, the generation the
 * changes are counted from (0: none, the whole image) and n (offset,
 * length) pairs of changed bytes. */
typedef struct {
    uint64_t        image, gen, base;
    const uint64_t *ranges; /* 2 * n entries */
    uint32_t        n;
} moon_weights_changes_t;
/* moon_weights_push_region with what changed since generation base: a
 * broadcaster that holds that generation of the image gets only those
 * bytes (changes NULL: as moon_weights_push_region). */
MOON_API moon_status_t moon_weights_push_region_changed(
    moon_weights_client_t *client, const moon_dist_region_t *reg, uint64_t bytes, uint64_t version,
    uint32_t flags, const moon_weights_changes_t *changes, uint64_t *req_p);
/* Waits for the outcome of req (outcomes of other pushes read meanwhile are
 * dropped). MOON_ERR_TIMED_OUT. */
MOON_API moon_status_t moon_weights_client_wait(moon_weights_client_t *client, uint64_t req,
                                                uint64_t timeout_ns, moon_weights_result_t *res_p);
/* The next outcome of a push (in the order they end). MOON_ERR_TIMED_OUT. */
MOON_API moon_status_t moon_weights_client_next(moon_weights_client_t *client, uint64_t timeout_ns,
                                                moon_weights_result_t *res_p);
/* A push and its outcome (blocking, at most timeout_ns). */
MOON_API moon_status_t moon_weights_push_file_sync(moon_weights_client_t *client, const char *path,
                                                   uint64_t version, uint32_t flags,
                                                   uint64_t               timeout_ns,
                                                   moon_weights_result_t *res_p);
/* The broadcaster's state (blocking). MOON_ERR_TIMED_OUT. */
MOON_API moon_status_t moon_weights_client_state(moon_weights_client_t *client, uint64_t timeout_ns,
                                                 moon_weights_state_info_t *st_p);

#endif /* MOON_ACTORS_WEIGHTS_CLIENT_H */
