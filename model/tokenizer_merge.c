/* model/tokenizer_merge.c - the merge loop both BPE flavours share: symbols
 * in a linked list, candidate pairs in a binary heap (best key first,
 * leftmost on ties), stale candidates skipped when popped. n log n where
 * rescanning every pair after each merge was n^2. The flavour decides which
 * pairs merge and in what order (tokenizer_bpe.c: merge rank;
 * tokenizer.c: SentencePiece score). */
#include "tokenizer_internal.h"

static int cand_less(const moon_tok_cand_t *a, const moon_tok_cand_t *b)
{
    return a->key != b->key ? a->key < b->key : a->left < b->left;
}

static void heap_push(moon_tok_merge_t *s, moon_tok_cand_t c)
{
    size_t i = s->n_heap++;

    while (i > 0 && cand_less(&c, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i          = (i - 1) / 2;
    }
    s->heap[i] = c;
}

static moon_tok_cand_t heap_pop(moon_tok_merge_t *s)
{
    moon_tok_cand_t top = s->heap[0], last = s->heap[--s->n_heap];
    size_t          i = 0;

    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->n_heap) {
            break;
        }
        if (c + 1 < s->n_heap && cand_less(&s->heap[c + 1], &s->heap[c])) {
            c++;
        }
        if (!cand_less(&s->heap[c], &last)) {
            break;
        }
        s->heap[i] = s->heap[c];
        i          = c;
    }
    if (s->n_heap > 0) {
        s->heap[i] = last;
    }
    return top;
}

static void push_pair(moon_tok_merge_t *s, moon_tok_pair_fn pair, const void *ctx, int32_t l,
                      int32_t r)
{
    double  key;
    int32_t id;

    if (l >= 0 && r >= 0 && pair(ctx, s->sym[l], s->sym[r], &key, &id)) {
        heap_push(s, (moon_tok_cand_t){key, (uint32_t)l, (uint32_t)r, s->sym[l], s->sym[r], id});
    }
}

size_t moon_tok_merge(moon_tok_merge_t *s, size_t n, moon_tok_pair_fn pair, const void *ctx,
                      int32_t *out)
{
    size_t k = 0;

    if (n == 0) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    s->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        push_pair(s, pair, ctx, (int32_t)i, (int32_t)i + 1);
    }
    while (s->n_heap > 0) {
        moon_tok_cand_t c = heap_pop(s);
        /* stale when either side has merged since it was pushed */
        if (s->sym[c.left] != c.id_left || s->sym[c.right] != c.id_right ||
            s->next[c.left] != (int32_t)c.right) {
            continue;
        }
        s->sym[c.left]  = c.id;
        s->sym[c.right] = -1;
        s->next[c.left] = s->next[c.right];
        if (s->next[c.right] >= 0) {
            s->prev[s->next[c.right]] = (int32_t)c.left;
        }
        push_pair(s, pair, ctx, s->prev[c.left], (int32_t)c.left);
        push_pair(s, pair, ctx, (int32_t)c.left, s->next[c.left]);
    }
    for (int32_t i = 0; i >= 0; i = s->next[i]) {
        out[k++] = s->sym[i];
    }
    return k;
}
