/*
 * first_peek.c — the cost of the first read of an object whose record is in
 * the store but not in memory, beside the floor: one prepared SQLite SELECT
 * of the same row from the same file.
 *
 *   first_peek URL BUCKET COLLECTION KEY STORE [USER PASSWORD]
 *
 * Fills STORE with a server-only fetch (object cache 0, so nothing stays in
 * memory), then for every record: tether_context_object + tether_object_peek
 * + tether_object_release, against sqlite3_bind/step/column/reset of the
 * same SELECT on the store's own table (tables and columns are named by the
 * entity's and the attribute's codes). Prints one JSON line
 * with nanoseconds per read (median of 5 passes) and the count.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tether.h"

#define PASSES 5

static char **ids;
static size_t id_count;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static int done, final_status;

static void on_fetch(tether_task *task, tether_phase phase, int status, const char *message,
                     tether_results *results, void *userdata) {
    (void)task, (void)message, (void)userdata;
    if (phase == TETHER_PHASE_FINAL) {
        size_t count = 0;
        tether_results_count(results, &count);
        ids = calloc(count, sizeof *ids);
        for (size_t i = 0; i < count; i++) {
            tether_object *obj;
            const char *id;
            tether_results_object_at(results, i, &obj);
            tether_object_id(obj, &id);
            ids[i] = strdup(id);
        }
        id_count = count;
        pthread_mutex_lock(&lock);
        final_status = status;
        done = 1;
        pthread_cond_signal(&done_cond);
        pthread_mutex_unlock(&lock);
    }
    tether_results_release(results);
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 8) {
        fprintf(stderr, "usage: %s URL BUCKET COLLECTION KEY STORE [USER PASSWORD]\n", argv[0]);
        return 2;
    }
    const char *collection = argv[3], *key = argv[4];
    tether_context_options opts;
    tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
    opts.server_url = argv[1];
    opts.bucket = argv[2];
    opts.store_path = argv[5];
    opts.object_cache_size = 0;
    if (argc == 8) {
        opts.username = argv[6];
        opts.password = argv[7];
    }
    tether_context *ctx;
    if (tether_context_open(&opts, &ctx) != TETHER_OK) {
        fprintf(stderr, "open: %s\n", tether_errmsg());
        return 1;
    }
    tether_fetch_options fetch;
    tether_fetch_options_init(&fetch, TETHER_FETCH_OPTIONS_VERSION);
    fetch.entity = collection;
    fetch.policy = TETHER_POLICY_SERVER_ONLY;
    if (tether_fetch_start(ctx, &fetch, on_fetch, NULL, NULL) != TETHER_OK) {
        fprintf(stderr, "fetch: %s\n", tether_errmsg());
        return 1;
    }
    pthread_mutex_lock(&lock);
    while (!done) pthread_cond_wait(&done_cond, &lock);
    pthread_mutex_unlock(&lock);
    if (final_status != TETHER_OK || id_count == 0) {
        fprintf(stderr, "fetch failed: %d\n", final_status);
        return 1;
    }

    sqlite3 *db;
    sqlite3_stmt *select;
    char sql[512];
    tether_entity *entity;
    int entity_code, key_code, id_code;
    size_t key_index, id_index;
    if (tether_context_entity(ctx, collection, &entity) != TETHER_OK || tether_entity_code(entity, &entity_code) != TETHER_OK ||
        tether_entity_attribute_index(entity, key, &key_index) != TETHER_OK ||
        tether_entity_attribute_at(entity, key_index, NULL, &key_code, NULL, NULL) != TETHER_OK ||
        tether_entity_attribute_index(entity, "id", &id_index) != TETHER_OK ||
        tether_entity_attribute_at(entity, id_index, NULL, &id_code, NULL, NULL) != TETHER_OK) {
        fprintf(stderr, "model: %s\n", tether_errmsg());
        return 1;
    }
    snprintf(sql, sizeof sql, "SELECT \"a%d\" FROM \"e%d\" WHERE \"a%d\" = ?", key_code, entity_code, id_code);
    if (sqlite3_open_v2(argv[5], &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, sql, -1, &select, NULL) != SQLITE_OK) {
        fprintf(stderr, "sqlite3: %s\n", sqlite3_errmsg(db));
        return 1;
    }

    double tether_ns[PASSES], sqlite_ns[PASSES];
    long checksum = 0;
    for (int pass = 0; pass < PASSES; pass++) {
        double start = now_ns();
        for (size_t i = 0; i < id_count; i++) {
            tether_object *obj;
            tether_value value;
            if (tether_context_object(ctx, collection, ids[i], &obj) != TETHER_OK ||
                tether_object_peek(obj, key, &value) != TETHER_OK) {
                fprintf(stderr, "peek %s: %s\n", ids[i], tether_errmsg());
                return 1;
            }
            checksum += (long)value.length;
            tether_value_clear(&value);
            tether_object_release(obj);
        }
        tether_ns[pass] = (now_ns() - start) / id_count;

        start = now_ns();
        for (size_t i = 0; i < id_count; i++) {
            sqlite3_bind_text(select, 1, ids[i], -1, SQLITE_STATIC);
            if (sqlite3_step(select) != SQLITE_ROW) return 1;
            checksum -= sqlite3_column_bytes(select, 0);
            sqlite3_reset(select);
        }
        sqlite_ns[pass] = (now_ns() - start) / id_count;
    }
    qsort(tether_ns, PASSES, sizeof(double), compare);
    qsort(sqlite_ns, PASSES, sizeof(double), compare);
    int64_t live = 0;
    tether_live_count(TETHER_LIVE_OBJECTS, &live);
    printf("{\"tether_ns\": %.0f, \"sqlite_ns\": %.0f, \"reads\": %zu, \"objects_in_memory\": %lld, \"checksum\": %ld}\n",
           tether_ns[PASSES / 2], sqlite_ns[PASSES / 2], id_count, (long long)live, checksum);
    sqlite3_finalize(select);
    sqlite3_close(db);
    for (size_t i = 0; i < id_count; i++) free(ids[i]);
    free(ids);
    tether_context_close(ctx);
    return checksum == 0 ? 0 : 1;
}
