/* actors/gateway/gw_plugin.h - what request filters and policies of one's own
 * (moonlet/plugin.h) read of an HTTP request: the client's API key and its
 * session field. Read only when a plugin is loaded, so a gateway without
 * plugins parses nothing more. Any thread (pure). */
#ifndef MOON_ACTORS_GW_PLUGIN_H
#define MOON_ACTORS_GW_PLUGIN_H

#include "moonlet/serve_client.h"

#include <stddef.h>

struct MHD_Connection;

/* Sets p->key to the bearer token of mc's Authorization header (borrowed
 * from mc: it must outlive the submit; none or another scheme: no key) and
 * p->session to the body's top-level "user" string copied into session (cap
 * bytes, truncated; none: no session). Does nothing (reads no header, parses
 * nothing) when no plugin is loaded. */
void moon_gw_plugin_params(struct MHD_Connection *mc, const char *body, size_t len, char *session,
                           size_t cap, moon_serve_params_t *p);

#endif /* MOON_ACTORS_GW_PLUGIN_H */
