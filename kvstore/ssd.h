/* kvstore/ssd.h - the SSD tier's file: fixed-size slots in one file per shard,
 * read and written with pread/pwrite (blocking; liburing can replace it behind
 * this interface). Slot bookkeeping and LRU live in the shard. One thread. */
#ifndef MOON_KVSTORE_SSD_H
#define MOON_KVSTORE_SSD_H

#include "moonlet/status.h"

typedef struct {
    int      fd; /* -1: closed */
    size_t   slot_bytes;
    uint32_t n_slots;
} moon_kv_ssd_t;

/* Opens (creates, truncates) path for n_slots slots of slot_bytes. path is
 * borrowed. MOON_ERR_IO: open failed (errno logged); MOON_ERR_INVALID_PARAM. */
moon_status_t moon_kv_ssd_open(moon_kv_ssd_t *ssd, const char *path, size_t slot_bytes,
                               uint32_t n_slots);
/* Closes the file (kept on disk). Closed or never opened: no-op. */
void moon_kv_ssd_close(moon_kv_ssd_t *ssd);
/* Writes/reads n_bytes (<= slot_bytes) at slot. MOON_ERR_IO on an error or a
 * short transfer (logged). */
moon_status_t moon_kv_ssd_write(moon_kv_ssd_t *ssd, uint32_t slot, const void *bytes,
                                size_t n_bytes);
moon_status_t moon_kv_ssd_read(moon_kv_ssd_t *ssd, uint32_t slot, void *bytes, size_t n_bytes);

#endif /* MOON_KVSTORE_SSD_H */
