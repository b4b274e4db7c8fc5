/* actors/proto/serve_order.c - see moonlet/serve_order.h. Few tokens are
 * ever held (those the decode sent before a late first one), so the held
 * ones are a plain array searched by index. */
#include "moonlet/serve_order.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/serve_msgs.h"

#include <string.h>

void moon_serve_order_init(moon_serve_order_t *o, uint32_t first_index)
{
    memset(o, 0, sizeof(*o));
    o->next = first_index;
}

static void drop_held(moon_serve_order_t *o)
{
    for (uint32_t i = 0; i < o->n_held; i++) {
        moon_msg_release(o->held[i]);
    }
    o->n_held = 0;
}

void moon_serve_order_fini(moon_serve_order_t *o)
{
    drop_held(o);
    moon_free(o->held);
    moon_msg_release(o->done);
    memset(o, 0, sizeof(*o));
    o->ended = 1;
}

static void end_with(moon_serve_order_t *o, const moon_msg_hdr_t *done, moon_serve_order_fn out,
                     void *arg)
{
    o->ended   = 1;
    o->waiting = 0;
    drop_held(o);
    out(arg, done);
}

/* Sends the held DONE when its tokens all went; returns 1 then (o is not
 * touched after). */
static int done_if_complete(moon_serve_order_t *o, moon_serve_order_fn out, void *arg)
{
    moon_msg_hdr_t *d = o->done;

    if (d == NULL || o->next < ((const moon_serve_done_t *)(const void *)d)->n_completion) {
        return 0;
    }
    o->done = NULL;
    end_with(o, d, out, arg);
    moon_msg_release(d);
    return 1;
}

/* Sends the held tokens that now follow in order. */
static void release_following(moon_serve_order_t *o, moon_serve_order_fn out, void *arg)
{
    for (uint32_t i = 0; i < o->n_held;) {
        moon_msg_hdr_t *t = o->held[i];
        if (((const moon_serve_token_t *)(const void *)t)->index != o->next) {
            i++;
            continue;
        }
        o->held[i] = o->held[--o->n_held];
        o->next++;
        out(arg, t);
        moon_msg_release(t);
        i = 0; /* the one after it may be anywhere */
    }
    o->waiting = o->n_held > 0 || o->done != NULL ? o->waiting : 0;
}

static void hold(moon_serve_order_t *o, const moon_msg_hdr_t *msg)
{
    if (o->n_held == o->cap_held) {
        uint32_t         cap = o->cap_held ? 2 * o->cap_held : 8;
        moon_msg_hdr_t **h   = moon_realloc(o->held, (size_t)cap * sizeof(*h));
        if (h == NULL) {
            MOON_WARN("serve_order: no memory to hold token %u of request %llu",
                      ((const moon_serve_token_t *)(const void *)msg)->index,
                      (unsigned long long)o->request_id);
            return; /* lost: the deadline ends the stream */
        }
        o->held     = h;
        o->cap_held = cap;
    }
    moon_msg_retain(msg);
    o->held[o->n_held++] = (moon_msg_hdr_t *)msg;
}

static void wait_from(moon_serve_order_t *o, uint64_t now_ns)
{
    if (!o->waiting) {
        o->waiting  = 1;
        o->since_ns = now_ns;
    }
}

/* Returns 1 when the DONE went out (o is not touched after: its owner may
 * be gone with it). */
static int feed_token(moon_serve_order_t *o, const moon_msg_hdr_t *msg, uint64_t now_ns,
                      moon_serve_order_fn out, void *arg)
{
    uint32_t index = ((const moon_serve_token_t *)(const void *)msg)->index;

    if (index < o->next) {
        return 0; /* a repeat */
    }
    if (index > o->next) {
        for (uint32_t i = 0; i < o->n_held; i++) {
            if (((const moon_serve_token_t *)(const void *)o->held[i])->index == index) {
                return 0;
            }
        }
        hold(o, msg);
        wait_from(o, now_ns);
        return 0;
    }
    o->next++;
    out(arg, msg);
    release_following(o, out, arg);
    return done_if_complete(o, out, arg);
}

int moon_serve_order_feed(moon_serve_order_t *o, const moon_msg_hdr_t *msg, uint64_t now_ns,
                          moon_serve_order_fn out, void *arg)
{
    if (o->ended) {
        return 0;
    }
    switch (msg->type) {
    case MOON_MSG_SERVE_TOKEN:
        o->request_id = ((const moon_serve_token_t *)(const void *)msg)->request_id;
        return feed_token(o, msg, now_ns, out, arg);
    case MOON_MSG_SERVE_DONE:
        o->request_id = ((const moon_serve_done_t *)(const void *)msg)->request_id;
        if (o->done != NULL) {
            return 0; /* one end only */
        }
        moon_msg_retain(msg);
        o->done = (moon_msg_hdr_t *)msg;
        if (done_if_complete(o, out, arg)) {
            return 1;
        }
        wait_from(o, now_ns);
        return 0;
    default:
        out(arg, msg); /* not the stream's concern */
        return 0;
    }
}

/* The end when a token never came: the server's DONE (d, or NULL) with the
 * resumable error, counting the tokens that went out. */
static moon_serve_done_t *lost_done(const moon_serve_order_t *o, const moon_serve_done_t *d)
{
    static const char  why[] = "a token never reached the client (its sender lost?)";
    moon_serve_done_t *m     = moon_msg_new(MOON_MSG_SERVE_DONE, sizeof(why) + 1);

    if (m == NULL) {
        return NULL;
    }
    m->request_id       = o->request_id;
    m->prefill_instance = -1;
    m->decode_instance  = -1;
    if (d != NULL) { /* what the server said of it, but its end */
        m->n_prompt         = d->n_prompt;
        m->n_cached         = d->n_cached;
        m->prefill_instance = d->prefill_instance;
        m->decode_instance  = d->decode_instance;
        m->queue_ns         = d->queue_ns;
        m->prefill_ns       = d->prefill_ns;
        m->transfer_ns      = d->transfer_ns;
        m->ttft_ns          = d->ttft_ns;
        m->weight_version   = d->weight_version;
    }
    m->finish       = MOON_FINISH_ERROR;
    m->status       = MOON_ERR_PEER_LOST;
    m->n_completion = o->next;
    moon_msg_set_str(m, &m->text, "");
    moon_msg_set_str(m, &m->message, why);
    return m;
}

int moon_serve_order_expire(moon_serve_order_t *o, uint64_t now_ns, uint64_t wait_ns,
                            moon_serve_order_fn out, void *arg)
{
    moon_serve_done_t *m;
    int                had = o->done != NULL;

    if (o->ended || !o->waiting || now_ns - o->since_ns <= wait_ns) {
        return 0;
    }
    m = lost_done(o, (const void *)o->done);
    if (m == NULL) {
        return 0; /* no memory: the next tick tries again */
    }
    MOON_WARN("serve_order: request %llu: token %u never came; it ends resumable",
              (unsigned long long)o->request_id, o->next);
    moon_msg_release(o->done);
    o->done = NULL;
    end_with(o, &m->hdr, out, arg);
    moon_msg_release(&m->hdr);
    return had ? 1 : 2;
}
