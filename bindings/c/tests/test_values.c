/* test_values.c — value types read back from server JSON: text (UTF-8,
 * escapes), integer (64-bit), real, boolean, JSON arrays and objects, null
 * for absent fields; peek by name and by code agree. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static char bucket[128];

static const char *SCHEMA =
    "{\"type\": \"object\", \"properties\": {"
    "\"s\": {\"type\": \"string\", \"x-tether-code\": 701},"
    "\"i\": {\"type\": \"integer\", \"x-tether-code\": 702},"
    "\"r\": {\"type\": \"number\", \"x-tether-code\": 703},"
    "\"b\": {\"type\": \"boolean\", \"x-tether-code\": 704},"
    "\"a\": {\"type\": \"array\", \"x-tether-code\": 705},"
    "\"o\": {\"type\": \"object\", \"x-tether-code\": 706}"
    "}}";

/* JSON text with whitespace outside strings removed, for comparison. */
static void squeeze(const char *in, char *out, size_t size)
{
    size_t n = 0;
    int str = 0, esc = 0;
    for (; *in && n + 1 < size; in++) {
        char c = *in;
        if (str) {
            if (esc)
                esc = 0;
            else if (c == '\\')
                esc = 1;
            else if (c == '"')
                str = 0;
        } else if (c == '"') {
            str = 1;
        } else if (isspace((unsigned char)c)) {
            continue;
        }
        out[n++] = c;
    }
    out[n] = '\0';
}

/* A new reference to record `id`: release it. */
static tether_object *object(tether_context *ctx, const char *id)
{
    tether_object *o = NULL;
    CHECK_OK(tether_context_object(ctx, "vals", id, &o));
    return o;
}

static void expect_text(tether_object *o, const char *key, const char *want)
{
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    if (CHECK_OK(tether_object_peek(o, key, &v)) != TETHER_OK)
        return;
    CHECK_INT(v.type, TETHER_TYPE_TEXT);
    CHECK_STR(v.text, want);
    CHECK_INT(v.length, strlen(want));
    tether_value_free(&v);
    CHECK(v.text == NULL);
    CHECK_INT(v.type, TETHER_TYPE_NULL);
}

static void expect_int(tether_object *o, const char *key, tether_type type, int64_t want)
{
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    if (CHECK_OK(tether_object_peek(o, key, &v)) != TETHER_OK)
        return;
    CHECK_INT(v.type, type);
    CHECK_INT(v.integer, want);
    CHECK(v.text == NULL);
    tether_value_free(&v);
}

static void expect_real(tether_object *o, const char *key, double want)
{
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    if (CHECK_OK(tether_object_peek(o, key, &v)) != TETHER_OK)
        return;
    CHECK_INT(v.type, TETHER_TYPE_REAL);
    if (!CHECK(fabs(v.real - want) < 1e-12))
        printf("   real: got %.17g, expected %.17g\n", v.real, want);
    tether_value_free(&v);
}

static void expect_json(tether_object *o, const char *key, const char *want)
{
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    char got[1024], exp[1024];
    if (CHECK_OK(tether_object_peek(o, key, &v)) != TETHER_OK)
        return;
    CHECK_INT(v.type, TETHER_TYPE_JSON);
    if (CHECK(v.text != NULL)) {
        CHECK_INT(v.length, strlen(v.text));
        squeeze(v.text, got, sizeof got);
        squeeze(want, exp, sizeof exp);
        CHECK_STR(got, exp);
    }
    tether_value_free(&v);
    CHECK(v.text == NULL);
}

static void expect_null(tether_object *o, const char *key)
{
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    v.type = TETHER_TYPE_TEXT; /* must be overwritten */
    if (CHECK_OK(tether_object_peek(o, key, &v)) != TETHER_OK)
        return;
    CHECK_INT(v.type, TETHER_TYPE_NULL);
    CHECK(v.text == NULL);
    tether_value_free(&v);
}

static void by_code_agrees(tether_object *o)
{
    static const char *keys[] = {"s", "i", "r", "b", "a", "o"};
    int k, agree = 0;
    for (k = 0; k < 6; k++) {
        tether_value a = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0}, b = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
        if (tether_object_peek(o, keys[k], &a) == TETHER_OK &&
            tether_object_peek_code(o, 701 + k, &b) == TETHER_OK && a.type == b.type &&
            a.integer == b.integer && (a.type != TETHER_TYPE_REAL || a.real == b.real) &&
            ((a.text == NULL && b.text == NULL) || (a.text && b.text && strcmp(a.text, b.text) == 0)))
            agree++;
        tether_value_free(&a);
        tether_value_free(&b);
    }
    CHECK_INT(agree, 6);
}

int main(int argc, char **argv)
{
    char store[512];
    tether_context *ctx;
    tu_fetch f;
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-values");
    tu_store_path(store, sizeof store, "values");
    if (!CHECK(tu_put_bucket(bucket)) || !CHECK(tu_put_collection(bucket, "vals", SCHEMA)) ||
        !CHECK(tu_put_record(bucket, "vals", "v1",
                             "{\"s\": \"h\\u00e9llo \\u2713 \\\"q\\\" back\\\\slash\\nline\", "
                             "\"i\": 1234567890123, \"r\": 3.25, \"b\": true, "
                             "\"a\": [\"x\", 1, true, null, 2.5], \"o\": {\"k\": [1, 2], \"n\": null}}")) ||
        !CHECK(tu_put_record(bucket, "vals", "v2",
                             "{\"s\": \"\", \"i\": -9007199254740993, \"r\": -0.5, \"b\": false, "
                             "\"a\": [], \"o\": {}}")) ||
        !CHECK(tu_put_record(bucket, "vals", "v3", "{\"i\": 0, \"r\": 2}")) ||
        !CHECK(tu_put_record(bucket, "vals", "v4",
                             "{\"i\": 9223372036854775807, \"r\": 1e300, \"s\": \"\\ud83d\\ude00\"}")))
        return tu_finish();

    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return tu_finish();
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "vals", NULL, 0, TETHER_POLICY_CACHE_THEN_SERVER, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 4);
    tu_fetch_destroy(&f);

    tu_section("v1: text, integer, real, boolean true, JSON array and object");
    {
        tether_object *o = object(ctx, "v1");
        if (o) {
            expect_text(o, "s", "h\xc3\xa9llo \xe2\x9c\x93 \"q\" back\\slash\nline");
            expect_int(o, "i", TETHER_TYPE_INTEGER, 1234567890123LL);
            expect_real(o, "r", 3.25);
            expect_int(o, "b", TETHER_TYPE_BOOLEAN, 1);
            expect_json(o, "a", "[\"x\", 1, true, null, 2.5]");
            expect_json(o, "o", "{\"k\": [1, 2], \"n\": null}");
            expect_text(o, "id", "v1");
            by_code_agrees(o);
            CHECK_OK(tether_object_free(o));
        }
    }
    tu_section("v2: empty text, big negative integer, false, empty containers");
    {
        tether_object *o = object(ctx, "v2");
        if (o) {
            expect_text(o, "s", "");
            expect_int(o, "i", TETHER_TYPE_INTEGER, -9007199254740993LL);
            expect_real(o, "r", -0.5);
            expect_int(o, "b", TETHER_TYPE_BOOLEAN, 0);
            expect_json(o, "a", "[]");
            expect_json(o, "o", "{}");
            by_code_agrees(o);
            CHECK_OK(tether_object_free(o));
        }
    }
    tu_section("v3: absent fields are NULL, an integral number is REAL");
    {
        tether_object *o = object(ctx, "v3");
        if (o) {
            expect_null(o, "s");
            expect_null(o, "b");
            expect_null(o, "a");
            expect_null(o, "o");
            expect_int(o, "i", TETHER_TYPE_INTEGER, 0);
            expect_real(o, "r", 2.0);
            by_code_agrees(o);
            CHECK_OK(tether_object_free(o));
        }
    }
    tu_section("v4: INT64_MAX, 1e300, a character outside the BMP");
    {
        tether_object *o = object(ctx, "v4");
        if (o) {
            expect_int(o, "i", TETHER_TYPE_INTEGER, INT64_MAX);
            expect_real(o, "r", 1e300);
            expect_text(o, "s", "\xf0\x9f\x98\x80");
            CHECK_OK(tether_object_free(o));
        }
    }
    tu_section("insert with values: all or nothing (issue 22, case 5)");
    {
        const char *keys[3] = {"s", "i", "nosuch"};
        tether_value values[3];
        tether_object *o = NULL;
        size_t changes = 99;
        tether_pending pending;
        memset(values, 0, sizeof values);
        values[0].type = TETHER_TYPE_TEXT;
        values[0].text = "new";
        values[0].length = 3;
        values[1].type = TETHER_TYPE_INTEGER;
        values[1].integer = 7;
        values[2].type = TETHER_TYPE_INTEGER;
        values[2].integer = 1;
        /* A key the entity lacks, after good ones: refused, nothing inserted. */
        CHECK_STATUS(tether_context_insert_values(ctx, "vals", "n1", keys, values, 3, &o), TETHER_E_NOT_FOUND);
        CHECK_STR(tether_errmsg(), "vals has no key \"nosuch\"");
        CHECK(o == NULL);
        CHECK_OK(tether_context_change_count(ctx, &changes));
        CHECK_INT(changes, 0);
        /* A value of the wrong type: the same. */
        keys[2] = "b";
        values[2].type = TETHER_TYPE_TEXT;
        values[2].text = "yes";
        values[2].length = 3;
        CHECK_STATUS(tether_context_insert_values(ctx, "vals", "n1", keys, values, 3, &o), TETHER_E_TYPE);
        CHECK_OK(tether_context_change_count(ctx, &changes));
        CHECK_INT(changes, 0);
        /* The id is free still: nothing was left behind. Good values: one insert holding them. */
        values[2].type = TETHER_TYPE_BOOLEAN;
        values[2].integer = 1;
        CHECK_OK(tether_context_insert_values(ctx, "vals", "n1", keys, values, 3, &o));
        if (o) {
            CHECK_OK(tether_object_pending(o, &pending));
            CHECK_INT(pending, TETHER_PENDING_INSERT);
            expect_text(o, "s", "new");
            expect_int(o, "i", TETHER_TYPE_INTEGER, 7);
            expect_int(o, "b", TETHER_TYPE_BOOLEAN, 1);
            CHECK_OK(tether_object_free(o));
        }
        CHECK_STATUS(tether_context_insert_values(ctx, "vals", NULL, NULL, NULL, 1, &o), TETHER_E_MISUSE);
        CHECK_OK(tether_context_change_count(ctx, &changes));
        CHECK_INT(changes, 1);
        CHECK_OK(tether_context_rollback(ctx));
    }
    tu_section("values survive a reopen (read from the store)");
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (ctx) {
        tether_object *o = object(ctx, "v1");
        if (o) {
            expect_text(o, "s", "h\xc3\xa9llo \xe2\x9c\x93 \"q\" back\\slash\nline");
            expect_int(o, "i", TETHER_TYPE_INTEGER, 1234567890123LL);
            expect_real(o, "r", 3.25);
            expect_int(o, "b", TETHER_TYPE_BOOLEAN, 1);
            expect_json(o, "a", "[\"x\", 1, true, null, 2.5]");
            CHECK_OK(tether_object_free(o));
        }
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }
    return tu_finish();
}
