/* test_live.c — live fetches (tether_fetch_options.live), in THREAD and POLL
 * delivery, against the real Kinto: the first answer (PHASE_LIVE, no
 * changes), answers again after a sync changes what the fetch matches (each
 * answer's changes turn the previous answer into it; an in-place change is an
 * UPDATE), no answer for changes outside it, cancel (one FINAL CANCELLED,
 * nothing after, tasks freed), close (the FINAL comes before close returns),
 * a live COUNT fetch, and the change accessors' errors. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <errno.h>
#include <stdlib.h>

#define NITEMS 120       /* > 2 pages of the test server's paginate_by (50) */
#define NBULK 55         /* changes outside the range: the sync spans pages */
#define MAX_ANSWERS 64
#define QUIET_MS 300     /* only to show that nothing comes */
#define NKINDS 5         /* tether_change values 1..4 index these arrays */

/* The live fetch's range after the changes below: q008 (n -2) and q100 (n -1)
 * came first, q003 left (n 50), q005 was deleted. */
#define FIRST_IDS "q000,q001,q002,q003,q004,q005,q006,q007,q008,q009"
#define CHANGED_IDS "q008,q100,q000,q001,q002,q004,q006,q007,q009"

/* One non-final (or final) callback, copied out so the results handle can
 * be released inside the callback. */
typedef struct answer {
    tether_phase phase;
    int status;
    tether_result_type type;
    size_t count;                /* rows, or a COUNT answer's count */
    char **ids;                  /* copies; NULL for COUNT */
    size_t nchanges[NKINDS];
    size_t *olds[NKINDS], *news[NKINDS];
    int api_errors;              /* a call that should succeed failed, or an
                                    object disagreed with its id */
    int unknown_kind[2];         /* change_count with kind 0 and 5 */
    int past_end[NKINDS];        /* change_at(kind, its count) */
    int null_out;                /* change_count with out NULL */
    int no_message;              /* a failure left tether_errmsg() empty */
} answer;

typedef struct live_rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t main_thread;
    tether_context *poll_ctx;    /* POLL mode: waits poll it */
    answer answers[MAX_ANSWERS];
    int nanswers;                /* callbacks before the FINAL */
    int dropped;                 /* answers past MAX_ANSWERS */
    int calls, finals, final_status;
    size_t final_count;
    int after_final;             /* callbacks after the FINAL */
    int bad_phase;               /* a phase other than LIVE before the FINAL */
    int on_main, off_main;
    tether_task *task;
    int task_changed;
    int cancel_returned, after_cancel;
} live_rec;

static char bucket[128];

/* ------------------------------------------------------------ recorder */

static void answer_free(answer *a)
{
    size_t i;
    int k;
    for (i = 0; a->ids && i < a->count; i++)
        free(a->ids[i]);
    free(a->ids);
    for (k = 0; k < NKINDS; k++) {
        free(a->olds[k]);
        free(a->news[k]);
    }
    memset(a, 0, sizeof *a);
}

/* A failing call must leave a message. */
static int failed_with(answer *a, int status)
{
    if (status != TETHER_OK && tether_errmsg()[0] == '\0')
        a->no_message++;
    return status;
}

static void read_answer(tether_results *results, answer *a)
{
    size_t i, n;
    int k;
    if (tether_results_type(results, &a->type) != TETHER_OK)
        a->api_errors++;
    if (tether_results_count(results, &a->count) != TETHER_OK) {
        a->api_errors++;
        a->count = 0;
    }
    if (a->type != TETHER_RESULT_COUNT && a->count > 0) {
        a->ids = calloc(a->count, sizeof *a->ids);
        for (i = 0; i < a->count; i++) {
            const char *id = NULL;
            tether_object *obj = NULL;
            if (tether_results_id_at(results, i, &id) != TETHER_OK || !id) {
                a->api_errors++;
                id = "(?)";
            }
            a->ids[i] = strdup(id);
            if (tether_results_object_at(results, i, &obj) != TETHER_OK || strcmp(tu_id(obj), id) != 0)
                a->api_errors++;
        }
    }
    for (k = 1; k < NKINDS; k++) {
        size_t past_old = 0, past_new = 0;
        if (tether_results_change_count(results, (tether_change)k, &n) != TETHER_OK) {
            a->api_errors++;
            n = 0;
        }
        a->nchanges[k] = n;
        a->olds[k] = calloc(n ? n : 1, sizeof(size_t));
        a->news[k] = calloc(n ? n : 1, sizeof(size_t));
        for (i = 0; i < n; i++)
            if (tether_results_change_at(results, (tether_change)k, i, &a->olds[k][i], &a->news[k][i]) !=
                TETHER_OK)
                a->api_errors++;
        /* Either out may be NULL. */
        if (n > 0 && tether_results_change_at(results, (tether_change)k, 0, NULL, NULL) != TETHER_OK)
            a->api_errors++;
        a->past_end[k] = failed_with(a, tether_results_change_at(results, (tether_change)k, n, &past_old, &past_new));
    }
    a->unknown_kind[0] = failed_with(a, tether_results_change_count(results, (tether_change)0, &n));
    a->unknown_kind[1] = failed_with(a, tether_results_change_count(results, (tether_change)5, &n));
    a->null_out = failed_with(a, tether_results_change_count(results, TETHER_CHANGE_DELETE, NULL));
}

static void live_cb(tether_task *task, tether_phase phase, int status, const char *message,
                    tether_results *results, void *userdata)
{
    live_rec *r = userdata;
    answer a;
    (void)message;
    memset(&a, 0, sizeof a);
    a.phase = phase;
    a.status = status;
    if (results)
        read_answer(results, &a);
    else
        a.api_errors++;
    tether_results_free(results);

    pthread_mutex_lock(&r->mu);
    r->calls++;
    if (pthread_equal(pthread_self(), r->main_thread))
        r->on_main++;
    else
        r->off_main++;
    if (!r->task)
        r->task = task;
    else if (r->task != task)
        r->task_changed++;
    if (r->finals > 0)
        r->after_final++;
    if (r->cancel_returned && !(phase == TETHER_PHASE_FINAL && status == TETHER_E_CANCELLED))
        r->after_cancel++;
    if (phase == TETHER_PHASE_FINAL) {
        r->finals++;
        r->final_status = status;
        r->final_count = a.count;
        answer_free(&a);
    } else {
        if (phase != TETHER_PHASE_LIVE)
            r->bad_phase++;
        if (r->nanswers < MAX_ANSWERS)
            r->answers[r->nanswers++] = a;
        else {
            r->dropped++;
            answer_free(&a);
        }
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void rec_init(live_rec *r, tether_context *ctx, tether_delivery mode)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->main_thread = pthread_self();
    r->poll_ctx = mode == TETHER_DELIVER_POLL ? ctx : NULL;
    r->final_status = 1; /* not a status: no FINAL yet */
}

static void rec_destroy(live_rec *r)
{
    int i;
    for (i = 0; i < r->nanswers; i++)
        answer_free(&r->answers[i]);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

typedef int rec_pred(live_rec *r, const void *arg);

/* Waits (bounded) until pred holds; in POLL mode by polling the context,
 * which delivers every callback of it. 1 if it held. */
static int rec_wait(live_rec *r, rec_pred *pred, const void *arg, int timeout_ms)
{
    int ok;
    if (r->poll_ctx) {
        int64_t end = tu_now_ms() + timeout_ms;
        for (;;) {
            int64_t left;
            pthread_mutex_lock(&r->mu);
            ok = pred(r, arg);
            pthread_mutex_unlock(&r->mu);
            left = end - tu_now_ms();
            if (ok || left <= 0)
                return ok;
            if (tether_context_poll(r->poll_ctx, left < 50 ? (int)left : 50, NULL) != TETHER_OK)
                return 0;
        }
    } else {
        struct timespec dl = tu_deadline(timeout_ms);
        pthread_mutex_lock(&r->mu);
        while (!(ok = pred(r, arg)))
            if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT) {
                ok = pred(r, arg);
                break;
            }
        pthread_mutex_unlock(&r->mu);
        return ok;
    }
}

/* Lets QUIET_MS pass, delivering anything that comes (POLL mode). */
static void quiet(tether_context *ctx, tether_delivery mode)
{
    int64_t end = tu_now_ms() + QUIET_MS;
    if (mode == TETHER_DELIVER_THREAD) {
        tu_sleep_ms(QUIET_MS);
        return;
    }
    while (tu_now_ms() < end)
        if (tether_context_poll(ctx, 50, NULL) != TETHER_OK)
            break;
}

static int has_answers(live_rec *r, const void *arg)
{
    return r->nanswers >= *(const int *)arg || r->finals > 0;
}

static int has_final(live_rec *r, const void *arg)
{
    (void)arg;
    return r->finals > 0;
}

static const char *join_ids(const answer *a, char *buf, size_t size)
{
    size_t i, len = 0;
    buf[0] = '\0';
    for (i = 0; a->ids && i < a->count && len + 2 < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? "," : "", a->ids[i]);
    return buf;
}

static int last_ids_are(live_rec *r, const void *arg)
{
    char buf[1024];
    return r->finals > 0 ||
           (r->nanswers > 0 && strcmp(join_ids(&r->answers[r->nanswers - 1], buf, sizeof buf), arg) == 0);
}

static int last_count_is(live_rec *r, const void *arg)
{
    return r->finals > 0 || (r->nanswers > 0 && r->answers[r->nanswers - 1].count == *(const size_t *)arg);
}

static int rec_get(live_rec *r, const int *field)
{
    int n;
    pthread_mutex_lock(&r->mu);
    n = *field;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* ------------------------------------------------------------ checks */

static int find_id(const answer *a, const char *id)
{
    size_t i;
    for (i = 0; a->ids && i < a->count; i++)
        if (strcmp(a->ids[i], id) == 0)
            return (int)i;
    return -1;
}

static int cmp_desc(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

static int cmp_asc(const void *x, const void *y)
{
    return -cmp_desc(x, y);
}

/* Whether `cur`'s changes turn `prev`'s ids into `cur`'s, as the header
 * says: deletions (descending), then insertions (ascending), a MOVE being
 * both; a MOVE or UPDATE names the same row at both indexes. On failure
 * `why` says what. */
static int changes_apply(const answer *prev, const answer *cur, char *why, size_t size)
{
    size_t total = 0, ndel = 0, nins = 0, len = prev->count, i, j;
    size_t *dels, *inss;
    const char **rows;
    int ok = 1, k;
    for (k = 1; k < NKINDS; k++)
        total += cur->nchanges[k];
    if (total == 0) {
        snprintf(why, size, "an answer that did not move");
        return 0;
    }
    dels = calloc(prev->count + cur->count + 1, sizeof *dels);
    inss = calloc(prev->count + cur->count + 1, sizeof *inss);
    rows = calloc(prev->count + cur->count + 1, sizeof *rows);
    for (i = 0; i < cur->nchanges[TETHER_CHANGE_DELETE] && ok; i++) {
        size_t o = cur->olds[TETHER_CHANGE_DELETE][i], n = cur->news[TETHER_CHANGE_DELETE][i];
        if (o >= prev->count || n != SIZE_MAX || (i > 0 && o <= cur->olds[TETHER_CHANGE_DELETE][i - 1]) ||
            find_id(cur, prev->ids[o]) >= 0) {
            snprintf(why, size, "DELETE %zu: old %zu new %zu", i, o, n);
            ok = 0;
        } else
            dels[ndel++] = o;
    }
    for (i = 0; i < cur->nchanges[TETHER_CHANGE_INSERT] && ok; i++) {
        size_t o = cur->olds[TETHER_CHANGE_INSERT][i], n = cur->news[TETHER_CHANGE_INSERT][i];
        if (n >= cur->count || o != SIZE_MAX || (i > 0 && n <= cur->news[TETHER_CHANGE_INSERT][i - 1]) ||
            find_id(prev, cur->ids[n]) >= 0) {
            snprintf(why, size, "INSERT %zu: old %zu new %zu", i, o, n);
            ok = 0;
        } else
            inss[nins++] = n;
    }
    for (k = TETHER_CHANGE_MOVE; k <= TETHER_CHANGE_UPDATE && ok; k++)
        for (i = 0; i < cur->nchanges[k] && ok; i++) {
            size_t o = cur->olds[k][i], n = cur->news[k][i];
            if (o >= prev->count || n >= cur->count || strcmp(prev->ids[o], cur->ids[n]) != 0) {
                snprintf(why, size, "%s %zu: old %zu new %zu names two rows", k == TETHER_CHANGE_MOVE ? "MOVE" : "UPDATE",
                         i, o, n);
                ok = 0;
            } else if (k == TETHER_CHANGE_MOVE) {
                dels[ndel++] = o;
                inss[nins++] = n;
            }
        }
    if (ok) {
        for (i = 0; i < prev->count; i++)
            rows[i] = prev->ids[i];
        qsort(dels, ndel, sizeof *dels, cmp_desc);
        qsort(inss, nins, sizeof *inss, cmp_asc);
        for (i = 0; i < ndel && ok; i++) {
            if (i > 0 && dels[i] == dels[i - 1]) {
                snprintf(why, size, "row %zu deleted twice", dels[i]);
                ok = 0;
                break;
            }
            memmove(rows + dels[i], rows + dels[i] + 1, (len - dels[i] - 1) * sizeof *rows);
            len--;
        }
        for (i = 0; i < nins && ok; i++) {
            if (inss[i] > len || (i > 0 && inss[i] == inss[i - 1])) {
                snprintf(why, size, "insertion at %zu of %zu rows", inss[i], len);
                ok = 0;
                break;
            }
            memmove(rows + inss[i] + 1, rows + inss[i], (len - inss[i]) * sizeof *rows);
            rows[inss[i]] = cur->ids[inss[i]];
            len++;
        }
        if (ok && len != cur->count) {
            snprintf(why, size, "%zu rows after the changes, the answer has %zu", len, cur->count);
            ok = 0;
        }
        for (j = 0; ok && j < len; j++)
            if (strcmp(rows[j], cur->ids[j]) != 0) {
                snprintf(why, size, "row %zu is %s after the changes, %s in the answer", j, rows[j], cur->ids[j]);
                ok = 0;
            }
    }
    free(dels);
    free(inss);
    free(rows);
    return ok;
}

/* A made-up answer with ids "a,b,..." (one letter each) and no changes. */
static void fake(answer *a, const char *ids)
{
    size_t i, n = (strlen(ids) + 1) / 2;
    memset(a, 0, sizeof *a);
    a->phase = TETHER_PHASE_LIVE;
    a->count = n;
    a->ids = calloc(n ? n : 1, sizeof *a->ids);
    for (i = 0; i < n; i++) {
        a->ids[i] = malloc(2);
        a->ids[i][0] = ids[2 * i];
        a->ids[i][1] = '\0';
    }
}

static void fake_change(answer *a, int kind, size_t o, size_t n)
{
    size_t c = a->nchanges[kind]++;
    a->olds[kind] = realloc(a->olds[kind], (c + 1) * sizeof(size_t));
    a->news[kind] = realloc(a->news[kind], (c + 1) * sizeof(size_t));
    a->olds[kind][c] = o;
    a->news[kind][c] = n;
}

/* The change checker rejects wrong changes: its passing says something. */
static void test_checker(void)
{
    answer prev, cur;
    char why[256];
    int variant;
    tu_section("the change checker accepts right changes and rejects wrong ones");
    fake(&prev, "a,b,c,d");
    for (variant = 0; variant < 7; variant++) {
        /* a,b,c,d -> d,a,c,e: b deleted, e inserted, d moved, c updated */
        fake(&cur, "d,a,c,e");
        if (variant != 1)
            fake_change(&cur, TETHER_CHANGE_DELETE, 1, SIZE_MAX);
        if (variant != 2)
            fake_change(&cur, TETHER_CHANGE_INSERT, SIZE_MAX, 3);
        if (variant != 3)
            fake_change(&cur, TETHER_CHANGE_MOVE, 3, 0);
        fake_change(&cur, TETHER_CHANGE_UPDATE, 2, variant == 4 ? 1 : 2);
        if (variant == 5)
            fake_change(&cur, TETHER_CHANGE_DELETE, 0, SIZE_MAX);
        if (variant == 6) {
            answer_free(&cur);
            fake(&cur, "a,b,c,d");
        }
        why[0] = '\0';
        if (variant == 0)
            CHECK(changes_apply(&prev, &cur, why, sizeof why));
        else
            CHECK(!changes_apply(&prev, &cur, why, sizeof why) && why[0] != '\0');
        answer_free(&cur);
    }
    answer_free(&prev);
}

/* What the accessors answered for one answer, recorded in its callback. */
static void check_accessors(const answer *a, int line)
{
    int k;
    tu_check_code(a->api_errors, 0, __FILE__, line, "accessor calls that failed");
    tu_check_code(a->no_message, 0, __FILE__, line, "failures without tether_errmsg");
    tu_check_code(a->unknown_kind[0], TETHER_E_INVALID, __FILE__, line, "change_count(kind 0)");
    tu_check_code(a->unknown_kind[1], TETHER_E_INVALID, __FILE__, line, "change_count(kind 5)");
    tu_check_code(a->null_out, TETHER_E_MISUSE, __FILE__, line, "change_count(out NULL)");
    for (k = 1; k < NKINDS; k++)
        tu_check_code(a->past_end[k], TETHER_E_NOT_FOUND, __FILE__, line, "change_at(kind, its count)");
}

static void check_no_changes(const answer *a, int line)
{
    int k;
    for (k = 1; k < NKINDS; k++)
        tu_check_code((int)a->nchanges[k], 0, __FILE__, line, "change count of the first answer");
}

/* A non-live answer: every change count 0, the accessors' errors as live. */
static void check_results_unchanged(tether_results *res, int line)
{
    size_t n = 99, o = 7, nw = 7;
    int k;
    if (!tu_check(res != NULL, __FILE__, line, "results held", NULL))
        return;
    for (k = 1; k < NKINDS; k++) {
        n = 99;
        tu_check_status(tether_results_change_count(res, (tether_change)k, &n), TETHER_OK, __FILE__, line,
                        "change_count of a non-live answer");
        tu_check_code((int)n, 0, __FILE__, line, "change count of a non-live answer");
        tu_check_status(tether_results_change_at(res, (tether_change)k, 0, &o, &nw), TETHER_E_NOT_FOUND, __FILE__,
                        line, "change_at(kind, 0) of a non-live answer");
    }
    tu_check(o == 7 && nw == 7, __FILE__, line, "outs untouched on failure", NULL);
    tu_check_status(tether_results_change_count(res, (tether_change)0, &n), TETHER_E_INVALID, __FILE__, line,
                    "change_count(kind 0) of a non-live answer");
    tu_check_status(tether_results_change_count(res, (tether_change)99, &n), TETHER_E_INVALID, __FILE__, line,
                    "change_count(kind 99) of a non-live answer");
}

/* ------------------------------------------------------------ fetches */

static int start_live(tether_context *ctx, live_rec *r, const char *predicate, tether_result_type type,
                      tether_task **task)
{
    tether_fetch_options o;
    int s = tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
    if (s != TETHER_OK)
        return s;
    o.entity = "items";
    o.sort = type == TETHER_RESULT_COUNT ? NULL : "n";
    o.predicate = predicate;
    /* The server's answer is the first callback (no CACHED phase). */
    o.policy = TETHER_POLICY_SERVER_ONLY;
    o.result_type = type;
    o.live = 1;
    return tether_fetch_start(ctx, &o, live_cb, r, task);
}

/* An ordinary fetch of the whole collection, which syncs it; checks its
 * answer and that it carries no changes. */
static void sync_items(tether_context *ctx, tether_delivery mode, tether_cache_policy policy, size_t expected,
                       int line)
{
    tu_fetch f;
    int got;
    tu_fetch_init(&f);
    if (tu_check_status(tu_fetch_start(ctx, &f, "items", "n", 0, policy, NULL), TETHER_OK, __FILE__, line,
                        "ordinary fetch") != TETHER_OK) {
        tu_fetch_destroy(&f);
        return;
    }
    got = mode == TETHER_DELIVER_POLL ? tu_fetch_wait_poll(&f, ctx, TU_WAIT_MS) : tu_fetch_wait(&f, TU_WAIT_MS);
    if (tu_check(got, __FILE__, line, "ordinary fetch: FINAL came", NULL)) {
        tu_check_code(f.final_status, TETHER_OK, __FILE__, line, f.final_message);
        tu_check_code((int)f.final_count, (int)expected, __FILE__, line, "ordinary fetch: count");
        tu_check_code(f.order_errors + f.results_errors, 0, __FILE__, line, "ordinary fetch: order/results");
        check_results_unchanged(f.final_results, line);
        if (policy == TETHER_POLICY_CACHE_THEN_SERVER)
            check_results_unchanged(f.cached_results, line);
    }
    tu_fetch_destroy(&f);
}

static int patch(const char *id, const char *data)
{
    return tu_patch_record(bucket, "items", id, data);
}

/* ------------------------------------------------------------ the test */

static void run(tether_delivery mode, const char *store)
{
    const char *name = mode == TETHER_DELIVER_POLL ? "POLL" : "THREAD";
    tether_context *ctx;
    tether_task *task = NULL, *count_task = NULL, *task3 = NULL;
    live_rec r, rc, r3;
    int64_t tasks0;
    int one = 1, i, before, seen_update = 0, seen_move = 0, chain_ok = 1;
    char title[160], buf[1024], why[256];
    size_t count_want;

    snprintf(title, sizeof title, "%s: seed %d items, open", name, NITEMS);
    tu_section(title);
    tu_unique(bucket, sizeof bucket, mode == TETHER_DELIVER_POLL ? "c-live-poll" : "c-live-thread");
    if (!CHECK(tu_seed_numbered(bucket, "items", "q%03d", "item", NULL, NULL, NITEMS)))
        return;
    ctx = tu_open(bucket, store, mode);
    if (!ctx)
        return;
    tasks0 = tu_debug_count(TETHER_DEBUG_TASKS);

    snprintf(title, sizeof title, "%s: a live fetch answers first with PHASE_LIVE, no changes", name);
    tu_section(title);
    rec_init(&r, ctx, mode);
    if (CHECK_OK(start_live(ctx, &r, "n < 10", TETHER_RESULT_OBJECTS, &task)) != TETHER_OK) {
        rec_destroy(&r);
        tether_context_close(ctx);
        return;
    }
    CHECK(task != NULL);
    CHECK(rec_wait(&r, has_answers, &one, TU_WAIT_MS));
    pthread_mutex_lock(&r.mu);
    CHECK_INT(r.nanswers, 1);
    CHECK_INT(r.finals, 0);
    if (r.nanswers >= 1) {
        const answer *a = &r.answers[0];
        CHECK_INT(a->phase, TETHER_PHASE_LIVE);
        CHECK_CODE(a->status, TETHER_OK);
        CHECK_INT(a->type, TETHER_RESULT_OBJECTS);
        CHECK_INT(a->count, 10);
        CHECK_STR(join_ids(a, buf, sizeof buf), FIRST_IDS);
        check_no_changes(a, __LINE__);
        check_accessors(a, __LINE__);
    }
    pthread_mutex_unlock(&r.mu);

    snprintf(title, sizeof title, "%s: a whole fetch syncs the store; nothing in range moved: no answer", name);
    tu_section(title);
    sync_items(ctx, mode, TETHER_POLICY_SERVER_ONLY, NITEMS, __LINE__);
    quiet(ctx, mode);
    CHECK_INT(rec_get(&r, &r.nanswers), 1);

    snprintf(title, sizeof title, "%s: changes on the server, synced by an ordinary fetch: the live fetch follows",
             name);
    tu_section(title);
    /* Interleaved with changes outside the range so that the sync's
     * listing spans pages: the answers may come in several steps. */
    CHECK(patch("q003", "{\"n\": 50}"));                  /* leaves */
    CHECK(patch("q100", "{\"n\": -1}"));                  /* comes */
    CHECK(patch("q002", "{\"label\": \"label changed\"}")); /* in place */
    {
        static char idbuf[NBULK][16], databuf[NBULK][64];
        const char *ids[NBULK], *datas[NBULK];
        for (i = 0; i < NBULK; i++) {
            snprintf(idbuf[i], sizeof idbuf[i], "q%03d", 10 + i);
            snprintf(databuf[i], sizeof databuf[i], "{\"n\": %d, \"label\": \"bulk %d\"}", 10 + i, i);
            ids[i] = idbuf[i];
            datas[i] = databuf[i];
        }
        CHECK(tu_put_records(bucket, "items", ids, datas, NBULK));
    }
    CHECK(tu_delete_record(bucket, "items", "q005"));     /* deleted */
    CHECK(patch("q008", "{\"n\": -2}"));                  /* moves inside */
    sync_items(ctx, mode, TETHER_POLICY_CACHE_THEN_SERVER, NITEMS - 1, __LINE__);
    CHECK(rec_wait(&r, last_ids_are, CHANGED_IDS, TU_WAIT_MS));
    pthread_mutex_lock(&r.mu);
    CHECK_INT(r.finals, 0);
    CHECK(r.nanswers >= 2);
    if (r.nanswers >= 1)
        CHECK_STR(join_ids(&r.answers[r.nanswers - 1], buf, sizeof buf), CHANGED_IDS);
    for (i = 1; i < r.nanswers; i++) {
        const answer *prev = &r.answers[i - 1], *cur = &r.answers[i];
        size_t j;
        CHECK_INT(cur->phase, TETHER_PHASE_LIVE);
        CHECK_CODE(cur->status, TETHER_OK);
        check_accessors(cur, __LINE__);
        why[0] = '\0';
        if (!changes_apply(prev, cur, why, sizeof why)) {
            chain_ok = 0;
            printf("answer %d: %s\n  previous %s\n", i, why, join_ids(prev, buf, sizeof buf));
            printf("  this     %s\n", join_ids(cur, buf, sizeof buf));
        }
        for (j = 0; j < cur->nchanges[TETHER_CHANGE_UPDATE]; j++)
            if (strcmp(cur->ids[cur->news[TETHER_CHANGE_UPDATE][j]], "q002") == 0)
                seen_update++;
        for (j = 0; j < cur->nchanges[TETHER_CHANGE_MOVE]; j++)
            if (strcmp(cur->ids[cur->news[TETHER_CHANGE_MOVE][j]], "q008") == 0)
                seen_move++;
    }
    CHECK(chain_ok);
    CHECK_INT(seen_update, 1); /* the in-place change, once */
    CHECK_INT(seen_move, 1);
    printf("   (%d answers after the first)\n", r.nanswers - 1);
    pthread_mutex_unlock(&r.mu);
    {
        tether_object *obj = NULL;
        char label[64];
        if (CHECK_OK(tether_context_object(ctx, "items", "q002", &obj)) == TETHER_OK) {
            CHECK_OK(tu_peek_text(obj, "label", label, sizeof label));
            CHECK_STR(label, "label changed");
            CHECK_OK(tether_object_free(obj));
        }
    }

    snprintf(title, sizeof title, "%s: changes outside the range: no answer", name);
    tu_section(title);
    before = rec_get(&r, &r.nanswers);
    CHECK(patch("q111", "{\"label\": \"outside\"}"));
    CHECK(patch("q003", "{\"n\": 51}")); /* out of range, stays out */
    CHECK(tu_delete_record(bucket, "items", "q119"));
    sync_items(ctx, mode, TETHER_POLICY_SERVER_ONLY, NITEMS - 2, __LINE__);
    quiet(ctx, mode);
    CHECK_INT(rec_get(&r, &r.nanswers), before);
    CHECK_INT(rec_get(&r, &r.finals), 0);

    snprintf(title, sizeof title, "%s: cancel: one FINAL CANCELLED, then nothing even after more changes", name);
    tu_section(title);
    if (CHECK_OK(tether_task_cancel(task)) == TETHER_OK) {
        pthread_mutex_lock(&r.mu);
        r.cancel_returned = 1;
        pthread_mutex_unlock(&r.mu);
    }
    CHECK(rec_wait(&r, has_final, NULL, TU_WAIT_MS));
    before = rec_get(&r, &r.calls);
    CHECK(patch("q000", "{\"label\": \"after cancel\"}"));
    CHECK(patch("q101", "{\"n\": -3}"));
    sync_items(ctx, mode, TETHER_POLICY_SERVER_ONLY, NITEMS - 2, __LINE__);
    quiet(ctx, mode);
    pthread_mutex_lock(&r.mu);
    CHECK_INT(r.finals, 1);
    CHECK_CODE(r.final_status, TETHER_E_CANCELLED);
    CHECK_INT(r.final_count, 0);
    CHECK_INT(r.calls, before);
    CHECK_INT(r.after_final, 0);
    CHECK_INT(r.after_cancel, 0);
    CHECK_INT(r.bad_phase, 0);
    CHECK_INT(r.task_changed, 0);
    CHECK_INT(r.dropped, 0);
    if (mode == TETHER_DELIVER_POLL)
        CHECK_INT(r.off_main, 0);
    else
        CHECK_INT(r.on_main, 0);
    pthread_mutex_unlock(&r.mu);
    CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);
    CHECK_INT(tu_debug_count_settle(TETHER_DEBUG_TASKS, tasks0, 2000), tasks0);
    rec_destroy(&r);

    snprintf(title, sizeof title, "%s: a live COUNT fetch answers the new count after a sync", name);
    tu_section(title);
    /* n >= 100: q102..q118 (q100 and q101 left, q119 was deleted). */
    count_want = 17;
    rec_init(&rc, ctx, mode);
    CHECK_OK(start_live(ctx, &rc, "n >= 100", TETHER_RESULT_COUNT, &count_task));
    CHECK(rec_wait(&rc, has_answers, &one, TU_WAIT_MS));
    pthread_mutex_lock(&rc.mu);
    CHECK_INT(rc.nanswers, 1);
    if (rc.nanswers >= 1) {
        CHECK_INT(rc.answers[0].phase, TETHER_PHASE_LIVE);
        CHECK_CODE(rc.answers[0].status, TETHER_OK);
        CHECK_INT(rc.answers[0].type, TETHER_RESULT_COUNT);
        CHECK_INT(rc.answers[0].count, count_want);
        check_no_changes(&rc.answers[0], __LINE__);
        check_accessors(&rc.answers[0], __LINE__);
    }
    pthread_mutex_unlock(&rc.mu);
    CHECK(tu_put_numbered(bucket, "items", "r%03d", "{\"n\": 100%d, \"label\": \"new %d\"}", 3));
    sync_items(ctx, mode, TETHER_POLICY_SERVER_ONLY, NITEMS + 1, __LINE__);
    count_want += 3;
    CHECK(rec_wait(&rc, last_count_is, &count_want, TU_WAIT_MS));
    pthread_mutex_lock(&rc.mu);
    CHECK(rc.nanswers >= 2);
    CHECK_INT(rc.finals, 0);
    for (i = 1; i < rc.nanswers; i++) {
        CHECK_INT(rc.answers[i].phase, TETHER_PHASE_LIVE);
        CHECK_CODE(rc.answers[i].status, TETHER_OK);
        CHECK_INT(rc.answers[i].type, TETHER_RESULT_COUNT);
    }
    if (rc.nanswers >= 1)
        CHECK_INT(rc.answers[rc.nanswers - 1].count, count_want);
    pthread_mutex_unlock(&rc.mu);

    snprintf(title, sizeof title, "%s: close with live fetches running: each gets one FINAL CANCELLED first", name);
    tu_section(title);
    rec_init(&r3, ctx, mode);
    CHECK_OK(start_live(ctx, &r3, "n < 10", TETHER_RESULT_OBJECTS, &task3));
    CHECK(rec_wait(&r3, has_answers, &one, TU_WAIT_MS));
    pthread_mutex_lock(&r3.mu);
    CHECK_INT(r3.nanswers, 1);
    if (r3.nanswers >= 1) {
        CHECK_CODE(r3.answers[0].status, TETHER_OK);
        CHECK_STR(join_ids(&r3.answers[0], buf, sizeof buf), "q101,q008,q100,q000,q001,q002,q004,q006,q007,q009");
    }
    pthread_mutex_unlock(&r3.mu);
    CHECK_INT(rec_get(&r3, &r3.finals), 0);
    CHECK_INT(rec_get(&rc, &rc.finals), 0);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    /* Read at once: the FINALs must have come before close returned. */
    CHECK_INT(rec_get(&r3, &r3.finals), 1);
    CHECK_INT(rec_get(&rc, &rc.finals), 1);
    CHECK_CODE(rec_get(&r3, &r3.final_status), TETHER_E_CANCELLED);
    CHECK_CODE(rec_get(&rc, &rc.final_status), TETHER_E_CANCELLED);
    tu_sleep_ms(50);
    CHECK_INT(rec_get(&r3, &r3.after_final), 0);
    CHECK_INT(rec_get(&rc, &rc.after_final), 0);
    CHECK_INT(rec_get(&r3, &r3.bad_phase) + rec_get(&rc, &rc.bad_phase), 0);
    if (mode == TETHER_DELIVER_POLL)
        CHECK_INT(rec_get(&r3, &r3.off_main) + rec_get(&rc, &rc.off_main), 0);
    else
        CHECK_INT(rec_get(&r3, &r3.on_main) + rec_get(&rc, &rc.on_main), 0);
    CHECK_STATUS(tether_task_cancel(task3), TETHER_E_HANDLE);
    CHECK_STATUS(tether_task_cancel(count_task), TETHER_E_HANDLE);
    CHECK_INT(tu_debug_count_settle(TETHER_DEBUG_TASKS, tasks0, 2000), tasks0);
    rec_destroy(&r3);
    rec_destroy(&rc);
}

int main(int argc, char **argv)
{
    char store_thread[512], store_poll[512];
    (void)argc;
    tu_init(argv[0]);
    tu_store_path(store_thread, sizeof store_thread, "live-thread");
    tu_store_path(store_poll, sizeof store_poll, "live-poll");
    test_checker();
    run(TETHER_DELIVER_THREAD, store_thread);
    run(TETHER_DELIVER_POLL, store_poll);
    CHECK_INT(tu_debug_count_settle(TETHER_DEBUG_RESULTS, 0, 2000), 0);
    CHECK_INT(tu_debug_count_settle(TETHER_DEBUG_CONTEXTS, 0, 2000), 0);
    return tu_finish();
}
