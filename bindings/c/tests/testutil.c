/* testutil.c — see testutil.h. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ harness */

static pthread_mutex_t tu_mu = PTHREAD_MUTEX_INITIALIZER;
static int tu_passed, tu_failed;
static const char *tu_program = "test";
static char tu_stores[32][512];
static int tu_nstores;

/* A hang fails the program instead of stalling the suite. The sanitizers
 * make every thread start costly, and test_lifetimes starts 3,000: under
 * AddressSanitizer it took 110 s of 240 alone, and more on a loaded machine. */
#if TU_SANITIZED
#define TU_WATCHDOG_SECONDS 720
#else
#define TU_WATCHDOG_SECONDS 240
#endif
/* Named by the watchdog, so a CI log tells which part stalled. */
static const char *volatile tu_current_section = "(start)";

static void tu_on_alarm(int sig)
{
    char buf[256];
    int n;
    (void)sig;
    n = snprintf(buf, sizeof buf,
                 "%s: FAIL: watchdog: the program did not finish in %d s (a hang?) in \"%s\"\n%d passed, %d failed\n",
                 tu_program, TU_WATCHDOG_SECONDS, tu_current_section, tu_passed, tu_failed + 1);
    if (n > 0) {
        ssize_t w = write(2, buf, (size_t)n);
        (void)w;
        w = write(1, buf, (size_t)n);
        (void)w;
    }
    _exit(1);
}

void tu_init(const char *program)
{
    const char *slash = strrchr(program, '/');
    tu_program = slash ? slash + 1 : program;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, tu_on_alarm);
    signal(SIGPIPE, SIG_IGN);
    alarm(TU_WATCHDOG_SECONDS);
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void tu_remove_store(const char *path)
{
    char buf[600];
    remove(path);
    snprintf(buf, sizeof buf, "%s-wal", path);
    remove(buf);
    snprintf(buf, sizeof buf, "%s-shm", path);
    remove(buf);
    snprintf(buf, sizeof buf, "%s-journal", path);
    remove(buf);
}

int tu_finish(void)
{
    int i;
    alarm(0);
    if (!getenv("TETHER_TEST_KEEP"))
        for (i = 0; i < tu_nstores; i++)
            tu_remove_store(tu_stores[i]);
    pthread_mutex_lock(&tu_mu);
    printf("%s: %s\n", tu_program, tu_failed ? "FAILED" : "ok");
    printf("%d passed, %d failed\n", tu_passed, tu_failed);
    fflush(stdout);
    i = tu_failed ? 1 : 0;
    pthread_mutex_unlock(&tu_mu);
    return i;
}

int tu_check(int ok, const char *file, int line, const char *expr, const char *detail)
{
    pthread_mutex_lock(&tu_mu);
    if (ok) {
        tu_passed++;
    } else {
        tu_failed++;
        printf("FAIL %s:%d: %s%s%s\n", file, line, expr, detail ? ": " : "", detail ? detail : "");
    }
    pthread_mutex_unlock(&tu_mu);
    return ok;
}

int tu_check_str(const char *a, const char *b, const char *file, int line, const char *expr)
{
    char detail[600];
    snprintf(detail, sizeof detail, "got \"%.250s\", expected \"%.250s\"", a ? a : "(null)",
             b ? b : "(null)");
    return tu_check(a && b && strcmp(a, b) == 0, file, line, expr, detail);
}

int tu_check_code(int got, int expected, const char *file, int line, const char *expr)
{
    char detail[256];
    snprintf(detail, sizeof detail, "got %s (%d), expected %s (%d)", tether_errstr(got), got,
             tether_errstr(expected), expected);
    return tu_check(got == expected, file, line, expr, detail);
}

int tu_check_status(int got, int expected, const char *file, int line, const char *expr)
{
    /* Read the message before anything else can call into the library. */
    const char *msg = tether_errmsg();
    char detail[768];
    int ok = got == expected;
    snprintf(detail, sizeof detail, "got %s (%d), expected %s (%d); errmsg \"%s\"",
             tether_errstr(got), got, tether_errstr(expected), expected, msg ? msg : "(NULL)");
    tu_check(ok, file, line, expr, detail);
    if (ok && got != TETHER_OK) {
        char what[600];
        snprintf(what, sizeof what, "tether_errmsg() non-empty after %s", expr);
        tu_check(msg != NULL && msg[0] != '\0', file, line, what, "errmsg was empty");
    }
    return got;
}

int tu_check_fails(int got, const char *file, int line, const char *expr)
{
    const char *msg = tether_errmsg();
    char detail[768];
    snprintf(detail, sizeof detail, "got %s (%d), expected a failure; errmsg \"%s\"",
             tether_errstr(got), got, msg ? msg : "(NULL)");
    if (tu_check(got < 0, file, line, expr, detail)) {
        char what[600];
        snprintf(what, sizeof what, "tether_errmsg() non-empty after %s", expr);
        tu_check(msg != NULL && msg[0] != '\0', file, line, what, "errmsg was empty");
    }
    return got;
}

void tu_section(const char *name)
{
    tu_current_section = name;
    printf("-- %s\n", name);
}

/* ------------------------------------------------------------ time */

int64_t tu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void tu_sleep_ms(int ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

struct timespec tu_deadline(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* ------------------------------------------------------------ server */

const char *tu_url(void)
{
    const char *u = getenv("TETHER_TEST_URL");
    if (!u || !*u) {
        fprintf(stderr,
                "%s: TETHER_TEST_URL is not set. Run against a Kinto, e.g.\n"
                "  scripts/with-kinto make -C bindings/c test\n"
                "or set TETHER_TEST_URL=http://127.0.0.1:PORT/v1\n",
                tu_program);
        printf("%s: FAIL: TETHER_TEST_URL is not set\n0 passed, 1 failed\n", tu_program);
        exit(1);
    }
    return u;
}

void tu_unique(char *buf, size_t size, const char *prefix)
{
    static int counter;
    snprintf(buf, size, "%s-%ld-%lld-%d", prefix, (long)getpid(), (long long)time(NULL), ++counter);
}

void tu_store_path(char *buf, size_t size, const char *name)
{
    const char *dir = getenv("TMPDIR");
    char u[128];
    if (!dir || !*dir)
        dir = "/tmp";
    tu_unique(u, sizeof u, name);
    snprintf(buf, size, "%s/tether-c-%s-%s.sqlite", dir, tu_program, u);
    tu_remove_store(buf);
    if (tu_nstores < 32) {
        snprintf(tu_stores[tu_nstores], sizeof tu_stores[0], "%s", buf);
        tu_nstores++;
    }
}

int tu_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

typedef struct tu_buf {
    char *data;
    size_t len;
} tu_buf;

static size_t tu_write(char *ptr, size_t size, size_t n, void *ud)
{
    tu_buf *b = ud;
    size_t add = size * n;
    char *p = realloc(b->data, b->len + add + 1);
    if (!p)
        return 0;
    memcpy(p + b->len, ptr, add);
    b->data = p;
    b->len += add;
    b->data[b->len] = '\0';
    return add;
}

long tu_http_as(const char *user, const char *password, const char *method, const char *path,
                const char *body, char **out)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hdr = NULL;
    tu_buf b = {NULL, 0};
    char url[2048], cred[256];
    long code = -1;
    CURLcode rc;
    if (out)
        *out = NULL;
    if (!h)
        return -1;
    snprintf(url, sizeof url, "%s%s", tu_url(), path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (user) {
        snprintf(cred, sizeof cred, "%s:%s", user, password ? password : "");
        curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(h, CURLOPT_USERPWD, cred);
    }
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    hdr = curl_slist_append(hdr, "Accept: application/json");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, tu_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    rc = curl_easy_perform(h);
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    else
        fprintf(stderr, "%s: %s %s: %s\n", tu_program, method, url, curl_easy_strerror(rc));
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    if (out)
        *out = b.data;
    else
        free(b.data);
    return code;
}

long tu_http(const char *method, const char *path, const char *body, char **out)
{
    return tu_http_as("test", "test", method, path, body, out);
}

static int tu_ok(const char *method, const char *path, const char *body)
{
    char *resp = NULL;
    long code = tu_http(method, path, body, &resp);
    int ok = code >= 200 && code < 300;
    if (!ok)
        fprintf(stderr, "%s: %s %s -> %ld %s\n", tu_program, method, path, code, resp ? resp : "");
    free(resp);
    return ok;
}

int tu_put_bucket(const char *bucket)
{
    char path[512];
    snprintf(path, sizeof path, "/buckets/%s", bucket);
    return tu_ok("PUT", path, "{\"data\": {}}");
}

int tu_put_collection(const char *bucket, const char *collection, const char *schema)
{
    char path[512];
    size_t n = strlen(schema) + 64;
    char *body = malloc(n);
    int ok;
    snprintf(path, sizeof path, "/buckets/%s/collections/%s", bucket, collection);
    snprintf(body, n, "{\"data\": {\"schema\": %s}}", schema);
    ok = tu_ok("PUT", path, body);
    free(body);
    return ok;
}

static int tu_record(const char *method, const char *bucket, const char *collection, const char *id,
                     const char *data)
{
    char path[768];
    char *body = NULL;
    int ok;
    snprintf(path, sizeof path, "/buckets/%s/collections/%s/records/%s", bucket, collection, id);
    if (data) {
        size_t n = strlen(data) + 32;
        body = malloc(n);
        snprintf(body, n, "{\"data\": %s}", data);
    }
    ok = tu_ok(method, path, body);
    free(body);
    return ok;
}

int tu_put_record(const char *bucket, const char *collection, const char *id, const char *data)
{
    return tu_record("PUT", bucket, collection, id, data);
}

int tu_patch_record(const char *bucket, const char *collection, const char *id, const char *data)
{
    return tu_record("PATCH", bucket, collection, id, data);
}

int tu_delete_record(const char *bucket, const char *collection, const char *id)
{
    return tu_record("DELETE", bucket, collection, id, NULL);
}

#define TU_ID_SIZE 64
#define TU_DATA_SIZE 512
/* Writes record i's id (TU_ID_SIZE bytes) and data (TU_DATA_SIZE bytes). */
typedef void tu_make_record(int i, char *id, char *data, const void *arg);

/* PUTs `count` records made by `make`: the one loop behind tu_put_numbered
 * and tu_seed_numbered. */
static int tu_put_made(const char *bucket, const char *collection, int count, tu_make_record *make,
                       const void *arg)
{
    char **ids = calloc((size_t)count, sizeof *ids), **datas = calloc((size_t)count, sizeof *datas);
    int i, ok = ids && datas;
    for (i = 0; ok && i < count; i++) {
        ids[i] = malloc(TU_ID_SIZE);
        datas[i] = malloc(TU_DATA_SIZE);
        ok = ids[i] && datas[i];
        if (ok)
            make(i, ids[i], datas[i], arg);
    }
    if (ok)
        ok = tu_put_records(bucket, collection, (const char *const *)ids, (const char *const *)datas, (size_t)count);
    for (i = 0; ids && datas && i < count; i++) {
        free(ids[i]);
        free(datas[i]);
    }
    free(ids);
    free(datas);
    return ok;
}

typedef struct tu_numbered {
    const char *id_format, *data_format;
} tu_numbered;

static void tu_make_numbered(int i, char *id, char *data, const void *arg)
{
    const tu_numbered *f = arg;
    snprintf(id, TU_ID_SIZE, f->id_format, i);
    snprintf(data, TU_DATA_SIZE, f->data_format, i, i);
}

int tu_put_numbered(const char *bucket, const char *collection, const char *id_format,
                    const char *data_format, int count)
{
    tu_numbered f = {id_format, data_format};
    return tu_put_made(bucket, collection, count, tu_make_numbered, &f);
}

typedef struct tu_seeded {
    const char *id_format, *label, *more_fields;
} tu_seeded;

static void tu_make_seeded(int i, char *id, char *data, const void *arg)
{
    const tu_seeded *f = arg;
    char more[256] = "";
    if (f->more_fields)
        snprintf(more, sizeof more, f->more_fields, i);
    snprintf(id, TU_ID_SIZE, f->id_format, i);
    snprintf(data, TU_DATA_SIZE, "{\"n\": %d, \"label\": \"%s %d\"%s%s}", i, f->label, i,
             f->more_fields ? ", " : "", more);
}

int tu_seed_numbered(const char *bucket, const char *collection, const char *id_format,
                     const char *label, const char *more_properties, const char *more_fields,
                     int count)
{
    char schema[1024];
    tu_seeded f = {id_format, label, more_fields};
    snprintf(schema, sizeof schema,
             "{\"type\": \"object\", \"properties\": {"
             "\"n\": {\"type\": \"integer\"}, \"label\": {\"type\": \"string\"}%s%s}}",
             more_properties ? ", " : "", more_properties ? more_properties : "");
    return tu_put_bucket(bucket) && tu_put_collection(bucket, collection, schema) &&
           tu_put_made(bucket, collection, count, tu_make_seeded, &f);
}

int tu_put_records(const char *bucket, const char *collection, const char *const *ids,
                   const char *const *datas, size_t count)
{
    size_t i = 0;
    while (i < count) {
        size_t end = i + 25 < count ? i + 25 : count, cap = 256, len, j;
        char *body;
        int ok;
        for (j = i; j < end; j++)
            cap += strlen(bucket) + strlen(collection) + strlen(ids[j]) + strlen(datas[j]) + 128;
        body = malloc(cap);
        len = (size_t)snprintf(body, cap, "{\"defaults\": {\"method\": \"PUT\"}, \"requests\": [");
        for (j = i; j < end; j++)
            len += (size_t)snprintf(body + len, cap - len,
                                    "%s{\"path\": \"/buckets/%s/collections/%s/records/%s\", "
                                    "\"body\": {\"data\": %s}}",
                                    j > i ? ", " : "", bucket, collection, ids[j], datas[j]);
        snprintf(body + len, cap - len, "]}");
        {
            char *resp = NULL;
            long code = tu_http("POST", "/batch", body, &resp);
            /* Every sub-response must be 2xx. */
            ok = code == 200 && resp && !strstr(resp, "\"status\": 4") && !strstr(resp, "\"status\":4") &&
                 !strstr(resp, "\"status\": 5") && !strstr(resp, "\"status\":5");
            if (!ok)
                fprintf(stderr, "%s: batch -> %ld %.400s\n", tu_program, code, resp ? resp : "");
            free(resp);
        }
        free(body);
        if (!ok)
            return 0;
        i = end;
    }
    return 1;
}

/* ------------------------------------------------------------ context */

tether_context *tu_open(const char *bucket, const char *store, tether_delivery delivery)
{
    return tu_open_url(tu_url(), bucket, store, delivery, 10000);
}

void tu_options(tether_context_options *o, tether_kinto_options *k, const char *url, const char *bucket,
                const char *store, tether_delivery delivery, int64_t timeout_ms)
{
    CHECK_OK(tether_context_options_init(o, TETHER_CONTEXT_OPTIONS_VERSION));
    CHECK_OK(tether_kinto_options_init(k, TETHER_KINTO_OPTIONS_VERSION));
    k->server_url = url;
    k->bucket = bucket;
    o->store_path = store;
    k->username = "test";
    k->password = "test";
    o->delivery = delivery;
    o->timeout_ms = timeout_ms;
}

tether_context *tu_open_url(const char *url, const char *bucket, const char *store,
                            tether_delivery delivery, int64_t timeout_ms)
{
    tether_context_options o;
    tether_kinto_options k;
    tether_context *ctx = NULL;
    tu_options(&o, &k, url, bucket, store, delivery, timeout_ms);
    if (CHECK_OK(tether_context_open_kinto(&o, &k, &ctx)) != TETHER_OK)
        return NULL;
    CHECK(ctx != NULL);
    return ctx;
}

int64_t tu_debug_count(tether_debug_counter what)
{
    int64_t n = -1;
    int s = tether_debug_count(what, &n);
    /* A failure counts; a success is not a check of its own (loops call this). */
    if (s != TETHER_OK) {
        tu_check(0, __FILE__, __LINE__, "tether_debug_count", tether_errstr(s));
        return -1;
    }
    return n;
}

int64_t tu_debug_count_settle(tether_debug_counter what, int64_t expected, int timeout_ms)
{
    int64_t end = tu_now_ms() + timeout_ms, n;
    while ((n = tu_debug_count(what)) != expected && n >= 0 && tu_now_ms() < end)
        tu_sleep_ms(10);
    return n;
}

int tu_peek_text(tether_object *obj, const char *key, char *buf, size_t size)
{
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    int s = tether_object_peek(obj, key, &v);
    buf[0] = '\0';
    if (s == TETHER_OK) {
        if (v.text)
            snprintf(buf, size, "%s", v.text);
        else if (v.type == TETHER_TYPE_INTEGER || v.type == TETHER_TYPE_BOOLEAN)
            snprintf(buf, size, "%lld", (long long)v.integer);
        else if (v.type == TETHER_TYPE_REAL)
            snprintf(buf, size, "%g", v.real);
    }
    tether_value_free(&v);
    return s;
}

int tu_peek_int(tether_object *obj, const char *key, int64_t *out)
{
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    int s = tether_object_peek(obj, key, &v);
    if (s == TETHER_OK) {
        if (v.type != TETHER_TYPE_INTEGER)
            s = TETHER_E_TYPE;
        else
            *out = v.integer;
    }
    tether_value_free(&v);
    return s;
}

const char *tu_id(tether_object *obj)
{
    const char *id = NULL;
    if (tether_object_id(obj, &id) != TETHER_OK || !id)
        return "(?)";
    return id;
}

/* ------------------------------------------------------------ fetch recorder */

void tu_fetch_init(tu_fetch *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->main_thread = pthread_self();
    f->final_status = 1; /* not a status: "no final yet" */
    f->cached_status = 1;
    f->close_in_cb_status = 1;
    f->poll_in_cb_status = 1;
    f->cancel_in_cb_status = 1;
}

int tu_fetch_free(tu_fetch *f)
{
    int s1 = TETHER_OK, s2 = TETHER_OK;
    pthread_mutex_lock(&f->mu);
    /* Skip NULLs: a successful call would clear the failure's message. */
    if (f->cached_results)
        s1 = tether_results_free(f->cached_results);
    if (f->final_results)
        s2 = tether_results_free(f->final_results);
    f->cached_results = f->final_results = NULL;
    pthread_mutex_unlock(&f->mu);
    return s1 != TETHER_OK ? s1 : s2;
}

void tu_fetch_destroy(tu_fetch *f)
{
    tu_fetch_free(f);
    free(f->cached_objs);
    free(f->final_objs);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

/* The objects of `results` in a new array (borrowed from it); *count gets
 * their number. Adds to *errors when the handle does not answer as the
 * header says: every index below the count gives an object, the count
 * itself gives TETHER_E_NOT_FOUND. */
static tether_object **tu_results_objs(tether_results *results, size_t *count, int *errors)
{
    tether_object **objs, *past = NULL;
    size_t i, n = 0;
    if (results == NULL || tether_results_count(results, &n) != TETHER_OK) {
        (*errors)++;
        n = 0;
    }
    objs = calloc(n ? n : 1, sizeof *objs);
    for (i = 0; i < n; i++)
        if (tether_results_object_at(results, i, &objs[i]) != TETHER_OK || objs[i] == NULL)
            (*errors)++;
    if (results && (tether_results_object_at(results, n, &past) != TETHER_E_NOT_FOUND || past != NULL))
        (*errors)++;
    *count = n;
    return objs;
}

void tu_fetch_cb(tether_task *task, tether_phase phase, int status, const char *message,
                 tether_results *results, void *userdata)
{
    tu_fetch *f = userdata;
    int do_actions, errors = 0;
    size_t count = 0;
    tether_object **objs;
    pthread_mutex_lock(&f->mu);
    do_actions = !f->actions_done;
    f->actions_done = 1;
    pthread_mutex_unlock(&f->mu);

    /* Actions that must fail from inside a callback (without the lock held). */
    if (do_actions && f->close_in_cb) {
        f->close_in_cb_status = tether_context_close(f->close_in_cb);
        snprintf(f->close_in_cb_errmsg, sizeof f->close_in_cb_errmsg, "%s", tether_errmsg());
    }
    if (do_actions && f->poll_in_cb) {
        f->poll_in_cb_status = tether_context_poll(f->poll_in_cb, 0, NULL);
        snprintf(f->poll_in_cb_errmsg, sizeof f->poll_in_cb_errmsg, "%s", tether_errmsg());
    }

    if (f->cancel_in_cb && phase == TETHER_PHASE_CACHED) {
        f->cancel_in_cb = 0;
        f->cancel_in_cb_status = tether_task_cancel(task);
    }

    objs = tu_results_objs(results, &count, &errors);

    pthread_mutex_lock(&f->mu);
    f->calls++;
    f->results_errors += errors;
    if (!pthread_equal(pthread_self(), f->main_thread))
        f->off_main++;
    if (!f->task)
        f->task = task;
    else if (f->task != task)
        f->task_changed++;
    if (f->finals > 0)
        f->order_errors++;
    if (f->cancel_returned && !(phase == TETHER_PHASE_FINAL && status == TETHER_E_CANCELLED))
        f->after_cancel_bad++;
    if (message == NULL)
        f->order_errors++;
    if (phase == TETHER_PHASE_CACHED) {
        f->cached++;
        f->cached_status = status;
        if (status != TETHER_OK)
            f->order_errors++;
        /* Keep the last one (only one may come). */
        tether_results_free(f->cached_results);
        f->cached_results = results;
        free(f->cached_objs);
        f->cached_count = count;
        f->cached_objs = objs;
    } else if (phase == TETHER_PHASE_FINAL) {
        f->finals++;
        f->final_status = status;
        snprintf(f->final_message, sizeof f->final_message, "%s", message ? message : "(NULL)");
        tether_results_free(f->final_results);
        f->final_results = results;
        free(f->final_objs);
        f->final_count = count;
        f->final_objs = objs;
    } else {
        f->order_errors++;
        tether_results_free(results);
        free(objs);
    }
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

int tu_fetch_start(tether_context *ctx, tu_fetch *f, const char *entity, const char *sort,
                   int64_t limit, tether_cache_policy policy, tether_task **out)
{
    tether_fetch_options o;
    int s = tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
    if (s != TETHER_OK)
        return s;
    o.entity = entity;
    o.sort = sort;
    o.limit = limit;
    o.policy = policy;
    return tether_fetch_start(ctx, &o, tu_fetch_cb, f, out);
}

int tu_fetch_cancel(tu_fetch *f, tether_task *task)
{
    int s = tether_task_cancel(task);
    pthread_mutex_lock(&f->mu);
    if (s == TETHER_OK)
        f->cancel_returned = 1;
    pthread_mutex_unlock(&f->mu);
    return s;
}

int tu_fetch_wait(tu_fetch *f, int timeout_ms)
{
    struct timespec dl = tu_deadline(timeout_ms);
    int got;
    pthread_mutex_lock(&f->mu);
    while (f->finals == 0) {
        if (pthread_cond_timedwait(&f->cv, &f->mu, &dl) == ETIMEDOUT)
            break;
    }
    got = f->finals > 0;
    pthread_mutex_unlock(&f->mu);
    return got;
}

int tu_fetch_wait_poll(tu_fetch *f, tether_context *ctx, int timeout_ms)
{
    int64_t end = tu_now_ms() + timeout_ms;
    while (tu_fetch_finals(f) == 0) {
        int64_t left = end - tu_now_ms();
        if (left <= 0)
            break;
        if (tether_context_poll(ctx, left < 100 ? (int)left : 100, NULL) != TETHER_OK)
            break;
    }
    return tu_fetch_finals(f) > 0;
}

int tu_fetch_finals(tu_fetch *f)
{
    int n;
    pthread_mutex_lock(&f->mu);
    n = f->finals;
    pthread_mutex_unlock(&f->mu);
    return n;
}

int tu_fetch_calls(tu_fetch *f)
{
    int n;
    pthread_mutex_lock(&f->mu);
    n = f->calls;
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* ------------------------------------------------------------ observer recorder */

void tu_obs_init(tu_obs *o, tether_object *obj, const char *key, const char *peek_key)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->main_thread = pthread_self();
    o->obj = obj;
    snprintf(o->key, sizeof o->key, "%s", key);
    snprintf(o->peek_key, sizeof o->peek_key, "%s", peek_key ? peek_key : "");
    o->peek_status = 1;
    o->remove_in_cb_status = 1;
}

void tu_obs_destroy(tu_obs *o)
{
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
}

void tu_obs_cb(tether_object *obj, const char *key, int status, void *userdata)
{
    tu_obs *o = userdata;
    char peeked[512] = "";
    int ps = 1;
    if (status == TETHER_OK && o->peek_key[0])
        ps = tu_peek_text(obj, o->peek_key, peeked, sizeof peeked);
    if (status == TETHER_OK && o->remove_in_cb) {
        tether_observer *self = o->remove_in_cb;
        o->remove_in_cb = NULL;
        o->remove_in_cb_status = tether_observer_cancel(self);
    }
    pthread_mutex_lock(&o->mu);
    if (o->cancels > 0)
        o->after_cancel++;
    if (!pthread_equal(pthread_self(), o->main_thread))
        o->off_main++;
    if (obj != o->obj)
        o->wrong_obj++;
    if (!key || strcmp(key, o->key) != 0)
        o->wrong_key++;
    if (status == TETHER_OK) {
        o->changes++;
        o->peek_status = ps;
        snprintf(o->peeked, sizeof o->peeked, "%s", peeked);
    } else if (status == TETHER_E_CANCELLED) {
        o->cancels++;
    } else {
        o->others++;
    }
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

int tu_observe(tu_obs *o, tether_observer **out)
{
    return tether_object_observe(o->obj, o->key, tu_obs_cb, o, out);
}

int tu_obs_wait_changes(tu_obs *o, int n, int timeout_ms)
{
    struct timespec dl = tu_deadline(timeout_ms);
    int got;
    pthread_mutex_lock(&o->mu);
    while (o->changes < n) {
        if (pthread_cond_timedwait(&o->cv, &o->mu, &dl) == ETIMEDOUT)
            break;
    }
    got = o->changes >= n;
    pthread_mutex_unlock(&o->mu);
    return got;
}

int tu_obs_wait_cancel(tu_obs *o, int timeout_ms)
{
    struct timespec dl = tu_deadline(timeout_ms);
    int got;
    pthread_mutex_lock(&o->mu);
    while (o->cancels < 1) {
        if (pthread_cond_timedwait(&o->cv, &o->mu, &dl) == ETIMEDOUT)
            break;
    }
    got = o->cancels >= 1;
    pthread_mutex_unlock(&o->mu);
    return got;
}

int tu_obs_changes(tu_obs *o)
{
    int n;
    pthread_mutex_lock(&o->mu);
    n = o->changes;
    pthread_mutex_unlock(&o->mu);
    return n;
}

int tu_obs_cancels(tu_obs *o)
{
    int n;
    pthread_mutex_lock(&o->mu);
    n = o->cancels;
    pthread_mutex_unlock(&o->mu);
    return n;
}

/* ------------------------------------------------------------ proxy */

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#define TU_PROXY_MAX 128

struct tu_proxy {
    int listen_fd;
    char url[256];
    char host[128];
    char port[16];
    int stop;  /* both read and written with __atomic builtins: threads share them */
    int stall;
    int down;
    pthread_t acceptor;
    pthread_mutex_t mu;
    pthread_t threads[TU_PROXY_MAX];
    int nthreads;
    int requests;
};

typedef struct tu_conn {
    tu_proxy *p;
    int client;
} tu_conn;

static int tu_connect(const char *host, const char *port)
{
    struct addrinfo hints, *res = NULL, *ai;
    int fd = -1;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0)
        return -1;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static void *tu_proxy_conn(void *arg)
{
    tu_conn *c = arg;
    tu_proxy *p = c->p;
    int client = c->client, server;
    char buf[16384];
    free(c);
    server = tu_connect(p->host, p->port);
    if (server < 0) {
        close(client);
        return NULL;
    }
    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE) && !__atomic_load_n(&p->down, __ATOMIC_ACQUIRE)) {
        struct pollfd fds[2];
        int nf = 1, i;
        fds[0].fd = client;
        fds[0].events = POLLIN;
        fds[0].revents = 0;
        if (!__atomic_load_n(&p->stall, __ATOMIC_ACQUIRE)) {
            fds[1].fd = server;
            fds[1].events = POLLIN;
            fds[1].revents = 0;
            nf = 2;
        }
        if (poll(fds, (nfds_t)nf, 50) < 0 && errno != EINTR)
            break;
        for (i = 0; i < nf; i++) {
            if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                int from = fds[i].fd, to = from == client ? server : client;
                ssize_t n = read(from, buf, sizeof buf - 1), off = 0;
                if (n <= 0)
                    goto done;
                if (from == client) {
                    /* count request lines (a request is small: one read) */
                    const char *q = buf;
                    int count = 0;
                    buf[n] = '\0';
                    while ((q = strstr(q, " HTTP/1.1\r\n")) != NULL) {
                        count++;
                        q++;
                    }
                    pthread_mutex_lock(&p->mu);
                    p->requests += count;
                    pthread_mutex_unlock(&p->mu);
                }
                while (off < n) {
                    ssize_t w = write(to, buf + off, (size_t)(n - off));
                    if (w <= 0)
                        goto done;
                    off += w;
                }
            }
        }
    }
done:
    close(client);
    close(server);
    return NULL;
}

static void *tu_proxy_accept(void *arg)
{
    tu_proxy *p = arg;
    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
        struct pollfd pf;
        pf.fd = p->listen_fd;
        pf.events = POLLIN;
        pf.revents = 0;
        if (poll(&pf, 1, 50) <= 0)
            continue;
        {
            int fd = accept(p->listen_fd, NULL, NULL);
            tu_conn *c;
            if (fd < 0)
                continue;
            if (__atomic_load_n(&p->down, __ATOMIC_ACQUIRE)) {
                close(fd); /* not a byte of answer */
                continue;
            }
            c = malloc(sizeof *c);
            c->p = p;
            c->client = fd;
            pthread_mutex_lock(&p->mu);
            if (p->nthreads < TU_PROXY_MAX &&
                pthread_create(&p->threads[p->nthreads], NULL, tu_proxy_conn, c) == 0) {
                p->nthreads++;
            } else {
                close(fd);
                free(c);
            }
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

tu_proxy *tu_proxy_start(void)
{
    const char *url = tu_url(), *hp, *path;
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    tu_proxy *p = calloc(1, sizeof *p);
    const char *colon;
    int one = 1;
    if (!p)
        return NULL;
    /* http://HOST:PORT/path */
    hp = strstr(url, "://");
    hp = hp ? hp + 3 : url;
    path = strchr(hp, '/');
    if (!path)
        path = hp + strlen(hp);
    colon = memchr(hp, ':', (size_t)(path - hp));
    if (colon) {
        snprintf(p->host, sizeof p->host, "%.*s", (int)(colon - hp), hp);
        snprintf(p->port, sizeof p->port, "%.*s", (int)(path - colon - 1), colon + 1);
    } else {
        snprintf(p->host, sizeof p->host, "%.*s", (int)(path - hp), hp);
        snprintf(p->port, sizeof p->port, "80");
    }
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(p->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    if (bind(p->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(p->listen_fd, 64) != 0 ||
        getsockname(p->listen_fd, (struct sockaddr *)&sa, &len) != 0) {
        close(p->listen_fd);
        free(p);
        return NULL;
    }
    snprintf(p->url, sizeof p->url, "http://127.0.0.1:%d%s", ntohs(sa.sin_port), path);
    pthread_mutex_init(&p->mu, NULL);
    if (pthread_create(&p->acceptor, NULL, tu_proxy_accept, p) != 0) {
        close(p->listen_fd);
        free(p);
        return NULL;
    }
    return p;
}

const char *tu_proxy_url(tu_proxy *p)
{
    return p->url;
}

int tu_proxy_requests(tu_proxy *p)
{
    int n;
    pthread_mutex_lock(&p->mu);
    n = p->requests;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void tu_proxy_stall(tu_proxy *p, int on)
{
    __atomic_store_n(&p->stall, on, __ATOMIC_RELEASE);
}

void tu_proxy_down(tu_proxy *p, int on)
{
    __atomic_store_n(&p->down, on, __ATOMIC_RELEASE);
}

void tu_proxy_stop(tu_proxy *p)
{
    int i;
    if (!p)
        return;
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    pthread_join(p->acceptor, NULL);
    close(p->listen_fd);
    pthread_mutex_lock(&p->mu);
    for (i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void tu_warm_up(const char *bucket, const char *store, const char *collection, int count)
{
    tu_fetch f;
    tether_context *ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    tu_section("warm-up: fetch the collection into the store");
    if (!ctx)
        return;
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, collection, NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, count);
    CHECK_OK(tu_fetch_free(&f));
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    tu_fetch_destroy(&f);
}

const char *const tu_debug_counter_names[TU_NDEBUG_COUNTERS] = {"", "contexts", "objects", "object handles", "results",
                                             "tasks", "observers", "library threads"};

int tu_count_entries(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int n = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

void tu_snapshot(tu_counts *c)
{
    int i;
    for (i = 1; i < TU_NDEBUG_COUNTERS; i++)
        c->counters[i] = tu_debug_count((tether_debug_counter)i);
    /* The directory stream's own descriptor is counted every time alike. */
    c->fds = tu_count_entries("/proc/self/fd");
    c->threads = tu_count_entries("/proc/self/task");
}

int tu_same_counts(const tu_counts *a, const tu_counts *b)
{
    int i;
    for (i = 1; i < TU_NDEBUG_COUNTERS; i++)
        if (a->counters[i] != b->counters[i])
            return 0;
    return a->fds == b->fds && a->threads == b->threads;
}

long tu_resident_bytes(void)
{
    FILE *fp = fopen("/proc/self/statm", "r");
    long size = 0, resident = -1;
    if (!fp)
        return -1;
    if (fscanf(fp, "%ld %ld", &size, &resident) != 2)
        resident = -1;
    fclose(fp);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

const char *tu_ns(tether_object **objs, size_t count, char *buf, size_t size)
{
    size_t i, len = 0;
    buf[0] = '\0';
    for (i = 0; i < count && len + 24 < size; i++) {
        int64_t n = 0;
        if (tu_peek_int(objs[i], "n", &n) == TETHER_OK)
            len += (size_t)snprintf(buf + len, size - len, "%s%lld", i ? "," : "", (long long)n);
        else
            len += (size_t)snprintf(buf + len, size - len, "%s?", i ? "," : "");
    }
    return buf;
}

/* ------------------------------------------------------------ save */

typedef struct tu_saved {
    pthread_mutex_t mu;
    int finals, status;
    size_t saved;
} tu_saved;

static void tu_on_save(tether_task *task, int status, const char *message, tether_save_report *report, void *userdata)
{
    tu_saved *s = userdata;
    size_t count = 0;
    (void)task;
    if (status != TETHER_OK)
        fprintf(stderr, "save: %s\n", message);
    tether_save_report_counts(report, &count, NULL);
    pthread_mutex_lock(&s->mu);
    s->finals++;
    s->status = status;
    s->saved = count;
    pthread_mutex_unlock(&s->mu);
}

int tu_save(tether_context *ctx, size_t *out_saved)
{
    tu_saved s = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
    int64_t deadline = tu_now_ms() + TU_WAIT_MS;
    int finals = 0;
    if (CHECK_OK(tether_save_start(ctx, NULL, tu_on_save, &s, NULL)) != TETHER_OK)
        return TETHER_E_ERROR;
    while (tu_now_ms() < deadline) {
        pthread_mutex_lock(&s.mu);
        finals = s.finals;
        pthread_mutex_unlock(&s.mu);
        if (finals)
            break;
        tu_sleep_ms(5);
    }
    tu_sleep_ms(50);
    CHECK_INT(s.finals, 1);
    if (out_saved)
        *out_saved = s.saved;
    return finals ? s.status : TETHER_E_ERROR;
}

void tu_fetch_all(tether_context *ctx, const char *entity)
{
    tu_fetch f;
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, entity, NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    tu_fetch_destroy(&f);
}

/* ------------------------------------------------------------ psql */

int tu_psql(const char *conninfo, const char *sql, char **out)
{
    char command[1024], *text = NULL;
    size_t length = 0, cap = 0, n;
    char chunk[4096];
    FILE *pipe;
    int ok;
    /* The SQL goes as a file, not a command line: it holds quotes of its own. */
    char path[512];
    FILE *file;
    tu_store_path(path, sizeof path, "psql-sql");
    file = fopen(path, "w");
    if (!file)
        return 0;
    fprintf(file, "SET client_min_messages = warning;\n%s\n", sql);
    fclose(file);
    snprintf(command, sizeof command, "psql -X -q -A -t -v ON_ERROR_STOP=1 -d '%s' -f '%s'", conninfo, path);
    pipe = popen(command, "r");
    if (!pipe)
        return 0;
    while ((n = fread(chunk, 1, sizeof chunk, pipe)) > 0) {
        if (length + n + 1 > cap) {
            cap = (length + n + 1) * 2;
            text = realloc(text, cap);
            if (!text)
                abort();
        }
        memcpy(text + length, chunk, n);
        length += n;
    }
    ok = pclose(pipe) == 0;
    remove(path);
    if (text)
        text[length] = '\0';
    if (out && ok) {
        *out = text ? text : strdup("");
        return 1;
    }
    free(text);
    return ok;
}
