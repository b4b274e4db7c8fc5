/* actors/gateway/gw_logprobs.c - a choice's logprobs object (see gw_logprobs.h). */
#include "gw_logprobs.h"

#include "gw_json.h"
#include "moonlet/alloc.h"
#include "moonlet/serve_msgs.h"

#include <math.h>
#include <string.h>

void moon_gw_logprobs_init(moon_gw_logprobs_t *lp, int chat, const moon_tokenizer_t *tok,
                           int32_t prev)
{
    memset(lp, 0, sizeof(*lp));
    lp->chat = chat;
    lp->tok  = tok;
    lp->prev = prev;
}

void moon_gw_logprobs_fini(moon_gw_logprobs_t *lp)
{
    cJSON_Delete(lp->root);
    lp->root = NULL;
}

/* JSON has no -inf: a token the model gives no chance gets OpenAI's floor. */
static double finite_lp(float v)
{
    return isfinite(v) ? (double)v : -9999.0;
}

/* The printable text of id after prev (valid UTF-8) into out; its raw bytes in *raw_p. */
static void piece_of(const moon_gw_logprobs_t *lp, int32_t prev, int32_t id, char *out, size_t cap,
                     const char **raw_p, size_t *n_p)
{
    size_t      n   = 0;
    const char *raw = lp->tok != NULL ? moon_tokenizer_piece(lp->tok, prev, id, &n) : NULL;
    char        tmp[256];

    if (raw == NULL) {
        raw = "";
        n   = 0;
    }
    n = n < sizeof(tmp) - 1 ? n : sizeof(tmp) - 1;
    memcpy(tmp, raw, n);
    tmp[n] = '\0';
    moon_gw_utf8_copy(out, cap, tmp);
    *raw_p = raw;
    *n_p   = n;
}

static cJSON *bytes_of(const char *raw, size_t n)
{
    cJSON *a = cJSON_CreateArray();

    for (size_t i = 0; a != NULL && i < n; i++) {
        cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)raw[i]));
    }
    return a;
}

static moon_status_t ensure_root(moon_gw_logprobs_t *lp)
{
    if (lp->root != NULL) {
        return MOON_OK;
    }
    lp->root = cJSON_CreateObject();
    if (lp->root == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    if (lp->chat) {
        if (cJSON_AddArrayToObject(lp->root, "content") == NULL ||
            cJSON_AddNullToObject(lp->root, "refusal") == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
    } else if (cJSON_AddArrayToObject(lp->root, "tokens") == NULL ||
               cJSON_AddArrayToObject(lp->root, "token_logprobs") == NULL ||
               cJSON_AddArrayToObject(lp->root, "top_logprobs") == NULL ||
               cJSON_AddArrayToObject(lp->root, "text_offset") == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    return MOON_OK;
}

moon_status_t moon_gw_logprobs_add(moon_gw_logprobs_t *lp, int32_t token, float logprob,
                                   const uint32_t *top, uint32_t k)
{
    char        text[256];
    const char *raw;
    size_t      n;
    cJSON      *tops;

    if (ensure_root(lp) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    piece_of(lp, lp->prev, token, text, sizeof(text), &raw, &n);
    if (lp->chat) {
        cJSON *e = cJSON_CreateObject();

        if (e == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp->root, "content"), e);
        cJSON_AddStringToObject(e, "token", text);
        cJSON_AddNumberToObject(e, "logprob", finite_lp(logprob));
        cJSON_AddItemToObject(e, "bytes", bytes_of(raw, n));
        tops = cJSON_AddArrayToObject(e, "top_logprobs");
        for (uint32_t i = 0; tops != NULL && i < k; i++) {
            cJSON *t = cJSON_CreateObject();
            float  v;
            char   alt[256];

            memcpy(&v, &top[2 * i + 1], 4);
            piece_of(lp, lp->prev, (int32_t)top[2 * i], alt, sizeof(alt), &raw, &n);
            cJSON_AddItemToArray(tops, t);
            cJSON_AddStringToObject(t, "token", alt);
            cJSON_AddNumberToObject(t, "logprob", finite_lp(v));
            cJSON_AddItemToObject(t, "bytes", bytes_of(raw, n));
        }
    } else {
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp->root, "tokens"), cJSON_CreateString(text));
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp->root, "token_logprobs"),
                             cJSON_CreateNumber(finite_lp(logprob)));
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp->root, "text_offset"),
                             cJSON_CreateNumber(lp->offset));
        tops = cJSON_CreateObject();
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp->root, "top_logprobs"), tops);
        for (uint32_t i = 0; tops != NULL && i < k; i++) {
            float v;
            char  alt[256];

            memcpy(&v, &top[2 * i + 1], 4);
            piece_of(lp, lp->prev, (int32_t)top[2 * i], alt, sizeof(alt), &raw, &n);
            if (cJSON_GetObjectItemCaseSensitive(tops, alt) == NULL) {
                cJSON_AddNumberToObject(tops, alt, finite_lp(v));
            }
        }
        lp->offset += (uint32_t)strlen(text);
    }
    lp->prev = token;
    lp->n++;
    return MOON_OK;
}

moon_status_t moon_gw_logprobs_add_first(moon_gw_logprobs_t *lp, int32_t token)
{
    char        text[256];
    const char *raw;
    size_t      n;

    if (lp->chat || ensure_root(lp) != MOON_OK) {
        return lp->chat ? MOON_ERR_INVALID_PARAM : MOON_ERR_NO_MEMORY;
    }
    piece_of(lp, -1, token, text, sizeof(text), &raw, &n);
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp->root, "tokens"), cJSON_CreateString(text));
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp->root, "token_logprobs"), cJSON_CreateNull());
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp->root, "top_logprobs"), cJSON_CreateNull());
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp->root, "text_offset"),
                         cJSON_CreateNumber(lp->offset));
    lp->offset += (uint32_t)strlen(text);
    lp->prev = token;
    lp->n++;
    return MOON_OK;
}

moon_status_t moon_gw_logprobs_add_prompt(moon_gw_logprobs_t *lp, const int32_t *prompt,
                                          uint32_t n_prompt, const void *msg)
{
    const moon_serve_prompt_logprobs_t *m      = msg;
    const uint32_t                     *lps    = MOON_SPAN_PTR(m, m->lp);
    const uint32_t                     *top    = MOON_SPAN_PTR(m, m->top);
    moon_status_t                       status = MOON_OK;

    if (m->first == 1 && n_prompt > 0) {
        status = moon_gw_logprobs_add_first(lp, prompt[0]);
    }
    for (uint32_t j = 0; status == MOON_OK && j < m->lp.n && m->first + j < n_prompt; j++) {
        float v;

        if (m->k > 0 && m->top.n < (size_t)(j + 1) * 2 * m->k) {
            return MOON_ERR_INVALID_PARAM; /* malformed: fewer alternatives than k */
        }
        memcpy(&v, &lps[j], 4);
        status = moon_gw_logprobs_add(lp, prompt[m->first + j], v,
                                      m->k > 0 ? top + (size_t)j * 2 * m->k : NULL, m->k);
    }
    return status;
}

char *moon_gw_logprobs_take(moon_gw_logprobs_t *lp)
{
    char  *s;
    size_t n = 0;

    if (lp->root == NULL || lp->n == 0) {
        return NULL;
    }
    s = moon_gw_json_print(lp->root, &n);
    cJSON_Delete(lp->root);
    lp->root = NULL;
    lp->n    = 0;
    return s;
}
