/* actors/instance/serve_text.c - detokenizing with stop strings held back. */
#include "serve_text.h"

#include "moonlet/alloc.h"
#include "moonlet/serve_msgs.h"

#include <string.h>

moon_status_t moon_serve_text_init(moon_serve_text_t *t, const moon_tokenizer_t *tok, int32_t prev,
                                   const char *stops, size_t stops_len)
{
    memset(t, 0, sizeof(*t));
    moon_tok_stream_init(&t->st, tok, prev);
    t->stops     = stops;
    t->stops_len = stops != NULL ? stops_len : 0;
    for (size_t i = 0; i < t->stops_len;) {
        size_t n    = strnlen(t->stops + i, t->stops_len - i);
        t->max_stop = n > t->max_stop ? n : t->max_stop;
        i += n + 1;
    }
    t->cap   = t->max_stop + 2 * MOON_TOK_STREAM_OUT_MAX(tok) + 1;
    t->held  = moon_malloc(t->cap);
    t->piece = moon_malloc(t->cap);
    if (t->held == NULL || t->piece == NULL) {
        moon_serve_text_fini(t);
        return MOON_ERR_NO_MEMORY;
    }
    return MOON_OK;
}

void moon_serve_text_fini(moon_serve_text_t *t)
{
    moon_free(t->held);
    moon_free(t->piece);
    t->held  = NULL;
    t->piece = NULL;
}

/* Earliest complete stop string in held: its start (*len_p: its length), or -1. */
static long find_stop(const moon_serve_text_t *t, size_t *len_p)
{
    long best = -1;

    for (size_t i = 0; i < t->stops_len;) {
        const char *s = t->stops + i;
        size_t      n = strnlen(s, t->stops_len - i);
        for (size_t at = 0; n > 0 && at + n <= t->n_held; at++) {
            if (memcmp(t->held + at, s, n) == 0) {
                if (best < 0 || (long)at < best) {
                    best   = (long)at;
                    *len_p = n;
                }
                break;
            }
        }
        i += n + 1;
    }
    return best;
}

/* Length of the longest suffix of held that is a proper prefix of a stop string. */
static size_t partial_stop(const moon_serve_text_t *t)
{
    size_t keep = 0;

    for (size_t i = 0; i < t->stops_len;) {
        const char *s = t->stops + i;
        size_t      n = strnlen(s, t->stops_len - i);
        for (size_t k = n > 0 ? n - 1 : 0; k > keep; k--) {
            if (k <= t->n_held && memcmp(t->held + t->n_held - k, s, k) == 0) {
                keep = k;
                break;
            }
        }
        i += n + 1;
    }
    return keep;
}

/* Moves the first n held bytes to piece (NUL-terminated) and out. */
static void release(moon_serve_text_t *t, size_t n, size_t drop, const char **out_p, size_t *len_p)
{
    memcpy(t->piece, t->held, n);
    t->piece[n] = '\0';
    memmove(t->held, t->held + n + drop, t->n_held - n - drop);
    t->n_held -= n + drop;
    *out_p = t->piece;
    *len_p = n;
}

int moon_serve_text_push(moon_serve_text_t *t, int32_t id, const char **out_p, size_t *len_p)
{
    size_t n = 0, len = 0;
    long   at;

    /* held never exceeds max_stop after a release, and a push adds at most
     * one piece: cap covers both */
    if (moon_tok_stream_push(&t->st, id, t->held + t->n_held, t->cap - t->n_held, &n) == MOON_OK) {
        t->n_held += n;
    }
    at = find_stop(t, &len);
    if (at >= 0) {
        size_t end = (size_t)at + (t->keep_stop ? len : 0);
        release(t, end, t->n_held - end, out_p, len_p);
        return 1;
    }
    release(t, t->n_held - partial_stop(t), 0, out_p, len_p);
    return 0;
}

void moon_serve_text_flush(moon_serve_text_t *t, const char **out_p, size_t *len_p)
{
    size_t n = 0;

    moon_tok_stream_flush(&t->st, t->held + t->n_held, t->cap - t->n_held, &n);
    t->n_held += n;
    release(t, t->n_held, 0, out_p, len_p);
}

int moon_serve_is_stop_id(uint32_t flags, const uint32_t *stop_ids, uint32_t n_stop_ids,
                          int32_t tok, const moon_tokenizer_t *t)
{
    if (!(flags & MOON_SERVE_F_IGNORE_EOS) &&
        (tok == moon_tokenizer_eos(t) || tok == moon_tokenizer_bos(t))) {
        return 1; /* BOS ends a sample too, as in `moonlet generate` (llama2.c) */
    }
    for (uint32_t i = 0; i < n_stop_ids; i++) {
        if ((uint32_t)tok == stop_ids[i]) {
            return 1;
        }
    }
    return 0;
}
