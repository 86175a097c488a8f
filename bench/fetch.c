/*
 * fetch.c — the library's own part of a full listing (rows 1d and 5c): a
 * server-only fetch of every record of COLLECTION into a new store, from C.
 *
 *   fetch URL BUCKET COLLECTION STORE [USER PASSWORD]
 *
 * Opens a context on STORE (which must not exist yet; untimed), then times
 * one server-only fetch from tether_fetch_start to its FINAL callback, with
 * the results freed. Prints one JSON line: the seconds, the record count and
 * the peak RSS (VmHWM) growth over a baseline taken once the context is
 * open, in KiB. Meant to run as its own process, once per measurement, and
 * under perf (`perf record -g build/fetch ...`) to profile the fetch path.
 */
#define _POSIX_C_SOURCE 200809L
#define BENCH_NAME "fetch"
#include <stdio.h>

#include "benchutil.h"

int main(int argc, char **argv) {
    if (argc != 5 && argc != 7) {
        fprintf(stderr, "usage: %s URL BUCKET COLLECTION STORE [USER PASSWORD]\n", argv[0]);
        return 2;
    }
    tether_context_options opts;
    tether_kinto_options kinto;
    tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
    tether_kinto_options_init(&kinto, TETHER_KINTO_OPTIONS_VERSION);
    kinto.server_url = argv[1];
    kinto.bucket = argv[2];
    opts.store_path = argv[4];
    if (argc == 7) {
        kinto.username = argv[5];
        kinto.password = argv[6];
    }
    tether_context *ctx;
    if (tether_context_open_kinto(&opts, &kinto, &ctx) != TETHER_OK) die_tether("open");
    long base_kb = status_kb("VmHWM:");
    tether_fetch_options fetch;
    tether_fetch_options_init(&fetch, TETHER_FETCH_OPTIONS_VERSION);
    fetch.entity = argv[3];
    fetch.policy = TETHER_POLICY_SERVER_ONLY;
    double start = now_ns();
    tether_results *results = fetch_wait(ctx, &fetch);
    size_t count = 0;
    tether_results_count(results, &count);
    tether_results_free(results);
    double seconds = (now_ns() - start) / 1e9;
    long peak_kb = status_kb("VmHWM:");
    printf("{\"seconds\": %.6f, \"count\": %zu, \"peak_growth_kb\": %ld}\n", seconds, count, peak_kb - base_kb);
    tether_context_close(ctx);
    return 0;
}
