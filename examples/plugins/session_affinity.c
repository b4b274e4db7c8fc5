/* examples/plugins/session_affinity.c - a placement policy of one's own:
 * requests of one session (the OpenAI `user` field) go to the same prefill
 * and decode instances while those stay alive, so a conversation finds its
 * prefix in that prefill instance's own cache; requests without a session
 * go where the queue is shortest.
 *
 *   moonlet serve --model M.gguf --prefill 2 --decode 2 \
 *       --plugin build/examples/plugins/libsession_affinity.so --policy session-affinity
 *
 * The policy is a pure function of the view and the request (sched_policy.h):
 * the n-th alive candidate of each role, n = the session's hash mod their count.
 * When an instance dies its sessions move (the candidates' count changes). */
#include "moonlet/plugin.h"

static int alive_as(const moon_sched_instance_t *in, int decode)
{
    return in->alive && (in->role == MOON_SCHED_ROLE_COLOCATED ||
                         in->role == (decode ? MOON_SCHED_ROLE_DECODE : MOON_SCHED_ROLE_PREFILL));
}

/* The (h mod count)-th alive instance of the role; -1 if none. Without a
 * session (h 0): the one with the shortest queue (decode: smallest batch). */
static int32_t pick_role(const moon_sched_view_t *view, uint64_t h, int decode)
{
    uint32_t n    = 0, k;
    int32_t  best = -1;

    for (uint32_t i = 0; i < view->n_inst; i++) {
        const moon_sched_instance_t *in = &view->inst[i];
        if (!alive_as(in, decode)) {
            continue;
        }
        n++;
        if (h == 0 && (best < 0 || (decode ? in->batch < view->inst[best].batch
                                           : in->queue_s < view->inst[best].queue_s))) {
            best = (int32_t)i;
        }
    }
    if (h == 0 || n == 0) {
        return best;
    }
    k = (uint32_t)(h % n);
    for (uint32_t i = 0; i < view->n_inst; i++) {
        if (alive_as(&view->inst[i], decode) && k-- == 0) {
            return (int32_t)i;
        }
    }
    return -1;
}

static moon_status_t affinity_pick(void *arg, const moon_sched_view_t *view,
                                   const moon_sched_request_t *req, moon_sched_pick_t *pick_p)
{
    int colocated = view->inst[0].role == MOON_SCHED_ROLE_COLOCATED;

    (void)arg;
    pick_p->prefill = pick_role(view, req->affinity, 0);
    /* a different hash for the decode side, so sessions spread over both */
    pick_p->decode =
        colocated ? pick_p->prefill : pick_role(view, req->affinity * 0x9e3779b97f4a7c15ull, 1);
    return pick_p->prefill >= 0 && pick_p->decode >= 0 ? MOON_OK : MOON_ERR_NO_RESOURCE;
}

static moon_status_t affinity_init(moon_plugin_host_t *host, const char *args)
{
    moon_sched_policy_def_t def = {
        .name = "session-affinity",
        .doc  = "one session (the request's user field) to the same instances; else shortest queue",
        .pick = affinity_pick,
    };

    (void)args;
    return moon_plugin_register_policy(host, &def);
}

MOON_PLUGIN_DEFINE("session-affinity", affinity_init, NULL);
