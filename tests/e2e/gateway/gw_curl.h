/* tests/unit/gateway/gw_curl.h - runs the curl command line against the
 * gateway under test and collects status, headers and body. Test helper,
 * main thread only. */
#ifndef MOON_TESTS_GW_CURL_H
#define MOON_TESTS_GW_CURL_H

#include <stddef.h>

typedef struct {
    int    code; /* HTTP status; 0: curl failed */
    char  *body; /* malloc'd, NUL-terminated */
    size_t len;
    char   headers[4096];
} gw_http_t;

/* The scratch directory (under the working directory: the build tree),
 * gw_e2e/ unless named otherwise first (tests that may run at once need
 * their own). */
void        gw_tmp_name(const char *name);
const char *gw_tmp_dir(void);
/* Writes text to a file of the scratch directory; returns its path (static, per name). */
const char *gw_tmp_file(const char *name, const char *text, size_t len);
/* curl -s [args] URL: args is a shell-quoted fragment ("-X POST -d @file ..."). */
int  gw_curl(gw_http_t *r, unsigned port, const char *path, const char *args);
void gw_http_fini(gw_http_t *r);
/* A POST of a JSON body with curl. */
int gw_post(gw_http_t *r, unsigned port, const char *path, const char *json, const char *extra);
/* Polls /health every 100 ms until it answers want (1) or a minute has
 * passed (0). */
int gw_wait_health(unsigned port, int want);
/* Runs script (a node .mjs, copied as `as` into the scratch directory's
 * npm/, where the npm `openai@4` package is installed once for every test
 * of the scratch directory) with MOON_GW_URL=http://127.0.0.1:port/v1, at
 * most 120 s: asserts (CUnit) it exits 0, or skips the test saying so
 * (moon_test_skip) where npm, node or the npm registry cannot be reached. */
void gw_run_npm_openai(const char *script, const char *as, unsigned port);
/* The body of a file of the scratch directory, malloc'd (NULL if missing). */
char *gw_read_file(const char *path, size_t *len_p);

#endif /* MOON_TESTS_GW_CURL_H */
