/*
 * first_peek.c — the cost of the first read of an object whose record is in
 * the store but not in memory, beside the floor: one prepared SQLite SELECT
 * of the same row from the same file.
 *
 *   first_peek URL BUCKET COLLECTION KEY STORE [USER PASSWORD]
 *
 * Fills STORE with a server-only fetch (object cache 0, so nothing stays in
 * memory), then for every record: tether_context_object + tether_object_peek
 * + tether_object_free, against sqlite3_bind/step/column/reset of the
 * same SELECT on the store's own table (tables and columns are named by the
 * entity's and the attribute's codes). Prints one JSON line
 * with nanoseconds per read (median of 5 passes after an untimed warm-up
 * pass), the count, and the library's prepared-statement total after the
 * warm-up and after the timed passes (equal when nothing was prepared again).
 *
 * Then the same first reads while a fetch stores pages in the same context:
 * the store's sync state is cleared (so the fetch lists every record again
 * and rewrites every row, a page per transaction), a server-only fetch
 * starts, and reads go on until its FINAL callback; the JSON line adds their
 * count, median, 99th percentile and maximum (during_*).
 */
#define _POSIX_C_SOURCE 200809L
#define BENCH_NAME "first_peek"
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"

#define PASSES 5

static atomic_int fetch_done;

static void note_final(tether_task *task, tether_phase phase, int status, const char *message, tether_results *results,
                       void *userdata) {
    (void)task; (void)message; (void)userdata;
    tether_results_free(results);
    if (phase == TETHER_PHASE_FINAL) {
        if (status != TETHER_OK) die("fetch during reads", tether_errstr(status));
        atomic_store(&fetch_done, 1);
    }
}

/* First reads of `ids` while a server-only fetch of `collection` rewrites
 * every row; prints the during_* members of the JSON line. */
static void reads_during_fetch(tether_context *ctx, const char *store, const char *collection, const char *key,
                               char **ids, size_t id_count) {
    sqlite3 *db;
    if (sqlite3_open(store, &db) != SQLITE_OK || sqlite3_busy_timeout(db, 5000) != SQLITE_OK ||
        sqlite3_exec(db, "DELETE FROM tether_sync", NULL, NULL, NULL) != SQLITE_OK)
        die("sqlite3", sqlite3_errmsg(db));
    sqlite3_close(db);
    size_t capacity = 1 << 20, n = 0;
    double *ns = malloc(capacity * sizeof *ns);
    tether_fetch_options fetch;
    tether_fetch_options_init(&fetch, TETHER_FETCH_OPTIONS_VERSION);
    fetch.entity = collection;
    fetch.policy = TETHER_POLICY_SERVER_ONLY;
    if (!ns) die("malloc", "out of memory");
    double start = now_ns();
    if (tether_fetch_start(ctx, &fetch, note_final, NULL, NULL) != TETHER_OK) die_tether("fetch_start");
    while (!atomic_load(&fetch_done)) {
        tether_object *obj;
        tether_value value;
        double t = now_ns();
        if (tether_context_object(ctx, collection, ids[n % id_count], &obj) != TETHER_OK ||
            tether_object_peek(obj, key, &value) != TETHER_OK)
            die(ids[n % id_count], tether_errmsg());
        tether_value_free(&value);
        tether_object_free(obj);
        if (n == capacity) {
            capacity *= 2;
            if (!(ns = realloc(ns, capacity * sizeof *ns))) die("realloc", "out of memory");
        }
        ns[n++] = now_ns() - t;
    }
    double fetch_ms = (now_ns() - start) / 1e6;
    if (n == 0) die("reads during the fetch", "none");
    qsort(ns, n, sizeof(double), compare_doubles);
    printf(", \"during_fetch_ms\": %.0f, \"during_reads\": %zu, \"during_median_ns\": %.0f, \"during_p99_ns\": %.0f, "
           "\"during_max_ns\": %.0f}\n", fetch_ms, n, ns[n / 2], ns[n * 99 / 100], ns[n - 1]);
    free(ns);
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 8) {
        fprintf(stderr, "usage: %s URL BUCKET COLLECTION KEY STORE [USER PASSWORD]\n", argv[0]);
        return 2;
    }
    const char *collection = argv[3], *key = argv[4];
    tether_context_options opts;
    tether_kinto_options kinto;
    tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
    tether_kinto_options_init(&kinto, TETHER_KINTO_OPTIONS_VERSION);
    kinto.server_url = argv[1];
    kinto.bucket = argv[2];
    opts.store_path = argv[5];
    opts.object_cache_size = 0;
    if (argc == 8) {
        kinto.username = argv[6];
        kinto.password = argv[7];
    }
    tether_context *ctx;
    if (tether_context_open_kinto(&opts, &kinto, &ctx) != TETHER_OK) die_tether("open");
    size_t id_count;
    char **ids = sync_ids(ctx, collection, &id_count);
    wait_no_objects();
    if (id_count == 0) die("fetch", "no records");

    sqlite3 *db;
    sqlite3_stmt *select;
    char sql[512];
    tether_entity *entity;
    int entity_code;
    if (tether_context_entity(ctx, collection, &entity) != TETHER_OK || tether_entity_code(entity, &entity_code) != TETHER_OK)
        die_tether("model");
    snprintf(sql, sizeof sql, "SELECT \"a%d\" FROM \"e%d\" WHERE \"a%d\" = ?", attribute_code(entity, key), entity_code,
             attribute_code(entity, "id"));
    if (sqlite3_open_v2(argv[5], &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, sql, -1, &select, NULL) != SQLITE_OK)
        die("sqlite3", sqlite3_errmsg(db));

    double tether_ns[PASSES], sqlite_ns[PASSES];
    long checksum = 0;
    long long prepared_warm = 0;
    for (int pass = -1; pass < PASSES; pass++) {  /* pass -1 warms up, untimed */
        double start = now_ns();
        for (size_t i = 0; i < id_count; i++) {
            tether_object *obj;
            tether_value value;
            if (tether_context_object(ctx, collection, ids[i], &obj) != TETHER_OK ||
                tether_object_peek(obj, key, &value) != TETHER_OK)
                die(ids[i], tether_errmsg());
            checksum += (long)value.length;
            tether_value_free(&value);
            tether_object_free(obj);
        }
        if (pass >= 0) tether_ns[pass] = (now_ns() - start) / id_count;

        start = now_ns();
        for (size_t i = 0; i < id_count; i++) {
            sqlite3_bind_text(select, 1, ids[i], -1, SQLITE_STATIC);
            if (sqlite3_step(select) != SQLITE_ROW) die(ids[i], sqlite3_errmsg(db));
            checksum -= sqlite3_column_bytes(select, 0);
            sqlite3_reset(select);
        }
        if (pass >= 0) sqlite_ns[pass] = (now_ns() - start) / id_count;
        else prepared_warm = prepared_statements();
    }
    long long prepared_end = prepared_statements();
    qsort(tether_ns, PASSES, sizeof(double), compare_doubles);
    qsort(sqlite_ns, PASSES, sizeof(double), compare_doubles);
    int64_t live = 0;
    tether_debug_count(TETHER_DEBUG_OBJECTS, &live);
    printf("{\"tether_ns\": %.0f, \"sqlite_ns\": %.0f, \"reads\": %zu, \"objects_in_memory\": %lld, "
           "\"prepared_after_warmup\": %lld, \"prepared_after_timed\": %lld, \"checksum\": %ld",
           tether_ns[PASSES / 2], sqlite_ns[PASSES / 2], id_count, (long long)live, prepared_warm, prepared_end,
           checksum);
    sqlite3_finalize(select);
    sqlite3_close(db);
    reads_during_fetch(ctx, argv[5], collection, key, ids, id_count);
    free_ids(ids, id_count);
    tether_context_close(ctx);
    return checksum == 0 ? 0 : 1;
}
