/* actors/gateway/gw_template_jinja.c - the model's own chat template through
 * Moonlet's Jinja engine (see gw_template.h): loaded and tried once at
 * start-up, rendered per request with the request's messages and tools. */
#include "gw_template.h"

#include "moonlet/alloc.h"

#include <cjson/cJSON.h>
#include <string.h>

/* A conversation that every family's template must render: if it cannot,
 * no request would fare better, so the gateway falls back at start-up. */
static const char g_sample_msgs[] =
    "[{\"role\":\"system\",\"content\":\"You are helpful.\"},"
    "{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello.\"},"
    "{\"role\":\"user\",\"content\":\"Weather?\"}]";
static const char g_sample_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";

void moon_gw_template_fini(moon_gw_template_t *t)
{
    moon_jinja_destroy(t->jinja);
    moon_free(t->bos_text);
    moon_free(t->eos_text);
    t->jinja    = NULL;
    t->bos_text = t->eos_text = NULL;
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? moon_strdup(s) : NULL;
}

void moon_gw_template_init_jinja(moon_gw_template_t *t, const char *jinja, size_t len, int32_t bos,
                                 int32_t eos, const char *bos_text, const char *eos_text,
                                 moon_gw_special_fn special, void *arg, moon_jinja_error_t *why)
{
    moon_jinja_error_t  err_local;
    moon_jinja_error_t *err = why != NULL ? why : &err_local;
    moon_gw_prompt_t    p;
    moon_jinja_t       *compiled = NULL;

    moon_gw_template_init(t, NULL, 0, bos, eos, special, arg);
    memset(err, 0, sizeof(*err));
    if (jinja == NULL) {
        return;
    }
    t->recognised = 0;
    if (moon_jinja_parse(jinja, len, &compiled, err) != MOON_OK) {
        return;
    }
    t->jinja    = compiled;
    t->bos_text = dup_or_null(bos_text);
    t->eos_text = dup_or_null(eos_text);
    t->kind     = MOON_GW_TPL_JINJA;
    if ((bos_text != NULL && t->bos_text == NULL) || (eos_text != NULL && t->eos_text == NULL) ||
        moon_gw_template_render_jinja(t, g_sample_msgs, g_sample_tools, 1, &p, err) != MOON_OK) {
        if (err->msg[0] == 0) {
            strcpy(err->msg, "out of memory");
        }
        moon_gw_template_fini(t);
        t->kind = MOON_GW_TPL_PLAIN; /* and Hermes' tool syntax */
        return;
    }
    moon_gw_prompt_fini(&p);
    t->recognised = 1;
    t->tools      = moon_gw_tool_syntax_pick(jinja, len);
}

/* The variables a template sees, as Hugging Face passes them. */
static char *vars_json(const moon_gw_template_t *t, const char *msgs_json, const char *tools_json,
                       int open_turn)
{
    cJSON *v = cJSON_CreateObject();
    char  *s = NULL;

    if (v == NULL) {
        return NULL;
    }
    if (cJSON_AddRawToObject(v, "messages", msgs_json) != NULL &&
        (tools_json == NULL || cJSON_AddRawToObject(v, "tools", tools_json) != NULL) &&
        cJSON_AddBoolToObject(v, "add_generation_prompt", open_turn) != NULL &&
        (t->bos_text == NULL || cJSON_AddStringToObject(v, "bos_token", t->bos_text) != NULL) &&
        (t->eos_text == NULL || cJSON_AddStringToObject(v, "eos_token", t->eos_text) != NULL)) {
        s = cJSON_PrintUnformatted(v);
    }
    cJSON_Delete(v);
    return s;
}

/* Splits text into parts at the control tokens' texts. 0: out of memory. */
static int split_specials(const moon_gw_template_t *t, const char *text, moon_gw_prompt_t *out)
{
    const char *marks[4] = {t->bos >= 0 ? t->bos_text : NULL, t->eos >= 0 ? t->eos_text : NULL,
                            t->im_start >= 0 ? "<|im_start|>" : NULL,
                            t->im_end >= 0 ? "<|im_end|>" : NULL};
    const int32_t ids[4] = {t->bos, t->eos, t->im_start, t->im_end};
    const char   *run    = text;

    for (const char *s = text; *s != 0;) {
        int hit = -1;
        for (int k = 0; k < 4 && hit < 0; k++) {
            if (marks[k] != NULL && marks[k][0] != 0 &&
                strncmp(s, marks[k], strlen(marks[k])) == 0) {
                hit = k;
            }
        }
        if (hit < 0) {
            s++;
            continue;
        }
        if (s > run) {
            char *part = moon_malloc((size_t)(s - run) + 1);
            if (part == NULL) {
                return 0;
            }
            memcpy(part, run, (size_t)(s - run));
            part[s - run] = 0;
            if (!moon_gw_prompt_push(out, -1, part)) {
                moon_free(part);
                return 0;
            }
        }
        if (!moon_gw_prompt_push(out, ids[hit], NULL)) {
            return 0;
        }
        s += strlen(marks[hit]);
        run = s;
    }
    if (*run != 0) {
        char *part = moon_strdup(run);
        if (part == NULL || !moon_gw_prompt_push(out, -1, part)) {
            moon_free(part);
            return 0;
        }
    }
    return 1;
}

moon_status_t moon_gw_template_render_jinja(const moon_gw_template_t *t, const char *msgs_json,
                                            const char *tools_json, int open_turn,
                                            moon_gw_prompt_t *out, moon_jinja_error_t *err)
{
    char         *vars = vars_json(t, msgs_json, tools_json, open_turn);
    char         *text = NULL;
    moon_status_t status;

    memset(out, 0, sizeof(*out));
    if (vars == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = moon_jinja_render(t->jinja, vars, strlen(vars), &text, NULL, err);
    cJSON_free(vars);
    if (status != MOON_OK) {
        return status == MOON_ERR_NO_MEMORY ? status : MOON_ERR_INVALID_PARAM;
    }
    if (!split_specials(t, text, out)) {
        moon_gw_prompt_fini(out);
        status = MOON_ERR_NO_MEMORY;
    }
    moon_free(text);
    return status;
}
