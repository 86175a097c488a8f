/*
 * demo.c — a tour of Tether from C, on the Perforce-like demo bucket that
 * scripts/seed-demo writes (collections users, clients, changes, jobs).
 *
 *   demo URL BUCKET STORE             server running: sections 1-5
 *   demo URL BUCKET STORE --offline   server stopped: sections 1 and 6
 *
 * 1. connect and print the model built from the collections' schemas
 * 2. an asynchronous fetch answering twice (cache, then server), delivered on
 *    this thread through tether_context_poll (POLL mode, a poll() loop); each
 *    callback owns a results handle and releases it
 * 3. peek vs get: the record is changed on the server behind Tether's back
 *    (libcurl PATCH); peek keeps the cached value, get returns it at once and
 *    refreshes, observers of "Description" and "DescriptionPeek" are told
 *    (THREAD mode: callbacks on the library's thread, a condvar to wait)
 * 4. a fetch with a predicate, its values bound as $1, $2 (nothing to quote)
 * 5. a fetch cancelled in flight: exactly one callback, FINAL, cancelled
 * 6. offline: the context opens from its store; peek and a cache-only fetch
 *    work, a cache-then-server fetch ends in a network error
 *
 * Build with `make` in bindings/c; `make run-demo` runs it all on a
 * throw-away server.
 */
#define _POSIX_C_SOURCE 200809L

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tether.h"

#define WAIT_MS 10000

static const char *g_url, *g_bucket, *g_store;
static int g_failures;

/* ------------------------------------------------------------ helpers */

/* Prints a failed call (status name and message); returns 1 if it failed. */
static int failed(int status, const char *what)
{
    if (status == TETHER_OK)
        return 0;
    fprintf(stderr, "  ! %s: %s: %s\n", what, tether_errstr(status), tether_errmsg());
    g_failures++;
    return 1;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static struct timespec deadline(int ms)
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

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Formats a value for printing (text shortened to one line). */
static const char *show(const tether_value *v, char *buf, size_t size)
{
    switch (v->type) {
    case TETHER_TYPE_NULL:
        snprintf(buf, size, "null");
        break;
    case TETHER_TYPE_INTEGER:
        snprintf(buf, size, "%" PRId64, v->integer);
        break;
    case TETHER_TYPE_BOOLEAN:
        snprintf(buf, size, "%s", v->integer ? "true" : "false");
        break;
    case TETHER_TYPE_REAL:
        snprintf(buf, size, "%g", v->real);
        break;
    case TETHER_TYPE_TEXT:
    case TETHER_TYPE_JSON: {
        /* one line, shortened to fit */
        size_t i, n = 0;
        for (i = 0; v->text && v->text[i] && n + 5 < size; i++) {
            if (v->text[i] == '\n') {
                buf[n++] = '\\';
                buf[n++] = 'n';
            } else {
                buf[n++] = v->text[i];
            }
        }
        if (v->text && v->text[i]) {
            buf[n++] = '.';
            buf[n++] = '.';
            buf[n++] = '.';
        }
        buf[n] = '\0';
        break;
    }
    default:
        snprintf(buf, size, "?");
    }
    return buf;
}

/* peek(key) as text, for printing; "<status>" on failure. */
static const char *peek_str(tether_object *obj, const char *key, char *buf, size_t size)
{
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    int s = tether_object_peek(obj, key, &v);
    if (s != TETHER_OK)
        snprintf(buf, size, "<%s>", tether_errstr(s));
    else
        show(&v, buf, size);
    tether_value_free(&v);
    return buf;
}

static const char *type_name(tether_type t)
{
    switch (t) {
    case TETHER_TYPE_NULL: return "null";
    case TETHER_TYPE_TEXT: return "text";
    case TETHER_TYPE_INTEGER: return "integer";
    case TETHER_TYPE_REAL: return "real";
    case TETHER_TYPE_BOOLEAN: return "boolean";
    case TETHER_TYPE_JSON: return "json";
    }
    return "?";
}

static void print_change_row(tether_object *obj)
{
    char change[32], user[64], status[32], desc[64];
    printf("      %-6s %-9s %-10s %s\n", peek_str(obj, "Change", change, sizeof change),
           peek_str(obj, "User", user, sizeof user), peek_str(obj, "Status", status, sizeof status),
           peek_str(obj, "Description", desc, sizeof desc));
}

static tether_context *open_context(tether_delivery delivery)
{
    tether_context_options o;
    tether_kinto_options k;
    tether_context *ctx = NULL;
    if (failed(tether_context_options_init(&o, TETHER_CONTEXT_OPTIONS_VERSION), "options_init") ||
        failed(tether_kinto_options_init(&k, TETHER_KINTO_OPTIONS_VERSION), "kinto_options_init"))
        return NULL;
    k.server_url = g_url;
    k.bucket = g_bucket;
    o.store_path = g_store;
    k.username = "demo";
    k.password = "demo";
    o.delivery = delivery;
    o.timeout_ms = 5000;
    if (failed(tether_context_open_kinto(&o, &k, &ctx), "tether_context_open_kinto"))
        return NULL;
    return ctx;
}

/* ------------------------------------------------------------ 1. the model */

static void section_model(tether_context *ctx)
{
    size_t n = 0, i, j;
    int online = -1;

    printf("\n== 1. Connected: the model\n");
    if (!failed(tether_context_is_online(ctx, &online), "is_online"))
        printf("  %s %s, bucket \"%s\", store %s\n", online ? "online at" : "OFFLINE (from the store) for",
               g_url, g_bucket, g_store);
    if (failed(tether_context_entity_count(ctx, &n), "entity_count"))
        return;
    printf("  %zu entities\n", n);
    for (i = 0; i < n; i++) {
        tether_entity *e = NULL;
        const char *name = NULL, *route = NULL;
        unsigned int ops = 0;
        size_t na = 0;
        if (failed(tether_context_entity_at(ctx, i, &e), "entity_at") ||
            failed(tether_entity_name(e, &name), "entity_name") ||
            failed(tether_entity_route(e, &route), "entity_route") ||
            failed(tether_entity_operations(e, &ops), "entity_operations") ||
            failed(tether_entity_attribute_count(e, &na), "attribute_count"))
            continue;
        printf("\n  %s  (%s)\n    operations:%s%s%s%s\n", name, route, ops & TETHER_OP_FETCH ? " fetch" : "",
               ops & TETHER_OP_INSERT ? " insert" : "", ops & TETHER_OP_UPDATE ? " update" : "",
               ops & TETHER_OP_DELETE ? " delete" : "");
        for (j = 0; j < na; j++) {
            const char *an = NULL;
            int code = 0;
            tether_type type = TETHER_TYPE_NULL;
            unsigned int flags = 0;
            if (failed(tether_entity_attribute_at(e, j, &an, &code, &type, &flags), "attribute_at"))
                continue;
            printf("    %-14s %-8s code %-5d%s%s%s\n", an, type_name(type), code,
                   flags & TETHER_ATTR_ID ? " [id]" : "", flags & TETHER_ATTR_VERSION ? " [version]" : "",
                   flags & TETHER_ATTR_REQUIRED ? " [required]" : "");
        }
    }
}

/* ------------------------------------------------------------ fetch state */

typedef struct fetch_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls, finals, final_status;
    size_t cached_count, final_count;
    char first_id[64];
    int64_t t0;
} fetch_state;

static void fetch_state_init(fetch_state *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->t0 = now_ms();
}

static void fetch_state_destroy(fetch_state *f)
{
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

/* The results handle is ours: read what we need, then release it (here,
 * inside the callback; it could also be kept and released later). */
static void on_fetch(tether_task *task, tether_phase phase, int status, const char *message,
                     tether_results *results, void *userdata)
{
    fetch_state *f = userdata;
    tether_object *obj = NULL;
    size_t i, count = 0;
    (void)task;
    failed(tether_results_count(results, &count), "tether_results_count");
    pthread_mutex_lock(&f->mu);
    f->calls++;
    {
        printf("    [%s after %" PRId64 " ms] %s, %zu objects%s%s\n",
               phase == TETHER_PHASE_CACHED ? "CACHED" : "FINAL ", now_ms() - f->t0,
               tether_errstr(status), count, message && *message ? ": " : "", message ? message : "");
        for (i = 0; i < count && i < 4; i++)
            if (!failed(tether_results_object_at(results, i, &obj), "tether_results_object_at"))
                print_change_row(obj);
        if (count > 4)
            printf("      ... %zu more\n", count - 4);
    }
    if (phase == TETHER_PHASE_CACHED) {
        f->cached_count = count;
    } else {
        const char *id = NULL;
        f->finals++;
        f->final_status = status;
        f->final_count = count;
        /* The id is borrowed from the object, which dies with the results:
         * copy it. */
        if (count > 0 && tether_results_object_at(results, 0, &obj) == TETHER_OK &&
            tether_object_id(obj, &id) == TETHER_OK)
            snprintf(f->first_id, sizeof f->first_id, "%s", id);
    }
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    failed(tether_results_free(results), "tether_results_free");
}

/* A fetch of the records matching `predicate` (NULL: all), with `count`
 * values for $1, $2... */
static int start_fetch_where(tether_context *ctx, fetch_state *f, const char *entity, const char *sort,
                             int64_t limit, tether_cache_policy policy, const char *predicate,
                             const tether_value *args, size_t count, tether_task **task)
{
    tether_fetch_options o;
    int s = tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
    if (failed(s, "fetch_options_init"))
        return s;
    o.entity = entity;
    o.sort = sort;
    o.limit = limit;
    o.policy = policy;
    o.predicate = predicate;
    o.arguments = args;      /* borrowed for the call only */
    o.argument_count = count;
    s = tether_fetch_start(ctx, &o, on_fetch, f, task);
    failed(s, "tether_fetch_start");
    return s;
}

static int start_fetch(tether_context *ctx, fetch_state *f, const char *entity, const char *sort,
                       int64_t limit, tether_cache_policy policy, tether_task **task)
{
    return start_fetch_where(ctx, f, entity, sort, limit, policy, NULL, NULL, 0, task);
}

/* THREAD mode: waits (at most WAIT_MS) for the FINAL callback. */
static int wait_final(fetch_state *f)
{
    struct timespec dl = deadline(WAIT_MS);
    int ok;
    pthread_mutex_lock(&f->mu);
    while (f->finals == 0 && pthread_cond_timedwait(&f->cv, &f->mu, &dl) != ETIMEDOUT) {
    }
    ok = f->finals > 0;
    pthread_mutex_unlock(&f->mu);
    if (!ok) {
        fprintf(stderr, "  ! no FINAL callback within %d ms\n", WAIT_MS);
        g_failures++;
    }
    return ok;
}

/* ------------------------------------------------------------ 2. fetch (POLL) */

static void section_fetch_poll(tether_context *ctx, char *first_id, size_t size)
{
    fetch_state f;
    int fd = -1;
    size_t total = 0;
    int64_t end;

    printf("\n== 2. Asynchronous fetch: changes sorted by -Change, limit 20 (POLL delivery)\n");
    if (failed(tether_context_fd(ctx, &fd), "tether_context_fd"))
        return;
    fetch_state_init(&f);
    if (start_fetch(ctx, &f, "changes", "-Change", 20, TETHER_POLICY_CACHE_THEN_SERVER, NULL) != TETHER_OK)
        return;
    printf("  started; waiting in poll() on descriptor %d, callbacks run on this thread:\n", fd);
    end = now_ms() + WAIT_MS;
    while (f.finals == 0 && now_ms() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        size_t n = 0;
        if (poll(&p, 1, 1000) <= 0)
            continue;
        if (failed(tether_context_poll(ctx, 0, &n), "tether_context_poll"))
            break;
        total += n;
    }
    if (f.finals == 0) {
        fprintf(stderr, "  ! no FINAL callback within %d ms\n", WAIT_MS);
        g_failures++;
    } else {
        printf("  answered twice: %zu from the cache, then %zu from the server (%zu callbacks)\n",
               f.cached_count, f.final_count, total);
        failed(f.final_status, "fetch FINAL");
        snprintf(first_id, size, "%s", f.first_id);
    }
    fetch_state_destroy(&f);
}

/* ------------------------------------------------------------ 3. peek vs get */

typedef struct obs_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int changes, cancels;
} obs_state;

static void on_change(tether_object *obj, const char *key, int status, void *userdata)
{
    obs_state *o = userdata;
    char buf[160];
    if (status == TETHER_OK)
        printf("    observer \"%s\": changed; peek now gives \"%s\"\n", key,
               peek_str(obj, "Description", buf, sizeof buf));
    else
        printf("    observer \"%s\": final callback, %s\n", key, tether_errstr(status));
    pthread_mutex_lock(&o->mu);
    if (status == TETHER_OK)
        o->changes++;
    else
        o->cancels++;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

/* Changes a change's Description on the server directly, as demo:demo. */
static int patch_description(const char *id, const char *text)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hdr = NULL;
    char url[1024], body[512];
    long code = 0;
    CURLcode rc;
    if (!h)
        return 0;
    snprintf(url, sizeof url, "%s/buckets/%s/collections/changes/records/%s", g_url, g_bucket, id);
    snprintf(body, sizeof body, "{\"data\": {\"Description\": \"%s\"}}", text);
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PATCH");
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    curl_easy_setopt(h, CURLOPT_USERPWD, "demo:demo");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    rc = curl_easy_perform(h);
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    printf("  PATCH %s -> %s %ld\n", url, rc == CURLE_OK ? "HTTP" : curl_easy_strerror(rc), code);
    return rc == CURLE_OK && code >= 200 && code < 300;
}

static void section_peek_get(tether_context *ctx, const char *id)
{
    tether_object *obj = NULL;
    tether_observer *o1 = NULL, *o2 = NULL;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    obs_state os;
    char buf[160], text[128];
    int64_t t0;
    struct timespec dl;

    printf("\n== 3. peek vs get on changes/%s (THREAD delivery)\n", id);
    /* A reference of our own: released at the end. */
    if (failed(tether_context_object(ctx, "changes", id, &obj), "tether_context_object"))
        return;
    t0 = now_us();
    if (failed(tether_object_peek(obj, "Description", &v), "peek Description")) {
        tether_object_free(obj);
        return;
    }
    printf("  peek(Description) = \"%s\"  (cache, no network, %" PRId64 " us)\n", show(&v, buf, sizeof buf),
           now_us() - t0);
    tether_value_free(&v);

    snprintf(text, sizeof text, "Edited on the server by the C demo at %ld", (long)time(NULL));
    if (!patch_description(id, text)) {
        fprintf(stderr, "  ! could not change the record on the server\n");
        g_failures++;
        tether_object_free(obj);
        return;
    }
    printf("  peek(Description) = \"%s\"  (still the cached value)\n",
           peek_str(obj, "Description", buf, sizeof buf));

    memset(&os, 0, sizeof os);
    pthread_mutex_init(&os.mu, NULL);
    pthread_cond_init(&os.cv, NULL);
    if (failed(tether_object_observe(obj, "Description", on_change, &os, &o1), "observe Description") ||
        failed(tether_object_observe(obj, "DescriptionPeek", on_change, &os, &o2), "observe DescriptionPeek"))
        goto out;
    printf("  observing \"Description\" and \"DescriptionPeek\"\n");

    t0 = now_us();
    if (!failed(tether_object_get(obj, "Description", &v), "get Description"))
        printf("  get(Description)  = \"%s\"  (at once, %" PRId64 " us; a refresh started)\n",
               show(&v, buf, sizeof buf), now_us() - t0);
    tether_value_free(&v);

    dl = deadline(WAIT_MS);
    pthread_mutex_lock(&os.mu);
    while (os.changes < 2 && pthread_cond_timedwait(&os.cv, &os.mu, &dl) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&os.mu);
    if (os.changes < 2) {
        fprintf(stderr, "  ! only %d of 2 observers told within %d ms\n", os.changes, WAIT_MS);
        g_failures++;
    }
    printf("  peek(Description) = \"%s\"\n", peek_str(obj, "Description", buf, sizeof buf));
    if (strcmp(buf, text) != 0) {
        fprintf(stderr, "  ! expected the new value \"%s\"\n", text);
        g_failures++;
    }

    /* Removing an observer delivers its final (cancelled) callback. */
    failed(tether_observer_cancel(o1), "observer_cancel");
    failed(tether_observer_cancel(o2), "observer_cancel");
    dl = deadline(WAIT_MS);
    pthread_mutex_lock(&os.mu);
    while (os.cancels < 2 && pthread_cond_timedwait(&os.cv, &os.mu, &dl) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&os.mu);
    o1 = o2 = NULL;
out:
    failed(tether_object_free(obj), "tether_object_free");
    pthread_cond_destroy(&os.cv);
    pthread_mutex_destroy(&os.mu);
}

/* ------------------------------------------------------------ 4. predicate */

static void section_predicate(tether_context *ctx)
{
    fetch_state f;
    const char *predicate = "Status == $1 AND User BEGINSWITH[c] $2";
    tether_value args[2] = {{TETHER_TYPE_TEXT, 0, 0.0, NULL, 0}, {TETHER_TYPE_TEXT, 0, 0.0, NULL, 0}};
    char status[] = "pending", prefix[] = "C";
    args[0].text = status;
    args[0].length = strlen(status);
    args[1].text = prefix;
    args[1].length = strlen(prefix);

    printf("\n== 4. A fetch with a predicate: %s\n", predicate);
    printf("  $1 = \"%s\", $2 = \"%s\", sorted by -Change (the cache answers from what it holds):\n",
           status, prefix);
    fetch_state_init(&f);
    if (start_fetch_where(ctx, &f, "changes", "-Change", 0, TETHER_POLICY_CACHE_THEN_SERVER, predicate, args, 2,
                          NULL) == TETHER_OK &&
        wait_final(&f))
        failed(f.final_status, "fetch FINAL");
    {
        /* A bad predicate is refused at once (no callback); the message
         * says what and the column. */
        tether_fetch_options o;
        int s;
        tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
        o.entity = "changes";
        o.predicate = "Change == 'x'";
        s = tether_fetch_start(ctx, &o, on_fetch, &f, NULL);
        printf("  a bad one, %s: %s: %s\n", o.predicate, tether_errstr(s), tether_errmsg());
    }
    fetch_state_destroy(&f);
}

/* ------------------------------------------------------------ 5. cancel */

static void section_cancel(tether_context *ctx)
{
    fetch_state f;
    tether_task *task = NULL;
    const char *entity = "changes"; /* the biggest seeded collection: 200 records */

    printf("\n== 5. A fetch of %s (the biggest collection) cancelled in flight\n", entity);
    fetch_state_init(&f);
    if (start_fetch(ctx, &f, entity, NULL, 0, TETHER_POLICY_SERVER_ONLY, &task) != TETHER_OK)
        return;
    if (failed(tether_task_cancel(task), "tether_task_cancel"))
        return;
    printf("  started and cancelled at once\n");
    if (wait_final(&f)) {
        sleep_ms(300); /* nothing may follow */
        printf("  %d callback(s); the FINAL one says %s\n", f.calls, tether_errstr(f.final_status));
        if (f.calls != 1 || f.final_status != TETHER_E_CANCELLED) {
            fprintf(stderr, "  ! expected exactly one callback, FINAL with TETHER_E_CANCELLED\n");
            g_failures++;
        }
        printf("  cancel again: %s (the task ended with its FINAL callback)\n",
               tether_errstr(tether_task_cancel(task)));
    }
    fetch_state_destroy(&f);
}

/* ------------------------------------------------------------ 6. offline */

static void section_offline(tether_context *ctx)
{
    fetch_state f;
    int online = -1;
    char id[64] = "";

    printf("\n== 6. Offline: the server is stopped\n");
    if (!failed(tether_context_is_online(ctx, &online), "is_online"))
        printf("  is_online = %d\n", online);

    printf("  CACHE_ONLY fetch of changes sorted by -Change, limit 5:\n");
    fetch_state_init(&f);
    if (start_fetch(ctx, &f, "changes", "-Change", 5, TETHER_POLICY_CACHE_ONLY, NULL) == TETHER_OK &&
        wait_final(&f)) {
        failed(f.final_status, "CACHE_ONLY fetch");
        snprintf(id, sizeof id, "%s", f.first_id);
    }
    fetch_state_destroy(&f);

    if (id[0]) {
        tether_object *obj = NULL;
        char buf[160];
        if (!failed(tether_context_object(ctx, "changes", id, &obj), "tether_context_object")) {
            printf("  peek(changes/%s, Description) = \"%s\"\n", id,
                   peek_str(obj, "Description", buf, sizeof buf));
            failed(tether_object_free(obj), "tether_object_free");
        }
    }

    printf("  CACHE_THEN_SERVER fetch of changes sorted by -Change, limit 20:\n");
    fetch_state_init(&f);
    if (start_fetch(ctx, &f, "changes", "-Change", 20, TETHER_POLICY_CACHE_THEN_SERVER, NULL) == TETHER_OK &&
        wait_final(&f)) {
        if (f.final_status == TETHER_E_NETWORK)
            printf("  the FINAL callback reports the network error, as it should\n");
        else {
            fprintf(stderr, "  ! expected TETHER_E_NETWORK, got %s\n", tether_errstr(f.final_status));
            g_failures++;
        }
    }
    fetch_state_destroy(&f);
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    tether_context *ctx;
    int offline = 0;
    char first_id[64] = "";

    if (argc == 5 && strcmp(argv[4], "--offline") == 0)
        offline = 1;
    else if (argc != 4) {
        fprintf(stderr, "usage: %s URL BUCKET STORE [--offline]\n"
                        "  URL     Kinto root, e.g. http://127.0.0.1:8888/v1\n"
                        "  BUCKET  the bucket seeded by scripts/seed-demo (e.g. demo)\n"
                        "  STORE   SQLite file for the cache\n"
                        "  --offline  the server is stopped: open from the store\n",
                argv[0]);
        return 2;
    }
    g_url = argv[1];
    g_bucket = argv[2];
    g_store = argv[3];
    setvbuf(stdout, NULL, _IOLBF, 0);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    printf("Tether %s (header %s)\n", tether_version(), TETHER_VERSION);

    if (offline) {
        ctx = open_context(TETHER_DELIVER_THREAD);
        if (!ctx)
            return 1;
        section_model(ctx);
        section_offline(ctx);
        failed(tether_context_close(ctx), "tether_context_close");
    } else {
        /* Sections 1-2 in POLL mode: callbacks on this thread. */
        ctx = open_context(TETHER_DELIVER_POLL);
        if (!ctx)
            return 1;
        section_model(ctx);
        section_fetch_poll(ctx, first_id, sizeof first_id);
        failed(tether_context_close(ctx), "tether_context_close");

        /* Sections 3-5 in THREAD mode: callbacks on the library's thread. */
        ctx = open_context(TETHER_DELIVER_THREAD);
        if (!ctx)
            return 1;
        if (first_id[0])
            section_peek_get(ctx, first_id);
        section_predicate(ctx);
        section_cancel(ctx);
        failed(tether_context_close(ctx), "tether_context_close");
    }
    curl_global_cleanup();
    printf("\n%s\n", g_failures ? "demo: some steps FAILED" : "demo: done");
    return g_failures ? 1 : 0;
}
