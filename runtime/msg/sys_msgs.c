/* runtime/msg/sys_msgs.c - descriptors of the runtime's own message types. */
#include "msg_internal.h"

#include "moonlet/sys_msgs.h"

MOON_MSG_DEFINE(MOON_SYS_MSGS, moon_sys_msg_descs)

moon_status_t moon_sys_msgs_register(void)
{
    return moon_msg_register(moon_sys_msg_descs);
}
