/* moonlet/serve_order.h - one request's stream put back in order on the
 * client's side. A request's first token comes from its prefill instance and
 * the rest, and DONE, from its decode instance (serve_msgs.h): two senders,
 * so token 1 or DONE may arrive before token 0. A client feeds every TOKEN
 * and DONE of the request through its moon_serve_order_t and gets them back
 * in order: tokens by index from the first expected (0, or the resumed
 * count), DONE once its n_completion tokens went before it. What waits has a
 * deadline (moon_serve_order_expire): a token that never comes (its sender
 * lost after sending it) ends the stream with a resumable error, so nothing
 * hangs and a resume starts right after the tokens the client really has.
 * One per request, the owner's thread only. */
#ifndef MOON_SERVE_ORDER_H
#define MOON_SERVE_ORDER_H

#include "moonlet/msg.h"

/* How long a stream waits for a missing token before giving up on it: long
 * past any real reordering (the first token leaves before the handover that
 * the decode's tokens wait for), short enough for a client to resume. */
#define MOON_SERVE_ORDER_WAIT_NS 2000000000ull

typedef struct {
    uint32_t         next;    /* the index expected next */
    uint32_t         ended;   /* the DONE went out: later input is dropped */
    uint32_t         waiting; /* a token is missing since since_ns */
    uint32_t         n_held, cap_held;
    moon_msg_hdr_t **held; /* retained TOKENs past next */
    moon_msg_hdr_t  *done; /* retained DONE waiting for tokens before it */
    uint64_t         since_ns;
    uint64_t         request_id; /* the last message's (for a DONE made here) */
} moon_serve_order_t;

/* Receives the messages in order (borrowed for the call): TOKENs, then one DONE. */
typedef void (*moon_serve_order_fn)(void *arg, const moon_msg_hdr_t *msg);

/* first_index: the first token's index (a resumed request's resume count). */
MOON_API void moon_serve_order_init(moon_serve_order_t *o, uint32_t first_index);
/* Releases what is held (nothing more goes out). */
MOON_API void moon_serve_order_fini(moon_serve_order_t *o);

/* Feeds a TOKEN or DONE of the request (a TOKENS message's entries, of
 * several requests, each as its own TOKEN: moon_serve_tokens_split); what
 * is now in order goes to out, in order. A token below the expected index (a
 * repeat) is dropped; past it, held. A DONE goes once n_completion tokens
 * did, else it is held. Returns 1 when the DONE went out (the stream ended;
 * o is not touched after out had it: out may free o's owner), else 0. A
 * token that cannot be held for want of memory is logged and dropped: the
 * deadline then ends the stream. Other types go to out as they are. */
MOON_API int moon_serve_order_feed(moon_serve_order_t *o, const moon_msg_hdr_t *msg,
                                   uint64_t now_ns, moon_serve_order_fn out, void *arg);

/* When a wait began more than wait_ns before now_ns: the missing token is
 * given up, the stream ends with a DONE finish ERROR status
 * MOON_ERR_PEER_LOST (resumable: the client resumes from the tokens that
 * went out), to out. Returns 1 when it ended the stream with the server's
 * DONE held, 2 without one (the request may still run: the caller cancels
 * it; read what it needs of its owner before, out may free it), 0 when
 * nothing expired. */
MOON_API int moon_serve_order_expire(moon_serve_order_t *o, uint64_t now_ns, uint64_t wait_ns,
                                     moon_serve_order_fn out, void *arg);

/* 1 while something waits for a missing token. */
static inline int moon_serve_order_waiting(const moon_serve_order_t *o)
{
    return o->waiting != 0;
}

#endif /* MOON_SERVE_ORDER_H */
