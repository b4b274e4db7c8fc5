/* launch/cli/placement.c - a serving rank's placement (see placement.h): its
 * actors from the cluster's role map, its cores from its CPU affinity, the
 * ranks sharing them from the launcher's environment. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "placement.h"

#include "moonlet/config.h"
#include "moonlet/cpu.h"
#include "moonlet/launcher.h"
#include "moonlet/log.h"
#include "moonlet/numa.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void cores_text(char *buf, size_t cap, uint32_t first, uint32_t n, uint32_t n_cores)
{
    if (n == 0) {
        snprintf(buf, cap, "none");
    } else if (n == 1) {
        snprintf(buf, cap, "core %u", first % n_cores);
    } else if (first + n <= n_cores) {
        snprintf(buf, cap, "cores %u-%u", first, first + n - 1);
    } else {
        snprintf(buf, cap, "cores %u.. (wrapping round %u)", first % n_cores, n_cores);
    }
}

int moon_cli_placement_report(const moon_serve_config_t *scfg, const moon_cli_placement_t *pl,
                              FILE *out)
{
    char      actors[1024], host[256], wc[64], ec[64], device[64], nodes[64];
    uint32_t  n_inst = 0, per_inst, engine, threads, host_pus, my_pus, sharing, n_local, me_local;
    uint32_t  cores  = moon_cpu_count();
    cpu_set_t set;
    long      online = sysconf(_SC_NPROCESSORS_ONLN);
    int       over;

    if (moon_serve_cluster_placement(scfg, pl->n_ranks, pl->rank, actors, sizeof(actors),
                                     &n_inst) != MOON_OK) {
        snprintf(actors, sizeof(actors), "(does not place)");
    }
    host_pus = online > 0 ? (uint32_t)online : 1;
    CPU_ZERO(&set);
    my_pus   = sched_getaffinity(0, sizeof(set), &set) == 0 ? (uint32_t)CPU_COUNT(&set) : host_pus;
    my_pus   = my_pus > 0 ? my_pus : 1;
    n_local  = moon_launcher_local_size();
    me_local = moon_launcher_local_rank();
    if (pl->split_hosts > 1) {
        /* pseudo-hosts share this machine's cores all the same */
        n_local = n_local > 1 ? n_local : pl->n_ranks;
    }
    /* a rank bound to part of the host has its PUs to itself (the launcher
     * binds ranks apart); an unbound one shares them with the host's ranks */
    sharing  = my_pus < host_pus ? 1 : (n_local > 0 ? n_local : 1);
    per_inst = scfg->threads ? scfg->threads : cores;
    engine   = scfg->backend == MOON_BACKEND_COST ? 0 : n_inst * per_inst;
    threads  = pl->workers + engine;
    /* one process alone: its engine threads take turns with its workers
     * (a prefill and a decode rarely compute at once), so one thread over
     * the PUs is no reason to warn; ranks sharing the PUs are */
    over = sharing > 1 ? (uint64_t)threads * sharing > my_pus : threads > my_pus + 1;
    if (over) {
        uint32_t fit = host_pus / (threads > 0 ? threads : 1);
        char     fits[192];
        if (fit > 0) {
            snprintf(fits, sizeof(fits),
                     "at most %u such rank(s) per host (mpirun --map-by ppr:%u:node, srun "
                     "--ntasks-per-node=%u)",
                     fit, fit, fit);
        } else {
            snprintf(fits, sizeof(fits), "no rank of this shape fits one host's %u PUs", host_pus);
        }
        MOON_WARN("placement: rank %u runs %u threads (%u runtime workers, %u engine threads "
                  "for %u instance(s)) on %u PUs shared by %u rank(s): oversubscribed, so idle "
                  "threads yield and sleep instead of spinning. What fits: %s; or --workers 1 "
                  "--threads 1; or fewer roles per host (--prefill, --decode, --store)",
                  pl->rank, threads, pl->workers, engine, n_inst, my_pus, sharing, fits);
    }
    if (out != NULL) {
        if (gethostname(host, sizeof(host)) != 0) {
            snprintf(host, sizeof(host), "?");
        }
        host[sizeof(host) - 1] = '\0';
        cores_text(wc, sizeof(wc), 0, pl->workers, cores);
        cores_text(ec, sizeof(ec), pl->workers, engine, cores);
        /* one write: a line written in pieces interleaves with other ranks'
         * lines once mpirun merges their streams (and log readers parse them) */
        char  *text = NULL;
        size_t len  = 0;
        FILE  *line = open_memstream(&text, &len);
        if (line == NULL) {
            line = out; /* no memory for the line: in pieces, then */
        }
        /* --gpu as serve_cluster.c resolves it */
        if (scfg->backend != MOON_BACKEND_CUDA) {
            snprintf(device, sizeof(device), "%s",
                     scfg->backend == MOON_BACKEND_COST ? "none (cost model)" : "cpu");
        } else if (scfg->gpu == NULL || strcmp(scfg->gpu, "auto") == 0) {
            snprintf(device, sizeof(device), "cuda %u (the local rank, modulo the devices)",
                     me_local);
        } else {
            snprintf(device, sizeof(device), "cuda %.24s (--gpu, modulo the devices)", scfg->gpu);
        }
        moon_numa_nodes_text(nodes, sizeof(nodes));
        fprintf(line, "placement: rank %u/%u host %s", pl->rank, pl->n_ranks, host);
        if (pl->split_hosts > 1) {
            fprintf(line, " (pseudo-host %u of %u)", pl->rank % pl->split_hosts, pl->split_hosts);
        }
        fprintf(line,
                " local rank %u/%u: %s | workers %u on %s%s | engine threads %u on %s%s | %u of "
                "%u PUs, shared by %u rank(s)%s | device %s | numa node %s%s\n",
                me_local, n_local, actors[0] ? actors : "(no actor)", pl->workers, wc,
                pl->pin_workers ? " (pinned)" : "", engine, ec, scfg->pin ? " (pinned)" : "",
                my_pus, host_pus, sharing, over ? ", OVERSUBSCRIBED" : "", device, nodes,
                scfg->numa ? " (kv pools and store arenas bound to it)" : "");
        if (line != out) {
            if (fclose(line) == 0) {
                fputs(text, out);
            }
            free(text);
        }
        fflush(out);
    }
    return over;
}
