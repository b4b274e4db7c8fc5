/* runtime/dist/dist_config.c - the options of the distributed runtime: one table
 * row per field of moon_dist_config_t (defaults, ranges, docs, MOON_*
 * variables). Read once, when a config is defaulted; never on a hot path. */
#include "moonlet/dist.h"

#include <stddef.h>

static const char *const transport_choices[] = {"auto", "ucx", "mpi", NULL};

#define DIST_AT(_f) MOON_CONFIG_AT(moon_dist_config_t, _f)

static const moon_config_field_t dist_fields[] = {
    {"transport", MOON_CONFIG_ENUM, DIST_AT(transport), .dflt = "auto",
     .doc     = "transport engine (auto: ucx when built with it, else mpi)",
     .choices = transport_choices},
    {"dist-credits", MOON_CONFIG_U32, DIST_AT(credits), .dflt = "1024",
     .doc = "per-peer credit window, messages in flight", .min = 4, .max = 1u << 20},
    {"dist-batch-bytes", MOON_CONFIG_U32, DIST_AT(batch_bytes), .dflt = "16384",
     .doc = "small messages coalesced per frame, bytes", .min = 1024, .max = 64u << 20},
    {"peer-timeout-ms", MOON_CONFIG_U64, DIST_AT(peer_timeout_ms), .dflt = "2000",
     .doc = "silence after which a rank is suspected (its process checked when on this host; "
            "lost once it is gone)",
     .min = 1, .max = 86400000},
    {"peer-dead-ms", MOON_CONFIG_U64, DIST_AT(peer_dead_ms), .dflt = "10000",
     .doc = "silence after which a suspected rank is lost though its death was not seen "
            "(at least 2x peer-timeout-ms and 4x the longest silence it came back from)",
     .min = 1, .max = 86400000},
    {"slice-bytes", MOON_CONFIG_SIZE, DIST_AT(slice_bytes), .dflt = "0",
     .doc = "bulk transfer slice (0: the transport's, 1m shared memory, 128k tcp; "
            "else at least 4k)",
     .max = 1ull << 30},
    {"dist-trace", MOON_CONFIG_STRING, DIST_AT(trace_dir), .dflt = NULL,
     .doc = "directory for per-rank message traces (trace.<rank>.log)"},
    {"dist-spin", MOON_CONFIG_U32, DIST_AT(spin_passes), .dflt = "256",
     .doc = "idle progress passes (yielding after the first few; 100 us at most) before sleeping",
     .min = 1, .max = 1u << 24},
    {"dist-images", MOON_CONFIG_BOOL, DIST_AT(images), .dflt = "1",
     .doc = "ranks of one host exchange message images (0: msgpack to every peer)"},
    {"dist-direct", MOON_CONFIG_BOOL, DIST_AT(direct), .dflt = "1",
     .doc = "a handler's first message leaves at once (0: every send queues)"},
    {"dist-worker-poll", MOON_CONFIG_BOOL, DIST_AT(worker_poll), .dflt = "1",
     .doc = "idle workers drive network progress themselves"},
    {"split-hosts", MOON_CONFIG_U32, DIST_AT(split_hosts), .dflt = "0",
     .doc = "> 1: ranks count as that many hosts (rank % n), to test multi-host paths",
     .max = 1u << 16},
    {"shm-rings", MOON_CONFIG_BOOL, DIST_AT(shm_rings), .dflt = "1",
     .doc = "frames to ranks of this host go through moonlet's shared-memory rings"},
    {"shm-ring-kib", MOON_CONFIG_U32, DIST_AT(shm_ring_kib), .dflt = "256",
     .doc = "size of each shared-memory frame ring, KiB", .min = 4, .max = 1u << 20},
    MOON_CONFIG_END,
};

const moon_config_table_t moon_dist_config_table = {"dist", "distributed runtime", "MOON_",
                                                    dist_fields};

moon_status_t moon_dist_config_default(moon_dist_config_t *cfg)
{
    return cfg == NULL ? MOON_ERR_INVALID_PARAM
                       : moon_config_from_env(&moon_dist_config_table, cfg);
}
