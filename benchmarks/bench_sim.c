/* benchmarks/bench_sim.c - simulator speed: one replay of a trace on a
 * simulated cluster (launch/sim/sim_run.h), wall time, simulated requests per
 * wall second and peak memory, against issue #16's targets (the synthetic
 * trace on 16 nodes in < 10 s; 12,000 requests over an hour on 128 nodes in
 * < 60 s, on one core). One configuration per process (peak RSS is the
 * process's). --copies N concatenates the trace N times (fresh hash ids,
 * shifted times), --requests caps it, --span-s time-scales it to that span.
 * --kv-scale N multiplies the profile's HBM and store DRAM: KV payloads are
 * virtual in simulation, so peak memory must not follow (two configurations
 * differing only in it, one process each).
 * With --anchor=POLICY it is a policy comparison instead: --policy (default
 * moonlet+reject) and the anchor (e.g. mooncake+reject) on the same trace
 * and SLO (--ttft-slo-ms, --tbt-slo-ms, --time-scale), their goodput and
 * the ratio. Prints one JSON line. */
#include "bench_util.h"
#include "profile.h"
#include "sim_run.h"
#include "trace.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* copies of t back to back as JSONL text (ids offset, times shifted) */
static char *concat(const moon_trace_t *t, int copies, size_t max_reqs, size_t *len_p)
{
    uint64_t max_id = 0, span = t->reqs[t->n_reqs - 1].timestamp_ms + 1;
    size_t   cap = 1 << 20, len = 0, n = 0;
    char    *buf = malloc(cap);

    for (size_t i = 0; i < t->n_ids; i++) {
        max_id = t->ids[i] > max_id ? t->ids[i] : max_id;
    }
    for (int k = 0; buf != NULL && k < copies; k++) {
        for (size_t i = 0; i < t->n_reqs && (max_reqs == 0 || n < max_reqs); i++, n++) {
            const moon_trace_req_t *r = &t->reqs[i];
            if (cap - len < 64 + (size_t)r->n_hash_ids * 24) {
                cap = 2 * cap + (size_t)r->n_hash_ids * 24;
                buf = realloc(buf, cap);
                if (buf == NULL) {
                    return NULL;
                }
            }
            len += (size_t)snprintf(buf + len, cap - len,
                                    "{\"timestamp\":%llu,\"input_length\":%u,\"output_length\":%u,"
                                    "\"hash_ids\":[",
                                    (unsigned long long)(r->timestamp_ms + k * span),
                                    r->input_length, r->output_length);
            for (uint32_t j = 0; j < r->n_hash_ids; j++) {
                len += (size_t)snprintf(buf + len, cap - len, "%s%llu", j ? "," : "",
                                        (unsigned long long)(r->hash_ids[j] + k * (max_id + 1)));
            }
            len += (size_t)snprintf(buf + len, cap - len, "]}\n");
        }
    }
    *len_p = len;
    return buf;
}

/* One replay of cfg: its summary at the SLO, 0 on success. */
static int replay(const moon_sim_run_config_t *cfg, moon_sim_summary_t *s, double *wall_p)
{
    moon_sim_records_t recs;
    uint64_t           t0;
    int                bad;

    if (moon_sim_records_init(&recs, (uint32_t)cfg->trace->n_reqs) != MOON_OK) {
        return 1;
    }
    t0      = moon_bench_now_ns();
    bad     = moon_replay_sim_run(cfg, &recs) != MOON_OK;
    *wall_p = (double)(moon_bench_now_ns() - t0) * 1e-9;
    bad     = bad || moon_sim_summarize(&recs, cfg->ttft_slo_s, cfg->tbt_slo_s, s) != MOON_OK;
    moon_sim_records_fini(&recs);
    return bad;
}

static void put_summary(moon_bench_json_t *j, const char *prefix, const moon_sim_summary_t *s)
{
    char k[64];

#define PUT(_name, _v)                                                                             \
    do {                                                                                           \
        snprintf(k, sizeof(k), "%s%s", prefix, _name);                                             \
        moon_bench_json_num(j, k, _v);                                                             \
    } while (0)
    PUT("goodput_rps", s->goodput_rps);
    PUT("slo_attainment", s->slo_attainment);
    PUT("ttft_mean_s", s->ttft_mean_s);
    PUT("ttft_p90_s", s->ttft_p90_s);
    PUT("tbt_mean_s", s->tbt_mean_s);
    PUT("tbt_p90_s", s->tbt_p90_s);
#undef PUT
}

/* --anchor: policy against anchor on cfg's trace and SLO, one JSON line. */
static int compare(moon_sim_run_config_t *cfg, const char *policy, const char *anchor,
                   int64_t nodes)
{
    moon_sim_summary_t s, a;
    moon_bench_json_t  j;
    double             wall, wall_a;

    cfg->policy = policy;
    if (replay(cfg, &s, &wall) != 0) {
        return 1;
    }
    cfg->policy = anchor;
    if (replay(cfg, &a, &wall_a) != 0) {
        return 1;
    }
    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "bench", "sim_goodput");
    moon_bench_json_str(&j, "policy", policy);
    moon_bench_json_str(&j, "anchor", anchor);
    moon_bench_json_int(&j, "requests", (int64_t)cfg->trace->n_reqs);
    moon_bench_json_int(&j, "nodes", nodes);
    moon_bench_json_num(&j, "time_scale", cfg->time_scale);
    moon_bench_json_num(&j, "ttft_slo_s", cfg->ttft_slo_s);
    moon_bench_json_num(&j, "tbt_slo_s", cfg->tbt_slo_s);
    put_summary(&j, "", &s);
    put_summary(&j, "anchor_", &a);
    moon_bench_json_num(&j, "wall_s", wall + wall_a);
    moon_bench_json_num(&j, "ratio", a.goodput_rps > 0 ? s.goodput_rps / a.goodput_rps : 0.0);
    moon_bench_json_end(&j);
    return 0;
}

int main(int argc, char **argv)
{
    const char *path     = moon_bench_arg_str(argc, argv, "trace", NULL);
    const char *prof     = moon_bench_arg_str(argc, argv, "profile", MOON_PROFILE_DEFAULT);
    int64_t     nodes    = moon_bench_arg_int(argc, argv, "nodes", 16);
    int64_t     copies   = moon_bench_arg_int(argc, argv, "copies", 1);
    int64_t     max_req  = moon_bench_arg_int(argc, argv, "requests", 0);
    int64_t     span_s   = moon_bench_arg_int(argc, argv, "span-s", 0);
    int64_t     target   = moon_bench_arg_int(argc, argv, "target-s", 0);
    int64_t     kv_scale = moon_bench_arg_int(argc, argv, "kv-scale", 1);
    const char *policy   = moon_bench_arg_str(argc, argv, "policy", "moonlet+reject");
    const char *anchor   = moon_bench_arg_str(argc, argv, "anchor", NULL);
    double ttft_slo = strtod(moon_bench_arg_str(argc, argv, "ttft-slo-ms", "30000"), NULL) * 1e-3;
    double tbt_slo  = strtod(moon_bench_arg_str(argc, argv, "tbt-slo-ms", "100"), NULL) * 1e-3;
    double tscale   = strtod(moon_bench_arg_str(argc, argv, "time-scale", "1"), NULL);
    moon_trace_t         *t = NULL, *all = NULL;
    moon_profile_t        p;
    moon_sim_run_config_t cfg;
    moon_sim_summary_t    s;
    moon_bench_json_t     j;
    char                 *text;
    size_t                len;
    double                wall, scale = 1.0;

    if (path == NULL || nodes < 2 || copies < 1 || kv_scale < 1 || !(ttft_slo > 0) ||
        !(tbt_slo > 0) || !(tscale > 0) || moon_trace_load(path, NULL, &t, NULL) != MOON_OK ||
        moon_profile_load(prof, NULL, &p, NULL) != MOON_OK) {
        fprintf(stderr, "usage: bench_sim --trace=T.jsonl [--nodes=16] [--copies=1] "
                        "[--requests=0] [--span-s=0] [--profile=NAME] [--target-s=0] "
                        "[--kv-scale=1]\n"
                        "       [--anchor=POLICY [--policy=moonlet+reject] [--ttft-slo-ms=30000] "
                        "[--tbt-slo-ms=100] [--time-scale=1]]\n");
        return 2;
    }
    p.device.mem_bytes *= (double)kv_scale;
    p.store.dram_bytes *= (double)kv_scale;
    text = concat(t, (int)copies, (size_t)max_req, &len);
    if (text == NULL || moon_trace_parse(text, len, NULL, &all, NULL) != MOON_OK) {
        return 1;
    }
    free(text);
    if (span_s > 0 && all->reqs[all->n_reqs - 1].timestamp_ms > 0) {
        scale = (double)span_s * 1e3 / (double)all->reqs[all->n_reqs - 1].timestamp_ms;
    }
    cfg = (moon_sim_run_config_t){.trace         = all,
                                  .profile       = &p,
                                  .nodes_prefill = (uint32_t)(nodes / 2),
                                  .nodes_decode  = (uint32_t)(nodes - nodes / 2),
                                  .block_tokens  = 512,
                                  .ttft_slo_s    = anchor ? ttft_slo : 30,
                                  .tbt_slo_s     = anchor ? tbt_slo : 0.1,
                                  .time_scale    = anchor ? scale * tscale : scale,
                                  .seed          = 1};
    if (anchor != NULL) {
        int bad = compare(&cfg, policy, anchor, nodes);
        moon_trace_destroy(all);
        moon_trace_destroy(t);
        return bad;
    }
    if (replay(&cfg, &s, &wall) != 0) {
        return 1;
    }
    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "bench", "sim_speed");
    moon_bench_json_str(&j, "profile", p.name);
    moon_bench_json_int(&j, "requests", (int64_t)all->n_reqs);
    moon_bench_json_int(&j, "nodes", nodes);
    moon_bench_json_int(&j, "kv_scale", kv_scale);
    /* the KV the cluster models: every instance's HBM left for KV, every node's store DRAM */
    moon_bench_json_num(&j, "modeled_kv_gib",
                        (double)nodes * (moon_profile_kv_capacity_bytes(&p) + p.store.dram_bytes) /
                            (1024.0 * 1024.0 * 1024.0));
    moon_bench_json_num(&j, "trace_span_s",
                        (double)all->reqs[all->n_reqs - 1].timestamp_ms * scale * 1e-3);
    moon_bench_json_num(&j, "wall_s", wall);
    moon_bench_json_num(&j, "sim_req_per_wall_s", (double)all->n_reqs / wall);
    moon_bench_json_num(&j, "peak_rss_mib", moon_bench_peak_rss_mib());
    moon_bench_json_num(&j, "completed", (double)s.completed);
    moon_bench_json_num(&j, "ttft_mean_s", s.ttft_mean_s);
    moon_bench_json_num(&j, "cache_hit_ratio", s.cache_hit_ratio);
    if (target > 0) {
        moon_bench_json_int(&j, "target_wall_s", target);
        moon_bench_json_num(&j, "ratio", wall / (double)target);
    }
    moon_bench_json_end(&j);
    moon_trace_destroy(all);
    moon_trace_destroy(t);
    return 0;
}
