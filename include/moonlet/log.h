/* moonlet/log.h - levelled logging with a rank/thread/actor prefix, and the
 * panic/assert macros (STYLE §8, §9). Thread-safe: each line is one write(2).
 * The level check happens before the arguments are evaluated. */
#ifndef MOONLET_LOG_H
#define MOONLET_LOG_H

#include "moonlet/config.h"
#include "moonlet/defs.h"

MOON_EXTERN_C_BEGIN

typedef enum {
    MOON_LOG_ERROR = 1, /* can't go on as normal */
    MOON_LOG_WARN  = 2,
    MOON_LOG_INFO  = 3, /* once per object */
    MOON_LOG_DEBUG = 4,
    MOON_LOG_TRACE = 5, /* per message; compiled out of release builds */
} moon_log_level_t;

#ifndef MOON_LOG_MAX_LEVEL
#define MOON_LOG_MAX_LEVEL MOON_LOG_TRACE
#endif

/* Current threshold; initialised at load from MOON_LOG_LEVEL
 * (error|warn|info|debug|trace; a malformed value is logged and the default,
 * warn, stays). Written rarely, read racily on purpose. */
MOON_API extern int moon_log_level;

/* The log's one option (moonlet/config.h): level is the index of
 * error..trace, i.e. moon_log_level - 1. */
typedef struct {
    int level;
} moon_log_config_t;
MOON_API extern const moon_config_table_t moon_log_config_table;

MOON_API void moon_log_emit(int level, const char *file, int line, const char *fmt, ...)
    MOON_PRINTF(4, 5);
MOON_API void moon_log_set_level(int level);
/* Parses "error".."trace" or "1".."5"; returns -1 on anything else. */
MOON_API int moon_log_parse_level(const char *text);

/* The prefix identity of this process and of the calling thread. The name is
 * borrowed: it must outlive its use (actor names live in static ops tables). */
MOON_API void moon_log_set_rank(int rank);
MOON_API void moon_log_set_thread_actor(const char *name, uint64_t addr);

/* Redirects log lines (tests capture them); NULL restores stderr. The sink is
 * called with the whole line, newline included, from any thread. */
typedef void (*moon_log_sink_fn)(int level, const char *line, void *arg);
MOON_API void moon_log_set_sink(moon_log_sink_fn sink, void *arg);

#define MOON_LOG(_lvl, ...)                                                                        \
    do {                                                                                           \
        if ((_lvl) <= MOON_LOG_MAX_LEVEL && (_lvl) <= moon_log_level) {                            \
            moon_log_emit((_lvl), __FILE__, __LINE__, __VA_ARGS__);                                \
        }                                                                                          \
    } while (0)
#define MOON_ERROR(...) MOON_LOG(MOON_LOG_ERROR, __VA_ARGS__)
#define MOON_WARN(...) MOON_LOG(MOON_LOG_WARN, __VA_ARGS__)
#define MOON_INFO(...) MOON_LOG(MOON_LOG_INFO, __VA_ARGS__)
#define MOON_DEBUG_LOG(...) MOON_LOG(MOON_LOG_DEBUG, __VA_ARGS__)
#define MOON_TRACE(...) MOON_LOG(MOON_LOG_TRACE, __VA_ARGS__)

/* Rate-limited lines, for what a client or a peer can make happen at any rate
 * (rejected requests, hostile connections): at most one line per call site
 * and second; the next line that passes says how many were held back. */
typedef struct {
    uint64_t next_ns; /* private: when the next line may pass (CLOCK_MONOTONIC) */
    uint64_t n_held;  /* private: lines held back since the last one */
} moon_log_limit_t;
/* 1: emit the line now, *n_held_p = lines held back since the last one that
 * passed; 0: hold it back (counted). At most one caller per interval_ns gets
 * 1. Any thread (atomics on lim). */
MOON_API int moon_log_limit_pass(moon_log_limit_t *lim, uint64_t interval_ns, uint64_t *n_held_p);
/* MOON_LOG_LIMITED(MOON_LOG_INFO, "gateway: %s refused", why): the line, with
 * " (N more held back)" appended, at most once a second. */
#define MOON_LOG_LIMITED(_lvl, _fmt, ...)                                                          \
    do {                                                                                           \
        static moon_log_limit_t lim_;                                                              \
        uint64_t                n_held_ = 0;                                                       \
        if ((_lvl) <= MOON_LOG_MAX_LEVEL && (_lvl) <= moon_log_level &&                            \
            moon_log_limit_pass(&lim_, 1000000000ull, &n_held_)) {                                 \
            moon_log_emit((_lvl), __FILE__, __LINE__, _fmt " (%llu more held back)", __VA_ARGS__,  \
                          (unsigned long long)n_held_);                                            \
        }                                                                                          \
    } while (0)

MOON_NORETURN MOON_API void moon_panic(const char *file, int line, const char *fmt, ...)
    MOON_PRINTF(3, 4);

/* Always on: use where carrying on would corrupt data. */
#define MOON_CHECK(_e) ((_e) ? (void)0 : moon_panic(__FILE__, __LINE__, "check failed: %s", #_e))
#ifdef MOON_DEBUG
#define MOON_ASSERT(_e) MOON_CHECK(_e)
#else
#define MOON_ASSERT(_e) ((void)0)
#endif

MOON_EXTERN_C_END

#endif /* MOONLET_LOG_H */
