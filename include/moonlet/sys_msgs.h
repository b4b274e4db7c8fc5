/* moonlet/sys_msgs.h - the runtime's own message types (ids 0..15). Actors
 * handle DOWN (a monitored actor ended), EXIT (a linked actor ended: without
 * a handler, an abnormal EXIT fails the receiver too), TIMER (a timer fired)
 * and PEER_DOWN (a rank was lost). The others are handled by the runtime. */
#ifndef MOONLET_SYS_MSGS_H
#define MOONLET_SYS_MSGS_H

#include "moonlet/msg.h"

MOON_EXTERN_C_BEGIN

#define MOON_SYS_STOP_FIELDS(F, T) F(T, i32, reason)
#define MOON_SYS_DOWN_FIELDS(F, T) F(T, addr, actor) F(T, i32, reason) F(T, u64, ref)
#define MOON_SYS_EXIT_FIELDS(F, T) F(T, addr, actor) F(T, i32, reason)
#define MOON_SYS_MONITOR_FIELDS(F, T) F(T, u64, ref)
#define MOON_SYS_LINK_FIELDS(F, T) F(T, u32, unlink)
#define MOON_SYS_TIMER_FIELDS(F, T) F(T, u64, timer) F(T, u64, cookie) F(T, u32, kind)
#define MOON_SYS_ERROR_FIELDS(F, T) F(T, u32, orig_type) F(T, i32, status) F(T, u64, orig_seq)
#define MOON_SYS_PEER_DOWN_FIELDS(F, T) F(T, u32, rank) F(T, i32, reason)

#define MOON_SYS_MSGS(X)                                                                           \
    X(MOON_MSG_SYS_STOP, moon_sys_stop_t, MOON_SYS_STOP_FIELDS)                                    \
    X(MOON_MSG_SYS_DOWN, moon_sys_down_t, MOON_SYS_DOWN_FIELDS)                                    \
    X(MOON_MSG_SYS_EXIT, moon_sys_exit_t, MOON_SYS_EXIT_FIELDS)                                    \
    X(MOON_MSG_SYS_MONITOR, moon_sys_monitor_t, MOON_SYS_MONITOR_FIELDS)                           \
    X(MOON_MSG_SYS_LINK, moon_sys_link_t, MOON_SYS_LINK_FIELDS)                                    \
    X(MOON_MSG_SYS_TIMER, moon_sys_timer_t, MOON_SYS_TIMER_FIELDS)                                 \
    X(MOON_MSG_SYS_ERROR, moon_sys_error_t, MOON_SYS_ERROR_FIELDS)                                 \
    X(MOON_MSG_SYS_PEER_DOWN, moon_sys_peer_down_t, MOON_SYS_PEER_DOWN_FIELDS)

MOON_MSG_DECLARE_IN(MOON_SYS_MSGS, RUNTIME, MOON_MSG_SYS_END)
MOON_STATIC_ASSERT(MOON_MSG_SYS_END <= 16, "runtime ids are 0..15");

MOON_API extern const moon_msg_desc_t moon_sys_msg_descs[];

MOON_EXTERN_C_END

#endif /* MOONLET_SYS_MSGS_H */
