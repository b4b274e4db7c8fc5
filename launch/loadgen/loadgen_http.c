/* launch/loadgen/loadgen_http.c - the libcurl multi driver of `moonlet bench`
 * (loadgen_http.h): arrivals, concurrency cap, streamed chunks stamped on the
 * monotonic clock, results. */
#include "loadgen_http.h"

#include "loadgen_openai.h"
#include "loadgen_sse.h"
#include "progress.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <curl/curl.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ERRBODY_MAX 1024

typedef struct {
    CURL                     *easy;
    const moon_loadgen_req_t *req;
    moon_loadgen_result_t    *res;
    moon_loadgen_sse_t        sse;
    char                     *body;
    double                    send_abs, last_abs; /* monotonic seconds */
    uint32_t                  itl_cap;
    int                       has_usage, error, done;
    long                      http_status;
    char                      errbody[ERRBODY_MAX];
    size_t                    errbody_len;
    char                      curl_err[CURL_ERROR_SIZE];
} xfer_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

moon_status_t moon_loadgen_http_url(const char *base_url, const char *path, char *url, size_t len)
{
    size_t n = strlen(base_url);
    int    w;

    while (n > 0 && base_url[n - 1] == '/') {
        n--;
    }
    if (n >= 3 && strncmp(base_url + n - 3, "/v1", 3) == 0) {
        n -= 3;
    }
    w = snprintf(url, len, "%.*s%s", (int)n, base_url, path);
    return w < 0 || (size_t)w >= len ? MOON_ERR_INVALID_PARAM : MOON_OK;
}

static void set_error(moon_loadgen_result_t *res, const char *text)
{
    if (res->error[0] == '\0') {
        /* truncating a long message is intended: the precision says so */
        snprintf(res->error, sizeof(res->error), "%.*s", (int)sizeof(res->error) - 1, text);
    }
}

/* One SSE event of a 200 stream. */
static int on_event(void *arg, const char *data, size_t len)
{
    xfer_t                *x = arg;
    moon_loadgen_chunk_t   chunk;
    moon_loadgen_result_t *res = x->res;
    double                 t   = now_s();

    if (moon_loadgen_openai_chunk(data, len, &chunk) != MOON_OK) {
        x->error = 1;
        set_error(res, chunk.error);
        return 1;
    }
    if (chunk.done) {
        x->done = 1;
        return 0;
    }
    if (chunk.has_error) {
        x->error = 1;
        set_error(res, chunk.error);
        return 1;
    }
    if (chunk.has_usage) {
        x->has_usage = 1;
        res->n_out   = chunk.completion_tokens;
        if (chunk.prompt_tokens > 0) {
            res->n_in = chunk.prompt_tokens;
        }
        res->n_cached = chunk.cached_tokens;
        if (chunk.has_details) {
            res->has_details      = 1;
            res->prefill_instance = chunk.prefill_instance;
            res->decode_instance  = chunk.decode_instance;
            res->queue_s          = chunk.queue_s;
        }
    }
    if (chunk.has_text) {
        if (res->n_chunks == 0) {
            res->ttft_s = t - x->send_abs;
        } else {
            if (res->n_itl == x->itl_cap) {
                uint32_t cap  = x->itl_cap ? x->itl_cap * 2 : 64;
                double  *more = moon_realloc(res->itl_s, (size_t)cap * sizeof(double));
                if (more == NULL) {
                    x->error = 1;
                    set_error(res, "out of memory for inter-token latencies");
                    return 1;
                }
                res->itl_s = more;
                x->itl_cap = cap;
            }
            res->itl_s[res->n_itl++] = t - x->last_abs;
        }
        x->last_abs = t;
        res->n_chunks++;
    }
    return 0;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
    xfer_t *x = arg;
    size_t  n = size * nmemb;

    if (x->http_status == 0) {
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->http_status);
    }
    if (x->http_status != 200) { /* keep the head of an error body for the report */
        size_t room = sizeof(x->errbody) - 1 - x->errbody_len;
        size_t k    = n < room ? n : room;
        memcpy(x->errbody + x->errbody_len, ptr, k);
        x->errbody_len += k;
        x->errbody[x->errbody_len] = '\0';
        return n;
    }
    if (moon_loadgen_sse_feed(&x->sse, ptr, n) != MOON_OK) {
        if (!x->error) {
            x->error = 1;
            set_error(x->res, "malformed event stream");
        }
        return CURL_WRITEFUNC_ERROR;
    }
    return n;
}

static void xfer_free(xfer_t *x)
{
    if (x == NULL) {
        return;
    }
    if (x->easy != NULL) {
        curl_easy_cleanup(x->easy);
    }
    moon_loadgen_sse_fini(&x->sse);
    moon_free(x->body);
    moon_free(x);
}

/* Creates and configures the transfer of req; NULL with res->error set. */
static xfer_t *xfer_create(const moon_loadgen_opts_t *opts, const char *model, const char *url,
                           struct curl_slist *headers, const moon_loadgen_workload_t *wl,
                           const moon_loadgen_req_t *req, moon_loadgen_result_t *res)
{
    xfer_t *x = moon_calloc(1, sizeof(*x));

    if (x == NULL) {
        set_error(res, "out of memory");
        return NULL;
    }
    x->req = req;
    x->res = res;
    moon_loadgen_sse_init(&x->sse, 0, on_event, x);
    if (moon_loadgen_openai_body(opts, model, wl, req, &x->body) != MOON_OK) {
        set_error(res, "out of memory building the request body");
        xfer_free(x);
        return NULL;
    }
    x->easy = curl_easy_init();
    if (x->easy == NULL) {
        set_error(res, "curl_easy_init failed");
        xfer_free(x);
        return NULL;
    }
    curl_easy_setopt(x->easy, CURLOPT_URL, url);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, x->body);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(x->body));
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->easy, CURLOPT_ERRORBUFFER, x->curl_err);
    curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->easy, CURLOPT_TCP_NODELAY, 1L);
    if (opts->timeout_s > 0) {
        curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, (long)ceil(opts->timeout_s * 1e3));
    }
    res->n_in = req->n_ids;
    return x;
}

/* A finished transfer: decide ok, fill the result. */
static void xfer_finish(xfer_t *x, CURLcode code)
{
    moon_loadgen_result_t *res = x->res;
    double                 end = now_s();

    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->http_status);
    res->http_status = (int)x->http_status;
    if (code == CURLE_OK && x->http_status == 200 && !x->error &&
        moon_loadgen_sse_finish(&x->sse) != MOON_OK && !x->error) {
        x->error = 1;
        set_error(res, "malformed event stream at its end");
    }
    if (code != CURLE_OK && !x->error) {
        set_error(res, x->curl_err[0] ? x->curl_err : curl_easy_strerror(code));
    } else if (x->http_status != 200 && res->error[0] == '\0') {
        char text[160];
        moon_loadgen_openai_error_text(x->errbody, x->errbody_len, text, sizeof(text));
        snprintf(res->error, sizeof(res->error), "HTTP %ld: %s", x->http_status, text);
    } else if (!x->error && res->n_chunks == 0) {
        set_error(res, "the stream carried no text chunk");
    }
    res->ok = code == CURLE_OK && x->http_status == 200 && !x->error && res->n_chunks > 0;
    if (res->ok) {
        res->e2el_s = x->last_abs - x->send_abs;
        if (!x->has_usage) {
            res->n_out = res->n_chunks;
        }
    } else {
        res->e2el_s = end - x->send_abs;
    }
}

static struct curl_slist *make_headers(const moon_loadgen_opts_t *opts)
{
    struct curl_slist *h = NULL, *more;
    char               auth[1024];

    h = curl_slist_append(h, "Content-Type: application/json");
    /* no 100-continue round trip before bodies over 1 KiB */
    more = h != NULL ? curl_slist_append(h, "Expect:") : NULL;
    h    = more != NULL ? more : h;
    more = more != NULL ? curl_slist_append(h, "Accept: text/event-stream") : NULL;
    if (more == NULL) {
        curl_slist_free_all(h);
        return NULL;
    }
    if (opts->api_key != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", opts->api_key);
        more = curl_slist_append(h, auth);
        if (more == NULL) {
            curl_slist_free_all(h);
            return NULL;
        }
    }
    return h;
}

static const char *endpoint_path(const moon_loadgen_opts_t *opts)
{
    if (strcmp(opts->endpoint, "completions") == 0) {
        return "/v1/completions";
    }
    if (strcmp(opts->endpoint, "chat") == 0) {
        return "/v1/chat/completions";
    }
    return opts->endpoint;
}

moon_status_t moon_loadgen_http_run(const moon_loadgen_opts_t *opts, const char *model,
                                    const moon_loadgen_workload_t *wl,
                                    moon_loadgen_result_t *results, double *duration_p)
{
    char               url[2048];
    CURLM             *multi;
    struct curl_slist *headers;
    moon_progress_t    prog;
    uint32_t           n = wl->n_reqs, next = 0, done = 0, failed = 0, in_flight = 0;
    uint32_t           cap = opts->max_concurrency;
    double             start, last_end;
    moon_status_t      status;

    memset(results, 0, (size_t)n * sizeof(*results));
    status = moon_loadgen_http_url(opts->base_url, endpoint_path(opts), url, sizeof(url));
    if (status != MOON_OK) {
        MOON_ERROR("bench: --base-url is too long");
        return status;
    }
    headers = make_headers(opts);
    multi   = curl_multi_init();
    if (headers == NULL || multi == NULL) {
        MOON_ERROR("bench: libcurl could not set up (curl_multi_init or headers)");
        curl_slist_free_all(headers);
        if (multi != NULL) {
            curl_multi_cleanup(multi);
        }
        return MOON_ERR_IO;
    }
    /* keep every connection for reuse: one per request in flight */
    curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)(cap ? cap : MOON_MIN(n, 10000u)) + 1);
    moon_progress_init(&prog, opts->progress ? STDERR_FILENO : -1, n, 0);
    start    = now_s();
    last_end = start;
    while (done < n) {
        double   t = now_s() - start;
        int      running, left;
        long     wait_ms = 100;
        CURLMsg *msg;

        while (next < n && wl->reqs[next].arrival_s <= t && (cap == 0 || in_flight < cap)) {
            xfer_t *x = xfer_create(opts, model, url, headers, wl, &wl->reqs[next], &results[next]);
            results[next].send_s = now_s() - start;
            if (x == NULL) {
                done++;
                failed++;
                next++;
                continue;
            }
            x->send_abs = now_s();
            if (curl_multi_add_handle(multi, x->easy) != CURLM_OK) {
                set_error(&results[next], "curl_multi_add_handle failed");
                xfer_free(x);
                done++;
                failed++;
                next++;
                continue;
            }
            in_flight++;
            next++;
        }
        curl_multi_perform(multi, &running);
        while ((msg = curl_multi_info_read(multi, &left)) != NULL) {
            xfer_t *x = NULL;
            if (msg->msg != CURLMSG_DONE) {
                continue;
            }
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            xfer_finish(x, msg->data.result);
            failed += !x->res->ok;
            curl_multi_remove_handle(multi, x->easy);
            xfer_free(x);
            in_flight--;
            done++;
            last_end = now_s();
        }
        moon_progress_update(&prog, done, now_s() - start);
        if (done == n) {
            break;
        }
        if (next < n && (cap == 0 || in_flight < cap)) {
            double dt = wl->reqs[next].arrival_s - (now_s() - start);
            wait_ms   = dt <= 0 ? 0 : MOON_MIN((long)ceil(dt * 1e3), wait_ms);
        }
        if (wait_ms > 0) {
            curl_multi_poll(multi, NULL, 0, (int)wait_ms, NULL);
        }
    }
    moon_progress_finish(&prog);
    curl_multi_cleanup(multi);
    curl_slist_free_all(headers);
    *duration_p = last_end - start;
    return MOON_OK;
}

/* GET body collector for /v1/models */
typedef struct {
    char  *buf;
    size_t len, cap;
    int    oom;
} buf_t;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
    buf_t *b = arg;
    size_t n = size * nmemb;

    if (b->len + n + 1 > b->cap) {
        size_t cap  = (b->len + n + 1) * 2;
        char  *more = cap <= (8u << 20) ? moon_realloc(b->buf, cap) : NULL;
        if (more == NULL) {
            b->oom = 1;
            return CURL_WRITEFUNC_ERROR;
        }
        b->buf = more;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, ptr, n);
    b->len += n;
    b->buf[b->len] = '\0';
    return n;
}

moon_status_t moon_loadgen_http_first_model(const moon_loadgen_opts_t *opts, char **model_p)
{
    char               url[2048], err[CURL_ERROR_SIZE] = "";
    buf_t              body = {0};
    CURL              *easy;
    struct curl_slist *headers;
    CURLcode           code;
    long               http = 0;
    moon_status_t      status;

    status = moon_loadgen_http_url(opts->base_url, "/v1/models", url, sizeof(url));
    if (status != MOON_OK) {
        MOON_ERROR("bench: --base-url is too long");
        return status;
    }
    headers = make_headers(opts);
    easy    = curl_easy_init();
    if (headers == NULL || easy == NULL) {
        curl_slist_free_all(headers);
        if (easy != NULL) {
            curl_easy_cleanup(easy);
        }
        return MOON_ERR_NO_MEMORY;
    }
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 30000L);
    code = curl_easy_perform(easy);
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &http);
    curl_easy_cleanup(easy);
    curl_slist_free_all(headers);
    if (body.oom) {
        status = MOON_ERR_NO_MEMORY;
    } else if (code != CURLE_OK) {
        MOON_ERROR("bench: GET %s: %s", url, err[0] ? err : curl_easy_strerror(code));
        status = MOON_ERR_PEER_LOST;
    } else if (http != 200) {
        char text[160];
        moon_loadgen_openai_error_text(body.buf, body.len, text, sizeof(text));
        MOON_ERROR("bench: GET %s: HTTP %ld: %s", url, http, text);
        status = MOON_ERR_PEER_REJECTED;
    } else {
        status = moon_loadgen_openai_first_model(body.buf, body.len, model_p);
        if (status == MOON_ERR_NOT_FOUND) {
            MOON_ERROR("bench: GET %s listed no model: pass --model", url);
            status = MOON_ERR_PEER_REJECTED;
        }
    }
    moon_free(body.buf);
    return status;
}
