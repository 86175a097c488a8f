/* test_fetch_options.c — fetch options version 3: `offset` (skip results in
 * sort order, before `limit`, on the cache and the server alike) and
 * `server_query` (Kinto's query parameters, used as given for the server
 * phase; the predicate still answers from the cache). Exact answers in both
 * phases and with every policy, offsets at or past the end, the errors
 * (TETHER_E_INVALID before any callback: a negative or too large offset, a
 * bad server query), a server query leaving the other cached records alone,
 * and the older structs: init writes nothing past a version 2 or 3 struct,
 * and garbage where a later version has its fields is never read. Version
 * 4's init defaults are here too; its fields are in test_result_types.c. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>

#define NITEMS 120 /* > 2 pages of the test server's paginate_by (50) */

static char bucket[128];

typedef struct query {
    const char *predicate;
    const char *sort;
    int64_t limit;
    int64_t offset;
    const char *server_query;
} query;

static int start(tether_context *ctx, tu_fetch *f, const query *q, tether_cache_policy policy,
                 tether_task **task)
{
    tether_fetch_options o;
    int s = tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
    if (s != TETHER_OK)
        return s;
    o.entity = "items";
    o.sort = q->sort;
    o.limit = q->limit;
    o.policy = policy;
    o.predicate = q->predicate;
    o.offset = q->offset;
    o.server_query = q->server_query;
    return tether_fetch_start(ctx, &o, tu_fetch_cb, f, task);
}

/* Runs the fetch with one policy; checks the n of its objects: `cached` for
 * the CACHED phase of CACHE_THEN_SERVER, `final` for the FINAL one. */
static void expect_policy(tether_context *ctx, const query *q, tether_cache_policy policy, const char *cached,
                          const char *final, int line)
{
    tu_fetch f;
    char got[2048], what[512];
    tu_fetch_init(&f);
    snprintf(what, sizeof what, "line %d: %s sort %s limit %lld offset %lld query %.60s (policy %d)", line,
             q->predicate ? q->predicate : "(NULL)", q->sort ? q->sort : "(NULL)", (long long)q->limit,
             (long long)q->offset, q->server_query ? q->server_query : "(NULL)", (int)policy);
    if (tu_check_status(start(ctx, &f, q, policy, NULL), TETHER_OK, __FILE__, line, what) == TETHER_OK &&
        tu_check(tu_fetch_wait(&f, TU_WAIT_MS), __FILE__, line, what, "no FINAL callback")) {
        pthread_mutex_lock(&f.mu);
        tu_check_code(f.final_status, TETHER_OK, __FILE__, line, f.final_message);
        tu_check_str(tu_ns(f.final_objs, f.final_count, got, sizeof got), final, __FILE__, line, what);
        if (policy == TETHER_POLICY_CACHE_THEN_SERVER) {
            tu_check(f.cached == 1, __FILE__, line, what, "one CACHED callback");
            tu_check_str(tu_ns(f.cached_objs, f.cached_count, got, sizeof got), cached, __FILE__, line, what);
        } else {
            tu_check(f.cached == 0, __FILE__, line, what, "no CACHED callback");
        }
        tu_check(f.order_errors == 0 && f.results_errors == 0, __FILE__, line, what, "callback order/results");
        pthread_mutex_unlock(&f.mu);
    }
    tu_fetch_destroy(&f);
}

/* Both phases of CACHE_THEN_SERVER (the cache must be warm), SERVER_ONLY
 * (`final`) and CACHE_ONLY (`cached`). */
static void expect(tether_context *ctx, const char *predicate, const char *sort, int64_t limit, int64_t offset,
                   const char *server_query, const char *cached, const char *final, int line)
{
    query q;
    q.predicate = predicate;
    q.sort = sort;
    q.limit = limit;
    q.offset = offset;
    q.server_query = server_query;
    expect_policy(ctx, &q, TETHER_POLICY_CACHE_THEN_SERVER, cached, final, line);
    expect_policy(ctx, &q, TETHER_POLICY_SERVER_ONLY, cached, final, line);
    expect_policy(ctx, &q, TETHER_POLICY_CACHE_ONLY, cached, cached, line); /* its FINAL is the cache's */
}

/* The same answer from the cache and the server. */
#define SAME(pred, sort, limit, offset, expected) \
    expect(ctx, (pred), (sort), (limit), (offset), NULL, (expected), (expected), __LINE__)
#define SERVER(query, pred, sort, limit, offset, cached, final) \
    expect(ctx, (pred), (sort), (limit), (offset), (query), (cached), (final), __LINE__)

/* Fills `buf` (size > length) with a valid query of exactly `length` bytes:
 * in_n=1,2,3,5000,...,999... (no such n but 1, 2 and 3). */
static const char *long_query(char *buf, size_t length)
{
    size_t len;
    strcpy(buf, "in_n=1,2,3");
    len = strlen(buf);
    while (len + 5 <= length - 4) {
        memcpy(buf + len, ",5000", 5);
        len += 5;
    }
    buf[len++] = ',';
    while (len < length)
        buf[len++] = '9';
    buf[len] = '\0';
    return buf;
}

static void warm_up(tether_context *ctx)
{
    tu_fetch f;
    tu_section("a first fetch without predicate fills the cache");
    tu_fetch_init(&f);
    if (CHECK_OK(tu_fetch_start(ctx, &f, "items", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL)) == TETHER_OK) {
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        CHECK_CODE(f.final_status, TETHER_OK);
        CHECK_INT(f.final_count, NITEMS);
    }
    tu_fetch_destroy(&f);
}

static void test_offset(tether_context *ctx)
{
    tu_section("offset without and with limit: exact in both phases");
    SAME("n < 5", "n", 0, 3, "3,4");
    SAME("n < 10", "n", 4, 3, "3,4,5,6");
    SAME("n < 10", "-n", 4, 3, "6,5,4,3");
    SAME("n < 5", "n", 0, 0, "0,1,2,3,4");

    tu_section("offset without predicate, across the server's pages");
    SAME(NULL, "n", 5, 48, "48,49,50,51,52");
    SAME(NULL, "n", 0, 115, "115,116,117,118,119");
    SAME(NULL, "-n", 3, 100, "19,18,17");
    SAME(NULL, "n", 2, 99, "99,100");

    tu_section("offset with a predicate the server cannot filter (ENDSWITH)");
    SAME("label ENDSWITH '7'", "n", 2, 1, "17,27");
    SAME("label ENDSWITH '7'", "n", 0, 10, "107,117");
    SAME("label ENDSWITH '7'", "n", 4, 6, "67,77,87,97");
    SAME("label ENDSWITH '9'", "-n", 4, 5, "69,59,49,39");
    SAME("label ENDSWITH '3' AND n > 60", "-n", 3, 2, "93,83,73");

    tu_section("offset at or past the end: nothing");
    SAME("n < 5", "n", 0, 9, "");
    SAME("n < 5", "n", 0, 5, "");
    SAME("n < 5", "n", 3, 5, "");
    SAME(NULL, "n", 0, NITEMS, "");
    SAME(NULL, "-n", 10, 10000, "");
    SAME("label ENDSWITH '7'", "n", 0, 12, "");
    SAME(NULL, "n", 0, 2147483647, ""); /* the largest allowed */
}

static void test_server_query(tether_context *ctx)
{
    static char big[8002];

    tu_section("a server query asks the server, the predicate the cache");
    SERVER("in_n=1,2,3", "n == 2", "-n", 0, 0, "2", "3,2,1");
    SERVER("in_n=1,2,3", "n == 2", "n", 0, 0, "2", "1,2,3");
    SERVER("in_n=7,8", NULL, "n", 3, 0, "0,1,2", "7,8");
    SERVER("gt_n=115", NULL, "-n", 0, 2, "117,116,115,114,113,112,111,110,109,108,107,106,105,104,103,102,101,"
                                         "100,99,98,97,96,95,94,93,92,91,90,89,88,87,86,85,84,83,82,81,80,79,78,"
                                         "77,76,75,74,73,72,71,70,69,68,67,66,65,64,63,62,61,60,59,58,57,56,55,54,"
                                         "53,52,51,50,49,48,47,46,45,44,43,42,41,40,39,38,37,36,35,34,33,32,31,30,"
                                         "29,28,27,26,25,24,23,22,21,20,19,18,17,16,15,14,13,12,11,10,9,8,7,6,5,4,"
                                         "3,2,1,0",
           "117,116");

    tu_section("a server query with sort, offset and limit");
    SERVER("in_n=1,2,3,4,5", "n >= 100", "n", 2, 1, "101,102", "2,3");
    SERVER("lt_n=10", "n < 10", "-n", 3, 2, "7,6,5", "7,6,5");
    SERVER("lt_n=10", "n < 10", "n", 0, 8, "8,9", "8,9");
    SERVER("lt_n=10", "n < 10", "n", 0, 10, "", "");
    SERVER("min_n=40&max_n=60", NULL, "n", 3, 9, "9,10,11", "49,50,51");
    SERVER("gt_n=10", "n < 3", "n", 5, 60, "", "71,72,73,74,75");
    SERVER("gt_n=10", "n < 3", "-n", 0, 105, "", "14,13,12,11");

    tu_section("a server query is used as given (percent-encoded)");
    SERVER("label=item%207", "n == 8", "n", 0, 0, "8", "7");
    SERVER("like_label=item%2011*", "n == 3", "-n", 0, 0, "3", "119,118,117,116,115,114,113,112,111,110,11");
    SERVER("in_n=1,2,3", "FALSEPREDICATE", "n", 0, 0, "", "1,2,3");
    SERVER("in_n=1000,2000", "TRUEPREDICATE", "-n", 2, 0, "119,118", "");

    tu_section("a server query of 8000 bytes is accepted");
    SERVER(long_query(big, 8000), "n == 2", "n", 0, 0, "2", "1,2,3");

    tu_section("nothing removed from the cache");
    SAME(NULL, "n", 0, 0,
         "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,"
         "36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,"
         "69,70,71,72,73,74,75,76,77,78,79,80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99,100,"
         "101,102,103,104,105,106,107,108,109,110,111,112,113,114,115,116,117,118,119");
}

/* Starts a fetch that must fail with `expected` before any callback. */
static void refused(tether_context *ctx, const char *predicate, int64_t offset, const char *server_query,
                    tether_cache_policy policy, int expected, int line)
{
    tu_fetch f;
    tether_task *task = NULL;
    query q;
    char what[256], msg[256];
    int s;
    q.predicate = predicate;
    q.sort = "n";
    q.limit = 0;
    q.offset = offset;
    q.server_query = server_query;
    tu_fetch_init(&f);
    s = start(ctx, &f, &q, policy, &task);
    snprintf(msg, sizeof msg, "%s", tether_errmsg());
    snprintf(what, sizeof what, "line %d: offset %lld query \"%.40s\" (%zu bytes, policy %d): errmsg \"%.100s\"",
             line, (long long)offset, server_query ? server_query : "(NULL)",
             server_query ? strlen(server_query) : 0, (int)policy, msg);
    tu_check_code(s, expected, __FILE__, line, what);
    tu_check(msg[0] != '\0', __FILE__, line, what, "a message");
    tu_check(task == NULL, __FILE__, line, what, "no task");
    tu_sleep_ms(20);
    tu_check(tu_fetch_calls(&f) == 0, __FILE__, line, what, "no callback");
    tu_fetch_destroy(&f);
}

#define REFUSED(pred, offset, query)                                                                  \
    do {                                                                                              \
        refused(ctx, (pred), (offset), (query), TETHER_POLICY_CACHE_THEN_SERVER, TETHER_E_INVALID,    \
                __LINE__);                                                                            \
        refused(ctx, (pred), (offset), (query), TETHER_POLICY_CACHE_ONLY, TETHER_E_INVALID, __LINE__); \
        refused(ctx, (pred), (offset), (query), TETHER_POLICY_SERVER_ONLY, TETHER_E_INVALID, __LINE__); \
    } while (0)

static void test_errors(tether_context *ctx)
{
    static char big[20002];
    int64_t live;

    tu_section("an offset out of 0..2^31-1: TETHER_E_INVALID, no callback");
    REFUSED(NULL, -1, NULL);
    REFUSED("n < 5", -1, NULL);
    REFUSED(NULL, -2147483647 - 1, NULL);
    REFUSED(NULL, INT64_MIN, NULL);
    REFUSED(NULL, 2147483648LL, NULL);
    REFUSED(NULL, INT64_MAX, NULL);
    REFUSED("n == 2", -1, "in_n=1,2,3");

    tu_section("a bad server query: TETHER_E_INVALID, no callback");
    REFUSED(NULL, 0, "");
    REFUSED(NULL, 0, "a b");
    REFUSED(NULL, 0, "in_n=1,2 ");
    REFUSED(NULL, 0, " in_n=1");
    REFUSED(NULL, 0, "x=1#frag");
    REFUSED(NULL, 0, "#");
    REFUSED(NULL, 0, "caf\xc3\xa9=1"); /* UTF-8, not ASCII */
    REFUSED(NULL, 0, "caf\xe9=1");     /* neither */
    REFUSED(NULL, 0, "\xff");
    REFUSED(NULL, 0, "a=\x01");
    REFUSED(NULL, 0, "a=\tb");
    REFUSED(NULL, 0, "a=b\n");
    REFUSED(NULL, 0, "a=b\r");
    REFUSED(NULL, 0, "a=b\x7f");
    REFUSED("n == 2", 0, "a b");
    REFUSED(NULL, 0, long_query(big, 8001));
    REFUSED(NULL, 0, long_query(big, 20000));

    tu_section("other errors still come with a server query");
    refused(ctx, "n == 'x'", 0, "in_n=1", TETHER_POLICY_CACHE_THEN_SERVER, TETHER_E_INVALID, __LINE__);

    tu_section("no task left behind");
    live = tu_debug_count_settle(TETHER_DEBUG_TASKS, 0, 2000);
    CHECK_INT(live, 0);
}

/* The version 2 struct, as a host built with the version 2 header has it. */
typedef struct fetch_options_v2 {
    unsigned int version;
    const char *entity;
    const char *sort;
    int64_t limit;
    tether_cache_policy policy;
    const char *predicate;
    const tether_value *arguments;
    size_t argument_count;
} fetch_options_v2;

/* Its fields are where version 3 has them, and version 3 adds after them. */
typedef char v2_layout_matches[(offsetof(fetch_options_v2, entity) == offsetof(tether_fetch_options, entity) &&
                                offsetof(fetch_options_v2, sort) == offsetof(tether_fetch_options, sort) &&
                                offsetof(fetch_options_v2, limit) == offsetof(tether_fetch_options, limit) &&
                                offsetof(fetch_options_v2, policy) == offsetof(tether_fetch_options, policy) &&
                                offsetof(fetch_options_v2, predicate) ==
                                    offsetof(tether_fetch_options, predicate) &&
                                offsetof(fetch_options_v2, arguments) ==
                                    offsetof(tether_fetch_options, arguments) &&
                                offsetof(fetch_options_v2, argument_count) ==
                                    offsetof(tether_fetch_options, argument_count) &&
                                sizeof(fetch_options_v2) <= offsetof(tether_fetch_options, offset))
                                   ? 1
                                   : -1];

static void test_version_2(tether_context *ctx)
{
    tether_fetch_options o;
    unsigned char *bytes = (unsigned char *)&o;
    size_t i, v2_end = sizeof(fetch_options_v2), untouched = 0;
    tu_fetch f;
    tether_value arg;
    char got[256];

    tu_section("tether_fetch_options_init(&o, 2) fills the version 2 fields only");
    memset(&o, 0xAB, sizeof o);
    CHECK_OK(tether_fetch_options_init(&o, 2));
    CHECK_INT(o.version, 2);
    CHECK(o.entity == NULL && o.sort == NULL && o.predicate == NULL && o.arguments == NULL);
    CHECK_INT(o.limit, 0);
    CHECK_INT(o.argument_count, 0);
    CHECK_INT(o.policy, TETHER_POLICY_CACHE_THEN_SERVER);
    for (i = v2_end; i < sizeof o; i++)
        untouched += bytes[i] == 0xAB;
    CHECK_INT(untouched, sizeof o - v2_end);

    tu_section("tether_fetch_options_init(&o, 3) fills the version 3 defaults");
    memset(&o, 0xAB, sizeof o);
    CHECK_OK(tether_fetch_options_init(&o, 3));
    CHECK_INT(o.version, 3);
    CHECK_INT(o.offset, 0);
    CHECK(o.server_query == NULL && o.predicate == NULL && o.arguments == NULL);
    CHECK_INT(o.argument_count, 0);
    CHECK_STATUS(tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION + 1), TETHER_E_MISUSE);
    CHECK_STATUS(tether_fetch_options_init(&o, 0), TETHER_E_MISUSE);

    tu_section("a version 2 fetch ignores garbage where version 3 has offset and server_query");
    CHECK_OK(tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION));
    arg.type = TETHER_TYPE_INTEGER;
    arg.integer = 5;
    arg.real = 0.0;
    arg.text = NULL;
    arg.length = 0;
    o.entity = "items";
    o.sort = "-n";
    o.limit = 3;
    o.policy = TETHER_POLICY_SERVER_ONLY;
    o.predicate = "n < $1";
    o.arguments = &arg;
    o.argument_count = 1;
    o.offset = -77;                    /* would be TETHER_E_INVALID */
    o.server_query = "not a query #\xff"; /* would be TETHER_E_INVALID */
    o.version = 2;
    tu_fetch_init(&f);
    if (CHECK_OK(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL)) == TETHER_OK) {
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        CHECK_CODE(f.final_status, TETHER_OK);
        CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "4,3,2");
    }
    tu_fetch_destroy(&f);
    /* A valid-looking query and offset there are not used either. */
    memset((unsigned char *)&o + v2_end, 0, sizeof o - v2_end);
    o.offset = 1;
    o.server_query = "in_n=100,101";
    o.policy = TETHER_POLICY_CACHE_THEN_SERVER;
    tu_fetch_init(&f);
    if (CHECK_OK(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL)) == TETHER_OK) {
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        CHECK_CODE(f.final_status, TETHER_OK);
        CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "4,3,2");
        CHECK_STR(tu_ns(f.cached_objs, f.cached_count, got, sizeof got), "4,3,2");
    }
    tu_fetch_destroy(&f);

    tu_section("a struct exactly as long as version 2, on the heap");
    {
        fetch_options_v2 *v2 = malloc(sizeof *v2);
        memset(v2, 0xAB, sizeof *v2);
        CHECK_OK(tether_fetch_options_init((tether_fetch_options *)v2, 2));
        CHECK_INT(v2->version, 2);
        v2->entity = "items";
        v2->sort = "n";
        v2->limit = 3;
        v2->policy = TETHER_POLICY_CACHE_ONLY;
        v2->predicate = "label ENDSWITH $1";
        arg.type = TETHER_TYPE_TEXT;
        arg.text = (char *)"7"; /* the library only reads arguments */
        arg.length = 1;
        v2->arguments = &arg;
        v2->argument_count = 1;
        tu_fetch_init(&f);
        if (CHECK_OK(tether_fetch_start(ctx, (const tether_fetch_options *)v2, tu_fetch_cb, &f, NULL)) ==
            TETHER_OK) {
            CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
            CHECK_CODE(f.final_status, TETHER_OK);
            CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "7,17,27");
        }
        tu_fetch_destroy(&f);
        free(v2);
    }
}

/* The version 3 struct: everything up to server_query. */
typedef struct fetch_options_v3 {
    unsigned int version;
    const char *entity;
    const char *sort;
    int64_t limit;
    tether_cache_policy policy;
    const char *predicate;
    const tether_value *arguments;
    size_t argument_count;
    int64_t offset;
    const char *server_query;
} fetch_options_v3;

typedef char v3_layout_matches[(offsetof(fetch_options_v3, predicate) == offsetof(tether_fetch_options, predicate) &&
                                offsetof(fetch_options_v3, argument_count) ==
                                    offsetof(tether_fetch_options, argument_count) &&
                                offsetof(fetch_options_v3, offset) == offsetof(tether_fetch_options, offset) &&
                                offsetof(fetch_options_v3, server_query) ==
                                    offsetof(tether_fetch_options, server_query) &&
                                sizeof(fetch_options_v3) <= offsetof(tether_fetch_options, result_type))
                                   ? 1
                                   : -1];

static pthread_mutex_t progress_mu = PTHREAD_MUTEX_INITIALIZER;
static int progress_calls;

static void count_progress(tether_task *task, int64_t received, int64_t total, void *userdata)
{
    (void)task;
    (void)received;
    (void)total;
    (void)userdata;
    pthread_mutex_lock(&progress_mu);
    progress_calls++;
    pthread_mutex_unlock(&progress_mu);
}

static int progress_count(void)
{
    int n;
    pthread_mutex_lock(&progress_mu);
    n = progress_calls;
    progress_calls = 0;
    pthread_mutex_unlock(&progress_mu);
    return n;
}

static void test_version_3(tether_context *ctx)
{
    tether_fetch_options o;
    unsigned char *bytes = (unsigned char *)&o;
    size_t i, v3_end = sizeof(fetch_options_v3), untouched = 0;
    tu_fetch f;
    tether_result_type type;
    char got[256];

    tu_section("tether_fetch_options_init(&o, 3) fills the version 3 fields only");
    memset(&o, 0xAB, sizeof o);
    CHECK_OK(tether_fetch_options_init(&o, 3));
    CHECK_INT(o.version, 3);
    CHECK_INT(o.offset, 0);
    CHECK(o.server_query == NULL);
    for (i = v3_end; i < sizeof o; i++)
        untouched += bytes[i] == 0xAB;
    CHECK_INT(untouched, sizeof o - v3_end);

    tu_section("tether_fetch_options_init(&o, 4) fills the version 4 defaults");
    memset(&o, 0xAB, sizeof o);
    CHECK_OK(tether_fetch_options_init(&o, 4));
    CHECK_INT(o.version, 4);
    CHECK(o.entity == NULL && o.sort == NULL && o.predicate == NULL && o.arguments == NULL);
    CHECK(o.server_query == NULL && o.properties == NULL && o.progress == NULL);
    CHECK_INT(o.limit, 0);
    CHECK_INT(o.offset, 0);
    CHECK_INT(o.argument_count, 0);
    CHECK_INT(o.policy, TETHER_POLICY_CACHE_THEN_SERVER);
    CHECK_INT(o.result_type, TETHER_RESULT_OBJECTS);
    CHECK_INT(o.batch_size, 0);

    /* A server query always goes to the server, so a progress callback that
     * were read would be called: the version 4 control shows it is. */
    tu_section("version 4 with progress: called for a server query (the control)");
    CHECK_OK(tether_fetch_options_init(&o, 4));
    o.entity = "items";
    o.sort = "-n";
    o.limit = 3;
    o.policy = TETHER_POLICY_SERVER_ONLY;
    o.server_query = "lt_n=100";
    o.progress = count_progress;
    progress_count();
    tu_fetch_init(&f);
    if (CHECK_OK(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL)) == TETHER_OK) {
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        CHECK_CODE(f.final_status, TETHER_OK);
        CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "99,98,97");
    }
    tu_fetch_destroy(&f);
    CHECK(progress_count() >= 1);

    tu_section("a version 3 fetch ignores garbage where version 4 has its fields");
    o.result_type = TETHER_RESULT_COUNT; /* would answer a count */
    o.properties = "nope";               /* would be TETHER_E_INVALID */
    o.batch_size = 7;
    o.progress = count_progress;         /* would be called */
    o.version = 3;
    tu_fetch_init(&f);
    if (CHECK_OK(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL)) == TETHER_OK) {
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        CHECK_CODE(f.final_status, TETHER_OK);
        CHECK_INT(f.results_errors, 0);
        CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "99,98,97");
        type = (tether_result_type)99;
        CHECK_OK(tether_results_type(f.final_results, &type));
        CHECK_INT(type, TETHER_RESULT_OBJECTS);
    }
    tu_fetch_destroy(&f);
    tu_sleep_ms(150);
    CHECK_INT(progress_count(), 0);

    tu_section("a struct exactly as long as version 3, on the heap");
    {
        fetch_options_v3 *v3 = malloc(sizeof *v3);
        tether_value arg = {TETHER_TYPE_INTEGER, 10, 0.0, NULL, 0};
        memset(v3, 0xAB, sizeof *v3);
        CHECK_OK(tether_fetch_options_init((tether_fetch_options *)v3, 3));
        CHECK_INT(v3->version, 3);
        v3->entity = "items";
        v3->sort = "-n";
        v3->limit = 3;
        v3->offset = 2;
        v3->policy = TETHER_POLICY_CACHE_THEN_SERVER;
        v3->predicate = "n < $1";
        v3->arguments = &arg;
        v3->argument_count = 1;
        tu_fetch_init(&f);
        if (CHECK_OK(tether_fetch_start(ctx, (const tether_fetch_options *)v3, tu_fetch_cb, &f, NULL)) ==
            TETHER_OK) {
            CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
            CHECK_CODE(f.final_status, TETHER_OK);
            CHECK_INT(f.results_errors, 0);
            CHECK_STR(tu_ns(f.cached_objs, f.cached_count, got, sizeof got), "7,6,5");
            CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "7,6,5");
            type = (tether_result_type)99;
            CHECK_OK(tether_results_type(f.final_results, &type));
            CHECK_INT(type, TETHER_RESULT_OBJECTS);
        }
        tu_fetch_destroy(&f);
        free(v3);
    }
}

/* A server query's listing is not the whole collection: what it does not
 * answer stays cached, even a record the server no longer has; what it
 * answers is updated. */
static void test_cache_kept(const char *store)
{
    tether_context *ctx;
    tu_fetch f;
    char got[256];
    tether_object *obj = NULL;
    int i;

    tu_section("a server query removes nothing from the cache");
    if (!CHECK(tu_put_collection(bucket, "keep",
                                 "{\"type\": \"object\", \"properties\": {"
                                 "\"n\": {\"type\": \"integer\"}, \"label\": {\"type\": \"string\"}}}")))
        return;
    for (i = 0; i < 10; i++) {
        char id[16], data[64];
        snprintf(id, sizeof id, "k%d", i);
        snprintf(data, sizeof data, "{\"n\": %d, \"label\": \"v1\"}", i);
        if (!CHECK(tu_put_record(bucket, "keep", id, data)))
            return;
    }
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return;
    tu_fetch_init(&f);
    if (CHECK_OK(tu_fetch_start(ctx, &f, "keep", "n", 0, TETHER_POLICY_SERVER_ONLY, NULL)) == TETHER_OK) {
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        CHECK_INT(f.final_count, 10);
    }
    tu_fetch_destroy(&f);
    CHECK(tu_delete_record(bucket, "keep", "k9"));
    CHECK(tu_patch_record(bucket, "keep", "k6", "{\"label\": \"v2\"}"));

    {
        tether_fetch_options o;
        tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
        o.entity = "keep";
        o.sort = "n";
        o.predicate = "n < 2";
        o.server_query = "gt_n=4";
        tu_fetch_init(&f);
        if (CHECK_OK(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL)) == TETHER_OK) {
            CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
            CHECK_CODE(f.final_status, TETHER_OK);
            CHECK_STR(tu_ns(f.cached_objs, f.cached_count, got, sizeof got), "0,1");
            CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "5,6,7,8");
        }
        tu_fetch_destroy(&f);
        o.predicate = NULL;
        o.server_query = "in_n=3,9";
        o.policy = TETHER_POLICY_SERVER_ONLY;
        tu_fetch_init(&f);
        if (CHECK_OK(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL)) == TETHER_OK) {
            CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
            CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "3");
        }
        tu_fetch_destroy(&f);
    }
    tu_fetch_init(&f);
    if (CHECK_OK(tu_fetch_start(ctx, &f, "keep", "n", 0, TETHER_POLICY_CACHE_ONLY, NULL)) == TETHER_OK) {
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "0,1,2,3,4,5,6,7,8,9");
    }
    tu_fetch_destroy(&f);
    if (CHECK_OK(tether_context_object(ctx, "keep", "k6", &obj)) == TETHER_OK) {
        char label[16];
        CHECK_OK(tu_peek_text(obj, "label", label, sizeof label));
        CHECK_STR(label, "v2");
        tether_object_free(obj);
    }
    if (CHECK_OK(tether_context_object(ctx, "keep", "k5", &obj)) == TETHER_OK) {
        char label[16];
        CHECK_OK(tu_peek_text(obj, "label", label, sizeof label));
        CHECK_STR(label, "v1");
        tether_object_free(obj);
    }
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
}

int main(int argc, char **argv)
{
    char store[512], store2[512];
    tether_context *ctx;
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-fopt");
    tu_store_path(store, sizeof store, "fopt");
    tu_store_path(store2, sizeof store2, "fopt-keep");
    /* items q000..q119: n = i, label "item i". */
    if (!CHECK(tu_seed_numbered(bucket, "items", "q%03d", "item", NULL, NULL, NITEMS)))
        return tu_finish();
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (ctx) {
        warm_up(ctx);
        test_offset(ctx);
        test_server_query(ctx);
        test_errors(ctx);
        test_version_2(ctx);
        test_version_3(ctx);
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }
    test_cache_kept(store2);
    return tu_finish();
}
