/* launch/sim/sim_net.c - busy-until lanes per NIC direction and per store medium;
 * a transfer books its stripes and media lanes and ends at the last of them
 * plus the link latency (sim_net.h). */
#include "sim_net.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <math.h>

struct moon_sim_net {
    moon_sim_net_config_t cfg;
    uint64_t             *egress;  /* (n_nodes, nics) busy-until ns */
    uint64_t             *ingress; /* (n_nodes, nics) */
    uint64_t             *media;   /* (n_nodes, 3): HBM slot unused */
    moon_sim_net_stats_t  stats;
};

moon_sim_net_config_t moon_sim_net_config_from_profile(const moon_profile_t *p, uint32_t n_nodes)
{
    moon_sim_net_config_t c = {
        .n_nodes          = n_nodes,
        .nics_per_node    = p->network.nics_per_node,
        .nic_bytes_per_s  = moon_profile_nic_bytes_per_s(p),
        .latency_s        = p->network.latency_s,
        .dram_bytes_per_s = p->store.dram_bytes_per_s,
        .ssd_bytes_per_s  = p->store.ssd_bytes_per_s,
    };
    return c;
}

moon_status_t moon_sim_net_create(const moon_sim_net_config_t *cfg, moon_sim_net_t **net_p)
{
    moon_sim_net_t *n;
    size_t          lanes;

    if (cfg == NULL || net_p == NULL || cfg->n_nodes == 0 || cfg->nics_per_node == 0 ||
        !(cfg->nic_bytes_per_s > 0.0) || !(cfg->dram_bytes_per_s > 0.0) ||
        !(cfg->ssd_bytes_per_s >= 0.0) || !(cfg->latency_s >= 0.0) ||
        !isfinite(cfg->nic_bytes_per_s + cfg->dram_bytes_per_s + cfg->ssd_bytes_per_s +
                  cfg->latency_s)) {
        MOON_ERROR("sim net: bad configuration");
        return MOON_ERR_INVALID_PARAM;
    }
    lanes = (size_t)cfg->n_nodes * cfg->nics_per_node;
    n     = moon_calloc(1, sizeof(*n));
    if (n == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    n->cfg     = *cfg;
    n->egress  = moon_calloc(lanes, sizeof(uint64_t));
    n->ingress = moon_calloc(lanes, sizeof(uint64_t));
    n->media   = moon_calloc((size_t)cfg->n_nodes * 3, sizeof(uint64_t));
    if (n->egress == NULL || n->ingress == NULL || n->media == NULL) {
        moon_sim_net_destroy(n);
        return MOON_ERR_NO_MEMORY;
    }
    *net_p = n;
    return MOON_OK;
}

void moon_sim_net_destroy(moon_sim_net_t *n)
{
    if (n == NULL) {
        return;
    }
    moon_free(n->egress);
    moon_free(n->ingress);
    moon_free(n->media);
    moon_free(n);
}

static uint64_t secs_ns(double s)
{
    return (uint64_t)llround(s * 1e9);
}

static double media_rate(const moon_sim_net_config_t *c, moon_sim_media_t m)
{
    return m == MOON_SIM_MEDIA_DRAM  ? c->dram_bytes_per_s
           : m == MOON_SIM_MEDIA_SSD ? c->ssd_bytes_per_s
                                     : 0.0;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* Books node's media lane m for bytes from now; returns its end (now for HBM). */
static uint64_t book_media(moon_sim_net_t *n, uint32_t node, moon_sim_media_t m, uint64_t now,
                           uint64_t bytes)
{
    uint64_t *lane;

    if (m == MOON_SIM_MEDIA_HBM) {
        return now;
    }
    lane  = &n->media[(size_t)node * 3 + m];
    *lane = max64(now, *lane) + secs_ns((double)bytes / media_rate(&n->cfg, m));
    return *lane;
}

/* Index of the lane among lanes[0..k) that frees first (lowest on ties). */
static uint32_t first_free(const uint64_t *lanes, uint32_t k)
{
    uint32_t best = 0;

    for (uint32_t i = 1; i < k; i++) {
        if (lanes[i] < lanes[best]) {
            best = i;
        }
    }
    return best;
}

moon_status_t moon_sim_net_transfer(moon_sim_net_t *n, uint64_t now, uint32_t src,
                                    moon_sim_media_t src_media, uint32_t dst,
                                    moon_sim_media_t dst_media, uint64_t bytes, uint64_t *done_p)
{
    const moon_sim_net_config_t *c = &n->cfg;
    uint32_t                     k = c->nics_per_node;
    uint64_t                     done;

    if (src >= c->n_nodes || dst >= c->n_nodes || src_media > MOON_SIM_MEDIA_SSD ||
        dst_media > MOON_SIM_MEDIA_SSD ||
        ((src_media == MOON_SIM_MEDIA_SSD || dst_media == MOON_SIM_MEDIA_SSD) &&
         !(c->ssd_bytes_per_s > 0.0))) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (bytes == 0) {
        *done_p = now;
        return MOON_OK;
    }
    done =
        max64(book_media(n, src, src_media, now, bytes), book_media(n, dst, dst_media, now, bytes));
    n->stats.n_transfers++;
    if (src == dst) {
        n->stats.bytes_within_nodes += bytes;
        *done_p = done;
        return MOON_OK;
    }
    for (uint32_t s = 0; s < k; s++) {
        /* stripes as even as integers allow: the first bytes % k get one more */
        uint64_t  part = bytes / k + (s < bytes % k);
        uint64_t *eg   = n->egress + (size_t)src * k;
        uint64_t *in   = n->ingress + (size_t)dst * k;
        uint32_t  i = first_free(eg, k), j = first_free(in, k);
        uint64_t  end;

        if (part == 0) {
            break;
        }
        end   = max64(now, max64(eg[i], in[j])) + secs_ns((double)part / c->nic_bytes_per_s);
        eg[i] = end;
        in[j] = end;
        done  = max64(done, end);
    }
    n->stats.bytes_between_nodes += bytes;
    *done_p = done + secs_ns(c->latency_s);
    return MOON_OK;
}

uint64_t moon_sim_net_idle_ns(const moon_sim_net_t *n, int same_node, moon_sim_media_t src_media,
                              moon_sim_media_t dst_media, uint64_t bytes)
{
    const moon_sim_net_config_t *c = &n->cfg;
    double                       t = 0.0;

    if (bytes == 0) {
        return 0;
    }
    for (int e = 0; e < 2; e++) {
        moon_sim_media_t m = e ? dst_media : src_media;
        if (m == MOON_SIM_MEDIA_SSD && !(c->ssd_bytes_per_s > 0.0)) {
            return UINT64_MAX;
        }
        if (m != MOON_SIM_MEDIA_HBM && (double)bytes / media_rate(c, m) > t) {
            t = (double)bytes / media_rate(c, m);
        }
    }
    if (!same_node) {
        uint64_t part = bytes / c->nics_per_node + (bytes % c->nics_per_node != 0);
        uint64_t nic  = secs_ns((double)part / c->nic_bytes_per_s);
        return max64(secs_ns(t), nic) + secs_ns(c->latency_s);
    }
    return secs_ns(t);
}

void moon_sim_net_stats(const moon_sim_net_t *n, moon_sim_net_stats_t *stats_p)
{
    *stats_p = n->stats;
}
