/*
 * testutil.h — a tiny test harness for Tether's C test programs, plus
 * libcurl helpers that set up buckets, collections and records on the Kinto
 * server named by the environment variable TETHER_TEST_URL.
 *
 * Every program calls tu_init() first and returns tu_finish() from main();
 * tu_finish prints the final line "N passed, N failed" and returns the exit
 * status (non-zero if any check failed). A watchdog (alarm) ends a program
 * that hangs, as a failure, so a broken library fails instead of blocking.
 */
#ifndef TETHER_TESTUTIL_H
#define TETHER_TESTUTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tether.h"

/* Bound for every wait on a callback. */
#define TU_WAIT_MS 10000

/* ------------------------------------------------------------ harness */

void tu_init(const char *program);
int tu_finish(void);
/* Records one check; prints a FAIL line (with tether_errmsg if relevant). */
int tu_check(int ok, const char *file, int line, const char *expr, const char *detail);
void tu_section(const char *name);

#define CHECK(cond) tu_check(!!(cond), __FILE__, __LINE__, #cond, NULL)

#define CHECK_INT(a, b)                                                              \
    do {                                                                             \
        long long tu_a_ = (long long)(a), tu_b_ = (long long)(b);                    \
        char tu_d_[128];                                                             \
        snprintf(tu_d_, sizeof tu_d_, "got %lld, expected %lld", tu_a_, tu_b_);      \
        tu_check(tu_a_ == tu_b_, __FILE__, __LINE__, #a " == " #b, tu_d_);           \
    } while (0)

#define CHECK_STR(a, b) tu_check_str((a), (b), __FILE__, __LINE__, #a " == " #b)
int tu_check_str(const char *a, const char *b, const char *file, int line, const char *expr);

/* Runs `expr` (a tether call), checks its status; on a failure status also
 * checks that tether_errmsg() is non-empty. Evaluates to the status. */
#define CHECK_STATUS(expr, expected)                                                 \
    tu_check_status((expr), (expected), __FILE__, __LINE__, #expr)
#define CHECK_OK(expr) CHECK_STATUS(expr, TETHER_OK)
/* Compares a recorded status (from a callback): no tether_errmsg check. */
#define CHECK_CODE(got, expected) tu_check_code((got), (expected), __FILE__, __LINE__, #got)
int tu_check_code(int got, int expected, const char *file, int line, const char *expr);
int tu_check_status(int got, int expected, const char *file, int line, const char *expr);
/* Runs `expr`, checks that it failed (any TETHER_E_*) with a message. */
#define CHECK_FAILS(expr) tu_check_fails((expr), __FILE__, __LINE__, #expr)
int tu_check_fails(int got, const char *file, int line, const char *expr);

/* ------------------------------------------------------------ time */

int64_t tu_now_ms(void);
void tu_sleep_ms(int ms);
/* An absolute CLOCK_REALTIME deadline `ms` from now, for pthread_cond_timedwait. */
struct timespec tu_deadline(int ms);

/* ------------------------------------------------------------ server */

/* TETHER_TEST_URL, e.g. "http://127.0.0.1:8888/v1"; exits with a clear
 * message (and "0 passed, 1 failed") if it is not set. */
const char *tu_url(void);
/* A fresh name unique to this process: PREFIX-PID-TIME-N. */
void tu_unique(char *buf, size_t size, const char *prefix);
/* A fresh store path in $TMPDIR (or /tmp); removed, with -wal/-shm, by
 * tu_finish. */
void tu_store_path(char *buf, size_t size, const char *name);
int tu_file_exists(const char *path);

/* An HTTP request to tu_url() + path as test:test. `body` may be NULL. The
 * response body goes to *out (may be NULL; free it). Returns the HTTP status,
 * or -1 if the request failed. */
long tu_http(const char *method, const char *path, const char *body, char **out);
/* Same with explicit credentials (NULL user: anonymous). */
long tu_http_as(const char *user, const char *password, const char *method, const char *path,
                const char *body, char **out);

/* Each returns 1 on a 2xx answer, else prints the answer and returns 0. */
int tu_put_bucket(const char *bucket);
/* `schema` is the JSON schema object, e.g. {"type":"object","properties":{...}}. */
int tu_put_collection(const char *bucket, const char *collection, const char *schema);
/* `data` is the record's JSON object without "id". */
int tu_put_record(const char *bucket, const char *collection, const char *id, const char *data);
int tu_patch_record(const char *bucket, const char *collection, const char *id, const char *data);
int tu_delete_record(const char *bucket, const char *collection, const char *id);
/* PUTs many records through POST /batch (25 a request). `datas[i]` for `ids[i]`. */
int tu_put_records(const char *bucket, const char *collection, const char *const *ids,
                   const char *const *datas, size_t count);
/* PUTs `count` numbered records: record i has the id id_format(i) and the
 * data data_format(i, i) (both printf formats taking ints). 1 on success. */
int tu_put_numbered(const char *bucket, const char *collection, const char *id_format,
                    const char *data_format, int count);
/* The bucket, and a collection of `count` records: record i has the id
 * id_format(i), an integer "n" (i) and a string "label" ("<label> <i>";
 * label needs no JSON escaping). For a test that needs more columns:
 * `more_properties` (NULL: none) is appended to the schema's properties,
 * e.g. "\"score\": {\"type\": \"number\"}", and `more_fields` (NULL: none),
 * a printf format taking i, to every record, e.g. "\"score\": %d.5".
 * 1 on success. */
int tu_seed_numbered(const char *bucket, const char *collection, const char *id_format,
                     const char *label, const char *more_properties, const char *more_fields,
                     int count);
/* One open, server fetch of `collection` (expecting `count` records) and
 * close, before any live count or descriptor is taken as a baseline: so
 * one-time process setup (libcurl, SQLite, the library's globals) is not
 * taken for a leak. It also caches the collection in `store`. */
void tu_warm_up(const char *bucket, const char *store, const char *collection, int count);

/* ------------------------------------------------------------ counts */

/* What must come back after a context closes: the library's debug counters
 * (by tether_debug_counter value, 1..7), the process's open descriptors and threads. */
#define TU_NDEBUG_COUNTERS 8
extern const char *const tu_debug_counter_names[TU_NDEBUG_COUNTERS];
typedef struct tu_counts {
    int64_t counters[TU_NDEBUG_COUNTERS];
    int fds;     /* entries of /proc/self/fd */
    int threads; /* entries of /proc/self/task */
} tu_counts;
void tu_snapshot(tu_counts *c);
int tu_same_counts(const tu_counts *a, const tu_counts *b);
/* Entries of a directory (without . and ..); -1 if it cannot be read. */
int tu_count_entries(const char *path);
/* Resident memory in bytes (/proc/self/statm), -1 if unknown. */
long tu_resident_bytes(void);
/* TU_SANITIZED: 1 in a build with AddressSanitizer or ThreadSanitizer;
 * TU_THREAD_SANITIZED: with ThreadSanitizer. gcc says so with
 * __SANITIZE_*__, clang (Swift's too) only through __has_feature. */
#if defined(__SANITIZE_THREAD__)
#define TU_THREAD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TU_THREAD_SANITIZED 1
#endif
#endif
#ifndef TU_THREAD_SANITIZED
#define TU_THREAD_SANITIZED 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TU_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_SANITIZED 1
#endif
#endif
#ifndef TU_SANITIZED
#define TU_SANITIZED TU_THREAD_SANITIZED
#endif
/* AddressSanitizer keeps freed memory in quarantine, ThreadSanitizer maps
 * shadow memory: resident memory then says nothing about what the library
 * keeps, so tests do not compare it. */
#define TU_RSS_MEANINGFUL (!TU_SANITIZED)

/* ------------------------------------------------------------ context */

/* Opens a context on tu_url()/bucket as test:test. Returns NULL (after a
 * failed check) on failure. */
tether_context *tu_open(const char *bucket, const char *store, tether_delivery delivery);
/* Same with another server URL and a request timeout. */
tether_context *tu_open_url(const char *url, const char *bucket, const char *store,
                            tether_delivery delivery, int64_t timeout_ms);

/* Fills `o` and `k` as tu_open_url opens, for a test that sets more fields first. */
void tu_options(tether_context_options *o, tether_kinto_options *k, const char *url, const char *bucket,
                const char *store, tether_delivery delivery, int64_t timeout_ms);

/* tether_debug_count(what), or -1 (after a failed check). */
int64_t tu_debug_count(tether_debug_counter what);
/* Waits (bounded) until tu_debug_count(what) == expected, for counts that drop just
 * after a callback returns; returns the last count. */
int64_t tu_debug_count_settle(tether_debug_counter what, int64_t expected, int timeout_ms);

/* Peeks a text value into buf ("" on failure); returns the status. */
int tu_peek_text(tether_object *obj, const char *key, char *buf, size_t size);
int tu_peek_int(tether_object *obj, const char *key, int64_t *out);
/* The "n" of each object, comma-separated, into buf ("?" for one without);
 * returns buf. */
const char *tu_ns(tether_object **objs, size_t count, char *buf, size_t size);
/* Runs `sql` with psql on `conninfo` (unaligned, tuples only, warnings
 * off; the SQL goes as a file, so it may hold any quotes). Its output in
 * *out (free() it), or NULL for none wanted. 1 if psql succeeded. */
int tu_psql(const char *conninfo, const char *sql, char **out);

/* Record id of an object, or "(?)". */
const char *tu_id(tether_object *obj);

/* ------------------------------------------------------------ fetch recorder */

typedef struct tu_fetch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t main_thread;
    int calls;           /* all callbacks */
    int cached;          /* CACHED callbacks */
    int finals;          /* FINAL callbacks */
    int order_errors;    /* a callback after FINAL, a bad phase, a CACHED error */
    int off_main;        /* callbacks not on main_thread */
    int task_changed;    /* callbacks with a different task pointer */
    tether_task *task;   /* first task seen */
    int cancel_returned; /* set by tu_fetch_cancel after tether_task_cancel returns */
    int after_cancel_bad;/* callbacks after cancel returned other than FINAL/CANCELLED */
    int results_errors;  /* a NULL results, or one whose count and objects disagree */
    int final_status;
    char final_message[512];
    int cached_status;
    size_t cached_count, final_count;
    /* The results handles of the last CACHED and FINAL callbacks, owned by
     * the recorder: held until tu_fetch_free (or tu_fetch_destroy), so
     * their objects can be read and compared after the callback. */
    tether_results *cached_results;
    tether_results *final_results;
    tether_object **cached_objs; /* borrowed from cached_results (the array is owned) */
    tether_object **final_objs;  /* borrowed from final_results (the array is owned) */
    /* Optional actions inside the callback (on the first callback). */
    tether_context *close_in_cb;   /* call tether_context_close(close_in_cb) */
    int close_in_cb_status;
    char close_in_cb_errmsg[256];  /* tether_errmsg() right after it */
    tether_context *poll_in_cb;    /* call tether_context_poll(poll_in_cb, 0, NULL) */
    int poll_in_cb_status;
    char poll_in_cb_errmsg[256];
    int cancel_in_cb;              /* call tether_task_cancel on the CACHED callback */
    int cancel_in_cb_status;
    int actions_done;
} tu_fetch;

void tu_fetch_init(tu_fetch *f);
/* Frees the results handles the recorder holds (their objects die with
 * them unless held elsewhere). Returns TETHER_OK, or the first failing
 * status (TETHER_E_HANDLE once the context has closed). */
int tu_fetch_free(tu_fetch *f);
/* tu_fetch_free (whatever its status), then frees the recorder. */
void tu_fetch_destroy(tu_fetch *f);
void tu_fetch_cb(tether_task *task, tether_phase phase, int status, const char *message,
                 tether_results *results, void *userdata);
/* Starts a fetch of `entity` with the recorder as callback. Returns the status. */
int tu_fetch_start(tether_context *ctx, tu_fetch *f, const char *entity, const char *sort,
                   int64_t limit, tether_cache_policy policy, tether_task **out);
/* Fetches every record of `entity` from the server (SERVER_ONLY), waits for
 * the final callback and checks it succeeded. */
void tu_fetch_all(tether_context *ctx, const char *entity);
/* Cancels and marks the recorder (so later callbacks are checked). */
int tu_fetch_cancel(tu_fetch *f, tether_task *task);
/* THREAD mode: waits (bounded) for the FINAL callback. 1 if it came. */
int tu_fetch_wait(tu_fetch *f, int timeout_ms);
/* POLL mode: polls ctx until the FINAL callback ran (bounded). 1 if it came. */
int tu_fetch_wait_poll(tu_fetch *f, tether_context *ctx, int timeout_ms);
/* Locked snapshot helpers. */
int tu_fetch_finals(tu_fetch *f);
int tu_fetch_calls(tu_fetch *f);

/* ------------------------------------------------------------ observer recorder */

typedef struct tu_obs {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t main_thread;
    int changes;        /* TETHER_OK callbacks */
    int cancels;        /* TETHER_E_CANCELLED callbacks */
    int others;         /* any other status */
    int after_cancel;   /* callbacks after the CANCELLED one */
    int off_main;
    int wrong_obj;      /* callbacks for another object than `obj` */
    int wrong_key;      /* callbacks whose key differs from `key` */
    tether_object *obj;
    char key[64];       /* as observed */
    char peek_key[64];  /* attribute peeked in the callback on change */
    int peek_status;
    char peeked[512];   /* its text, or integer as text */
    tether_observer *remove_in_cb; /* removed from inside its first change callback */
    int remove_in_cb_status;
} tu_obs;

/* Prepares a recorder for `key` of `obj`; on each change the callback peeks
 * `peek_key` (the attribute) and stores its value. */
void tu_obs_init(tu_obs *o, tether_object *obj, const char *key, const char *peek_key);
void tu_obs_destroy(tu_obs *o);
void tu_obs_cb(tether_object *obj, const char *key, int status, void *userdata);
int tu_observe(tu_obs *o, tether_observer **out);
/* THREAD mode: waits (bounded) until changes >= n. 1 if so. */
int tu_obs_wait_changes(tu_obs *o, int n, int timeout_ms);
int tu_obs_wait_cancel(tu_obs *o, int timeout_ms);
/* Locked reads. */
int tu_obs_changes(tu_obs *o);
int tu_obs_cancels(tu_obs *o);

/* ------------------------------------------------------------ save */

/* Saves ctx (THREAD delivery), waits (bounded) for the one final callback,
 * and checks no other follows. Returns its status (TETHER_E_ERROR if none
 * came); *out_saved (may be NULL) gets the report's count of saved changes. */
int tu_save(tether_context *ctx, size_t *out_saved);

/* ------------------------------------------------------------ proxy */

/* A TCP proxy on 127.0.0.1 in front of the server of TETHER_TEST_URL, so a
 * test can make the server unreachable (stop) or stall its answers (requests
 * stay in flight) without touching the real server. */
typedef struct tu_proxy tu_proxy;
tu_proxy *tu_proxy_start(void);
/* The server URL through the proxy: http://127.0.0.1:PORT/v1 */
const char *tu_proxy_url(tu_proxy *p);
/* While stalled, nothing the server sends is passed on. */
void tu_proxy_stall(tu_proxy *p, int on);
/* HTTP requests passed to the server so far (request lines seen). */
int tu_proxy_requests(tu_proxy *p);
/* Closes the listener and every connection; the URL is unreachable after. */
void tu_proxy_stop(tu_proxy *p);
/* While on, the server is unreachable: connections are closed before a byte
 * of answer (those open too); off, it answers again. */
void tu_proxy_down(tu_proxy *p, int on);

#endif
