/* test_fetch.c — asynchronous fetches (THREAD delivery): phases, policies,
 * sort and limit, uniquing while references are held, results handles that
 * outlive their task, validation, cancellation, close with requests in
 * flight, close from inside a callback. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>

#define NITEMS 120 /* > 2 pages of the test server's paginate_by (50) */
#define NBIG 300

static char bucket[128];

static int seed(void)
{
    static char idbuf[NITEMS][16], databuf[NITEMS][128];
    const char *ids[NITEMS], *datas[NITEMS];
    int i;
    if (!tu_put_bucket(bucket) ||
        !tu_put_collection(bucket, "items",
                           "{\"type\": \"object\", \"properties\": {"
                           "\"n\": {\"type\": \"integer\"}, \"label\": {\"type\": \"string\"}}}") ||
        !tu_put_collection(bucket, "big",
                           "{\"type\": \"object\", \"properties\": {"
                           "\"n\": {\"type\": \"integer\"}, \"text\": {\"type\": \"string\"}}}") ||
        !tu_put_collection(bucket, "empty",
                           "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}}"))
        return 0;
    for (i = 0; i < NITEMS; i++) {
        snprintf(idbuf[i], sizeof idbuf[i], "i%03d", i);
        /* n in a different order from the ids */
        snprintf(databuf[i], sizeof databuf[i], "{\"n\": %d, \"label\": \"item %d\"}", (i * 37) % NITEMS, i);
        ids[i] = idbuf[i];
        datas[i] = databuf[i];
    }
    if (!tu_put_records(bucket, "items", ids, datas, NITEMS))
        return 0;
    return tu_put_numbered(bucket, "big", "b%04d",
                           "{\"n\": %d, \"text\": \"a record of the big collection, number %d\"}", NBIG);
}

/* 1 if the objects are sorted by integer key `key` (descending if desc). */
static int sorted_by(tether_object **objs, size_t count, const char *key, int desc)
{
    size_t i;
    int64_t prev = 0, v;
    for (i = 0; i < count; i++) {
        if (tu_peek_int(objs[i], key, &v) != TETHER_OK)
            return 0;
        if (i > 0 && (desc ? v > prev : v < prev))
            return 0;
        prev = v;
    }
    return 1;
}

static void test_phases_and_uniquing(tether_context *ctx)
{
    tu_fetch f1, f2;
    tether_task *task = NULL;
    size_t i;

    tu_section("CACHE_THEN_SERVER on an empty cache: CACHED (0) then FINAL");
    tu_fetch_init(&f1);
    CHECK_OK(tu_fetch_start(ctx, &f1, "items", "n", 0, TETHER_POLICY_CACHE_THEN_SERVER, &task));
    CHECK(task != NULL);
    CHECK(tu_fetch_wait(&f1, TU_WAIT_MS));
    tu_sleep_ms(200); /* nothing may follow the FINAL */
    pthread_mutex_lock(&f1.mu);
    CHECK_INT(f1.cached, 1);
    CHECK_INT(f1.finals, 1);
    CHECK_INT(f1.calls, 2);
    CHECK_INT(f1.order_errors, 0);
    CHECK_INT(f1.results_errors, 0);
    CHECK_INT(f1.task_changed, 0);
    CHECK(f1.task == task);
    CHECK_INT(f1.off_main, 2); /* THREAD mode: the library's thread */
    CHECK_INT(f1.cached_count, 0);
    CHECK_CODE(f1.final_status, TETHER_OK);
    CHECK_STR(f1.final_message, "");
    CHECK_INT(f1.final_count, NITEMS);
    CHECK(sorted_by(f1.final_objs, f1.final_count, "n", 0));
    pthread_mutex_unlock(&f1.mu);
    /* The task is gone after its FINAL. */
    CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);

    tu_section("second fetch: CACHED answers from the cache, same objects (f1's results still held)");
    tu_fetch_init(&f2);
    CHECK_OK(tu_fetch_start(ctx, &f2, "items", "n", 0, TETHER_POLICY_CACHE_THEN_SERVER, NULL));
    CHECK(tu_fetch_wait(&f2, TU_WAIT_MS));
    tu_sleep_ms(100);
    pthread_mutex_lock(&f2.mu);
    CHECK_INT(f2.cached, 1);
    CHECK_INT(f2.finals, 1);
    CHECK_INT(f2.order_errors, 0);
    CHECK_INT(f2.results_errors, 0);
    CHECK_INT(f2.cached_count, NITEMS);
    CHECK_INT(f2.final_count, NITEMS);
    CHECK(sorted_by(f2.cached_objs, f2.cached_count, "n", 0));
    if (f2.cached_count == NITEMS && f2.final_count == NITEMS && f1.final_count == NITEMS) {
        int same = 0;
        for (i = 0; i < NITEMS; i++)
            same += f1.final_objs[i] == f2.cached_objs[i] && f2.cached_objs[i] == f2.final_objs[i];
        CHECK_INT(same, NITEMS);
    }
    pthread_mutex_unlock(&f2.mu);

    tu_section("tether_context_object gives the fetched object while the results hold it");
    if (f1.final_count == NITEMS) {
        int same = 0, again = 0, released = 0;
        for (i = 0; i < NITEMS; i++) {
            tether_object *o = NULL, *o2 = NULL;
            const char *id = tu_id(f1.final_objs[i]);
            if (tether_context_object(ctx, "items", id, &o) == TETHER_OK && o == f1.final_objs[i])
                same++;
            if (tether_context_object(ctx, "items", id, &o2) == TETHER_OK && o2 == o)
                again++;
            /* two references taken, two given back */
            released += tether_object_free(o) == TETHER_OK;
            released += tether_object_free(o2) == TETHER_OK;
        }
        CHECK_INT(same, NITEMS);
        CHECK_INT(again, NITEMS);
        CHECK_INT(released, 2 * NITEMS);
        {
            tether_entity *e = NULL, *oe = NULL;
            int64_t version = 0;
            tether_object *o = f1.final_objs[0];
            CHECK_OK(tether_context_entity(ctx, "items", &e));
            CHECK_OK(tether_object_entity(o, &oe));
            CHECK(e != NULL && e == oe);
            CHECK_OK(tether_object_version(o, &version));
            CHECK(version > 1500000000000LL); /* Kinto last_modified, ms */
            {
                tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
                if (CHECK_OK(tether_object_peek(o, "last_modified", &v)) == TETHER_OK) {
                    CHECK_INT(v.type, TETHER_TYPE_INTEGER);
                    CHECK_INT(v.integer, version);
                }
                tether_value_free(&v);
                if (CHECK_OK(tether_object_peek(o, "id", &v)) == TETHER_OK) {
                    CHECK_INT(v.type, TETHER_TYPE_TEXT);
                    CHECK_STR(v.text, tu_id(o));
                }
                tether_value_free(&v);
            }
        }
    }

    tu_section("results outlive their task; an object dies with its last reference");
    if (f1.final_count == NITEMS) {
        tether_object *first = f1.final_objs[0];
        tether_results *held = f1.final_results;
        int64_t version = 0;
        size_t n = 0;
        /* f1's task ended long ago; its results still answer. */
        CHECK_OK(tether_results_count(held, &n));
        CHECK_INT(n, NITEMS);
        CHECK_OK(tu_fetch_free(&f1));
        CHECK_STATUS(tether_results_count(held, &n), TETHER_E_HANDLE);
        CHECK_OK(tether_object_version(first, &version)); /* f2's results hold it */
        CHECK_OK(tether_object_retain(first));
        CHECK_OK(tu_fetch_free(&f2));
        CHECK_OK(tether_object_version(first, &version)); /* the host holds it */
        CHECK_OK(tether_object_free(first));
        CHECK_STATUS(tether_object_version(first, &version), TETHER_E_HANDLE);
    }
    tu_fetch_destroy(&f1);
    tu_fetch_destroy(&f2);
}

static void test_sort_limit_policies(tether_context *ctx)
{
    tu_fetch f;
    tether_task *task = NULL;

    tu_section("sort descending with a limit");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "items", "-n", 10, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    tu_sleep_ms(100);
    CHECK_INT(f.cached, 0);
    CHECK_INT(f.finals, 1);
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 10);
    CHECK(sorted_by(f.final_objs, f.final_count, "n", 1));
    if (f.final_count > 0) {
        int64_t top = -1;
        tu_peek_int(f.final_objs[0], "n", &top);
        CHECK_INT(top, NITEMS - 1);
    }
    tu_fetch_destroy(&f);

    tu_section("sort on two keys, limit beyond a page");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "items", "label,-n", 75, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 75);
    tu_fetch_destroy(&f);

    tu_section("CACHE_ONLY: one FINAL from the cache");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "items", "-n", 5, TETHER_POLICY_CACHE_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    tu_sleep_ms(100);
    CHECK_INT(f.calls, 1);
    CHECK_INT(f.finals, 1);
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 5);
    CHECK(sorted_by(f.final_objs, f.final_count, "n", 1));
    tu_fetch_destroy(&f);

    tu_section("CACHE_ONLY on an entity never fetched: 0 objects");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "big", NULL, 0, TETHER_POLICY_CACHE_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 0);
    tu_fetch_destroy(&f);

    tu_section("CACHE_ELSE_SERVER: one FINAL (cache has items)");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "items", NULL, 0, TETHER_POLICY_CACHE_ELSE_SERVER, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    tu_sleep_ms(100);
    CHECK_INT(f.calls, 1);
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, NITEMS);
    tu_fetch_destroy(&f);

    tu_section("SERVER_ONLY on an empty collection");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "empty", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_INT(f.calls, 1);
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 0);
    tu_fetch_destroy(&f);

    tu_section("validation errors: returned, and no callback");
    tu_fetch_init(&f);
    CHECK_STATUS(tu_fetch_start(ctx, &f, "nosuch", NULL, 0, TETHER_POLICY_CACHE_THEN_SERVER, &task),
                 TETHER_E_NOT_FOUND);
    CHECK_STATUS(tu_fetch_start(ctx, &f, "items", "nosuch", 0, TETHER_POLICY_CACHE_THEN_SERVER, &task),
                 TETHER_E_INVALID);
    CHECK_STATUS(tu_fetch_start(ctx, &f, "items", "n,,label", 0, TETHER_POLICY_CACHE_THEN_SERVER, &task),
                 TETHER_E_INVALID);
    CHECK_STATUS(tu_fetch_start(ctx, &f, "items", "n\xff", 0, TETHER_POLICY_CACHE_THEN_SERVER, &task),
                 TETHER_E_INVALID);
    CHECK_FAILS(tu_fetch_start(ctx, &f, "items", NULL, 0, (tether_cache_policy)9, &task));
    CHECK_FAILS(tu_fetch_start(ctx, &f, NULL, NULL, 0, TETHER_POLICY_CACHE_THEN_SERVER, &task));
    {
        tether_fetch_options o;
        tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
        o.entity = "items";
        CHECK_STATUS(tether_fetch_start(ctx, NULL, tu_fetch_cb, &f, &task), TETHER_E_MISUSE);
        CHECK_STATUS(tether_fetch_start(ctx, &o, NULL, &f, &task), TETHER_E_MISUSE);
        o.version = 42;
        CHECK_STATUS(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, &task), TETHER_E_MISUSE);
    }
    CHECK(task == NULL);
    tu_sleep_ms(300);
    CHECK_INT(tu_fetch_calls(&f), 0);
    tu_fetch_destroy(&f);
}

static void test_cancel(tether_context *ctx)
{
    tu_fetch f;
    tether_task *task = NULL;
    int i;

    tu_section("cancel at once (SERVER_ONLY): exactly one FINAL, cancelled");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "big", NULL, 0, TETHER_POLICY_SERVER_ONLY, &task));
    if (task) {
        CHECK_OK(tu_fetch_cancel(&f, task));
        CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE); /* already cancelled */
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        tu_sleep_ms(300);
        pthread_mutex_lock(&f.mu);
        CHECK_INT(f.calls, 1);
        CHECK_INT(f.finals, 1);
        CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
        CHECK_INT(f.final_count, 0); /* cancelled: no objects */
        CHECK_INT(f.results_errors, 0);
        CHECK_INT(f.after_cancel_bad, 0);
        pthread_mutex_unlock(&f.mu);
        CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);
    }
    tu_fetch_destroy(&f);

    tu_section("cancel at once (CACHE_THEN_SERVER): nothing but the cancelled FINAL after cancel");
    for (i = 0; i < 5; i++) {
        tu_fetch_init(&f);
        task = NULL;
        CHECK_OK(tu_fetch_start(ctx, &f, "big", "-n", 0, TETHER_POLICY_CACHE_THEN_SERVER, &task));
        if (task) {
            CHECK_OK(tu_fetch_cancel(&f, task));
            CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);
            CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
            tu_sleep_ms(100);
            pthread_mutex_lock(&f.mu);
            CHECK_INT(f.finals, 1);
            CHECK(f.cached <= 1);
            CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
            CHECK_INT(f.final_count, 0);
            CHECK_INT(f.results_errors, 0);
            CHECK_INT(f.after_cancel_bad, 0);
            CHECK_INT(f.order_errors, 0);
            pthread_mutex_unlock(&f.mu);
            CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);
        }
        tu_fetch_destroy(&f);
    }

    tu_section("cancel after the CACHED callback");
    tu_fetch_init(&f);
    task = NULL;
    CHECK_OK(tu_fetch_start(ctx, &f, "big", NULL, 0, TETHER_POLICY_CACHE_THEN_SERVER, &task));
    {
        /* wait for the CACHED phase, bounded */
        struct timespec dl = tu_deadline(TU_WAIT_MS);
        pthread_mutex_lock(&f.mu);
        while (f.calls == 0 && pthread_cond_timedwait(&f.cv, &f.mu, &dl) == 0) {
        }
        pthread_mutex_unlock(&f.mu);
    }
    if (task) {
        int s = tu_fetch_cancel(&f, task);
        /* Either it was still in flight (OK) or it had ended (HANDLE). */
        CHECK(s == TETHER_OK || s == TETHER_E_HANDLE);
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        tu_sleep_ms(100);
        CHECK_INT(f.finals, 1);
        CHECK_INT(f.after_cancel_bad, 0);
        if (s == TETHER_OK)
            CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
        /* cancelled, or ended: either way the task is gone */
        CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);
    }
    tu_fetch_destroy(&f);

    tu_section("cancel from inside the task's own CACHED callback");
    tu_fetch_init(&f);
    f.cancel_in_cb = 1;
    CHECK_OK(tu_fetch_start(ctx, &f, "big", NULL, 0, TETHER_POLICY_CACHE_THEN_SERVER, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    tu_sleep_ms(100);
    CHECK_CODE(f.cancel_in_cb_status, TETHER_OK);
    CHECK_INT(f.cached, 1);
    CHECK_INT(f.finals, 1);
    CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
    CHECK_INT(f.final_count, 0);
    tu_fetch_destroy(&f);

    tu_section("a fetch that runs to the end after cancels elsewhere");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "big", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, NBIG);
    tu_fetch_destroy(&f);
}

static void test_close_in_flight(const char *store)
{
    tether_context *ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    tu_fetch f;
    tu_obs o;
    tether_object *obj = NULL;
    tether_observer *ob = NULL;
    tether_task *task = NULL;

    tu_section("close with a fetch in flight and an observer: each final cancelled once, before close returns");
    if (!ctx)
        return;
    tu_fetch_init(&f);
    CHECK_OK(tether_context_object(ctx, "items", "i001", &obj));
    tu_obs_init(&o, obj, "label", NULL);
    CHECK_OK(tu_observe(&o, &ob));
    CHECK(ob != NULL);
    /* The observer holds its object: the same handle comes back after the
     * host let go of its reference. */
    CHECK_OK(tether_object_free(obj));
    {
        tether_object *again = NULL;
        CHECK_OK(tether_context_object(ctx, "items", "i001", &again));
        CHECK(again == obj);
        CHECK_OK(tether_object_free(again));
    }
    CHECK_OK(tu_fetch_start(ctx, &f, "big", NULL, 0, TETHER_POLICY_SERVER_ONLY, &task));
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    /* No waiting: everything must have been delivered already. */
    pthread_mutex_lock(&f.mu);
    CHECK_INT(f.finals, 1);
    CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
    CHECK_INT(f.final_count, 0);
    CHECK_INT(f.results_errors, 0);
    pthread_mutex_unlock(&f.mu);
    CHECK_INT(tu_obs_cancels(&o), 1);
    tu_sleep_ms(300);
    CHECK_INT(tu_fetch_calls(&f), 1);
    CHECK_INT(tu_obs_cancels(&o), 1);
    CHECK_INT(o.after_cancel, 0);
    CHECK_INT(o.changes, 0);
    /* Their handles are dead now. */
    CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);
    CHECK_STATUS(tether_observer_cancel(ob), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_free(obj), TETHER_E_HANDLE);
    CHECK_STATUS(tu_fetch_free(&f), TETHER_E_HANDLE); /* its results died with the context */
    tu_fetch_destroy(&f);
    tu_obs_destroy(&o);
}

static void test_close_from_callback(const char *store)
{
    tether_context *ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    tu_fetch f;
    size_t n = 0;

    tu_section("tether_context_close from inside a callback: BUSY, context stays open");
    if (!ctx)
        return;
    tu_fetch_init(&f);
    f.close_in_cb = ctx;
    CHECK_OK(tu_fetch_start(ctx, &f, "items", NULL, 0, TETHER_POLICY_CACHE_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.close_in_cb_status, TETHER_E_BUSY);
    CHECK(f.close_in_cb_errmsg[0] != '\0');
    CHECK_OK(tether_context_entity_count(ctx, &n));
    CHECK_INT(n, 3);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    tu_fetch_destroy(&f);
}

int main(int argc, char **argv)
{
    char store[512];
    tether_context *ctx;
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-fetch");
    tu_store_path(store, sizeof store, "fetch");
    if (!CHECK(seed()))
        return tu_finish();
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (ctx) {
        test_phases_and_uniquing(ctx);
        test_sort_limit_policies(ctx);
        test_cancel(ctx);
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }
    test_close_in_flight(store);
    test_close_from_callback(store);
    return tu_finish();
}
