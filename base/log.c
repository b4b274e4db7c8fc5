/* base/log.c - log line formatting. Each line is built in a stack
 * buffer and written with one write(2), so lines from threads never interleave. */
#define _GNU_SOURCE /* syscall(SYS_gettid) */
#include "moonlet/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int moon_log_level = MOON_LOG_WARN;

static int                       log_rank = -1;
static moon_log_sink_fn          log_sink;
static void                     *log_sink_arg;
static _Thread_local const char *tls_actor_name;
static _Thread_local uint64_t    tls_actor_addr;

static const char *level_names[] = {"", "error", "warn", "info", "debug", "trace"};

static const char *const level_choices[] = {"error", "warn", "info", "debug", "trace", NULL};

static const moon_config_field_t log_fields[] = {
    {"log-level", MOON_CONFIG_ENUM, MOON_CONFIG_AT(moon_log_config_t, level), .dflt = "warn",
     .doc = "log threshold", .choices = level_choices},
    MOON_CONFIG_END,
};
const moon_config_table_t moon_log_config_table = {"log", "logging", "MOON_", log_fields};

/* The level is the choice's index + 1 (MOON_LOG_ERROR is 1). */
__attribute__((constructor)) static void log_init_from_env(void)
{
    moon_log_config_t cfg;

    if (moon_config_defaults(&moon_log_config_table, &cfg) == MOON_OK &&
        moon_config_load_env(&moon_log_config_table, &cfg) == MOON_OK) {
        moon_log_level = cfg.level + 1;
    }
}

int moon_log_parse_level(const char *text)
{
    if (text == NULL) {
        return -1;
    }
    for (int i = 1; i <= MOON_LOG_TRACE; i++) {
        if (strcasecmp(text, level_names[i]) == 0) {
            return i;
        }
    }
    if (text[0] >= '1' && text[0] <= '5' && text[1] == '\0') {
        return text[0] - '0';
    }
    return -1;
}

void moon_log_set_level(int level)
{
    moon_log_level = level;
}

void moon_log_set_rank(int rank)
{
    log_rank = rank;
}

void moon_log_set_thread_actor(const char *name, uint64_t addr)
{
    tls_actor_name = name;
    tls_actor_addr = addr;
}

void moon_log_set_sink(moon_log_sink_fn sink, void *arg)
{
    log_sink_arg = arg;
    log_sink     = sink;
}

static void log_vemit(int level, const char *file, int line, const char *fmt, va_list ap)
{
    char            buf[1024];
    struct timespec ts;
    const char     *base = strrchr(file, '/');
    int             n;

    clock_gettime(CLOCK_REALTIME, &ts);
    n = snprintf(buf, sizeof(buf), "[%ld.%06ld] [r%d t%ld", (long)ts.tv_sec,
                 (long)(ts.tv_nsec / 1000), log_rank, (long)syscall(SYS_gettid));
    if (tls_actor_name != NULL && n < (int)sizeof(buf)) {
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, " %s@%llx", tls_actor_name,
                      (unsigned long long)tls_actor_addr);
    }
    if (n < (int)sizeof(buf)) {
        n += snprintf(buf + n, sizeof(buf) - (size_t)n,
                      "] %s %s:%d: ", level_names[level < 1 || level > 5 ? 1 : level],
                      base ? base + 1 : file, line);
    }
    if (n < (int)sizeof(buf)) {
        n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    }
    if (n >= (int)sizeof(buf) - 1) {
        n = (int)sizeof(buf) - 2; /* truncated: keep the newline */
    }
    buf[n++] = '\n';
    buf[n]   = '\0';
    if (log_sink != NULL) {
        log_sink(level, buf, log_sink_arg);
    } else {
        ssize_t ret = write(STDERR_FILENO, buf, (size_t)n);
        (void)ret;
    }
}

void moon_log_emit(int level, const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_vemit(level, file, line, fmt, ap);
    va_end(ap);
}

int moon_log_limit_pass(moon_log_limit_t *lim, uint64_t interval_ns, uint64_t *n_held_p)
{
    struct timespec ts;
    uint64_t        now, next;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    now  = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    next = __atomic_load_n(&lim->next_ns, __ATOMIC_RELAXED);
    /* one winner per interval: the compare-exchange that moves next_ns on */
    if (now < next || !__atomic_compare_exchange_n(&lim->next_ns, &next, now + interval_ns, 0,
                                                   __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        __atomic_fetch_add(&lim->n_held, 1, __ATOMIC_RELAXED);
        return 0;
    }
    *n_held_p = __atomic_exchange_n(&lim->n_held, 0, __ATOMIC_RELAXED);
    return 1;
}

void moon_panic(const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_vemit(MOON_LOG_ERROR, file, line, fmt, ap);
    va_end(ap);
    abort();
}
