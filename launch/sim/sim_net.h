/* launch/sim/sim_net.h - the simulator's network and storage-media model: how long
 * a KV move takes (prefill -> decode handover, store -> prefill fetch,
 * prefill -> store put) given its bytes, the NICs of both ends, the link
 * latency and the store media (DRAM, SSD) it reads or writes.
 *
 * Every node has nics_per_node NICs, each with an egress and an ingress lane
 * of nic_bytes_per_s, and one DRAM and one SSD lane. A transfer between two
 * nodes is striped evenly over nics_per_node NIC pairs (as Mooncake's
 * Transfer Engine uses every NIC); each stripe takes the source NIC whose
 * egress frees first and the destination NIC whose ingress frees first
 * (lowest index on ties) and holds both from max(now, their busy-until) for
 * stripe_bytes / nic_bytes_per_s. A media lane (DRAM or SSD of an end that
 * reads or writes one) is held likewise for bytes / its rate. The data flows
 * through them as a pipeline, so the transfer is done at
 *   max(every stripe's end, every media lane's end) + latency_s.
 * Busy-until queues are FIFO: concurrent transfers through a NIC or a medium
 * share it by taking turns, so its throughput never exceeds its rate.
 * Within one node no NIC is used (media lanes only, no latency); HBM is not a
 * lane (GPU memory is never the bottleneck here).
 *
 * Deterministic: times are integer nanoseconds, the same calls give the same
 * answers. Pure C; one thread at a time per model. */
#ifndef MOON_LAUNCH_SIM_NET_H
#define MOON_LAUNCH_SIM_NET_H

#include "profile.h"

#include "moonlet/status.h"

#include <stdint.h>

typedef enum {
    MOON_SIM_MEDIA_HBM  = 0, /* instance memory: no lane */
    MOON_SIM_MEDIA_DRAM = 1, /* the node's store DRAM */
    MOON_SIM_MEDIA_SSD  = 2, /* the node's store SSD */
} moon_sim_media_t;

typedef struct {
    uint32_t n_nodes;
    uint32_t nics_per_node;   /* >= 1 */
    double   nic_bytes_per_s; /* effective, per NIC and direction */
    double   latency_s;       /* added once per transfer between nodes */
    double   dram_bytes_per_s;
    double   ssd_bytes_per_s; /* 0: no SSD tier */
} moon_sim_net_config_t;

typedef struct moon_sim_net moon_sim_net_t;

typedef struct {
    uint64_t n_transfers;
    uint64_t bytes_between_nodes;
    uint64_t bytes_within_nodes;
} moon_sim_net_stats_t;

/* The network of n_nodes nodes of the profile (its NICs, latency, store
 * media). */
moon_sim_net_config_t moon_sim_net_config_from_profile(const moon_profile_t *profile,
                                                       uint32_t              n_nodes);

/* MOON_ERR_INVALID_PARAM: no nodes or NICs, a rate not > 0 (SSD may be 0),
 * latency < 0; MOON_ERR_NO_MEMORY. *net_p on success only. */
moon_status_t moon_sim_net_create(const moon_sim_net_config_t *cfg, moon_sim_net_t **net_p);
void          moon_sim_net_destroy(moon_sim_net_t *net); /* NULL: no-op */

/* Books a move of bytes from node src (reading src_media) to node dst
 * (writing dst_media) starting no earlier than now_ns; *done_ns_p gets its
 * completion time (now_ns for 0 bytes, which books nothing). now_ns must not
 * go backwards between calls (virtual time). MOON_ERR_INVALID_PARAM (nothing
 * booked): a node out of range, SSD media without an SSD tier. */
moon_status_t moon_sim_net_transfer(moon_sim_net_t *net, uint64_t now_ns, uint32_t src,
                                    moon_sim_media_t src_media, uint32_t dst,
                                    moon_sim_media_t dst_media, uint64_t bytes,
                                    uint64_t *done_ns_p);

/* What the same transfer would take on an idle network (no booking): the
 * scheduler's transfer prediction. */
uint64_t moon_sim_net_idle_ns(const moon_sim_net_t *net, int same_node, moon_sim_media_t src_media,
                              moon_sim_media_t dst_media, uint64_t bytes);

void moon_sim_net_stats(const moon_sim_net_t *net, moon_sim_net_stats_t *stats_p);

#endif /* MOON_LAUNCH_SIM_NET_H */
