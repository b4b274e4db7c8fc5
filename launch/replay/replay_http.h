/* launch/replay/replay_http.h - `moonlet replay` without --sim: the trace sent to a
 * running cluster over HTTP by the bench client (the trace workload of
 * loadgen_trace.h, streamed completions, loadgen_http.h), its answers turned into
 * the replay's per-request records (sim_report.h), so that a run against a
 * real server gives the same CSV, summary.json and plots as a simulated one.
 * A Moonlet server is asked for "moonlet_details" (gw_format.h): the
 * instances each request ran on, its queue; another OpenAI server leaves
 * them empty (-1) and the cache hit ratio then counts no request.
 * Single-threaded. */
#ifndef MOON_LAUNCH_REPLAY_HTTP_H
#define MOON_LAUNCH_REPLAY_HTTP_H

#include "replay_opts.h"
#include "sim_report.h"

#include "moonlet/status.h"

/* Replays o->trace (o's --max-requests, --block-scale, --max-context,
 * --time-scale) against the server at o->url and fills recs, which it
 * initialises (the caller finis them on MOON_OK; nothing is left on an
 * error). A request the server rejected (HTTP 429) is REJECTED, another
 * failure ERROR. Errors: MOON_ERR_INVALID_PARAM (options or trace; said on
 * stderr), MOON_ERR_PEER_LOST (no server), MOON_ERR_NO_MEMORY, MOON_ERR_IO. */
moon_status_t moon_replay_http_run(const moon_replay_opts_t *o, moon_sim_records_t *recs);

#endif /* MOON_LAUNCH_REPLAY_HTTP_H */
