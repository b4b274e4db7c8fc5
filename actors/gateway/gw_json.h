/* actors/gateway/gw_json.h - cJSON glue for the gateway: compact printing into
 * moon_malloc'd memory (so every text the gateway builds is freed with
 * moon_free) and typed reads of request fields that tell wrong types apart
 * from absent ones. Pure functions, any thread. */
#ifndef MOON_ACTORS_GW_JSON_H
#define MOON_ACTORS_GW_JSON_H

#include "gw_errors.h"
#include "moonlet/status.h"

#include <cjson/cJSON.h>

#include <stddef.h>

/* Compact JSON of item, NUL-terminated, moon_malloc'd; NULL when out of memory.
 * len_p (optional) gets its length. */
char *moon_gw_json_print(const cJSON *item, size_t *len_p);
/* The same between before and after ("data: " and "\n\n": an SSE event). */
char *moon_gw_json_print_wrapped(const cJSON *item, const char *before, const char *after,
                                 size_t *len_p);
/* before + text[0..len) + after, NUL-terminated, moon_malloc'd; NULL when out
 * of memory. len_p (optional) gets its length. */
char *moon_gw_json_wrap(const char *before, const char *text, size_t len, const char *after,
                        size_t *len_p);

/* Parses a request body strictly: one JSON value and nothing after it but
 * whitespace, no object with the same key twice (at any depth), no NUL or
 * raw control character inside a string (cJSON's strings end at a NUL, so a
 * "\u0000" would silently cut a prompt). *root_p: the value (cJSON_Delete
 * it). MOON_ERR_INVALID_PARAM with why_p (static text) and param (the
 * duplicated key, "" otherwise; at most param_cap bytes) when the body is
 * refused; MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_json_parse_strict(const char *body, size_t len, cJSON **root_p,
                                        const char **why_p, char *param, size_t param_cap);

/* A request body: moon_gw_json_parse_strict, and a JSON object. MOON_OK:
 * *root_p (cJSON_Delete it); MOON_ERR_INVALID_PARAM with err set (400, the
 * duplicated key as param); MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_json_parse_body(const char *body, size_t len, cJSON **root_p,
                                      moon_gw_error_t *err);

/* UTF-8: the length of the longest valid prefix of s[0..len). Overlong
 * forms, surrogates and code points past U+10FFFF are invalid. */
size_t moon_gw_utf8_valid_len(const char *s, size_t len);
/* Copies the NUL-terminated src into dst (cap bytes, NUL-terminated) as valid
 * UTF-8: each invalid byte becomes U+FFFD; truncated at a character boundary. */
void moon_gw_utf8_copy(char *dst, size_t cap, const char *src);

/* Field lookups on an object (case-sensitive). Return 0 when the field is
 * absent or JSON null, 1 when present with the right type (value written),
 * -1 when present with another type. Integers must be whole numbers within
 * [lo, hi]; -1 also when out of range. */
int moon_gw_json_bool(const cJSON *obj, const char *name, int *v_p);
int moon_gw_json_int(const cJSON *obj, const char *name, double lo, double hi, long long *v_p);
int moon_gw_json_num(const cJSON *obj, const char *name, double *v_p);
int moon_gw_json_str(const cJSON *obj, const char *name, const char **v_p);

#endif /* MOON_ACTORS_GW_JSON_H */
