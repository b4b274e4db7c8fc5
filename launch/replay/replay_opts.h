/* launch/replay/replay_opts.h - the options of `moonlet replay`, parsed strictly:
 * an unknown option, a missing or malformed value, or a value out of range is
 * an error that names the option. Pure C; no side effects besides the error
 * text.
 *
 *   --trace PATH          Mooncake JSONL trace (required but for --list-policies)
 *   --sim                 replay against a simulated cluster (virtual time);
 *                         without it (and --real): against a running server
 *                         over HTTP (--url; the policy is the server's)
 *   --url URL             that server (default http://127.0.0.1:8000)
 *   --real --model M      replay against a real cluster of the same actors in
 *                         this process (wall clock, the CPU engine on M):
 *                         the cross-check of the simulator
 *   --workers N --threads N   --real: runtime workers, engine threads
 *   --backend B           --real: the engine (cpu; cost: the profile's
 *                         modeled durations as wall-clock timers)
 *   --nodes-prefill P     prefill instances (default 8)
 *   --nodes-decode D      decode instances (default 8)
 *   --colocated           P + D instances that each prefill and decode
 *                         (vLLM-like baseline on the same nodes)
 *   --policy NAME         conductor policy (default: the scheduler's own,
 *                         "moonlet"); NAME+reject / NAME+noreject set early
 *                         rejection
 *   --compare LIST        comma-separated policies (or "all") run one after
 *                         another into DIR/NAME/, drawn together into DIR
 *   --ttft-slo-ms MS      TTFT SLO (default 30000)
 *   --tbt-slo-ms MS       TBT SLO (default 100)
 *   --time-scale X        arrival = timestamp * X (default 1; 0.5 = twice
 *                         the rate)
 *   --seed N              seed of the executor and the policies (default 1)
 *   --faults SPEC         --sim: seeded chaos (kills, pauses, lost and late
 *                         messages) and the invariants checked after the run
 *                         (launch/sim/sim_faults.h); exit 3 when one breaks
 *   --out DIR             output folder (created; required to run)
 *   --profile NAME|PATH   hardware/model profile (default llama3-70b-8xa800)
 *   --block-tokens N      KV block size of the deployment (default 512)
 *   --max-requests N      replay only the first N requests (default all)
 *   --block-scale N       tokens per trace block: every length scales by
 *                         N / 512 (as moonlet bench's --block-scale)
 *   --max-context C       clamp output to C - 1 and input to C - output
 *   --list-policies       print the policies and exit
 *   --help                print this and exit
 * Values come as "--opt VALUE" or "--opt=VALUE" (moonlet/config.h: one table,
 * moon_replay_config_table; flags only, no environment). */
#ifndef MOON_LAUNCH_REPLAY_OPTS_H
#define MOON_LAUNCH_REPLAY_OPTS_H

#include "moonlet/config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MOON_REPLAY_MAX_COMPARE 16

typedef struct {
    const char *trace;   /* borrowed from argv */
    const char *out;     /* borrowed */
    const char *profile; /* borrowed or a default string */
    const char *policy;  /* borrowed, NULL: the scheduler's default */
    const char *faults;  /* borrowed, NULL: no chaos (--sim only) */
    const char *compare; /* borrowed LIST as given, NULL: no comparison */
    int         sim, real, colocated, list_policies, help;
    const char *url;              /* over HTTP: the server (borrowed or the default) */
    const char *model;            /* --real: the GGUF served (borrowed) */
    uint32_t    workers, threads; /* --real: runtime workers, engine threads per instance */
    int         backend;          /* --real: moon_backend_kind_t */
    uint32_t    nodes_prefill, nodes_decode;
    uint32_t    block_tokens;
    uint64_t    max_requests; /* 0: all */
    uint32_t    block_scale;  /* 0: lengths as in the trace */
    uint32_t    max_context;  /* 0: no clamp */
    uint64_t    seed;
    double      ttft_slo_s, tbt_slo_s; /* seconds after parsing (the flags are ms) */
    double      time_scale;
    double      shed_after, shed_share; /* moonlet's shedding by cost (sched_policy.h) */
} moon_replay_opts_t;

/* Parses argv[1..argc) (argv[0] is the subcommand name) into *opts (filled
 * with defaults first). Returns 0, or -1 with a one-line reason in err. A
 * run (not --help or --list-policies) needs --trace; with --sim also --out. */
int moon_replay_opts_parse(int argc, char **argv, moon_replay_opts_t *opts, char *err,
                           size_t err_len);

/* What parse does after the table: the SLOs from ms to s, and the rules
 * between options. For a caller that parsed the table itself (moon_cli_parse).
 * 0, or -1 with the reason in err. */
int moon_replay_opts_finish(moon_replay_opts_t *opts, char *err, size_t err_len);

/* Splits the --compare LIST (borrowed text) into names[] (pointers into buf,
 * a copy the caller provides of buf_len bytes). "all": n_all names from all
 * (e.g. the scheduler's list). Returns the count, or -1 when empty, too many
 * (> MOON_REPLAY_MAX_COMPARE), a name repeated or buf too small. */
int moon_replay_split_compare(const char *list, char *buf, size_t buf_len,
                              const char *names[MOON_REPLAY_MAX_COMPARE], const char *const *all,
                              uint32_t n_all);

/* The options as a configuration table (flags only, no environment). */
extern const moon_config_table_t moon_replay_config_table;
/* The usage lines heading --help. */
extern const char moon_replay_usage[];

#endif /* MOON_LAUNCH_REPLAY_OPTS_H */
