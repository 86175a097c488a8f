/* test_relationships.c — relationships declared in Kinto schemas
 * (x-tether-to, x-tether-inverse, x-tether-delete): the model's view of
 * them, a to-one as an object, key paths through it, a to-many as a fetch,
 * and the delete rules (nullify, cascade, deny) down to the server. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static char bucket[128];

static int seed(void)
{
    return tu_put_bucket(bucket) &&
           tu_put_collection(bucket, "owners", "{\"type\": \"object\", \"properties\": {\"Name\": {\"type\": \"string\"}}}") &&
           tu_put_collection(bucket, "pets",
                             "{\"type\": \"object\", \"properties\": {\"Name\": {\"type\": \"string\"},"
                             "\"Owner\": {\"type\": \"string\", \"x-tether-to\": \"owners\", \"x-tether-inverse\": \"pets\","
                             " \"x-tether-delete\": \"cascade\"}}}") &&
           tu_put_collection(bucket, "notes",
                             "{\"type\": \"object\", \"properties\": {\"Text\": {\"type\": \"string\"},"
                             "\"Pet\": {\"type\": \"string\", \"x-tether-to\": \"pets\"}}}") &&
           tu_put_collection(bucket, "licences",
                             "{\"type\": \"object\", \"properties\": {\"Number\": {\"type\": \"string\"},"
                             "\"Holder\": {\"type\": \"string\", \"x-tether-to\": \"owners\", \"x-tether-delete\": \"deny\"}}}") &&
           tu_put_collection(bucket, "walks",
                             "{\"type\": \"object\", \"properties\": {"
                             "\"Walker\": {\"type\": \"string\", \"x-tether-to\": \"owners\"},"
                             "\"Payer\": {\"type\": \"string\", \"x-tether-to\": \"owners\"}}}") &&
           tu_put_record(bucket, "walks", "w1", "{\"Walker\": \"o2\"}") &&
           tu_put_record(bucket, "walks", "w2", "{\"Walker\": \"o2\", \"Payer\": \"o2\"}") &&
           tu_put_record(bucket, "owners", "o1", "{\"Name\": \"Ann\"}") &&
           tu_put_record(bucket, "owners", "o2", "{\"Name\": \"Bob\"}") &&
           tu_put_record(bucket, "pets", "p1", "{\"Name\": \"Rex\", \"Owner\": \"o1\"}") &&
           tu_put_record(bucket, "pets", "p2", "{\"Name\": \"Tom\", \"Owner\": \"o1\"}") &&
           tu_put_record(bucket, "pets", "p3", "{\"Name\": \"Kit\", \"Owner\": \"o2\"}") &&
           tu_put_record(bucket, "pets", "p4", "{\"Name\": \"Stray\"}") &&
           tu_put_record(bucket, "notes", "n1", "{\"Text\": \"vaccinated\", \"Pet\": \"p1\"}") &&
           tu_put_record(bucket, "licences", "l1", "{\"Number\": \"42\", \"Holder\": \"o2\"}");
}

static size_t index_of(tether_entity *entity, const char *name)
{
    size_t index = 999;
    CHECK_OK(tether_entity_attribute_index(entity, name, &index));
    return index;
}

static long record_status(const char *collection, const char *id, char **body)
{
    char path[512];
    snprintf(path, sizeof path, "/buckets/%s/collections/%s/records/%s", bucket, collection, id);
    return tu_http("GET", path, NULL, body);
}

static void test_model(tether_context *ctx)
{
    tether_entity *owners = NULL, *pets = NULL, *notes = NULL, *licences = NULL, *target = NULL, *source = NULL;
    tether_delete_rule rule = (tether_delete_rule)9;
    size_t count = 0, attribute = 0;
    const char *name = NULL, *text = NULL;
    size_t i;
    int seen_pets = 0, seen_licences = 0;
    tu_section("the model's relationships");
    CHECK_OK(tether_context_entity(ctx, "owners", &owners));
    CHECK_OK(tether_context_entity(ctx, "pets", &pets));
    CHECK_OK(tether_context_entity(ctx, "notes", &notes));
    CHECK_OK(tether_context_entity(ctx, "licences", &licences));
    CHECK_OK(tether_entity_attribute_target(pets, index_of(pets, "Owner"), &target, &rule));
    CHECK(target == owners);
    CHECK_INT(rule, TETHER_DELETE_CASCADE);
    CHECK_OK(tether_entity_attribute_target(notes, index_of(notes, "Pet"), &target, &rule));
    CHECK(target == pets);
    CHECK_INT(rule, TETHER_DELETE_NULLIFY);
    CHECK_STATUS(tether_entity_attribute_target(pets, index_of(pets, "Name"), &target, &rule), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_entity_attribute_target(pets, 99, NULL, NULL), TETHER_E_NOT_FOUND);
    CHECK_OK(tether_entity_relationship_count(owners, &count));
    CHECK_INT(count, 4); /* pets, licences, walks.Walker, walks.Payer */
    for (i = 0; i < count; i++) {
        CHECK_OK(tether_entity_relationship_at(owners, i, &name, &source, &attribute));
        if (name && strcmp(name, "pets") == 0) {
            seen_pets = 1;
            CHECK(source == pets);
            CHECK_INT(attribute, index_of(pets, "Owner"));
        } else if (name && strcmp(name, "licences") == 0) { /* the default inverse name: the source's */
            seen_licences = 1;
            CHECK(source == licences);
        }
    }
    CHECK(seen_pets && seen_licences);
    CHECK_STATUS(tether_entity_relationship_at(owners, count, &name, NULL, NULL), TETHER_E_NOT_FOUND);
    CHECK_OK(tether_entity_relationship_count(notes, &count));
    CHECK_INT(count, 0);
    CHECK_OK(tether_entity_name(target, &text));
}

static void test_reading(tether_context *ctx)
{
    tether_object *rex = NULL, *ann = NULL, *ann2 = NULL, *stray = NULL, *none = (tether_object *)1, *note = NULL, *bob = NULL;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    tether_fetch_options o;
    tu_fetch f;
    char buf[64];
    tu_section("a to-one is an object; key paths read through it");
    CHECK_OK(tether_context_object(ctx, "pets", "p1", &rex));
    CHECK_OK(tether_object_related(rex, "Owner", &ann));
    CHECK_OK(tether_context_object(ctx, "owners", "o1", &ann2));
    CHECK(ann != NULL && ann == ann2);
    CHECK_OK(tu_peek_text(rex, "Owner.Name", buf, sizeof buf));
    CHECK_STR(buf, "Ann");
    CHECK_OK(tether_context_object(ctx, "owners", "o2", &bob));
    CHECK_OK(tether_context_object(ctx, "notes", "n1", &note));
    CHECK_OK(tu_peek_text(note, "Pet.Owner.Name", buf, sizeof buf));
    CHECK_STR(buf, "Ann");
    if (CHECK_OK(tether_object_get(note, "Pet.Owner.Name", &v)) == TETHER_OK)
        CHECK_STR(v.text, "Ann");
    tether_value_free(&v);
    CHECK_OK(tether_context_object(ctx, "pets", "p4", &stray));
    CHECK_OK(tether_object_related(stray, "Owner", &none));
    CHECK(none == NULL);
    if (CHECK_OK(tether_object_peek(stray, "Owner.Name", &v)) == TETHER_OK)
        CHECK_INT(v.type, TETHER_TYPE_NULL);
    CHECK_STATUS(tether_object_peek(rex, "Owner.Nope", &v), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_object_peek(rex, "Name.Owner", &v), TETHER_E_INVALID);
    CHECK_STATUS(tether_object_related(rex, "Name", &none), TETHER_E_INVALID);
    CHECK_STATUS(tether_object_related(rex, "Nope", &none), TETHER_E_INVALID);
    CHECK_STATUS(tether_object_related(rex, "Owner", NULL), TETHER_E_MISUSE);
    CHECK_STATUS(tether_object_related(NULL, "Owner", &none), TETHER_E_HANDLE);

    tu_section("a to-many is a fetch");
    tu_fetch_init(&f);
    CHECK_OK(tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION));
    o.related_owner = ann;
    o.related_name = "pets";
    o.sort = "Name";
    o.policy = TETHER_POLICY_CACHE_ONLY;
    CHECK_OK(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 2);
    if (f.final_count == 2)
        CHECK(strcmp(tu_id(f.final_objs[0]), "p1") == 0 && strcmp(tu_id(f.final_objs[1]), "p2") == 0);
    tu_fetch_destroy(&f);
    /* Issue 28, case 12: two references to owners would share the default
     * inverse name "walks": each is named "<source>.<attribute>", and each
     * to-many answers its own. Bob walks w1 and w2, and pays for w2. */
    tu_section("two references to one entity: a to-many each");
    o.related_owner = bob;
    o.sort = NULL;
    o.related_name = "walks.Walker";
    tu_fetch_init(&f);
    CHECK_OK(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 2);
    tu_fetch_destroy(&f);
    o.related_name = "walks.Payer";
    tu_fetch_init(&f);
    CHECK_OK(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL));
    CHECK(tu_fetch_wait(&f, TU_WAIT_MS));
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 1);
    if (f.final_count == 1)
        CHECK(strcmp(tu_id(f.final_objs[0]), "w2") == 0);
    tu_fetch_destroy(&f);
    o.related_name = "walks";
    CHECK_STATUS(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL), TETHER_E_NOT_FOUND);
    o.related_owner = ann;
    o.related_name = "nope";
    CHECK_STATUS(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL), TETHER_E_NOT_FOUND);
    o.related_name = "pets";
    o.entity = "notes";
    CHECK_STATUS(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL), TETHER_E_INVALID);
    o.entity = NULL;
    o.related_name = NULL;
    CHECK_STATUS(tether_fetch_start(ctx, &o, tu_fetch_cb, &f, NULL), TETHER_E_MISUSE);
    tether_object_free(rex);
    tether_object_free(ann);
    tether_object_free(ann2);
    tether_object_free(stray);
    tether_object_free(note);
    tether_object_free(bob);
}

/* tether_context_changes, as "entity/id:change " for each, in order. */
static void check_changes(tether_context *ctx, const char *expected)
{
    static const char *names[] = {"none", "insert", "update", "delete"};
    tether_results *changes = NULL;
    char listed[512] = "";
    size_t count = 0;
    if (CHECK_OK(tether_context_changes(ctx, &changes)) != TETHER_OK)
        return;
    CHECK_OK(tether_results_count(changes, &count));
    for (size_t i = 0; i < count; i++) {
        tether_object *obj = NULL;
        tether_entity *entity = NULL;
        const char *name = NULL, *id = NULL;
        tether_pending pending = TETHER_PENDING_NONE;
        if (CHECK_OK(tether_results_object_at(changes, i, &obj)) != TETHER_OK)
            continue;
        CHECK_OK(tether_object_entity(obj, &entity));
        CHECK_OK(tether_entity_name(entity, &name));
        CHECK_OK(tether_object_id(obj, &id));
        CHECK_OK(tether_object_pending(obj, &pending));
        snprintf(listed + strlen(listed), sizeof listed - strlen(listed), "%s/%s:%s ", name, id,
                 (int)pending >= 0 && (int)pending < 4 ? names[pending] : "?");
        tether_object_free(obj);
    }
    CHECK_STR(listed, expected);
    CHECK_OK(tether_results_free(changes));
    CHECK_STATUS(tether_context_changes(ctx, NULL), TETHER_E_MISUSE);
    CHECK_STATUS(tether_context_changes(NULL, &changes), TETHER_E_HANDLE);
}

static void test_delete_rules(tether_context *ctx)
{
    tether_object *bob = NULL, *ann = NULL, *p1 = NULL, *p3 = NULL, *n1 = NULL, *l1 = NULL, *p9 = NULL, *late = NULL;
    tether_pending pending = TETHER_PENDING_NONE;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    size_t count = 9;
    char *body = NULL;
    tu_section("deny refuses, cascades included, and changes nothing");
    CHECK_OK(tether_context_object(ctx, "owners", "o2", &bob));
    CHECK_STATUS(tether_object_delete(bob), TETHER_E_NOT_ALLOWED);
    CHECK(strstr(tether_errmsg(), "licences") != NULL);
    CHECK_OK(tether_context_change_count(ctx, &count));
    CHECK_INT(count, 0);

    tu_section("cascade deletes Ann's pets; the note on one is nullified");
    CHECK_OK(tether_context_object(ctx, "owners", "o1", &ann));
    CHECK_OK(tether_object_delete(ann));
    CHECK_OK(tether_context_object(ctx, "pets", "p1", &p1));
    CHECK_OK(tether_object_pending(p1, &pending));
    CHECK_INT(pending, TETHER_PENDING_DELETE);
    CHECK_OK(tether_context_object(ctx, "pets", "p3", &p3));
    CHECK_OK(tether_object_pending(p3, &pending));
    CHECK_INT(pending, TETHER_PENDING_NONE);
    CHECK_OK(tether_context_object(ctx, "notes", "n1", &n1));
    if (CHECK_OK(tether_object_peek(n1, "Pet", &v)) == TETHER_OK)
        CHECK_INT(v.type, TETHER_TYPE_NULL);
    CHECK_OK(tether_context_change_count(ctx, &count));
    CHECK_INT(count, 4); /* Ann, Rex, Tom, the note */
    /* A cascade is planned from its leaves: the note first, Ann last (her
     * pets in the order they were stored: a listing comes in id order). */
    check_changes(ctx, "notes/n1:update pets/p1:delete pets/p2:delete owners/o1:delete ");
    CHECK_CODE(tu_save(ctx, NULL), TETHER_OK);
    check_changes(ctx, "");
    CHECK_INT(record_status("owners", "o1", NULL), 404);
    CHECK_INT(record_status("pets", "p1", NULL), 404);
    CHECK_INT(record_status("pets", "p2", NULL), 404);
    CHECK_INT(record_status("pets", "p3", NULL), 200);
    CHECK_INT(record_status("notes", "n1", &body), 200);
    CHECK(body && strstr(body, "\"Pet\"") == NULL); /* Kinto: a nulled field is removed */
    free(body);

    tu_section("related to a target known deleted is NOT_FOUND, never the deleted object");
    CHECK(tu_put_record(bucket, "pets", "p9", "{\"Name\": \"Late\", \"Owner\": \"o1\"}")); /* a writer ignoring the rules */
    tu_fetch_all(ctx, "pets");
    CHECK_OK(tether_context_object(ctx, "pets", "p9", &p9));
    late = (tether_object *)1;
    CHECK_STATUS(tether_object_related(p9, "Owner", &late), TETHER_E_NOT_FOUND);
    CHECK(late == NULL);
    CHECK(strstr(tether_errmsg(), "owners/o1, which was deleted") != NULL);
    if (CHECK_OK(tether_object_peek(p9, "Owner", &v)) == TETHER_OK)
        CHECK_STR(v.text, "o1"); /* what the server holds */
    tether_value_free(&v);
    tether_object_free(p9);

    tu_section("with its licence gone, Bob can go, and Kit with him");
    CHECK_OK(tether_context_object(ctx, "licences", "l1", &l1));
    CHECK_OK(tether_object_delete(l1));
    CHECK_OK(tether_object_delete(bob));
    CHECK_OK(tether_object_pending(p3, &pending));
    CHECK_INT(pending, TETHER_PENDING_DELETE);
    CHECK_CODE(tu_save(ctx, NULL), TETHER_OK);
    CHECK_INT(record_status("pets", "p3", NULL), 404);
    tether_object_free(bob);
    tether_object_free(ann);
    tether_object_free(p1);
    tether_object_free(p3);
    tether_object_free(n1);
    tether_object_free(l1);
}

int main(int argc, char **argv)
{
    char store[512];
    tether_context *ctx;
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-relationships");
    tu_store_path(store, sizeof store, "relationships");
    if (!CHECK(seed()))
        return tu_finish();
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (ctx) {
        tu_fetch_all(ctx, "owners");
        tu_fetch_all(ctx, "pets");
        tu_fetch_all(ctx, "notes");
        tu_fetch_all(ctx, "licences");
        tu_fetch_all(ctx, "walks");
        test_model(ctx);
        test_reading(ctx);
        test_delete_rules(ctx);
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }
    return tu_finish();
}
