/* actors/store/store_msgs.c - descriptor table of the store protocol. */
#include "moonlet/store_msgs.h"

MOON_MSG_DEFINE(MOON_STORE_MSGS, moon_store_msg_descs)

moon_status_t moon_store_msgs_register(void)
{
    return moon_msg_register(moon_store_msg_descs);
}
