/* tests/support/moon_test_vocab.h - a GGUF vocabulary (every tokenizer.*
 * key a byte-level BPE model file has) written from a .vocab golden of
 * tests/data/tokenizer (make_goldens.mjs: the tokens, merges and flags the
 * goldens need, from the npm tokenizer packages), for tokenizer tests and
 * for random models served with a real vocabulary (moon_model_write_opts_t's
 * vocab_path). Options break it on purpose for the error-path tests. */
#ifndef MOON_TEST_VOCAB_H
#define MOON_TEST_VOCAB_H

typedef struct {
    int         drop_merges;
    const char *pre;   /* NULL: the file's */
    const char *model; /* NULL: gpt2 */
} moon_test_vocab_opts_t;

/* Writes the vocabulary of vocab_path to out_path; 0 on success, -1 on an
 * unreadable or malformed golden or a failed write. */
int moon_test_vocab_gguf(const char *vocab_path, const moon_test_vocab_opts_t *o,
                         const char *out_path);

#endif /* MOON_TEST_VOCAB_H */
