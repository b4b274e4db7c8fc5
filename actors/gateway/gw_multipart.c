/* actors/gateway/gw_multipart.c - multipart/form-data (see gw_multipart.h). */
#include "gw_multipart.h"

#include <string.h>
#include <strings.h>

static const char *find(const char *hay, size_t n, const char *needle, size_t m)
{
    if (m == 0 || n < m) {
        return NULL;
    }
    for (size_t i = 0; i + m <= n; i++) {
        if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0) {
            return hay + i;
        }
    }
    return NULL;
}

/* The value of param (e.g. name=) in a header's text [s, e): quoted or not. */
static int param_of(const char *s, const char *e, const char *param, char *out, size_t cap)
{
    size_t pl = strlen(param);

    for (const char *p = s; p + pl <= e; p++) {
        size_t n = 0;
        if (strncasecmp(p, param, pl) != 0 ||
            (p > s && p[-1] != ' ' && p[-1] != ';' && p[-1] != '\t')) {
            continue;
        }
        p += pl;
        if (p < e && *p == '"') {
            p++;
            while (p < e && *p != '"') {
                if (*p == '\\' && p + 1 < e) {
                    p++;
                }
                if (n + 1 < cap) {
                    out[n++] = *p;
                }
                p++;
            }
        } else {
            while (p < e && *p != ';' && *p != ' ' && *p != '\r') {
                if (n + 1 < cap) {
                    out[n++] = *p;
                }
                p++;
            }
        }
        out[n] = '\0';
        return 1;
    }
    return 0;
}

moon_status_t moon_gw_multipart_parse(const char *content_type, const char *body, size_t len,
                                      moon_gw_part_t *parts, unsigned max, unsigned *n_p,
                                      const char **why_p)
{
    char        delim[80] = "\r\n--";
    size_t      dl;
    const char *p, *end = body + len;
    unsigned    n = 0;

    if (content_type == NULL || strncasecmp(content_type, "multipart/form-data", 19) != 0) {
        *why_p = "the body must be multipart/form-data (fields 'purpose' and 'file')";
        return MOON_ERR_INVALID_PARAM;
    }
    if (!param_of(content_type, content_type + strlen(content_type), "boundary=", delim + 4,
                  sizeof(delim) - 4) ||
        delim[4] == '\0' || strlen(delim + 4) > 70) {
        *why_p = "the multipart Content-Type has no boundary (1 to 70 characters)";
        return MOON_ERR_INVALID_PARAM;
    }
    dl = strlen(delim);
    /* the first delimiter may open the body (without its CRLF) */
    if (len >= dl - 2 && memcmp(body, delim + 2, dl - 2) == 0) {
        p = body + dl - 2;
    } else {
        p = find(body, len, delim, dl);
        if (p == NULL) {
            *why_p = "the multipart body has no delimiter line";
            return MOON_ERR_INVALID_PARAM;
        }
        p += dl;
    }
    for (;;) {
        const char     *head, *head_end, *next;
        moon_gw_part_t *part;

        if (end - p >= 2 && p[0] == '-' && p[1] == '-') {
            break; /* the closing delimiter */
        }
        while (p < end && (*p == ' ' || *p == '\t')) {
            p++;
        }
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') {
            *why_p = "the multipart body is malformed (a delimiter line does not end in CRLF)";
            return MOON_ERR_INVALID_PARAM;
        }
        head     = p + 2;
        head_end = find(head, (size_t)(end - head), "\r\n\r\n", 4);
        if (head_end == NULL && end - head >= 2 && head[0] == '\r' && head[1] == '\n') {
            head_end = head - 2; /* no header at all */
        }
        if (head_end == NULL) {
            *why_p = "the multipart body is malformed (a part's headers do not end)";
            return MOON_ERR_INVALID_PARAM;
        }
        next = find(head_end + 4, (size_t)(end - head_end - 4), delim, dl);
        if (next == NULL) {
            *why_p = "the multipart body is malformed (no closing delimiter)";
            return MOON_ERR_INVALID_PARAM;
        }
        if (n == max) {
            *why_p = "the multipart body has too many parts";
            return MOON_ERR_INVALID_PARAM;
        }
        part = &parts[n];
        memset(part, 0, sizeof(*part));
        for (const char *h = head; h < head_end;) {
            const char *eol = find(h, (size_t)(head_end - h), "\r\n", 2);
            if (eol == NULL) {
                eol = head_end;
            }
            if ((size_t)(eol - h) > 20 && strncasecmp(h, "Content-Disposition:", 20) == 0) {
                param_of(h + 20, eol, "name=", part->name, sizeof(part->name));
                part->has_filename =
                    param_of(h + 20, eol, "filename=", part->filename, sizeof(part->filename));
            }
            h = eol + 2;
        }
        if (part->name[0] == '\0') {
            *why_p = "a multipart part has no Content-Disposition name";
            return MOON_ERR_INVALID_PARAM;
        }
        part->data = head_end + 4;
        part->len  = (size_t)(next - part->data);
        n++;
        p = next + dl;
    }
    *n_p = n;
    return MOON_OK;
}
