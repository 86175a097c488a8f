/* test_model.c — the model built from the bucket's collection schemas:
 * entities, routes, operations, attributes with types, codes (explicit
 * "x-tether-code" and assigned), flags, lookups, stability of codes. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <string.h>

#include <stdlib.h>

static const char *SCHEMA_ALPHA =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\", \"x-tether-code\": 501},"
    "\"count\": {\"type\": \"integer\"},"
    "\"ratio\": {\"type\": \"number\", \"x-tether-code\": 503},"
    "\"flag\": {\"type\": \"boolean\"},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}},"
    "\"meta\": {\"type\": \"object\"}"
    "}, \"required\": [\"name\"]}";

/* Same as alpha without "count", with "count2". */
static const char *SCHEMA_ALPHA2 =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\", \"x-tether-code\": 501},"
    "\"ratio\": {\"type\": \"number\", \"x-tether-code\": 503},"
    "\"flag\": {\"type\": \"boolean\"},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}},"
    "\"meta\": {\"type\": \"object\"},"
    "\"count2\": {\"type\": \"integer\"}"
    "}, \"required\": [\"name\"]}";

static const char *SCHEMA_BETA =
    "{\"type\": \"object\", \"properties\": {"
    "\"Client\": {\"type\": \"string\", \"x-tether-code\": 301},"
    "\"Owner\": {\"type\": \"string\", \"x-tether-code\": 304}"
    "}, \"required\": [\"Client\", \"Owner\"]}";

typedef struct attr {
    const char *name;
    int code;
    tether_type type;
    unsigned int flags;
} attr;

/* Finds attribute `name` of `e`, fills `a`; 1 if found. */
static int find_attr(tether_entity *e, const char *name, attr *a)
{
    size_t i;
    if (tether_entity_attribute_index(e, name, &i) != TETHER_OK)
        return 0;
    return tether_entity_attribute_at(e, i, &a->name, &a->code, &a->type, &a->flags) == TETHER_OK;
}

static int code_of(tether_entity *e, const char *name)
{
    attr a;
    return find_attr(e, name, &a) ? a.code : -1;
}

static void check_alpha(tether_context *ctx, const char *bucket)
{
    tether_entity *e = NULL, *e2 = NULL;
    const char *s = NULL;
    char route[256];
    unsigned int ops = 0;
    size_t n = 0, i, j, idx;
    attr a;

    tu_section("entity alpha");
    CHECK_OK(tether_context_entity(ctx, "alpha", &e));
    if (!e)
        return;
    CHECK_OK(tether_context_entity(ctx, "alpha", &e2));
    CHECK(e == e2);
    CHECK_OK(tether_entity_name(e, &s));
    CHECK_STR(s, "alpha");
    CHECK_OK(tether_entity_route(e, &s));
    snprintf(route, sizeof route, "/buckets/%s/collections/alpha/records", bucket);
    CHECK_STR(s, route);
    CHECK_OK(tether_entity_operations(e, &ops));
    CHECK(ops & TETHER_OP_FETCH);
    CHECK((ops & ~(TETHER_OP_FETCH | TETHER_OP_INSERT | TETHER_OP_UPDATE | TETHER_OP_DELETE)) == 0);
    /* test:test created the bucket, so it may write. */
    CHECK((ops & (TETHER_OP_INSERT | TETHER_OP_UPDATE | TETHER_OP_DELETE)) ==
          (TETHER_OP_INSERT | TETHER_OP_UPDATE | TETHER_OP_DELETE));

    CHECK_OK(tether_entity_attribute_count(e, &n));
    CHECK_INT(n, 8); /* 6 properties + id + last_modified */

    /* Types, codes, flags. */
    if (CHECK(find_attr(e, "id", &a))) {
        CHECK_INT(a.type, TETHER_TYPE_TEXT);
        CHECK(a.flags & TETHER_ATTR_ID);
        CHECK(!(a.flags & TETHER_ATTR_VERSION));
    }
    if (CHECK(find_attr(e, "last_modified", &a))) {
        CHECK_INT(a.type, TETHER_TYPE_INTEGER);
        CHECK(a.flags & TETHER_ATTR_VERSION);
        CHECK(!(a.flags & TETHER_ATTR_ID));
    }
    if (CHECK(find_attr(e, "name", &a))) {
        CHECK_STR(a.name, "name");
        CHECK_INT(a.type, TETHER_TYPE_TEXT);
        CHECK_INT(a.code, 501);
        CHECK(a.flags & TETHER_ATTR_REQUIRED);
        CHECK(!(a.flags & (TETHER_ATTR_ID | TETHER_ATTR_VERSION)));
    }
    if (CHECK(find_attr(e, "count", &a))) {
        CHECK_INT(a.type, TETHER_TYPE_INTEGER);
        CHECK(!(a.flags & TETHER_ATTR_REQUIRED));
    }
    if (CHECK(find_attr(e, "ratio", &a))) {
        CHECK_INT(a.type, TETHER_TYPE_REAL);
        CHECK_INT(a.code, 503);
    }
    if (CHECK(find_attr(e, "flag", &a)))
        CHECK_INT(a.type, TETHER_TYPE_BOOLEAN);
    if (CHECK(find_attr(e, "tags", &a)))
        CHECK_INT(a.type, TETHER_TYPE_JSON);
    if (CHECK(find_attr(e, "meta", &a)))
        CHECK_INT(a.type, TETHER_TYPE_JSON);

    /* Every attribute: index <-> name <-> code round trips, codes unique and
     * positive, exactly one id and one version attribute. */
    {
        int ids = 0, versions = 0, dup = 0, roundtrip = 0;
        int codes[64];
        for (i = 0; i < n && i < 64; i++) {
            const char *name = NULL;
            int code = 0;
            tether_type type = TETHER_TYPE_NULL;
            unsigned int flags = 0;
            size_t k = 999;
            CHECK_OK(tether_entity_attribute_at(e, i, &name, &code, &type, &flags));
            codes[i] = code;
            if (flags & TETHER_ATTR_ID)
                ids++;
            if (flags & TETHER_ATTR_VERSION)
                versions++;
            CHECK(code > 0);
            if (name && tether_entity_attribute_index(e, name, &k) == TETHER_OK && k == i &&
                tether_entity_attribute_index_by_code(e, code, &k) == TETHER_OK && k == i)
                roundtrip++;
            for (j = 0; j < i; j++)
                if (codes[j] == code)
                    dup++;
        }
        CHECK_INT(ids, 1);
        CHECK_INT(versions, 1);
        CHECK_INT(dup, 0);
        CHECK_INT(roundtrip, (int)n);
    }

    /* Out parameters may be NULL. */
    CHECK_OK(tether_entity_attribute_at(e, 0, NULL, NULL, NULL, NULL));
    /* Lookups that fail. */
    CHECK_STATUS(tether_entity_attribute_at(e, n, &s, NULL, NULL, NULL), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_entity_attribute_at(e, (size_t)-1, &s, NULL, NULL, NULL), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_entity_attribute_index(e, "nosuch", &idx), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_entity_attribute_index(e, "", &idx), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_entity_attribute_index(e, "Name", &idx), TETHER_E_NOT_FOUND); /* case matters */
    CHECK_STATUS(tether_entity_attribute_index(e, "nam\xe9", &idx), TETHER_E_INVALID);
    CHECK_STATUS(tether_entity_attribute_index(e, NULL, &idx), TETHER_E_MISUSE);
    CHECK_STATUS(tether_entity_attribute_index(e, "name", NULL), TETHER_E_MISUSE);
    CHECK_STATUS(tether_entity_attribute_index_by_code(e, 999999, &idx), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_entity_attribute_index_by_code(e, 0, &idx), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_entity_attribute_index_by_code(e, -5, &idx), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_entity_attribute_index_by_code(e, 301, &idx), TETHER_E_NOT_FOUND); /* beta's */
    CHECK_STATUS(tether_entity_name(e, NULL), TETHER_E_MISUSE);
    CHECK_STATUS(tether_entity_attribute_count(e, NULL), TETHER_E_MISUSE);
}

static void check_entities(tether_context *ctx)
{
    size_t n = 0;
    tether_entity *e0 = NULL, *e1 = NULL, *e = NULL;
    const char *s0 = NULL, *s1 = NULL;

    tu_section("entities");
    CHECK_OK(tether_context_entity_count(ctx, &n));
    CHECK_INT(n, 2);
    CHECK_OK(tether_context_entity_at(ctx, 0, &e0));
    CHECK_OK(tether_context_entity_at(ctx, 1, &e1));
    if (e0 && e1) {
        tether_entity_name(e0, &s0);
        tether_entity_name(e1, &s1);
        CHECK_STR(s0, "alpha"); /* sorted by name */
        CHECK_STR(s1, "beta");
    }
    CHECK_STATUS(tether_context_entity_at(ctx, 2, &e), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_context_entity(ctx, "gamma", &e), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_context_entity(ctx, "Alpha", &e), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_context_entity(ctx, "alph\xc3\x28", &e), TETHER_E_INVALID);
    CHECK_STATUS(tether_context_entity(ctx, NULL, &e), TETHER_E_MISUSE);
    CHECK_STATUS(tether_context_entity(ctx, "alpha", NULL), TETHER_E_MISUSE);
    CHECK_STATUS(tether_context_entity_count(ctx, NULL), TETHER_E_MISUSE);
    CHECK(e == NULL);

    tu_section("entity beta");
    CHECK_OK(tether_context_entity(ctx, "beta", &e));
    if (e) {
        size_t idx = 99;
        attr a;
        CHECK(e == e1);
        CHECK_OK(tether_entity_attribute_index_by_code(e, 301, &idx));
        if (CHECK_OK(tether_entity_attribute_at(e, idx, &a.name, &a.code, &a.type, &a.flags)) == TETHER_OK) {
            CHECK_STR(a.name, "Client");
            CHECK_INT(a.code, 301);
            CHECK(a.flags & TETHER_ATTR_REQUIRED);
        }
        CHECK_INT(code_of(e, "Owner"), 304);
    }

    tu_section("wrong kinds of handle");
    if (e0) {
        tether_object *obj = NULL;
        const char *s = NULL;
        size_t k;
        CHECK_OK(tether_context_object(ctx, "alpha", "x1", &obj));
        if (obj) {
            /* An object where an entity is expected, and the reverse. */
            CHECK_STATUS(tether_entity_name((tether_entity *)obj, &s), TETHER_E_HANDLE);
            CHECK_STATUS(tether_entity_attribute_count((tether_entity *)obj, &k), TETHER_E_HANDLE);
            CHECK_STATUS(tether_object_id((tether_object *)e0, &s), TETHER_E_HANDLE);
            /* A context where an entity is expected, and an entity as context. */
            CHECK_STATUS(tether_entity_name((tether_entity *)ctx, &s), TETHER_E_HANDLE);
            CHECK_STATUS(tether_context_entity_count((tether_context *)e0, &k), TETHER_E_HANDLE);
            CHECK_STATUS(tether_context_entity_count((tether_context *)obj, &k), TETHER_E_HANDLE);
            CHECK_STATUS(tether_task_cancel((tether_task *)obj), TETHER_E_HANDLE);
            CHECK_STATUS(tether_observer_cancel((tether_observer *)e0), TETHER_E_HANDLE);
            /* Releasing the wrong kind of handle does nothing else. */
            CHECK_STATUS(tether_results_count((tether_results *)obj, &k), TETHER_E_HANDLE);
            CHECK_STATUS(tether_results_free((tether_results *)obj), TETHER_E_HANDLE);
            CHECK_STATUS(tether_object_free((tether_object *)e0), TETHER_E_HANDLE);
            CHECK_STATUS(tether_object_free((tether_object *)ctx), TETHER_E_HANDLE);
            CHECK_STATUS(tether_object_retain((tether_object *)e0), TETHER_E_HANDLE);
            CHECK(s == NULL);
            CHECK_OK(tether_object_id(obj, &s));
            CHECK_STR(s, "x1");
            CHECK_OK(tether_entity_name(e0, &s));
            CHECK_STR(s, "alpha");
            CHECK_OK(tether_object_free(obj));
        }
    }
}

int main(int argc, char **argv)
{
    char bucket[128], store[512], fresh[512];
    tether_context *ctx;
    int count_code = -1, flag_code = -1, tags_code = -1;
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-model");
    tu_store_path(store, sizeof store, "model");
    if (!CHECK(tu_put_bucket(bucket)) || !CHECK(tu_put_collection(bucket, "alpha", SCHEMA_ALPHA)) ||
        !CHECK(tu_put_collection(bucket, "beta", SCHEMA_BETA)))
        return tu_finish();

    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (ctx) {
        tether_entity *e = NULL;
        check_entities(ctx);
        check_alpha(ctx, bucket);
        if (tether_context_entity(ctx, "alpha", &e) == TETHER_OK) {
            count_code = code_of(e, "count");
            flag_code = code_of(e, "flag");
            tags_code = code_of(e, "tags");
        }
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }

    tu_section("codes are stable across runs");
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (ctx) {
        tether_entity *e = NULL;
        if (CHECK_OK(tether_context_entity(ctx, "alpha", &e)) == TETHER_OK) {
            CHECK_INT(code_of(e, "count"), count_code);
            CHECK_INT(code_of(e, "flag"), flag_code);
            CHECK_INT(code_of(e, "tags"), tags_code);
            CHECK_INT(code_of(e, "name"), 501);
        }
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }

    tu_section("codes are stable across model changes");
    /* Remove "count", add "count2", add a collection: old codes stay, the
     * removed code is not reused. */
    CHECK(tu_put_collection(bucket, "alpha", SCHEMA_ALPHA2));
    CHECK(tu_put_collection(bucket, "gamma",
                            "{\"type\": \"object\", \"properties\": {\"g\": {\"type\": \"string\"}}}"));
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (ctx) {
        tether_entity *e = NULL;
        size_t n = 0, idx;
        CHECK_OK(tether_context_entity_count(ctx, &n));
        CHECK_INT(n, 3);
        if (CHECK_OK(tether_context_entity(ctx, "alpha", &e)) == TETHER_OK) {
            int c2 = code_of(e, "count2");
            CHECK_STATUS(tether_entity_attribute_index(e, "count", &idx), TETHER_E_NOT_FOUND);
            CHECK(c2 > 0);
            CHECK(c2 != count_code);
            CHECK(c2 != flag_code && c2 != tags_code && c2 != 501 && c2 != 503);
            CHECK_INT(code_of(e, "flag"), flag_code);
            CHECK_INT(code_of(e, "tags"), tags_code);
            CHECK_STATUS(tether_entity_attribute_index_by_code(e, count_code, &idx), TETHER_E_NOT_FOUND);
        }
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }

    tu_section("explicit codes in a fresh store");
    tu_store_path(fresh, sizeof fresh, "model-fresh");
    ctx = tu_open(bucket, fresh, TETHER_DELIVER_THREAD);
    if (ctx) {
        tether_entity *e = NULL;
        if (CHECK_OK(tether_context_entity(ctx, "beta", &e)) == TETHER_OK) {
            CHECK_INT(code_of(e, "Client"), 301);
            CHECK_INT(code_of(e, "Owner"), 304);
        }
        if (CHECK_OK(tether_context_entity(ctx, "alpha", &e)) == TETHER_OK) {
            CHECK_INT(code_of(e, "name"), 501);
            CHECK_INT(code_of(e, "ratio"), 503);
        }
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }

    tu_section("names differing only in case open; a code collision is a diagnostic");
    {
        char cased_bucket[128], store_cased[512];
        tu_unique(cased_bucket, sizeof cased_bucket, "cased");
        tu_store_path(store_cased, sizeof store_cased, "model-cased");
        CHECK(tu_put_bucket(cased_bucket));
        CHECK(tu_put_collection(cased_bucket, "Cased", "{\"type\":\"object\",\"properties\":{\"Client\":{\"type\":\"string\"}}}"));
        CHECK(tu_put_collection(cased_bucket, "cased",
                                "{\"type\":\"object\",\"properties\":{\"A\":{\"type\":\"string\",\"x-tether-code\":900},"
                                "\"B\":{\"type\":\"string\",\"x-tether-code\":900},\"client\":{\"type\":\"integer\"}}}"));
        ctx = tu_open(cased_bucket, store_cased, TETHER_DELIVER_THREAD);
        if (ctx) {
            tether_entity *upper = NULL, *lower = NULL;
            int upper_code = 0, lower_code = 0;
            size_t diagnostics = 0;
            const char *entity = NULL, *attribute = NULL, *message = NULL;
            CHECK_OK(tether_context_entity(ctx, "Cased", &upper));
            CHECK_OK(tether_context_entity(ctx, "cased", &lower));
            CHECK_OK(tether_entity_code(upper, &upper_code));
            CHECK_OK(tether_entity_code(lower, &lower_code));
            CHECK(upper_code > 0 && lower_code > 0 && upper_code != lower_code);
            CHECK_STATUS(tether_entity_code(upper, NULL), TETHER_E_MISUSE);
            CHECK_OK(tether_context_diagnostic_count(ctx, &diagnostics));
            CHECK_INT(diagnostics, 1);
            if (CHECK_OK(tether_context_diagnostic_at(ctx, 0, &entity, &attribute, &message)) == TETHER_OK) {
                CHECK_STR(entity, "cased");
                CHECK_STR(attribute, "B");
                CHECK(message && message[0]);
            }
            CHECK_STATUS(tether_context_diagnostic_at(ctx, 1, NULL, NULL, NULL), TETHER_E_NOT_FOUND);
            CHECK_INT(code_of(lower, "A"), 900);
            CHECK(code_of(lower, "B") != 900);
            CHECK(code_of(lower, "client") != code_of(upper, "Client") || lower_code != upper_code);
            CHECK_INT(tether_context_close(ctx), TETHER_OK);
            CHECK_STATUS(tether_context_diagnostic_count(ctx, &diagnostics), TETHER_E_HANDLE);
        }
    }

    tu_section("a server URL without /v1 is refused, saying to add it (issue 22, case 10)");
    {
        char root[512], want[1200], rootstore[512];
        tether_context_options o;
        tether_kinto_options k;
        tether_context *none = NULL;
        size_t n = strlen(tu_url());
        snprintf(root, sizeof root, "%.*s", (int)(n > 3 ? n - 3 : n), tu_url()); /* without "/v1" */
        tu_store_path(rootstore, sizeof rootstore, "model-root");
        tu_options(&o, &k, root, bucket, rootstore, TETHER_DELIVER_THREAD, 10000);
        CHECK_STATUS(tether_context_open_kinto(&o, &k, &none), TETHER_E_INVALID);
        snprintf(want, sizeof want,
                 "%s/ redirects to %s/v1/ (HTTP 307): the server URL must be Kinto's API root; add /v1", root, root);
        CHECK_STR(tether_errmsg(), want);
        CHECK(none == NULL);
        CHECK(!tu_file_exists(rootstore));
    }
    return tu_finish();
}
