/*
 * save.c — saving COUNT changes: each an edit of a cached record (Count + 1,
 * Status set), made durable in the store as it is made, then one save that
 * sends them all, conditional on each record's version (Kinto: PATCH with
 * If-Match, in POST /v1/batch requests of the server's batch_max_requests).
 *
 *   save URL BUCKET COLLECTION STORE USER PASSWORD FIRST COUNT
 *
 * Fills STORE with a server-only fetch of the collection (untimed), edits
 * records FIRST .. FIRST+COUNT-1 (ids as common.record_id makes them), then saves. Prints one JSON
 * line: nanoseconds per edit, the save's milliseconds (start to its one
 * final callback), the changes saved, the RSS after the sync and after the
 * save, and the process's peak RSS (the sync's, mostly).
 */
#define _POSIX_C_SOURCE 200809L
#define BENCH_NAME "save"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"

static atomic_int save_done;
static atomic_int save_status;
static atomic_size_t saved_count;

static void on_save(tether_task *task, int status, const char *message, tether_save_report *report, void *userdata) {
    (void)task; (void)userdata;
    size_t saved = 0;
    tether_save_report_counts(report, &saved, NULL);
    if (status != TETHER_OK) fprintf(stderr, "save: %s\n", message);
    atomic_store(&saved_count, saved);
    atomic_store(&save_status, status);
    atomic_store(&save_done, 1);
}

int main(int argc, char **argv) {
    if (argc != 9) die("usage", "save URL BUCKET COLLECTION STORE USER PASSWORD FIRST COUNT");
    const char *collection = argv[3];
    long first = atol(argv[7]), count = atol(argv[8]);
    tether_context_options opts;
    tether_kinto_options kinto;
    tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
    tether_kinto_options_init(&kinto, TETHER_KINTO_OPTIONS_VERSION);
    kinto.server_url = argv[1];
    kinto.bucket = argv[2];
    opts.store_path = argv[4];
    kinto.username = argv[5];
    kinto.password = argv[6];
    opts.timeout_ms = 600000;
    tether_context *ctx;
    if (tether_context_open_kinto(&opts, &kinto, &ctx) != TETHER_OK) die_tether("open");
    size_t synced = 0;
    free_ids(sync_ids(ctx, collection, &synced), synced);
    long synced_kb = status_kb("VmRSS:");

    double start = now_ns();
    for (long i = first; i < first + count; i++) {
        char id[40];
        bench_record_id(i, id);
        tether_object *obj;
        if (tether_context_object(ctx, collection, id, &obj) != TETHER_OK) die_tether("object");
        tether_value value;
        if (tether_object_peek(obj, "Count", &value) != TETHER_OK) die_tether("peek Count");
        value.integer += 1;
        if (tether_object_set(obj, "Count", &value) != TETHER_OK) die_tether("set Count");
        tether_value status = {.type = TETHER_TYPE_TEXT, .text = (char *)"review", .length = 6};
        if (tether_object_set(obj, "Status", &status) != TETHER_OK) die_tether("set Status");
        tether_object_free(obj);
    }
    double edited = now_ns();
    if (tether_save_start(ctx, NULL, on_save, NULL, NULL) != TETHER_OK) die_tether("save_start");
    struct timespec ms = {0, 1000000};
    while (!atomic_load(&save_done)) nanosleep(&ms, NULL);
    double saved = now_ns();
    if (atomic_load(&save_status) != TETHER_OK) die("save", tether_errstr(atomic_load(&save_status)));
    printf("{\"edit_ns\": %.0f, \"save_ms\": %.1f, \"saved\": %zu, \"changes\": %ld, \"synced_rss_kb\": %ld, "
           "\"saved_rss_kb\": %ld, \"peak_rss_kb\": %ld}\n", (edited - start) / (double)count, (saved - edited) / 1e6,
           atomic_load(&saved_count), count, synced_kb, status_kb("VmRSS:"), status_kb("VmHWM:"));
    if (tether_context_close(ctx) != TETHER_OK) die_tether("close");
    return 0;
}
