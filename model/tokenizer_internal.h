/* model/tokenizer_internal.h - what the tokenizer's two algorithms share
 * (private to model/): the vocabulary (tokenizer.c: SentencePiece BPE) and
 * the byte-level BPE of GPT-2 vocabularies (tokenizer_bpe.c). Immutable
 * after create. */
#ifndef MOON_MODEL_TOKENIZER_INTERNAL_H
#define MOON_MODEL_TOKENIZER_INTERNAL_H

#include "moonlet/tokenizer.h"

/* tokenizer.ggml.token_type values (llama.cpp's) */
enum {
    MOON_TOK_NORMAL  = 1,
    MOON_TOK_UNKNOWN = 2,
    MOON_TOK_CONTROL = 3,
    MOON_TOK_USER    = 4,
    MOON_TOK_UNUSED  = 5,
    MOON_TOK_BYTE    = 6
};

typedef struct moon_tok_bpe moon_tok_bpe_t;

struct moon_tokenizer {
    uint32_t        n_vocab;
    char           *arena;      /* all pieces as the bytes they stand for, NUL-separated */
    uint32_t       *off;        /* (n_vocab) piece start in arena */
    uint32_t       *len;        /* (n_vocab) piece bytes */
    float          *scores;     /* (n_vocab) */
    uint8_t        *type;       /* (n_vocab) */
    int16_t        *byte_value; /* (n_vocab) raw byte of a <0xXX> token, else -1 */
    uint32_t       *sorted;     /* (n_sorted) ids of lookup-able pieces, by piece bytes */
    uint32_t        n_sorted;
    int32_t         byte_id[256];
    int32_t         bos, eos, unk;
    bool            add_bos, add_eos; /* what encode's add_bos adds */
    size_t          max_piece;
    uint32_t       *added; /* (n_added) ids matched before splitting (tokenizer_added.c) */
    uint32_t        n_added;
    uint32_t        added_first[257]; /* added[added_first[b]..added_first[b+1]) start with b */
    moon_tok_bpe_t *bpe;              /* owned; NULL: SentencePiece */
};

/* Id of the NORMAL or USER piece equal to s[0..n) (lowest id among equal
 * pieces), or -1. */
int32_t moon_tok_lookup(const moon_tokenizer_t *t, const char *s, size_t n);

/* Builds t's table of added tokens (CONTROL, USER and UNKNOWN pieces),
 * pieces already loaded. MOON_ERR_NO_MEMORY only. */
moon_status_t moon_tok_added_load(moon_tokenizer_t *t);
/* The added token at text[i..len) (the longest), or -1. */
int32_t moon_tok_match_added(const moon_tokenizer_t *t, const char *text, size_t i, size_t len);

/* The merge loop (tokenizer_merge.c). */
typedef struct {
    double   key;         /* lower merges first */
    uint32_t left, right; /* symbol indices */
    int32_t  id_left, id_right;
    int32_t  id; /* the merged token */
} moon_tok_cand_t;

typedef struct {
    int32_t         *sym;  /* (n) symbol token, -1: merged away; the caller fills it */
    int32_t         *prev; /* (n) */
    int32_t         *next; /* (n) */
    moon_tok_cand_t *heap; /* (3 n): n - 1 first pairs, then 2 per merge */
    size_t           n_heap;
} moon_tok_merge_t;

/* Whether tokens left and right merge, into *id, in the order of *key. */
typedef int (*moon_tok_pair_fn)(const void *ctx, int32_t left, int32_t right, double *key,
                                int32_t *id);

/* Merges s->sym[0..n) pair by pair, lowest key first (leftmost on ties),
 * until no adjacent pair merges; writes the tokens left to out, returns
 * their count. */
size_t moon_tok_merge(moon_tok_merge_t *s, size_t n, moon_tok_pair_fn pair, const void *ctx,
                      int32_t *out);

/* Byte-level BPE (tokenizer.ggml.model = gpt2). */

/* Writes the bytes a GPT-2 byte-level piece s[0..len) stands for into out
 * (len bytes room: never longer); code points outside the byte map are
 * copied as they are. Returns the bytes written. */
size_t moon_tok_bpe_unmap(const char *s, size_t len, char *out);

/* Reads tokenizer.ggml.pre and .merges for t, whose pieces are already
 * loaded (unmapped). MOON_ERR_CORRUPT (logged): no merges, an unknown
 * pre-tokenizer, a byte without a token; MOON_ERR_NO_MEMORY. */
moon_status_t moon_tok_bpe_create(const moon_tokenizer_t *t, const moon_gguf_t *g,
                                  moon_tok_bpe_t **bpe_p);
void          moon_tok_bpe_destroy(moon_tok_bpe_t *bpe); /* NULL: no-op */
/* Whether the pre-tokenizer asks for BOS by default (llama-bpe). */
bool moon_tok_bpe_default_bos(const moon_tok_bpe_t *bpe);

/* Appends the ids of text[0..len) to w (room for len ids: never more):
 * added tokens matched first (longest at the leftmost place), the text between
 * them split by the pre-tokenizer, each piece merged by rank. *n_p is the
 * count appended. MOON_ERR_NO_MEMORY only. */
moon_status_t moon_tok_bpe_encode(const moon_tokenizer_t *t, const char *text, size_t len,
                                  int32_t *w, size_t *n_p);

#endif /* MOON_MODEL_TOKENIZER_INTERNAL_H */
