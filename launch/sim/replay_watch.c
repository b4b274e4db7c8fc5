/* launch/sim/replay_watch.c - instance addresses from LOAD, placements from
 * PREFILL (replay_watch.h). */
#include "replay_watch.h"

#include "moonlet/serve_msgs.h"

void moon_replay_watch_init(moon_replay_watch_t *w, moon_sim_records_t *recs)
{
    w->recs = recs;
    w->n    = 0;
    pthread_mutex_init(&w->lock, NULL);
}

void moon_replay_watch_fini(moon_replay_watch_t *w)
{
    pthread_mutex_destroy(&w->lock);
}

/* Under w->lock. -1: not seen. */
static int32_t index_of(const moon_replay_watch_t *w, moon_addr_t a)
{
    for (uint32_t i = 0; i < w->n; i++) {
        if (w->addr[i] == a) {
            return w->index[i];
        }
    }
    return -1;
}

void moon_replay_watch_hook(void *arg, uint64_t now_ns, const moon_msg_hdr_t *msg, moon_addr_t dst)
{
    moon_replay_watch_t *w = arg;

    (void)now_ns;
    if (msg->type == MOON_MSG_SERVE_LOAD) {
        const moon_serve_load_t *m = (const void *)msg;

        pthread_mutex_lock(&w->lock);
        if (index_of(w, msg->src) < 0 && w->n < MOON_REPLAY_WATCH_MAX) {
            w->addr[w->n]    = msg->src;
            w->index[w->n++] = (int32_t)m->instance;
        }
        pthread_mutex_unlock(&w->lock);
    } else if (msg->type == MOON_MSG_SERVE_PREFILL) {
        const moon_serve_prefill_t *p = (const void *)msg;
        int32_t                     pi, di;

        if (p->request_id >= w->recs->n) {
            return;
        }
        pthread_mutex_lock(&w->lock);
        pi = index_of(w, dst);
        di = index_of(w, p->decode);
        pthread_mutex_unlock(&w->lock);
        /* the request's record is the driver's, but nothing else writes its
         * placement, and its DONE (read after) comes after this dispatch */
        moon_sim_records_place(w->recs, (uint32_t)p->request_id, pi, di, 0);
    }
}
