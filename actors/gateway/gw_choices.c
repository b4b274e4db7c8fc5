/* actors/gateway/gw_choices.c - the choices of one request (see gw_choices.h). */
#include "gw_choices.h"

#include "gw_json.h"
#include "moonlet/alloc.h"

#include <cjson/cJSON.h>

#include <string.h>

void moon_gw_choices_usage(const moon_gw_choice_t *ch, uint32_t n, uint32_t per, moon_gw_usage_t *u)
{
    *u                   = ch[0].u;
    u->prompt_tokens     = 0;
    u->cached_tokens     = 0;
    u->completion_tokens = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i % per == 0) {
            u->prompt_tokens += ch[i].u.prompt_tokens;
            u->cached_tokens += ch[i].u.cached_tokens;
        }
        u->completion_tokens += ch[i].u.completion_tokens;
    }
}

void moon_gw_choices_rank(const moon_gw_choice_t *ch, uint32_t n_ch, uint32_t n, uint32_t *order)
{
    uint8_t taken[MOON_GW_MAX_CHOICES] = {0};

    for (uint32_t r = 0; r < n && r < n_ch; r++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t i = 0; i < n_ch && i < MOON_GW_MAX_CHOICES; i++) {
            if (!taken[i] && (best == UINT32_MAX || ch[i].sum_lp > ch[best].sum_lp)) {
                best = i;
            }
        }
        taken[best] = 1;
        order[r]    = best;
    }
}

char *moon_gw_choices_merge(char *const *bodies, uint32_t n, size_t *len_p)
{
    cJSON *o       = bodies[0] != NULL ? cJSON_Parse(bodies[0]) : NULL;
    cJSON *choices = cJSON_GetObjectItemCaseSensitive(o, "choices");
    char  *out;

    if (!cJSON_IsArray(choices)) {
        cJSON_Delete(o);
        return NULL;
    }
    for (uint32_t i = 1; i < n; i++) {
        cJSON *other = bodies[i] != NULL ? cJSON_Parse(bodies[i]) : NULL;
        cJSON *its   = cJSON_GetObjectItemCaseSensitive(other, "choices");
        cJSON *c     = cJSON_IsArray(its) ? cJSON_DetachItemFromArray(its, 0) : NULL;

        cJSON_Delete(other);
        if (c == NULL) {
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToArray(choices, c);
    }
    out = moon_gw_json_print(o, len_p);
    cJSON_Delete(o);
    return out;
}

char *moon_gw_echo_text(const moon_gw_request_t *req, const moon_tokenizer_t *tok)
{
    size_t cap;
    size_t n = 0;
    char  *text;

    if (req->prompt != NULL) {
        return moon_strdup(req->prompt);
    }
    if (tok == NULL || req->n_tokens == 0) {
        return moon_strdup("");
    }
    cap  = (size_t)req->n_tokens * (moon_tokenizer_max_piece(tok) + 1) + 1;
    text = moon_malloc(cap);
    if (text == NULL) {
        return NULL;
    }
    if (moon_tokenizer_decode(tok, -1, req->tokens, req->n_tokens, text, cap, &n) != MOON_OK) {
        text[0] = '\0';
    }
    return text;
}
