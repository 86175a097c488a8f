/* test_local_stores.c — a local-only store attached beside the server's
 * (tether_local_store, context options v4): its entities in the model,
 * edits saved to its file and never to Kinto, references to server records
 * by object URI, their clean-up when Kinto deletes the target, and misuse. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static char bucket[128];
static char store[512];
static char private_store[600];

static const char *specs =
    "{\"notes\": {\"type\": \"object\", \"required\": [\"Text\"], \"properties\": {"
    "  \"Text\": {\"type\": \"string\", \"x-tether-code\": 10},"
    "  \"Item\": {\"type\": \"string\", \"x-tether-to\": \"items\", \"x-tether-inverse\": \"notes\"}}}}";

static tether_context *open_with(const tether_local_store *stores, size_t count, int *status)
{
    tether_context_options o;
    tether_kinto_options k;
    tether_context *ctx = NULL;
    tu_options(&o, &k, tu_url(), bucket, store, TETHER_DELIVER_THREAD, 20000);
    o.local_stores = stores;
    o.local_store_count = count;
    *status = tether_context_open_kinto(&o, &k, &ctx);
    return ctx;
}

static tether_context *open_private(void)
{
    tether_local_store local;
    int status = 0;
    tether_context *ctx;
    CHECK_OK(tether_local_store_init(&local, TETHER_LOCAL_STORE_VERSION));
    local.configuration = "private";
    local.path = private_store;
    local.specs_json = specs;
    ctx = open_with(&local, 1, &status);
    CHECK_CODE(status, TETHER_OK);
    return ctx;
}

static void test_misuse(void)
{
    tether_local_store local;
    int status = 0;
    tu_section("bad local stores");
    CHECK_STATUS(tether_local_store_init(NULL, TETHER_LOCAL_STORE_VERSION), TETHER_E_MISUSE);
    CHECK_STATUS(tether_local_store_init(&local, TETHER_LOCAL_STORE_VERSION + 1), TETHER_E_MISUSE);
    memset(&local, 0x5a, sizeof local);
    CHECK_OK(tether_local_store_init(&local, TETHER_LOCAL_STORE_VERSION));
    CHECK(local.configuration == NULL && local.path == NULL && local.specs_json == NULL);

    CHECK(open_with(NULL, 1, &status) == NULL);
    CHECK_INT(status, TETHER_E_MISUSE);
    CHECK(open_with(&local, 1, &status) == NULL); /* its fields are NULL */
    CHECK_INT(status, TETHER_E_MISUSE);
    local.configuration = "private";
    local.path = private_store;
    local.specs_json = "{\"notes\": ";
    CHECK(open_with(&local, 1, &status) == NULL);
    CHECK_INT(status, TETHER_E_INVALID);
    CHECK(strstr(tether_errmsg(), "not JSON") != NULL);
    local.specs_json = specs;
    local.configuration = "server";
    CHECK(open_with(&local, 1, &status) == NULL);
    CHECK_INT(status, TETHER_E_INVALID);
    local.configuration = "private";
    local.version = 7;
    CHECK(open_with(&local, 1, &status) == NULL);
    CHECK_INT(status, TETHER_E_MISUSE);
    CHECK(!tu_file_exists(store) && !tu_file_exists(private_store)); /* a failed open leaves no file */
}

static void test_model_and_save(void)
{
    tether_context *ctx = open_private();
    tether_entity *notes = NULL, *items = NULL, *target = NULL;
    tether_object *note = NULL, *item = NULL, *again = NULL, *related = NULL;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    const char *text = NULL;
    char buf[256], uri[256], path[512], id[128];
    size_t saved = 0;
    int code = 0;
    tu_section("a local entity beside the server's");
    if (!ctx)
        return;
    CHECK_OK(tether_context_entity(ctx, "notes", &notes));
    CHECK_OK(tether_context_entity(ctx, "items", &items));
    CHECK_OK(tether_entity_configuration(notes, &text));
    CHECK_STR(text, "private");
    CHECK_OK(tether_entity_configuration(items, &text));
    CHECK_STR(text, "");
    CHECK_OK(tether_entity_attribute_index_by_code(notes, 10, &saved));
    CHECK_OK(tether_entity_attribute_at(notes, saved, &text, &code, NULL, NULL));
    CHECK_STR(text, "Text");
    CHECK_OK(tether_entity_attribute_index(notes, "Item", &saved));
    CHECK_OK(tether_entity_attribute_target(notes, saved, &target, NULL));
    CHECK(target == items);

    tu_section("a note on a server record, saved to the local file only");
    tu_fetch_all(ctx, "items");
    CHECK_OK(tether_context_insert(ctx, "notes", NULL, &note));
    CHECK_OK(tether_context_object(ctx, "items", "i1", &item));
    v.type = TETHER_TYPE_TEXT;
    v.text = (char *)"look again";
    v.length = strlen(v.text);
    CHECK_OK(tether_object_set(note, "Text", &v));
    CHECK_STATUS(tether_object_set_related(note, "Item", note), TETHER_E_TYPE);
    CHECK_STATUS(tether_object_set_related(note, "Text", item), TETHER_E_INVALID);
    CHECK_OK(tether_object_set_related(note, "Item", item));
    CHECK_OK(tu_peek_text(note, "Item", buf, sizeof buf));
    CHECK_STR(buf, "tether://server/items/i1");
    CHECK_OK(tu_peek_text(note, "Item.Title", buf, sizeof buf));
    CHECK_STR(buf, "item 1");
    v.text = (char *)"i1"; /* a bare id is not the URI a cross-store reference holds */
    v.length = 2;
    CHECK_STATUS(tether_object_set(note, "Item", &v), TETHER_E_INVALID);
    CHECK_CODE(tu_save(ctx, &saved), TETHER_OK);
    CHECK_INT(saved, 1);
    snprintf(path, sizeof path, "/buckets/%s/collections/notes", bucket);
    CHECK_INT(tu_http("GET", path, NULL, NULL), 404);

    CHECK_OK(tether_object_uri(note, &v));
    CHECK_INT(v.type, TETHER_TYPE_TEXT);
    snprintf(uri, sizeof uri, "%s", v.text ? v.text : "");
    tether_value_free(&v);
    CHECK(strncmp(uri, "tether://private/notes/", 23) == 0);
    CHECK_OK(tether_context_object_for_uri(ctx, uri, &again));
    CHECK(again == note);
    CHECK_STATUS(tether_context_object_for_uri(ctx, "tether://public/notes/x", &related), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_context_object_for_uri(ctx, "notes/x", &related), TETHER_E_INVALID);
    CHECK_STATUS(tether_object_uri(NULL, &v), TETHER_E_HANDLE);
    snprintf(id, sizeof id, "%s", tu_id(note));
    tether_object_free(again);
    tether_object_free(note);
    tether_object_free(item);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);

    tu_section("reopened: the note is there; Kinto deletes its item; the reference is cleared");
    ctx = open_private();
    if (!ctx)
        return;
    CHECK_OK(tether_context_object(ctx, "notes", id, &note));
    CHECK_OK(tu_peek_text(note, "Text", buf, sizeof buf));
    CHECK_STR(buf, "look again");
    CHECK_OK(tether_object_related(note, "Item", &related));
    CHECK_STR(tu_id(related), "i1");
    tether_object_free(related);
    CHECK(tu_delete_record(bucket, "items", "i1"));
    tu_fetch_all(ctx, "items");
    {
        int64_t deadline = tu_now_ms() + TU_WAIT_MS;
        int status = TETHER_OK;
        while (tu_now_ms() < deadline) {
            status = tether_object_peek(note, "Item", &v);
            if (status != TETHER_OK || v.type == TETHER_TYPE_NULL)
                break;
            tether_value_free(&v);
            tu_sleep_ms(10);
        }
        CHECK_CODE(status, TETHER_OK);
        CHECK_INT(v.type, TETHER_TYPE_NULL);
        tether_value_free(&v);
    }
    CHECK_OK(tether_object_related(note, "Item", &related));
    CHECK(related == NULL);
    tether_object_free(note);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-local");
    tu_store_path(store, sizeof store, "local-server");
    snprintf(private_store, sizeof private_store, "%s.private", store);
    if (!CHECK(tu_put_bucket(bucket) &&
               tu_put_collection(bucket, "items", "{\"type\": \"object\", \"properties\": {\"Title\": {\"type\": \"string\"}}}") &&
               tu_put_record(bucket, "items", "i1", "{\"Title\": \"item 1\"}") &&
               tu_put_record(bucket, "items", "i2", "{\"Title\": \"item 2\"}")))
        return tu_finish();
    test_misuse();
    test_model_and_save();
    return tu_finish();
}
