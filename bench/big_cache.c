/*
 * big_cache.c — rows 7 and 8 of the bench: fetches over a large cache, beside
 * raw sqlite3 on the same store file.
 *
 *   big_cache URL BUCKET COLLECTION STORE USER PASSWORD make N
 *   big_cache URL BUCKET COLLECTION STORE USER PASSWORD predicate RUNS
 *   big_cache URL BUCKET COLLECTION STORE USER PASSWORD iterate SIDE BATCH
 *
 * make: fills a new STORE with one server-only fetch (so the library makes
 * the table and saves the model), then multiplies its rows to N in SQLite
 * with one INSERT ... SELECT: row n = i + k*B (B rows fetched, i the source
 * row's rank by id) copies source row i, bookkeeping columns included, with
 * id of n as the seeding makes it (bench_record_id: BENCH_IDS) and Name "item-%05d" of n, Created
 * continuing the seeded series and Count, Size shifted by k. Pushing N
 * records through Kinto would take far longer than the measurement.
 *
 * predicate: a cache-only predicate + sort fetch (objects, values read) against
 * the same WHERE ... ORDER BY prepared on sqlite3, every column read; RUNS
 * timed runs after a warm-up, alternating; the ids are compared in order.
 *
 * iterate: one pass over every row, reading the Name of each, in this process
 * (so VmHWM is this pass's alone). SIDE tether: a cache-only fetch with
 * batch_size BATCH, tether_results_object_at + tether_object_peek. SIDE
 * values: TETHER_RESULT_VALUES of Name with batch_size BATCH,
 * tether_results_value_at. SIDE sqlite: SELECT Name ORDER BY id stepped on a
 * read-only connection. Baseline VmHWM is taken once the context (or the
 * connection) is open.
 *
 * Each command prints one JSON line. USER "" means anonymous. predicate and
 * iterate's tether sides give the library's prepared-statement total after
 * the warm-up (iterate has none: after the context opens) and after the timed
 * part.
 */
#define _POSIX_C_SOURCE 200809L
#define BENCH_NAME "big_cache"
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchutil.h"

static const char *url, *bucket, *collection, *store, *user, *password;

static double now_s(void) { return now_ns() / 1e9; }

static long peak_kb(void) { return status_kb("VmHWM:"); }

/* ------------------------------------------------------------ tether side */

static tether_context *open_context(void) {
    tether_context_options opts;
    tether_kinto_options kinto;
    tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
    tether_kinto_options_init(&kinto, TETHER_KINTO_OPTIONS_VERSION);
    kinto.server_url = url;
    kinto.bucket = bucket;
    opts.store_path = store;
    if (*user) {
        kinto.username = user;
        kinto.password = password;
    }
    tether_context *ctx;
    if (tether_context_open_kinto(&opts, &kinto, &ctx) != TETHER_OK) die_tether("context_open");
    return ctx;
}

/* The store's table and the column of attribute `name` (model codes). */
struct names {
    char table[32], id[32], name[32], count[32], size[32], created[32], status[32], owner[32];
};

static void column_of(tether_entity *entity, const char *attribute, char *out) {
    snprintf(out, 32, "\"a%d\"", attribute_code(entity, attribute));
}

static struct names model_names(tether_context *ctx) {
    struct names n;
    tether_entity *entity;
    int code;
    if (tether_context_entity(ctx, collection, &entity) != TETHER_OK || tether_entity_code(entity, &code) != TETHER_OK)
        die_tether("entity");
    snprintf(n.table, sizeof n.table, "e%d", code);
    column_of(entity, "id", n.id);
    column_of(entity, "Name", n.name);
    column_of(entity, "Count", n.count);
    column_of(entity, "Size", n.size);
    column_of(entity, "Created", n.created);
    column_of(entity, "Status", n.status);
    column_of(entity, "Owner", n.owner);
    return n;
}

/* ------------------------------------------------------------ sqlite side */

static sqlite3 *open_db(int flags) {
    sqlite3 *db;
    if (sqlite3_open_v2(store, &db, flags, NULL) != SQLITE_OK) die("sqlite3_open", sqlite3_errmsg(db));
    return db;
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql) {
    sqlite3_stmt *stmt;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK) die(sql, sqlite3_errmsg(db));
    return stmt;
}

static long long scalar(sqlite3 *db, const char *sql) {
    sqlite3_stmt *stmt = prepare(db, sql);
    if (sqlite3_step(stmt) != SQLITE_ROW) die(sql, sqlite3_errmsg(db));
    long long v = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    return v;
}

static void exec(sqlite3 *db, const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) die(sql, err ? err : "?");
}

/* ------------------------------------------------------------ make */

/* bench_id(n): record n's id, so copies are shaped as the seeded ids. */
static void sql_bench_id(sqlite3_context *call, int argc, sqlite3_value **argv) {
    (void)argc;
    char id[40];
    bench_record_id(sqlite3_value_int64(argv[0]), id);
    sqlite3_result_text(call, id, -1, SQLITE_TRANSIENT);
}

static int cmd_make(long long target) {
    if (access(store, F_OK) == 0) die(store, "exists; make wants a new store");
    tether_context *ctx = open_context();
    tether_fetch_options fo;
    tether_fetch_options_init(&fo, TETHER_FETCH_OPTIONS_VERSION);
    fo.entity = collection;
    fo.policy = TETHER_POLICY_SERVER_ONLY;
    fo.result_type = TETHER_RESULT_IDS;  /* only the store matters here */
    tether_results *res = fetch_wait(ctx, &fo);
    size_t fetched = 0;
    tether_results_count(res, &fetched);
    tether_results_free(res);
    struct names n = model_names(ctx);
    tether_context_close(ctx);

    long long base = (long long)fetched;
    if (base <= 0 || target <= base) die("make", "N must exceed the records fetched");
    double t0 = now_s();
    sqlite3 *db = open_db(SQLITE_OPEN_READWRITE);
    if (sqlite3_create_function(db, "bench_id", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, sql_bench_id, NULL,
                                NULL) != SQLITE_OK)
        die("bench_id", sqlite3_errmsg(db));
    char sql[8192];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '%s'", n.table);
    if (scalar(db, sql) != 1) die(n.table, "no such table in the store");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\"", n.table);
    if (scalar(db, sql) != base) die(n.table, "row count differs from the fetch");

    /* Every column the library wrote (pragma table_info), in its order. */
    char cols[4096] = "", exprs[4096] = "";
    snprintf(sql, sizeof sql, "SELECT name FROM pragma_table_info('%s') ORDER BY cid", n.table);
    sqlite3_stmt *info = prepare(db, sql);
    int ncols = 0;
    while (sqlite3_step(info) == SQLITE_ROW) {
        char col[64], expr[256];
        snprintf(col, sizeof col, "\"%s\"", (const char *)sqlite3_column_text(info, 0));
        /* n = src.i + k*B; values derived from the source row and n. */
        if (!strcmp(col, n.id))
            snprintf(expr, sizeof expr, "bench_id(src.i + k * %lld)", base);
        else if (!strcmp(col, n.name))
            snprintf(expr, sizeof expr, "printf('item-%%05d', src.i + k * %lld)", base);
        else if (!strcmp(col, n.count))
            snprintf(expr, sizeof expr, "(src.%s + 37 * k) %% 1000", col);
        else if (!strcmp(col, n.size))
            snprintf(expr, sizeof expr, "(src.%s + 7919 * k) %% 100000", col);
        else if (!strcmp(col, n.created))
            snprintf(expr, sizeof expr, "src.%s + 3600 * %lld * k", col, base);
        else
            snprintf(expr, sizeof expr, "src.%s", col);  /* copied, bookkeeping included */
        strcat(cols, ncols ? ", " : "");
        strcat(cols, col);
        strcat(exprs, ncols ? ", " : "");
        strcat(exprs, expr);
        ncols++;
    }
    sqlite3_finalize(info);

    /* Bulk-load settings for this connection only; the file stays WAL. */
    exec(db, "PRAGMA synchronous = OFF; PRAGMA cache_size = -65536");
    /* copies outer (CROSS JOIN keeps that order), so n ascends: ids append
     * in order within each k, and src (materialised: it has a window) is
     * scanned once per k. */
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE copies(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM copies WHERE k < %lld), "
             "src AS (SELECT row_number() OVER (ORDER BY %s) - 1 AS i, * FROM \"%s\") "
             "INSERT INTO \"%s\" (%s) SELECT %s FROM copies CROSS JOIN src WHERE src.i + k * %lld < %lld",
             (target - 1) / base, n.id, n.table, n.table, cols, exprs, base, target);
    exec(db, "BEGIN");
    exec(db, sql);
    exec(db, "COMMIT");
    exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\"", n.table);
    long long rows = scalar(db, sql);
    sqlite3_close(db);
    if (rows != target) die("make", "row count after the insert differs from N");
    printf("{\"rows\": %lld, \"fetched\": %lld, \"columns\": %d, \"seconds\": %.2f}\n", rows, base, ncols,
           now_s() - t0);
    return 0;
}

/* ------------------------------------------------------------ predicate */

static int cmd_predicate(int runs) {
    tether_context *ctx = open_context();
    struct names n = model_names(ctx);
    tether_value args[3] = {{TETHER_TYPE_TEXT, 0, 0, "open", 4},
                            {TETHER_TYPE_INTEGER, 500, 0, NULL, 0},
                            {TETHER_TYPE_TEXT, 0, 0, "A", 1}};
    tether_fetch_options fo;
    tether_fetch_options_init(&fo, TETHER_FETCH_OPTIONS_VERSION);
    fo.entity = collection;
    fo.policy = TETHER_POLICY_CACHE_ONLY;
    fo.predicate = "Status == $1 AND Count >= $2 AND Owner BEGINSWITH[c] $3";
    fo.arguments = args;
    fo.argument_count = 3;
    fo.sort = "-Count";

    /* Same rows, same order (the library breaks ties by id). lower() LIKE
     * is the ASCII equivalent of BEGINSWITH[c] for these names. */
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT * FROM \"%s\" WHERE %s = ?1 AND %s >= ?2 AND lower(%s) LIKE ?3 ORDER BY %s DESC, %s",
             n.table, n.status, n.count, n.owner, n.count, n.id);
    sqlite3 *db = open_db(SQLITE_OPEN_READONLY);
    sqlite3_stmt *stmt = prepare(db, sql);
    sqlite3_bind_text(stmt, 1, "open", -1, SQLITE_STATIC);
    sqlite3_bind_int64(stmt, 2, 500);
    sqlite3_bind_text(stmt, 3, "a%", -1, SQLITE_STATIC);
    int ncols = sqlite3_column_count(stmt);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\"", n.table);
    long long total = scalar(db, sql);

    double *tt = calloc(runs, sizeof *tt), *ts = calloc(runs, sizeof *ts);
    size_t matches = 0;
    long checksum = 0;
    long long prepared_warm = 0;
    for (int run = 0; run <= runs; run++) {  /* run 0 warms up */
        double t0 = now_s();
        tether_results *res = fetch_wait(ctx, &fo);
        double dt = now_s() - t0;
        if (run) tt[run - 1] = dt;

        /* The floor: step, and read every column as the library decodes them. */
        t0 = now_s();
        while (sqlite3_step(stmt) == SQLITE_ROW)
            for (int c = 0; c < ncols; c++) {
                switch (sqlite3_column_type(stmt, c)) {
                case SQLITE_INTEGER: checksum += (long)sqlite3_column_int64(stmt, c); break;
                case SQLITE_FLOAT: checksum += (long)sqlite3_column_double(stmt, c); break;
                case SQLITE_TEXT: sqlite3_column_text(stmt, c); checksum += sqlite3_column_bytes(stmt, c); break;
                default: break;
                }
            }
        sqlite3_reset(stmt);
        dt = now_s() - t0;
        if (run) ts[run - 1] = dt;

        /* Untimed: the same ids in the same order. */
        size_t count = 0, i = 0;
        tether_results_count(res, &count);
        while (sqlite3_step(stmt) == SQLITE_ROW) {
            const char *id = NULL;
            if (i >= count || tether_results_id_at(res, i, &id) != TETHER_OK ||
                strcmp(id, (const char *)sqlite3_column_text(stmt, 0)) != 0) {
                fprintf(stderr, "big_cache: row %zu: tether %s, sqlite3 %s\n", i, id ? id : "(none)",
                        (const char *)sqlite3_column_text(stmt, 0));
                return 1;
            }
            i++;
        }
        sqlite3_reset(stmt);
        if (i != count) {
            fprintf(stderr, "big_cache: tether gave %zu rows, sqlite3 %zu\n", count, i);
            return 1;
        }
        matches = count;
        tether_results_free(res);
        if (run == 0) prepared_warm = prepared_statements();
    }
    long long prepared_end = prepared_statements();
    qsort(tt, runs, sizeof *tt, compare_doubles);
    qsort(ts, runs, sizeof *ts, compare_doubles);
    printf("{\"tether_s\": %.6f, \"sqlite_s\": %.6f, \"matches\": %zu, \"rows\": %lld, \"runs\": %d, "
           "\"prepared_after_warmup\": %lld, \"prepared_after_timed\": %lld, \"checksum\": %ld}\n",
           tt[runs / 2], ts[runs / 2], matches, total, runs, prepared_warm, prepared_end, checksum);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    tether_context_close(ctx);
    free(tt);
    free(ts);
    return 0;
}

/* ------------------------------------------------------------ iterate */

static int cmd_iterate(const char *side, size_t batch) {
    size_t rows = 0;
    long checksum = 0, base, peak, fetch_peak = -1, fetch_rss = -1;
    double t0, seconds;
    long long live = -1, prepared_open = -1, prepared_end = -1;
    if (!strcmp(side, "sqlite")) {
        tether_context *ctx = open_context();  /* only for the model's names */
        struct names n = model_names(ctx);
        tether_context_close(ctx);
        char sql[256];
        snprintf(sql, sizeof sql, "SELECT %s FROM \"%s\" ORDER BY %s", n.name, n.table, n.id);
        sqlite3 *db = open_db(SQLITE_OPEN_READONLY);
        sqlite3_stmt *stmt = prepare(db, sql);
        base = peak_kb();
        t0 = now_s();
        while (sqlite3_step(stmt) == SQLITE_ROW) {
            sqlite3_column_text(stmt, 0);
            checksum += sqlite3_column_bytes(stmt, 0);
            rows++;
        }
        seconds = now_s() - t0;
        peak = peak_kb();
        sqlite3_finalize(stmt);
        sqlite3_close(db);
    } else {
        int values = !strcmp(side, "values");
        if (!values && strcmp(side, "tether")) die(side, "SIDE is tether, values or sqlite");
        tether_context *ctx = open_context();
        tether_fetch_options fo;
        tether_fetch_options_init(&fo, TETHER_FETCH_OPTIONS_VERSION);
        fo.entity = collection;
        fo.policy = TETHER_POLICY_CACHE_ONLY;
        fo.batch_size = batch;
        if (values) {
            fo.result_type = TETHER_RESULT_VALUES;
            fo.properties = "Name";
        }
        prepared_open = prepared_statements();  /* no warm-up: each run is a new process */
        base = peak_kb();
        t0 = now_s();
        tether_results *res = fetch_wait(ctx, &fo);
        /* Splits the growth: the answer as handed over, then the reading. */
        fetch_peak = peak_kb();
        fetch_rss = status_kb("VmRSS:");
        tether_results_count(res, &rows);
        for (size_t i = 0; i < rows; i++) {
            tether_value v;
            if (values) {
                if (tether_results_value_at(res, i, "Name", &v) != TETHER_OK) die("value_at", tether_errmsg());
            } else {
                tether_object *obj;
                if (tether_results_object_at(res, i, &obj) != TETHER_OK || tether_object_peek(obj, "Name", &v) != TETHER_OK)
                    die("object_at/peek", tether_errmsg());
            }
            checksum += (long)v.length;
            tether_value_free(&v);
        }
        seconds = now_s() - t0;
        peak = peak_kb();
        prepared_end = prepared_statements();
        int64_t n = 0;
        tether_debug_count(TETHER_DEBUG_OBJECTS, &n);
        live = n;
        tether_results_free(res);
        tether_context_close(ctx);
    }
    printf("{\"side\": \"%s\", \"batch\": %zu, \"rows\": %zu, \"seconds\": %.3f, \"baseline_kb\": %ld, "
           "\"peak_kb\": %ld, \"growth_kb\": %ld, \"fetch_growth_kb\": %ld, \"fetch_rss_growth_kb\": %ld, "
           "\"objects_in_memory\": %lld, \"prepared_after_warmup\": %lld, \"prepared_after_timed\": %lld, "
           "\"checksum\": %ld}\n",
           side, batch, rows, seconds, base, peak, peak - base, fetch_peak < 0 ? -1 : fetch_peak - base,
           fetch_rss < 0 ? -1 : fetch_rss - base, live, prepared_open, prepared_end, checksum);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr,
                "usage: %s URL BUCKET COLLECTION STORE USER PASSWORD make N | predicate RUNS | iterate SIDE BATCH\n",
                argv[0]);
        return 2;
    }
    url = argv[1], bucket = argv[2], collection = argv[3], store = argv[4], user = argv[5], password = argv[6];
    const char *cmd = argv[7];
    if (!strcmp(cmd, "make")) return cmd_make(atoll(argv[8]));
    if (!strcmp(cmd, "predicate")) return cmd_predicate(atoi(argv[8]) > 0 ? atoi(argv[8]) : 1);
    if (!strcmp(cmd, "iterate") && argc == 10) return cmd_iterate(argv[8], (size_t)strtoull(argv[9], NULL, 10));
    fprintf(stderr, "big_cache: unknown command %s\n", cmd);
    return 2;
}
