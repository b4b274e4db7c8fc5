/* actors/gateway/gw_plugin.c - the key and session of a request for plugins
 * (gw_plugin.h). */
#include "gw_plugin.h"

#include "plugin_host.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>

void moon_gw_plugin_params(struct MHD_Connection *mc, const char *body, size_t len, char *session,
                           size_t cap, moon_serve_params_t *p)
{
    const char  *authorization;
    cJSON       *root;
    const cJSON *user;

    if (!moon_plugin_loaded()) {
        return;
    }
    authorization = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (authorization != NULL && strncmp(authorization, "Bearer ", 7) == 0) {
        p->key = authorization + 7;
    }
    if (body == NULL || cap == 0) {
        return;
    }
    root = cJSON_ParseWithLength(body, len); /* the body parsed strictly already */
    user = root != NULL ? cJSON_GetObjectItemCaseSensitive(root, "user") : NULL;
    if (cJSON_IsString(user) && user->valuestring != NULL) {
        snprintf(session, cap, "%s", user->valuestring);
        p->session = session;
    }
    cJSON_Delete(root);
}
