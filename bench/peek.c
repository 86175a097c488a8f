/*
 * peek.c — where the time of a peek goes (issue 9's read-path goals).
 *
 *   peek [URL [USER PASSWORD]]      (URL defaults to $TETHER_TEST_URL)
 *
 * Opens a context on bucket `bench` (store in /tmp, object cache 0), fetches
 * `items` server-only once so the store holds every record, then measures:
 *   (a) loaded:  tether_object_peek of one key on an object handle held
 *                across the loop (the row is in memory), ns per call; beside
 *                it the floor of a call on the same handle (tether_object_id)
 *                and peek by code (no key string);
 *   (b) first:   per record, tether_context_object + peek + release: with
 *                object cache 0 each finds its row in SQLite, us per record;
 *                beside it object + release alone (no row load);
 *   (c) threads: (a) on 2 threads at once, each on its own object.
 * Plain "name value unit" lines on stdout. Before the parts, an untimed
 * warm-up makes every kind of call they time once (a first read of two
 * records, peek by key and by code); the library's prepared-statement total
 * is printed after it (prepared_after_warmup) and after the parts
 * (prepared_after_timed): equal when the parts prepared nothing.
 *
 * Environment: PEEK_CALLS (default 10000000) calls per loop in (a)/(c);
 * PEEK_PASSES (default 5) passes over the records in (b); PEEK_ONLY =
 * loaded | first | threads to run one part (for profiling: then (a) times
 * only peek of PEEK_KEY, default Name, and (b) only object + peek + release).
 */
#define _POSIX_C_SOURCE 200809L
#define BENCH_NAME "peek"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchutil.h"

#define COLLECTION "items"

static char **ids;
static size_t id_count;
static tether_context *ctx;
static long calls = 10000000;

static tether_object *object_at(size_t i) {
    tether_object *obj;
    if (tether_context_object(ctx, COLLECTION, ids[i], &obj) != TETHER_OK) die_tether("object");
    return obj;
}

/* ns per call of tether_object_peek(obj, key) over `calls` calls. */
static double time_peek(tether_object *obj, const char *key, long *checksum) {
    tether_value value;
    double start = now_ns();
    for (long i = 0; i < calls; i++) {
        if (tether_object_peek(obj, key, &value) != TETHER_OK) die_tether("peek");
        *checksum += (long)value.length + (long)value.integer;
        tether_value_free(&value);
    }
    return (now_ns() - start) / calls;
}

static double time_peek_code(tether_object *obj, int code, long *checksum) {
    tether_value value;
    double start = now_ns();
    for (long i = 0; i < calls; i++) {
        if (tether_object_peek_code(obj, code, &value) != TETHER_OK) die_tether("peek_code");
        *checksum += (long)value.length + (long)value.integer;
        tether_value_free(&value);
    }
    return (now_ns() - start) / calls;
}

static double time_id(tether_object *obj, long *checksum) {
    const char *id;
    double start = now_ns();
    for (long i = 0; i < calls; i++) {
        if (tether_object_id(obj, &id) != TETHER_OK) die_tether("id");
        *checksum += id[0];
    }
    return (now_ns() - start) / calls;
}

struct worker {
    pthread_t thread;
    size_t record;
    double ns;
    long checksum;
};

static pthread_barrier_t barrier;

static void *peek_worker(void *argument) {
    struct worker *w = argument;
    tether_object *obj = object_at(w->record);
    tether_value value;
    if (tether_object_peek(obj, "Name", &value) != TETHER_OK) die_tether("peek");
    tether_value_free(&value);
    pthread_barrier_wait(&barrier);
    w->ns = time_peek(obj, "Name", &w->checksum);
    tether_object_free(obj);
    return NULL;
}

static int wanted(const char *only, const char *part) { return only == NULL || strcmp(only, part) == 0; }

int main(int argc, char **argv) {
    const char *url = argc > 1 ? argv[1] : getenv("TETHER_TEST_URL");
    const char *user = argc > 3 ? argv[2] : "bench", *password = argc > 3 ? argv[3] : "bench";
    if (url == NULL) {
        fprintf(stderr, "usage: %s [URL [USER PASSWORD]] (or set TETHER_TEST_URL)\n", argv[0]);
        return 2;
    }
    const char *only = getenv("PEEK_ONLY");
    if (getenv("PEEK_CALLS")) calls = atol(getenv("PEEK_CALLS"));
    int passes = getenv("PEEK_PASSES") ? atoi(getenv("PEEK_PASSES")) : 5;
    if (calls < 1 || passes < 1) return 2;

    char store[256];
    snprintf(store, sizeof store, "/tmp/tether-peek-%ld.db", (long)getpid());
    tether_context_options opts;
    tether_kinto_options kinto;
    tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
    tether_kinto_options_init(&kinto, TETHER_KINTO_OPTIONS_VERSION);
    kinto.server_url = url;
    kinto.bucket = "bench";
    kinto.username = user;
    kinto.password = password;
    opts.store_path = store;
    opts.object_cache_size = 0;
    if (tether_context_open_kinto(&opts, &kinto, &ctx) != TETHER_OK) die_tether("open");
    ids = sync_ids(ctx, COLLECTION, &id_count);
    wait_no_objects();
    if (id_count < 2) die("fetch", "fewer than 2 records");
    printf("records %zu\n", id_count);

    tether_entity *entity;
    if (tether_context_entity(ctx, COLLECTION, &entity) != TETHER_OK) die_tether("model");
    int name_code = attribute_code(entity, "Name"), count_code = attribute_code(entity, "Count");

    long checksum = 0;
    for (size_t i = 0; i < 2; i++) {  /* warm-up, untimed: first reads, peek by key and by code */
        tether_object *obj = object_at(i);
        tether_value value;
        const char *keys[] = {"Name", "Count"};
        int codes[] = {name_code, count_code};
        for (int k = 0; k < 2; k++) {
            if (tether_object_peek(obj, keys[k], &value) != TETHER_OK) die_tether("peek");
            tether_value_free(&value);
            if (tether_object_peek_code(obj, codes[k], &value) != TETHER_OK) die_tether("peek_code");
            tether_value_free(&value);
        }
        tether_object_free(obj);
    }
    printf("prepared_after_warmup %lld\n", prepared_statements());

    if (wanted(only, "loaded")) {
        tether_object *obj = object_at(0);
        tether_value value;
        if (tether_object_peek(obj, "Name", &value) != TETHER_OK) die_tether("peek");  /* loads the row */
        tether_value_free(&value);
        if (only != NULL) {  /* profiling: one loop, on PEEK_KEY (default Name) */
            const char *key = getenv("PEEK_KEY") ? getenv("PEEK_KEY") : "Name";
            printf("a_loaded_peek_%s_ns %.1f\n", key, time_peek(obj, key, &checksum));
        } else {
            printf("a_loaded_floor_object_id_ns %.1f\n", time_id(obj, &checksum));
            printf("a_loaded_peek_Name_ns %.1f\n", time_peek(obj, "Name", &checksum));
            printf("a_loaded_peek_Count_ns %.1f\n", time_peek(obj, "Count", &checksum));
            printf("a_loaded_peek_code_Name_ns %.1f\n", time_peek_code(obj, name_code, &checksum));
            printf("a_loaded_peek_code_Count_ns %.1f\n", time_peek_code(obj, count_code, &checksum));
        }
        tether_object_free(obj);
    }

    if (wanted(only, "first")) {
        double best_peek = 1e18, best_bare = 1e18;
        for (int pass = 0; pass < passes; pass++) {
            double start = now_ns();
            for (size_t i = 0; i < id_count; i++) {
                tether_object *obj = object_at(i);
                tether_value value;
                if (tether_object_peek(obj, "Name", &value) != TETHER_OK) die_tether("first peek");
                checksum += (long)value.length;
                tether_value_free(&value);
                tether_object_free(obj);
            }
            double ns = (now_ns() - start) / id_count;
            if (ns < best_peek) best_peek = ns;
            if (only != NULL) continue;  /* profiling: the peek loop only */
            start = now_ns();
            for (size_t i = 0; i < id_count; i++) tether_object_free(object_at(i));
            ns = (now_ns() - start) / id_count;
            if (ns < best_bare) best_bare = ns;
        }
        printf("b_first_object_peek_release_us %.3f\n", best_peek / 1000);
        if (only == NULL) printf("b_object_release_only_us %.3f\n", best_bare / 1000);
    }

    if (wanted(only, "threads")) {
        struct worker workers[2] = {{.record = 0}, {.record = 1}};
        pthread_barrier_init(&barrier, NULL, 2);
        for (int t = 0; t < 2; t++) pthread_create(&workers[t].thread, NULL, peek_worker, &workers[t]);
        for (int t = 0; t < 2; t++) pthread_join(workers[t].thread, NULL);
        pthread_barrier_destroy(&barrier);
        printf("c_2threads_peek_Name_ns %.1f %.1f\n", workers[0].ns, workers[1].ns);
        checksum += workers[0].checksum + workers[1].checksum;
    }

    printf("prepared_after_timed %lld\n", prepared_statements());
    fprintf(stderr, "checksum %ld\n", checksum);
    tether_context_close(ctx);
    free_ids(ids, id_count);
    for (const char *suffix = ""; suffix != NULL; suffix = strcmp(suffix, "") == 0 ? "-wal" : strcmp(suffix, "-wal") == 0 ? "-shm" : NULL) {
        char path[300];
        snprintf(path, sizeof path, "%s%s", store, suffix);
        unlink(path);
    }
    return 0;
}
