/* test_siblings.c — several contexts on one store: a sibling has its own
 * objects and unsaved changes (kept under its name); a save in one updates
 * the other's objects and tells its observers; a store file is one
 * context's (and its siblings') at a time; contexts close in any order. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static char bucket[128];

static void set_text(tether_object *obj, const char *key, const char *text)
{
    tether_value v = {TETHER_TYPE_TEXT, 0, 0.0, (char *)text, strlen(text)};
    CHECK_OK(tether_object_set(obj, key, &v));
}

static void test_siblings(const char *store)
{
    tether_context *main_ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD), *other = NULL, *again = NULL, *dup = NULL;
    tether_object *shown = NULL, *there = NULL, *n2 = NULL;
    tether_entity *e_main = NULL, *e_other = NULL;
    tether_context_options o;
    tether_kinto_options k;
    tu_obs ob;
    size_t count = 99, saved_count = 0;
    char buf[128], path[512];
    char *body = NULL;
    if (!main_ctx)
        return;
    tu_fetch_all(main_ctx, "notes");

    tu_section("open a sibling; misuse");
    CHECK_STATUS(tether_context_open_sibling(main_ctx, "", TETHER_DELIVER_THREAD, &other), TETHER_E_INVALID);
    CHECK_STATUS(tether_context_open_sibling(main_ctx, NULL, TETHER_DELIVER_THREAD, &other), TETHER_E_MISUSE);
    CHECK_STATUS(tether_context_open_sibling(main_ctx, "import", (tether_delivery)7, &other), TETHER_E_INVALID);
    CHECK_STATUS(tether_context_open_sibling(main_ctx, "import", TETHER_DELIVER_THREAD, NULL), TETHER_E_MISUSE);
    CHECK_STATUS(tether_context_open_sibling(NULL, "import", TETHER_DELIVER_THREAD, &other), TETHER_E_HANDLE);
    CHECK_OK(tether_context_open_sibling(main_ctx, "import", TETHER_DELIVER_THREAD, &other));
    if (!other)
        return;
    CHECK_STATUS(tether_context_open_sibling(main_ctx, "import", TETHER_DELIVER_THREAD, &dup), TETHER_E_INVALID);
    tu_section("a store file is one context's at a time");
    tu_options(&o, &k, tu_url(), bucket, store, TETHER_DELIVER_THREAD, 5000);
    CHECK_STATUS(tether_context_open_kinto(&o, &k, &dup), TETHER_E_BUSY);
    CHECK(strstr(tether_errmsg(), "sibling") != NULL);

    tu_section("each context its own entity handles and objects");
    CHECK_OK(tether_context_entity(main_ctx, "notes", &e_main));
    CHECK_OK(tether_context_entity(other, "notes", &e_other));
    CHECK(e_main != e_other);
    CHECK_OK(tether_context_object(main_ctx, "notes", "n1", &shown));
    CHECK_OK(tether_context_local_object(other, shown, &there));
    CHECK(there != NULL && there != shown);
    CHECK_STR(tu_id(there), "n1");
    CHECK_STATUS(tether_context_local_object(other, NULL, &there), TETHER_E_HANDLE);
    if (!shown || !there)
        return;
    tu_obs_init(&ob, shown, "title", NULL);
    CHECK_OK(tether_object_observe(shown, "title", tu_obs_cb, &ob, NULL));

    tu_section("unsaved changes are each context's own");
    set_text(there, "title", "from the import");
    CHECK_OK(tu_peek_text(shown, "title", buf, sizeof buf));
    CHECK_STR(buf, "one");
    CHECK_OK(tether_context_change_count(main_ctx, &count));
    CHECK_INT(count, 0);
    CHECK_OK(tether_context_change_count(other, &count));
    CHECK_INT(count, 1);
    CHECK_OK(tether_context_object(main_ctx, "notes", "n2", &n2));
    if (n2)
        set_text(n2, "title", "main's own");

    tu_section("a save in the sibling reaches main's object and observer");
    CHECK_CODE(tu_save(other, &saved_count), TETHER_OK);
    CHECK_INT(saved_count, 1);
    CHECK(tu_obs_wait_changes(&ob, 1, TU_WAIT_MS));
    CHECK_OK(tu_peek_text(shown, "title", buf, sizeof buf));
    CHECK_STR(buf, "from the import");
    snprintf(path, sizeof path, "/buckets/%s/collections/notes/records/n2", bucket);
    CHECK_INT(tu_http("GET", path, NULL, &body), 200);
    CHECK(body && strstr(body, "\"two\"") != NULL); /* main's change was not sent */
    free(body);
    body = NULL;

    tu_section("a sibling's changes wait under its name");
    set_text(there, "body", "later");
    CHECK_OK(tether_object_free(there));
    CHECK_INT(tether_context_close(other), TETHER_OK);
    CHECK_OK(tether_context_open_sibling(main_ctx, "import", TETHER_DELIVER_POLL, &again));
    if (again) {
        tether_object *back = NULL;
        CHECK_OK(tether_context_change_count(again, &count));
        CHECK_INT(count, 1);
        CHECK_OK(tether_context_object(again, "notes", "n1", &back));
        CHECK_OK(tu_peek_text(back, "body", buf, sizeof buf));
        CHECK_STR(buf, "later");
        tether_object_free(back);
    }

    tu_section("main closes first; the sibling goes on, then the store is free");
    CHECK_OK(tether_object_free(shown));
    if (n2)
        CHECK_OK(tether_object_free(n2));
    CHECK_INT(tether_context_close(main_ctx), TETHER_OK);
    CHECK(tu_obs_wait_cancel(&ob, TU_WAIT_MS));
    if (again) {
        CHECK_OK(tether_context_change_count(again, &count));
        CHECK_INT(count, 1);
        CHECK_INT(tether_context_close(again), TETHER_OK);
    }
    main_ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (main_ctx) {
        CHECK_OK(tether_context_change_count(main_ctx, &count));
        CHECK_INT(count, 1); /* main's own change to n2 */
        CHECK_CODE(tu_save(main_ctx, &saved_count), TETHER_OK);
        CHECK_INT(tether_context_close(main_ctx), TETHER_OK);
    }
    tu_obs_destroy(&ob);
}

int main(int argc, char **argv)
{
    char store[512];
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-siblings");
    tu_store_path(store, sizeof store, "siblings");
    if (!CHECK(tu_put_bucket(bucket) &&
               tu_put_collection(bucket, "notes",
                                 "{\"type\": \"object\", \"properties\": {"
                                 "\"title\": {\"type\": \"string\"}, \"body\": {\"type\": \"string\"}}}") &&
               tu_put_record(bucket, "notes", "n1", "{\"title\": \"one\", \"body\": \"first\"}") &&
               tu_put_record(bucket, "notes", "n2", "{\"title\": \"two\", \"body\": \"second\"}")))
        return tu_finish();
    test_siblings(store);
    return tu_finish();
}
