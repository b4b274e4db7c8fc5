/* launch/loadgen/loadgen_workload.c - the random and shared-prefix workloads of
 * `moonlet bench`, arrivals, and the allocation every generator shares (the
 * trace workload is in loadgen_trace.c). Prompts draw from their own seeded
 * stream, arrivals from another, so a rate change leaves prompts unchanged. */
#include "loadgen_workload.h"

#include "loadgen_rand.h"
#include "loadgen_trace.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>

enum { STREAM_PROMPTS = 1, STREAM_ARRIVALS = 2, STREAM_PREFIX = 3 };

/* Short words of children's stories: the words format's alphabet. */
static const char *const words[] = {
    "the",   "a",    "little", "girl",  "boy",   "dog",   "cat",    "bird", "tree",  "sun",
    "day",   "big",  "red",    "blue",  "happy", "sad",   "friend", "mom",  "dad",   "park",
    "ball",  "toy",  "house",  "play",  "run",   "jump",  "saw",    "went", "was",   "had",
    "said",  "and",  "then",   "they",  "she",   "he",    "it",     "to",   "in",    "on",
    "with",  "for",  "of",     "very",  "one",   "time",  "once",   "upon", "there", "lived",
    "named", "lily", "tom",    "ben",   "sam",   "box",   "cake",   "fish", "boat",  "car",
    "look",  "find", "help",   "share", "smile", "laugh", "cry",    "home", "water", "flower",
};

uint32_t moon_loadgen_n_words(void)
{
    return (uint32_t)(sizeof(words) / sizeof(words[0]));
}

const char *moon_loadgen_word(uint32_t i)
{
    return i < moon_loadgen_n_words() ? words[i] : "";
}

moon_loadgen_workload_t *moon_loadgen_workload_alloc(uint32_t n_reqs)
{
    moon_loadgen_workload_t *wl = moon_calloc(1, sizeof(*wl));

    if (wl == NULL) {
        return NULL;
    }
    wl->reqs = moon_calloc(n_reqs > 0 ? n_reqs : 1, sizeof(*wl->reqs));
    if (wl->reqs == NULL) {
        moon_free(wl);
        return NULL;
    }
    wl->n_reqs = n_reqs;
    return wl;
}

moon_status_t moon_loadgen_req_alloc(moon_loadgen_req_t *req, uint32_t n_ids, uint32_t n_msgs)
{
    uint32_t           *ids  = moon_calloc(n_ids > 0 ? n_ids : 1, sizeof(*ids));
    moon_loadgen_msg_t *msgs = moon_calloc(n_msgs > 0 ? n_msgs : 1, sizeof(*msgs));

    if (ids == NULL || msgs == NULL) {
        moon_free(ids);
        moon_free(msgs);
        return MOON_ERR_NO_MEMORY;
    }
    req->ids    = ids;
    req->msgs   = msgs;
    req->n_ids  = n_ids;
    req->n_msgs = n_msgs;
    return MOON_OK;
}

void moon_loadgen_workload_destroy(moon_loadgen_workload_t *wl)
{
    if (wl == NULL) {
        return;
    }
    for (uint32_t i = 0; i < wl->n_reqs; i++) {
        moon_free(wl->reqs[i].ids);
        moon_free(wl->reqs[i].msgs);
    }
    moon_free(wl->reqs);
    moon_free(wl);
}

void moon_loadgen_arrivals(double rate, double burstiness, uint64_t seed, uint32_t n, double *times)
{
    moon_loadgen_rand_t r;
    double              t = 0.0;

    moon_loadgen_rand_init(&r, seed, STREAM_ARRIVALS);
    for (uint32_t i = 0; i < n; i++) {
        times[i] = t;
        if (rate > 0.0) {
            t += moon_loadgen_rand_gamma(&r, burstiness, 1.0 / (rate * burstiness));
        }
    }
}

void moon_loadgen_clamp(uint32_t max_context, uint32_t *n_in, uint32_t *n_out)
{
    if (*n_out < 1) {
        *n_out = 1;
    }
    if (*n_in < 1) {
        *n_in = 1;
    }
    if (max_context < 2) {
        return;
    }
    if (*n_out > max_context - 1) {
        *n_out = max_context - 1;
    }
    if (*n_in > max_context - *n_out) {
        *n_in = max_context - *n_out;
    }
}

/* The alphabet ids are drawn from: token ids 3..vocab-1, or word indices. */
static void alphabet(const moon_loadgen_opts_t *opts, uint32_t *lo_p, uint32_t *span_p)
{
    if (moon_loadgen_opts_tokens(opts)) {
        *lo_p   = 3; /* 0..2 are special (unk, bos, eos) */
        *span_p = opts->vocab - 3;
    } else {
        *lo_p   = 0;
        *span_p = moon_loadgen_n_words();
    }
}

static void fill(moon_loadgen_rand_t *r, uint32_t lo, uint32_t span, uint32_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        ids[i] = lo + (uint32_t)moon_loadgen_rand_range(r, 0, span - 1);
    }
}

static uint32_t ranged(moon_loadgen_rand_t *r, uint32_t len, double ratio)
{
    uint32_t lo = (uint32_t)((double)len * (1.0 - ratio));
    uint32_t hi = (uint32_t)((double)len * (1.0 + ratio));

    return (uint32_t)moon_loadgen_rand_range(r, lo, hi);
}

static moon_status_t make_random(const moon_loadgen_opts_t *opts, moon_loadgen_workload_t *wl)
{
    moon_loadgen_rand_t r;
    uint32_t            lo, span;
    moon_status_t       status;

    alphabet(opts, &lo, &span);
    moon_loadgen_rand_init(&r, opts->seed, STREAM_PROMPTS);
    for (uint32_t i = 0; i < wl->n_reqs; i++) {
        moon_loadgen_req_t *req   = &wl->reqs[i];
        uint32_t            n_in  = ranged(&r, opts->input_len, opts->range_ratio);
        uint32_t            n_out = ranged(&r, opts->output_len, opts->range_ratio);

        moon_loadgen_clamp(opts->max_context, &n_in, &n_out);
        status = moon_loadgen_req_alloc(req, n_in, 1);
        if (status != MOON_OK) {
            return status;
        }
        req->max_tokens = n_out;
        req->msgs[0]    = (moon_loadgen_msg_t){MOON_LOADGEN_ROLE_USER, 0, n_in};
        fill(&r, lo, span, req->ids, n_in);
    }
    return MOON_OK;
}

/* Shared-prefix: chats c = 0..n_chats-1 over system prompt c % num_prefixes.
 * Requests go turn by turn round the chats, so turn t+1 of a chat comes
 * n_chats requests after its turn t and extends that prompt with a synthetic
 * assistant reply of output_len ids and a new question. Every id of a chat is
 * drawn from a stream of its own, so chat c is the same whatever num_prompts. */
static moon_status_t make_shared_prefix(const moon_loadgen_opts_t *opts,
                                        moon_loadgen_workload_t   *wl)
{
    uint32_t n_chats  = (wl->n_reqs + opts->turns - 1) / opts->turns;
    uint32_t per_turn = opts->question_len + opts->output_len;
    uint64_t longest  = (uint64_t)opts->prefix_len + (uint64_t)opts->turns * per_turn;
    uint32_t lo, span, k = 0;

    if (opts->max_context > 0 && longest > opts->max_context) {
        MOON_ERROR("shared-prefix: the last turn needs %llu tokens (prefix %u + %u turns x "
                   "(question %u + output %u)), over --max-context %u",
                   (unsigned long long)longest, opts->prefix_len, opts->turns, opts->question_len,
                   opts->output_len, opts->max_context);
        return MOON_ERR_INVALID_PARAM;
    }
    alphabet(opts, &lo, &span);
    for (uint32_t t = 0; t < opts->turns && k < wl->n_reqs; t++) {
        for (uint32_t c = 0; c < n_chats && k < wl->n_reqs; c++) {
            moon_loadgen_req_t *req   = &wl->reqs[k++];
            uint32_t            n_ids = opts->prefix_len + t * per_turn + opts->question_len;
            moon_loadgen_rand_t pr, cr;
            uint32_t            pos;
            moon_status_t       status = moon_loadgen_req_alloc(req, n_ids, 2 + 2 * t);

            if (status != MOON_OK) {
                return status;
            }
            req->max_tokens = opts->output_len;
            moon_loadgen_rand_init(&pr, opts->seed,
                                   STREAM_PREFIX + 16 * (uint64_t)(c % opts->num_prefixes));
            fill(&pr, lo, span, req->ids, opts->prefix_len);
            req->msgs[0] = (moon_loadgen_msg_t){MOON_LOADGEN_ROLE_SYSTEM, 0, opts->prefix_len};
            moon_loadgen_rand_init(&cr, opts->seed ^ 0x5eedc4a7ull, (uint64_t)c);
            pos = opts->prefix_len;
            for (uint32_t u = 0; u <= t; u++) {
                req->msgs[1 + 2 * u] =
                    (moon_loadgen_msg_t){MOON_LOADGEN_ROLE_USER, pos, opts->question_len};
                fill(&cr, lo, span, req->ids + pos, opts->question_len);
                pos += opts->question_len;
                if (u < t) {
                    req->msgs[2 + 2 * u] =
                        (moon_loadgen_msg_t){MOON_LOADGEN_ROLE_ASSISTANT, pos, opts->output_len};
                    fill(&cr, lo, span, req->ids + pos, opts->output_len);
                    pos += opts->output_len;
                }
            }
            req->n_msgs = 2 + 2 * t;
        }
    }
    return MOON_OK;
}

moon_status_t moon_loadgen_workload_create(const moon_loadgen_opts_t *opts,
                                           moon_loadgen_workload_t  **wl_p)
{
    moon_loadgen_workload_t *wl;
    double                  *times;
    moon_status_t            status;

    if (opts->workload == MOON_LOADGEN_WL_TRACE) {
        return moon_loadgen_trace_workload(opts, wl_p);
    }
    if (opts->num_prompts == 0) {
        MOON_ERROR("bench: --num-prompts must be at least 1");
        return MOON_ERR_INVALID_PARAM;
    }
    wl = moon_loadgen_workload_alloc(opts->num_prompts);
    if (wl == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    wl->words = !moon_loadgen_opts_tokens(opts);
    status    = opts->workload == MOON_LOADGEN_WL_RANDOM ? make_random(opts, wl)
                                                         : make_shared_prefix(opts, wl);
    times     = status == MOON_OK ? moon_calloc(wl->n_reqs, sizeof(*times)) : NULL;
    if (status == MOON_OK && times == NULL) {
        status = MOON_ERR_NO_MEMORY;
    }
    if (status != MOON_OK) {
        moon_loadgen_workload_destroy(wl);
        return status;
    }
    moon_loadgen_arrivals(opts->rate, opts->burstiness, opts->seed, wl->n_reqs, times);
    for (uint32_t i = 0; i < wl->n_reqs; i++) {
        wl->reqs[i].arrival_s = times[i];
    }
    moon_free(times);
    *wl_p = wl;
    return MOON_OK;
}
