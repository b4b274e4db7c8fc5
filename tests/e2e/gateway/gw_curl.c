/* tests/unit/gateway/gw_curl.c - curl helper (see gw_curl.h). */
#include "gw_curl.h"

#include "moon_test.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#ifndef MOON_TEST_TMP_BASE
#error "MOON_TEST_TMP_BASE must name a folder of the build tree"
#endif

static char tmp_dir[512];
static char tmp_name[64] = "gw_e2e";

void gw_tmp_name(const char *name)
{
    snprintf(tmp_name, sizeof(tmp_name), "%s", name);
    tmp_dir[0] = '\0';
}

const char *gw_tmp_dir(void)
{
    if (tmp_dir[0] == '\0') {
        /* fixed and in the build tree (whatever the working directory), so
         * the npm install of an earlier run is reused and nothing lands in
         * the source tree */
        snprintf(tmp_dir, sizeof(tmp_dir), "%s/%s", MOON_TEST_TMP_BASE, tmp_name);
        if (mkdir(tmp_dir, 0755) != 0 && errno != EEXIST) {
            snprintf(tmp_dir, sizeof(tmp_dir), "%s", MOON_TEST_TMP_BASE);
        }
    }
    return tmp_dir;
}

const char *gw_tmp_file(const char *name, const char *text, size_t len)
{
    static char path[512];
    FILE       *f;

    snprintf(path, sizeof(path), "%s/%s", gw_tmp_dir(), name);
    f = fopen(path, "wb");
    if (f != NULL) {
        fwrite(text, 1, len, f);
        fclose(f);
    }
    return path;
}

char *gw_read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long  n;

    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    if (buf != NULL) {
        n      = (long)fread(buf, 1, (size_t)n, f);
        buf[n] = '\0';
        if (len_p != NULL) {
            *len_p = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

int gw_curl(gw_http_t *r, unsigned port, const char *path, const char *args)
{
    char  cmd[4096], hdr[512], out[512];
    FILE *p;
    char *h;

    memset(r, 0, sizeof(*r));
    snprintf(hdr, sizeof(hdr), "%s/hdr", gw_tmp_dir());
    snprintf(out, sizeof(out), "%s/out", gw_tmp_dir());
    remove(hdr);
    remove(out);
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 120 -D '%s' -o '%s' -w '%%{http_code}' %s "
             "'http://127.0.0.1:%u%s' </dev/null",
             hdr, out, args != NULL ? args : "", port, path);
    p = popen(cmd, "r");
    if (p == NULL || fscanf(p, "%d", &r->code) != 1) {
        r->code = 0;
    }
    if (p != NULL) {
        pclose(p);
    }
    r->body = gw_read_file(out, &r->len);
    if (r->body == NULL) {
        r->body = calloc(1, 1);
    }
    h = gw_read_file(hdr, NULL);
    if (h != NULL) {
        snprintf(r->headers, sizeof(r->headers), "%s", h);
        free(h);
    }
    return r->code;
}

int gw_post(gw_http_t *r, unsigned port, const char *path, const char *json, const char *extra)
{
    char args[1024];

    snprintf(args, sizeof(args),
             "-X POST -H 'Content-Type: application/json' --data-binary '@%s' %s",
             gw_tmp_file("body.json", json, strlen(json)), extra != NULL ? extra : "");
    return gw_curl(r, port, path, args);
}

void gw_http_fini(gw_http_t *r)
{
    free(r->body);
    r->body = NULL;
}

int gw_wait_health(unsigned port, int want)
{
    for (int i = 0; i < 600; i++) {
        struct timespec nap = {0, 100000000L};
        gw_http_t       r;
        int             code = gw_curl(&r, port, "/health", NULL);

        gw_http_fini(&r);
        if (code == want) {
            return 1;
        }
        nanosleep(&nap, NULL);
    }
    return 0;
}

void gw_run_npm_openai(const char *script, const char *as, unsigned port)
{
    char cmd[2048];
    int  ret;

    snprintf(cmd, sizeof(cmd),
             "command -v npm >/dev/null && command -v node >/dev/null || exit 77; "
             "d='%s/npm'; mkdir -p \"$d\"; cd \"$d\" && "
             "( [ -d node_modules/openai ] || timeout 120 npm install --silent --no-audit "
             "--no-fund openai@4 >npm.log 2>&1 ) || exit 77; "
             "cp '%s' '%s' && MOON_GW_URL=http://127.0.0.1:%u/v1 timeout 120 node '%s'",
             gw_tmp_dir(), script, as, port, as);
    ret = system(cmd);
    if (WEXITSTATUS(ret) == 77) {
        moon_test_skip("npm or the npm registry is unreachable: the openai npm client did not run");
        return;
    }
    CU_ASSERT_EQUAL(WEXITSTATUS(ret), 0);
}
