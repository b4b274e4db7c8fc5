/* actors/gateway/gw_tool_parse.c - content and tool calls out of an answer
 * (see gw_tool_parse.h). */
#include "gw_tool_parse.h"

#include "moonlet/alloc.h"

#include <cjson/cJSON.h>

#include <string.h>

enum {
    ST_START = 0, /* bare_start syntaxes, nothing but whitespace seen yet */
    ST_TEXT  = 1, /* content, looking for the open tag */
    ST_CALLS = 2, /* after the open tag (or a bare JSON value opening the answer) */
};

static int is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static int all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!is_space(s[i])) {
            return 0;
        }
    }
    return 1;
}

static const char *find(const char *s, size_t n, const char *what)
{
    size_t w = strlen(what);

    for (size_t i = 0; w <= n && i <= n - w; i++) {
        if (memcmp(s + i, what, w) == 0) {
            return s + i;
        }
    }
    return NULL;
}

/* The length of the longest proper prefix of tag that ends s (n bytes). */
static size_t partial_tag(const char *s, size_t n, const char *tag)
{
    size_t t = strlen(tag);

    for (size_t k = t - 1 < n ? t - 1 : n; k > 0; k--) {
        if (memcmp(s + n - k, tag, k) == 0) {
            return k;
        }
    }
    return 0;
}

/* The length of the JSON object or array s begins with (s[0] is '{' or
 * '['); 0 while it is not closed within n bytes. Strings are skipped, so a
 * bracket inside one does not count. */
static size_t value_end(const char *s, size_t n)
{
    size_t depth  = 0;
    int    in_str = 0, esc = 0;

    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (esc) {
                esc = 0;
            } else if (c == '\\') {
                esc = 1;
            } else if (c == '"') {
                in_str = 0;
            }
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return i + 1;
        }
    }
    return 0;
}

static void content(moon_gw_tool_parser_t *p, const char *s, size_t n)
{
    if (n > 0) {
        p->on_content(p->arg, s, n);
    }
}

static void drop(moon_gw_tool_parser_t *p, size_t used)
{
    memmove(p->pend.data, p->pend.data + used, p->pend.len - used + 1);
    p->pend.len -= used;
}

static const cJSON *args_of(const moon_gw_tool_parser_t *p, const cJSON *o)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, p->syn->args_key);

    if (a == NULL) {
        a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    }
    if (a == NULL) {
        a = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    }
    return a;
}

static int is_call(const moon_gw_tool_parser_t *p, const cJSON *o)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *args = args_of(p, o);

    return cJSON_IsObject(o) && cJSON_IsString(name) && name->valuestring[0] != '\0' &&
           (cJSON_IsObject(args) || cJSON_IsString(args));
}

static void pass_one(moon_gw_tool_parser_t *p, const cJSON *c)
{
    const cJSON *args = args_of(p, c);
    char        *text = cJSON_IsString(args) ? NULL : cJSON_PrintUnformatted(args);

    if (!cJSON_IsString(args) && text == NULL) {
        p->pend.failed = 1; /* out of memory */
        return;
    }
    p->on_call(p->arg, cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring,
               text != NULL ? text : args->valuestring);
    p->n_calls++;
    cJSON_free(text);
}

/* The calls of json (len bytes): an object that is a call, or a non-empty
 * list of calls, passed on. 0: it is none of those (nothing passed on). */
static int pass_calls(moon_gw_tool_parser_t *p, const char *json, size_t len)
{
    cJSON       *o = cJSON_ParseWithLength(json, len);
    const cJSON *c;
    int          ok = cJSON_IsArray(o) ? cJSON_GetArraySize(o) > 0 : is_call(p, o);

    if (cJSON_IsArray(o)) {
        cJSON_ArrayForEach(c, o)
        {
            ok &= is_call(p, c);
        }
        cJSON_ArrayForEach(c, o)
        {
            if (ok) {
                pass_one(p, c);
            }
        }
    } else if (ok) {
        pass_one(p, o);
    }
    cJSON_Delete(o);
    return ok;
}

/* Not a call after all: the tag and what followed it go out as content. */
static void fall_back(moon_gw_tool_parser_t *p, size_t used)
{
    content(p, p->opened.data, p->opened.len);
    content(p, p->pend.data, used);
    drop(p, used);
    p->opened.len = 0;
    p->state      = ST_TEXT;
}

/* One step over what is held; 0 when it needs more text. */
static int step_start(moon_gw_tool_parser_t *p)
{
    const char *s = p->pend.data, *open = p->syn->open;
    size_t      n = p->pend.len, i = 0, m, t = strlen(open);

    while (i < n && is_space(s[i])) {
        i++;
    }
    if (i == n) {
        return 0;
    }
    m = n - i;
    if (memcmp(s + i, open, m < t ? m : t) == 0) {
        if (m < t) {
            return 0; /* the tag, maybe */
        }
        p->state = ST_TEXT; /* which finds it */
        return 1;
    }
    /* a JSON value: the tag was a control token, and decoded to nothing */
    p->state = s[i] == '{' || s[i] == '[' ? ST_CALLS : ST_TEXT;
    return 1;
}

static int step_text(moon_gw_tool_parser_t *p)
{
    const char *s = p->pend.data, *open = find(s, p->pend.len, p->syn->open);
    size_t      n = p->pend.len, keep;

    if (open != NULL) {
        /* the whitespace that leads up to a call is no content (but kept
         * with the tag, should the call turn out to be none) */
        size_t before = (size_t)(open - s), used = before + strlen(p->syn->open);
        while (before > 0 && is_space(s[before - 1])) {
            before--;
        }
        content(p, s, before);
        moon_gw_buf_append(&p->opened, s + before, used - before);
        drop(p, used);
        p->state = ST_CALLS;
        return 1;
    }
    /* a tag's beginning, and the whitespace that may lead up to it */
    keep = partial_tag(s, n, p->syn->open);
    while (keep < n && is_space(s[n - 1 - keep])) {
        keep++;
    }
    if (keep == n) {
        return 0;
    }
    content(p, s, n - keep);
    drop(p, n - keep);
    return 0;
}

static int step_calls(moon_gw_tool_parser_t *p)
{
    const char *s = p->pend.data, *close;
    size_t      n = p->pend.len, i = 0, len;

    if (p->syn->close != NULL) {
        close = find(s, n, p->syn->close);
        if (close == NULL) {
            return 0;
        }
        len = (size_t)(close - s) + strlen(p->syn->close);
        if (!pass_calls(p, s, (size_t)(close - s))) {
            fall_back(p, len);
            return 1;
        }
        drop(p, len);
        p->opened.len = 0;
        p->state      = ST_TEXT;
        return 1;
    }
    /* calls one after the other (Llama 3.1 may separate them with ';') */
    while (i < n && (is_space(s[i]) || (p->opened.len == 0 && p->n_calls > 0 && s[i] == ';'))) {
        i++;
    }
    if (i == n) {
        return 0;
    }
    if (s[i] != '{' && s[i] != '[') {
        fall_back(p, i); /* no call: the tag, and what follows it, are text */
        return 1;
    }
    len = value_end(s + i, n - i);
    if (len == 0) {
        return 0;
    }
    if (!pass_calls(p, s + i, len)) {
        fall_back(p, i + len);
        return 1;
    }
    drop(p, i + len);
    p->opened.len = 0;
    return 1;
}

void moon_gw_tool_parser_init(moon_gw_tool_parser_t *p, const moon_gw_tool_syntax_t *syn,
                              moon_gw_tool_content_fn on_content, moon_gw_tool_call_fn on_call,
                              void *arg)
{
    memset(p, 0, sizeof(*p));
    p->syn        = syn != NULL ? syn : moon_gw_tool_syntax_default();
    p->on_content = on_content;
    p->on_call    = on_call;
    p->arg        = arg;
    p->state      = p->syn->bare_start ? ST_START : ST_TEXT;
    moon_gw_buf_init(&p->pend);
    moon_gw_buf_init(&p->opened);
}

int moon_gw_tool_parser_feed(moon_gw_tool_parser_t *p, const char *text, size_t n)
{
    int more = 1;

    moon_gw_buf_append(&p->pend, text, n);
    while (more && p->pend.len > 0 && !p->pend.failed && !p->opened.failed) {
        switch (p->state) {
        case ST_START:
            more = step_start(p);
            break;
        case ST_TEXT:
            more = step_text(p);
            break;
        default:
            more = step_calls(p);
            break;
        }
    }
    return !p->pend.failed && !p->opened.failed;
}

void moon_gw_tool_parser_end(moon_gw_tool_parser_t *p)
{
    const char *s = p->pend.data;
    size_t      n = p->pend.len;

    if (p->pend.failed || p->opened.failed) {
        return;
    }
    if (p->state == ST_CALLS && p->opened.len > 0) {
        content(p, p->opened.data, p->opened.len); /* an unclosed call */
        content(p, s, n);
    } else if (n > 0 && !((p->n_calls > 0 || p->state == ST_CALLS) && all_space(s, n))) {
        content(p, s, n);
    }
    if (n > 0) {
        drop(p, n);
    }
    p->opened.len = 0;
}

void moon_gw_tool_parser_fini(moon_gw_tool_parser_t *p)
{
    moon_gw_buf_fini(&p->pend);
    moon_gw_buf_fini(&p->opened);
}
