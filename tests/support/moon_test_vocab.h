/* tests/support/moon_test_vocab.h - a GGUF vocabulary (every tokenizer.*
 * key a byte-level BPE model file has) written from a .vocab golden of
 * tests/data/tokenizer (make_goldens.mjs: the tokens, merges and flags the
 * goldens need, from the npm tokenizer packages), for tokenizer tests and
 * for random models served with a real vocabulary (moon_model_write_opts_t's
 * vocab_path). Options break it on purpose for the error-path tests. */
#ifndef MOON_TEST_VOCAB_H
#define MOON_TEST_VOCAB_H

#include "moonlet/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int         drop_merges;
    const char *pre;   /* NULL: the file's */
    const char *model; /* NULL: gpt2 */
} moon_test_vocab_opts_t;

/* Writes the vocabulary of vocab_path to out_path; 0 on success, -1 on an
 * unreadable or malformed golden or a failed write. */
int moon_test_vocab_gguf(const char *vocab_path, const moon_test_vocab_opts_t *o,
                         const char *out_path);

/* Tokenizer goldens: a corpus of cases split by "\n%%\n" and the ids a
 * family's own tokenizer gives each (one line per case). */
#define MOON_TEST_MAX_CASES 512
#define MOON_TEST_MAX_ALL_IDS (1 << 19)

typedef struct {
    char    *corpus; /* owned: free() */
    char    *cases[MOON_TEST_MAX_CASES];
    size_t   lens[MOON_TEST_MAX_CASES];
    size_t   n_cases;
    int32_t *want[MOON_TEST_MAX_CASES]; /* into want_buf */
    int32_t  want_buf[MOON_TEST_MAX_ALL_IDS];
    size_t   n_want[MOON_TEST_MAX_CASES];
} moon_test_goldens_t;

/* The tokenizer of the GGUF at gguf_path; moon_gguf_open's and
 * moon_tokenizer_create's statuses. */
moon_status_t moon_test_open_tokenizer(const char *gguf_path, moon_tokenizer_t **tok_p);
/* Reads the cases of path, then of more (NULL: none), as one corpus; 0 or -1. */
int moon_test_goldens_corpus(moon_test_goldens_t *gd, const char *path, const char *more);
/* Reads the ids of the cases already read; 0 or -1. */
int moon_test_goldens_ids(moon_test_goldens_t *gd, const char *path);
/* Encodes every case (no BOS) and compares with the ids; the count of
 * cases that differ (each named on stderr). No CUnit assertion. */
int moon_test_goldens_check(const moon_tokenizer_t *tok, const moon_test_goldens_t *gd,
                            const char *fam);

#endif /* MOON_TEST_VOCAB_H */
