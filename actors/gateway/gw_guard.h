/* actors/gateway/gw_guard.h - deadlines for HTTP connections that have not yet sent
 * a whole request (Slowloris: a client that trickles its headers or its body
 * keeps a connection slot for as long as it likes, since every byte resets an
 * idle timeout). The request line and headers must come within header_ns of
 * the connection opening or its previous request ending (so an idle
 * keep-alive connection is closed after header_ns too), the body within
 * body_ns of the headers. A connection past its deadline is shut down
 * (shutdown(2): libmicrohttpd reads the end of the stream and closes it; the
 * guard never closes a socket).
 *
 * Under pressure (at least `pressure` connections open) the connection that
 * has been in its header phase longest is shut down to make room once it is
 * older than evict_age_ns, or else the oldest whose body arrives slower than
 * min_body_rate, until fewer than `pressure` are open: a flood of slow
 * clients, from many addresses, cannot keep a normal client out for much
 * longer than evict_age_ns.
 *
 * Threading: open, set and close from any thread (one lock); one thread of
 * the guard's own sleeps until the earliest deadline (no polling). */
#ifndef MOON_ACTORS_GW_GUARD_H
#define MOON_ACTORS_GW_GUARD_H

#include "moonlet/status.h"

#include <stdint.h>

typedef struct moon_gw_guard moon_gw_guard_t;

typedef enum {
    MOON_GW_GUARD_HEADERS, /* waiting for a request line and headers */
    MOON_GW_GUARD_BODY,    /* headers in, body arriving */
    MOON_GW_GUARD_BUSY,    /* the request is in: no deadline here (read and write
                              timeouts are libmicrohttpd's) */
} moon_gw_guard_phase_t;

typedef struct {
    uint32_t capacity;      /* connections guarded at once (the server's limit) */
    uint64_t header_ns;     /* 0: no header deadline */
    uint64_t body_ns;       /* 0: no body deadline */
    uint32_t pressure;      /* open connections from which the oldest in its header
                               phase is shut down; 0: never */
    uint64_t evict_age_ns;  /* under pressure, the youngest such connection shut down */
    uint64_t min_body_rate; /* bytes/s: under pressure, a body slower than this is shut down */
} moon_gw_guard_config_t;

typedef struct {
    uint64_t n_header_cut; /* shut down: headers not in by their deadline */
    uint64_t n_body_cut;   /* shut down: body not in by its deadline */
    uint64_t n_evicted;    /* shut down to make room under pressure */
    uint32_t n_open;
} moon_gw_guard_stats_t;

/* Starts the guard's thread. MOON_ERR_INVALID_PARAM (capacity 0),
 * MOON_ERR_NO_MEMORY, MOON_ERR_IO (the thread). */
moon_status_t moon_gw_guard_create(const moon_gw_guard_config_t *cfg, moon_gw_guard_t **guard_p);
/* Stops the thread and frees (after the server stopped: no call may follow).
 * NULL: no-op. */
void moon_gw_guard_destroy(moon_gw_guard_t *guard);
/* A connection opened on socket fd (borrowed until close): its header
 * deadline starts now. Returns its id for set and close, 0 when the table is
 * full (not guarded). */
uint32_t moon_gw_guard_open(moon_gw_guard_t *guard, int fd);
/* The connection entered phase: its deadline (if any) starts now. id 0: no-op. */
void moon_gw_guard_set(moon_gw_guard_t *guard, uint32_t id, moon_gw_guard_phase_t phase);
/* n_bytes more of the connection's body arrived (the rate under pressure). */
void moon_gw_guard_progress(moon_gw_guard_t *guard, uint32_t id, uint64_t n_bytes);
/* The connection is closing (before its socket closes: the guard never
 * touches fd after this returns). id 0: no-op. */
void moon_gw_guard_close(moon_gw_guard_t *guard, uint32_t id);
void moon_gw_guard_stats(moon_gw_guard_t *guard, moon_gw_guard_stats_t *stats);

#endif /* MOON_ACTORS_GW_GUARD_H */
