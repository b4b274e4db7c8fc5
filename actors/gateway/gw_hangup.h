/* actors/gateway/gw_hangup.h - notices clients that hang up while their connection
 * is suspended. libmicrohttpd polls no suspended socket, so a client that
 * leaves while its request waits in the cluster's queues (before its first
 * token) or between two tokens would be noticed only at the request's next
 * event. One thread waits in epoll for EPOLLRDHUP / EPOLLHUP on the sockets
 * it is given and calls each one's hook once, at once.
 *
 * Threading: watch and unwatch from any thread; hooks run on the watcher's
 * thread under its lock (so a hook never runs after unwatch returns; a hook
 * must not call watch or unwatch). */
#ifndef MOON_ACTORS_GW_HANGUP_H
#define MOON_ACTORS_GW_HANGUP_H

#include "moonlet/status.h"

#include <stdint.h>

typedef struct moon_gw_hangup moon_gw_hangup_t;
typedef void (*moon_gw_hangup_fn)(void *arg);

/* Starts the watcher thread, with room for capacity sockets at once.
 * MOON_ERR_NO_MEMORY, MOON_ERR_IO (epoll, eventfd or the thread). */
moon_status_t moon_gw_hangup_create(uint32_t capacity, moon_gw_hangup_t **w_p);
/* Stops the thread and frees (every socket unwatched first). NULL: no-op. */
void moon_gw_hangup_destroy(moon_gw_hangup_t *w);
/* Watches the connected socket fd: fn(arg) runs once when its peer hangs up
 * (closes, or shuts its side down). *slot_p names it for unwatch.
 * MOON_ERR_NO_RESOURCE: capacity sockets are watched; MOON_ERR_IO: epoll
 * refused fd. Not watched on error. */
moon_status_t moon_gw_hangup_watch(moon_gw_hangup_t *w, int fd, moon_gw_hangup_fn fn, void *arg,
                                   uint32_t *slot_p);
/* Stops watching slot (before its socket closes): once it returns, the hook
 * is neither running nor will run. */
void moon_gw_hangup_unwatch(moon_gw_hangup_t *w, uint32_t slot);

#endif /* MOON_ACTORS_GW_HANGUP_H */
