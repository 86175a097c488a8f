/* test_postgres.c — a context on PostgreSQL from C (issue 27):
 * tether_context_open_postgres on a schema of its own (made with psql),
 * the model read from the catalog, fetches with a predicate under each
 * policy, peek and get, closing, an offline open from the store after
 * scripts/pg-stop, and the errors: a conninfo libpq cannot parse
 * (TETHER_E_INVALID), an unknown schema (TETHER_E_NOT_FOUND), no conninfo.
 *
 * Needs TETHER_PG_CONNINFO (scripts/with-postgres sets it; the `postgres`
 * suite of scripts/run-tests runs this program); without it, it says so and
 * passes with nothing checked, as the `c` suite runs every program. The
 * offline part needs TETHER_PG_DIR too, and runs scripts/pg-stop and
 * pg-start from ../../scripts (the program runs from bindings/c). */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>
#include <unistd.h>

static const char *conninfo;
static char schema[64];

/* Runs SQL through psql against TETHER_PG_CONNINFO; 1 if it succeeded. */
static int psql(const char *sql)
{
    return tu_psql(conninfo, sql, NULL);
}

static int script(const char *name)
{
    char command[1024];
    snprintf(command, sizeof command, "../../scripts/%s '%s' >/dev/null 2>&1", name, getenv("TETHER_PG_DIR"));
    return system(command) == 0;
}

static int open_pg(const char *conn, const char *schema_name, const char *store, tether_context **out)
{
    tether_context_options o;
    tether_postgres_options pg;
    tether_context_options_init(&o, TETHER_CONTEXT_OPTIONS_VERSION);
    tether_postgres_options_init(&pg, TETHER_POSTGRES_OPTIONS_VERSION);
    o.store_path = store;
    o.timeout_ms = 5000;
    pg.conninfo = conn;
    pg.schema = schema_name;
    *out = NULL;
    return tether_context_open_postgres(&o, &pg, out);
}

static int start(tether_context *ctx, tu_fetch *f, const char *predicate, const tether_value *args, size_t count,
                 const char *sort, tether_cache_policy policy)
{
    tether_fetch_options o;
    tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
    o.entity = "items";
    o.sort = sort;
    o.policy = policy;
    o.predicate = predicate;
    o.arguments = args;
    o.argument_count = count;
    return tether_fetch_start(ctx, &o, tu_fetch_cb, f, NULL);
}

/* The n of each object the fetch's FINAL callback gives, or its status when it failed. */
static int fetch_ns(tether_context *ctx, const char *predicate, const tether_value *args, size_t count,
                    const char *sort, tether_cache_policy policy, char *got, size_t size)
{
    tu_fetch f;
    int status;
    tu_fetch_init(&f);
    snprintf(got, size, "(not started)");
    status = start(ctx, &f, predicate, args, count, sort, policy);
    if (status == TETHER_OK) {
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        pthread_mutex_lock(&f.mu);
        status = f.final_status;
        if (status == TETHER_OK)
            tu_ns(f.final_objs, f.final_count, got, size);
        else
            snprintf(got, size, "(failed: %s)", f.final_message);
        CHECK(f.order_errors == 0 && f.results_errors == 0);
        pthread_mutex_unlock(&f.mu);
    }
    tu_fetch_destroy(&f);
    return status;
}

static void test_model(tether_context *ctx)
{
    size_t count = 0, i;
    tether_entity *items = NULL;
    const char *name = NULL;
    unsigned int operations = 0, flags = 0, label_flags = 0;
    tether_type type = TETHER_TYPE_NULL, n_type = TETHER_TYPE_NULL;

    tu_section("the schema's tables with a key are the entities");
    CHECK_OK(tether_context_entity_count(ctx, &count));
    CHECK_INT(count, 2); /* items, owners; nokey is left out */
    CHECK_OK(tether_context_entity_at(ctx, 0, &items));
    CHECK_OK(tether_entity_name(items, &name));
    CHECK_STR(name, "items");
    CHECK_STATUS(tether_context_entity(ctx, "nokey", &items), TETHER_E_NOT_FOUND);
    CHECK_OK(tether_context_entity(ctx, "items", &items));
    CHECK_OK(tether_entity_operations(items, &operations));
    /* The owner's privileges: every operation (saves go through PostgresWrites). */
    CHECK_INT(operations, TETHER_OP_FETCH | TETHER_OP_INSERT | TETHER_OP_UPDATE | TETHER_OP_DELETE);
    CHECK_OK(tether_entity_attribute_count(items, &count));
    CHECK_INT(count, 6); /* id, xmin, n, label, status, owner */
    for (i = 0; i < count; i++) {
        CHECK_OK(tether_entity_attribute_at(items, i, &name, NULL, &type, &flags));
        if (strcmp(name, "label") == 0)
            label_flags = flags;
        if (strcmp(name, "n") == 0)
            n_type = type;
        if (strcmp(name, "xmin") == 0)
            CHECK(flags & TETHER_ATTR_VERSION);
    }
    CHECK(label_flags & TETHER_ATTR_REQUIRED);
    CHECK_INT(n_type, TETHER_TYPE_INTEGER);
}

static void test_fetch(tether_context *ctx)
{
    char got[512];
    tether_value arg = {TETHER_TYPE_TEXT, 0, 0.0, NULL, 0};
    arg.text = (char *)"item 1";
    arg.length = strlen(arg.text);

    tu_section("fetches with a predicate: the server's answer, then the cache's");
    CHECK_OK(fetch_ns(ctx, "n < 4 OR label == 'item 29'", NULL, 0, "-n", TETHER_POLICY_SERVER_ONLY, got, sizeof got));
    CHECK_STR(got, "29,3,2,1,0");
    CHECK_OK(fetch_ns(ctx, "label BEGINSWITH $1", &arg, 1, "n", TETHER_POLICY_SERVER_ONLY, got, sizeof got));
    CHECK_STR(got, "1,10,11,12,13,14,15,16,17,18,19");
    /* A whole listing syncs the table; then every policy answers alike. */
    CHECK_OK(fetch_ns(ctx, NULL, NULL, 0, NULL, TETHER_POLICY_SERVER_ONLY, got, sizeof got));
    CHECK_OK(fetch_ns(ctx, "status == 'open' AND n BETWEEN {10, 15}", NULL, 0, "n", TETHER_POLICY_CACHE_ONLY, got,
                      sizeof got));
    CHECK_STR(got, "12,14"); /* 10: status NULL */
    CHECK_OK(fetch_ns(ctx, "status == 'open' AND n BETWEEN {10, 15}", NULL, 0, "n",
                      TETHER_POLICY_CACHE_THEN_SERVER, got, sizeof got));
    CHECK_STR(got, "12,14");
    CHECK_OK(fetch_ns(ctx, "status == nil", NULL, 0, "n", TETHER_POLICY_SERVER_ONLY, got, sizeof got));
    CHECK_STR(got, "0,5,10,15,20,25");
}

static void test_objects(tether_context *ctx)
{
    tether_object *item = NULL, *owner = NULL;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    char text[64];
    int64_t n = -1;
    int status, tries;

    tu_section("peek and get read rows; get refreshes one not cached");
    CHECK_OK(tether_context_object(ctx, "items", "p007", &item));
    CHECK_OK(tu_peek_text(item, "label", text, sizeof text));
    CHECK_STR(text, "item 7");
    CHECK_OK(tu_peek_int(item, "n", &n));
    CHECK_INT(n, 7);
    CHECK_OK(tether_object_get(item, "owner", &v));
    CHECK_INT(v.type, TETHER_TYPE_TEXT);
    CHECK_STR(v.text, "2"); /* a key as text */
    tether_value_free(&v);
    CHECK_OK(tether_context_object(ctx, "owners", "2", &owner));
    CHECK_STATUS(tether_object_peek(owner, "name", &v), TETHER_E_NOT_CACHED);
    CHECK_STATUS(tether_object_get(owner, "name", &v), TETHER_E_NOT_CACHED);
    /* The refresh get started lands in the cache (bounded wait, no timing asserted). */
    for (tries = 0; (status = tether_object_peek(owner, "name", &v)) == TETHER_E_NOT_CACHED && tries < 1000; tries++)
        tu_sleep_ms(10);
    CHECK_OK(status);
    CHECK_STR(v.text, "bob");
    tether_value_free(&v);
    tether_object_free(owner);
    tether_object_free(item);
}

static void test_offline(const char *store)
{
    tether_context *ctx = NULL;
    int online = -1;
    char got[512], never[512];

    if (!getenv("TETHER_PG_DIR")) {
        printf("TETHER_PG_DIR not set: the offline part is skipped\n");
        return;
    }
    tu_section("with the server stopped, a context opens offline from its store");
    CHECK(script("pg-stop"));
    if (CHECK_OK(open_pg(conninfo, schema, store, &ctx)) == TETHER_OK) {
        CHECK_OK(tether_context_is_online(ctx, &online));
        CHECK_INT(online, 0);
        CHECK_OK(fetch_ns(ctx, "n >= 27", NULL, 0, "n", TETHER_POLICY_CACHE_ONLY, got, sizeof got));
        CHECK_STR(got, "27,28,29");
        CHECK_INT(fetch_ns(ctx, "n >= 27", NULL, 0, "n", TETHER_POLICY_SERVER_ONLY, got, sizeof got), TETHER_E_NETWORK);
        CHECK_OK(tether_context_close(ctx));
    }
    tu_store_path(never, sizeof never, "pg-never");
    CHECK_STATUS(open_pg(conninfo, schema, never, &ctx), TETHER_E_NETWORK); /* no store to open from */
    CHECK(ctx == NULL);
    CHECK(script("pg-start"));
}

int main(int argc, char **argv)
{
    char store[512], other[512], sql[2048];
    tether_context *ctx = NULL;
    (void)argc;
    tu_init(argv[0]);
    conninfo = getenv("TETHER_PG_CONNINFO");
    if (!conninfo) {
        printf("TETHER_PG_CONNINFO not set: nothing checked (scripts/run-tests postgres runs this program)\n");
        return tu_finish();
    }
    snprintf(schema, sizeof schema, "c_%ld_%lld", (long)getpid(), (long long)tu_now_ms());
    snprintf(sql, sizeof sql,
             "CREATE SCHEMA %1$s;"
             "CREATE TABLE %1$s.owners (id int8 PRIMARY KEY, name text NOT NULL);"
             "CREATE TABLE %1$s.items (id text PRIMARY KEY, n int8, label text NOT NULL,"
             "  status text CHECK (status IN ('open', 'closed')),"
             "  owner int8 REFERENCES %1$s.owners (id) ON DELETE CASCADE);"
             "CREATE TABLE %1$s.nokey (a int);"
             "INSERT INTO %1$s.owners VALUES (1, 'ann'), (2, 'bob');"
             "INSERT INTO %1$s.items SELECT 'p' || lpad(i::text, 3, '0'), i, 'item ' || i,"
             "  CASE WHEN i %% 5 = 0 THEN NULL WHEN i %% 2 = 0 THEN 'open' ELSE 'closed' END, 1 + i %% 2"
             "  FROM generate_series(0, 29) i;",
             schema);
    if (!CHECK(psql(sql)))
        return tu_finish();
    tu_store_path(store, sizeof store, "pg");
    tu_store_path(other, sizeof other, "pg-other");

    tu_section("open");
    if (CHECK_OK(open_pg(conninfo, schema, store, &ctx)) == TETHER_OK) {
        int online = -1;
        CHECK_OK(tether_context_is_online(ctx, &online));
        CHECK_INT(online, 1);
        test_model(ctx);
        test_fetch(ctx);
        test_objects(ctx);
        tu_section("closing");
        CHECK_OK(tether_context_close(ctx));
        CHECK_STATUS(tether_context_is_online(ctx, &online), TETHER_E_HANDLE);
    }

    tu_section("bad options and unknown names");
    CHECK_STATUS(open_pg("host='unterminated", schema, other, &ctx), TETHER_E_INVALID);
    CHECK(ctx == NULL);
    CHECK_STATUS(open_pg(conninfo, "no_such_schema", other, &ctx), TETHER_E_NOT_FOUND);
    CHECK(ctx == NULL);
    CHECK_FAILS(open_pg(NULL, schema, other, &ctx));
    CHECK(ctx == NULL);

    test_offline(store);

    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE;", schema);
    CHECK(psql(sql));
    return tu_finish();
}
