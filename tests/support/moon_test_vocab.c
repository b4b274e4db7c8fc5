/* tests/support/moon_test_vocab.c - GGUF vocabularies from the .vocab
 * goldens (see moon_test_vocab.h). */
#define _GNU_SOURCE /* strdup */
#include "moon_test_vocab.h"

#include "moon_test.h"
#include "moonlet/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int unhex(const char *h, char *out)
{
    size_t n = 0;
    for (; h[0] && h[1] && h[0] != ' ' && h[0] != '\n'; h += 2) {
        unsigned v;
        if (sscanf(h, "%2x", &v) != 1) {
            return -1;
        }
        out[n++] = (char)v;
    }
    out[n] = '\0';
    return (int)n;
}

int moon_test_vocab_gguf(const char *vocab_path, const moon_test_vocab_opts_t *o,
                         const char *out_path)
{
    size_t              len;
    char               *text    = moon_test_read_file(vocab_path, &len), *p, *line;
    uint32_t            n_vocab = 0, bos = 0, eos = 0, add_bos = 0, add_eos = 0;
    char                pre[64] = "", a[512], b[512];
    char              **tokens = NULL, **merges = NULL;
    int32_t            *types    = NULL;
    size_t              n_merges = 0, cap_merges = 0;
    moon_gguf_writer_t *w   = NULL;
    int                 ret = -1;

    if (text == NULL) {
        return -1;
    }
    for (line = strtok_r(text, "\n", &p); line != NULL; line = strtok_r(NULL, "\n", &p)) {
        unsigned id, type;
        if (sscanf(line, "n_vocab %u", &n_vocab) == 1) {
            tokens = calloc(n_vocab, sizeof(*tokens));
            types  = calloc(n_vocab, sizeof(*types));
            for (uint32_t i = 0; i < n_vocab; i++) {
                types[i] = 5; /* UNUSED: the ids the goldens need no piece of */
            }
        } else if (sscanf(line, "pre %63s", pre) == 1 || sscanf(line, "bos %u", &bos) == 1 ||
                   sscanf(line, "eos %u", &eos) == 1 || sscanf(line, "add_bos %u", &add_bos) == 1 ||
                   sscanf(line, "add_eos %u", &add_eos) == 1) {
            continue;
        } else if (sscanf(line, "t %u %u %511s", &id, &type, a) == 3 && id < n_vocab) {
            char buf[256];
            if (unhex(a, buf) < 0) {
                goto out;
            }
            tokens[id] = strdup(buf);
            types[id]  = (int32_t)type;
        } else if (sscanf(line, "m %511s %511s", a, b) == 2) {
            char ba[256], bb[256];
            if (unhex(a, ba) < 0 || unhex(b, bb) < 0) {
                goto out;
            }
            if (n_merges == cap_merges) {
                cap_merges = cap_merges ? 2 * cap_merges : 1024;
                merges     = realloc(merges, cap_merges * sizeof(*merges));
            }
            merges[n_merges] = malloc(strlen(ba) + strlen(bb) + 2);
            sprintf(merges[n_merges++], "%s %s", ba, bb);
        }
    }
    for (uint32_t i = 0; i < n_vocab; i++) {
        if (tokens[i] == NULL) {
            tokens[i] = strdup("");
        }
    }
    if (moon_gguf_writer_create(&w) != MOON_OK) {
        goto out;
    }
    moon_gguf_writer_kv_str(w, "general.architecture", "llama");
    moon_gguf_writer_kv_str(w, "tokenizer.ggml.model", o->model ? o->model : "gpt2");
    moon_gguf_writer_kv_str(w, "tokenizer.ggml.pre", o->pre ? o->pre : pre);
    moon_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens, n_vocab);
    moon_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", MOON_GGUF_INT32, types, n_vocab);
    if (!o->drop_merges) {
        moon_gguf_writer_kv_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges,
                                    n_merges);
    }
    moon_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", bos);
    moon_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", eos);
    moon_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", add_bos != 0);
    moon_gguf_writer_kv_bool(w, "tokenizer.ggml.add_eos_token", add_eos != 0);
    ret = moon_gguf_writer_write(w, out_path) == MOON_OK ? 0 : -1;
out:
    moon_gguf_writer_destroy(w);
    for (uint32_t i = 0; tokens != NULL && i < n_vocab; i++) {
        free(tokens[i]);
    }
    for (size_t i = 0; i < n_merges; i++) {
        free(merges[i]);
    }
    free(tokens);
    free(types);
    free(merges);
    free(text);
    return ret;
}

/* ---- tokenizer goldens ---------------------------------------------------- */

moon_status_t moon_test_open_tokenizer(const char *gguf_path, moon_tokenizer_t **tok_p)
{
    moon_gguf_t  *g;
    moon_status_t status = moon_gguf_open(gguf_path, &g);

    if (status != MOON_OK) {
        return status;
    }
    status = moon_tokenizer_create(g, tok_p);
    moon_gguf_close(g); /* the tokenizer copies what it needs */
    return status;
}

/* Splits corpus text (cases separated by "\n%%\n") in place. */
static size_t split_cases(char *text, size_t len, char **cases, size_t *lens)
{
    size_t n = 0;
    char  *p = text, *end = text + len;

    for (;;) {
        char *sep = NULL;
        for (char *q = p; q + 4 <= end; q++) {
            if (memcmp(q, "\n%%\n", 4) == 0) {
                sep = q;
                break;
            }
        }
        cases[n] = p;
        lens[n]  = (size_t)((sep ? sep : end) - p);
        n++;
        if (sep == NULL || n == MOON_TEST_MAX_CASES) {
            return n;
        }
        p = sep + 4;
    }
}

int moon_test_goldens_ids(moon_test_goldens_t *gd, const char *path)
{
    size_t len;
    char  *text = moon_test_read_file(path, &len), *q, *e;
    size_t c = 0, used = 0;

    if (text == NULL) {
        return -1;
    }
    /* one line per case; an empty case has an empty line */
    for (q = text; c < MOON_TEST_MAX_CASES && q < text + len; c++) {
        gd->n_want[c] = 0;
        gd->want[c]   = gd->want_buf + used;
        while (*q != '\n' && *q != '\0' && used < MOON_TEST_MAX_ALL_IDS) {
            long v = strtol(q, &e, 10);
            if (e == q) {
                break;
            }
            gd->want[c][gd->n_want[c]++] = (int32_t)v;
            used++;
            q = e;
            while (*q == ' ') {
                q++;
            }
        }
        q = strchr(q, '\n');
        if (q == NULL) {
            c++;
            break;
        }
        q++;
    }
    free(text);
    for (; c < gd->n_cases; c++) {
        gd->n_want[c] = 0;
        gd->want[c]   = gd->want_buf;
    }
    return 0;
}

int moon_test_goldens_corpus(moon_test_goldens_t *gd, const char *path, const char *more)
{
    size_t len, len2 = 0;
    char  *a = moon_test_read_file(path, &len), *b = NULL;

    if (a == NULL || (more != NULL && (b = moon_test_read_file(more, &len2)) == NULL)) {
        free(a);
        return -1;
    }
    gd->corpus = a;
    if (b != NULL) {
        gd->corpus = realloc(a, len + 4 + len2 + 1);
        if (gd->corpus == NULL) {
            free(a);
            free(b);
            return -1;
        }
        memcpy(gd->corpus + len, "\n%%\n", 4);
        memcpy(gd->corpus + len + 4, b, len2);
        len += 4 + len2;
        gd->corpus[len] = '\0';
        free(b);
    }
    gd->n_cases = split_cases(gd->corpus, len, gd->cases, gd->lens);
    return 0;
}

/* Encodes every case and compares with the goldens; decodes back. Returns
 * the count of cases that differ. */
int moon_test_goldens_check(const moon_tokenizer_t *tok, const moon_test_goldens_t *gd,
                            const char *fam)
{
    int bad = 0;

    for (size_t c = 0; c < gd->n_cases; c++) {
        static int32_t ids[1 << 14];
        size_t         n = 0, same = 0;
        /* no CUnit assertion here: --xcheck runs outside a suite */
        if (moon_tokenizer_encode(tok, gd->cases[c], gd->lens[c], false, ids, MOON_ARRAY_SIZE(ids),
                                  &n) != MOON_OK) {
            n = 0;
        }
        while (same < n && same < gd->n_want[c] && ids[same] == gd->want[c][same]) {
            same++;
        }
        if (n != gd->n_want[c] || same != n) {
            bad++;
            fprintf(stderr, "%s case %zu (%.40s...): %zu ids, want %zu; first difference at %zu\n",
                    fam, c, gd->cases[c], n, gd->n_want[c], same);
        }
    }
    return bad;
}
