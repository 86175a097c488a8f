/* test_handles.c — object references (retain, release, dead after the
 * last release, a new handle after), results handles that outlive their
 * task, removing and cancelling twice; every function on the handles of a
 * closed context (context, entity, object, results, observer, task) gives
 * TETHER_E_HANDLE and never crashes; handle values are not reused; an
 * object cache of 0 reloads from the store; a store of another server. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>

static char bucket[128];

static void dead_handles(tether_context *ctx, tether_entity *e, tether_object *obj,
                         tether_results *results, tether_observer *ob, tether_task *task)
{
    int i = 7;
    size_t n = 7;
    unsigned int u = 7;
    const char *s = NULL;
    tether_entity *e2 = NULL;
    tether_object *o2 = NULL;
    tether_observer *ob2 = NULL;
    tether_task *t2 = NULL;
    int64_t i64 = 7;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    tether_fetch_options f;
    tu_fetch rec;

    tu_fetch_init(&rec);
    CHECK_STATUS(tether_context_close(ctx), TETHER_E_HANDLE); /* closing twice */
    CHECK_STATUS(tether_context_is_online(ctx, &i), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_fd(ctx, &i), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_poll(ctx, 0, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_entity_count(ctx, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_entity_at(ctx, 0, &e2), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_entity(ctx, "docs", &e2), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_object(ctx, "docs", "d1", &o2), TETHER_E_HANDLE);
    CHECK_OK(tether_fetch_options_init(&f, TETHER_FETCH_OPTIONS_VERSION));
    f.entity = "docs";
    CHECK_STATUS(tether_fetch_start(ctx, &f, tu_fetch_cb, &rec, &t2), TETHER_E_HANDLE);

    CHECK_STATUS(tether_entity_name(e, &s), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_route(e, &s), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_operations(e, &u), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_attribute_count(e, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_attribute_at(e, 0, &s, &i, NULL, &u), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_attribute_index(e, "title", &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_attribute_index_by_code(e, 801, &n), TETHER_E_HANDLE);

    CHECK_STATUS(tether_object_entity(obj, &e2), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_id(obj, &s), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_version(obj, &i64), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_peek(obj, "title", &v), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_get(obj, "title", &v), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_peek_code(obj, 801, &v), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_get_code(obj, 801, &v), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_observe(obj, "title", tu_obs_cb, NULL, &ob2), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_retain(obj), TETHER_E_HANDLE);
    /* The reference the host still held: releasing it after close is harmless. */
    CHECK_STATUS(tether_object_free(obj), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_free(obj), TETHER_E_HANDLE);

    CHECK_STATUS(tether_results_count(results, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_results_object_at(results, 0, &o2), TETHER_E_HANDLE);
    CHECK_STATUS(tether_results_free(results), TETHER_E_HANDLE);

    CHECK_STATUS(tether_observer_cancel(ob), TETHER_E_HANDLE);
    CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);

    CHECK(i == 7 && n == 7 && u == 7 && i64 == 7);
    CHECK(s == NULL && e2 == NULL && o2 == NULL && ob2 == NULL && t2 == NULL);
    CHECK_INT(v.type, TETHER_TYPE_NULL);
    tu_sleep_ms(100);
    CHECK_INT(tu_fetch_calls(&rec), 0);
    tu_fetch_destroy(&rec);
}

/* Object references: the same handle while one is held, retain/release in
 * pairs, a second release of the last reference is HANDLE, the handle is
 * dead after it, and the next tether_context_object gives a new one whose
 * reads work. `f` holds the results of a finished fetch of "docs" (d1). */
static tether_object *object_references(tether_context *ctx, tu_fetch *f)
{
    tether_object *a = NULL, *b = NULL, *c = NULL;
    tether_results *held;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    size_t n = 0;
    char buf[64];

    tu_section("object references: the same handle while one is held; retain and release pair");
    CHECK_OK(tether_context_object(ctx, "docs", "d1", &a));
    CHECK_OK(tether_context_object(ctx, "docs", "d1", &b));
    CHECK(a != NULL && a == b);
    if (f->final_count == 1)
        CHECK(f->final_objs[0] == a); /* the results hold the same object */
    CHECK_OK(tether_object_retain(a));
    CHECK_OK(tether_object_retain(b));
    /* four references from the host: four releases, each OK */
    CHECK_OK(tether_object_free(a));
    CHECK_OK(tether_object_free(b));
    CHECK_OK(tether_object_free(a));
    CHECK_OK(tether_object_peek(a, "title", &v)); /* one left */
    tether_value_free(&v);
    CHECK_OK(tether_object_free(b));
    /* The results still hold it. */
    CHECK_OK(tu_peek_text(a, "title", buf, sizeof buf));
    CHECK_STR(buf, "one");

    tu_section("a results handle outlives its callback and its task, until released");
    CHECK(f->task != NULL);
    CHECK_STATUS(tether_task_cancel(f->task), TETHER_E_HANDLE); /* the task is gone */
    held = f->final_results;
    CHECK_OK(tether_results_count(held, &n));
    CHECK_INT(n, 1);
    {
        tether_object *at = NULL, *past = NULL;
        CHECK_OK(tether_results_object_at(held, 0, &at));
        CHECK(at == a);
        CHECK_STATUS(tether_results_object_at(held, 1, &past), TETHER_E_NOT_FOUND);
        CHECK_STATUS(tether_results_object_at(held, (size_t)-1, &past), TETHER_E_NOT_FOUND);
        CHECK(past == NULL);
        CHECK_STATUS(tether_results_count(held, NULL), TETHER_E_MISUSE);
        CHECK_STATUS(tether_results_object_at(held, 0, NULL), TETHER_E_MISUSE);
    }
    CHECK_OK(tu_fetch_free(f));
    CHECK_STATUS(tether_results_count(held, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_results_free(held), TETHER_E_HANDLE); /* a second release */

    tu_section("after the last release the handle is dead; the next one is new and reads");
    CHECK_STATUS(tether_object_peek(a, "title", &v), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_id(a, NULL), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_retain(a), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_free(a), TETHER_E_HANDLE); /* a second release of the last reference */
    CHECK_STATUS(tether_object_free(b), TETHER_E_HANDLE);
    CHECK_INT(v.type, TETHER_TYPE_NULL);
    CHECK_OK(tether_context_object(ctx, "docs", "d1", &c));
    CHECK(c != NULL && c != a); /* handles are never reused */
    CHECK_OK(tu_peek_text(c, "title", buf, sizeof buf));
    CHECK_STR(buf, "one");
    CHECK_STR(tu_id(c), "d1");
    return c;
}

/* Removing an observer, or cancelling a task, a second time right away:
 * HANDLE, and still exactly one final callback each. */
static void twice(tether_context *ctx, tether_object *obj)
{
    tu_obs o;
    tu_fetch f;
    tether_observer *ob = NULL;
    tether_task *task = NULL;

    tu_section("a second tether_observer_cancel, a second tether_task_cancel: TETHER_E_HANDLE");
    tu_obs_init(&o, obj, "title", NULL);
    CHECK_OK(tu_observe(&o, &ob));
    CHECK_OK(tether_observer_cancel(ob));
    CHECK_STATUS(tether_observer_cancel(ob), TETHER_E_HANDLE);
    CHECK(tu_obs_wait_cancel(&o, TU_WAIT_MS));
    CHECK_STATUS(tether_observer_cancel(ob), TETHER_E_HANDLE);

    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "docs", NULL, 0, TETHER_POLICY_SERVER_ONLY, &task));
    CHECK_OK(tu_fetch_cancel(&f, task));
    CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    tu_sleep_ms(100);
    CHECK_INT(tu_obs_cancels(&o), 1);
    CHECK_INT(o.after_cancel, 0);
    CHECK_INT(tu_fetch_calls(&f), 1);
    CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
    CHECK_INT(f.final_count, 0); /* cancelled: no objects */
    CHECK_INT(f.results_errors, 0);
    tu_fetch_destroy(&f);
    tu_obs_destroy(&o);
}

/* object_cache_size 0 keeps only what is held: the object of a released
 * handle leaves memory, and a new handle reads it back from the store. */
static void cache_size_zero(void)
{
    char store[512], buf[64];
    tether_context_options opts;
    tether_kinto_options kinto;
    tether_context *ctx = NULL;
    tether_object *obj = NULL, *again = NULL;
    tu_fetch f;
    int64_t base;

    tu_section("object_cache_size 0: a released object reloads from the store");
    tu_store_path(store, sizeof store, "nocache");
    tu_options(&opts, &kinto, tu_url(), bucket, store, TETHER_DELIVER_THREAD, 10000);
    opts.object_cache_size = 0;
    if (CHECK_OK(tether_context_open_kinto(&opts, &kinto, &ctx)) != TETHER_OK)
        return;
    base = tu_debug_count(TETHER_DEBUG_OBJECTS);
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "docs", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_INT(f.final_count, 1);
    CHECK_INT(tu_debug_count_settle(TETHER_DEBUG_OBJECTS, base + 1, 2000), base + 1); /* held by the results */
    if (f.final_count == 1)
        obj = f.final_objs[0];
    CHECK_OK(tu_fetch_free(&f));
    CHECK_INT(tu_debug_count_settle(TETHER_DEBUG_OBJECTS, base, 2000), base);
    {
        tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
        CHECK_STATUS(tether_object_peek(obj, "title", &v), TETHER_E_HANDLE);
    }
    CHECK_OK(tether_context_object(ctx, "docs", "d1", &again));
    CHECK(again != NULL && again != obj);
    CHECK_INT(tu_debug_count(TETHER_DEBUG_OBJECTS), base + 1);
    CHECK_OK(tu_peek_text(again, "title", buf, sizeof buf));
    CHECK_STR(buf, "one");
    CHECK_OK(tether_object_free(again));
    CHECK_INT(tu_debug_count_settle(TETHER_DEBUG_OBJECTS, base, 2000), base);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    tu_fetch_destroy(&f);
}

int main(int argc, char **argv)
{
    char store[512];
    tether_context *ctx, *ctx2;
    tether_entity *e = NULL;
    tether_object *obj = NULL;
    tether_observer *ob = NULL;
    tether_task *task = NULL;
    tu_fetch f, f2;
    tu_obs o;
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-handles");
    tu_store_path(store, sizeof store, "handles");
    if (!CHECK(tu_put_bucket(bucket)) ||
        !CHECK(tu_put_collection(bucket, "docs",
                                 "{\"type\": \"object\", \"properties\": {"
                                 "\"title\": {\"type\": \"string\", \"x-tether-code\": 801}}}")) ||
        !CHECK(tu_put_record(bucket, "docs", "d1", "{\"title\": \"one\"}")))
        return tu_finish();

    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return tu_finish();
    tu_fetch_init(&f);
    tu_fetch_init(&f2);
    CHECK_OK(tether_context_entity(ctx, "docs", &e));
    CHECK_OK(tu_fetch_start(ctx, &f, "docs", NULL, 0, TETHER_POLICY_SERVER_ONLY, &task));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK(f.task == task);
    obj = object_references(ctx, &f);
    if (obj)
        twice(ctx, obj);

    tu_section("a context and handles of every kind");
    tu_obs_init(&o, obj, "title", NULL);
    CHECK_OK(tu_observe(&o, &ob));
    /* a task still in flight at close */
    task = NULL;
    CHECK_OK(tu_fetch_start(ctx, &f2, "docs", NULL, 0, TETHER_POLICY_SERVER_ONLY, &task));
    CHECK(e && obj && ob && task);
    if (!(e && obj && ob && task))
        return tu_finish();
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    CHECK_INT(tu_obs_cancels(&o), 1);
    CHECK_INT(tu_fetch_finals(&f2), 1);
    CHECK(f2.final_results != NULL); /* the recorder holds it, past close */

    tu_section("every function on the closed context's handles: TETHER_E_HANDLE");
    dead_handles(ctx, e, obj, f2.final_results, ob, task);

    tu_section("a new context: new handle values, old ones stay dead");
    ctx2 = tu_open(bucket, store, TETHER_DELIVER_POLL);
    if (ctx2) {
        tether_entity *e2 = NULL;
        tether_object *o2 = NULL;
        size_t n = 0;
        CHECK(ctx2 != ctx);
        CHECK_OK(tether_context_entity(ctx2, "docs", &e2));
        CHECK_OK(tether_context_object(ctx2, "docs", "d1", &o2));
        CHECK(e2 != e);
        CHECK(o2 != obj);
        CHECK_STATUS(tether_context_entity_count(ctx, &n), TETHER_E_HANDLE);
        CHECK_STATUS(tether_object_id(obj, NULL), TETHER_E_HANDLE);
        /* the new one's handles of the wrong kind */
        CHECK_STATUS(tether_object_id((tether_object *)e2, NULL), TETHER_E_HANDLE);
        CHECK_STATUS(tether_entity_name((tether_entity *)o2, NULL), TETHER_E_HANDLE);
        CHECK_STATUS(tether_results_count((tether_results *)o2, &n), TETHER_E_HANDLE);
        CHECK_STATUS(tether_results_free((tether_results *)o2), TETHER_E_HANDLE);
        CHECK_STATUS(tether_object_free((tether_object *)e2), TETHER_E_HANDLE);
        CHECK_STATUS(tether_object_retain((tether_object *)ctx2), TETHER_E_HANDLE);
        {
            char buf[64];
            /* still alive after the wrong-kind releases */
            CHECK_OK(tu_peek_text(o2, "title", buf, sizeof buf));
            CHECK_STR(buf, "one");
        }
        /* o2 is still held when the context closes. */
        CHECK_INT(tether_context_close(ctx2), TETHER_OK);
        CHECK_STATUS(tether_context_close(ctx2), TETHER_E_HANDLE);
        dead_handles(ctx2, e2, o2, f2.final_results, ob, task);
    }

    cache_size_zero();

    tu_section("a store opened for another server URL");
    {
        tether_context_options opts;
        tether_kinto_options kinto;
        tether_context *off = NULL;
        tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
        tether_kinto_options_init(&kinto, TETHER_KINTO_OPTIONS_VERSION);
        kinto.server_url = "http://127.0.0.1:1/v1"; /* nothing listens there */
        kinto.bucket = bucket;
        opts.store_path = store;
        kinto.username = "test";
        kinto.password = "test";
        opts.timeout_ms = 3000;
        /* A store belongs to one server and bucket: another URL is not it. */
        CHECK_STATUS(tether_context_open_kinto(&opts, &kinto, &off), TETHER_E_STORE);
        CHECK(off == NULL);
    }
    tu_fetch_destroy(&f);
    tu_fetch_destroy(&f2);
    tu_obs_destroy(&o);
    return tu_finish();
}
