/* launch/sim/profile.h - hardware and model profiles for the simulator and the
 * cost-model engine, read from JSON files (launch/sim/profiles/NAME.json), never
 * hard-coded. A profile describes one serving instance (a node, or the GPUs
 * one instance owns) and the cluster fabric around it:
 *
 * {
 *   "format": "moonlet-profile/1",
 *   "name": "llama3-70b-8xa800",            file's short name
 *   "doc": "one line",                       optional
 *   "model":   {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
 *               "head_dim", "vocab_size", "seq_len",
 *               "weight_bytes_per_param", "kv_bytes_per_elem"},
 *   "device":  {"name", "count",             devices per instance
 *               "flops_per_s",               peak dense, per device
 *               "prefill_efficiency",        achieved share of it in prefill (MFU)
 *               "decode_efficiency",         ... in decode GEMMs
 *               "mem_bytes_per_s",           HBM bandwidth, per device
 *               "mem_efficiency",            achieved share of it
 *               "mem_bytes",                 HBM capacity, per device
 *               "mem_usable",                share usable for weights + KV
 *               "step_overhead_s"},          fixed cost per engine call
 *   "network": {"nics_per_node", "nic_bits_per_s" (per NIC, line rate),
 *               "nic_efficiency" (achieved share), "latency_s" (per transfer)},
 *   "store":   {"dram_bytes", "dram_bytes_per_s", "ssd_bytes", "ssd_bytes_per_s"}
 *                                            per node
 *   "fitted":  {"a0", "a1", "a2", "d0", "d1", "d2", "handoff_s", "request_s",
 *               "step_gap_s", "source"}  optional (the last four optional: 0, "")
 * }
 * Every number is finite; counts are integers >= 1; rates, sizes and
 * efficiencies (in (0, 1]) are > 0 except ssd_bytes, ssd_bytes_per_s and
 * step_overhead_s (>= 0: no SSD tier, no overhead). A present "fitted"
 * section (written by calibration: timing the real engine, see
 * moonlet/model.h's fitted form) replaces the device's roofline in the cost
 * model; the rest of the file still sizes memory, network and store. Unknown
 * or missing keys are errors naming the key.
 *
 * Pure C (cJSON); a profile is a plain value, no threads. */
#ifndef MOON_LAUNCH_PROFILE_H
#define MOON_LAUNCH_PROFILE_H

#include "moonlet/model.h"
#include "moonlet/status.h"

#define MOON_PROFILE_FORMAT "moonlet-profile/1"
#define MOON_PROFILE_DEFAULT "llama3-70b-8xa800"

typedef struct {
    char                name[64];
    char                doc[512];
    moon_model_config_t shape; /* norm_eps, rope_theta: defaults (unused by the cost model) */
    double              weight_bytes_per_param;
    uint32_t            kv_bytes_per_elem;
    struct {
        char     name[64];
        uint32_t count;
        double   flops_per_s, prefill_efficiency, decode_efficiency;
        double   mem_bytes_per_s, mem_efficiency, mem_bytes, mem_usable;
        double   step_overhead_s;
    } device;
    struct {
        uint32_t nics_per_node;
        double   nic_bits_per_s, nic_efficiency, latency_s;
    } network;
    struct {
        double dram_bytes, dram_bytes_per_s, ssd_bytes, ssd_bytes_per_s;
    } store;
    moon_cost_fit_t fit;             /* enabled: the file had a "fitted" section */
    char            fit_source[128]; /* the fit's "source" ("" when none) */
    double          fit_handoff_s;   /* the fit's "handoff_s" (optional, 0): what a real
                                        instance pays per engine call on top of it (the
                                        runner's round trip); moon_profile_cost adds it to
                                        a0 and d0 */
    double fit_request_s;            /* the fit's "request_s" (optional, 0): what a real
                                        prefill instance spends per request outside its
                                        engine calls (the store's round trips, the
                                        hand-over); the simulator's prefill instances
                                        charge it with each request's first chunk */
    double fit_step_gap_s;           /* the fit's "step_gap_s" (optional, 0): what a real
                                        decode step costs in service past its modeled
                                        time (the token's way out, the other instances'
                                        threads on the same cores); moon_profile_cost
                                        adds it to d0 */
} moon_profile_t;

typedef struct {
    char msg[200]; /* names the file and key */
} moon_profile_error_t;

/* Loads a profile: spec is a file path (contains '/' or ends in ".json") or a
 * name looked up as dir/NAME.json (dir may be NULL: the built-in profile
 * folder, launch/sim/profiles of the source tree). Fills *profile_p on success
 * only. err_p (may be NULL) gets the reason, also logged once.
 * MOON_ERR_NOT_FOUND / MOON_ERR_IO: the file; MOON_ERR_CORRUPT: bad JSON, an
 * unknown, missing or out-of-range key; MOON_ERR_INVALID_PARAM: NULL args. */
moon_status_t moon_profile_load(const char *spec, const char *dir, moon_profile_t *profile_p,
                                moon_profile_error_t *err_p);
/* The same from JSON text (NUL-terminated); name is used in messages. */
moon_status_t moon_profile_parse(const char *text, const char *name, moon_profile_t *profile_p,
                                 moon_profile_error_t *err_p);
/* Writes the profile as JSON to path (the format above, "fitted" only when
 * fit.enabled); a written file loads back to an equal profile.
 * MOON_ERR_IO (logged), MOON_ERR_NO_MEMORY. */
moon_status_t moon_profile_write(const moon_profile_t *profile, const char *path);
/* Sets the fitted coefficients (calibration): fit->enabled is forced to 1;
 * source (may be NULL) says where they came from. MOON_ERR_INVALID_PARAM
 * when a coefficient is negative or not finite (nothing changed). */
moon_status_t moon_profile_set_fit(moon_profile_t *profile, const moon_cost_fit_t *fit,
                                   const char *source);

/* The cost model of one instance: effective rates (count * peak *
 * efficiency), weights at weight_bytes_per_param, the fit when there is
 * one. Passes moon_cost_check for any loaded profile. */
moon_cost_config_t moon_profile_cost(const moon_profile_t *profile);
/* Bytes of KV one instance can hold: count * mem_bytes * mem_usable minus
 * the weights (0 when the weights do not fit). */
double moon_profile_kv_capacity_bytes(const moon_profile_t *profile);
/* Effective bytes per second of one NIC (bits / 8 * efficiency). */
double moon_profile_nic_bytes_per_s(const moon_profile_t *profile);

#endif /* MOON_LAUNCH_PROFILE_H */
