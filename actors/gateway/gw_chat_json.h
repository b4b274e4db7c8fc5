/* actors/gateway/gw_chat_json.h - a chat request's messages and tools as the
 * JSON a model's own Jinja template reads (gw_template.h, jinja): the
 * messages as sent, with text parts joined into one string, a null or
 * missing content as "", and tool calls' arguments parsed into objects (as
 * Hugging Face's templates expect); the tools list as sent. Pure. */
#ifndef MOON_ACTORS_GW_CHAT_JSON_H
#define MOON_ACTORS_GW_CHAT_JSON_H

#include "moonlet/status.h"

#include <cjson/cJSON.h>

/* From the request root (already checked by parse_messages): *msgs_p and
 * *tools_p (NULL when the request has no tools) cJSON_malloc'd, free with
 * cJSON_free. MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_chat_json(const cJSON *root, char **msgs_p, char **tools_p);

#endif /* MOON_ACTORS_GW_CHAT_JSON_H */
