/* test_handles.c — every function on the handles of a closed context
 * (context, entity, object, observer, task) gives TETHER_E_HANDLE and never
 * crashes; handle values are not reused; offline open from the store. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>

static char bucket[128];

static void dead_handles(tether_context *ctx, tether_entity *e, tether_object *obj,
                         tether_observer *ob, tether_task *task)
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

    CHECK_STATUS(tether_observer_remove(ob), TETHER_E_HANDLE);
    CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);

    CHECK(i == 7 && n == 7 && u == 7 && i64 == 7);
    CHECK(s == NULL && e2 == NULL && o2 == NULL && ob2 == NULL && t2 == NULL);
    CHECK_INT(v.type, TETHER_TYPE_NULL);
    tu_sleep_ms(100);
    CHECK_INT(tu_fetch_calls(&rec), 0);
    tu_fetch_destroy(&rec);
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

    tu_section("a context and handles of every kind");
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return tu_finish();
    tu_fetch_init(&f);
    tu_fetch_init(&f2);
    CHECK_OK(tether_context_entity(ctx, "docs", &e));
    CHECK_OK(tu_fetch_start(ctx, &f, "docs", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_OK(tether_context_object(ctx, "docs", "d1", &obj));
    tu_obs_init(&o, obj, "title", NULL);
    CHECK_OK(tu_observe(&o, &ob));
    /* a task still in flight at close */
    CHECK_OK(tu_fetch_start(ctx, &f2, "docs", NULL, 0, TETHER_POLICY_SERVER_ONLY, &task));
    CHECK(e && obj && ob && task);
    if (!(e && obj && ob && task))
        return tu_finish();
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    CHECK_INT(tu_obs_cancels(&o), 1);
    CHECK_INT(tu_fetch_finals(&f2), 1);

    tu_section("every function on the closed context's handles: TETHER_E_HANDLE");
    dead_handles(ctx, e, obj, ob, task);

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
        {
            char buf[64];
            CHECK_OK(tu_peek_text(o2, "title", buf, sizeof buf));
            CHECK_STR(buf, "one");
        }
        CHECK_INT(tether_context_close(ctx2), TETHER_OK);
        CHECK_STATUS(tether_context_close(ctx2), TETHER_E_HANDLE);
        dead_handles(ctx2, e2, o2, ob, task);
    }

    tu_section("a store opened for another server URL");
    {
        tether_context_options opts;
        tether_context *off = NULL;
        tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
        opts.server_url = "http://127.0.0.1:1/v1"; /* nothing listens there */
        opts.bucket = bucket;
        opts.store_path = store;
        opts.username = "test";
        opts.password = "test";
        opts.timeout_ms = 3000;
        /* A store belongs to one server and bucket: another URL is not it. */
        CHECK_STATUS(tether_context_open(&opts, &off), TETHER_E_STORE);
        CHECK(off == NULL);
    }
    tu_fetch_destroy(&f);
    tu_fetch_destroy(&f2);
    tu_obs_destroy(&o);
    return tu_finish();
}
