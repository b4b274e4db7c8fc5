/* tests/fuzz/fuzz_gw_multipart.c - libFuzzer target for the /v1/files upload
 * reader (multipart/form-data from any client): the input's first line is
 * the Content-Type, the rest the body. Every part must lie inside the body. */
#include "fuzz_target.h"
#include "gw_multipart.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char    *text = (const char *)data;
    const char    *nl   = memchr(text, '\n', size);
    char           ctype[256];
    size_t         n = nl != NULL ? (size_t)(nl - text) : 0;
    moon_gw_part_t parts[MOON_GW_MULTIPART_MAX];
    unsigned       n_parts = 0;
    const char    *why     = NULL;
    const char    *body;
    size_t         len;

    if (nl == NULL || n >= sizeof(ctype)) {
        return 0;
    }
    memcpy(ctype, text, n);
    ctype[n] = '\0';
    body     = nl + 1;
    len      = size - n - 1;
    if (moon_gw_multipart_parse(ctype, body, len, parts, MOON_GW_MULTIPART_MAX, &n_parts, &why) !=
        MOON_OK) {
        if (why == NULL) {
            abort(); /* a refusal always says why */
        }
        return 0;
    }
    for (unsigned i = 0; i < n_parts; i++) {
        if (parts[i].data < body || parts[i].data + parts[i].len > body + len ||
            memchr(parts[i].name, '\0', sizeof(parts[i].name)) == NULL ||
            memchr(parts[i].filename, '\0', sizeof(parts[i].filename)) == NULL) {
            abort();
        }
    }
    return 0;
}
