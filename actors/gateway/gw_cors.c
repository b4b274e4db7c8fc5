/* actors/gateway/gw_cors.c - the allowed-origins check (see gw_cors.h). */
#include "gw_cors.h"

#include <string.h>

int moon_gw_cors_allowed(const char *allowed, const char *origin)
{
    size_t n;

    if (allowed == NULL || origin == NULL || origin[0] == '\0') {
        return 0;
    }
    n = strlen(origin);
    for (const char *p = allowed; *p != '\0';) {
        const char *end;
        size_t      len;

        while (*p == ' ' || *p == ',') {
            p++;
        }
        end = p;
        while (*end != '\0' && *end != ',') {
            end++;
        }
        len = (size_t)(end - p);
        while (len > 0 && p[len - 1] == ' ') {
            len--;
        }
        if ((len == 1 && p[0] == '*') || (len == n && len > 0 && memcmp(p, origin, n) == 0)) {
            return 1;
        }
        p = end;
    }
    return 0;
}
