/* actors/gateway/gw_json.c - cJSON glue (see gw_json.h). */
#include "gw_json.h"

#include "moonlet/alloc.h"

#include <math.h>
#include <string.h>

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
