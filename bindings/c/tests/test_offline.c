/* test_offline.c — through a proxy the test controls: requests counted
 * (gets on many objects are batched), held in flight (cancel, close,
 * timeout), and a server that went away (the context opens offline from its
 * store; peek, cache-only fetch, network errors), and is_online kept current
 * as the server goes away and comes back, with its observer and log lines. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>

static char bucket[128];

static int seed(void)
{
    if (!tu_put_bucket(bucket) ||
        !tu_put_collection(bucket, "tasks",
                           "{\"type\": \"object\", \"properties\": {"
                           "\"n\": {\"type\": \"integer\"}, \"title\": {\"type\": \"string\"}}}"))
        return 0;
    return tu_put_numbered(bucket, "tasks", "t%02d", "{\"n\": %d, \"title\": \"task %d\"}", 30);
}

static void test_batched_gets(tu_proxy *px, const char *store)
{
    tether_context *ctx;
    tu_fetch f;
    tether_object *objs[30];
    tu_obs obs[30];
    tether_observer *ob[30];
    int before, after, i, told = 0, last = -1;
    int64_t end;

    tu_section("get on 30 objects: a few batched requests, not one per object");
    ctx = tu_open_url(tu_proxy_url(px), bucket, store, TETHER_DELIVER_THREAD, 5000);
    if (!ctx)
        return;
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "tasks", "n", 0, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_INT(f.final_count, 30);
    if (f.final_count != 30) {
        tu_fetch_destroy(&f);
        tether_context_close(ctx);
        return;
    }
    /* The objects are borrowed from the recorder's results, held until
     * tu_fetch_destroy. */
    for (i = 0; i < 30; i++) {
        objs[i] = f.final_objs[i];
        tu_obs_init(&obs[i], objs[i], "title", "title");
        ob[i] = NULL;
        CHECK_OK(tu_observe(&obs[i], &ob[i]));
    }
    /* Change every title on the server, so each refresh is seen. */
    CHECK(tu_put_numbered(bucket, "tasks", "t%02d", "{\"n\": %d, \"title\": \"task %d, again\"}", 30));
    before = tu_proxy_requests(px);
    for (i = 0; i < 30; i++) {
        tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
        CHECK_OK(tether_object_get(objs[i], "title", &v));
        tether_value_free(&v);
    }
    end = tu_now_ms() + TU_WAIT_MS;
    while (tu_now_ms() < end) {
        told = 0;
        for (i = 0; i < 30; i++)
            told += tu_obs_changes(&obs[i]) > 0;
        if (told == 30)
            break;
        tu_sleep_ms(50);
    }
    CHECK_INT(told, 30);
    tu_sleep_ms(200);
    after = tu_proxy_requests(px);
    printf("   30 gets -> %d request(s) to the server\n", after - before);
    CHECK(after - before >= 1);
    CHECK(after - before <= 6);
    for (i = 0; i < 30; i++) {
        char buf[64], want[64];
        snprintf(want, sizeof want, "task %d, again", i);
        tu_peek_text(objs[i], "title", buf, sizeof buf);
        if (strcmp(buf, want) != 0)
            last = i;
    }
    CHECK_INT(last, -1);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    for (i = 0; i < 30; i++) {
        CHECK_INT(tu_obs_cancels(&obs[i]), 1);
        tu_obs_destroy(&obs[i]);
    }
    tu_fetch_destroy(&f);
    /* put the titles back for the tests that follow */
    CHECK(tu_put_numbered(bucket, "tasks", "t%02d", "{\"n\": %d, \"title\": \"task %d\"}", 30));
}

static void test_stalled(tu_proxy *px, const char *store)
{
    tether_context *ctx;
    tu_fetch f;
    tether_task *task = NULL;
    int64_t t0;

    ctx = tu_open_url(tu_proxy_url(px), bucket, store, TETHER_DELIVER_THREAD, 1500);
    if (!ctx)
        return;

    tu_section("a fetch held in flight, then cancelled: one FINAL, cancelled");
    tu_proxy_stall(px, 1);
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "tasks", NULL, 0, TETHER_POLICY_SERVER_ONLY, &task));
    tu_sleep_ms(300);
    CHECK_INT(tu_fetch_calls(&f), 0); /* still in flight */
    if (task)
        CHECK_OK(tu_fetch_cancel(&f, task));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    tu_sleep_ms(200);
    CHECK_INT(f.calls, 1);
    CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
    CHECK_INT(f.final_count, 0);
    CHECK_INT(f.after_cancel_bad, 0);
    CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);
    tu_fetch_destroy(&f);

    tu_section("a stalled request times out: FINAL with TETHER_E_NETWORK");
    tu_fetch_init(&f);
    t0 = tu_now_ms();
    CHECK_OK(tu_fetch_start(ctx, &f, "tasks", NULL, 0, TETHER_POLICY_CACHE_THEN_SERVER, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK(tu_now_ms() - t0 >= 1000);
    CHECK_INT(f.cached, 1);
    CHECK_INT(f.finals, 1);
    CHECK_CODE(f.final_status, TETHER_E_NETWORK);
    CHECK(f.final_message[0] != '\0');
    tu_fetch_destroy(&f);

    tu_section("close with a stalled fetch: its cancelled FINAL before close returns");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "tasks", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
    tu_sleep_ms(100);
    t0 = tu_now_ms();
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    CHECK(tu_now_ms() - t0 < 1000); /* close does not wait for the timeout */
    CHECK_INT(f.calls, 1);
    CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
    tu_fetch_destroy(&f);
    tu_proxy_stall(px, 0);
}

/* What an online observer was told: each call's `online`, in order. */
typedef struct {
    pthread_mutex_t mu;
    int told[16];
    int changes, finals, final_status, after_final;
} online_rec;

static void on_online(tether_context *ctx, int online, int status, void *userdata)
{
    online_rec *r = userdata;
    (void)ctx;
    pthread_mutex_lock(&r->mu);
    if (r->finals)
        r->after_final++;
    if (status == TETHER_E_CANCELLED) {
        r->finals++;
    } else {
        if (r->changes < 16)
            r->told[r->changes] = online;
        r->changes++;
    }
    pthread_mutex_unlock(&r->mu);
}

static int online_changes(online_rec *r)
{
    int n;
    pthread_mutex_lock(&r->mu);
    n = r->changes;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* WARNING lines of category "context" saying the server went or came back. */
static int offline_lines, online_lines;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_log(tether_log_level level, const char *category, const char *message, void *userdata)
{
    (void)userdata;
    if (level != TETHER_LOG_WARNING || strcmp(category, "context") != 0)
        return;
    pthread_mutex_lock(&log_mu);
    if (strstr(message, "cannot be reached: offline"))
        offline_lines++;
    else if (strstr(message, "answers again: online"))
        online_lines++;
    pthread_mutex_unlock(&log_mu);
}

static int fetch_status(tether_context *ctx, int policy)
{
    tu_fetch f;
    int status;
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "tasks", NULL, 0, policy, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    status = f.final_status;
    tu_fetch_destroy(&f);
    return status;
}

static int is_online(tether_context *ctx)
{
    int online = -1;
    CHECK_OK(tether_context_is_online(ctx, &online));
    return online;
}

static void wait_changes(online_rec *r, int n)
{
    int64_t end = tu_now_ms() + TU_WAIT_MS;
    while (online_changes(r) < n && tu_now_ms() < end)
        tu_sleep_ms(20);
    tu_sleep_ms(100); /* and no more */
}

static void test_online_changes(tu_proxy *px, const char *store)
{
    tether_context *ctx, *sib = NULL;
    tether_observer *ob = NULL, *ob2 = NULL;
    online_rec r, r2;
    int64_t contexts_before = tu_debug_count(TETHER_DEBUG_CONTEXTS), observers_before = tu_debug_count(TETHER_DEBUG_OBSERVERS);

    memset(&r, 0, sizeof r);
    memset(&r2, 0, sizeof r2);
    pthread_mutex_init(&r.mu, NULL);
    pthread_mutex_init(&r2.mu, NULL);
    tether_log_set(TETHER_LOG_WARNING, on_log, NULL);

    tu_section("is_online follows the server: false when it cannot be reached, true from its next answer");
    ctx = tu_open_url(tu_proxy_url(px), bucket, store, TETHER_DELIVER_THREAD, 3000);
    if (!ctx)
        return;
    CHECK_INT(is_online(ctx), 1);
    CHECK_STATUS(tether_context_observe_online(ctx, NULL, &r, &ob), TETHER_E_MISUSE);
    CHECK_STATUS(tether_context_observe_online(NULL, on_online, &r, &ob), TETHER_E_HANDLE);
    CHECK_OK(tether_context_observe_online(ctx, on_online, &r, &ob));
    CHECK(ob != NULL);
    CHECK_OK(fetch_status(ctx, TETHER_POLICY_SERVER_ONLY));
    CHECK_OK(tether_context_open_sibling(ctx, "sibling", TETHER_DELIVER_THREAD, &sib));
    if (sib)
        CHECK_OK(tether_context_observe_online(sib, on_online, &r2, &ob2));
    CHECK_INT(online_changes(&r), 0); /* an answer while online is no change */

    tu_proxy_down(px, 1);
    CHECK_CODE(fetch_status(ctx, TETHER_POLICY_CACHE_THEN_SERVER), TETHER_E_NETWORK);
    CHECK_INT(is_online(ctx), 0);
    CHECK_CODE(fetch_status(ctx, TETHER_POLICY_SERVER_ONLY), TETHER_E_NETWORK);
    wait_changes(&r, 1);
    CHECK_INT(online_changes(&r), 1); /* one change, however many requests failed */
    CHECK_INT(r.told[0], 0);
    if (sib) {
        CHECK_INT(is_online(sib), 0); /* one server, one state */
        wait_changes(&r2, 1);
        CHECK_INT(online_changes(&r2), 1);
    }

    tu_proxy_down(px, 0);
    CHECK_OK(fetch_status(ctx, TETHER_POLICY_CACHE_THEN_SERVER));
    CHECK_INT(is_online(ctx), 1);
    CHECK_OK(fetch_status(ctx, TETHER_POLICY_SERVER_ONLY));
    wait_changes(&r, 2);
    CHECK_INT(online_changes(&r), 2);
    CHECK_INT(r.told[1], 1);
    if (sib)
        CHECK_INT(is_online(sib), 1);
    pthread_mutex_lock(&log_mu);
    CHECK_INT(offline_lines, 1);
    CHECK_INT(online_lines, 1);
    pthread_mutex_unlock(&log_mu);

    tu_section("an online observer ends once, cancelled: removed, or at close");
    CHECK_OK(tether_observer_cancel(ob));
    {
        int64_t end = tu_now_ms() + TU_WAIT_MS;
        int finals = 0;
        while (finals == 0 && tu_now_ms() < end) {
            tu_sleep_ms(10);
            pthread_mutex_lock(&r.mu);
            finals = r.finals;
            pthread_mutex_unlock(&r.mu);
        }
    }
    CHECK_INT(r.finals, 1);
    CHECK_STATUS(tether_observer_cancel(ob), TETHER_E_HANDLE);
    if (sib) {
        CHECK_INT(tether_context_close(sib), TETHER_OK);
        CHECK_INT(r2.finals, 1);
        CHECK_INT(r2.after_final, 0);
    }
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    CHECK_INT(r.finals, 1);
    CHECK_INT(r.after_final, 0);

    tu_section("a context opened offline comes back online by itself when a request reaches the server");
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    tu_proxy_down(px, 1);
    ctx = tu_open_url(tu_proxy_url(px), bucket, store, TETHER_DELIVER_POLL, 3000);
    if (!ctx)
        return;
    CHECK_INT(is_online(ctx), 0);
    CHECK_OK(tether_context_observe_online(ctx, on_online, &r, &ob));
    tu_proxy_down(px, 0);
    {
        tu_fetch f;
        int64_t end = tu_now_ms() + TU_WAIT_MS;
        tu_fetch_init(&f);
        CHECK_OK(tu_fetch_start(ctx, &f, "tasks", NULL, 0, TETHER_POLICY_CACHE_THEN_SERVER, NULL));
        while (tu_fetch_calls(&f) < 2 && tu_now_ms() < end)
            tether_context_poll(ctx, 50, NULL);
        CHECK_OK(f.final_status);
        tu_fetch_destroy(&f);
    }
    CHECK_INT(is_online(ctx), 1);
    tether_context_poll(ctx, 100, NULL); /* POLL mode: told on this thread */
    CHECK_INT(online_changes(&r), 1);
    CHECK_INT(r.told[0], 1);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    CHECK_INT(r.finals, 1);
    /* an observer left to close holds nothing after it: not its context */
    CHECK_INT(tu_debug_count_settle(TETHER_DEBUG_OBSERVERS, observers_before, 2000), observers_before);
    CHECK_INT(tu_debug_count_settle(TETHER_DEBUG_CONTEXTS, contexts_before, 2000), contexts_before);
    tether_log_set(TETHER_LOG_OFF, NULL, NULL);
    pthread_mutex_lock(&log_mu);
    CHECK_INT(online_lines, 2);
    pthread_mutex_unlock(&log_mu);
    pthread_mutex_destroy(&r.mu);
    pthread_mutex_destroy(&r2.mu);
}

static void test_offline(tu_proxy *px, const char *store)
{
    tether_context *ctx;
    tu_fetch f;
    int online = -1;
    char buf[128];
    char url[256];

    snprintf(url, sizeof url, "%s", tu_proxy_url(px));
    tu_section("online through the proxy: fill the cache");
    ctx = tu_open_url(url, bucket, store, TETHER_DELIVER_THREAD, 3000);
    if (!ctx)
        return;
    CHECK_OK(tether_context_is_online(ctx, &online));
    CHECK_INT(online, 1);
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "tasks", "n", 0, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_INT(f.final_count, 30);
    tu_fetch_destroy(&f);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);

    tu_proxy_stop(px); /* the server is gone */

    tu_section("offline: opens from the store");
    ctx = tu_open_url(url, bucket, store, TETHER_DELIVER_THREAD, 3000);
    if (!ctx)
        return;
    online = -1;
    CHECK_OK(tether_context_is_online(ctx, &online));
    CHECK_INT(online, 0);
    {
        size_t n = 0;
        tether_entity *e = NULL;
        CHECK_OK(tether_context_entity_count(ctx, &n));
        CHECK_INT(n, 1);
        CHECK_OK(tether_context_entity(ctx, "tasks", &e));
    }

    tu_section("offline: peek and get answer from the cache");
    {
        tether_object *o = NULL;
        tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
        tu_obs ob;
        tether_observer *x = NULL;
        CHECK_OK(tether_context_object(ctx, "tasks", "t07", &o));
        if (o) {
            CHECK_OK(tu_peek_text(o, "title", buf, sizeof buf));
            CHECK_STR(buf, "task 7");
            tu_obs_init(&ob, o, "title", NULL);
            CHECK_OK(tu_observe(&ob, &x));
            if (CHECK_OK(tether_object_get(o, "title", &v)) == TETHER_OK)
                CHECK_STR(v.text, "task 7");
            tether_value_free(&v);
            tu_sleep_ms(500);
            CHECK_INT(tu_obs_changes(&ob), 0); /* a failed refresh changes nothing */
            pthread_mutex_lock(&ob.mu);
            int failures = ob.others;
            pthread_mutex_unlock(&ob.mu);
            CHECK_INT(failures, 1); /* but its observer hears that it failed */
            CHECK_OK(tu_peek_text(o, "title", buf, sizeof buf));
            CHECK_STR(buf, "task 7");
            CHECK_OK(tether_observer_cancel(x));
            CHECK(tu_obs_wait_cancel(&ob, TU_WAIT_MS));
            CHECK_OK(tether_object_free(o));
            tu_obs_destroy(&ob);
        }
    }

    tu_section("offline: CACHE_ONLY works");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "tasks", "-n", 10, TETHER_POLICY_CACHE_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 10);
    if (f.final_count > 0) {
        int64_t n = -1;
        tu_peek_int(f.final_objs[0], "n", &n);
        CHECK_INT(n, 29);
    }
    tu_fetch_destroy(&f);

    tu_section("offline: CACHE_THEN_SERVER gives the cache, then FINAL TETHER_E_NETWORK");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "tasks", NULL, 0, TETHER_POLICY_CACHE_THEN_SERVER, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    tu_sleep_ms(100);
    CHECK_INT(f.cached, 1);
    CHECK_INT(f.cached_count, 30);
    CHECK_INT(f.finals, 1);
    CHECK_CODE(f.final_status, TETHER_E_NETWORK);
    CHECK(f.final_message[0] != '\0');
    CHECK_INT(f.final_count, 30); /* on a FINAL error, the cache's objects */
    CHECK_INT(f.results_errors, 0);
    tu_fetch_destroy(&f);

    tu_section("offline: SERVER_ONLY fails with TETHER_E_NETWORK");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "tasks", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_INT(f.calls, 1);
    CHECK_CODE(f.final_status, TETHER_E_NETWORK);
    tu_fetch_destroy(&f);

    CHECK_INT(tether_context_close(ctx), TETHER_OK);

    tu_section("offline with another bucket: the store belongs elsewhere, TETHER_E_STORE");
    {
        tether_context_options o;
        tether_kinto_options k;
        tether_context *c2 = NULL;
        tether_context_options_init(&o, TETHER_CONTEXT_OPTIONS_VERSION);
        tether_kinto_options_init(&k, TETHER_KINTO_OPTIONS_VERSION);
        k.server_url = url;
        k.bucket = "some-other-bucket";
        o.store_path = store;
        k.username = "test";
        k.password = "test";
        o.timeout_ms = 3000;
        CHECK_STATUS(tether_context_open_kinto(&o, &k, &c2), TETHER_E_STORE);
        CHECK(c2 == NULL);
    }
}

int main(int argc, char **argv)
{
    char store[512], store2[512], store3[512];
    tu_proxy *px;
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-offline");
    tu_store_path(store, sizeof store, "stall");
    tu_store_path(store2, sizeof store2, "offline");
    tu_store_path(store3, sizeof store3, "batch");
    if (!CHECK(seed()))
        return tu_finish();
    px = tu_proxy_start();
    if (!CHECK(px != NULL))
        return tu_finish();
    test_batched_gets(px, store3);
    test_stalled(px, store);
    test_online_changes(px, store3);
    test_offline(px, store2); /* stops the proxy */
    return tu_finish();
}
