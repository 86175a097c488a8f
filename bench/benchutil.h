/*
 * benchutil.h — what the C bench programs (first_peek, peek, big_cache)
 * share: record ids (as common.py makes them), a clock, a sort order, dying with a message, running a fetch to its
 * FINAL callback, the ids of an answer or of a whole collection synced
 * from the server, attribute codes, and the library's
 * running count of prepared SQL statements.
 *
 * Define BENCH_NAME (the program's name, for messages) before including it.
 * The functions are static inline, so a program that leaves one unused still
 * builds with -Wall -Wextra -Werror.
 */
#ifndef BENCHUTIL_H
#define BENCHUTIL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tether.h"

#ifndef BENCH_NAME
#error "define BENCH_NAME before including benchutil.h"
#endif

static inline double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* qsort order of doubles, ascending. */
/* Record i's id, as common.record_id makes it: "r%05lld", or with
 * BENCH_IDS=uuid a UUID-shaped id (splitmix64 of 2i and 2i+1, version 4). */
static inline uint64_t bench_splitmix64(uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void bench_record_id(long long i, char out[40]) {
    const char *shape = getenv("BENCH_IDS");
    if (!shape || !*shape || !strcmp(shape, "short")) {
        snprintf(out, 40, "r%05lld", i);
        return;
    }
    uint64_t hi = (bench_splitmix64(2 * (uint64_t)i) & ~(uint64_t)0xF000) | 0x4000;
    uint64_t lo = (bench_splitmix64(2 * (uint64_t)i + 1) & 0x3FFFFFFFFFFFFFFFull) | 0x8000000000000000ull;
    snprintf(out, 40, "%08llx-%04llx-%04llx-%04llx-%012llx", (unsigned long long)(hi >> 32),
             (unsigned long long)((hi >> 16) & 0xFFFF), (unsigned long long)(hi & 0xFFFF),
             (unsigned long long)(lo >> 48), (unsigned long long)(lo & 0xFFFFFFFFFFFFull));
}

static inline int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Prints "BENCH_NAME: what: why" and exits 1. */
static inline void die(const char *what, const char *why) {
    fprintf(stderr, "%s: %s: %s\n", BENCH_NAME, what, why);
    exit(1);
}

/* die() with the library's message for the failed call. */
static inline void die_tether(const char *what) { die(what, tether_errmsg()); }

struct fetch_waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done, status;
    tether_results *results;
};

static inline void fetch_waiter_callback(tether_task *task, tether_phase phase, int status, const char *message,
                                         tether_results *results, void *userdata) {
    struct fetch_waiter *w = userdata;
    (void)task;
    if (phase != TETHER_PHASE_FINAL) {
        tether_results_free(results);
        return;
    }
    if (status != TETHER_OK) fprintf(stderr, "%s: fetch: %s\n", BENCH_NAME, message ? message : "?");
    pthread_mutex_lock(&w->lock);
    w->status = status;
    w->results = results;  /* kept: the caller reads the rows, then releases */
    w->done = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Runs one fetch to its FINAL callback and returns its results, which the
 * caller releases; dies if the fetch fails. */
static inline tether_results *fetch_wait(tether_context *ctx, const tether_fetch_options *opts) {
    struct fetch_waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL};
    if (tether_fetch_start(ctx, opts, fetch_waiter_callback, &w, NULL) != TETHER_OK) die_tether("fetch_start");
    pthread_mutex_lock(&w.lock);
    while (!w.done) pthread_cond_wait(&w.cond, &w.lock);
    pthread_mutex_unlock(&w.lock);
    if (w.status != TETHER_OK) die("fetch", tether_errstr(w.status));
    return w.results;
}

/* The ids of every row of `results`, in order: an array of *count strings,
 * each the caller's (free_ids). */
static inline char **result_ids(tether_results *results, size_t *count) {
    *count = 0;
    tether_results_count(results, count);
    char **ids = calloc(*count ? *count : 1, sizeof *ids);
    for (size_t i = 0; i < *count; i++) {
        const char *id;
        if (tether_results_id_at(results, i, &id) != TETHER_OK) die_tether("results_id_at");
        ids[i] = strdup(id);
    }
    return ids;
}

/* A server-only fetch of every record of `collection` (it fills the store);
 * the ids of the records, as result_ids. */
static inline char **sync_ids(tether_context *ctx, const char *collection, size_t *count) {
    tether_fetch_options fetch;
    tether_fetch_options_init(&fetch, TETHER_FETCH_OPTIONS_VERSION);
    fetch.entity = collection;
    fetch.policy = TETHER_POLICY_SERVER_ONLY;
    tether_results *results = fetch_wait(ctx, &fetch);
    char **ids = result_ids(results, count);
    tether_results_free(results);
    return ids;
}

/* Waits (up to 10 s, else dies) until no object is in memory. The library
 * drops a fetch's own references to its objects a little after the FINAL
 * callback, so right after a fetch they may still be there; a first read
 * must find its row in the store (object_cache_size 0), not in memory. */
static inline void wait_no_objects(void) {
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 10000; i++) {
        int64_t n = -1;
        if (tether_debug_count(TETHER_DEBUG_OBJECTS, &n) != TETHER_OK) die_tether("debug_count");
        if (n == 0) return;
        nanosleep(&ms, NULL);
    }
    die("objects", "still in memory 10 s after the fetch");
}

/* A /proc/self/status size in KiB: "VmHWM:" (peak RSS) or "VmRSS:". Not
 * getrusage's ru_maxrss: across fork and exec it keeps the parent's peak. */
static inline long status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, strlen(field)) == 0) kb = strtol(line + strlen(field), NULL, 10);
    if (f) fclose(f);
    return kb;
}

static inline void free_ids(char **ids, size_t count) {
    for (size_t i = 0; i < count; i++) free(ids[i]);
    free(ids);
}

/* The model code of attribute `name` (its store column is "a<code>"). */
static inline int attribute_code(tether_entity *entity, const char *name) {
    size_t index;
    int code;
    if (tether_entity_attribute_index(entity, name, &index) != TETHER_OK ||
        tether_entity_attribute_at(entity, index, NULL, &code, NULL, NULL) != TETHER_OK)
        die_tether(name);
    return code;
}

/* The library's running total of SQL statements prepared in this process,
 * every store counted (TETHER_DEBUG_PREPARED_STATEMENTS). */
static inline long long prepared_statements(void) {
    int64_t n = -1;
    if (tether_debug_count(TETHER_DEBUG_PREPARED_STATEMENTS, &n) != TETHER_OK) die_tether("debug_count");
    return (long long)n;
}

#endif
