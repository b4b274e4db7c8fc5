/* moonlet/plugin.h - plugins: shared libraries that `moonlet serve --plugin
 * PATH.so[:ARGS]` (every rank) and `moonlet replay --sim --plugin` load
 * before the cluster starts. A plugin exports one symbol, moon_plugin_entry
 * (MOON_PLUGIN_DEFINE), whose ABI version the host checks before calling
 * anything; its init registers, through the host handle:
 *  - message types, with ids in the PLUGIN range of MOON_MSG_RANGES (msg.h);
 *  - actors (an ops table), placed by `--place NAME=WHERE` or the plugin's
 *    default and kept alive by a supervisor (a failing one is restarted);
 *    each is registered as NAME/<rank>, and the one on the lowest rank as
 *    NAME too, resolvable from every rank;
 *  - placement policies (sched_policy.h), chosen with `--policy NAME`;
 *  - request filters: the conductor sends MOON_MSG_PLUGIN_FILTER to the
 *    filter's actor before placing a request and waits for its
 *    MOON_MSG_PLUGIN_VERDICT at most deadline_ms (then fails open or closed);
 *  - observers: MOON_MSG_PLUGIN_EVENT to an actor for the request and store
 *    events it subscribed to.
 * Threading: init and the register functions run on the main thread, before
 * the cluster starts; registered tables are borrowed for the life of the
 * process (a plugin is never unloaded while the process runs). Plugin actors
 * follow the runtime's rules (actor.h). */
#ifndef MOONLET_PLUGIN_H
#define MOONLET_PLUGIN_H

#include "moonlet/actor.h"
#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/msg.h"
#include "moonlet/sched_policy.h"

MOON_EXTERN_C_BEGIN

/* Bumped whenever a type or function below changes incompatibly. */
#define MOON_PLUGIN_ABI_VERSION 2u /* 2: tokens come batched (MOON_MSG_PLUGIN_TOKENS) */
#define MOON_PLUGIN_ENTRY_SYMBOL "moon_plugin_entry"

typedef struct moon_plugin_host moon_plugin_host_t; /* opaque: one per loaded plugin */

/* args: the text after ':' in --plugin PATH.so:ARGS ("" if none); borrowed for
 * the call. Any status but MOON_OK fails the start (the host logs it). */
typedef moon_status_t (*moon_plugin_init_fn)(moon_plugin_host_t *host, const char *args);

typedef struct {
    uint32_t            abi_version; /* MOON_PLUGIN_ABI_VERSION of the headers it was built with */
    const char         *name;        /* for logs */
    moon_plugin_init_fn init;
    void (*fini)(void); /* optional (NULL): at process end, after the runtime stopped */
} moon_plugin_entry_t;

/* In the plugin, once: MOON_PLUGIN_DEFINE("audit", audit_init, NULL); */
#define MOON_PLUGIN_DEFINE(_name, _init, _fini)                                                    \
    MOON_API const moon_plugin_entry_t moon_plugin_entry = {MOON_PLUGIN_ABI_VERSION, (_name),      \
                                                            (_init), (_fini)}

/* ---- messages ----------------------------------------------------------------- */
/* Registers a descriptor table (MOON_MSG_DEFINE; declare the list with
 * MOON_MSG_DECLARE_IN(LIST, PLUGIN, END)). MOON_ERR_INVALID_PARAM (logged,
 * nothing registered): an id outside the PLUGIN range; MOON_ERR_EXISTS
 * (logged): an id another plugin took. */
MOON_API moon_status_t moon_plugin_register_msgs(moon_plugin_host_t    *host,
                                                 const moon_msg_desc_t *descs);

/* ---- actors ------------------------------------------------------------------- */
typedef struct {
    const char             *name; /* [a-z0-9_-], at most 47 characters; copied */
    const moon_actor_ops_t *ops;  /* borrowed for the life of the process */
    const void             *args; /* copied (args_bytes) and given to init */
    size_t                  args_bytes;
    /* where it runs unless --place NAME=WHERE says: ranks ("0", "1-3", "0,2"),
     * "all", or a role ("conductor", "prefill", "decode", "store": one on each
     * rank that runs one). NULL: "0". */
    const char *place;
    uint32_t    max_restarts; /* within window_ns, then it stays down (0: 5 in 10 s) */
    uint64_t    window_ns;
} moon_plugin_actor_t;

/* MOON_ERR_INVALID_PARAM (logged): bad name, no ops; MOON_ERR_EXISTS: the
 * name is taken; MOON_ERR_NO_RESOURCE: too many actors (32 in all). */
MOON_API moon_status_t moon_plugin_register_actor(moon_plugin_host_t        *host,
                                                  const moon_plugin_actor_t *actor);

/* ---- placement policies ------------------------------------------------------- */
/* As moon_sched_policy_register (its statuses). */
MOON_API moon_status_t moon_plugin_register_policy(moon_plugin_host_t            *host,
                                                   const moon_sched_policy_def_t *def);

/* ---- request filters ---------------------------------------------------------- */
typedef struct {
    const char *actor;       /* a registered plugin actor's name; copied */
    uint32_t    deadline_ms; /* the verdict's deadline (0: 100 ms) */
    int         fail_open;   /* no verdict in time: 1 accept, 0 reject (503) */
} moon_plugin_filter_t;

/* Filters run in registration order; a request goes on after every one
 * accepted it. MOON_ERR_INVALID_PARAM (logged): no actor name;
 * MOON_ERR_NO_RESOURCE: more than 8 filters. */
MOON_API moon_status_t moon_plugin_register_filter(moon_plugin_host_t         *host,
                                                   const moon_plugin_filter_t *filter);

/* ---- observers ---------------------------------------------------------------- */
typedef enum {
    MOON_PLUGIN_EV_ADMITTED    = 0x01, /* placed (conductor): prefill/decode_instance set */
    MOON_PLUGIN_EV_FIRST_TOKEN = 0x02, /* decode: index 0, ttft_ns set */
    MOON_PLUGIN_EV_TOKEN       = 0x04, /* decode: every token, one TOKENS per step */
    MOON_PLUGIN_EV_FINISHED    = 0x08, /* conductor: released; finish, usage, timings */
    MOON_PLUGIN_EV_REJECTED    = 0x10, /* conductor: refused (filter, SLO, bad input) */
    MOON_PLUGIN_EV_STORED      = 0x20, /* a store shard holds a new block (key_lo, key_hi) */
    MOON_PLUGIN_EV_EVICTED     = 0x40, /* a store shard dropped one */
} moon_plugin_ev_t;

typedef struct {
    const char *actor; /* a registered plugin actor's name; copied. Events from a rank go to
                          NAME/<that rank> when it runs one, else to NAME */
    uint32_t events;   /* moon_plugin_ev_t mask */
} moon_plugin_observer_t;

/* Events are best effort (a full mailbox or a lost rank drops them; the
 * request is never held up). MOON_ERR_INVALID_PARAM (logged): no actor or
 * no events; MOON_ERR_NO_RESOURCE: more than 8 observers. */
MOON_API moon_status_t moon_plugin_register_observer(moon_plugin_host_t           *host,
                                                     const moon_plugin_observer_t *obs);

/* ---- the hooks' messages (ids in the HOOKS range) ---------------------------- */
typedef enum {
    MOON_PLUGIN_ACCEPT = 0, /* go on (max_tokens / temperature changed when set) */
    MOON_PLUGIN_REJECT = 1, /* answer http_status (0: 429) with message, Retry-After if > 0 */
} moon_plugin_verdict_kind_t;

/* conductor -> filter actor: a request before placement. token: echo it. */
#define MOON_PLUGIN_FILTER_FIELDS(F, T)                                                            \
    F(T, u64, token)                                                                               \
    F(T, addr, client)                                                                             \
    F(T, u64, request_id)                                                                          \
    F(T, u32, n_prompt)                                                                            \
    F(T, u32, max_tokens)                                                                          \
    F(T, f32, temperature)                                                                         \
    F(T, u32, slo_class) F(T, u64, now_ns) F(T, str, key) F(T, str, session)
/* filter actor -> conductor (the FILTER's hdr.src). max_tokens 0 and
 * temperature < 0: unchanged. */
#define MOON_PLUGIN_VERDICT_FIELDS(F, T)                                                           \
    F(T, u64, token)                                                                               \
    F(T, u32, verdict)                                                                             \
    F(T, u32, http_status)                                                                         \
    F(T, u32, retry_after_s) F(T, u32, max_tokens) F(T, f32, temperature) F(T, str, message)
/* -> observer. A request is (client, request_id). at_ns: when (the sending
 * rank's clock); arrival_ns: the conductor's. */
#define MOON_PLUGIN_EVENT_FIELDS(F, T)                                                             \
    F(T, u32, kind)                                                                                \
    F(T, addr, client)                                                                             \
    F(T, u64, request_id)                                                                          \
    F(T, u32, index)                                                                               \
    F(T, u32, token)                                                                               \
    F(T, u32, n_prompt)                                                                            \
    F(T, u32, n_completion)                                                                        \
    F(T, u32, finish)                                                                              \
    F(T, i32, status)                                                                              \
    F(T, u32, http_status)                                                                         \
    F(T, i32, prefill_instance)                                                                    \
    F(T, i32, decode_instance)                                                                     \
    F(T, u64, arrival_ns)                                                                          \
    F(T, u64, at_ns)                                                                               \
    F(T, u64, ttft_ns)                                                                             \
    F(T, u64, key_lo) F(T, u64, key_hi) F(T, str, key) F(T, str, message)

/* decode -> observer of MOON_PLUGIN_EV_TOKEN: the tokens of one decode step
 * of one instance (fewer when a step has more than a message holds), the
 * same batching as the clients' TOKENS, so an observer costs one message per
 * step, not one per token. Entry i: token[i] at index[i] of request
 * (client[i], request_id[i]); n = client.n. at_ns: the step's end. */
#define MOON_PLUGIN_TOKENS_FIELDS(F, T)                                                            \
    F(T, u64, at_ns)                                                                               \
    F(T, u64s, client) F(T, u64s, request_id) F(T, u32s, index) F(T, u32s, token)

#define MOON_PLUGIN_MSGS(X)                                                                        \
    X(MOON_MSG_PLUGIN_FILTER, moon_plugin_filter_req_t, MOON_PLUGIN_FILTER_FIELDS)                 \
    X(MOON_MSG_PLUGIN_VERDICT, moon_plugin_verdict_t, MOON_PLUGIN_VERDICT_FIELDS)                  \
    X(MOON_MSG_PLUGIN_EVENT, moon_plugin_event_t, MOON_PLUGIN_EVENT_FIELDS)                        \
    X(MOON_MSG_PLUGIN_TOKENS, moon_plugin_tokens_t, MOON_PLUGIN_TOKENS_FIELDS)
MOON_MSG_DECLARE_IN(MOON_PLUGIN_MSGS, HOOKS, MOON_MSG_PLUGIN_END)
MOON_API extern const moon_msg_desc_t moon_plugin_msg_descs[];

/* A filter actor's answer to q (borrowed): sends VERDICT to q's sender from
 * self. message: NULL or text for the client (copied). MOON_ERR_NO_MEMORY, or
 * moon_send's status. */
MOON_API moon_status_t moon_plugin_answer(moon_actor_t *self, const moon_plugin_filter_req_t *q,
                                          uint32_t verdict, uint32_t http_status,
                                          uint32_t retry_after_s, const char *message);

/* moon_sched_request_t.affinity of a session field: its 64-bit FNV-1a hash
 * (never 0). */
static inline uint64_t moon_plugin_affinity(const char *session)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (const unsigned char *p = (const unsigned char *)session; *p != '\0'; p++) {
        h = (h ^ *p) * 0x100000001b3ull;
    }
    return h != 0 ? h : 1;
}

/* The events' kind names ("admitted", "first_token", ...); "?" for others. */
MOON_API const char *moon_plugin_ev_str(uint32_t kind);

/* ---- the host side: what `moonlet serve` does, for programs of one's own ---- */
/* Main thread, at start-up (load, place, start) and the end (stop, unload). */
/* Loads "PATH.so[:ARGS]": dlopen, the entry symbol and its ABI version,
 * then the plugin's init. Every failure is logged with the path and its
 * cause: MOON_ERR_NOT_FOUND (the file does not load, or a symbol it needs
 * is missing), MOON_ERR_UNSUPPORTED (no entry symbol: not a plugin; or
 * another ABI version), MOON_ERR_NO_RESOURCE (MOON_PLUGIN_MAX loaded), or
 * init's status. */
MOON_API moon_status_t moon_plugin_load(const char *spec);

/* Records a `--place NAME=WHERE` (see moon_plugin_actor_t.place), after the
 * plugins are loaded; applied by moon_plugin_start. MOON_ERR_INVALID_PARAM
 * (logged): no '=', too long, no loaded plugin registered NAME, or WHERE
 * does not parse (a rank past the job's size is found at start). */
MOON_API moon_status_t moon_plugin_place(const char *spec);

/* Where the cluster's roles run (serve_cluster.h's placement spec), so a
 * plugin actor placed by role lands beside them. */
typedef struct {
    const char *spec; /* moon_dist_place spec; NULL: everything on rank 0 */
    uint32_t    n_prefill, n_decode, n_store;
    uint32_t    n_ranks; /* 1 without dist */
} moon_plugin_roles_t;

/* Spawns, under one supervisor each, the plugin actors that land on this
 * rank, and registers their names (with dist: on every rank). Every rank
 * calls it. MOON_OK also with no plugin. MOON_ERR_INVALID_PARAM (logged): a
 * --place for no registered actor, or a bad WHERE; a spawn's status. */
MOON_API moon_status_t moon_plugin_start(moon_runtime_t *rt, moon_dist_t *dist,
                                         const moon_plugin_roles_t *roles);

/* Stops this rank's plugin actors (before the runtime stops). */
MOON_API void moon_plugin_stop(void);

/* Calls each plugin's fini (after the runtime stopped). The libraries stay
 * mapped (their tables may still be referenced) until the process ends. */
MOON_API void moon_plugin_unload(void);

/* 1 when a plugin is loaded. */
MOON_API int moon_plugin_loaded(void);

MOON_EXTERN_C_END

#endif /* MOONLET_PLUGIN_H */
