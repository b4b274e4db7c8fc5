/* launch/sim/sim_faults.c - seeded chaos for the simulated cluster: the spec
 * parser, the network hook (lost, delayed and paused messages), the
 * injector actor (kills at their times) and the invariants. */
#include "sim_faults.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"

#include <stdlib.h>
#include <string.h>

struct moon_sim_faults {
    moon_sim_faults_spec_t   spec; /* random faults drawn in */
    moon_sim_faults_target_t target;
    uint32_t                *pause_node; /* (n_faults) node of each PAUSE */
    uint64_t                 rng;
    uint32_t                 next_kill; /* injector: faults[] index of the next kill */
    uint64_t                 dropped, delayed;
    uint32_t                 kills;
};

static const char *const role_names[] = {"prefill", "decode", "shard"};

static uint64_t next_rand(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unit_rand(uint64_t *s) /* [0, 1) */
{
    return (double)(next_rand(s) >> 11) * 0x1.0p-53;
}

/* ---- the spec ----------------------------------------------------------- */

static int parse_secs(const char *s, char **end, uint64_t *ns_p)
{
    double v = strtod(s, end);

    if (*end == s || !(v >= 0.0) || v > 1e6) {
        return -1;
    }
    *ns_p = (uint64_t)(v * 1e9 + 0.5);
    return 0;
}

static int parse_prob(const char *s, char **end, double *p_p)
{
    *p_p = strtod(s, end);
    return *end == s || !(*p_p >= 0.0 && *p_p <= 0.5) ? -1 : 0;
}

/* ROLE:I@T[+D] after "kill=" or "pause=". */
static int parse_target(const char *s, moon_sim_fault_t *f, int with_length)
{
    char         *end;
    unsigned long i;
    size_t        n;

    for (n = 0; n < MOON_ARRAY_SIZE(role_names); n++) {
        size_t len = strlen(role_names[n]);
        if (strncmp(s, role_names[n], len) == 0 && s[len] == ':') {
            break;
        }
    }
    if (n == MOON_ARRAY_SIZE(role_names)) {
        return -1;
    }
    f->role = (moon_sim_role_t)n;
    s += strlen(role_names[n]) + 1;
    i = strtoul(s, &end, 10);
    if (end == s || *end != '@' || i > 1024) {
        return -1;
    }
    f->index = (uint32_t)i;
    if (parse_secs(end + 1, &end, &f->at_ns) != 0) {
        return -1;
    }
    if (with_length) {
        if (*end != '+' || parse_secs(end + 1, &end, &f->for_ns) != 0 || f->for_ns == 0) {
            return -1;
        }
    }
    return *end == '\0' ? 0 : -1;
}

static int parse_item(const char *item, moon_sim_faults_spec_t *sp)
{
    char         *end;
    unsigned long n;

    if (strncmp(item, "kill=", 5) == 0 || strncmp(item, "pause=", 6) == 0) {
        int               pause = item[0] == 'p';
        moon_sim_fault_t *f     = &sp->faults[sp->n_faults];

        if (sp->n_faults == MOON_SIM_FAULTS_MAX) {
            return -1;
        }
        f->kind = pause ? MOON_SIM_FAULT_PAUSE : MOON_SIM_FAULT_KILL;
        if (parse_target(item + (pause ? 6 : 5), f, pause) != 0) {
            return -1;
        }
        sp->n_faults++;
        return 0;
    }
    if (strncmp(item, "drop=", 5) == 0) {
        return parse_prob(item + 5, &end, &sp->drop_p) != 0 || *end != '\0' ? -1 : 0;
    }
    if (strncmp(item, "delay=", 6) == 0) {
        double ms;
        if (parse_prob(item + 6, &end, &sp->delay_p) != 0 || *end != '+') {
            return -1;
        }
        ms = strtod(end + 1, &end);
        if (*end != '\0' || !(ms > 0.0 && ms <= 1e6)) {
            return -1;
        }
        sp->delay_max_ns = (uint64_t)(ms * 1e6 + 0.5);
        return 0;
    }
    if (strncmp(item, "random=", 7) == 0 || strncmp(item, "random-pauses=", 14) == 0) {
        const char *v = strchr(item, '=') + 1;

        n = strtoul(v, &end, 10);
        if (end == v || *end != '\0' || n > MOON_SIM_FAULTS_MAX) {
            return -1;
        }
        sp->n_random     = (uint32_t)n;
        sp->random_pause = item[6] == '-';
        return 0;
    }
    return -1;
}

moon_status_t moon_sim_faults_parse(const char *spec, moon_sim_faults_spec_t *spec_p)
{
    char  item[128];
    char *save;

    if (spec == NULL || spec_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    memset(spec_p, 0, sizeof(*spec_p));
    while (*spec != '\0') {
        size_t len = strcspn(spec, ",");

        if (len == 0 || len >= sizeof(item)) {
            MOON_ERROR("--faults: an empty or overlong item in \"%s\"", spec);
            return MOON_ERR_INVALID_PARAM;
        }
        memcpy(item, spec, len);
        item[len] = '\0';
        save      = item;
        if (parse_item(save, spec_p) != 0) {
            MOON_ERROR("--faults: bad item \"%s\" (kill=ROLE:I@T, pause=ROLE:I@T+D, drop=P, "
                       "delay=P+MS, random=N, random-pauses=N; ROLE prefill, decode or shard; P in "
                       "[0, 0.5]; at "
                       "most %u faults)",
                       item, MOON_SIM_FAULTS_MAX);
            return MOON_ERR_INVALID_PARAM;
        }
        spec += len + (spec[len] == ',');
    }
    if (spec_p->n_faults + spec_p->n_random > MOON_SIM_FAULTS_MAX) {
        MOON_ERROR("--faults: more than %u faults", MOON_SIM_FAULTS_MAX);
        return MOON_ERR_INVALID_PARAM;
    }
    return MOON_OK;
}

/* ---- planning ----------------------------------------------------------- */

static uint32_t role_count(const moon_sim_faults_target_t *t, moon_sim_role_t role)
{
    return role == MOON_SIM_ROLE_PREFILL  ? t->n_prefill
           : role == MOON_SIM_ROLE_DECODE ? t->n_decode
                                          : t->n_shards;
}

static uint32_t node_of(const moon_sim_faults_target_t *t, const moon_sim_fault_t *f)
{
    return f->role == MOON_SIM_ROLE_PREFILL  ? f->index
           : f->role == MOON_SIM_ROLE_DECODE ? t->n_prefill + f->index
                                             : t->shard_node[f->index];
}

static moon_addr_t addr_of(const moon_sim_faults_target_t *t, const moon_sim_fault_t *f)
{
    return f->role == MOON_SIM_ROLE_PREFILL  ? t->inst[f->index]
           : f->role == MOON_SIM_ROLE_DECODE ? t->inst[t->n_prefill + f->index]
                                             : t->shards[f->index];
}

/* Random kills and pauses over the trace's span; a role keeps one live
 * member (a kill of its last one is drawn as a pause instead). */
static void draw_random(moon_sim_faults_t *x, uint32_t killed[3])
{
    const moon_sim_faults_target_t *t = &x->target;

    for (uint32_t k = 0; k < x->spec.n_random; k++) {
        moon_sim_fault_t *f    = &x->spec.faults[x->spec.n_faults++];
        uint64_t          span = t->span_ns > 0 ? t->span_ns : 1000000000ull;

        do {
            f->role = (moon_sim_role_t)(next_rand(&x->rng) % 3);
        } while (role_count(t, f->role) == 0);
        f->index = (uint32_t)(next_rand(&x->rng) % role_count(t, f->role));
        f->at_ns = next_rand(&x->rng) % span;
        f->kind  = next_rand(&x->rng) % 2 && !x->spec.random_pause ? MOON_SIM_FAULT_KILL
                                                                   : MOON_SIM_FAULT_PAUSE;
        if (f->kind == MOON_SIM_FAULT_KILL) {
            int again = 0;
            for (uint32_t j = 0; j + 1 < x->spec.n_faults; j++) {
                const moon_sim_fault_t *g = &x->spec.faults[j];
                again |=
                    g->kind == MOON_SIM_FAULT_KILL && g->role == f->role && g->index == f->index;
            }
            if (again || killed[f->role] + 1 >= role_count(t, f->role)) {
                f->kind = MOON_SIM_FAULT_PAUSE;
            } else {
                killed[f->role]++;
            }
        }
        f->for_ns =
            f->kind == MOON_SIM_FAULT_PAUSE ? 500000000ull + next_rand(&x->rng) % 2500000000ull : 0;
    }
}

static int by_time(const void *a, const void *b)
{
    const moon_sim_fault_t *x = a, *y = b;

    return x->at_ns < y->at_ns ? -1 : x->at_ns > y->at_ns;
}

moon_status_t moon_sim_faults_create(const moon_sim_faults_spec_t   *spec,
                                     const moon_sim_faults_target_t *target,
                                     moon_sim_faults_t             **faults_p)
{
    moon_sim_faults_t *x;
    uint32_t           killed[3] = {0, 0, 0};

    if (spec == NULL || target == NULL || faults_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    x = moon_calloc(1, sizeof(*x));
    if (x == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    x->spec   = *spec;
    x->target = *target;
    x->rng    = target->seed ^ 0x6661756c7473ull; /* "faults": apart from the run's own */
    for (uint32_t i = 0; i < x->spec.n_faults; i++) {
        const moon_sim_fault_t *f   = &x->spec.faults[i];
        int                     dup = 0;

        if (f->index >= role_count(target, f->role)) {
            MOON_ERROR("--faults: there is no %s %u (the cluster has %u)", role_names[f->role],
                       f->index, role_count(target, f->role));
            moon_free(x);
            return MOON_ERR_INVALID_PARAM;
        }
        for (uint32_t j = 0; j < i; j++) {
            dup |= x->spec.faults[j].kind == MOON_SIM_FAULT_KILL &&
                   f->kind == MOON_SIM_FAULT_KILL && x->spec.faults[j].role == f->role &&
                   x->spec.faults[j].index == f->index;
        }
        killed[f->role] += f->kind == MOON_SIM_FAULT_KILL && !dup;
        if (f->kind == MOON_SIM_FAULT_KILL && f->role != MOON_SIM_ROLE_SHARD &&
            killed[f->role] >= role_count(target, f->role)) {
            MOON_ERROR("--faults: killing every %s instance leaves nothing to serve with",
                       role_names[f->role]);
            moon_free(x);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    draw_random(x, killed);
    qsort(x->spec.faults, x->spec.n_faults, sizeof(moon_sim_fault_t), by_time);
    x->pause_node = moon_calloc(x->spec.n_faults + 1, sizeof(uint32_t));
    if (x->pause_node == NULL) {
        moon_free(x);
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < x->spec.n_faults; i++) {
        x->pause_node[i] = node_of(target, &x->spec.faults[i]);
        MOON_INFO("faults: %s %s %u at %.3f s%s", x->spec.faults[i].kind ? "pause" : "kill",
                  role_names[x->spec.faults[i].role], x->spec.faults[i].index,
                  (double)x->spec.faults[i].at_ns / 1e9,
                  x->spec.faults[i].kind == MOON_SIM_FAULT_PAUSE ? " (paused a while)" : "");
    }
    *faults_p = x;
    return MOON_OK;
}

void moon_sim_faults_destroy(moon_sim_faults_t *faults)
{
    if (faults != NULL) {
        moon_free(faults->pause_node);
        moon_free(faults);
    }
}

/* ---- the network hook --------------------------------------------------- */

int moon_sim_faults_net(void *arg, uint32_t from, uint32_t to, uint64_t now_ns, uint64_t *hold_ns,
                        uint64_t *not_before_ns)
{
    moon_sim_faults_t *x = arg;
    uint64_t           t = now_ns > x->target.start_ns ? now_ns - x->target.start_ns : 0;

    for (uint32_t i = 0; i < x->spec.n_faults; i++) {
        const moon_sim_fault_t *f = &x->spec.faults[i];

        if (f->kind != MOON_SIM_FAULT_PAUSE || t < f->at_ns || t >= f->at_ns + f->for_ns) {
            continue;
        }
        if (x->pause_node[i] == from) { /* a paused sender sends nothing until it wakes */
            *hold_ns = MOON_MAX(*hold_ns, f->at_ns + f->for_ns - t);
        }
        if (x->pause_node[i] == to) { /* ... and a paused receiver reads nothing */
            *not_before_ns = MOON_MAX(*not_before_ns, x->target.start_ns + f->at_ns + f->for_ns);
        }
    }
    if (x->spec.drop_p > 0.0 && unit_rand(&x->rng) < x->spec.drop_p) {
        x->dropped++;
        return 1;
    }
    if (x->spec.delay_p > 0.0 && unit_rand(&x->rng) < x->spec.delay_p) {
        *hold_ns = MOON_MAX(*hold_ns, next_rand(&x->rng) % (x->spec.delay_max_ns + 1));
        x->delayed++;
    }
    return 0;
}

/* ---- the injector ------------------------------------------------------- */

typedef struct {
    moon_sim_faults_t *x;
} injector_t;

static moon_status_t arm_next(moon_actor_t *self, injector_t *in)
{
    moon_sim_faults_t *x   = in->x;
    uint64_t           now = moon_now(moon_actor_runtime(self)), timer;

    while (x->next_kill < x->spec.n_faults &&
           x->spec.faults[x->next_kill].kind != MOON_SIM_FAULT_KILL) {
        x->next_kill++;
    }
    if (x->next_kill == x->spec.n_faults) {
        return MOON_OK;
    }
    return moon_timer_start(
        self, MOON_MAX(x->target.start_ns + x->spec.faults[x->next_kill].at_ns, now) - now, 0, 0,
        &timer);
}

static moon_status_t injector_init(moon_actor_t *self, const void *args)
{
    injector_t *in = moon_actor_state(self);

    in->x = *(moon_sim_faults_t *const *)args;
    return arm_next(self, in);
}

static moon_status_t injector_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    injector_t             *in = moon_actor_state(self);
    moon_sim_faults_t      *x  = in->x;
    const moon_sim_fault_t *f  = &x->spec.faults[x->next_kill++];

    (void)msg;
    MOON_WARN("faults: killing %s %u at %.3f s", role_names[f->role], f->index,
              (double)f->at_ns / 1e9);
    /* as the loss of its rank: monitors get DOWN with PEER_LOST, messages to
     * it are dropped from now on */
    moon_stop(moon_actor_runtime(self), addr_of(&x->target, f), MOON_ERR_PEER_LOST);
    x->kills++;
    return arm_next(self, in);
}

const moon_actor_ops_t moon_sim_faults_ops = {
    .name        = "fault-injector",
    .state_bytes = sizeof(injector_t),
    .init        = injector_init,
    .on_msg      = {[MOON_MSG_SYS_TIMER] = injector_on_timer},
};

/* ---- the invariants ----------------------------------------------------- */

int moon_sim_faults_check(const moon_sim_faults_t *faults, const moon_sim_records_t *recs,
                          const uint32_t *asked_tokens, moon_sim_faults_report_t *report_p)
{
    moon_sim_faults_report_t r = {0};

    if (faults != NULL) {
        r.kills   = faults->kills;
        r.dropped = faults->dropped;
        r.delayed = faults->delayed;
        for (uint32_t i = 0; i < faults->spec.n_faults; i++) {
            r.pauses += faults->spec.faults[i].kind == MOON_SIM_FAULT_PAUSE;
        }
    }
    for (uint32_t i = 0; i < recs->n; i++) {
        const moon_sim_record_t *x = &recs->recs[i];

        switch (x->status) {
        case MOON_SIM_REQ_PENDING:
            r.lost++;
            break;
        case MOON_SIM_REQ_OK:
            r.completed++;
            r.short_outputs += x->output_tokens < asked_tokens[i];
            r.long_outputs += x->output_tokens > asked_tokens[i];
            break;
        case MOON_SIM_REQ_REJECTED:
            r.rejected++;
            break;
        default:
            r.failed++;
            r.long_outputs += x->output_tokens > asked_tokens[i];
            break;
        }
    }
    r.events_after_end = recs->n_after_end;
    r.holds = r.lost == 0 && r.short_outputs == 0 && r.long_outputs == 0 && r.events_after_end == 0;
    *report_p = r;
    return r.holds;
}

void moon_sim_faults_report_print(const moon_sim_faults_report_t *r, FILE *out)
{
    fprintf(out,
            "{\"kills\": %u, \"pauses\": %u, \"dropped\": %llu, \"delayed\": %llu, "
            "\"completed\": %u, \"failed\": %u, \"rejected\": %u, \"lost\": %u, "
            "\"short_outputs\": %u, \"long_outputs\": %u, \"events_after_end\": %u, "
            "\"invariants\": \"%s\"}",
            r->kills, r->pauses, (unsigned long long)r->dropped, (unsigned long long)r->delayed,
            r->completed, r->failed, r->rejected, r->lost, r->short_outputs, r->long_outputs,
            r->events_after_end, r->holds ? "hold" : "BROKEN");
}
