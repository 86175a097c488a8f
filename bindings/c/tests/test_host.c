/* test_host.c — host-written connections (tether_context_open_host): the
 * example json_host.c serving a JSON file (fetch answers twice, peek and get,
 * a save written to the file, a conflict with another writer), and a host
 * that misbehaves: never answers, answers twice, after a cancel, with
 * records that are not JSON; every request ends once and the connection is
 * released once. */
#define JSON_HOST_NO_MAIN
#include "../json_host.c"

#include "testutil.h"

#include <unistd.h>

static char data_path[600];
static char store[512];

static const char *data =
    "{\"version\": 2, \"entities\": {\"notes\": {\"id\": \"id\", \"version\": \"rev\","
    " \"schema\": {\"properties\": {\"Text\": {\"type\": \"string\", \"x-tether-code\": 7}, \"Rank\": {\"type\": \"integer\"}}},"
    " \"records\": {\"n1\": {\"id\": \"n1\", \"rev\": 1, \"Text\": \"one\", \"Rank\": 2},"
    "              \"n2\": {\"id\": \"n2\", \"rev\": 2, \"Text\": \"two\", \"Rank\": 1}}}}}";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* The record of the file, as JSON text (freed by the caller), or NULL. */
static char *file_record(const char *entity, const char *id)
{
    json_t *root = json_load_file(data_path, 0, NULL);
    json_t *record = json_object_get(json_object_get(json_object_get(json_object_get(root, "entities"), entity),
                                                     "records"), id);
    char *text = record ? json_dumps(record, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    return text;
}

static void test_json_file(void)
{
    tether_context *ctx = NULL;
    tether_object *n1 = NULL, *n2 = NULL, *made = NULL;
    tether_value v = {TETHER_TYPE_TEXT, 0, 0.0, (char *)"edited", 6};
    tu_fetch f;
    char buf[64], *record;
    size_t saved = 0;
    int64_t rank = 0;
    tu_section("a JSON file through json_host.c: fetch answers twice, sorted");
    write_file(data_path, data);
    CHECK_OK(json_host_open_context(data_path, store, TETHER_DELIVER_THREAD, &ctx));
    if (!ctx)
        return;
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "notes", "Rank", 0, TETHER_POLICY_CACHE_THEN_SERVER, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.cached, 1);
    CHECK_INT(f.final_count, 2);
    if (f.final_count == 2)
        CHECK_STR(tu_id(f.final_objs[0]), "n2"); /* Rank 1 first */
    tu_fetch_destroy(&f);

    tu_section("peek by name and by code; get");
    CHECK_OK(tether_context_object(ctx, "notes", "n1", &n1));
    CHECK_OK(tu_peek_text(n1, "Text", buf, sizeof buf));
    CHECK_STR(buf, "one");
    {
        tether_value t = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
        CHECK_OK(tether_object_peek_code(n1, 7, &t));
        CHECK_STR(t.text ? t.text : "", "one");
        tether_value_free(&t);
        CHECK_OK(tether_object_get(n1, "Rank", &t));
        CHECK_INT(t.integer, 2);
        tether_value_free(&t);
    }

    tu_section("edits and an insert saved to the file");
    CHECK_OK(tether_object_set(n1, "Text", &v));
    CHECK_OK(tether_context_insert(ctx, "notes", "n3", &made));
    CHECK_OK(tether_object_set(made, "Text", &v));
    CHECK_CODE(tu_save(ctx, &saved), TETHER_OK);
    CHECK_INT(saved, 2);
    record = file_record("notes", "n1");
    CHECK_STR(record ? record : "", "{\"Rank\":2,\"Text\":\"edited\",\"id\":\"n1\",\"rev\":3}");
    free(record);
    record = file_record("notes", "n3");
    CHECK(record != NULL && strstr(record, "\"Text\":\"edited\"") != NULL);
    free(record);
    CHECK_OK(tu_peek_int(n1, "rev", &rank));
    CHECK_INT(rank, 3);

    tu_section("another writer changes n2: the save conflicts, then the file's side wins");
    CHECK_OK(tether_context_object(ctx, "notes", "n2", &n2));
    CHECK_OK(tether_object_set(n2, "Text", &v));
    {
        json_t *root = json_load_file(data_path, 0, NULL);
        json_t *n2json = json_object_get(json_object_get(json_object_get(json_object_get(root, "entities"), "notes"),
                                                         "records"), "n2");
        json_object_set_new(n2json, "rev", json_integer(99));
        json_object_set_new(n2json, "Text", json_string("theirs"));
        json_dump_file(root, data_path, 0);
        json_decref(root);
    }
    CHECK_CODE(tu_save(ctx, NULL), TETHER_E_CONFLICT);
    CHECK_OK(tu_peek_text(n2, "Text", buf, sizeof buf));
    CHECK_STR(buf, "edited"); /* the change stays pending */
    CHECK_OK(tether_object_rollback(n2));
    {
        tu_fetch g;
        tu_fetch_init(&g);
        CHECK_OK(tu_fetch_start(ctx, &g, "notes", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
        CHECK(tu_fetch_wait(&g, TU_WAIT_MS));
        tu_fetch_destroy(&g);
    }
    CHECK_OK(tu_peek_text(n2, "Text", buf, sizeof buf));
    CHECK_STR(buf, "theirs");
    tether_object_free(n1);
    tether_object_free(n2);
    tether_object_free(made);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    CHECK_INT(tu_debug_count(TETHER_DEBUG_REQUESTS), 0);
}

/* ------------------------------------------------------------ a host that holds requests */

typedef struct holder {
    pthread_mutex_t mu;
    tether_request *requests[64];
    int count, cancels, releases;
} holder;

static void hold_request(tether_request *r, void *userdata)
{
    holder *h = userdata;
    pthread_mutex_lock(&h->mu);
    if (h->count < 64)
        h->requests[h->count++] = r;
    pthread_mutex_unlock(&h->mu);
}

static void hold_cancel(tether_request *r, void *userdata)
{
    holder *h = userdata;
    (void)r;
    pthread_mutex_lock(&h->mu);
    h->cancels++;
    pthread_mutex_unlock(&h->mu);
}

static void hold_release(void *userdata)
{
    holder *h = userdata;
    pthread_mutex_lock(&h->mu);
    h->releases++;
    pthread_mutex_unlock(&h->mu);
}

/* The n-th request (1-based) once it has come, or NULL after a while. */
static tether_request *nth(holder *h, int n)
{
    int64_t deadline = tu_now_ms() + TU_WAIT_MS;
    tether_request *r = NULL;
    while (!r && tu_now_ms() < deadline) {
        pthread_mutex_lock(&h->mu);
        if (h->count >= n)
            r = h->requests[n - 1];
        pthread_mutex_unlock(&h->mu);
        if (!r)
            tu_sleep_ms(2);
    }
    return r;
}

static int counted(holder *h, int *field)
{
    int value;
    pthread_mutex_lock(&h->mu);
    value = *field;
    pthread_mutex_unlock(&h->mu);
    return value;
}

typedef struct opener {
    tether_context_options opts;
    tether_connection connection;
    tether_context *ctx;
    int status;
} opener;

static void *open_thread(void *arg)
{
    opener *o = arg;
    o->status = tether_context_open_host(&o->opts, &o->connection, &o->ctx);
    return NULL;
}

static void test_misbehaving_host(void)
{
    holder h;
    opener o;
    pthread_t thread;
    tether_request *r;
    tether_request_kind_t kind = (tether_request_kind_t)9;
    const char *name = NULL, *cursor = (const char *)1;
    tu_fetch f;
    tether_task *task = NULL;
    tether_object *obj = NULL;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    char second_store[512];
    memset(&h, 0, sizeof h);
    pthread_mutex_init(&h.mu, NULL);
    tu_store_path(second_store, sizeof second_store, "host-held");

    tu_section("open answers server info and specs from another thread");
    memset(&o, 0, sizeof o);
    CHECK_OK(tether_context_options_init(&o.opts, TETHER_CONTEXT_OPTIONS_VERSION));
    o.opts.store_path = second_store;
    CHECK_OK(tether_connection_init(&o.connection, TETHER_CONNECTION_VERSION));
    o.connection.identity = "holder";
    o.connection.request = hold_request;
    o.connection.cancel = hold_cancel;
    o.connection.release = hold_release;
    o.connection.userdata = &h;
    pthread_create(&thread, NULL, open_thread, &o);
    r = nth(&h, 1);
    CHECK_OK(tether_request_kind(r, &kind));
    CHECK_INT(kind, TETHER_REQUEST_SERVER_INFO);
    CHECK_STATUS(tether_request_set_count(r, 3), TETHER_E_MISUSE);
    CHECK_STATUS(tether_request_entity(r, &name, NULL), TETHER_E_MISUSE);
    CHECK_OK(tether_request_set_server_info(r, "holder", "0"));
    CHECK_OK(tether_request_complete(r, TETHER_OK, NULL));
    CHECK_STATUS(tether_request_complete(r, TETHER_OK, NULL), TETHER_E_HANDLE); /* twice */
    r = nth(&h, 2);
    CHECK_STATUS(tether_request_add_spec(r, "notes", "id", "rev", "[1]", TETHER_OP_FETCH), TETHER_E_INVALID);
    CHECK_STATUS(tether_request_add_spec(r, "notes", "id", "rev", "{\"properties\": {", TETHER_OP_FETCH), TETHER_E_INVALID);
    CHECK_OK(tether_request_add_spec(r, "notes", "id", "rev", "{\"properties\": {\"Text\": {\"type\": \"string\"}}}",
                                     TETHER_OP_FETCH | TETHER_OP_UPDATE));
    CHECK_OK(tether_request_complete(r, TETHER_OK, NULL));
    pthread_join(thread, NULL);
    CHECK_CODE(o.status, TETHER_OK);
    if (!o.ctx)
        return;

    tu_section("a page: read, bad records refused, answered");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(o.ctx, &f, "notes", "-Text", 0, TETHER_POLICY_SERVER_ONLY, NULL));
    r = nth(&h, 3);
    CHECK_OK(tether_request_kind(r, &kind));
    CHECK_INT(kind, TETHER_REQUEST_PAGE);
    CHECK_OK(tether_request_entity(r, &name, NULL));
    CHECK_STR(name, "notes");
    CHECK_OK(tether_request_cursor(r, &cursor));
    CHECK(cursor == NULL);
    {
        /* The library sorts what the host lists: it asks for id order alone. */
        size_t count = 9;
        const char *field = NULL;
        int descending = 1;
        CHECK_OK(tether_request_sort_count(r, &count));
        CHECK_INT(count, 1);
        CHECK_OK(tether_request_sort_at(r, 0, &field, &descending));
        CHECK_STR(field, "id");
        CHECK_INT(descending, 0);
    }
    CHECK_STATUS(tether_request_add_record(r, "[]"), TETHER_E_INVALID);
    CHECK_STATUS(tether_request_add_record(r, "{\"id\": "), TETHER_E_INVALID);
    CHECK_STATUS(tether_request_add_record(r, NULL), TETHER_E_MISUSE);
    CHECK_OK(tether_request_add_record(r, "{\"id\": \"a\", \"rev\": 1, \"Text\": \"held\", \"Extra\": [1]}"));
    CHECK_OK(tether_request_add_record(r, "{\"id\": \"b\", \"rev\": 1, \"Text\": 5}")); /* off spec: kept */
    {   /* typed values, no JSON to write */
        const char *names[] = {"id", "rev", "Text", "Extra"};
        tether_value values[4] = {{TETHER_TYPE_TEXT, 0, 0.0, (char *)"c", 1}, {TETHER_TYPE_INTEGER, 4, 0.0, NULL, 0},
                                  {TETHER_TYPE_TEXT, 0, 0.0, (char *)"typed", 5},
                                  {TETHER_TYPE_JSON, 0, 0.0, (char *)"[true]", 6}};
        tether_value bad = {TETHER_TYPE_JSON, 0, 0.0, (char *)"[tru", 4};
        CHECK_STATUS(tether_request_add_record_values(r, names, NULL, 4), TETHER_E_MISUSE);
        CHECK_STATUS(tether_request_add_record_values(r, names + 3, &bad, 1), TETHER_E_INVALID);
        CHECK_OK(tether_request_add_record_values(r, names, values, 4));
    }
    CHECK_OK(tether_request_set_page(r, NULL, -1, 3));
    CHECK_OK(tether_request_complete(r, TETHER_OK, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 3);
    tu_fetch_destroy(&f);
    {
        tether_object *typed = NULL;
        char text[32];
        CHECK_OK(tether_context_object(o.ctx, "notes", "c", &typed));
        CHECK_OK(tu_peek_text(typed, "Text", text, sizeof text));
        CHECK_STR(text, "typed");
        tether_object_free(typed);
    }

    tu_section("cancelled before its answer: one final CANCELLED; the host is told; its answer dropped");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(o.ctx, &f, "notes", NULL, 1, TETHER_POLICY_SERVER_ONLY, &task));
    r = nth(&h, 4);
    {
        /* A limit that stops the listing early: ordered by id alone, the
         * cache's order with no sort key, so the host's cut is the cache's. */
        size_t count = 0;
        const char *field = NULL;
        int descending = 1;
        CHECK_OK(tether_request_sort_count(r, &count));
        CHECK_INT(count, 1);
        CHECK_OK(tether_request_sort_at(r, 0, &field, &descending));
        CHECK_STR(field, "id");
        CHECK_INT(descending, 0);
        CHECK_STATUS(tether_request_sort_at(r, 1, &field, &descending), TETHER_E_NOT_FOUND);
    }
    CHECK_OK(tu_fetch_cancel(&f, task));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
    CHECK_INT(f.finals, 1);
    {
        int64_t deadline = tu_now_ms() + TU_WAIT_MS;
        while (counted(&h, &h.cancels) < 1 && tu_now_ms() < deadline)
            tu_sleep_ms(2);
    }
    CHECK_INT(counted(&h, &h.cancels), 1);
    CHECK_STATUS(tether_request_add_record(r, "{\"id\": \"c\", \"rev\": 1}"), TETHER_E_CANCELLED);
    CHECK_STATUS(tether_request_complete(r, TETHER_OK, NULL), TETHER_E_CANCELLED);
    CHECK_STATUS(tether_request_complete(r, TETHER_OK, NULL), TETHER_E_HANDLE);
    tu_fetch_destroy(&f);

    tu_section("a failure from the host reaches the fetch; a get's refresh is never answered");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(o.ctx, &f, "notes", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
    r = nth(&h, 5);
    CHECK_OK(tether_request_complete(r, TETHER_E_AUTH, "no entry"));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_E_AUTH);
    CHECK(strstr(f.final_message, "no entry") != NULL);
    tu_fetch_destroy(&f);
    CHECK_OK(tether_context_object(o.ctx, "notes", "a", &obj));
    CHECK_OK(tether_object_get(obj, "Text", &v)); /* cached: held; its refresh goes to the host */
    CHECK_STR(v.text ? v.text : "", "held");
    tether_value_free(&v);
    r = nth(&h, 6);
    {
        size_t count = 0;
        const char *id = NULL;
        CHECK_OK(tether_request_kind(r, &kind));
        CHECK_INT(kind, TETHER_REQUEST_RECORDS);
        CHECK_OK(tether_request_id_count(r, &count));
        CHECK_INT(count, 1);
        CHECK_OK(tether_request_id_at(r, 0, &id));
        CHECK_STR(id, "a");
    }
    CHECK_INT(tu_debug_count(TETHER_DEBUG_REQUESTS), 1);

    tu_section("close ends the request never answered, tells the host, releases it once");
    tether_object_free(obj);
    CHECK_INT(tether_context_close(o.ctx), TETHER_OK);
    CHECK_INT(counted(&h, &h.cancels), 2);
    CHECK_INT(counted(&h, &h.releases), 1);
    CHECK_INT(tu_debug_count(TETHER_DEBUG_REQUESTS), 0);
    CHECK_STATUS(tether_request_complete(r, TETHER_OK, NULL), TETHER_E_HANDLE);
    pthread_mutex_destroy(&h.mu);
}

static void test_misuse(void)
{
    tether_context_options opts;
    tether_connection connection;
    tether_context *ctx = NULL;
    holder h;
    tu_section("bad connections: refused, and released all the same");
    memset(&h, 0, sizeof h);
    pthread_mutex_init(&h.mu, NULL);
    CHECK_STATUS(tether_connection_init(NULL, TETHER_CONNECTION_VERSION), TETHER_E_MISUSE);
    CHECK_STATUS(tether_connection_init(&connection, 99), TETHER_E_MISUSE);
    CHECK_OK(tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION));
    opts.store_path = store;
    CHECK_STATUS(tether_context_open_host(&opts, NULL, &ctx), TETHER_E_MISUSE);
    CHECK_OK(tether_connection_init(&connection, TETHER_CONNECTION_VERSION));
    connection.release = hold_release;
    connection.userdata = &h;
    CHECK_STATUS(tether_context_open_host(&opts, &connection, &ctx), TETHER_E_MISUSE); /* no request callback */
    CHECK_INT(counted(&h, &h.releases), 1);
    connection.request = hold_request;
    CHECK_STATUS(tether_context_open_host(&opts, &connection, &ctx), TETHER_E_MISUSE); /* no identity */
    CHECK_INT(counted(&h, &h.releases), 2);
    connection.identity = "";
    CHECK_STATUS(tether_context_open_host(&opts, &connection, &ctx), TETHER_E_INVALID);
    CHECK_INT(counted(&h, &h.releases), 3);
    CHECK(ctx == NULL);
    CHECK_STATUS(tether_request_complete(NULL, TETHER_OK, NULL), TETHER_E_HANDLE);
    CHECK_STATUS(tether_request_add_record((tether_request *)(uintptr_t)0x7fff0000, "{}"), TETHER_E_HANDLE);
    pthread_mutex_destroy(&h.mu);
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_init(argv[0]);
    tu_store_path(store, sizeof store, "host");
    snprintf(data_path, sizeof data_path, "%s.json", store);
    test_json_file();
    test_misbehaving_host();
    test_misuse();
    remove(data_path);
    return tu_finish();
}
