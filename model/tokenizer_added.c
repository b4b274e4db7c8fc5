/* model/tokenizer_added.c - the added tokens (CONTROL, USER_DEFINED and
 * UNKNOWN pieces: <s>, <|eot_id|>, ...) that both tokenizer algorithms match
 * in the text before anything else, never split, as Hugging Face tokenizers
 * and llama.cpp (parse_special) do. A table sorted by first byte, longest
 * first, so the longest match at a place wins. Immutable after load. */
#include "moonlet/alloc.h"
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

static const moon_tokenizer_t *added_ctx; /* qsort has no context argument */

static int is_added(const moon_tokenizer_t *t, uint32_t i)
{
    return (t->type[i] == MOON_TOK_CONTROL || t->type[i] == MOON_TOK_USER ||
            t->type[i] == MOON_TOK_UNKNOWN) &&
           t->len[i] > 0;
}

static int cmp_added(const void *x, const void *y)
{
    const moon_tokenizer_t *t = added_ctx;
    uint32_t                a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    uint8_t                 fa = (uint8_t)t->arena[t->off[a]], fb = (uint8_t)t->arena[t->off[b]];

    if (fa != fb) {
        return fa < fb ? -1 : 1;
    }
    if (t->len[a] != t->len[b]) {
        return t->len[a] > t->len[b] ? -1 : 1; /* longest first */
    }
    return a < b ? -1 : a > b;
}

moon_status_t moon_tok_added_load(moon_tokenizer_t *t)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < t->n_vocab; i++) {
        n += (uint32_t)is_added(t, i);
    }
    t->added = moon_malloc((n + 1) * sizeof(*t->added));
    if (t->added == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    t->n_added = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (is_added(t, i)) {
            t->added[t->n_added++] = i;
        }
    }
    added_ctx = t;
    qsort(t->added, t->n_added, sizeof(*t->added), cmp_added);
    added_ctx = NULL;
    for (uint32_t b = 0, k = 0; b <= 256; b++) {
        while (k < t->n_added && (uint8_t)t->arena[t->off[t->added[k]]] < b) {
            k++;
        }
        t->added_first[b] = b == 256 ? t->n_added : k;
    }
    return MOON_OK;
}

int32_t moon_tok_match_added(const moon_tokenizer_t *t, const char *text, size_t i, size_t len)
{
    uint8_t b = (uint8_t)text[i];

    for (uint32_t k = t->added_first[b]; k < t->added_first[b + 1]; k++) {
        uint32_t id = t->added[k];
        if (t->len[id] <= len - i && memcmp(text + i, t->arena + t->off[id], t->len[id]) == 0) {
            return (int32_t)id;
        }
    }
    return -1;
}
