/* tests/e2e/plugins/plugin_bad_ids.c - a plugin whose message ids lie in the
 * user range, not the plugin range: registration must refuse them. */
#include "moonlet/plugin.h"

#define BAD_PING_FIELDS(F, T) F(T, u64, n)
#define BAD_MSGS(X) X(BAD_MSG_PING, bad_ping_t, BAD_PING_FIELDS)
MOON_MSG_DECLARE(BAD_MSGS, MOON_MSG_RANGE_USER_BASE + 3, BAD_MSG_END)
MOON_MSG_DEFINE(BAD_MSGS, bad_msg_descs)

static moon_status_t bad_ids_init(moon_plugin_host_t *host, const char *args)
{
    (void)args;
    return moon_plugin_register_msgs(host, bad_msg_descs);
}

MOON_PLUGIN_DEFINE("bad-ids", bad_ids_init, NULL);
