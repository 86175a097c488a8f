/* test_outbox.c — the outbox keeps every change under its context and sends
 * it once (issue 22): an insert with no value set survives a close; a save
 * leaves no outbox row behind, and a sibling opened under an entity's name
 * inherits nothing; a retry after a save cut off recognizes the write the
 * server applied as its own; a save with a required field missing sends
 * nothing; a close with unsaved changes says so; a store file that is not
 * Tether's is refused and left byte for byte as it was.
 * Cut-off saves are made with a proxy that holds back the server's answers,
 * then a close (what a kill leaves: the server applied writes whose answers
 * the outbox never saw); test_kill kills for real. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

static char bucket[128];

#define SCHEMA "{\"type\": \"object\", \"properties\": {\"N\": {\"type\": \"integer\"}, \"Tag\": {\"type\": \"string\"}}}"

typedef struct saved {
    pthread_mutex_t mu;
    int done, status;
    char message[512];
    char first_failure[512]; /* the report's first failure's message, if any */
} saved;

static void on_save(tether_task *task, int status, const char *message, tether_save_report *report, void *userdata)
{
    saved *s = userdata;
    size_t failures = 0;
    const char *failure = NULL;
    (void)task;
    if (report && tether_save_report_failure_count(report, &failures) == TETHER_OK && failures > 0)
        tether_save_report_failure_at(report, 0, NULL, NULL, &failure);
    pthread_mutex_lock(&s->mu);
    s->status = status;
    snprintf(s->message, sizeof s->message, "%s", message ? message : "");
    snprintf(s->first_failure, sizeof s->first_failure, "%s", failure ? failure : "");
    s->done = 1;
    pthread_mutex_unlock(&s->mu);
}

/* Saves under `policy` (-1: the context's) and waits; the status, and the
 * message into s->message. */
static int save_with(tether_context *ctx, int policy, saved *s)
{
    tether_save_options o;
    int64_t deadline = tu_now_ms() + TU_WAIT_MS;
    int done = 0;
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    tether_save_options_init(&o, TETHER_SAVE_OPTIONS_VERSION);
    o.merge_policy = policy;
    if (CHECK_OK(tether_save_start(ctx, &o, on_save, s, NULL)) != TETHER_OK)
        return TETHER_E_ERROR;
    while (!done && tu_now_ms() < deadline) {
        tu_sleep_ms(5);
        pthread_mutex_lock(&s->mu);
        done = s->done;
        pthread_mutex_unlock(&s->mu);
    }
    return done ? s->status : TETHER_E_ERROR;
}

static size_t change_count(tether_context *ctx)
{
    size_t n = 99999;
    CHECK_OK(tether_context_change_count(ctx, &n));
    return n;
}

static void set_int(tether_object *obj, const char *key, int64_t n)
{
    tether_value v = {TETHER_TYPE_INTEGER, n, 0.0, NULL, 0};
    CHECK_OK(tether_object_set(obj, key, &v));
}

static void set_text(tether_object *obj, const char *key, const char *text)
{
    tether_value v = {TETHER_TYPE_TEXT, 0, 0.0, (char *)text, strlen(text)};
    CHECK_OK(tether_object_set(obj, key, &v));
}

/* The record's HTTP status on the server; its body into *out (free it) if not NULL. */
static long server_record(const char *collection, const char *id, char **out)
{
    char path[512];
    snprintf(path, sizeof path, "/buckets/%s/collections/%s/records/%s", bucket, collection, id);
    return tu_http("GET", path, NULL, out);
}

static int server_has(const char *collection, const char *id, const char *fragment)
{
    char *body = NULL;
    int ok = server_record(collection, id, &body) == 200 && body && strstr(body, fragment) != NULL;
    if (!ok)
        printf("  %s/%s on the server: %s (wanted %s)\n", collection, id, body ? body : "(none)", fragment);
    free(body);
    return ok;
}

/* ---------------------------------------------------------------- case 1 */

static void test_insert_without_values(void)
{
    char store[512];
    tether_context *ctx;
    tether_object *obj = NULL;
    char id[64];
    saved s;
    tu_section("an insert with no value set survives a clean close and is saved after the reopen");
    CHECK(tu_put_collection(bucket, "plain", SCHEMA));
    tu_store_path(store, sizeof store, "bare");
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return;
    CHECK_OK(tether_context_insert(ctx, "plain", NULL, &obj));
    snprintf(id, sizeof id, "%s", tu_id(obj));
    tether_object_free(obj);
    CHECK_INT(change_count(ctx), 1);
    CHECK_OK(tether_context_close(ctx));
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return;
    CHECK_INT(change_count(ctx), 1);
    CHECK_CODE(save_with(ctx, -1, &s), TETHER_OK);
    CHECK_INT(change_count(ctx), 0);
    CHECK_INT(server_record("plain", id, NULL), 200);
    CHECK_OK(tether_context_close(ctx));
}

static void test_no_stray_rows(void)
{
    enum { SEEDED = 20, INSERTS = 40 };
    char store[512], ids[INSERTS][64], deleted[64];
    tether_context *ctx, *sibling = NULL;
    saved s;
    int i;
    tu_section("a save of many mixed changes leaves no outbox row; a sibling under an entity's name inherits nothing");
    if (!CHECK(tu_put_collection(bucket, "mixed", SCHEMA) &&
               tu_put_numbered(bucket, "mixed", "m%02d", "{\"N\": %d, \"Tag\": \"seed %d\"}", SEEDED)))
        return;
    tu_store_path(store, sizeof store, "mixed");
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return;
    tu_fetch_all(ctx, "mixed");
    for (i = 0; i < INSERTS; i++) {
        tether_object *obj = NULL;
        CHECK_OK(tether_context_insert(ctx, "mixed", NULL, &obj));
        snprintf(ids[i], sizeof ids[i], "%s", tu_id(obj));
        if (i % 2)
            set_int(obj, "N", 1000 + i);
        if (i % 3 == 0)
            set_text(obj, "Tag", "new");
        tether_object_free(obj);
    }
    for (i = 0; i < SEEDED; i++) {
        tether_object *obj = NULL;
        char id[16];
        snprintf(id, sizeof id, "m%02d", i);
        CHECK_OK(tether_context_object(ctx, "mixed", id, &obj));
        if (i < 10)
            set_int(obj, "N", 500 + i);
        else if (i < 15)
            CHECK_OK(tether_object_delete(obj));
        tether_object_free(obj);
    }
    CHECK_INT(change_count(ctx), INSERTS + 15);
    CHECK_CODE(save_with(ctx, -1, &s), TETHER_OK);
    CHECK_INT(change_count(ctx), 0);
    /* An inserted record deleted and saved: nothing may make it again. */
    {
        tether_object *obj = NULL;
        snprintf(deleted, sizeof deleted, "%s", ids[0]);
        CHECK_OK(tether_context_object(ctx, "mixed", deleted, &obj));
        CHECK_OK(tether_object_delete(obj));
        tether_object_free(obj);
        CHECK_CODE(save_with(ctx, -1, &s), TETHER_OK);
    }
    CHECK_OK(tether_context_open_sibling(ctx, "mixed", TETHER_DELIVER_THREAD, &sibling));
    if (sibling) {
        CHECK_INT(change_count(sibling), 0);
        CHECK_CODE(save_with(sibling, -1, &s), TETHER_OK);
        CHECK_OK(tether_context_close(sibling));
    }
    CHECK_OK(tether_context_close(ctx));
    /* Reopened: nothing pending under any name the test can think of. */
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return;
    CHECK_INT(change_count(ctx), 0);
    CHECK_OK(tether_context_open_sibling(ctx, "mixed", TETHER_DELIVER_THREAD, &sibling));
    if (sibling) {
        CHECK_INT(change_count(sibling), 0);
        CHECK_OK(tether_context_close(sibling));
    }
    CHECK_OK(tether_context_close(ctx));
    CHECK_INT(server_record("mixed", deleted, NULL), 404);
    CHECK(server_has("mixed", ids[1], "\"N\":1001"));
    CHECK(server_has("mixed", "m03", "\"N\":503"));
    CHECK_INT(server_record("mixed", "m12", NULL), 404);
}

/* ---------------------------------------------------------------- case 2 */

/* Saves through a proxy that holds back every answer, until the server has
 * applied the writes (`probe` of `collection` holds `fragment`); then closes
 * the context, as a kill would end it: the answers are never settled. */
static void save_cut_off(tether_context *ctx, tu_proxy *proxy, const char *collection, const char *probe,
                         const char *fragment)
{
    tether_task *task = NULL;
    saved s;
    int64_t deadline = tu_now_ms() + TU_WAIT_MS;
    int applied = 0;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    tu_proxy_stall(proxy, 1);
    CHECK_OK(tether_save_start(ctx, NULL, on_save, &s, &task));
    while (!applied && tu_now_ms() < deadline) {
        char *body = NULL;
        tu_sleep_ms(20);
        applied = server_record(collection, probe, &body) == 200 && body && strstr(body, fragment);
        free(body);
    }
    CHECK(applied);
    tu_sleep_ms(100); /* the batch's other writes */
    CHECK_OK(tether_context_close(ctx));
    tu_proxy_stall(proxy, 0);
}

static void test_retry_knows_its_write(int policy)
{
    char store[512], collection[32], inserted[64];
    tether_context *ctx;
    tether_object *obj = NULL;
    tu_proxy *proxy = tu_proxy_start();
    saved s;
    snprintf(collection, sizeof collection, "retry%d", policy);
    tu_section(policy == TETHER_MERGE_SERVER_WINS
                   ? "after a save cut off, an edit of what it applied is no conflict (server_wins: not dropped)"
                   : "after a save cut off, an edit of what it applied is no conflict");
    if (!CHECK(proxy && tu_put_collection(bucket, collection, SCHEMA) &&
               tu_put_numbered(bucket, collection, "r%d", "{\"N\": %d, \"Tag\": \"seed %d\"}", 2)))
        return;
    tu_store_path(store, sizeof store, collection);
    ctx = tu_open_url(tu_proxy_url(proxy), bucket, store, TETHER_DELIVER_THREAD, 20000);
    if (!ctx)
        return;
    tu_fetch_all(ctx, collection);
    CHECK_OK(tether_context_object(ctx, collection, "r0", &obj));
    set_int(obj, "N", 100);
    tether_object_free(obj);
    CHECK_OK(tether_context_insert(ctx, collection, NULL, &obj));
    snprintf(inserted, sizeof inserted, "%s", tu_id(obj));
    set_int(obj, "N", 7);
    tether_object_free(obj);
    CHECK_OK(tether_context_object(ctx, collection, "r1", &obj));
    set_int(obj, "N", 101);
    tether_object_free(obj);
    save_cut_off(ctx, proxy, collection, "r1", "\"N\":101");
    CHECK(server_has(collection, "r0", "\"N\":100"));
    CHECK(server_has(collection, inserted, "\"N\":7"));

    /* The next process: edits the objects whose writes the server has, then saves. */
    ctx = tu_open_url(tu_proxy_url(proxy), bucket, store, TETHER_DELIVER_THREAD, 20000);
    if (!ctx)
        return;
    CHECK_INT(change_count(ctx), 3);
    CHECK_OK(tether_context_object(ctx, collection, "r0", &obj));
    set_text(obj, "Tag", "edited again");
    tether_object_free(obj);
    CHECK_OK(tether_context_object(ctx, collection, inserted, &obj));
    set_text(obj, "Tag", "inserted, then edited");
    tether_object_free(obj);
    CHECK_OK(tether_context_object(ctx, collection, "r1", &obj));
    CHECK_OK(tether_object_delete(obj));
    tether_object_free(obj);
    CHECK_CODE(save_with(ctx, policy, &s), TETHER_OK);
    if (s.status != TETHER_OK)
        printf("  save: %s\n", s.message);
    CHECK_INT(change_count(ctx), 0);
    CHECK_OK(tether_context_close(ctx));
    CHECK(server_has(collection, "r0", "\"N\":100"));
    CHECK(server_has(collection, "r0", "\"Tag\":\"edited again\""));
    CHECK(server_has(collection, inserted, "\"N\":7"));
    CHECK(server_has(collection, inserted, "\"Tag\":\"inserted, then edited\""));
    CHECK_INT(server_record(collection, "r1", NULL), 404);
    tu_proxy_stop(proxy);
}

/* A change of another writer after ours is still a conflict (so is a
 * write of ours the server holds over a record another writer changed
 * before it: the record is not what our write made of it). */
static void test_other_writer_still_conflicts(void)
{
    char store[512];
    tether_context *ctx;
    tether_object *obj = NULL;
    tu_proxy *proxy = tu_proxy_start();
    saved s;
    tu_section("after a save cut off, another writer's change on top of ours is still a conflict");
    if (!CHECK(proxy && tu_put_collection(bucket, "other", SCHEMA) &&
               tu_put_numbered(bucket, "other", "o%d", "{\"N\": %d, \"Tag\": \"seed %d\"}", 1)))
        return;
    tu_store_path(store, sizeof store, "other");
    ctx = tu_open_url(tu_proxy_url(proxy), bucket, store, TETHER_DELIVER_THREAD, 20000);
    if (!ctx)
        return;
    tu_fetch_all(ctx, "other");
    CHECK_OK(tether_context_object(ctx, "other", "o0", &obj));
    set_int(obj, "N", 100);
    tether_object_free(obj);
    save_cut_off(ctx, proxy, "other", "o0", "\"N\":100");
    CHECK(tu_patch_record(bucket, "other", "o0", "{\"Tag\": \"theirs\"}"));
    ctx = tu_open_url(tu_proxy_url(proxy), bucket, store, TETHER_DELIVER_THREAD, 20000);
    if (!ctx)
        return;
    /* Even once the cache has the other writer's record (which holds our write too). */
    tu_fetch_all(ctx, "other");
    CHECK_OK(tether_context_object(ctx, "other", "o0", &obj));
    set_int(obj, "N", 200);
    tether_object_free(obj);
    CHECK_CODE(save_with(ctx, -1, &s), TETHER_E_CONFLICT);
    CHECK_INT(change_count(ctx), 1);
    CHECK_OK(tether_context_close(ctx));
    CHECK(server_has("other", "o0", "\"Tag\":\"theirs\""));
    CHECK(server_has("other", "o0", "\"N\":100"));
    tu_proxy_stop(proxy);
}

/* ---------------------------------------------------------------- required fields */

static void test_required_checked_at_save_start(void)
{
    char store[512], good[64], bad[64];
    tether_context *ctx;
    tether_object *obj = NULL;
    saved s;
    tu_section("a required field missing fails the save before anything is sent, naming the change and the field");
    if (!CHECK(tu_put_collection(bucket, "strict", "{\"type\": \"object\", \"required\": [\"Title\"], \"properties\": {"
                                 "\"Title\": {\"type\": \"string\"}, \"N\": {\"type\": \"integer\"}}}") &&
               tu_put_record(bucket, "strict", "s0", "{\"Title\": \"first\", \"N\": 0}")))
        return;
    tu_store_path(store, sizeof store, "strict");
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return;
    tu_fetch_all(ctx, "strict");
    CHECK_OK(tether_context_insert(ctx, "strict", "good1", &obj));
    set_text(obj, "Title", "has one");
    snprintf(good, sizeof good, "%s", tu_id(obj));
    tether_object_free(obj);
    CHECK_OK(tether_context_object(ctx, "strict", "s0", &obj));
    set_int(obj, "N", 5);
    tether_object_free(obj);
    CHECK_OK(tether_context_insert(ctx, "strict", "bad1", &obj));
    set_int(obj, "N", 1);
    snprintf(bad, sizeof bad, "%s", tu_id(obj));
    tether_object_free(obj);
    CHECK_CODE(save_with(ctx, -1, &s), TETHER_E_INVALID);
    printf("  %s\n", s.message);
    CHECK(strstr(s.message, "strict/bad1 has no value for the required field \"Title\"") != NULL);
    CHECK_INT(change_count(ctx), 3);
    CHECK_INT(server_record("strict", good, NULL), 404);
    CHECK_INT(server_record("strict", bad, NULL), 404);
    CHECK(server_has("strict", "s0", "\"N\":0"));
    /* Given the field, the same changes save. */
    CHECK_OK(tether_context_object(ctx, "strict", "bad1", &obj));
    set_text(obj, "Title", "now has one");
    tether_object_free(obj);
    CHECK_CODE(save_with(ctx, -1, &s), TETHER_OK);
    CHECK(server_has("strict", "bad1", "\"Title\":\"now has one\""));
    CHECK(server_has("strict", "s0", "\"N\":5"));
    CHECK_OK(tether_context_close(ctx));
}

/* A record the server's schema refuses (a rule the model does not check):
 * the failure names the field as Kinto's details do, not only its message. */
static void test_schema_refusal_names_the_field(void)
{
    char store[512];
    tether_context *ctx;
    tether_object *obj = NULL;
    saved s;
    tu_section("a record the server's schema refuses: the failure names Kinto's field");
    if (!CHECK(tu_put_collection(bucket, "ranked", "{\"type\": \"object\", \"properties\": {"
                                 "\"Title\": {\"type\": \"string\"}, \"Rank\": {\"type\": \"integer\", \"minimum\": 0}}}")))
        return;
    tu_store_path(store, sizeof store, "ranked");
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return;
    CHECK_OK(tether_context_insert(ctx, "ranked", "r1", &obj));
    set_text(obj, "Title", "t");
    set_int(obj, "Rank", -1);
    tether_object_free(obj);
    CHECK(save_with(ctx, -1, &s) != TETHER_OK);
    printf("  %s\n", s.first_failure);
    CHECK_STR(s.first_failure, "the server refused ranked/r1 (HTTP 400): Rank: -1 is less than the minimum of 0");
    CHECK_INT(change_count(ctx), 1);
    CHECK_OK(tether_context_close(ctx));
}

/* ---------------------------------------------------------------- case 12 */

typedef struct logged {
    pthread_mutex_t mu;
    char lines[8][512];
    int count;
} logged;

static void on_log(tether_log_level level, const char *category, const char *message, void *userdata)
{
    logged *l = userdata;
    if (level != TETHER_LOG_INFO || strcmp(category, "context") != 0 || !strstr(message, "closed"))
        return;
    pthread_mutex_lock(&l->mu);
    if (l->count < 8)
        snprintf(l->lines[l->count], sizeof l->lines[0], "%s", message);
    l->count++;
    pthread_mutex_unlock(&l->mu);
}

static void test_close_logs_unsaved(void)
{
    char store[512];
    tether_context *ctx, *sibling = NULL;
    tether_object *obj = NULL;
    static logged l = {PTHREAD_MUTEX_INITIALIZER, {{0}}, 0};
    tu_section("a close with unsaved changes logs their count at INFO; a close without any says nothing of them");
    tu_store_path(store, sizeof store, "unsaved");
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return;
    CHECK_OK(tether_log_set(TETHER_LOG_INFO, on_log, &l));
    CHECK_OK(tether_context_open_sibling(ctx, "import", TETHER_DELIVER_THREAD, &sibling));
    CHECK_OK(tether_context_close(sibling));
    CHECK_INT(l.count, 0);
    CHECK_OK(tether_context_insert(ctx, "plain", NULL, &obj));
    tether_object_free(obj);
    CHECK_OK(tether_context_insert(ctx, "plain", NULL, &obj));
    set_int(obj, "N", 3);
    tether_object_free(obj);
    CHECK_OK(tether_context_close(ctx));
    CHECK_OK(tether_log_set(TETHER_LOG_OFF, NULL, NULL));
    CHECK_INT(l.count, 1);
    CHECK_STR(l.lines[0], "context \"\" closed with 2 unsaved changes: they stay in the store's outbox under its name, "
                          "for the next context opened under it (in any process) to save");
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (ctx) {
        CHECK_INT(change_count(ctx), 2);
        CHECK_OK(tether_context_rollback(ctx));
        CHECK_OK(tether_context_close(ctx));
    }
}

/* ---------------------------------------------------------------- case 3 */

static char *slurp(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    char *data;
    *size = -1;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    data = malloc((size_t)*size + 1);
    if (data && fread(data, 1, (size_t)*size, f) != (size_t)*size) {
        free(data);
        data = NULL;
    }
    fclose(f);
    return data;
}

static int sql(const char *path, const char *statements)
{
    sqlite3 *db = NULL;
    int ok = sqlite3_open(path, &db) == SQLITE_OK && sqlite3_exec(db, statements, NULL, NULL, NULL) == SQLITE_OK;
    sqlite3_close(db);
    return ok;
}

static int sidecars(const char *path)
{
    const char *suffixes[] = {"-wal", "-shm", "-journal"};
    char name[600];
    int found = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s%s", path, suffixes[i]);
        if (tu_file_exists(name)) {
            printf("  left behind: %s\n", name);
            found++;
        }
    }
    return found;
}

/* Opens a context on `path` (on `on_bucket`; as a local store's path if
 * `local`); expects it refused with TETHER_E_STORE and the file as it was,
 * byte for byte. */
static void check_refused_as(const char *path, const char *on_bucket, const char *what, int local)
{
    long before_size, after_size;
    char *before = slurp(path, &before_size), *after;
    char main_store[512];
    tether_context_options o;
    tether_kinto_options k;
    tether_local_store ls;
    tether_context *ctx = NULL;
    CHECK(before != NULL);
    tu_options(&o, &k, tu_url(), on_bucket, path, TETHER_DELIVER_THREAD, 10000);
    if (local) {
        tu_store_path(main_store, sizeof main_store, "beside-local");
        CHECK_OK(tether_local_store_init(&ls, TETHER_LOCAL_STORE_VERSION));
        ls.configuration = "private";
        ls.path = path;
        ls.specs_json = "{\"memo\": {\"type\": \"object\", \"properties\": {\"Text\": {\"type\": \"string\"}}}}";
        o.store_path = main_store;
        o.local_stores = &ls;
        o.local_store_count = 1;
    }
    CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_STORE);
    printf("  %s: %s\n", what, tether_errmsg());
    if (ctx)
        tether_context_close(ctx);
    after = slurp(path, &after_size);
    CHECK_INT(after_size, before_size);
    CHECK(before && after && after_size == before_size && memcmp(before, after, (size_t)before_size) == 0);
    CHECK_INT(sidecars(path), 0);
    free(before);
    free(after);
}

static void check_refused(const char *path, const char *on_bucket, const char *what)
{
    check_refused_as(path, on_bucket, what, 0);
}

static void check_taken(const char *path)
{
    tether_context_options o;
    tether_kinto_options k;
    tether_context *ctx = NULL;
    tu_options(&o, &k, tu_url(), bucket, path, TETHER_DELIVER_THREAD, 10000);
    CHECK_OK(tether_context_open_kinto(&o, &k, &ctx));
    if (ctx)
        CHECK_OK(tether_context_close(ctx));
}

static void test_store_files(void)
{
    char path[512], other_bucket[128];
    FILE *f;
    tu_section("a host's SQLite database is refused and left as it was");
    tu_store_path(path, sizeof path, "hostdb");
    CHECK(sql(path, "CREATE TABLE host_data (id INTEGER PRIMARY KEY, name TEXT); "
                    "INSERT INTO host_data (name) VALUES ('the host''s own row');"));
    check_refused(path, bucket, "host database");
    CHECK(strstr(tether_errmsg(), "not a Tether store") != NULL && strstr(tether_errmsg(), "host_data") != NULL);
    CHECK(sql(path, "SELECT name FROM host_data")); /* still the host's */
    check_refused_as(path, bucket, "host database as a local store", 1);

    tu_section("a file that is not SQLite is refused and left as it was");
    tu_store_path(path, sizeof path, "text");
    f = fopen(path, "wb");
    if (CHECK(f != NULL)) {
        for (int i = 0; i < 300; i++)
            fprintf(f, "line %d of the host's notes, not a database\n", i);
        fclose(f);
    }
    check_refused(path, bucket, "text file");

    tu_section("a zero-length file is taken (it is empty)");
    tu_store_path(path, sizeof path, "zero");
    f = fopen(path, "wb");
    if (CHECK(f != NULL))
        fclose(f);
    check_taken(path);

    tu_section("an SQLite database without tables is taken");
    tu_store_path(path, sizeof path, "emptydb");
    CHECK(sql(path, "CREATE TABLE t (x); DROP TABLE t;"));
    check_taken(path);
    check_taken(path); /* and is a Tether store from then on */

    tu_section("a Tether store of another bucket is refused and left as it was");
    tu_unique(other_bucket, sizeof other_bucket, "c-outbox-other");
    if (CHECK(tu_put_bucket(other_bucket))) {
        check_refused(path, other_bucket, "another bucket's store");
        /* A store from before the outbox kept its sent writes: opening it
         * would add that column; refused, it must not. */
        if (CHECK(sql(path, "ALTER TABLE tether_outbox DROP COLUMN sent_writes;")))
            check_refused(path, other_bucket, "another bucket's older store");
    }
    {
        char p[160];
        snprintf(p, sizeof p, "/buckets/%s", other_bucket);
        tu_http("DELETE", p, NULL, NULL);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-outbox");
    if (!CHECK(tu_put_bucket(bucket)))
        return tu_finish();
    test_insert_without_values();
    test_no_stray_rows();
    test_retry_knows_its_write(TETHER_MERGE_REPORT);
    test_retry_knows_its_write(TETHER_MERGE_SERVER_WINS);
    test_other_writer_still_conflicts();
    test_required_checked_at_save_start();
    test_schema_refusal_names_the_field();
    test_close_logs_unsaved();
    test_store_files();
    {
        char path[160];
        snprintf(path, sizeof path, "/buckets/%s", bucket);
        CHECK_INT(tu_http("DELETE", path, NULL, NULL), 200);
    }
    return tu_finish();
}
