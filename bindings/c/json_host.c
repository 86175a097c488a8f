/* json_host.c — a host-written connection in one file: Tether's records served
 * from a local JSON file instead of a server. It shows the whole contract of
 * tether_connection: the library asks (server info, specs, pages, counts,
 * records by id, conditional writes), this file answers each request once.
 * Everything above it (the SQLite cache, one object per record, peek and get,
 * observers, the outbox, save and conflicts) is the library's.
 *
 * The file holds a version (bumped by every write) and each entity's id field,
 * version field, JSON schema and records:
 *
 *   {"version": 3, "entities": {"notes": {"id": "id", "version": "rev",
 *     "schema": {"properties": {"Text": {"type": "string"}}},
 *     "records": {"n1": {"id": "n1", "rev": 1, "Text": "hello"}}}}}
 *
 * The file is small and local, so each request is answered at once, inside
 * the callback; a connection to a real server would hand the request to its
 * own thread and complete it when the answer comes (and honour `cancel`).
 *
 *   cc json_host.c -ltether -ljansson -o json_host
 *   ./json_host data.json cache.sqlite      (a demo: see main at the end)
 */
#define _POSIX_C_SOURCE 200809L

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tether.h"

typedef struct json_host {
    pthread_mutex_t mu;
    char *path;
    json_t *root; /* the file's contents; written back after each write */
} json_host;

/* Loads the file; NULL (with a message on stderr) if it cannot be read. */
json_host *json_host_open(const char *path)
{
    json_error_t error;
    json_host *host;
    json_t *root = json_load_file(path, 0, &error);
    if (!root || !json_is_object(json_object_get(root, "entities"))) {
        fprintf(stderr, "json_host: %s: %s\n", path, root ? "no \"entities\" object" : error.text);
        json_decref(root);
        return NULL;
    }
    host = calloc(1, sizeof *host);
    pthread_mutex_init(&host->mu, NULL);
    host->path = strdup(path);
    host->root = root;
    return host;
}

/* Written to a new file, then renamed over the old: a crash leaves one or the other. */
static int save_file(json_host *host)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", host->path);
    if (json_dump_file(host->root, tmp, JSON_INDENT(1)) != 0)
        return -1;
    return rename(tmp, host->path);
}

static json_t *entity_of(json_host *host, const char *name)
{
    return json_object_get(json_object_get(host->root, "entities"), name);
}

/* Each answer is one of these; any failure completes the request with it. */
static int add_record(tether_request *r, json_t *record)
{
    char *text = json_dumps(record, JSON_COMPACT);
    int status = tether_request_add_record(r, text);
    free(text);
    return status;
}

static int answer_specs(json_host *host, tether_request *r)
{
    const char *name;
    json_t *entity;
    json_object_foreach(json_object_get(host->root, "entities"), name, entity) {
        char *schema = json_dumps(json_object_get(entity, "schema"), JSON_COMPACT);
        int status = tether_request_add_spec(r, name, json_string_value(json_object_get(entity, "id")),
                                             json_string_value(json_object_get(entity, "version")),
                                             schema ? schema : "{}",
                                             TETHER_OP_FETCH | TETHER_OP_INSERT | TETHER_OP_UPDATE | TETHER_OP_DELETE);
        free(schema);
        if (status != TETHER_OK)
            return status;
    }
    return TETHER_OK;
}

/* The sort keys of a PAGE request, for qsort's comparator. */
static tether_request *sorting;

static int compare_values(json_t *a, json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) < json_number_value(b) ? -1 : json_number_value(a) > json_number_value(b);
    if (json_is_string(a) && json_is_string(b))
        return strcmp(json_string_value(a), json_string_value(b));
    return (a != NULL) - (b != NULL); /* absent first */
}

static int compare_records(const void *x, const void *y)
{
    json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
    size_t count = 0, i;
    tether_request_sort_count(sorting, &count);
    for (i = 0; i < count; i++) {
        const char *field = NULL;
        int descending = 0, order;
        tether_request_sort_at(sorting, i, &field, &descending);
        order = compare_values(json_object_get(a, field), json_object_get(b, field));
        if (order)
            return descending ? -order : order;
    }
    return 0;
}

/* Every record of the entity, in the order asked, up to the limit, in one page
 * (the file is small: no cursor). The data set's version is not given, so the
 * library lists everything each time rather than asking for changes since. */
static int answer_page(json_host *host, tether_request *r)
{
    static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;
    const char *name = NULL, *id;
    json_t *records, *record, **list;
    int64_t limit = 0;
    size_t count, n = 0, i;
    int status = TETHER_OK;
    tether_request_entity(r, &name, NULL);
    tether_request_limit(r, &limit);
    records = json_object_get(entity_of(host, name), "records");
    count = json_object_size(records);
    list = calloc(count ? count : 1, sizeof *list);
    json_object_foreach(records, id, record) list[n++] = record;
    pthread_mutex_lock(&sort_mu);
    sorting = r;
    qsort(list, n, sizeof *list, compare_records);
    pthread_mutex_unlock(&sort_mu);
    for (i = 0; i < n && (limit <= 0 || (int64_t)i < limit) && status == TETHER_OK; i++)
        status = add_record(r, list[i]);
    free(list);
    return status;
}

static int answer_records(json_host *host, tether_request *r)
{
    const char *name = NULL, *id = NULL;
    size_t count = 0, i;
    int status = TETHER_OK;
    json_t *records;
    tether_request_entity(r, &name, NULL);
    records = json_object_get(entity_of(host, name), "records");
    tether_request_id_count(r, &count);
    for (i = 0; i < count && status == TETHER_OK; i++) {
        json_t *record;
        tether_request_id_at(r, i, &id);
        if ((record = json_object_get(records, id)) != NULL) /* absent ids: gone */
            status = add_record(r, record);
    }
    return status;
}

/* Applies each write if its condition holds, as a server would: a create
 * only for a new id, a patch, replace or delete only at the version it was
 * made against. */
static int answer_writes(json_host *host, tether_request *r)
{
    size_t count = 0, i;
    json_int_t version = json_integer_value(json_object_get(host->root, "version"));
    tether_request_write_count(r, &count);
    for (i = 0; i < count; i++) {
        tether_write_kind kind;
        const char *name, *id, *fields_json;
        int64_t if_version;
        int has_version, status;
        json_t *entity, *records, *current, *fields, *record;
        const char *id_field, *version_field;
        char *text;
        tether_request_write_at(r, i, &kind, &name, &id, &fields_json, &if_version, &has_version);
        entity = entity_of(host, name);
        records = json_object_get(entity, "records");
        id_field = json_string_value(json_object_get(entity, "id"));
        version_field = json_string_value(json_object_get(entity, "version"));
        current = json_object_get(records, id);
        if (kind == TETHER_WRITE_CREATE ? current != NULL
            : current && has_version && json_integer_value(json_object_get(current, version_field)) != if_version) {
            text = json_dumps(current, JSON_COMPACT);
            status = tether_request_set_outcome(r, i, TETHER_OUTCOME_CONFLICT, text, 0, NULL);
            free(text);
        } else if (!current && kind != TETHER_WRITE_CREATE) { /* gone: a delete is done, an update conflicts */
            status = tether_request_set_outcome(r, i, kind == TETHER_WRITE_DELETE ? TETHER_OUTCOME_DELETED
                                                                                  : TETHER_OUTCOME_CONFLICT, NULL, 0, NULL);
        } else if (kind == TETHER_WRITE_DELETE) {
            json_object_del(records, id);
            version++;
            status = tether_request_set_outcome(r, i, TETHER_OUTCOME_DELETED, NULL, 0, NULL);
        } else {
            fields = json_loads(fields_json, 0, NULL);
            record = kind == TETHER_WRITE_PATCH ? json_deep_copy(current) : json_object();
            json_object_update(record, fields); /* a patch's nulls stay as nulls: read as absent */
            json_object_set_new(record, id_field, json_string(id));
            json_object_set_new(record, version_field, json_integer(++version));
            json_object_set(records, id, record);
            text = json_dumps(record, JSON_COMPACT);
            status = tether_request_set_outcome(r, i, TETHER_OUTCOME_WRITTEN, text, 0, NULL);
            free(text);
            json_decref(record);
            json_decref(fields);
        }
        if (status != TETHER_OK)
            return status;
    }
    json_object_set_new(host->root, "version", json_integer(version));
    return save_file(host) == 0 ? TETHER_OK : TETHER_E_STORE;
}

/* The file as it is now: another program may have written it. */
static void reload(json_host *host)
{
    json_t *root = json_load_file(host->path, 0, NULL);
    if (root && json_is_object(json_object_get(root, "entities"))) {
        json_decref(host->root);
        host->root = root;
    } else {
        json_decref(root); /* unreadable now: keep what was read last */
    }
}

/* tether_connection.request: answers at once. */
static void on_request(tether_request *r, void *userdata)
{
    json_host *host = userdata;
    tether_request_kind_t kind;
    int status = TETHER_OK;
    tether_request_kind(r, &kind);
    pthread_mutex_lock(&host->mu);
    reload(host);
    switch (kind) {
    case TETHER_REQUEST_SERVER_INFO: status = tether_request_set_server_info(r, "json file", "1"); break;
    case TETHER_REQUEST_SPECS: status = answer_specs(host, r); break;
    case TETHER_REQUEST_PAGE: status = answer_page(host, r); break;
    case TETHER_REQUEST_RECORDS: status = answer_records(host, r); break;
    case TETHER_REQUEST_WRITE: status = answer_writes(host, r); break;
    case TETHER_REQUEST_COUNT: {
        const char *name = NULL;
        tether_request_entity(r, &name, NULL);
        status = tether_request_set_count(r, (int64_t)json_object_size(json_object_get(entity_of(host, name), "records")));
        break;
    }
    default: status = TETHER_E_MISUSE;
    }
    pthread_mutex_unlock(&host->mu);
    /* Exactly once: with the answer, or the failure met while building it. */
    tether_request_complete(r, status, status == TETHER_OK ? NULL : tether_errmsg());
}

/* tether_connection.release: once, after the context has closed. */
static void on_release(void *userdata)
{
    json_host *host = userdata;
    json_decref(host->root);
    free(host->path);
    pthread_mutex_destroy(&host->mu);
    free(host);
}

/* Opens a context on the file at json_path, caching in store_path. The
 * context owns the host from here on, and frees it when it closes. */
int json_host_open_context(const char *json_path, const char *store_path, tether_delivery delivery,
                           tether_context **out)
{
    tether_context_options opts;
    tether_connection connection;
    char identity[4200];
    json_host *host = json_host_open(json_path);
    if (!host)
        return TETHER_E_NOT_FOUND;
    tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
    opts.store_path = store_path;
    opts.delivery = delivery;
    tether_connection_init(&connection, TETHER_CONNECTION_VERSION);
    snprintf(identity, sizeof identity, "json file %s", json_path);
    connection.identity = identity;
    connection.request = on_request;
    connection.release = on_release;
    connection.userdata = host;
    return tether_context_open_host(&opts, &connection, out); /* release is called even if this fails */
}

#ifndef JSON_HOST_NO_MAIN
#include <unistd.h>

static void on_fetch(tether_task *task, tether_phase phase, int status, const char *message,
                     tether_results *results, void *userdata)
{
    size_t count = 0;
    (void)task;
    (void)userdata;
    tether_results_count(results, &count);
    printf("fetch %s: %zu notes%s%s\n", phase == TETHER_PHASE_CACHED ? "(cached)" : "(final)", count,
           status == TETHER_OK ? "" : ", ", status == TETHER_OK ? "" : message);
    tether_results_free(results);
}

static void on_save(tether_task *task, int status, const char *message, tether_save_report *report, void *userdata)
{
    (void)task;
    (void)report;
    (void)userdata;
    printf("save: %s\n", status == TETHER_OK ? "ok" : message);
}

int main(int argc, char **argv)
{
    tether_context *ctx = NULL;
    tether_object *note = NULL;
    tether_value value = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    tether_value text = {TETHER_TYPE_TEXT, 0, 0.0, (char *)"seen from C", 11};
    tether_fetch_options fetch;
    int status;
    if (argc < 4) {
        fprintf(stderr, "usage: %s data.json cache.sqlite entity:id:key\n", argv[0]);
        return 2;
    }
    if ((status = json_host_open_context(argv[1], argv[2], TETHER_DELIVER_THREAD, &ctx)) != TETHER_OK) {
        fprintf(stderr, "open: %s\n", tether_errmsg());
        return 1;
    }
    {
        char entity[256], id[256], key[256];
        if (sscanf(argv[3], "%255[^:]:%255[^:]:%255s", entity, id, key) != 3) {
            fprintf(stderr, "give entity:id:key\n");
            tether_context_close(ctx);
            return 2;
        }
        tether_fetch_options_init(&fetch, TETHER_FETCH_OPTIONS_VERSION);
        fetch.entity = entity;
        tether_fetch_start(ctx, &fetch, on_fetch, NULL, NULL); /* answers twice: cache, then the file */
        sleep(1);
        tether_context_object(ctx, entity, id, &note);
        if (tether_object_peek(note, key, &value) == TETHER_OK && value.type == TETHER_TYPE_TEXT)
            printf("%s/%s %s: %s\n", entity, id, key, value.text);
        tether_value_free(&value);
        if (tether_object_set(note, key, &text) == TETHER_OK) /* in the outbox now */
            tether_save_start(ctx, NULL, on_save, NULL, NULL); /* to the file */
        sleep(1);
    }
    tether_object_free(note);
    tether_context_close(ctx);
    return 0;
}
#endif
