/* launch/sim_run_stub.c - moon_replay_sim_run for a build without the serving
 * actors (conductor, prefill, decode): says so. Replaced by sim_run.c once
 * they exist (launch/CMakeLists.txt picks). */
#include "sim_run.h"

#include "moonlet/log.h"

moon_status_t moon_replay_sim_run(const moon_sim_run_config_t *cfg, moon_sim_records_t *recs)
{
    (void)cfg;
    (void)recs;
    MOON_ERROR("replay: this build has no serving actors (conductor, prefill, decode) to "
               "simulate");
    return MOON_ERR_UNSUPPORTED;
}
