/* actors/instance/serve_grammar.c - a serving instance's grammars: the
 * model's vocabulary as the grammar engine sees it (each token's bytes after
 * an ordinary token) and a cache of automata by spec. */
#include "serve_grammar.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <stdio.h>
#include <string.h>

#define CACHE_KEEP 16 /* unused automata kept (each at most 128 MiB) */

struct moon_serve_grammars {
    moon_grammar_vocab_t *vocab;
    moon_grammar_cache_t *cache;
};

moon_status_t moon_serve_grammars_create(const moon_tokenizer_t *tok, moon_serve_grammars_t **gs_p)
{
    uint32_t               n = moon_tokenizer_n_vocab(tok);
    const char           **pieces;
    uint32_t              *lens;
    moon_serve_grammars_t *gs;
    moon_status_t          status;

    pieces = moon_malloc(n * sizeof(*pieces));
    lens   = moon_malloc(n * sizeof(*lens));
    gs     = moon_calloc(1, sizeof(*gs));
    if (pieces == NULL || lens == NULL || gs == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        size_t len = 0;
        /* prev -1: the bytes a token stands for after an ordinary token */
        pieces[i] = moon_tokenizer_piece(tok, -1, (int32_t)i, &len);
        lens[i]   = (uint32_t)len;
        if (pieces[i] == NULL || (int32_t)i == moon_tokenizer_bos(tok)) {
            pieces[i] = "";
            lens[i]   = 0;
        }
    }
    status = moon_grammar_vocab_create(n, pieces, lens, moon_tokenizer_eos(tok), &gs->vocab);
    if (status == MOON_OK) {
        status = moon_grammar_cache_create(gs->vocab, CACHE_KEEP, &gs->cache);
    }
out:
    moon_free(pieces);
    moon_free(lens);
    if (status != MOON_OK) {
        moon_serve_grammars_destroy(gs);
        return status;
    }
    *gs_p = gs;
    return MOON_OK;
}

void moon_serve_grammars_destroy(moon_serve_grammars_t *gs)
{
    if (gs != NULL) {
        moon_grammar_cache_destroy(gs->cache);
        moon_grammar_vocab_destroy(gs->vocab);
        moon_free(gs);
    }
}

moon_status_t moon_serve_grammar_begin(moon_serve_grammars_t **gs_p, const moon_tokenizer_t *tok,
                                       const char *spec, size_t len, const uint32_t *done,
                                       uint32_t n_done, moon_serve_grammar_t *g, char *err,
                                       size_t err_cap)
{
    moon_serve_grammar_t tmp = {NULL, 0};
    moon_status_t        status;

    g->fsm   = NULL;
    g->state = 0;
    if (len == 0) {
        return MOON_OK;
    }
    if (*gs_p == NULL) {
        status = moon_serve_grammars_create(tok, gs_p);
        if (status != MOON_OK) {
            snprintf(err, err_cap, "grammar vocabulary: %s", moon_status_str(status));
            return status;
        }
    }
    status = moon_grammar_cache_get((*gs_p)->cache, spec, len, &tmp.fsm, err, err_cap);
    if (status != MOON_OK) {
        MOON_WARN("grammar rejected: %s", err);
        return status;
    }
    for (uint32_t i = 0; i < n_done && status == MOON_OK; i++) {
        status = moon_serve_grammar_accept(&tmp, (int32_t)done[i]);
    }
    if (status != MOON_OK) {
        snprintf(err, err_cap, "the resumed tokens do not follow the grammar");
        moon_grammar_cache_put((*gs_p)->cache, tmp.fsm);
        return MOON_ERR_INVALID_PARAM;
    }
    *g = tmp;
    return MOON_OK;
}

void moon_serve_grammar_end(moon_serve_grammars_t *gs, moon_serve_grammar_t *g)
{
    if (gs != NULL && g->fsm != NULL) {
        moon_grammar_cache_put(gs->cache, g->fsm);
    }
    g->fsm = NULL;
}

moon_status_t moon_serve_grammar_mask(moon_serve_grammar_t *g, float *logits, uint32_t n)
{
    const uint32_t *mask;
    moon_status_t   status;

    if (g->fsm == NULL) {
        return MOON_OK;
    }
    status = moon_grammar_fsm_mask(g->fsm, g->state, &mask);
    if (status == MOON_OK) {
        moon_grammar_mask_apply(mask, logits, n);
    }
    return status;
}

void moon_serve_grammar_prefetch(moon_serve_grammar_t *g)
{
    const uint32_t *mask;

    if (g->fsm != NULL) {
        (void)moon_grammar_fsm_mask(g->fsm, g->state, &mask);
    }
}

moon_status_t moon_serve_grammar_accept(moon_serve_grammar_t *g, int32_t token)
{
    return g->fsm == NULL ? MOON_OK : moon_grammar_fsm_next(g->fsm, g->state, token, &g->state);
}

int moon_serve_grammar_final(const moon_serve_grammar_t *g)
{
    return g->fsm != NULL && moon_grammar_fsm_final(g->fsm, g->state);
}
