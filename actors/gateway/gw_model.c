/* actors/gateway/gw_model.c - the model facts of an OpenAI front end (see gw_model.h). */
#include "gw_model.h"

#include "moonlet/alloc.h"
#include "moonlet/gguf.h"
#include "moonlet/log.h"
#include "moonlet/model.h"

#include <string.h>

char *moon_gw_model_stem(const char *path)
{
    const char *base = strrchr(path, '/');
    const char *dot;
    size_t      n;
    char       *s;

    base = base != NULL ? base + 1 : path;
    dot  = strrchr(base, '.');
    n    = dot != NULL && dot != base ? (size_t)(dot - base) : strlen(base);
    s    = moon_malloc(n + 1);
    if (s != NULL) {
        memcpy(s, base, n);
        s[n] = '\0';
    }
    return s;
}

typedef struct {
    const moon_gguf_t *gguf;
    uint64_t           n_vocab;
} special_arg_t;

/* A token id by its text, from the file's vocabulary. */
static int32_t find_special(void *arg, const char *text)
{
    special_arg_t *a = arg;
    size_t         n = strlen(text);

    for (uint64_t i = 0; i < a->n_vocab; i++) {
        const char *s   = NULL;
        uint64_t    len = 0;

        if (moon_gguf_get_arr_str(a->gguf, "tokenizer.ggml.tokens", i, &s, &len) == MOON_OK &&
            len == n && memcmp(s, text, n) == 0) {
            return (int32_t)i;
        }
    }
    return -1;
}

/* The text of token id in the file's vocabulary (moon_malloc'd; NULL: none). */
static char *token_text(const moon_gguf_t *gguf, int32_t id)
{
    const char *s   = NULL;
    uint64_t    len = 0;
    char       *t;

    if (id < 0 ||
        moon_gguf_get_arr_str(gguf, "tokenizer.ggml.tokens", (uint64_t)id, &s, &len) != MOON_OK) {
        return NULL;
    }
    t = moon_malloc(len + 1);
    if (t != NULL) {
        memcpy(t, s, len);
        t[len] = 0;
    }
    return t;
}

moon_status_t moon_gw_model_load(const char *path, moon_tokenizer_t **tok_p,
                                 moon_gw_template_t *tpl, uint32_t *n_ctx_p, uint32_t *dim_p)
{
    moon_gguf_t        *gguf = NULL;
    moon_tokenizer_t   *tok  = NULL;
    moon_model_config_t mc;
    moon_status_t       status;
    const char         *jinja = NULL;
    uint64_t            len   = 0;
    special_arg_t       sa;

    status = moon_gguf_open(path, &gguf);
    if (status != MOON_OK) {
        MOON_ERROR("cannot open model %s: %s", path, moon_status_str(status));
        return status;
    }
    status = moon_tokenizer_create(gguf, &tok);
    if (status != MOON_OK) {
        MOON_ERROR("model %s has no usable tokenizer: %s", path, moon_status_str(status));
        goto out;
    }
    if (moon_model_config_from_gguf(gguf, &mc) == MOON_OK) {
        *n_ctx_p = mc.seq_len;
        if (dim_p != NULL) {
            *dim_p = mc.dim;
        }
    }
    if (moon_gguf_get_str(gguf, "tokenizer.chat_template", &jinja, &len) != MOON_OK) {
        jinja = NULL;
        len   = 0;
    }
    sa.gguf    = gguf;
    sa.n_vocab = moon_tokenizer_n_vocab(tok);
    {
        moon_jinja_error_t why;
        char              *bos_text = token_text(gguf, moon_tokenizer_bos(tok));
        char              *eos_text = token_text(gguf, moon_tokenizer_eos(tok));

        moon_gw_template_init_jinja(tpl, jinja, (size_t)len, moon_tokenizer_bos(tok),
                                    moon_tokenizer_eos(tok), bos_text, eos_text,
                                    jinja != NULL ? find_special : NULL, &sa, &why);
        moon_free(bos_text);
        moon_free(eos_text);
        if (!tpl->recognised) {
            MOON_WARN("the chat template of %s stopped at %d:%d: %s; chat prompts use the plain "
                      "template",
                      path, why.line, why.col, why.msg);
        }
    }
    *tok_p = tok;
out:
    moon_gguf_close(gguf);
    return status;
}
