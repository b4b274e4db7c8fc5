/* launch/sim/replay_watch.h - what a replay learns by watching the messages a
 * runtime dispatches (its trace hook, moon_runtime_config_t.trace): which
 * instance each address is (from the LOAD reports instances send the
 * conductor: role and index) and where the conductor placed each request
 * (its PREFILL messages: the prefill instance they go to and the decode
 * instance they name), written into the replay's records. Thread-safe: a
 * threaded runtime calls the hook from its workers. */
#ifndef MOON_LAUNCH_REPLAY_WATCH_H
#define MOON_LAUNCH_REPLAY_WATCH_H

#include "sim_report.h"

#include "moonlet/msg.h"

#include <pthread.h>

#define MOON_REPLAY_WATCH_MAX 256 /* instances remembered */

typedef struct {
    moon_sim_records_t *recs; /* borrowed */
    pthread_mutex_t     lock;
    uint32_t            n;
    moon_addr_t         addr[MOON_REPLAY_WATCH_MAX];
    int32_t             index[MOON_REPLAY_WATCH_MAX]; /* the instance's index in its role */
} moon_replay_watch_t;

void moon_replay_watch_init(moon_replay_watch_t *w, moon_sim_records_t *recs);
void moon_replay_watch_fini(moon_replay_watch_t *w);
/* The trace hook (moon_trace_fn) with arg = the watch. */
void moon_replay_watch_hook(void *arg, uint64_t now_ns, const moon_msg_hdr_t *msg, moon_addr_t dst);

#endif /* MOON_LAUNCH_REPLAY_WATCH_H */
