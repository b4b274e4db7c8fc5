/* actors/gateway/gw_multipart.h - reads a multipart/form-data body (RFC 7578),
 * as /v1/files uploads come: the boundary from the Content-Type, then each
 * part's name, filename and bytes. Pure function, any thread; the parts
 * point into the body. */
#ifndef MOON_ACTORS_GW_MULTIPART_H
#define MOON_ACTORS_GW_MULTIPART_H

#include "moonlet/status.h"

#include <stddef.h>

#define MOON_GW_MULTIPART_MAX 8u /* parts read at most (more: refused) */

typedef struct {
    char        name[64];      /* the form field's name */
    char        filename[256]; /* "" when the part is no file */
    int         has_filename;
    const char *data; /* into the body */
    size_t      len;
} moon_gw_part_t;

/* Splits body by the boundary of content_type. *n_p gets the number of parts
 * (at most max). MOON_ERR_INVALID_PARAM with why_p (static text): not
 * multipart/form-data, no boundary, no closing delimiter, a part without a
 * Content-Disposition name, more than max parts. */
moon_status_t moon_gw_multipart_parse(const char *content_type, const char *body, size_t len,
                                      moon_gw_part_t *parts, unsigned max, unsigned *n_p,
                                      const char **why_p);

#endif /* MOON_ACTORS_GW_MULTIPART_H */
