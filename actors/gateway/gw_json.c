/* actors/gateway/gw_json.c - cJSON glue (see gw_json.h). */
#include "gw_json.h"

#include "moonlet/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Keys of an object with more children than this are sorted to find twins
 * (pairwise below: no allocation for the usual small objects). */
#define DUP_PAIRWISE_MAX 16

char *moon_gw_json_wrap(const char *before, const char *text, size_t len, const char *after,
                        size_t *len_p)
{
    size_t nb = strlen(before), na = strlen(after);
    char  *out = moon_malloc(nb + len + na + 1);

    if (out != NULL) {
        memcpy(out, before, nb);
        memcpy(out + nb, text, len);
        memcpy(out + nb + len, after, na + 1);
        if (len_p != NULL) {
            *len_p = nb + len + na;
        }
    }
    return out;
}

char *moon_gw_json_print_wrapped(const cJSON *item, const char *before, const char *after,
                                 size_t *len_p)
{
    char *text = cJSON_PrintUnformatted(item);
    char *out;

    if (text == NULL) {
        return NULL;
    }
    out = moon_gw_json_wrap(before, text, strlen(text), after, len_p);
    cJSON_free(text);
    return out;
}

char *moon_gw_json_print(const cJSON *item, size_t *len_p)
{
    return moon_gw_json_print_wrapped(item, "", "", len_p);
}

static const cJSON *field(const cJSON *obj, const char *name)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);

    return f == NULL || cJSON_IsNull(f) ? NULL : f;
}

int moon_gw_json_bool(const cJSON *obj, const char *name, int *v_p)
{
    const cJSON *f = field(obj, name);

    if (f == NULL) {
        return 0;
    }
    if (!cJSON_IsBool(f)) {
        return -1;
    }
    *v_p = cJSON_IsTrue(f);
    return 1;
}

int moon_gw_json_int(const cJSON *obj, const char *name, double lo, double hi, long long *v_p)
{
    const cJSON *f = field(obj, name);
    double       v;

    if (f == NULL) {
        return 0;
    }
    if (!cJSON_IsNumber(f)) {
        return -1;
    }
    v = f->valuedouble;
    if (!(v >= lo && v <= hi) || floor(v) != v) {
        return -1;
    }
    *v_p = (long long)v;
    return 1;
}

int moon_gw_json_num(const cJSON *obj, const char *name, double *v_p)
{
    const cJSON *f = field(obj, name);

    if (f == NULL) {
        return 0;
    }
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble)) {
        return -1;
    }
    *v_p = f->valuedouble;
    return 1;
}

int moon_gw_json_str(const cJSON *obj, const char *name, const char **v_p)
{
    const cJSON *f = field(obj, name);

    if (f == NULL) {
        return 0;
    }
    if (!cJSON_IsString(f)) {
        return -1;
    }
    *v_p = f->valuestring;
    return 1;
}

/* ---- strict parsing ------------------------------------------------------------ */

/* Strings: no raw control character, no \u0000 (cJSON would cut the string). */
static const char *scan_strings(const char *s, size_t len)
{
    int in_str = 0;

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (!in_str) {
            in_str = c == '"';
            continue;
        }
        if (c == '"') {
            in_str = 0;
        } else if (c < 0x20) {
            return "a control character (below U+0020) inside a string must be escaped";
        } else if (c == '\\' && i + 1 < len) {
            if (s[i + 1] == 'u' && i + 5 < len && memcmp(s + i + 2, "0000", 4) == 0) {
                return "a NUL character (\\u0000) inside a string is not supported";
            }
            i++; /* the escaped character */
        }
    }
    return NULL;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key found twice in an object under item (NULL: none); *oom_p on
 * an allocation failure. */
static const char *find_twin(const cJSON *item, int *oom_p)
{
    const cJSON *e;
    const char  *twin = NULL;
    int          n    = 0;

    if (!cJSON_IsObject(item) && !cJSON_IsArray(item)) {
        return NULL;
    }
    for (e = item->child; e != NULL; e = e->next) {
        n++;
    }
    if (cJSON_IsObject(item) && n > 1) {
        if (n <= DUP_PAIRWISE_MAX) {
            for (const cJSON *a = item->child; a != NULL && twin == NULL; a = a->next) {
                for (const cJSON *b = a->next; b != NULL; b = b->next) {
                    if (strcmp(a->string, b->string) == 0) {
                        twin = a->string;
                        break;
                    }
                }
            }
        } else {
            const char **keys = moon_malloc((size_t)n * sizeof(*keys));
            int          i    = 0;

            if (keys == NULL) {
                *oom_p = 1;
                return NULL;
            }
            for (e = item->child; e != NULL; e = e->next) {
                keys[i++] = e->string;
            }
            qsort(keys, (size_t)n, sizeof(*keys), cmp_key);
            for (i = 1; i < n && twin == NULL; i++) {
                if (strcmp(keys[i - 1], keys[i]) == 0) {
                    twin = keys[i];
                }
            }
            moon_free(keys);
        }
    }
    for (e = item->child; e != NULL && twin == NULL && !*oom_p; e = e->next) {
        twin = find_twin(e, oom_p);
    }
    return twin;
}

moon_status_t moon_gw_json_parse_strict(const char *body, size_t len, cJSON **root_p,
                                        const char **why_p, char *param, size_t param_cap)
{
    const char *end = NULL;
    const char *why;
    const char *twin;
    cJSON      *root;
    int         oom = 0;

    if (param_cap > 0) {
        param[0] = '\0';
    }
    why = scan_strings(body, len);
    if (why != NULL) {
        *why_p = why;
        return MOON_ERR_INVALID_PARAM;
    }
    root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (root == NULL) {
        *why_p = "the body is not valid JSON";
        return MOON_ERR_INVALID_PARAM;
    }
    for (; end != NULL && end < body + len; end++) {
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            cJSON_Delete(root);
            *why_p = "the body has data after its JSON value";
            return MOON_ERR_INVALID_PARAM;
        }
    }
    twin = find_twin(root, &oom);
    if (oom) {
        cJSON_Delete(root);
        return MOON_ERR_NO_MEMORY;
    }
    if (twin != NULL) {
        if (param_cap > 0) {
            moon_gw_utf8_copy(param, param_cap, twin);
        }
        cJSON_Delete(root);
        *why_p = "the body has a key twice in one object";
        return MOON_ERR_INVALID_PARAM;
    }
    *root_p = root;
    return MOON_OK;
}

/* ---- UTF-8 ---------------------------------------------------------------------- */

/* The length of the valid character at s[0..len), 0 if invalid. */
static size_t utf8_char(const unsigned char *s, size_t len)
{
    uint32_t cp;
    size_t   n;

    if (s[0] < 0x80) {
        return 1;
    }
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        n  = 2;
        cp = s[0] & 0x1fu;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        n  = 3;
        cp = s[0] & 0x0fu;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        n  = 4;
        cp = s[0] & 0x07u;
    } else {
        return 0;
    }
    if (len < n) {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            return 0;
        }
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
        return 0;
    }
    return n;
}

size_t moon_gw_utf8_valid_len(const char *s, size_t len)
{
    size_t i = 0;

    while (i < len) {
        size_t n = utf8_char((const unsigned char *)s + i, len - i);

        if (n == 0) {
            break;
        }
        i += n;
    }
    return i;
}

void moon_gw_utf8_copy(char *dst, size_t cap, const char *src)
{
    static const char repl[] = "\xef\xbf\xbd"; /* U+FFFD */
    size_t            len    = strlen(src);
    size_t            i = 0, o = 0;

    if (cap == 0) {
        return;
    }
    while (i < len) {
        size_t      n    = utf8_char((const unsigned char *)src + i, len - i);
        const char *from = n > 0 ? src + i : repl;
        size_t      w    = n > 0 ? n : 3;

        if (o + w + 1 > cap) {
            break;
        }
        memcpy(dst + o, from, w);
        o += w;
        i += n > 0 ? n : 1;
    }
    dst[o] = '\0';
}

moon_status_t moon_gw_json_parse_body(const char *body, size_t len, cJSON **root_p,
                                      moon_gw_error_t *err)
{
    const char   *why = NULL;
    char          twin[48];
    moon_status_t status = moon_gw_json_parse_strict(body, len, root_p, &why, twin, sizeof(twin));

    if (status == MOON_ERR_INVALID_PARAM) {
        moon_gw_error_set(err, 400, NULL, twin[0] != '\0' ? twin : NULL, "%s%s%s%s", why,
                          twin[0] != '\0' ? " ('" : "", twin, twin[0] != '\0' ? "')" : "");
        return status;
    }
    if (status == MOON_OK && !cJSON_IsObject(*root_p)) {
        cJSON_Delete(*root_p);
        *root_p = NULL;
        moon_gw_error_set(err, 400, NULL, NULL, "the body must be a JSON object");
        return MOON_ERR_INVALID_PARAM;
    }
    return status;
}
