/* test_observe.c — peek vs get, observers (THREAD delivery): a change on the
 * server is seen by get's refresh and told to observers of the key and of its
 * peek form; uncached and deleted records; removal; staleness; an observer
 * holds its object. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>

static char bucket[128];

static int seed(void)
{
    return tu_put_bucket(bucket) &&
           tu_put_collection(bucket, "docs",
                             "{\"type\": \"object\", \"properties\": {"
                             "\"title\": {\"type\": \"string\", \"x-tether-code\": 601},"
                             "\"body\": {\"type\": \"string\"},"
                             "\"rev\": {\"type\": \"integer\"}}}") &&
           tu_put_record(bucket, "docs", "d1", "{\"title\": \"one\", \"body\": \"first\", \"rev\": 1}") &&
           tu_put_record(bucket, "docs", "d2", "{\"title\": \"two\", \"body\": \"second\", \"rev\": 1}") &&
           tu_put_record(bucket, "docs", "d3", "{\"title\": \"three\", \"body\": \"third\", \"rev\": 1}");
}

static void test_peek_get_observe(tether_context *ctx)
{
    tether_object *d1 = NULL;
    tether_observer *o_title = NULL, *o_peek = NULL, *o_body = NULL;
    tu_obs ot, op, ob;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    char buf[256];

    tu_section("peek answers from the cache");
    CHECK_OK(tether_context_object(ctx, "docs", "d1", &d1));
    if (!d1)
        return;
    CHECK_OK(tu_peek_text(d1, "title", buf, sizeof buf));
    CHECK_STR(buf, "one");
    if (CHECK_OK(tether_object_peek_code(d1, 601, &v)) == TETHER_OK)
        CHECK_STR(v.text, "one");
    tether_value_free(&v);

    tu_section("misuse of peek/get/observe");
    CHECK_STATUS(tether_object_peek(d1, "nosuch", &v), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_object_get(d1, "nosuch", &v), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_object_peek(d1, "titlePeek", &v), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_object_peek(d1, "tit\xffle", &v), TETHER_E_INVALID);
    CHECK_STATUS(tether_object_get(d1, "\xc0\xaf", &v), TETHER_E_INVALID);
    CHECK_STATUS(tether_object_peek_code(d1, 999999, &v), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_object_get_code(d1, -1, &v), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_object_peek(d1, NULL, &v), TETHER_E_MISUSE);
    CHECK_STATUS(tether_object_peek(d1, "title", NULL), TETHER_E_MISUSE);
    CHECK_STATUS(tether_object_get(d1, "title", NULL), TETHER_E_MISUSE);
    CHECK_INT(v.type, TETHER_TYPE_NULL);
    {
        tether_observer *x = NULL;
        CHECK_STATUS(tether_object_observe(d1, "nosuch", tu_obs_cb, NULL, &x), TETHER_E_NOT_FOUND);
        CHECK_STATUS(tether_object_observe(d1, "nosuchPeek", tu_obs_cb, NULL, &x), TETHER_E_NOT_FOUND);
        CHECK_STATUS(tether_object_observe(d1, "Peek", tu_obs_cb, NULL, &x), TETHER_E_NOT_FOUND);
        CHECK_STATUS(tether_object_observe(d1, "title\xff", tu_obs_cb, NULL, &x), TETHER_E_INVALID);
        CHECK_STATUS(tether_object_observe(d1, NULL, tu_obs_cb, NULL, &x), TETHER_E_MISUSE);
        CHECK_STATUS(tether_object_observe(d1, "title", NULL, NULL, &x), TETHER_E_MISUSE);
        CHECK(x == NULL);
    }

    tu_section("server change: peek keeps the old value, get refreshes, observers told");
    tu_obs_init(&ot, d1, "title", "title");
    tu_obs_init(&op, d1, "titlePeek", "title");
    tu_obs_init(&ob, d1, "body", "body");
    CHECK_OK(tu_observe(&ot, &o_title));
    CHECK_OK(tu_observe(&op, &o_peek));
    CHECK_OK(tu_observe(&ob, &o_body));
    CHECK(o_title != NULL && o_peek != NULL && o_title != o_peek);

    CHECK(tu_patch_record(bucket, "docs", "d1", "{\"title\": \"uno\"}"));
    CHECK_OK(tu_peek_text(d1, "title", buf, sizeof buf));
    CHECK_STR(buf, "one"); /* peek never touches the network */
    tu_sleep_ms(300);
    CHECK_OK(tu_peek_text(d1, "title", buf, sizeof buf));
    CHECK_STR(buf, "one");
    CHECK_INT(tu_obs_changes(&ot), 0);

    if (CHECK_OK(tether_object_get(d1, "title", &v)) == TETHER_OK) {
        CHECK_INT(v.type, TETHER_TYPE_TEXT);
        CHECK_STR(v.text, "one"); /* the cached value, at once */
    }
    tether_value_free(&v);
    CHECK(tu_obs_wait_changes(&ot, 1, TU_WAIT_MS));
    CHECK(tu_obs_wait_changes(&op, 1, TU_WAIT_MS));
    tu_sleep_ms(300);
    CHECK_INT(tu_obs_changes(&ot), 1);
    CHECK_INT(tu_obs_changes(&op), 1);
    CHECK_STR(ot.peeked, "uno");
    CHECK_STR(op.peeked, "uno");
    CHECK_INT(ot.wrong_obj + op.wrong_obj, 0);
    CHECK_INT(ot.wrong_key + op.wrong_key, 0); /* key as observed: "title", "titlePeek" */
    CHECK_INT(ot.off_main, 1);
    CHECK_INT(tu_obs_changes(&ob), 0); /* body did not change */
    CHECK_OK(tu_peek_text(d1, "title", buf, sizeof buf));
    CHECK_STR(buf, "uno");
    CHECK_OK(tu_peek_text(d1, "body", buf, sizeof buf));
    CHECK_STR(buf, "first");

    tu_section("get by code refreshes too");
    CHECK(tu_patch_record(bucket, "docs", "d1", "{\"title\": \"eins\", \"body\": \"erste\"}"));
    if (CHECK_OK(tether_object_get_code(d1, 601, &v)) == TETHER_OK)
        CHECK_STR(v.text, "uno");
    tether_value_free(&v);
    CHECK(tu_obs_wait_changes(&ot, 2, TU_WAIT_MS));
    CHECK(tu_obs_wait_changes(&ob, 1, TU_WAIT_MS));
    CHECK_STR(ot.peeked, "eins");
    CHECK_STR(ob.peeked, "erste");
    CHECK(tu_obs_wait_changes(&op, 2, TU_WAIT_MS));

    tu_section("remove: one final cancelled callback, then HANDLE");
    CHECK_OK(tether_observer_cancel(o_peek));
    CHECK(tu_obs_wait_cancel(&op, TU_WAIT_MS));
    CHECK_STATUS(tether_observer_cancel(o_peek), TETHER_E_HANDLE);
    CHECK(tu_patch_record(bucket, "docs", "d1", "{\"title\": \"un\"}"));
    tether_object_get(d1, "title", &v);
    tether_value_free(&v);
    CHECK(tu_obs_wait_changes(&ot, 3, TU_WAIT_MS));
    tu_sleep_ms(300);
    CHECK_INT(tu_obs_changes(&op), 2); /* nothing after removal */
    CHECK_INT(tu_obs_cancels(&op), 1);
    CHECK_INT(op.after_cancel, 0);
    CHECK_OK(tether_observer_cancel(o_title));
    CHECK_OK(tether_observer_cancel(o_body));
    CHECK(tu_obs_wait_cancel(&ot, TU_WAIT_MS));
    CHECK(tu_obs_wait_cancel(&ob, TU_WAIT_MS));
    CHECK_OK(tether_object_free(d1));
    tu_obs_destroy(&ot);
    tu_obs_destroy(&op);
    tu_obs_destroy(&ob);
}

static void test_remove_in_callback(tether_context *ctx)
{
    tether_object *d1 = NULL;
    tether_observer *x = NULL;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    tu_obs o;

    tu_section("an observer removed from inside its own callback");
    CHECK_OK(tether_context_object(ctx, "docs", "d1", &d1));
    if (!d1)
        return;
    tu_obs_init(&o, d1, "rev", "rev");
    CHECK_OK(tu_observe(&o, &x));
    o.remove_in_cb = x;
    CHECK(tu_patch_record(bucket, "docs", "d1", "{\"rev\": 2}"));
    tether_object_get(d1, "rev", &v);
    tether_value_free(&v);
    CHECK(tu_obs_wait_changes(&o, 1, TU_WAIT_MS));
    CHECK(tu_obs_wait_cancel(&o, TU_WAIT_MS));
    tu_sleep_ms(100);
    CHECK_CODE(o.remove_in_cb_status, TETHER_OK);
    CHECK_STR(o.peeked, "2");
    CHECK_INT(tu_obs_changes(&o), 1);
    CHECK_INT(tu_obs_cancels(&o), 1);
    CHECK_INT(o.after_cancel, 0);
    CHECK_OK(tether_object_free(d1));
    tu_obs_destroy(&o);
}

static void test_uncached_and_deleted(tether_context *ctx)
{
    tether_object *d2 = NULL, *ghost = NULL, *late = NULL;
    tether_observer *x = NULL;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    tu_obs o2, ol;
    char buf[256];
    int64_t end, ver;
    int s;

    tu_section("uncached record: NOT_CACHED, then get brings it");
    CHECK(tu_put_record(bucket, "docs", "d9", "{\"title\": \"nine\"}"));
    CHECK_OK(tether_context_object(ctx, "docs", "d9", &late));
    if (late) {
        tu_obs_init(&ol, late, "title", "title");
        CHECK_OK(tu_observe(&ol, &x));
        CHECK_STATUS(tether_object_peek(late, "title", &v), TETHER_E_NOT_CACHED);
        CHECK_STATUS(tether_object_version(late, &ver), TETHER_E_NOT_CACHED);
        CHECK_STATUS(tether_object_get(late, "title", &v), TETHER_E_NOT_CACHED);
        end = tu_now_ms() + TU_WAIT_MS;
        while ((s = tu_peek_text(late, "title", buf, sizeof buf)) == TETHER_E_NOT_CACHED &&
               tu_now_ms() < end)
            tu_sleep_ms(50);
        CHECK_STATUS(s, TETHER_OK);
        CHECK_STR(buf, "nine");
        CHECK(tu_obs_wait_changes(&ol, 1, TU_WAIT_MS));
        CHECK_STR(ol.peeked, "nine");
        CHECK_OK(tether_observer_cancel(x));
        CHECK(tu_obs_wait_cancel(&ol, TU_WAIT_MS));
        CHECK_OK(tether_object_free(late));
        tu_obs_destroy(&ol);
    }

    tu_section("a record the server does not have: NOT_FOUND after the refresh");
    CHECK_OK(tether_context_object(ctx, "docs", "ghost", &ghost));
    if (ghost) {
        CHECK_STATUS(tether_object_get(ghost, "title", &v), TETHER_E_NOT_CACHED);
        end = tu_now_ms() + TU_WAIT_MS;
        while ((s = tether_object_peek(ghost, "title", &v)) == TETHER_E_NOT_CACHED && tu_now_ms() < end)
            tu_sleep_ms(50);
        CHECK_STATUS(s, TETHER_E_NOT_FOUND);
        /* A wrong id, not a deletion (issue 22, case 10). */
        CHECK_STR(tether_errmsg(), "no record docs/ghost on the server");
        tether_value_free(&v);
        CHECK_OK(tether_object_free(ghost));
        ghost = NULL;
    }
    CHECK_STATUS(tether_context_object(ctx, "nosuch", "d1", &ghost), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_context_object(ctx, "docs", "d\xff", &ghost), TETHER_E_INVALID);
    CHECK_STATUS(tether_context_object(ctx, "docs", NULL, &ghost), TETHER_E_MISUSE);
    CHECK_STATUS(tether_context_object(ctx, "docs", "d1", NULL), TETHER_E_MISUSE);
    CHECK(ghost == NULL);

    tu_section("deleted on the server: observer told, peek NOT_FOUND");
    CHECK_OK(tether_context_object(ctx, "docs", "d2", &d2));
    if (d2) {
        tu_obs_init(&o2, d2, "title", NULL);
        CHECK_OK(tu_observe(&o2, &x));
        CHECK_OK(tu_peek_text(d2, "title", buf, sizeof buf));
        CHECK_STR(buf, "two");
        CHECK(tu_delete_record(bucket, "docs", "d2"));
        s = tether_object_get(d2, "title", &v);
        CHECK(s == TETHER_OK); /* the cached value, at once */
        tether_value_free(&v);
        CHECK(tu_obs_wait_changes(&o2, 1, TU_WAIT_MS));
        CHECK_STATUS(tether_object_peek(d2, "title", &v), TETHER_E_NOT_FOUND);
        CHECK_STR(tether_errmsg(), "docs/d2 was deleted");
        CHECK_OK(tether_observer_cancel(x));
        CHECK(tu_obs_wait_cancel(&o2, TU_WAIT_MS));
        CHECK_OK(tether_object_free(d2));
        tu_obs_destroy(&o2);
    }
}

static void test_staleness(const char *store)
{
    tether_context_options o;
    tether_kinto_options k;
    tether_context *ctx = NULL;
    tether_object *d3 = NULL;
    tether_observer *x = NULL;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    tu_obs ob, unowned;

    tu_section("staleness window: get skips its refresh while the value is young");
    tether_context_options_init(&o, TETHER_CONTEXT_OPTIONS_VERSION);
    tether_kinto_options_init(&k, TETHER_KINTO_OPTIONS_VERSION);
    k.server_url = tu_url();
    k.bucket = bucket;
    o.store_path = store;
    k.username = "test";
    k.password = "test";
    o.staleness_ms = 600000;
    if (CHECK_OK(tether_context_open_kinto(&o, &k, &ctx)) != TETHER_OK)
        return;
    tu_fetch_all(ctx, "docs"); /* d3 is fresh now */
    CHECK_OK(tether_context_object(ctx, "docs", "d3", &d3));
    tu_obs_init(&ob, d3, "title", "title");
    CHECK_OK(tu_observe(&ob, &x));
    /* `out` may be NULL: an observer nobody can remove, ended by close. */
    tu_obs_init(&unowned, d3, "body", NULL);
    CHECK_OK(tether_object_observe(d3, "body", tu_obs_cb, &unowned, NULL));
    CHECK(tu_patch_record(bucket, "docs", "d3", "{\"title\": \"drei\"}"));
    if (CHECK_OK(tether_object_get(d3, "title", &v)) == TETHER_OK)
        CHECK_STR(v.text, "three");
    tether_value_free(&v);
    tu_sleep_ms(1500);
    CHECK_INT(tu_obs_changes(&ob), 0);
    /* The observer holds its object: with the host's reference gone it is
     * still told, with the same handle, and can read it in the callback. */
    CHECK_OK(tether_object_free(d3));
    /* A fetch still brings the change, and tells the observer. */
    tu_fetch_all(ctx, "docs");
    CHECK(tu_obs_wait_changes(&ob, 1, TU_WAIT_MS));
    CHECK_STR(ob.peeked, "drei");
    CHECK_INT(ob.wrong_obj, 0);
    CHECK_CODE(ob.peek_status, TETHER_OK);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    CHECK_INT(tu_obs_cancels(&ob), 1); /* close ended the observer */
    CHECK_INT(tu_obs_cancels(&unowned), 1);
    CHECK_INT(unowned.changes + unowned.others + unowned.after_cancel, 0);
    CHECK_STATUS(tether_object_free(d3), TETHER_E_HANDLE);
    tu_obs_destroy(&ob);
    tu_obs_destroy(&unowned);
}

int main(int argc, char **argv)
{
    char store[512];
    tether_context *ctx;
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-observe");
    tu_store_path(store, sizeof store, "observe");
    if (!CHECK(seed()))
        return tu_finish();
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (ctx) {
        tu_fetch_all(ctx, "docs");
        test_peek_get_observe(ctx);
        test_remove_in_callback(ctx);
        test_uncached_and_deleted(ctx);
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }
    test_staleness(store);
    return tu_finish();
}
