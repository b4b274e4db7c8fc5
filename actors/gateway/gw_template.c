/* actors/gateway/gw_template.c - chat templates recognised by their markers (see
 * gw_template.h). Rendering appends to a text part until a special token
 * closes it. */
#include "gw_template.h"

#include "gw_buf.h"
#include "moonlet/alloc.h"

#include <string.h>

static int has(const char *jinja, size_t len, const char *marker)
{
    size_t n = strlen(marker);

    for (size_t i = 0; i + n <= len; i++) {
        if (memcmp(jinja + i, marker, n) == 0) {
            return 1;
        }
    }
    return 0;
}

void moon_gw_template_init(moon_gw_template_t *t, const char *jinja, size_t len, int32_t bos,
                           int32_t eos, moon_gw_special_fn special, void *arg)
{
    memset(t, 0, sizeof(*t));
    t->bos        = bos;
    t->eos        = eos;
    t->im_start   = special != NULL ? special(arg, "<|im_start|>") : -1;
    t->im_end     = special != NULL ? special(arg, "<|im_end|>") : -1;
    t->kind       = MOON_GW_TPL_PLAIN;
    t->recognised = 1;
    t->tools      = moon_gw_tool_syntax_default();
    if (jinja == NULL) {
        return;
    }
    if (has(jinja, len, "<|im_start|>")) {
        t->kind = MOON_GW_TPL_CHATML;
    } else if (has(jinja, len, "[INST]")) {
        t->kind = MOON_GW_TPL_LLAMA2;
    } else if (has(jinja, len, "<|user|>") || has(jinja, len, "<|assistant|>")) {
        t->kind = MOON_GW_TPL_ZEPHYR;
    } else {
        t->recognised = 0;
    }
}

const char *moon_gw_template_name(moon_gw_tpl_kind_t kind)
{
    static const char *names[] = {"plain", "chatml", "llama2", "zephyr", "jinja"};

    return (unsigned)kind < MOON_ARRAY_SIZE(names) ? names[kind] : "?";
}

typedef struct {
    moon_gw_prompt_t *out;
    moon_gw_buf_t     text;
    int               failed;
} render_t;

int moon_gw_prompt_push(moon_gw_prompt_t *p, int32_t special, char *text)
{
    if (p->n == p->cap) {
        uint32_t        cap   = p->cap ? p->cap * 2 : 8;
        moon_gw_part_t *parts = moon_realloc(p->parts, cap * sizeof(*parts));
        if (parts == NULL) {
            return 0;
        }
        p->parts = parts;
        p->cap   = cap;
    }
    p->parts[p->n].special = special;
    p->parts[p->n].text    = text;
    p->n++;
    return 1;
}

/* Closes the current text part (if any). */
static void flush(render_t *r)
{
    char  *text;
    size_t len;

    if (r->text.len == 0 && !r->text.failed) {
        return;
    }
    if (moon_gw_buf_take(&r->text, &text, &len) != MOON_OK) {
        r->failed = 1;
        return;
    }
    if (!moon_gw_prompt_push(r->out, -1, text)) {
        moon_free(text);
        r->failed = 1;
    }
}

static void text(render_t *r, const char *s)
{
    moon_gw_buf_puts(&r->text, s);
}

/* s without leading and trailing white space. */
static void text_stripped(render_t *r, const char *s)
{
    size_t n = strlen(s);

    while (n > 0 && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')) {
        s++;
        n--;
    }
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) {
        n--;
    }
    moon_gw_buf_append(&r->text, s, n);
}

/* A special token, or its text when the vocabulary has none. */
static void special(render_t *r, int32_t id, const char *spelled)
{
    if (id < 0) {
        text(r, spelled);
        return;
    }
    flush(r);
    if (!r->failed && !moon_gw_prompt_push(r->out, id, NULL)) {
        r->failed = 1;
    }
}

static int is_system(const char *role)
{
    return strcmp(role, "system") == 0 || strcmp(role, "developer") == 0;
}

static int is_assistant(const char *role)
{
    return strcmp(role, "assistant") == 0;
}

static void render_plain(render_t *r, const moon_gw_chat_msg_t *msgs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (is_system(msgs[i].role)) {
            text(r, msgs[i].content);
            text(r, "\n\n");
        } else {
            text(r, is_assistant(msgs[i].role) ? "Assistant: " : "User: ");
            text(r, msgs[i].content);
            text(r, "\n");
        }
    }
    text(r, "Assistant:");
}

static void render_chatml(render_t *r, const moon_gw_template_t *t, const moon_gw_chat_msg_t *msgs,
                          uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        special(r, t->im_start, "<|im_start|>");
        text(r, is_system(msgs[i].role) ? "system" : msgs[i].role);
        text(r, "\n");
        text(r, msgs[i].content);
        special(r, t->im_end, "<|im_end|>");
        text(r, "\n");
    }
    special(r, t->im_start, "<|im_start|>");
    text(r, "assistant\n");
}

static void render_llama2(render_t *r, const moon_gw_template_t *t, const moon_gw_chat_msg_t *msgs,
                          uint32_t n)
{
    const char *sys   = NULL;
    int         first = 1;

    for (uint32_t i = 0; i < n; i++) {
        if (is_system(msgs[i].role)) {
            sys = msgs[i].content;
        } else if (is_assistant(msgs[i].role)) {
            text(r, " ");
            text_stripped(r, msgs[i].content);
            text(r, " ");
            special(r, t->eos, "</s>");
        } else {
            if (!first || t->bos >= 0) {
                special(r, t->bos, "<s>");
            }
            first = 0;
            text(r, "[INST] ");
            if (sys != NULL) {
                text(r, "<<SYS>>\n");
                text_stripped(r, sys);
                text(r, "\n<</SYS>>\n\n");
                sys = NULL;
            }
            text_stripped(r, msgs[i].content);
            text(r, " [/INST]");
        }
    }
}

static void render_zephyr(render_t *r, const moon_gw_template_t *t, const moon_gw_chat_msg_t *msgs,
                          uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        text(r, is_system(msgs[i].role)      ? "<|system|>\n"
                : is_assistant(msgs[i].role) ? "<|assistant|>\n"
                                             : "<|user|>\n");
        text(r, msgs[i].content);
        special(r, t->eos, "</s>");
        text(r, "\n");
    }
    text(r, "<|assistant|>\n");
}

moon_status_t moon_gw_template_render(const moon_gw_template_t *t, const moon_gw_chat_msg_t *msgs,
                                      uint32_t n, moon_gw_prompt_t *out)
{
    render_t r = {.out = out};

    memset(out, 0, sizeof(*out));
    moon_gw_buf_init(&r.text);
    /* Llama-2 opens every user turn with BOS itself. */
    if (t->kind != MOON_GW_TPL_LLAMA2 && t->bos >= 0) {
        special(&r, t->bos, "<s>");
    }
    switch (t->kind) {
    case MOON_GW_TPL_CHATML:
        render_chatml(&r, t, msgs, n);
        break;
    case MOON_GW_TPL_LLAMA2:
        render_llama2(&r, t, msgs, n);
        break;
    case MOON_GW_TPL_ZEPHYR:
        render_zephyr(&r, t, msgs, n);
        break;
    default:
        render_plain(&r, msgs, n);
        break;
    }
    flush(&r);
    moon_gw_buf_fini(&r.text);
    if (r.failed) {
        moon_gw_prompt_fini(out);
        return MOON_ERR_NO_MEMORY;
    }
    return MOON_OK;
}

void moon_gw_prompt_fini(moon_gw_prompt_t *p)
{
    for (uint32_t i = 0; i < p->n; i++) {
        moon_free(p->parts[i].text);
    }
    moon_free(p->parts);
    memset(p, 0, sizeof(*p));
}

moon_status_t moon_gw_prompt_text(const moon_gw_prompt_t *p, const moon_gw_template_t *t,
                                  char **text_p)
{
    moon_gw_buf_t b;

    moon_gw_buf_init(&b);
    moon_gw_buf_puts(&b, "");
    for (uint32_t i = 0; i < p->n; i++) {
        int32_t id = p->parts[i].special;

        if (id < 0) {
            moon_gw_buf_puts(&b, p->parts[i].text);
        } else {
            moon_gw_buf_puts(&b, id == t->bos        ? "<s>"
                                 : id == t->eos      ? "</s>"
                                 : id == t->im_start ? "<|im_start|>"
                                 : id == t->im_end   ? "<|im_end|>"
                                                     : "");
        }
    }
    return moon_gw_buf_take(&b, text_p, NULL);
}

moon_status_t moon_gw_prompt_tokenize(const moon_gw_prompt_t *p, const moon_tokenizer_t *tok,
                                      int32_t **ids_p, uint32_t *n_p)
{
    size_t   cap = 0;
    size_t   n   = 0;
    int32_t *ids;

    for (uint32_t i = 0; i < p->n; i++) {
        cap += p->parts[i].special >= 0 ? 1 : strlen(p->parts[i].text) + 2;
    }
    ids = moon_malloc((cap ? cap : 1) * sizeof(int32_t));
    if (ids == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < p->n; i++) {
        size_t        got = 0;
        moon_status_t status;

        if (p->parts[i].special >= 0) {
            ids[n++] = p->parts[i].special;
            continue;
        }
        status = moon_tokenizer_encode(tok, p->parts[i].text, strlen(p->parts[i].text), false,
                                       ids + n, cap - n, &got);
        if (status != MOON_OK) {
            moon_free(ids);
            return status;
        }
        n += got;
    }
    *ids_p = ids;
    *n_p   = (uint32_t)n;
    return MOON_OK;
}
