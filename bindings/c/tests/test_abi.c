/* test_abi.c — the ABI contract: versions, status names, option structs
 * (and a version-1 context options struct), NULL arguments, live counts,
 * error messages, opening errors. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>

static void test_version(void)
{
    tu_section("version");
    CHECK(tether_version() != NULL);
    CHECK_STR(tether_version(), TETHER_VERSION);
    CHECK_INT(tether_version_number(), TETHER_VERSION_NUMBER);
    CHECK_INT(TETHER_VERSION_NUMBER,
              TETHER_VERSION_MAJOR * 1000000 + TETHER_VERSION_MINOR * 1000 + TETHER_VERSION_PATCH);
    {
        char v[32];
        snprintf(v, sizeof v, "%d.%d.%d", TETHER_VERSION_MAJOR, TETHER_VERSION_MINOR,
                 TETHER_VERSION_PATCH);
        CHECK_STR(v, TETHER_VERSION);
    }
}

static void test_errstr(void)
{
    static const struct { int code; const char *name; } names[] = {
        {TETHER_OK, "TETHER_OK"},
        {TETHER_E_ERROR, "TETHER_E_ERROR"},
        {TETHER_E_MISUSE, "TETHER_E_MISUSE"},
        {TETHER_E_HANDLE, "TETHER_E_HANDLE"},
        {TETHER_E_NOT_FOUND, "TETHER_E_NOT_FOUND"},
        {TETHER_E_TYPE, "TETHER_E_TYPE"},
        {TETHER_E_INVALID, "TETHER_E_INVALID"},
        {TETHER_E_NETWORK, "TETHER_E_NETWORK"},
        {TETHER_E_AUTH, "TETHER_E_AUTH"},
        {TETHER_E_SERVER, "TETHER_E_SERVER"},
        {TETHER_E_PROTOCOL, "TETHER_E_PROTOCOL"},
        {TETHER_E_STORE, "TETHER_E_STORE"},
        {TETHER_E_CANCELLED, "TETHER_E_CANCELLED"},
        {TETHER_E_NOT_CACHED, "TETHER_E_NOT_CACHED"},
        {TETHER_E_BUSY, "TETHER_E_BUSY"},
        {TETHER_E_CONFLICT, "TETHER_E_CONFLICT"},
        {TETHER_E_NOT_ALLOWED, "TETHER_E_NOT_ALLOWED"},
        {TETHER_E_EXPIRED, "TETHER_E_EXPIRED"},
    };
    size_t i;
    tu_section("errstr");
    /* Stable numbers. */
    CHECK_INT(TETHER_E_ERROR, -1);
    CHECK_INT(TETHER_E_BUSY, -14);
    CHECK_INT(TETHER_E_CONFLICT, -15);
    CHECK_INT(TETHER_E_NOT_ALLOWED, -16);
    CHECK_INT(TETHER_E_EXPIRED, -17);
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK_STR(tether_errstr(names[i].code), names[i].name);
    CHECK_STR(tether_errstr(-18), "TETHER_E_UNKNOWN");
    CHECK_STR(tether_errstr(-9999), "TETHER_E_UNKNOWN");
    CHECK_STR(tether_errstr(1), "TETHER_E_UNKNOWN");
    CHECK_STR(tether_errstr(2147483647), "TETHER_E_UNKNOWN");
    CHECK_STR(tether_errstr(-2147483647 - 1), "TETHER_E_UNKNOWN");
}

static void test_options(void)
{
    tether_context_options o;
    tether_kinto_options k;
    tether_fetch_options f;
    tu_section("option structs");

    CHECK_STATUS(tether_context_options_init(NULL, TETHER_CONTEXT_OPTIONS_VERSION), TETHER_E_MISUSE);
    CHECK(tether_errmsg() != NULL);
    CHECK_STATUS(tether_context_options_init(&o, 0), TETHER_E_MISUSE);
    CHECK_STATUS(tether_context_options_init(&o, TETHER_CONTEXT_OPTIONS_VERSION + 1), TETHER_E_MISUSE);
    CHECK_STATUS(tether_context_options_init(&o, 0xffffffffu), TETHER_E_MISUSE);

    memset(&o, 0x5a, sizeof o);
    CHECK_OK(tether_context_options_init(&o, TETHER_CONTEXT_OPTIONS_VERSION));
    /* A success leaves no message behind. */
    CHECK_STR(tether_errmsg(), "");
    CHECK_INT(o.version, TETHER_CONTEXT_OPTIONS_VERSION);
    CHECK_STATUS(tether_kinto_options_init(NULL, TETHER_KINTO_OPTIONS_VERSION), TETHER_E_MISUSE);
    CHECK_STATUS(tether_kinto_options_init(&k, 0), TETHER_E_MISUSE);
    CHECK_STATUS(tether_kinto_options_init(&k, TETHER_KINTO_OPTIONS_VERSION + 1), TETHER_E_MISUSE);
    memset(&k, 0x5a, sizeof k);
    CHECK_OK(tether_kinto_options_init(&k, TETHER_KINTO_OPTIONS_VERSION));
    CHECK_INT(k.version, TETHER_KINTO_OPTIONS_VERSION);
    CHECK(k.server_url == NULL);
    CHECK(k.bucket == NULL);
    CHECK(k.username == NULL);
    CHECK(k.password == NULL);
    CHECK(o.store_path == NULL);
    CHECK_INT(o.delivery, TETHER_DELIVER_THREAD);
    CHECK_INT(o.staleness_ms, 0);
    CHECK_INT(o.timeout_ms, 30000);
    CHECK_INT(o.object_cache_size, 1024);
    CHECK_INT(o.merge_policy, TETHER_MERGE_REPORT);
    {
        tether_save_options s;
        CHECK_STATUS(tether_save_options_init(NULL, TETHER_SAVE_OPTIONS_VERSION), TETHER_E_MISUSE);
        CHECK_STATUS(tether_save_options_init(&s, TETHER_SAVE_OPTIONS_VERSION + 1), TETHER_E_MISUSE);
        memset(&s, 0x5a, sizeof s);
        CHECK_OK(tether_save_options_init(&s, TETHER_SAVE_OPTIONS_VERSION));
        CHECK_INT(s.version, TETHER_SAVE_OPTIONS_VERSION);
        CHECK_INT(s.merge_policy, -1);
        CHECK(s.progress == NULL);
    }

    CHECK_STATUS(tether_fetch_options_init(NULL, TETHER_FETCH_OPTIONS_VERSION), TETHER_E_MISUSE);
    CHECK_STATUS(tether_fetch_options_init(&f, 0), TETHER_E_MISUSE);
    CHECK_STATUS(tether_fetch_options_init(&f, TETHER_FETCH_OPTIONS_VERSION + 1), TETHER_E_MISUSE);
    memset(&f, 0x5a, sizeof f);
    CHECK_OK(tether_fetch_options_init(&f, TETHER_FETCH_OPTIONS_VERSION));
    CHECK_INT(f.version, TETHER_FETCH_OPTIONS_VERSION);
    CHECK(f.entity == NULL);
    CHECK(f.sort == NULL);
    CHECK_INT(f.limit, 0);
    CHECK_INT(f.policy, TETHER_POLICY_CACHE_THEN_SERVER);
}

/* tether_context_options as 0.2 declared it (versions 1 to 4 began so):
 * Kinto's fields came first. A host built against 0.2 passes this. */
typedef struct options_0_2 {
    unsigned int version;
    const char *server_url;
    const char *bucket;
    const char *username;
    const char *password;
    const char *store_path;
    tether_delivery delivery;
    int64_t staleness_ms;
    int64_t timeout_ms;
} options_0_2;

/* A 0.2 struct with guard bytes right after it: nothing may be written past
 * its end, nor into it. */
typedef struct guarded_0_2 {
    options_0_2 o;
    unsigned char guard[32];
} guarded_0_2;

static int guard_intact(const guarded_0_2 *g)
{
    size_t i;
    for (i = 0; i < sizeof g->guard; i++)
        if (g->guard[i] != 0x5a)
            return 0;
    return 1;
}

/* Versions 1 to 4 had 0.2's layout, which 0.3 cannot read as its own: they
 * are refused, by init and by every open, instead of read as store_path,
 * delivery... */
static void test_options_0_2(const char *bucket, const char *store)
{
    unsigned int version;
    tu_section("a 0.2 context options struct (versions 1 to 4) is refused");
    for (version = 1; version <= 4; version++) {
        guarded_0_2 g;
        tether_kinto_options k;
        tether_context *ctx = NULL;
        memset(&g, 0x5a, sizeof g);
        CHECK_STATUS(tether_context_options_init((tether_context_options *)&g.o, version), TETHER_E_MISUSE);
        CHECK(guard_intact(&g));
        g.o.version = version;
        g.o.server_url = tu_url();
        g.o.bucket = bucket;
        g.o.store_path = store;
        g.o.username = "test";
        g.o.password = "test";
        g.o.delivery = TETHER_DELIVER_THREAD;
        g.o.staleness_ms = 0;
        g.o.timeout_ms = 5000;
        CHECK_OK(tether_kinto_options_init(&k, TETHER_KINTO_OPTIONS_VERSION));
        k.server_url = tu_url();
        k.bucket = bucket;
        CHECK_STATUS(tether_context_open_kinto((const tether_context_options *)&g.o, &k, &ctx), TETHER_E_MISUSE);
        CHECK(ctx == NULL);
        CHECK(strstr(tether_errmsg(), "version") != NULL);
        CHECK(guard_intact(&g));
    }
}

static void test_values(void)
{
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    tu_section("tether_value_free");
    tether_value_free(NULL);
    tether_value_free(&v);
    tether_value_free(&v);
    CHECK_INT(v.type, TETHER_TYPE_NULL);
    CHECK(v.text == NULL);
}

static void test_null_handles(void)
{
    int i = 7;
    size_t n = 7;
    unsigned int u = 7;
    const char *s = NULL;
    tether_entity *e = NULL;
    tether_object *obj = NULL;
    tether_observer *ob = NULL;
    tether_task *task = NULL;
    tether_results *results = NULL;
    int64_t i64 = 0;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    tether_fetch_options f;

    tu_section("NULL handles and arguments");
    CHECK_INT(tether_context_close(NULL), TETHER_OK);
    CHECK_STATUS(tether_context_is_online(NULL, &i), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_fd(NULL, &i), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_poll(NULL, 0, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_entity_count(NULL, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_entity_at(NULL, 0, &e), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_entity(NULL, "x", &e), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_name(NULL, &s), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_route(NULL, &s), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_operations(NULL, &u), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_attribute_count(NULL, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_attribute_at(NULL, 0, &s, &i, NULL, &u), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_attribute_index(NULL, "x", &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_entity_attribute_index_by_code(NULL, 1, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_context_object(NULL, "x", "y", &obj), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_retain(NULL), TETHER_E_HANDLE);
    CHECK_INT(tether_object_free(NULL), TETHER_OK); /* as closing NULL */
    CHECK_STATUS(tether_object_entity(NULL, &e), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_id(NULL, &s), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_version(NULL, &i64), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_peek(NULL, "x", &v), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_get(NULL, "x", &v), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_peek_code(NULL, 1, &v), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_get_code(NULL, 1, &v), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_observe(NULL, "x", tu_obs_cb, NULL, &ob), TETHER_E_HANDLE);
    CHECK_STATUS(tether_observer_cancel(NULL), TETHER_E_HANDLE);
    CHECK_STATUS(tether_task_cancel(NULL), TETHER_E_HANDLE);
    CHECK_STATUS(tether_results_count(NULL, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_results_object_at(NULL, 0, &obj), TETHER_E_HANDLE);
    CHECK_INT(tether_results_free(NULL), TETHER_OK);
    CHECK_OK(tether_fetch_options_init(&f, TETHER_FETCH_OPTIONS_VERSION));
    f.entity = "x";
    CHECK_STATUS(tether_fetch_start(NULL, &f, tu_fetch_cb, NULL, &task), TETHER_E_HANDLE);
    /* Out parameters are written only on success. */
    CHECK_INT(i, 7);
    CHECK_INT(n, 7);
    CHECK_INT(u, 7);
    CHECK(s == NULL && e == NULL && obj == NULL && ob == NULL && task == NULL && results == NULL);
    CHECK_INT(v.type, TETHER_TYPE_NULL);
}

static void test_debug_count(void)
{
    static const tether_debug_counter kinds[] = {
        TETHER_DEBUG_CONTEXTS, TETHER_DEBUG_OBJECTS, TETHER_DEBUG_OBJECT_HANDLES, TETHER_DEBUG_RESULTS,
        TETHER_DEBUG_TASKS,    TETHER_DEBUG_OBSERVERS, TETHER_DEBUG_THREADS, TETHER_DEBUG_PREPARED_STATEMENTS,
        TETHER_DEBUG_REQUESTS,
    };
    int64_t n = 7;
    size_t i;
    tu_section("tether_debug_count");
    CHECK_INT(TETHER_DEBUG_CONTEXTS, 1);
    CHECK_INT(TETHER_DEBUG_THREADS, 7);
    CHECK_INT(TETHER_DEBUG_PREPARED_STATEMENTS, 8);
    CHECK_INT(TETHER_DEBUG_REQUESTS, 9);
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        n = -1;
        CHECK_OK(tether_debug_count(kinds[i], &n));
        /* No context has been opened yet: nothing lives but, perhaps, threads. */
        if (kinds[i] == TETHER_DEBUG_THREADS)
            CHECK(n >= 0);
        else
            CHECK_INT(n, 0);
    }
    n = 7;
    CHECK_STATUS(tether_debug_count((tether_debug_counter)0, &n), TETHER_E_INVALID);
    CHECK_STATUS(tether_debug_count((tether_debug_counter)10, &n), TETHER_E_INVALID);
    CHECK_STATUS(tether_debug_count((tether_debug_counter)-1, &n), TETHER_E_INVALID);
    CHECK_STATUS(tether_debug_count((tether_debug_counter)0x7fffffff, &n), TETHER_E_INVALID);
    CHECK_INT(n, 7);
    CHECK_STATUS(tether_debug_count(TETHER_DEBUG_CONTEXTS, NULL), TETHER_E_MISUSE);
}

static void test_open_errors(const char *bucket)
{
    tether_context_options o;
    tether_kinto_options k;
    tether_context *ctx = NULL;
    char store[512], store2[512];
    tu_section("tether_context_open_kinto errors");
    tu_store_path(store, sizeof store, "open");

    CHECK_OK(tether_context_options_init(&o, TETHER_CONTEXT_OPTIONS_VERSION));
    CHECK_OK(tether_kinto_options_init(&k, TETHER_KINTO_OPTIONS_VERSION));
    CHECK_STATUS(tether_context_open_kinto(NULL, &k, &ctx), TETHER_E_MISUSE);
    CHECK_STATUS(tether_context_open_kinto(&o, NULL, &ctx), TETHER_E_MISUSE);
    k.server_url = tu_url();
    k.bucket = bucket;
    o.store_path = store;
    k.username = "test";
    k.password = "test";
    o.timeout_ms = 5000;
    CHECK_STATUS(tether_context_open_kinto(&o, &k, NULL), TETHER_E_MISUSE);
    o.version = 0;
    CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_MISUSE);
    o.version = 99;
    CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_MISUSE);
    o.version = TETHER_CONTEXT_OPTIONS_VERSION;
    k.version = 0;
    CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_MISUSE);
    k.version = TETHER_KINTO_OPTIONS_VERSION + 1;
    CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_MISUSE);
    k.version = TETHER_KINTO_OPTIONS_VERSION;
    /* Required fields left NULL: a NULL argument. */
    k.server_url = NULL;
    CHECK_FAILS(tether_context_open_kinto(&o, &k, &ctx));
    k.server_url = tu_url();
    k.bucket = NULL;
    CHECK_FAILS(tether_context_open_kinto(&o, &k, &ctx));
    k.bucket = bucket;
    o.store_path = NULL;
    CHECK_FAILS(tether_context_open_kinto(&o, &k, &ctx));
    o.store_path = store;
    o.delivery = (tether_delivery)7;
    CHECK_FAILS(tether_context_open_kinto(&o, &k, &ctx));
    o.delivery = TETHER_DELIVER_THREAD;
    /* Invalid strings. */
    k.bucket = "bad\xff\xfe";
    CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_INVALID);
    k.bucket = bucket;
    k.server_url = "not a url";
    CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_INVALID);
    k.server_url = "http://127.0.0.1:1/v1\xc3";
    CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_INVALID);
    CHECK(ctx == NULL);

    /* Unreachable server and no store: NETWORK, and the store untouched. */
    {
        char fresh[512];
        tu_store_path(fresh, sizeof fresh, "unreachable");
        o.store_path = fresh;
        k.server_url = "http://127.0.0.1:1/v1";
        CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_NETWORK);
        CHECK(ctx == NULL);
        CHECK(!tu_file_exists(fresh));
        k.server_url = tu_url();
        o.store_path = store;
    }

    /* Unknown bucket; the store left as it was (not created). */
    {
        char fresh[512];
        tu_store_path(fresh, sizeof fresh, "nobucket");
        o.store_path = fresh;
        k.bucket = "no-such-bucket-tether-c";
        CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_NOT_FOUND);
        CHECK(ctx == NULL);
        CHECK(!tu_file_exists(fresh));
        k.bucket = bucket;
        o.store_path = store;
    }

    /* Refused credentials: anonymous (401) and another user (403). */
    {
        char fresh[512];
        tu_store_path(fresh, sizeof fresh, "auth");
        o.store_path = fresh;
        k.username = NULL;
        k.password = NULL;
        CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_AUTH);
        k.username = "intruder";
        k.password = "nope";
        CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_AUTH);
        CHECK(ctx == NULL);
        CHECK(!tu_file_exists(fresh));
        k.username = "test";
        k.password = "test";
        o.store_path = store;
    }

    /* A store that is not SQLite. */
    tu_store_path(store2, sizeof store2, "garbage");
    {
        FILE *fp = fopen(store2, "w");
        if (fp) {
            fputs("this is not an SQLite database, just some text that is long enough "
                  "to fill a header of one hundred bytes..........................\n", fp);
            fclose(fp);
        }
        o.store_path = store2;
        CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_STORE);
        CHECK(ctx == NULL);
        o.store_path = store;
    }

    /* At last, a good open, and the message is empty again. */
    CHECK_OK(tether_context_open_kinto(&o, &k, &ctx));
    CHECK_STR(tether_errmsg(), "");
    if (ctx) {
        int online = -1;
        CHECK_OK(tether_context_is_online(ctx, &online));
        CHECK_INT(online, 1);
        CHECK_STATUS(tether_context_is_online(ctx, NULL), TETHER_E_MISUSE);
        CHECK_STATUS(tether_context_fd(ctx, &online), TETHER_E_MISUSE);       /* THREAD mode */
        CHECK_STATUS(tether_context_poll(ctx, 0, NULL), TETHER_E_MISUSE);     /* THREAD mode */
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }
    CHECK(tu_file_exists(store));
    test_options_0_2(bucket, store);
}

static void *thread_errmsg(void *arg)
{
    (void)arg;
    /* A fresh thread has no failure: "". */
    return (void *)(intptr_t)(tether_errmsg() != NULL && tether_errmsg()[0] == '\0');
}

static void test_errmsg_per_thread(void)
{
    pthread_t t;
    void *r = NULL;
    tu_section("tether_errmsg per thread");
    CHECK_STATUS(tether_context_options_init(NULL, 1), TETHER_E_MISUSE);
    CHECK(pthread_create(&t, NULL, thread_errmsg, NULL) == 0);
    pthread_join(t, &r);
    CHECK(r != NULL);
    /* This thread's message is still there. */
    CHECK(tether_errmsg()[0] != '\0');
}

int main(int argc, char **argv)
{
    char bucket[128];
    (void)argc;
    tu_init(argv[0]);
    tu_url();
    test_version();
    test_errstr();
    test_options();
    test_values();
    test_null_handles();
    test_debug_count();
    test_errmsg_per_thread();

    tu_unique(bucket, sizeof bucket, "c-abi");
    if (CHECK(tu_put_bucket(bucket)) &&
        CHECK(tu_put_collection(bucket, "things",
                                "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}}}")))
        test_open_errors(bucket);

    tu_section("every context closed: nothing of theirs lives on");
    {
        static const tether_debug_counter kinds[] = {TETHER_DEBUG_CONTEXTS, TETHER_DEBUG_OBJECTS, TETHER_DEBUG_OBJECT_HANDLES,
                                            TETHER_DEBUG_RESULTS, TETHER_DEBUG_TASKS, TETHER_DEBUG_OBSERVERS};
        size_t i;
        for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
            int64_t n = -1;
            CHECK_OK(tether_debug_count(kinds[i], &n));
            if (n != 0)
                printf("   live count %d is %lld\n", (int)kinds[i], (long long)n);
            CHECK_INT(n, 0);
        }
    }
    return tu_finish();
}
