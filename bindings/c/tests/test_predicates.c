/* test_predicates.c — fetches with a predicate (fetch options version 2):
 * exact answers from the server and from the cache with tether_value
 * arguments (TEXT by length, holding NUL), arguments borrowed for the call
 * only, the version 1 struct (no predicate, and init writes no further than
 * it goes), and the errors: bad predicates (TETHER_E_INVALID, the message
 * says the column), arguments NULL with a count (TETHER_E_MISUSE), JSON and
 * unknown argument types, TEXT that is not UTF-8. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>

#define NITEMS 120 /* > 2 pages of the test server's paginate_by (50) */

static char bucket[128];

/* items p000..p119: n = i, label "item i", score i.5 (a "tags" array column
 * too, never set); and three more: pnul (n 1001, label "a\0b"), pquote
 * (n 1002, label it's "q"), pfive (n 1003, label "5"); and for the
 * language's decisions (issue 21, cases 7 and 8): pstar (n 1004, label
 * "a*b", score 2^53 as a real), pquest (n 1005, "a?b"), pslash (n 1006,
 * "a\b"). */
static int seed(void)
{
    return tu_seed_numbered(bucket, "items", "p%03d", "item",
                            "\"score\": {\"type\": \"number\"}, \"tags\": {\"type\": \"array\"}",
                            "\"score\": %d.5", NITEMS) &&
           tu_put_record(bucket, "items", "pnul", "{\"n\": 1001, \"label\": \"a\\u0000b\"}") &&
           tu_put_record(bucket, "items", "pquote", "{\"n\": 1002, \"label\": \"it's \\\"q\\\"\"}") &&
           tu_put_record(bucket, "items", "pfive", "{\"n\": 1003, \"label\": \"5\"}") &&
           tu_put_record(bucket, "items", "pstar",
                         "{\"n\": 1004, \"label\": \"a*b\", \"score\": 9007199254740992.0}") &&
           tu_put_record(bucket, "items", "pquest", "{\"n\": 1005, \"label\": \"a?b\", \"score\": 0.25}") &&
           tu_put_record(bucket, "items", "pslash", "{\"n\": 1006, \"label\": \"a\\\\b\", \"score\": 0.5}");
}

static tether_value integer(int64_t i)
{
    tether_value v = {TETHER_TYPE_INTEGER, 0, 0.0, NULL, 0};
    v.integer = i;
    return v;
}

static tether_value text(const char *s, size_t length)
{
    tether_value v = {TETHER_TYPE_TEXT, 0, 0.0, NULL, 0};
    v.text = (char *)s; /* the library only reads arguments */
    v.length = length;
    return v;
}

static int start(tether_context *ctx, tu_fetch *f, const char *predicate, const tether_value *args,
                 size_t count, const char *sort, int64_t limit, tether_cache_policy policy)
{
    tether_fetch_options o;
    int s = tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
    if (s != TETHER_OK)
        return s;
    o.entity = "items";
    o.sort = sort;
    o.limit = limit;
    o.policy = policy;
    o.predicate = predicate;
    o.arguments = args;
    o.argument_count = count;
    return tether_fetch_start(ctx, &o, tu_fetch_cb, f, NULL);
}

/* Runs the fetch and checks the n of its objects: both phases for
 * CACHE_THEN_SERVER (the cache must be warm), else the FINAL one. */
static void expect(tether_context *ctx, const char *predicate, const tether_value *args, size_t count,
                   const char *sort, int64_t limit, tether_cache_policy policy, const char *expected,
                   int line)
{
    tu_fetch f;
    char got[1024], what[512];
    tu_fetch_init(&f);
    snprintf(what, sizeof what, "line %d: %s (policy %d)", line, predicate ? predicate : "(NULL)", (int)policy);
    if (tu_check_status(start(ctx, &f, predicate, args, count, sort, limit, policy), TETHER_OK, __FILE__,
                        line, what) == TETHER_OK &&
        tu_check(tu_fetch_wait(&f, TU_WAIT_MS), __FILE__, line, what, "no FINAL callback")) {
        pthread_mutex_lock(&f.mu);
        tu_check_code(f.final_status, TETHER_OK, __FILE__, line, f.final_message);
        tu_check_str(tu_ns(f.final_objs, f.final_count, got, sizeof got), expected, __FILE__, line, what);
        if (policy == TETHER_POLICY_CACHE_THEN_SERVER) {
            tu_check(f.cached == 1, __FILE__, line, what, "one CACHED callback");
            tu_check_str(tu_ns(f.cached_objs, f.cached_count, got, sizeof got), expected, __FILE__, line, what);
        }
        tu_check(f.order_errors == 0 && f.results_errors == 0, __FILE__, line, what, "callback order/results");
        pthread_mutex_unlock(&f.mu);
    }
    tu_fetch_destroy(&f);
}

#define EXPECT(pred, args, count, sort, limit, policy, expected) \
    expect(ctx, (pred), (args), (count), (sort), (limit), (policy), (expected), __LINE__)

/* Every policy that answers from the cache or the server gives `expected`. */
#define EXPECT_ALL(pred, args, count, sort, limit, expected)                                   \
    do {                                                                                       \
        EXPECT(pred, args, count, sort, limit, TETHER_POLICY_CACHE_THEN_SERVER, expected);     \
        EXPECT(pred, args, count, sort, limit, TETHER_POLICY_SERVER_ONLY, expected);           \
        EXPECT(pred, args, count, sort, limit, TETHER_POLICY_CACHE_ONLY, expected);            \
    } while (0)

static void test_answers(tether_context *ctx)
{
    tether_value a[3];
    static const char nul[] = "a\0bXYZ"; /* its first 3 bytes are the label of pnul */

    tu_section("a first fetch without predicate fills the cache");
    EXPECT(NULL, NULL, 0, "n", 3, TETHER_POLICY_SERVER_ONLY, "0,1,2");
    {
        tu_fetch f;
        tu_fetch_init(&f);
        CHECK_OK(start(ctx, &f, NULL, NULL, 0, NULL, 0, TETHER_POLICY_SERVER_ONLY));
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        CHECK_INT(f.final_count, NITEMS + 6);
        tu_fetch_destroy(&f);
    }

    tu_section("integer and text arguments, sort and limit: exact in both phases");
    a[0] = integer(10);
    a[1] = integer(40);
    a[2] = text("5", 1);
    EXPECT_ALL("n >= $1 AND n < $2 AND label ENDSWITH $3", a, 3, "n", 0, "15,25,35");
    EXPECT_ALL("n >= $1 AND n < $2 AND label ENDSWITH $3", a, 3, "-n", 2, "35,25");
    a[0] = text("item 1", 6);
    EXPECT_ALL("label BEGINSWITH $1", a, 1, "-n", 4, "119,118,117,116");
    a[0] = integer(100);
    EXPECT_ALL("n < 3 OR n IN {$1, 200} OR label ==[c] 'ITEM 7'", a, 1, "n", 0, "0,1,2,7,100");
    EXPECT_ALL("NOT (n < 118) AND n < 1000", NULL, 0, "-n", 0, "119,118");

    tu_section("REAL, BOOLEAN and NULL arguments");
    a[0].type = TETHER_TYPE_REAL;
    a[0].real = 116.75;
    EXPECT_ALL("score > $1 AND n < 1000", a, 1, "n", 0, "117,118,119");
    a[0] = integer(0);
    a[0].type = TETHER_TYPE_NULL;
    EXPECT_ALL("score == $1", a, 1, "n", 0, "1001,1002,1003");

    tu_section("TEXT by length: an embedded NUL, quotes, a number-like text");
    a[0] = text(nul, 3); /* "a\0b", not "a" nor "a\0bXYZ" */
    EXPECT("label == $1", a, 1, "n", 0, TETHER_POLICY_CACHE_ONLY, "1001");
    EXPECT("label == $1", a, 1, "n", 0, TETHER_POLICY_CACHE_THEN_SERVER, "1001");
    EXPECT("label == $1", a, 1, "n", 0, TETHER_POLICY_SERVER_ONLY, "1001");
    a[0] = text(nul, 1); /* "a" */
    EXPECT_ALL("label == $1", a, 1, "n", 0, "");
    a[0] = text(nul, 2); /* "a\0" */
    EXPECT_ALL("label BEGINSWITH $1", a, 1, "n", 0, "1001");
    a[0] = text("it's \"q\"", 8);
    EXPECT_ALL("label == $1", a, 1, "n", 0, "1002");
    a[0] = text("5", 1);
    EXPECT_ALL("label == $1", a, 1, "n", 0, "1003");
    a[0] = text("", 0);
    EXPECT_ALL("label == $1", a, 1, "n", 0, "");
    a[0] = text(NULL, 0); /* empty text may come without a pointer */
    EXPECT_ALL("label == $1", a, 1, "n", 0, "");

    tu_section("LIKE escapes: \\* \\? \\\\ are literal (issue 21, case 8)");
    EXPECT_ALL("label LIKE 'a\\*b'", NULL, 0, "n", 0, "1004");
    EXPECT_ALL("label LIKE 'a\\?b'", NULL, 0, "n", 0, "1005");
    EXPECT_ALL("label LIKE 'a\\\\b'", NULL, 0, "n", 0, "1006");
    EXPECT_ALL("label LIKE 'a?b'", NULL, 0, "n", 0, "1001,1004,1005,1006"); /* a\0b too */
    a[0] = text("a\\*b", 4); /* an argument is a pattern too */
    EXPECT_ALL("label LIKE $1", a, 1, "n", 0, "1004");

    tu_section("an integer against a real compares exactly (issue 21, case 7)");
    EXPECT_ALL("score == 9007199254740993", NULL, 0, "n", 0, "");
    EXPECT_ALL("score < 9007199254740993 AND n > 1000", NULL, 0, "n", 0, "1004,1005,1006");
    EXPECT_ALL("score == 9007199254740992", NULL, 0, "n", 0, "1004");
    a[0] = integer(9007199254740993);
    EXPECT_ALL("score >= $1", a, 1, "n", 0, "");

    tu_section("=< and =>, a real against an integer, [c] on a number, empty sets and ranges (issue 21, case 8)");
    EXPECT_ALL("n =< 2", NULL, 0, "n", 0, "0,1,2");
    EXPECT_ALL("n => 118 AND n < 1000", NULL, 0, "n", 0, "118,119");
    EXPECT_ALL("n < 2.5", NULL, 0, "n", 0, "0,1,2");
    EXPECT_ALL("n == 2.5", NULL, 0, "n", 0, "");
    EXPECT_ALL("n ==[cd] 41", NULL, 0, "n", 0, "41");
    EXPECT_ALL("label CONTAINS '' AND n > 1000", NULL, 0, "n", 0, "1001,1002,1003,1004,1005,1006");
    EXPECT_ALL("n IN {}", NULL, 0, "n", 0, "");
    EXPECT_ALL("NOT n IN {} AND n < 2", NULL, 0, "n", 0, "0,1");
    EXPECT_ALL("n BETWEEN {5, 3}", NULL, 0, "n", 0, "");

    tu_section("arguments are borrowed for the call only");
    {
        tu_fetch f;
        char label[16] = "item 42";
        char got[64];
        tether_value *heap = malloc(sizeof *heap);
        *heap = text(label, strlen(label));
        tu_fetch_init(&f);
        CHECK_OK(start(ctx, &f, "label == $1", heap, 1, NULL, 0, TETHER_POLICY_SERVER_ONLY));
        /* Overwritten and freed at once: the fetch must not look at them again. */
        memcpy(label, "item 43", 7);
        heap->integer = 12345;
        heap->type = TETHER_TYPE_JSON;
        free(heap);
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        CHECK_CODE(f.final_status, TETHER_OK);
        CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "42");
        tu_fetch_destroy(&f);
    }
}

/* The version 1 struct, as a host built with the version 1 header has it. */
typedef struct fetch_options_v1 {
    unsigned int version;
    const char *entity;
    const char *sort;
    int64_t limit;
    tether_cache_policy policy;
} fetch_options_v1;

/* Its fields are where version 2 has them. */
typedef char v1_layout_matches[(offsetof(fetch_options_v1, entity) == offsetof(tether_fetch_options, entity) &&
                                offsetof(fetch_options_v1, sort) == offsetof(tether_fetch_options, sort) &&
                                offsetof(fetch_options_v1, limit) == offsetof(tether_fetch_options, limit) &&
                                offsetof(fetch_options_v1, policy) == offsetof(tether_fetch_options, policy))
                                   ? 1
                                   : -1];

static void test_version_1(tether_context *ctx)
{
    tether_fetch_options o;
    unsigned char *bytes = (unsigned char *)&o;
    size_t i, v1_end = offsetof(tether_fetch_options, predicate), untouched = 0;
    tu_fetch f;

    tu_section("tether_fetch_options_init(&o, 1) fills the version 1 fields only");
    memset(&o, 0xAB, sizeof o);
    CHECK_OK(tether_fetch_options_init(&o, 1));
    CHECK_INT(o.version, 1);
    CHECK(o.entity == NULL && o.sort == NULL);
    CHECK_INT(o.limit, 0);
    CHECK_INT(o.policy, TETHER_POLICY_CACHE_THEN_SERVER);
    for (i = v1_end; i < sizeof o; i++)
        untouched += bytes[i] == 0xAB;
    CHECK_INT(untouched, sizeof o - v1_end);
    CHECK_OK(tether_fetch_options_init(&o, 2));
    CHECK(o.predicate == NULL && o.arguments == NULL);
    CHECK_INT(o.argument_count, 0);
    CHECK_STATUS(tether_fetch_options_init(&o, 0), TETHER_E_MISUSE);
    CHECK_STATUS(tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION + 1), TETHER_E_MISUSE);
    CHECK_STATUS(tether_fetch_options_init(NULL, 1), TETHER_E_MISUSE);

    tu_section("a version 1 fetch has no predicate: the later fields are not read");
    CHECK_OK(tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION));
    o.entity = "items";
    o.sort = "-n";
    o.limit = 2;
    o.policy = TETHER_POLICY_SERVER_ONLY;
    o.predicate = "n == ((("; /* would be TETHER_E_INVALID */
    o.arguments = NULL;
    o.argument_count = 7;     /* would be TETHER_E_MISUSE */
    o.offset = -1;            /* version 3: would be TETHER_E_INVALID */
    o.server_query = "a b#";  /* version 3: would be TETHER_E_INVALID */
    o.version = 1;
    tu_fetch_init(&f);
    if (CHECK_OK(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL)) == TETHER_OK) {
        char got[64];
        CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
        CHECK_CODE(f.final_status, TETHER_OK);
        CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "1006,1005");
    }
    tu_fetch_destroy(&f);

    tu_section("a struct exactly as long as version 1, on the heap");
    {
        fetch_options_v1 *v1 = malloc(sizeof *v1);
        CHECK_OK(tether_fetch_options_init((tether_fetch_options *)v1, 1));
        CHECK_INT(v1->version, 1);
        v1->entity = "items";
        v1->sort = "n";
        v1->limit = 3;
        v1->policy = TETHER_POLICY_CACHE_ONLY;
        tu_fetch_init(&f);
        if (CHECK_OK(tether_fetch_start(ctx, (const tether_fetch_options *)v1, tu_fetch_cb, &f, NULL)) ==
            TETHER_OK) {
            char got[64];
            CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
            CHECK_CODE(f.final_status, TETHER_OK);
            CHECK_STR(tu_ns(f.final_objs, f.final_count, got, sizeof got), "0,1,2");
        }
        tu_fetch_destroy(&f);
        free(v1);
    }
}

/* Starts a fetch that must fail with `expected` before any callback; if
 * `column` is set, tether_errmsg() must contain it (e.g. "column 9"). */
static void refused(tether_context *ctx, const char *predicate, const tether_value *args, size_t count,
                    int expected, const char *column, int line)
{
    tu_fetch f;
    tether_fetch_options o;
    tether_task *task = NULL;
    char what[1024], msg[256];
    int s;
    tu_fetch_init(&f);
    tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
    o.entity = "items";
    o.predicate = predicate;
    o.arguments = args;
    o.argument_count = count;
    s = tether_fetch_start(ctx, &o, tu_fetch_cb, &f, &task);
    snprintf(msg, sizeof msg, "%s", tether_errmsg());
    snprintf(what, sizeof what, "line %d: %.200s (%zu arguments): errmsg \"%s\"", line,
             predicate ? predicate : "(NULL)", count, msg);
    tu_check_code(s, expected, __FILE__, line, what);
    tu_check(msg[0] != '\0', __FILE__, line, what, "a message");
    if (column) { /* "column N", or another part of the message that must be there */
        if (strncmp(column, "column", 6) == 0)
            tu_check(strstr(msg, "column") != NULL, __FILE__, line, what, "the message says the column");
        if (strcmp(column, "column") != 0)
            tu_check(strstr(msg, column) != NULL, __FILE__, line, what, column);
    }
    tu_check(task == NULL, __FILE__, line, what, "no task");
    tu_sleep_ms(20);
    tu_check(tu_fetch_calls(&f) == 0, __FILE__, line, what, "no callback");
    tu_fetch_destroy(&f);
}

#define REFUSED(pred, args, count, status, column) refused(ctx, (pred), (args), (count), (status), (column), __LINE__)

static void test_errors(tether_context *ctx)
{
    tether_value a[2];

    tu_section("bad predicates: TETHER_E_INVALID, the message says the column");
    REFUSED("n ==", NULL, 0, TETHER_E_INVALID, "column 5");
    REFUSED("n == 1 n", NULL, 0, TETHER_E_INVALID, "column 8");
    REFUSED("(n == 1", NULL, 0, TETHER_E_INVALID, "column 8");
    REFUSED("label == 'abc", NULL, 0, TETHER_E_INVALID, "column 10");
    REFUSED("n ==[x] 1", NULL, 0, TETHER_E_INVALID, "column");
    REFUSED("nope == 1", NULL, 0, TETHER_E_INVALID, "column 1");
    REFUSED("#9999 == 1", NULL, 0, TETHER_E_INVALID, "column 1");
    REFUSED("n == 'x'", NULL, 0, TETHER_E_INVALID, "column 6");
    REFUSED("n BEGINSWITH '1'", NULL, 0, TETHER_E_INVALID, "column 3");
    REFUSED("tags == 'x'", NULL, 0, TETHER_E_INVALID, "column 9");
    REFUSED("", NULL, 0, TETHER_E_INVALID, "column 1");
    a[0] = text("1", 1);
    REFUSED("n == $1", a, 1, TETHER_E_INVALID, "column 6"); /* a TEXT argument for an integer */
    a[0] = integer(1);
    a[0].type = TETHER_TYPE_BOOLEAN;
    REFUSED("n == $1", a, 1, TETHER_E_INVALID, "column 6"); /* a BOOLEAN one */
    a[0] = text("a\\", 2);
    REFUSED("label LIKE $1", a, 1, TETHER_E_INVALID, "lone"); /* a pattern ending in one \ */
    a[0] = integer(1);
    REFUSED("n == $2", a, 1, TETHER_E_INVALID, "column 6"); /* too few arguments */
    REFUSED("n == $1", NULL, 0, TETHER_E_INVALID, "column 6");

    tu_section("more arguments than the predicate uses: TETHER_E_INVALID, naming the unused one (no column)");
    a[1] = integer(2);
    REFUSED("n == $1", a, 2, TETHER_E_INVALID, "argument $2 is given but not used");

    tu_section("arguments without a predicate: TETHER_E_INVALID");
    REFUSED(NULL, a, 1, TETHER_E_INVALID, NULL);

    tu_section("argument_count > 0 with arguments NULL: TETHER_E_MISUSE");
    REFUSED("n == $1", NULL, 1, TETHER_E_MISUSE, NULL);
    REFUSED(NULL, NULL, 3, TETHER_E_MISUSE, NULL);

    tu_section("argument types: JSON or unknown is TETHER_E_INVALID");
    a[0] = text("[1]", 3);
    a[0].type = TETHER_TYPE_JSON;
    REFUSED("n == $1", a, 1, TETHER_E_INVALID, NULL);
    REFUSED("tags == $1", a, 1, TETHER_E_INVALID, NULL);
    a[0] = integer(1);
    a[0].type = (tether_type)99;
    REFUSED("n == $1", a, 1, TETHER_E_INVALID, NULL);

    tu_section("TEXT that is not UTF-8, or NULL with a length");
    a[0] = text("\xff\xfe", 2);
    REFUSED("label == $1", a, 1, TETHER_E_INVALID, NULL);
    a[0] = text("ab\xc3", 3); /* cut inside a character */
    REFUSED("label == $1", a, 1, TETHER_E_INVALID, NULL);
    a[0] = text("\xed\xa0\x80", 3); /* a surrogate */
    REFUSED("label == $1", a, 1, TETHER_E_INVALID, NULL);
    a[0] = text(NULL, 3);
    {
        tether_fetch_options o;
        tu_fetch f;
        tether_task *task = NULL;
        tu_fetch_init(&f);
        tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
        o.entity = "items";
        o.predicate = "label == $1";
        o.arguments = a;
        o.argument_count = 1;
        CHECK_FAILS(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, &task));
        CHECK(task == NULL);
        tu_fetch_destroy(&f);
    }

    tu_section("a predicate that is not UTF-8: TETHER_E_INVALID");
    REFUSED("label == '\xff'", NULL, 0, TETHER_E_INVALID, NULL);
}

int main(int argc, char **argv)
{
    char store[512];
    tether_context *ctx;
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-pred");
    tu_store_path(store, sizeof store, "pred");
    if (!CHECK(seed()))
        return tu_finish();
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (ctx) {
        test_answers(ctx);
        test_version_1(ctx);
        test_errors(ctx);
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }
    return tu_finish();
}
