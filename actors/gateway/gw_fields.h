/* actors/gateway/gw_fields.h - the one table of request fields that
 * /v1/completions and /v1/chat/completions know, and how each is handled:
 * read (implemented: gw_openai.c parses and checks it), inert (accepted and
 * without effect by definition, as OpenAI's `user`), or refused (not
 * implemented: any value but null is a 400 naming it). A key that is not in
 * the table, or not a field of the route, is a 400 naming it as well: no
 * field is ever silently ignored. Implementing a field = flipping its row to
 * MOON_GW_FIELD_READ and reading it in gw_openai.c. Pure: any thread. */
#ifndef MOON_ACTORS_GW_FIELDS_H
#define MOON_ACTORS_GW_FIELDS_H

#include "gw_errors.h"

#include <cjson/cJSON.h>

#include <stdint.h>

typedef enum {
    MOON_GW_FIELD_READ    = 0, /* implemented: its parser reads and checks it */
    MOON_GW_FIELD_INERT   = 1, /* accepted; changes no output by definition */
    MOON_GW_FIELD_REFUSED = 2, /* not implemented: 400 unless null */
} moon_gw_field_how_t;

#define MOON_GW_ROUTE_COMPLETIONS 0x1u
#define MOON_GW_ROUTE_CHAT 0x2u
#define MOON_GW_ROUTE_BOTH (MOON_GW_ROUTE_COMPLETIONS | MOON_GW_ROUTE_CHAT)

typedef struct {
    const char *name;
    uint8_t     routes; /* MOON_GW_ROUTE_* where it is a field */
    uint8_t     how;    /* moon_gw_field_how_t */
    const char *what;   /* refused: what it is, for the error message ("structured output") */
} moon_gw_field_t;

/* The row of name, or NULL. */
const moon_gw_field_t *moon_gw_field_find(const char *name);
/* The table (n_p: its rows). */
const moon_gw_field_t *moon_gw_fields(uint32_t *n_p);
/* Checks every key of the body object root (borrowed) against the table for
 * the route (chat: /v1/chat/completions). MOON_OK: every key is read or
 * inert, or refused with a null value. MOON_ERR_INVALID_PARAM with err
 * filled (400, param = the key): an unknown key, a key of the other route, a
 * refused field with a value. */
moon_status_t moon_gw_fields_check(const cJSON *root, int chat, moon_gw_error_t *err);

#endif /* MOON_ACTORS_GW_FIELDS_H */
