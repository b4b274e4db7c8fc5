/* actors/instance/cache_events.c - a prefix cache's content as numbered events to
 * the conductor. */
#include "cache_events.h"

#include "moonlet/alloc.h"
#include "moonlet/kv_shard.h"
#include "moonlet/log.h"
#include "moonlet/serve_msgs.h"
#include "moonlet/store_msgs.h"

#include <string.h>

#define EVENTS_PER_MSG 256u

static void queue_event(void *arg, int stored, moon_kv_key_t key)
{
    moon_cache_events_t *ce = arg;
    uint64_t            *ev;

    if (ce->n == ce->cap) {
        uint32_t  cap = ce->cap ? 2 * ce->cap : 64;
        uint64_t *grown =
            moon_realloc(ce->ev, (size_t)cap * MOON_STORE_EVENT_U64S * sizeof(uint64_t));
        if (grown == NULL) {
            ce->seq++; /* lost: the numbering shows the gap */
            return;
        }
        ce->ev  = grown;
        ce->cap = cap;
    }
    ev    = ce->ev + (size_t)ce->n++ * MOON_STORE_EVENT_U64S;
    ev[0] = stored ? MOON_KV_EVENT_STORED : MOON_KV_EVENT_EVICTED;
    ev[1] = key.lo;
    ev[2] = key.hi;
    ev[3] = ce->tag.model_id;
    ev[4] = ce->tag.weight_version;
}

void moon_cache_events_init(moon_cache_events_t *ce, moon_block_cache_t *cache, uint32_t instance,
                            const moon_kv_tag_t *tag, moon_addr_t to)
{
    memset(ce, 0, sizeof(*ce));
    ce->tag      = *tag;
    ce->instance = instance;
    ce->to       = to;
    moon_block_cache_listen(cache, queue_event, ce);
}

void moon_cache_events_fini(moon_cache_events_t *ce)
{
    moon_free(ce->ev);
    memset(ce, 0, sizeof(*ce));
}

/* One CACHE_EVENTS of events ev[0..n) numbered from seq. */
static void send_part(moon_cache_events_t *ce, moon_actor_t *self, uint64_t seq, uint32_t snapshot,
                      const uint64_t *ev, uint32_t n)
{
    size_t                     bytes = (size_t)n * MOON_STORE_EVENT_U64S * sizeof(uint64_t);
    moon_serve_cache_events_t *m     = moon_msg_new(MOON_MSG_SERVE_CACHE_EVENTS, bytes);

    if (m == NULL) {
        MOON_WARN("instance %u: no memory for %u cache events", ce->instance, n);
        return;
    }
    m->instance = ce->instance;
    m->seq      = seq;
    m->snapshot = snapshot;
    if (n > 0) {
        memcpy(moon_msg_span_alloc(m, &m->ev, n * MOON_STORE_EVENT_U64S, 8, 0), ev, bytes);
    }
    moon_tell(self, ce->to, &m->hdr);
}

void moon_cache_events_flush(moon_cache_events_t *ce, moon_actor_t *self)
{
    for (uint32_t done = 0; done < ce->n;) {
        uint32_t n = MOON_MIN(ce->n - done, EVENTS_PER_MSG);
        send_part(ce, self, ce->seq, 0, ce->ev + (size_t)done * MOON_STORE_EVENT_U64S, n);
        ce->seq += n;
        done += n;
    }
    ce->n = 0;
}

void moon_cache_events_snapshot(moon_cache_events_t *ce, moon_actor_t *self,
                                const moon_block_cache_t *cache)
{
    uint32_t done = 0;

    ce->n = 0;
    moon_block_cache_foreach(cache, queue_event, ce); /* every key, as STORED */
    do {
        uint32_t n = MOON_MIN(ce->n - done, EVENTS_PER_MSG);
        send_part(ce, self, ce->seq, done == 0 ? 1 : 2,
                  ce->ev + (size_t)done * MOON_STORE_EVENT_U64S, n);
        done += n;
    } while (done < ce->n);
    ce->n = 0;
}
