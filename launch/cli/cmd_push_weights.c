/* launch/cmd_push_weights.c - `moonlet push-weights`: pushes a checkpoint
 * into a running cluster through its gateway's admin route (POST
 * /v1/admin/weights, gw_admin.h) and prints the answer: the new version and
 * the figures of the push, or why it was refused. --state prints the
 * instances' versions and the push under way instead (GET). Built with
 * libcurl (as `moonlet bench`). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "loadgen_http.h"
#include "cli.h"
#include "commands.h"

#include "moonlet/alloc.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *url, *model, *admin_key;
    uint64_t    version;
    int         full, state;
    uint32_t    timeout_s;
} push_opts_t;

#define PW(_f) MOON_CONFIG_AT(push_opts_t, _f)
static const moon_config_field_t push_fields[] = {
    {"url", MOON_CONFIG_STRING, PW(url), .dflt = "http://127.0.0.1:8000",
     .doc = "the gateway (its root or its /v1)"},
    {"model", MOON_CONFIG_STRING, PW(model), .dflt = NULL,
     .doc = "GGUF checkpoint to push (a path the gateway's host reads), required unless --state"},
    {"version", MOON_CONFIG_U64, PW(version), .dflt = "0",
     .doc = "version of the new weights (0: the serving one + 1)", .min = 0, .max = 1ull << 52},
    {"full", MOON_CONFIG_BOOL, PW(full), .dflt = "0",
     .doc = "send every chunk (no delta against what the instances hold)"},
    {"state", MOON_CONFIG_BOOL, PW(state), .dflt = "0",
     .doc = "print each instance's version and the push under way, push nothing"},
    {"admin-key", MOON_CONFIG_STRING, PW(admin_key), .dflt = NULL,
     .doc = "the gateway's --admin-key (or MOON_PUSH_ADMIN_KEY)"},
    {"timeout", MOON_CONFIG_U32, PW(timeout_s), .dflt = "600", .min = 1,
     .doc = "seconds to wait for the answer"},
    MOON_CONFIG_END,
};
static const moon_config_table_t push_table = {"push-weights", "moonlet push-weights", "MOON_PUSH_",
                                               push_fields};

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    (void)arg;
    fwrite(p, size, n, stdout);
    return size * n;
}

int moon_cmd_push_weights(int argc, char **argv)
{
    push_opts_t            o;
    const moon_cli_table_t tables[] = {{&push_table, &o}};
    moon_config_t         *cfg      = NULL;
    char                   url[2048], auth[512], path[PATH_MAX], body[PATH_MAX + 128];
    const char            *key;
    struct curl_slist     *hdr = NULL;
    CURL                  *easy;
    CURLcode               res;
    long                   http = 0;
    int                    rc;

    rc = moon_cli_parse("push-weights",
                        "usage: moonlet push-weights --url URL --model NEW.gguf [--version V] "
                        "[--admin-key KEY]\n"
                        "       moonlet push-weights --url URL --state\n"
                        "  pushes new weights into a running cluster (no request lost) and "
                        "prints the new version and the push's figures\n",
                        tables, 1, 0, argc, argv, &cfg);
    if (rc >= 0) {
        return rc;
    }
    key = o.admin_key;
    if (!o.state && o.model == NULL) {
        moon_config_destroy(cfg);
        return moon_cli_usage_error("push-weights", "--model is required (or --state)");
    }
    if (key == NULL || key[0] == '\0') {
        moon_config_destroy(cfg);
        return moon_cli_usage_error(
            "push-weights", "--admin-key (or MOON_PUSH_ADMIN_KEY) is required: the gateway's "
                            "--admin-key");
    }
    if (moon_loadgen_http_url(o.url, "/v1/admin/weights", url, sizeof(url)) != MOON_OK) {
        moon_config_destroy(cfg);
        return moon_cli_usage_error("push-weights", "--url is too long");
    }
    if (!o.state) {
        /* the gateway reads the path: make it absolute (its working folder differs) */
        if (realpath(o.model, path) == NULL) {
            snprintf(path, sizeof(path), "%s", o.model);
        }
        cJSON *j = cJSON_CreateObject();
        char  *s;
        cJSON_AddStringToObject(j, "model", path);
        if (o.version > 0) {
            cJSON_AddNumberToObject(j, "version", (double)o.version);
        }
        cJSON_AddBoolToObject(j, "full", o.full);
        s = cJSON_PrintUnformatted(j);
        snprintf(body, sizeof(body), "%s", s ? s : "{}");
        cJSON_free(s);
        cJSON_Delete(j);
    }
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    easy = curl_easy_init();
    if (easy == NULL) {
        fprintf(stderr, "moonlet push-weights: curl_easy_init failed\n");
        moon_config_destroy(cfg);
        return 1;
    }
    hdr = curl_slist_append(hdr, auth);
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT, (long)o.timeout_s);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, NULL);
    if (!o.state) {
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
    }
    res = curl_easy_perform(easy);
    if (res == CURLE_OK) {
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &http);
        printf("\n");
    } else {
        fprintf(stderr, "moonlet push-weights: %s: %s\n", url, curl_easy_strerror(res));
    }
    curl_slist_free_all(hdr);
    curl_easy_cleanup(easy);
    curl_global_cleanup();
    moon_config_destroy(cfg);
    if (res == CURLE_OK && http != 200) {
        fprintf(stderr, "moonlet push-weights: HTTP %ld\n", http);
    }
    return res == CURLE_OK && http == 200 ? 0 : 1;
}
