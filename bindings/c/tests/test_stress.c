/* test_stress.c — closing is safe from any thread at any time, every
 * callback comes exactly once, and nothing leaks.
 *
 * Against a real Kinto (a collection "items" of 300 records), for both
 * delivery modes, round after round:
 *   - 4 worker threads hold object references (retained from a fetch's
 *     results) and call at random: peek/get (by name and code, valid and
 *     unknown keys), version/id/entity, the model (entity, attributes,
 *     diagnostics, is_online, fd), observe a key and remove the observer,
 *     start fetches (random policy, sort, limit; some invalid) and cancel
 *     some, retain and release, drop the last reference and get the object
 *     again, read results kept past their callback, and call on handles
 *     that are dead (released in this round, or from earlier rounds);
 *   - fetch callbacks read and sometimes keep their results, retain an object
 *     for a worker, and try close/poll from inside (TETHER_E_BUSY);
 *   - a mutator thread changes records on the server, so refreshes tell
 *     observers;
 *   - a closer thread closes the context after a random 0-50 ms (sometimes a
 *     second closer races it); in POLL mode a poller thread is blocked in
 *     tether_context_poll (or waits on the descriptor) meanwhile;
 *   - after the close, the workers go on calling on their stale handles and
 *     then release everything: every call must give TETHER_E_HANDLE.
 * Checked: every status is one the header documents for the call (a call
 * that races the close may also get TETHER_E_HANDLE; one that starts after
 * the close returned must); values and handle identity; every task's FINAL
 * and every observer's CANCELLED callback exactly once, nothing after it,
 * nothing after close returned, never two callbacks at once, each on a thread
 * the mode allows; after each round the live counts, process threads and
 * descriptors back to where they started; resident memory flat.
 *
 * A failing round prints how to replay it. Environment:
 *   TETHER_STRESS_SEED      the seed (printed at the start) to repeat a run
 *   TETHER_STRESS_ROUNDS    rounds per mode (default 80; without it each mode
 *                           stops starting rounds after 20 s)
 *   TETHER_STRESS_FIRST     index of the first round (with ROUNDS=1: replay
 *                           one round of a failing run)
 *   TETHER_STRESS_MODE      thread, poll or both (default)
 *   TETHER_STRESS_OBSERVE_CYCLES  cycles of the last section, observers
 *                           racing the close (default 40; 0 skips it)
 * Debugging aids (they change what the rounds do):
 *   TETHER_STRESS_CLOSERS=2 two closes race in every round, ~1 ms apart;
 *   TETHER_STRESS_CLOSERS=1 never two closes;
 *   TETHER_STRESS_STOP_ON_LEAK=1  stop after the first round whose counts do
 *                           not come back. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <dirent.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#define NRECORDS 300
#define NWORKERS 4
#define NSLOTS 24          /* objects each worker starts with */
#define MAXSLOTS 64
#define MAXSEEN 256        /* handles a worker remembers for after the close */
#define MAXOBS 8           /* observers a worker keeps at once */
#define MAXTASKS 64        /* tasks a worker remembers (to cancel) */
#define MAXOUT 3           /* fetches a worker keeps outstanding */
#define MAXKEPT 8          /* results kept past their callback, per worker */
#define MAXINBOX 8         /* objects a callback retained for a worker */
#define MAXANCIENT 96      /* handles of earlier rounds, all dead */
#define CLOSE_MAX_US 50000 /* the close comes 0-50 ms after the start */
#define ROUND_DEADLINE_MS 30000
#define SETTLE_MS 5000
#define DEFAULT_ROUNDS 80  /* per mode */
#define DEFAULT_OBSERVE_CYCLES 40
#define DEFAULT_BUDGET_MS 20000 /* per mode, unless TETHER_STRESS_ROUNDS is set */
#define RSS_SLACK (24L << 20)


#define M(s) (1u << (unsigned)(-(s)))

static char bucket[128];
static char store[512];
static uint64_t run_seed;
static int force_closers; /* TETHER_STRESS_CLOSERS: 2, two racing closes in every round; 1, never */

/* ------------------------------------------------------------ small helpers */

static int aload(int *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static void astore(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
static int aadd(int *p, int v) { return __atomic_add_fetch(p, v, __ATOMIC_SEQ_CST); }

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static unsigned rnd(uint64_t *s, unsigned n) { return n ? (unsigned)(splitmix(s) % n) : 0; }

static void sleep_us(long us)
{
    struct timespec ts;
    ts.tv_sec = us / 1000000;
    ts.tv_nsec = (us % 1000000) * 1000L;
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Thread roles, to check on which thread callbacks run. */
enum { ROLE_NONE = 0, ROLE_MAIN, ROLE_WORKER, ROLE_POLLER, ROLE_CLOSER, ROLE_MUTATOR };
static pthread_key_t role_key;
static int role_values[6];
static void set_role(int role) { pthread_setspecific(role_key, &role_values[role]); }
static int get_role(void)
{
    int *p = pthread_getspecific(role_key);
    return p ? *p : ROLE_NONE;
}

/* ------------------------------------------------------------ round state */

enum { V_STATUS, V_VALUE, V_IDENTITY, V_ORDER, V_FINAL, V_CONCURRENT, V_THREAD, V_AFTER_CLOSE, V_CLOSE, NV };
static const char *const vnames[NV] = {
    "statuses as documented",
    "values read are right",
    "same handle for the same record while held",
    "callback order (CACHED before FINAL, nothing after FINAL/CANCELLED or after cancel)",
    "exactly one final callback per task and observer",
    "never two callbacks of a context at once",
    "callbacks on the threads the mode allows",
    "no callback after tether_context_close returned",
    "close: one OK, in time, poller woken",
};

typedef struct round round;
typedef struct worker worker;

enum { REC_FETCH = 1, REC_OBS = 2, REC_SETUP = 3 };

typedef struct rec {
    int kind;
    struct rec *next;
    round *r;
    worker *w;
    int retired;             /* its round is over: any callback now is late */
    uint64_t rng;            /* for decisions inside callbacks */
    int start_status;        /* 1 until the start call returned */
    void *handle;            /* task or observer, when the start gave one */
    /* fetch */
    tether_cache_policy policy;
    int64_t limit;
    int sort;                /* index in sorts[] */
    tether_task *first_task; /* the task pointer of the first callback */
    int cancel_status;       /* 1: never cancelled; else the first cancel's status */
    int cancel_returned;     /* a cancel returned TETHER_OK */
    /* observer */
    tether_object *obj;
    char key[16];
    int removed;             /* tether_observer_cancel returned TETHER_OK */
    /* what came */
    int calls, cached, finals, changes, errors;
    int final_status;
    int final_while_closing; /* the final came with the close begun */
    int after_final;         /* callbacks after the final one */
    int entered;             /* callbacks begun (counted on entry) */
    int start_raced;         /* a close had begun when the start call returned */
    int remove_status;       /* 1: never removed */
    int remove_raced;        /* a close had begun when the remove returned */
    int early_handle;        /* a cancel gave TETHER_E_HANDLE before the FINAL returned, no close begun */
    int early_entered;       /* ... while the FINAL callback was already running */
    int64_t early_handle_ms, final_ms;
    int final_role;          /* role of the thread the FINAL ran on */
} rec;

typedef struct actor {
    round *r;
    char name[32];
    int closed_before; /* the close had returned when the call started */
    int s;
    long ops, post_ops;
} actor;

typedef struct slot {
    tether_object *h;
    int num;
    int refs;
} slot;

typedef struct inbox_item {
    tether_object *h;
    int num;
} inbox_item;

struct worker {
    actor a;
    int id;
    uint64_t rng;
    slot slots[MAXSLOTS];
    int nslots;
    tether_object *seen[MAXSEEN];
    int nseen;
    rec *obs[MAXOBS];
    int nobs;
    rec *tasks[MAXTASKS];
    int ntasks;
    int outstanding;      /* under r->mu */
    rec *removed_obs;     /* last observer removed, for a second remove */
    rec *cancelled_task;  /* last task cancelled, for a second cancel */
    pthread_mutex_t kmu;  /* kept and inbox, filled by callbacks */
    tether_results *kept[MAXKEPT];
    int nkept;
    inbox_item inbox[MAXINBOX];
    int ninbox;
    /* stats */
    long fetches, cancels, observes, removes, reacquires, released_last;
};

typedef struct ancient {
    int kind; /* 1 ctx, 2 entity, 3 object, 4 task, 5 observer, 6 results */
    void *h;
} ancient;

struct round {
    int index;
    tether_delivery mode;
    const char *mode_name;
    uint64_t seed;
    tether_context *ctx;
    tether_entity *ent;
    int ent_code, code_n;
    size_t attr_count;
    int fd;
    int closing; /* set before any close call (atomic) */
    int closed;  /* set once a close returned TETHER_OK (atomic) */
    int inflight;
    int in_cb;
    /* borrowed strings are read only while no close has begun */
    pthread_mutex_t gmu;
    pthread_cond_t gcv;
    int readers;
    /* records */
    pthread_mutex_t mu;
    rec *recs;
    /* threads */
    pthread_barrier_t start;
    pthread_t workers_t[NWORKERS], poller_t, closer_t[2], mutator_t;
    int nclosers, has_mutator;
    size_t cache_size;
    int64_t staleness;
    int close_delay_us[2];
    int close_status[2];
    int64_t close_ms[2];
    int inflight_at_close, poller_in_poll, poller_blocked_at_close;
    long cb_ops; /* calls made inside callbacks, under mu */
    pthread_mutex_t dmu;
    pthread_cond_t dcv;
    int done_workers, done_closers, poller_done, mutator_done;
    int patches, patch_failures;
    /* dead handles (released to zero before the workers start) */
    tether_object *dead[NRECORDS];
    int hot[NWORKERS * NSLOTS]; /* the records the workers start with */
    int ndead;
    worker w[NWORKERS];
    long v[NV];
    int64_t t_start;
    int stop;
};

static pthread_mutex_t vmu = PTHREAD_MUTEX_INITIALIZER;
static int vprinted;
static int late_callbacks;
static ancient ancients[MAXANCIENT];
static int nancient;
static uint64_t ancient_rng = 12345;
static pthread_mutex_t amu = PTHREAD_MUTEX_INITIALIZER;

static const char *const sorts[] = {NULL, "n", "-n", "label", "-label,n"};
static const char *const obs_keys[] = {"label", "labelPeek", "nPeek", "label"};

static void violation(round *r, int cat, const char *fmt, ...)
{
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* keep the log readable: a string from the library may be garbage */
    {
        char *q;
        for (q = buf; *q; q++)
            if ((unsigned char)*q < 32 || (unsigned char)*q > 126)
                *q = '?';
    }
    pthread_mutex_lock(&vmu);
    r->v[cat]++;
    if (r->v[cat] <= 3 && vprinted < 400) {
        vprinted++;
        printf("   ! round %d (%s, seed %llu) [%s]: %s\n", r->index, r->mode_name,
               (unsigned long long)run_seed, vnames[cat], buf);
    }
    pthread_mutex_unlock(&vmu);
}

static int closing_now(round *r) { return aload(&r->closing); }
static int closed_now(round *r) { return aload(&r->closed); }

/* Checks a status: with the close returned before the call, exactly
 * TETHER_E_HANDLE; else one of `allowed`, or TETHER_E_HANDLE if a close has
 * begun by now (the call raced it). A failure must come with a message. */
static int expect_(actor *a, const char *op, unsigned allowed)
{
    const char *m = tether_errmsg();
    char msg[256];
    int s = a->s, ok;
    snprintf(msg, sizeof msg, "%s", m ? m : "(NULL)");
    a->ops++;
    if (a->closed_before)
        a->post_ops++;
    if (s > 0 || s < -31)
        ok = 0;
    else if (a->closed_before)
        ok = s == TETHER_E_HANDLE;
    else
        ok = (allowed & M(s)) || (s == TETHER_E_HANDLE && closing_now(a->r));
    if (!ok)
        violation(a->r, V_STATUS, "%s: %s gave %s (%d)%s; errmsg \"%s\"", a->name, op, tether_errstr(s), s,
                  a->closed_before ? ", called after the close returned: expected TETHER_E_HANDLE" : "", msg);
    else if (s != TETHER_OK && (!m || !m[0]))
        violation(a->r, V_STATUS, "%s: %s gave %s with an empty tether_errmsg", a->name, op, tether_errstr(s));
    return s;
}

#define EXPECT(a, op, allowed, expr)                                                              \
    (aadd(&(a)->r->inflight, 1), (a)->closed_before = closed_now((a)->r), (a)->s = (expr),         \
     aadd(&(a)->r->inflight, -1), expect_((a), (op), (allowed)))

/* Borrowed strings live until the context closes: read them only inside a
 * section no close can begin in. 1 if entered. */
static int guard_enter(round *r)
{
    int ok;
    pthread_mutex_lock(&r->gmu);
    ok = !r->closing;
    if (ok)
        r->readers++;
    pthread_mutex_unlock(&r->gmu);
    return ok;
}

static void guard_leave(round *r)
{
    pthread_mutex_lock(&r->gmu);
    r->readers--;
    pthread_cond_broadcast(&r->gcv);
    pthread_mutex_unlock(&r->gmu);
}

static void begin_close(round *r)
{
    pthread_mutex_lock(&r->gmu);
    astore(&r->closing, 1);
    while (r->readers > 0)
        pthread_cond_wait(&r->gcv, &r->gmu);
    pthread_mutex_unlock(&r->gmu);
}

static void add_ancient(int kind, void *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&amu);
    if (nancient < MAXANCIENT) {
        ancients[nancient].kind = kind;
        ancients[nancient].h = h;
        nancient++;
    } else {
        int i = (int)(splitmix(&ancient_rng) % MAXANCIENT);
        ancients[i].kind = kind;
        ancients[i].h = h;
    }
    pthread_mutex_unlock(&amu);
}

/* ------------------------------------------------------------ value checks */

static int parse_num(const char *id)
{
    if (!id || id[0] != 'i')
        return -1;
    return atoi(id + 1);
}

/* A value of "n" or "label" of record `num` (num < 0: unknown, only the type
 * and form are checked). Returns the record number it shows, or -1. */
static int check_value(round *r, const char *who, const char *key, const tether_value *v, int num)
{
    int shown = -1;
    if (strncmp(key, "n", 1) == 0 && (key[1] == '\0' || strcmp(key, "nPeek") == 0)) {
        if (v->type != TETHER_TYPE_INTEGER)
            violation(r, V_VALUE, "%s: \"n\" has type %d, not INTEGER", who, (int)v->type);
        else
            shown = (int)v->integer;
    } else {
        int k = -1, len = 0;
        if (v->type != TETHER_TYPE_TEXT || !v->text)
            violation(r, V_VALUE, "%s: \"label\" has type %d, not TEXT", who, (int)v->type);
        else if (sscanf(v->text, "record %d%n", &k, &len) != 1 || (v->text[len] != '\0' && v->text[len] != ' ') ||
                 strlen(v->text) != v->length)
            violation(r, V_VALUE, "%s: \"label\" is \"%.80s\" (length %zu)", who, v->text, v->length);
        else
            shown = k;
    }
    if (shown >= 0 && num >= 0 && shown != num)
        violation(r, V_VALUE, "%s: %s of record %d says %d", who, key, num, shown);
    return shown;
}

/* ------------------------------------------------------------ callbacks */

static void cb_enter(round *r, const char *what)
{
    int n = aadd(&r->in_cb, 1), role = get_role();
    if (n != 1)
        violation(r, V_CONCURRENT, "%s callback: %d callbacks of the context running at once", what, n);
    if (r->mode == TETHER_DELIVER_THREAD ? role != ROLE_NONE : (role != ROLE_POLLER && role != ROLE_CLOSER))
        violation(r, V_THREAD, "%s callback on a thread of role %d in %s mode", what, role, r->mode_name);
    if (closed_now(r))
        violation(r, V_AFTER_CLOSE, "%s callback began after tether_context_close returned", what);
}

static void cb_leave(round *r) { aadd(&r->in_cb, -1); }

/* Close and poll from inside a callback: BUSY, the context stays open. */
static void try_from_callback(actor *a, rec *rc)
{
    round *r = a->r;
    unsigned k = rnd(&rc->rng, 40);
    if (k == 0)
        EXPECT(a, "tether_context_close in a callback", M(TETHER_E_BUSY), tether_context_close(r->ctx));
    else if (k == 1)
        EXPECT(a, "tether_context_poll in a callback",
               r->mode == TETHER_DELIVER_POLL ? M(TETHER_E_BUSY) : (M(TETHER_E_BUSY) | M(TETHER_E_MISUSE)),
               tether_context_poll(r->ctx, 0, NULL));
}

static void fetch_cb(tether_task *task, tether_phase phase, int status, const char *message,
                     tether_results *results, void *userdata)
{
    rec *rc = userdata;
    round *r;
    worker *w;
    actor a;
    size_t n = 0;
    int keep = 0, closing_seen;
    if (aload(&rc->retired)) {
        aadd(&late_callbacks, 1);
        return;
    }
    r = rc->r;
    w = rc->w;
    cb_enter(r, "fetch");
    pthread_mutex_lock(&r->mu);
    rc->entered++;
    pthread_mutex_unlock(&r->mu);
    memset(&a, 0, sizeof a);
    a.r = r;
    snprintf(a.name, sizeof a.name, "fetch callback (w%d)", w->id);

    if (message == NULL || (status == TETHER_OK && message[0] != '\0'))
        violation(r, V_STATUS, "fetch callback: message %s with status %s", message ? "not empty" : "NULL",
                  tether_errstr(status));
    if (results == NULL) {
        violation(r, V_STATUS, "fetch callback: results is NULL");
    } else if (EXPECT(&a, "tether_results_count", M(TETHER_OK), tether_results_count(results, &n)) == TETHER_OK) {
        size_t want = rc->limit > 0 && rc->limit < NRECORDS ? (size_t)rc->limit : NRECORDS;
        tether_object *o = NULL;
        if ((status == TETHER_OK && n != want) || (status == TETHER_E_CANCELLED && n != 0))
            violation(r, V_VALUE, "fetch callback (%s, %s, limit %lld): %zu objects, expected %zu",
                      phase == TETHER_PHASE_FINAL ? "FINAL" : "CACHED", tether_errstr(status),
                      (long long)rc->limit, n, status == TETHER_OK ? want : 0);
        EXPECT(&a, "tether_results_object_at(count)", M(TETHER_E_NOT_FOUND), tether_results_object_at(results, n, &o));
        if (n > 0) {
            /* Sample the order: the first, the last, a few between. */
            size_t idx[6], i;
            int prev = -1, k;
            idx[0] = 0;
            for (k = 1; k < 5; k++)
                idx[k] = (n * (size_t)k) / 5;
            idx[5] = n - 1;
            for (k = 0; k < 6; k++) {
                tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
                int num = -1;
                i = idx[k];
                if (EXPECT(&a, "tether_results_object_at", M(TETHER_OK), tether_results_object_at(results, i, &o)) !=
                    TETHER_OK)
                    break;
                if (guard_enter(r)) {
                    const char *id = NULL;
                    if (EXPECT(&a, "tether_object_id", M(TETHER_OK), tether_object_id(o, &id)) == TETHER_OK)
                        num = parse_num(id);
                    guard_leave(r);
                }
                if (EXPECT(&a, "tether_object_peek(n)", M(TETHER_OK), tether_object_peek(o, "n", &v)) == TETHER_OK) {
                    int got = check_value(r, a.name, "n", &v, num);
                    if (sorts[rc->sort] && strcmp(sorts[rc->sort], "n") == 0 && got >= 0 && got < prev)
                        violation(r, V_VALUE, "fetch sorted by n: %d after %d", got, prev);
                    if (sorts[rc->sort] && strcmp(sorts[rc->sort], "-n") == 0 && prev >= 0 && got > prev)
                        violation(r, V_VALUE, "fetch sorted by -n: %d after %d", got, prev);
                    prev = got;
                    /* Now and then retain one for the worker. */
                    if (k == 2 && got >= 0 && rnd(&rc->rng, 4) == 0 &&
                        EXPECT(&a, "tether_object_retain (callback)", M(TETHER_OK), tether_object_retain(o)) ==
                            TETHER_OK) {
                        int queued = 0;
                        pthread_mutex_lock(&w->kmu);
                        if (w->ninbox < MAXINBOX) {
                            w->inbox[w->ninbox].h = o;
                            w->inbox[w->ninbox].num = got;
                            w->ninbox++;
                            queued = 1;
                        }
                        pthread_mutex_unlock(&w->kmu);
                        if (!queued)
                            EXPECT(&a, "tether_object_free (callback)", M(TETHER_OK), tether_object_free(o));
                    }
                }
                tether_value_free(&v);
            }
        }
    }
    try_from_callback(&a, rc);
    if (results) {
        if (phase == TETHER_PHASE_FINAL && rnd(&rc->rng, 4) == 0) {
            pthread_mutex_lock(&w->kmu);
            if (w->nkept < MAXKEPT) {
                w->kept[w->nkept++] = results;
                keep = 1;
            }
            pthread_mutex_unlock(&w->kmu);
        }
        if (!keep)
            EXPECT(&a, "tether_results_free (callback)", M(TETHER_OK), tether_results_free(results));
    }

    closing_seen = closing_now(r);
    pthread_mutex_lock(&r->mu);
    r->cb_ops += a.ops;
    rc->calls++;
    if (!rc->first_task)
        rc->first_task = task;
    else if (rc->first_task != task)
        violation(r, V_ORDER, "fetch callback with another task pointer");
    if (rc->finals > 0) {
        rc->after_final++;
        violation(r, V_ORDER, "fetch callback (%s) after the FINAL one", tether_errstr(status));
    }
    if (rc->cancel_returned && !(phase == TETHER_PHASE_FINAL && status == TETHER_E_CANCELLED))
        violation(r, V_ORDER, "fetch callback (phase %d, %s) after tether_task_cancel returned", (int)phase,
                  tether_errstr(status));
    if (phase == TETHER_PHASE_CACHED) {
        rc->cached++;
        if (status != TETHER_OK || rc->policy != TETHER_POLICY_CACHE_THEN_SERVER || rc->cached > 1)
            violation(r, V_ORDER, "CACHED callback #%d with %s for policy %d", rc->cached, tether_errstr(status),
                      (int)rc->policy);
    } else if (phase == TETHER_PHASE_FINAL) {
        rc->finals++;
        if (rc->finals == 1) {
            rc->final_status = status;
            rc->final_while_closing = closing_seen;
            rc->final_ms = tu_now_ms();
            rc->final_role = get_role();
            w->outstanding--;
        }
    } else {
        violation(r, V_ORDER, "fetch callback with phase %d", (int)phase);
    }
    pthread_mutex_unlock(&r->mu);
    cb_leave(r);
}

static void obs_cb(tether_object *obj, const char *key, int status, void *userdata)
{
    rec *rc = userdata;
    round *r;
    actor a;
    int closing_seen;
    if (aload(&rc->retired)) {
        aadd(&late_callbacks, 1);
        return;
    }
    r = rc->r;
    cb_enter(r, "observer");
    memset(&a, 0, sizeof a);
    a.r = r;
    snprintf(a.name, sizeof a.name, "observer callback (w%d)", rc->w->id);
    if (obj != rc->obj)
        violation(r, V_IDENTITY, "observer callback for object %p, observed %p", (void *)obj, (void *)rc->obj);
    if (!key || strcmp(key, rc->key) != 0)
        violation(r, V_VALUE, "observer callback with key \"%s\", observed \"%s\"", key ? key : "(NULL)", rc->key);
    if (status == TETHER_OK) {
        tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
        const char *attr = rc->key[0] == 'n' ? "n" : "label";
        if (EXPECT(&a, "tether_object_peek (observer callback)", M(TETHER_OK), tether_object_peek(obj, attr, &v)) ==
            TETHER_OK)
            check_value(r, a.name, attr, &v, -1);
        tether_value_free(&v);
        try_from_callback(&a, rc);
    }
    closing_seen = closing_now(r);
    pthread_mutex_lock(&r->mu);
    r->cb_ops += a.ops;
    rc->calls++;
    if (rc->finals > 0) {
        rc->after_final++;
        violation(r, V_ORDER, "observer callback (%s) after its CANCELLED one", tether_errstr(status));
    }
    if (rc->removed && status != TETHER_E_CANCELLED)
        violation(r, V_ORDER, "observer callback (%s) after tether_observer_cancel returned", tether_errstr(status));
    if (status == TETHER_E_CANCELLED) {
        rc->finals++;
        if (rc->finals == 1) {
            rc->final_status = status;
            rc->final_while_closing = closing_seen;
        }
    } else if (status == TETHER_OK) {
        rc->changes++;
    } else {
        rc->errors++;
        /* A refresh failed: the server here is healthy, so only a close
         * ending a refresh could explain it. */
        if (!closing_seen || !(status == TETHER_E_NETWORK || status == TETHER_E_SERVER ||
                               status == TETHER_E_PROTOCOL || status == TETHER_E_CANCELLED))
            violation(r, V_STATUS, "observer callback with %s%s", tether_errstr(status),
                      closing_seen ? "" : " (no close begun, server healthy)");
    }
    pthread_mutex_unlock(&r->mu);
    cb_leave(r);
}

/* ------------------------------------------------------------ records */

static rec *new_rec(round *r, worker *w, int kind)
{
    rec *rc = calloc(1, sizeof *rc);
    rc->kind = kind;
    rc->r = r;
    rc->w = w;
    rc->start_status = 1;
    rc->cancel_status = 1;
    rc->final_status = 1;
    rc->remove_status = 1;
    rc->rng = splitmix(&w->rng);
    pthread_mutex_lock(&r->mu);
    rc->next = r->recs;
    r->recs = rc;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* ------------------------------------------------------------ worker */

static void remember(worker *w, tether_object *h)
{
    int i;
    for (i = 0; i < w->nseen; i++)
        if (w->seen[i] == h)
            return;
    if (w->nseen < MAXSEEN)
        w->seen[w->nseen++] = h;
}

static void add_ref(worker *w, tether_object *h, int num)
{
    int i;
    remember(w, h);
    for (i = 0; i < w->nslots; i++) {
        if (w->slots[i].num != num)
            continue;
        if (w->slots[i].h == h) {
            w->slots[i].refs++;
            return;
        }
        violation(w->a.r, V_IDENTITY, "w%d: record %d has handle %p while %p is held", w->id, num, (void *)h,
                  (void *)w->slots[i].h);
    }
    if (w->nslots < MAXSLOTS) {
        w->slots[w->nslots].h = h;
        w->slots[w->nslots].num = num;
        w->slots[w->nslots].refs = 1;
        w->nslots++;
    } else {
        EXPECT(&w->a, "tether_object_free (no room)", M(TETHER_OK), tether_object_free(h));
    }
}

static slot *pick_slot(worker *w)
{
    return w->nslots ? &w->slots[rnd(&w->rng, (unsigned)w->nslots)] : NULL;
}

static void drop_slot(worker *w, slot *s)
{
    *s = w->slots[--w->nslots];
}

static void op_read(worker *w, int get)
{
    round *r = w->a.r;
    slot *s = pick_slot(w);
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    unsigned k = rnd(&w->rng, 6);
    const char *key = k == 0 || k == 1 ? "n" : k == 2 || k == 3 ? "label" : "nope";
    if (!s)
        return;
    if (k == 5) {
        /* by code: n's code, or one no attribute has */
        int code = rnd(&w->rng, 2) ? r->code_n : 987654;
        int st = get ? EXPECT(&w->a, "tether_object_get_code", code == r->code_n ? M(TETHER_OK) : M(TETHER_E_NOT_FOUND),
                              tether_object_get_code(s->h, code, &v))
                     : EXPECT(&w->a, "tether_object_peek_code", code == r->code_n ? M(TETHER_OK) : M(TETHER_E_NOT_FOUND),
                              tether_object_peek_code(s->h, code, &v));
        if (st == TETHER_OK)
            check_value(r, w->a.name, "n", &v, s->num);
    } else {
        unsigned allowed = strcmp(key, "nope") == 0 ? M(TETHER_E_NOT_FOUND) : M(TETHER_OK);
        int st = get ? EXPECT(&w->a, "tether_object_get", allowed, tether_object_get(s->h, key, &v))
                     : EXPECT(&w->a, "tether_object_peek", allowed, tether_object_peek(s->h, key, &v));
        if (st == TETHER_OK)
            check_value(r, w->a.name, key, &v, s->num);
    }
    tether_value_free(&v);
    tether_value_free(&v); /* twice is safe */
}

static void op_object_meta(worker *w)
{
    round *r = w->a.r;
    slot *s = pick_slot(w);
    int64_t ver = 0;
    tether_entity *e = NULL;
    int code = 0;
    if (!s)
        return;
    if (EXPECT(&w->a, "tether_object_version", M(TETHER_OK), tether_object_version(s->h, &ver)) == TETHER_OK &&
        ver <= 0)
        violation(r, V_VALUE, "w%d: version %lld", w->id, (long long)ver);
    if (EXPECT(&w->a, "tether_object_entity", M(TETHER_OK), tether_object_entity(s->h, &e)) == TETHER_OK &&
        EXPECT(&w->a, "tether_entity_code", M(TETHER_OK), tether_entity_code(e, &code)) == TETHER_OK &&
        code != r->ent_code)
        violation(r, V_VALUE, "w%d: object's entity code %d, expected %d", w->id, code, r->ent_code);
    if (guard_enter(r)) {
        const char *id = NULL;
        if (EXPECT(&w->a, "tether_object_id", M(TETHER_OK), tether_object_id(s->h, &id)) == TETHER_OK &&
            parse_num(id) != s->num)
            violation(r, V_VALUE, "w%d: object id \"%s\", expected record %d", w->id, id ? id : "(NULL)", s->num);
        guard_leave(r);
    } else {
        const char *id = NULL;
        EXPECT(&w->a, "tether_object_id", M(TETHER_OK), tether_object_id(s->h, &id));
    }
}

static void op_model(worker *w)
{
    round *r = w->a.r;
    tether_context *ctx = r->ctx;
    size_t n = 0, idx = 0;
    tether_entity *e = NULL;
    int i = 0, code = 0;
    unsigned ops = 0;
    int64_t live = 0;
    switch (rnd(&w->rng, 10)) {
    case 0:
        if (EXPECT(&w->a, "tether_context_entity_count", M(TETHER_OK), tether_context_entity_count(ctx, &n)) ==
                TETHER_OK &&
            n != 1)
            violation(r, V_VALUE, "entity count %zu", n);
        EXPECT(&w->a, "tether_context_entity_at(0)", M(TETHER_OK), tether_context_entity_at(ctx, 0, &e));
        EXPECT(&w->a, "tether_context_entity_at(1)", M(TETHER_E_NOT_FOUND), tether_context_entity_at(ctx, 1, &e));
        break;
    case 1:
        if (EXPECT(&w->a, "tether_context_entity", M(TETHER_OK), tether_context_entity(ctx, "items", &e)) ==
                TETHER_OK &&
            EXPECT(&w->a, "tether_entity_code", M(TETHER_OK), tether_entity_code(e, &code)) == TETHER_OK &&
            code != r->ent_code)
            violation(r, V_VALUE, "entity code %d, expected %d", code, r->ent_code);
        EXPECT(&w->a, "tether_context_entity(nosuch)", M(TETHER_E_NOT_FOUND), tether_context_entity(ctx, "nosuch", &e));
        break;
    case 2:
        if (guard_enter(r)) {
            const char *name = NULL, *route = NULL;
            if (EXPECT(&w->a, "tether_entity_name", M(TETHER_OK), tether_entity_name(r->ent, &name)) == TETHER_OK &&
                (!name || strcmp(name, "items") != 0))
                violation(r, V_VALUE, "entity name \"%s\"", name ? name : "(NULL)");
            if (EXPECT(&w->a, "tether_entity_route", M(TETHER_OK), tether_entity_route(r->ent, &route)) ==
                    TETHER_OK &&
                (!route || !strstr(route, "/collections/items/records")))
                violation(r, V_VALUE, "entity route \"%s\"", route ? route : "(NULL)");
            guard_leave(r);
        } else {
            const char *name = NULL;
            EXPECT(&w->a, "tether_entity_name", M(TETHER_OK), tether_entity_name(r->ent, &name));
        }
        break;
    case 3:
        EXPECT(&w->a, "tether_entity_operations", M(TETHER_OK), tether_entity_operations(r->ent, &ops));
        if (EXPECT(&w->a, "tether_entity_attribute_count", M(TETHER_OK), tether_entity_attribute_count(r->ent, &n)) ==
                TETHER_OK &&
            n != r->attr_count)
            violation(r, V_VALUE, "attribute count %zu, was %zu", n, r->attr_count);
        break;
    case 4:
        if (guard_enter(r)) {
            const char *name = NULL;
            tether_type t = TETHER_TYPE_NULL;
            unsigned flags = 0;
            idx = rnd(&w->rng, (unsigned)r->attr_count);
            if (EXPECT(&w->a, "tether_entity_attribute_at", M(TETHER_OK),
                       tether_entity_attribute_at(r->ent, idx, &name, &code, &t, &flags)) == TETHER_OK) {
                size_t back = 99;
                if (!name || !name[0])
                    violation(r, V_VALUE, "attribute %zu has no name", idx);
                else if (EXPECT(&w->a, "tether_entity_attribute_index", M(TETHER_OK),
                                tether_entity_attribute_index(r->ent, name, &back)) == TETHER_OK &&
                         back != idx)
                    violation(r, V_VALUE, "attribute \"%s\" at %zu, index says %zu", name, idx, back);
            }
            guard_leave(r);
        }
        EXPECT(&w->a, "tether_entity_attribute_at(past end)", M(TETHER_E_NOT_FOUND),
               tether_entity_attribute_at(r->ent, r->attr_count, NULL, NULL, NULL, NULL));
        break;
    case 5:
        if (EXPECT(&w->a, "tether_entity_attribute_index_by_code", M(TETHER_OK),
                   tether_entity_attribute_index_by_code(r->ent, r->code_n, &idx)) == TETHER_OK &&
            EXPECT(&w->a, "tether_entity_attribute_at", M(TETHER_OK),
                   tether_entity_attribute_at(r->ent, idx, NULL, &code, NULL, NULL)) == TETHER_OK &&
            code != r->code_n)
            violation(r, V_VALUE, "attribute by code %d has code %d", r->code_n, code);
        EXPECT(&w->a, "tether_entity_attribute_index(nope)", M(TETHER_E_NOT_FOUND),
               tether_entity_attribute_index(r->ent, "nope", &idx));
        break;
    case 6:
        if (EXPECT(&w->a, "tether_context_is_online", M(TETHER_OK), tether_context_is_online(ctx, &i)) == TETHER_OK &&
            i != 1)
            violation(r, V_VALUE, "is_online %d", i);
        EXPECT(&w->a, "tether_context_diagnostic_count", M(TETHER_OK), tether_context_diagnostic_count(ctx, &n));
        break;
    case 7:
        EXPECT(&w->a, "tether_context_fd", r->mode == TETHER_DELIVER_POLL ? M(TETHER_OK) : M(TETHER_E_MISUSE),
               tether_context_fd(ctx, &i));
        if (r->mode == TETHER_DELIVER_THREAD)
            EXPECT(&w->a, "tether_context_poll (THREAD mode)", M(TETHER_E_MISUSE), tether_context_poll(ctx, 0, NULL));
        break;
    case 8:
        /* process-wide: never a handle error */
        w->a.closed_before = 0;
        w->a.s = tether_debug_count((tether_debug_counter)(1 + rnd(&w->rng, 7)), &live);
        expect_(&w->a, "tether_debug_count", M(TETHER_OK));
        break;
    default: {
        /* handles of earlier rounds are dead for good */
        ancient an;
        int have;
        pthread_mutex_lock(&amu);
        have = nancient > 0;
        if (have)
            an = ancients[rnd(&w->rng, (unsigned)nancient)];
        pthread_mutex_unlock(&amu);
        if (!have)
            break;
        switch (an.kind) {
        case 1:
            EXPECT(&w->a, "old context: tether_context_entity_count", M(TETHER_E_HANDLE),
                   tether_context_entity_count(an.h, &n));
            break;
        case 2:
            EXPECT(&w->a, "old entity: tether_entity_code", M(TETHER_E_HANDLE), tether_entity_code(an.h, &code));
            break;
        case 3:
            EXPECT(&w->a, "old object: tether_object_retain", M(TETHER_E_HANDLE), tether_object_retain(an.h));
            break;
        case 4:
            EXPECT(&w->a, "old task: tether_task_cancel", M(TETHER_E_HANDLE), tether_task_cancel(an.h));
            break;
        case 5:
            EXPECT(&w->a, "old observer: tether_observer_cancel", M(TETHER_E_HANDLE), tether_observer_cancel(an.h));
            break;
        default:
            EXPECT(&w->a, "old results: tether_results_count", M(TETHER_E_HANDLE), tether_results_count(an.h, &n));
            break;
        }
    }
    }
}

static void op_retain_release(worker *w)
{
    slot *s = pick_slot(w);
    if (!s)
        return;
    if (s->refs < 3 && rnd(&w->rng, 2)) {
        if (EXPECT(&w->a, "tether_object_retain", M(TETHER_OK), tether_object_retain(s->h)) == TETHER_OK)
            s->refs++;
    } else {
        EXPECT(&w->a, "tether_object_free", M(TETHER_OK), tether_object_free(s->h));
        /* A release that raced the close did nothing, but the close dropped it. */
        if (--s->refs == 0) {
            w->released_last++;
            drop_slot(w, s);
        }
    }
}

static void op_reacquire(worker *w)
{
    round *r = w->a.r;
    int num = (int)rnd(&w->rng, NRECORDS);
    char id[16];
    tether_object *h = NULL;
    snprintf(id, sizeof id, "i%04d", num);
    if (rnd(&w->rng, 16) == 0) {
        EXPECT(&w->a, "tether_context_object(nosuch)", M(TETHER_E_NOT_FOUND),
               tether_context_object(r->ctx, "nosuch", id, &h));
        return;
    }
    if (EXPECT(&w->a, "tether_context_object", M(TETHER_OK), tether_context_object(r->ctx, "items", id, &h)) ==
        TETHER_OK) {
        w->reacquires++;
        add_ref(w, h, num);
    }
}

static void op_observe(worker *w)
{
    slot *s = pick_slot(w);
    rec *rc;
    tether_observer *ob = NULL;
    int with_out;
    if (!s || w->nobs >= MAXOBS)
        return;
    rc = new_rec(w->a.r, w, REC_OBS);
    rc->obj = s->h;
    snprintf(rc->key, sizeof rc->key, "%s", obs_keys[rnd(&w->rng, 4)]);
    with_out = rnd(&w->rng, 8) != 0;
    rc->start_status = EXPECT(&w->a, "tether_object_observe", M(TETHER_OK),
                              tether_object_observe(s->h, rc->key, obs_cb, rc, with_out ? &ob : NULL));
    rc->start_raced = closing_now(w->a.r) && !w->a.closed_before;
    w->observes++;
    if (rc->start_status == TETHER_OK && with_out) {
        rc->handle = ob;
        w->obs[w->nobs++] = rc;
    }
}

static void op_remove(worker *w)
{
    rec *rc;
    int i;
    if (w->removed_obs && rnd(&w->rng, 4) == 0) {
        EXPECT(&w->a, "tether_observer_cancel (second time)", M(TETHER_E_HANDLE),
               tether_observer_cancel(w->removed_obs->handle));
        w->removed_obs = NULL;
        return;
    }
    if (!w->nobs)
        return;
    i = (int)rnd(&w->rng, (unsigned)w->nobs);
    rc = w->obs[i];
    w->obs[i] = w->obs[--w->nobs];
    rc->remove_status = EXPECT(&w->a, "tether_observer_cancel", M(TETHER_OK), tether_observer_cancel(rc->handle));
    rc->remove_raced = closing_now(w->a.r) && !w->a.closed_before;
    if (rc->remove_status == TETHER_OK) {
        pthread_mutex_lock(&w->a.r->mu);
        rc->removed = 1;
        pthread_mutex_unlock(&w->a.r->mu);
        w->removed_obs = rc;
    }
    w->removes++;
}

static void op_fetch(worker *w)
{
    round *r = w->a.r;
    tether_fetch_options o;
    tether_task *task = NULL;
    rec *rc;
    unsigned allowed = M(TETHER_OK), k;
    int busy, with_out;
    pthread_mutex_lock(&r->mu);
    busy = w->outstanding >= MAXOUT;
    pthread_mutex_unlock(&r->mu);
    if (busy)
        return;
    rc = new_rec(r, w, REC_FETCH);
    tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
    o.entity = "items";
    rc->policy = o.policy = (tether_cache_policy)rnd(&w->rng, 4);
    k = rnd(&w->rng, 4);
    rc->limit = o.limit = k == 0 ? 0 : k == 1 ? 10 : k == 2 ? 50 : 0;
    rc->sort = (int)rnd(&w->rng, 5);
    o.sort = sorts[rc->sort];
    k = rnd(&w->rng, 30);
    if (k == 0) {
        o.sort = "nosuch";
        allowed = M(TETHER_E_INVALID);
    } else if (k == 1) {
        o.entity = "nosuch";
        allowed = M(TETHER_E_NOT_FOUND);
    }
    with_out = rnd(&w->rng, 8) != 0;
    pthread_mutex_lock(&r->mu);
    w->outstanding++; /* a FINAL may come before the start returns */
    pthread_mutex_unlock(&r->mu);
    rc->start_status = EXPECT(&w->a, "tether_fetch_start", allowed,
                              tether_fetch_start(r->ctx, &o, fetch_cb, rc, with_out ? &task : NULL));
    rc->start_raced = closing_now(r) && !w->a.closed_before;
    w->fetches++;
    pthread_mutex_lock(&r->mu);
    if (rc->start_status != TETHER_OK)
        w->outstanding--;
    pthread_mutex_unlock(&r->mu);
    if (rc->start_status == TETHER_OK && with_out) {
        rc->handle = task;
        if (w->ntasks < MAXTASKS)
            w->tasks[w->ntasks++] = rc;
    }
}

static void op_cancel(worker *w)
{
    round *r = w->a.r;
    rec *rc;
    int i, s, finals, entered;
    if (w->cancelled_task && rnd(&w->rng, 4) == 0) {
        EXPECT(&w->a, "tether_task_cancel (second time)", M(TETHER_E_HANDLE),
               tether_task_cancel(w->cancelled_task->handle));
        w->cancelled_task = NULL;
        return;
    }
    if (!w->ntasks)
        return;
    i = (int)rnd(&w->rng, (unsigned)w->ntasks);
    rc = w->tasks[i];
    w->tasks[i] = w->tasks[--w->ntasks];
    s = EXPECT(&w->a, "tether_task_cancel", M(TETHER_OK) | M(TETHER_E_HANDLE), tether_task_cancel(rc->handle));
    w->cancels++;
    pthread_mutex_lock(&r->mu);
    finals = rc->finals;
    entered = rc->entered - rc->calls; /* callbacks running right now */
    pthread_mutex_unlock(&r->mu);
    /* The header: TETHER_E_HANDLE also while the FINAL is under way (the
     * library may have begun delivering it before the callback is entered);
     * the task then ends as that FINAL says, which the round's end checks
     * (a FINAL that is not CANCELLED, exactly one). Recorded for that report. */
    if (s == TETHER_E_HANDLE && !w->a.closed_before && finals != 1 && !closing_now(r)) {
        pthread_mutex_lock(&r->mu);
        rc->early_handle = 1;
        rc->early_entered = entered;
        rc->early_handle_ms = tu_now_ms();
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_lock(&r->mu);
    if (rc->cancel_status == 1)
        rc->cancel_status = s;
    if (s == TETHER_OK)
        rc->cancel_returned = 1;
    pthread_mutex_unlock(&r->mu);
    /* (HANDLE: the FINAL callback has run and returned -- a cancel waits for
     * a callback in progress -- unless a close has begun: checked above.) */
    if (s == TETHER_OK)
        w->cancelled_task = rc;
}

static void op_kept(worker *w)
{
    round *r = w->a.r;
    tether_results *res = NULL;
    size_t n = 0;
    pthread_mutex_lock(&w->kmu);
    if (w->nkept)
        res = w->kept[--w->nkept];
    pthread_mutex_unlock(&w->kmu);
    if (!res)
        return;
    if (EXPECT(&w->a, "kept results: tether_results_count", M(TETHER_OK), tether_results_count(res, &n)) ==
            TETHER_OK &&
        n > 0) {
        tether_object *o = NULL;
        if (EXPECT(&w->a, "kept results: tether_results_object_at", M(TETHER_OK),
                   tether_results_object_at(res, rnd(&w->rng, (unsigned)n), &o)) == TETHER_OK) {
            tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
            if (EXPECT(&w->a, "kept results: tether_object_peek", M(TETHER_OK), tether_object_peek(o, "label", &v)) ==
                TETHER_OK)
                check_value(r, w->a.name, "label", &v, -1);
            tether_value_free(&v);
        }
    }
    EXPECT(&w->a, "kept results: tether_results_free", M(TETHER_OK), tether_results_free(res));
    EXPECT(&w->a, "kept results: tether_results_free (second)", M(TETHER_E_HANDLE), tether_results_free(res));
}

static void op_adopt(worker *w)
{
    inbox_item it;
    int have = 0;
    pthread_mutex_lock(&w->kmu);
    if (w->ninbox) {
        it = w->inbox[--w->ninbox];
        have = 1;
    }
    pthread_mutex_unlock(&w->kmu);
    if (have)
        add_ref(w, it.h, it.num);
}

static void op_dead(worker *w)
{
    round *r = w->a.r;
    tether_object *h;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    if (!r->ndead)
        return;
    h = r->dead[rnd(&w->rng, (unsigned)r->ndead)];
    switch (rnd(&w->rng, 4)) {
    case 0:
        EXPECT(&w->a, "dead object: tether_object_peek", M(TETHER_E_HANDLE), tether_object_peek(h, "n", &v));
        break;
    case 1:
        EXPECT(&w->a, "dead object: tether_object_retain", M(TETHER_E_HANDLE), tether_object_retain(h));
        break;
    case 2:
        EXPECT(&w->a, "dead object: tether_object_free", M(TETHER_E_HANDLE), tether_object_free(h));
        break;
    default: {
        rec *rc = new_rec(r, w, REC_OBS);
        rc->obj = h;
        snprintf(rc->key, sizeof rc->key, "n");
        rc->start_status = EXPECT(&w->a, "dead object: tether_object_observe", M(TETHER_E_HANDLE),
                                  tether_object_observe(h, "n", obs_cb, rc, NULL));
    }
    }
    tether_value_free(&v);
}

static void worker_step(worker *w)
{
    unsigned k = rnd(&w->rng, 100);
    if (k < 22)
        op_read(w, 0);
    else if (k < 32)
        op_read(w, 1);
    else if (k < 38)
        op_object_meta(w);
    else if (k < 46)
        op_model(w);
    else if (k < 53)
        op_observe(w);
    else if (k < 59)
        op_remove(w);
    else if (k < 66)
        op_fetch(w);
    else if (k < 70)
        op_cancel(w);
    else if (k < 80)
        op_retain_release(w);
    else if (k < 84)
        op_reacquire(w);
    else if (k < 89)
        op_kept(w);
    else if (k < 94)
        op_adopt(w);
    else
        op_dead(w);
    /* leave some CPU to the library's threads and the server */
    if (rnd(&w->rng, 6) == 0)
        sleep_us((long)rnd(&w->rng, 300));
}

/* After the close: everything held is dead; releasing is harmless. */
static void worker_sweep(worker *w)
{
    round *r = w->a.r;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    tether_task *task = NULL;
    tether_object *h = NULL;
    tether_fetch_options o;
    size_t n;
    int i, j, fd = -1;
    tether_entity *e = NULL;
    const char *name = NULL;
    rec *rc;
    for (i = 0; i < w->nseen; i++)
        EXPECT(&w->a, "after close: tether_object_peek", M(TETHER_E_HANDLE), tether_object_peek(w->seen[i], "n", &v));
    for (i = 0; i < w->nslots; i++)
        for (j = 0; j < w->slots[i].refs; j++)
            EXPECT(&w->a, "after close: tether_object_free", M(TETHER_E_HANDLE),
                   tether_object_free(w->slots[i].h));
    w->nslots = 0;
    for (i = 0; i < w->nobs; i++)
        EXPECT(&w->a, "after close: tether_observer_cancel", M(TETHER_E_HANDLE), tether_observer_cancel(w->obs[i]->handle));
    w->nobs = 0;
    for (i = 0; i < w->ntasks; i++)
        EXPECT(&w->a, "after close: tether_task_cancel", M(TETHER_E_HANDLE), tether_task_cancel(w->tasks[i]->handle));
    w->ntasks = 0;
    pthread_mutex_lock(&w->kmu);
    for (i = 0; i < w->nkept; i++) {
        EXPECT(&w->a, "after close: tether_results_count", M(TETHER_E_HANDLE), tether_results_count(w->kept[i], &n));
        EXPECT(&w->a, "after close: tether_results_free", M(TETHER_E_HANDLE), tether_results_free(w->kept[i]));
    }
    w->nkept = 0;
    for (i = 0; i < w->ninbox; i++)
        EXPECT(&w->a, "after close: tether_object_free (adopted)", M(TETHER_E_HANDLE),
               tether_object_free(w->inbox[i].h));
    w->ninbox = 0;
    pthread_mutex_unlock(&w->kmu);
    rc = new_rec(r, w, REC_FETCH);
    tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
    o.entity = "items";
    rc->start_status = EXPECT(&w->a, "after close: tether_fetch_start", M(TETHER_E_HANDLE),
                              tether_fetch_start(r->ctx, &o, fetch_cb, rc, &task));
    EXPECT(&w->a, "after close: tether_context_object", M(TETHER_E_HANDLE),
           tether_context_object(r->ctx, "items", "i0001", &h));
    EXPECT(&w->a, "after close: tether_context_entity", M(TETHER_E_HANDLE), tether_context_entity(r->ctx, "items", &e));
    EXPECT(&w->a, "after close: tether_entity_name", M(TETHER_E_HANDLE), tether_entity_name(r->ent, &name));
    EXPECT(&w->a, "after close: tether_context_fd", M(TETHER_E_HANDLE), tether_context_fd(r->ctx, &fd));
    EXPECT(&w->a, "after close: tether_context_poll", M(TETHER_E_HANDLE), tether_context_poll(r->ctx, 0, NULL));
    EXPECT(&w->a, "after close: tether_context_close", M(TETHER_E_HANDLE), tether_context_close(r->ctx));
    tether_value_free(&v);
}

static void thread_done(round *r, int *counter)
{
    pthread_mutex_lock(&r->dmu);
    (*counter)++;
    pthread_cond_broadcast(&r->dcv);
    pthread_mutex_unlock(&r->dmu);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    round *r = w->a.r;
    int post_target;
    int64_t seen_closed = 0;
    set_role(ROLE_WORKER);
    post_target = 40 + (int)rnd(&w->rng, 80);
    pthread_barrier_wait(&r->start);
    for (;;) {
        if (closed_now(r)) {
            if (!seen_closed)
                seen_closed = tu_now_ms();
            if (w->a.post_ops >= post_target && tu_now_ms() - seen_closed >= 3)
                break;
        }
        worker_step(w);
    }
    worker_sweep(w);
    thread_done(r, &r->done_workers);
    return NULL;
}

/* ------------------------------------------------------------ poller, closer, mutator */

static void *poller_main(void *arg)
{
    round *r = arg;
    actor a;
    uint64_t rng = r->seed ^ 0x5050;
    memset(&a, 0, sizeof a);
    a.r = r;
    snprintf(a.name, sizeof a.name, "poller");
    set_role(ROLE_POLLER);
    pthread_barrier_wait(&r->start);
    for (;;) {
        unsigned k = rnd(&rng, 10);
        int s;
        if (k < 6) {
            /* blocked, no limit: the close must wake it */
            astore(&r->poller_in_poll, 1);
            s = EXPECT(&a, "tether_context_poll(-1)", M(TETHER_OK), tether_context_poll(r->ctx, -1, NULL));
            astore(&r->poller_in_poll, 0);
        } else if (k < 8) {
            s = EXPECT(&a, "tether_context_poll(timeout)", M(TETHER_OK),
                       tether_context_poll(r->ctx, (int)rnd(&rng, 20), NULL));
        } else {
            /* the descriptor, then a poll that does not wait */
            if (!closing_now(r)) {
                struct pollfd pf;
                pf.fd = r->fd;
                pf.events = POLLIN;
                pf.revents = 0;
                poll(&pf, 1, 10);
            }
            s = EXPECT(&a, "tether_context_poll(0)", M(TETHER_OK), tether_context_poll(r->ctx, 0, NULL));
        }
        if (s != TETHER_OK || a.closed_before)
            break;
    }
    thread_done(r, &r->poller_done);
    return NULL;
}

typedef struct closer_arg {
    round *r;
    int i;
} closer_arg;

static void *closer_main(void *arg)
{
    closer_arg *c = arg;
    round *r = c->r;
    int64_t t0;
    set_role(ROLE_CLOSER);
    pthread_barrier_wait(&r->start);
    sleep_us(r->close_delay_us[c->i]);
    begin_close(r);
    if (c->i == 0) {
        int blocked = aload(&r->poller_in_poll);
        r->inflight_at_close = aload(&r->inflight) - blocked;
        r->poller_blocked_at_close = blocked;
    }
    t0 = tu_now_ms();
    r->close_status[c->i] = tether_context_close(r->ctx);
    r->close_ms[c->i] = tu_now_ms() - t0;
    if (r->close_status[c->i] == TETHER_OK)
        astore(&r->closed, 1);
    thread_done(r, &r->done_closers);
    return NULL;
}

static void *mutator_main(void *arg)
{
    round *r = arg;
    uint64_t rng = r->seed ^ 0x4d55;
    set_role(ROLE_MUTATOR);
    pthread_barrier_wait(&r->start);
    while (!closing_now(r)) {
        /* mostly records the workers hold, so observers and gets see changes */
        int num = rnd(&rng, 4) ? r->hot[rnd(&rng, NWORKERS * NSLOTS)] : (int)rnd(&rng, NRECORDS);
        char id[16], data[96];
        snprintf(id, sizeof id, "i%04d", num);
        snprintf(data, sizeof data, "{\"label\": \"record %d v%d\"}", num, r->index * 100 + r->patches);
        if (tu_patch_record(bucket, "items", id, data))
            r->patches++;
        else
            r->patch_failures++;
        sleep_us(1000 + (long)rnd(&rng, 3000));
    }
    thread_done(r, &r->mutator_done);
    return NULL;
}

/* ------------------------------------------------------------ setup */

typedef struct pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tether_object *h[NRECORDS];
    int num[NRECORDS];
    int n, finals, final_status, bad;
} pool;

static void setup_cb(tether_task *task, tether_phase phase, int status, const char *message, tether_results *results,
                     void *userdata)
{
    pool *p = userdata;
    size_t n = 0, i;
    (void)task;
    (void)message;
    if (phase == TETHER_PHASE_FINAL && status == TETHER_OK && tether_results_count(results, &n) == TETHER_OK) {
        for (i = 0; i < n && i < NRECORDS; i++) {
            tether_object *o = NULL;
            const char *id = NULL;
            if (tether_results_object_at(results, i, &o) != TETHER_OK || tether_object_retain(o) != TETHER_OK ||
                tether_object_id(o, &id) != TETHER_OK) {
                p->bad++;
                continue;
            }
            pthread_mutex_lock(&p->mu);
            p->h[p->n] = o;
            p->num[p->n] = parse_num(id);
            p->n++;
            pthread_mutex_unlock(&p->mu);
        }
    }
    if (tether_results_free(results) != TETHER_OK)
        p->bad++;
    pthread_mutex_lock(&p->mu);
    if (phase == TETHER_PHASE_FINAL) {
        p->finals++;
        p->final_status = status;
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Opens the round's context, fetches the collection and hands each worker
 * NSLOTS objects (one reference each); the others are released: dead. */
static int setup_round(round *r, uint64_t *rng)
{
    tether_context_options o;
    tether_kinto_options k;
    tether_fetch_options fo;
    pool *pp = calloc(1, sizeof *pp);
#define p (*pp)
    size_t idx = 0;
    int s, i, ok = 1;
    static const size_t cache_sizes[] = {0, 16, 1024};
    char used[NRECORDS];

    tu_options(&o, &k, tu_url(), bucket, store, r->mode, 10000);
    o.object_cache_size = cache_sizes[rnd(rng, 3)];
    o.staleness_ms = rnd(rng, 3) == 0 ? 200 : 0;
    r->cache_size = o.object_cache_size;
    r->staleness = o.staleness_ms;
    s = tether_context_open_kinto(&o, &k, &r->ctx);
    if (!tu_check(s == TETHER_OK, __FILE__, __LINE__, "tether_context_open_kinto", tether_errstr(s)))
        return 0;
    ok &= CHECK_OK(tether_context_entity(r->ctx, "items", &r->ent)) == TETHER_OK;
    ok &= CHECK_OK(tether_entity_code(r->ent, &r->ent_code)) == TETHER_OK;
    ok &= CHECK_OK(tether_entity_attribute_count(r->ent, &r->attr_count)) == TETHER_OK;
    ok &= CHECK_OK(tether_entity_attribute_index(r->ent, "n", &idx)) == TETHER_OK;
    ok &= CHECK_OK(tether_entity_attribute_at(r->ent, idx, NULL, &r->code_n, NULL, NULL)) == TETHER_OK;
    r->fd = -1;
    if (r->mode == TETHER_DELIVER_POLL)
        ok &= CHECK_OK(tether_context_fd(r->ctx, &r->fd)) == TETHER_OK;
    if (!ok)
        return 0;

    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    tether_fetch_options_init(&fo, TETHER_FETCH_OPTIONS_VERSION);
    fo.entity = "items";
    fo.policy = TETHER_POLICY_CACHE_ELSE_SERVER;
    if (CHECK_OK(tether_fetch_start(r->ctx, &fo, setup_cb, &p, NULL)) != TETHER_OK)
        return 0;
    {
        int64_t end = tu_now_ms() + TU_WAIT_MS;
        struct timespec dl = tu_deadline(TU_WAIT_MS);
        if (r->mode == TETHER_DELIVER_POLL) {
            while (tu_now_ms() < end) {
                pthread_mutex_lock(&p.mu);
                s = p.finals;
                pthread_mutex_unlock(&p.mu);
                if (s || tether_context_poll(r->ctx, 100, NULL) != TETHER_OK)
                    break;
            }
        } else {
            pthread_mutex_lock(&p.mu);
            while (p.finals == 0 && pthread_cond_timedwait(&p.cv, &p.mu, &dl) == 0) {
            }
            pthread_mutex_unlock(&p.mu);
        }
    }
    pthread_mutex_lock(&p.mu);
    ok = p.finals == 1;
    pthread_mutex_unlock(&p.mu);
    if (!tu_check(ok, __FILE__, __LINE__, "setup fetch: its FINAL came", NULL))
        return 0; /* the callback may still come: p is left alone (leaked on purpose) */
    CHECK_CODE(p.final_status, TETHER_OK);
    CHECK_INT(p.bad, 0);
    CHECK_INT(p.n, NRECORDS);
    if (p.n != NRECORDS)
        ok = 0;
    for (i = 0; i < p.n; i++)
        if (p.num[i] < 0 || p.num[i] >= NRECORDS)
            ok = 0;
    if (!CHECK(ok))
        return 0;

    memset(used, 0, sizeof used);
    for (i = 0; i < NWORKERS; i++) {
        worker *w = &r->w[i];
        int k;
        for (k = 0; k < NSLOTS; k++) {
            int j = (int)rnd(rng, (unsigned)p.n);
            used[j] = 1;
            if (CHECK_OK(tether_object_retain(p.h[j])) != TETHER_OK)
                return 0;
            add_ref(w, p.h[j], p.num[j]);
            r->hot[i * NSLOTS + k] = p.num[j];
        }
    }
    r->ndead = 0;
    for (i = 0; i < p.n; i++) {
        if (tether_object_free(p.h[i]) != TETHER_OK)
            ok = 0;
        if (!used[i])
            r->dead[r->ndead++] = p.h[i];
    }
    CHECK(ok);
    /* while held, the same handle for the same record */
    for (i = 0; i < 5; i++) {
        worker *w = &r->w[rnd(rng, NWORKERS)];
        slot *sl = &w->slots[rnd(rng, (unsigned)w->nslots)];
        tether_object *again = NULL;
        char id[16];
        snprintf(id, sizeof id, "i%04d", sl->num);
        if (CHECK_OK(tether_context_object(r->ctx, "items", id, &again)) == TETHER_OK) {
            CHECK(again == sl->h);
            CHECK_OK(tether_object_free(again));
        }
    }
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
#undef p
    free(pp);
    return ok;
}

/* ------------------------------------------------------------ counts */

/* Checks the counts are back at *base (waiting a little: a thread exits,
 * a task is freed, just after it says so). If not, the round fails and
 * *base becomes what is left, when `carry`: a leak is reported by the round
 * it happens in, not again by every later one. */
static int check_back_carry(tu_counts *base, const char *when, int carry);

/* What is open, for the report. */
static void print_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    printf("   open descriptors now:");
    while (d && (e = readdir(d)) != NULL) {
        char path[300], target[256];
        ssize_t n;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        n = readlink(path, target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
        printf(" %s->%s", e->d_name, target);
    }
    printf("\n");
    if (d)
        closedir(d);
}
static int check_back(const tu_counts *base, const char *when)
{
    tu_counts copy = *base;
    return check_back_carry(&copy, when, 0);
}

static int check_back_carry(tu_counts *base, const char *when, int carry)
{
    tu_counts now;
    char what[200], detail[128];
    int i, ok = 1;
    int64_t end = tu_now_ms() + SETTLE_MS;
    do {
        tu_snapshot(&now);
        if (tu_same_counts(&now, base))
            break;
        tu_sleep_ms(10);
    } while (tu_now_ms() < end);
    for (i = 1; i < TU_NDEBUG_COUNTERS; i++) {
        snprintf(what, sizeof what, "%s back after %s", tu_debug_counter_names[i], when);
        snprintf(detail, sizeof detail, "%lld, baseline %lld", (long long)now.counters[i], (long long)base->counters[i]);
        ok &= tu_check(now.counters[i] == base->counters[i], __FILE__, __LINE__, what, detail);
    }
    snprintf(what, sizeof what, "open descriptors back after %s", when);
    snprintf(detail, sizeof detail, "%d, baseline %d", now.fds, base->fds);
    ok &= tu_check(now.fds == base->fds, __FILE__, __LINE__, what, detail);
    snprintf(what, sizeof what, "process threads back after %s", when);
    snprintf(detail, sizeof detail, "%d, baseline %d", now.threads, base->threads);
    ok &= tu_check(now.threads == base->threads, __FILE__, __LINE__, what, detail);
    if (!ok)
        print_fds();
    if (!ok && carry)
        *base = now;
    return ok;
}

/* ------------------------------------------------------------ a round */

typedef struct totals {
    long rounds, ops, post_ops, fetches, fetch_ok, cancels, cancelled, ended_by_close, observes, removes,
        obs_by_close, changes, reacquires, released_last, callbacks, double_close, mid_flight, poller_blocked,
        patches, failed_rounds;
    int64_t close_ms_max, ms;
} totals;

static int wait_count(round *r, int *counter, int want, int timeout_ms)
{
    struct timespec dl = tu_deadline(timeout_ms);
    int got;
    pthread_mutex_lock(&r->dmu);
    while (*counter < want && pthread_cond_timedwait(&r->dcv, &r->dmu, &dl) == 0) {
    }
    got = *counter >= want;
    pthread_mutex_unlock(&r->dmu);
    return got;
}

static void hang(round *r, const char *what)
{
    printf("FAIL round %d (%s, seed %llu): %s -- a hang; aborting for a backtrace "
           "(gdb -batch -ex run -ex 'thread apply all bt' --args ...)\n",
           r->index, r->mode_name, (unsigned long long)run_seed, what);
    tu_check(0, __FILE__, __LINE__, what, "hang");
    fflush(stdout);
    abort();
}

static void free_round(round *r)
{
    rec *rc = r->recs, *next;
    int i;
    for (; rc; rc = next) {
        next = rc->next;
        free(rc);
    }
    for (i = 0; i < NWORKERS; i++)
        pthread_mutex_destroy(&r->w[i].kmu);
    pthread_mutex_destroy(&r->gmu);
    pthread_cond_destroy(&r->gcv);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->dmu);
    pthread_cond_destroy(&r->dcv);
    free(r);
}

/* Runs round `index` in `mode`; returns the round (kept, retired, until the
 * next one is done, so a late callback finds its record) or NULL. */
static round *run_round(int index, tether_delivery mode, tu_counts *base, totals *t)
{
    round *r = calloc(1, sizeof *r);
    uint64_t rng;
    closer_arg ca[2];
    int i, nthreads, ok, back;
    rec *rc;
    int64_t t0 = tu_now_ms();
    char title[96];

    r->index = index;
    r->mode = mode;
    r->mode_name = mode == TETHER_DELIVER_POLL ? "POLL" : "THREAD";
    rng = run_seed ^ ((uint64_t)index * 0x100000001B3ULL) ^ (mode == TETHER_DELIVER_POLL ? 0xABCDEF : 0);
    r->seed = splitmix(&rng);
    pthread_mutex_init(&r->gmu, NULL);
    pthread_cond_init(&r->gcv, NULL);
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->dmu, NULL);
    pthread_cond_init(&r->dcv, NULL);
    for (i = 0; i < NWORKERS; i++) {
        worker *w = &r->w[i];
        w->a.r = r;
        w->id = i;
        snprintf(w->a.name, sizeof w->a.name, "worker %d", i);
        w->rng = r->seed + (uint64_t)i * 7919;
        pthread_mutex_init(&w->kmu, NULL);
    }
    alarm(300); /* testutil's watchdog, re-armed for each round */
    if (!setup_round(r, &rng)) {
        printf("   round %d (%s): setup failed\n", index, r->mode_name);
        t->failed_rounds++;
        if (r->ctx)
            tether_context_close(r->ctx);
        return r;
    }

    r->nclosers = rnd(&rng, 4) == 0 ? 2 : 1;
    r->close_delay_us[0] = (int)rnd(&rng, CLOSE_MAX_US + 1);
    r->close_delay_us[1] = (int)rnd(&rng, CLOSE_MAX_US + 1);
    r->has_mutator = rnd(&rng, 2) == 0;
    if (force_closers == 2) { /* debugging aid: two closes about a millisecond apart */
        r->nclosers = 2;
        r->close_delay_us[1] = r->close_delay_us[0] + (int)rnd(&rng, 1000);
    } else if (force_closers == 1) { /* debugging aid: never two closes */
        r->nclosers = 1;
    }
    if (r->has_mutator) {
        /* Change, on the server, some records the workers hold: their first
         * refreshes bring new values, so observers are told during the round. */
        char ids[24][16], datas[24][96];
        const char *idp[24], *datap[24];
        for (i = 0; i < 24; i++) {
            int num = r->hot[rnd(&rng, NWORKERS * NSLOTS)];
            snprintf(ids[i], sizeof ids[i], "i%04d", num);
            snprintf(datas[i], sizeof datas[i], "{\"n\": %d, \"label\": \"record %d r%d\"}", num, num, index);
            idp[i] = ids[i];
            datap[i] = datas[i];
        }
        CHECK(tu_put_records(bucket, "items", idp, datap, 24));
    }
    nthreads = NWORKERS + r->nclosers + (mode == TETHER_DELIVER_POLL) + r->has_mutator + 1;
    pthread_barrier_init(&r->start, NULL, (unsigned)nthreads);
    for (i = 0; i < NWORKERS; i++)
        pthread_create(&r->workers_t[i], NULL, worker_main, &r->w[i]);
    for (i = 0; i < r->nclosers; i++) {
        ca[i].r = r;
        ca[i].i = i;
        pthread_create(&r->closer_t[i], NULL, closer_main, &ca[i]);
    }
    if (mode == TETHER_DELIVER_POLL)
        pthread_create(&r->poller_t, NULL, poller_main, r);
    if (r->has_mutator)
        pthread_create(&r->mutator_t, NULL, mutator_main, r);
    r->t_start = tu_now_ms();
    pthread_barrier_wait(&r->start);

    if (!wait_count(r, &r->done_closers, r->nclosers, ROUND_DEADLINE_MS))
        hang(r, "tether_context_close did not return");
    if (mode == TETHER_DELIVER_POLL && !wait_count(r, &r->poller_done, 1, 5000))
        hang(r, "the poller did not return from tether_context_poll after the close");
    if (!wait_count(r, &r->done_workers, NWORKERS, ROUND_DEADLINE_MS))
        hang(r, "a worker is stuck after the close");
    if (r->has_mutator && !wait_count(r, &r->mutator_done, 1, ROUND_DEADLINE_MS))
        hang(r, "the mutator is stuck");
    for (i = 0; i < NWORKERS; i++)
        pthread_join(r->workers_t[i], NULL);
    for (i = 0; i < r->nclosers; i++)
        pthread_join(r->closer_t[i], NULL);
    if (mode == TETHER_DELIVER_POLL)
        pthread_join(r->poller_t, NULL);
    if (r->has_mutator)
        pthread_join(r->mutator_t, NULL);
    pthread_barrier_destroy(&r->start);

    /* the close */
    {
        int oks = 0;
        for (i = 0; i < r->nclosers; i++) {
            if (r->close_status[i] == TETHER_OK)
                oks++;
            else if (r->close_status[i] != TETHER_E_HANDLE)
                violation(r, V_CLOSE, "closer %d: tether_context_close gave %s", i, tether_errstr(r->close_status[i]));
            if (r->close_ms[i] > 5000)
                violation(r, V_CLOSE, "closer %d: tether_context_close took %lld ms", i, (long long)r->close_ms[i]);
            if (r->close_ms[i] > t->close_ms_max)
                t->close_ms_max = r->close_ms[i];
        }
        if (oks != 1)
            violation(r, V_CLOSE, "%d of %d racing closes gave TETHER_OK (expected exactly one)", oks, r->nclosers);
        if (r->nclosers == 2)
            t->double_close++;
        if (r->inflight_at_close > 0)
            t->mid_flight++;
        if (r->poller_blocked_at_close)
            t->poller_blocked++;
    }

    /* every request: exactly one final */
    pthread_mutex_lock(&r->mu);
    for (rc = r->recs; rc; rc = rc->next) {
        t->callbacks += rc->calls;
        if (rc->start_status != TETHER_OK) {
            if (rc->calls != 0)
                violation(r, V_FINAL, "%s that failed to start (%s) got %d callbacks",
                          rc->kind == REC_FETCH ? "a fetch" : "an observer", tether_errstr(rc->start_status), rc->calls);
            continue;
        }
        if (rc->finals != 1)
            violation(r, V_FINAL, "%s (w%d%s%s) got %d final callbacks (%d calls)",
                      rc->kind == REC_FETCH ? "a fetch" : "an observer", rc->w->id,
                      rc->cancel_returned ? ", cancelled" : "", rc->removed ? ", removed" : "", rc->finals, rc->calls);
        if (rc->kind == REC_FETCH) {
            int st = rc->final_status;
            if (rc->finals >= 1) {
                if (rc->cancel_returned ? st != TETHER_E_CANCELLED
                                        : !(st == TETHER_OK || (st == TETHER_E_CANCELLED && rc->final_while_closing)))
                    violation(r, V_STATUS, "fetch (policy %d, limit %lld, %s) ended with %s",
                              (int)rc->policy, (long long)rc->limit,
                              rc->cancel_returned ? "cancelled" : rc->final_while_closing ? "close begun" : "not cancelled",
                              tether_errstr(st));
                if (st == TETHER_OK)
                    t->fetch_ok++;
                else if (rc->cancel_returned)
                    t->cancelled++;
                else
                    t->ended_by_close++;
            }
        } else {
            t->changes += rc->changes;
            if (rc->finals >= 1 && !rc->removed)
                t->obs_by_close++;
        }
    }
    pthread_mutex_unlock(&r->mu);
    for (i = 0; i < NWORKERS; i++) {
        worker *w = &r->w[i];
        t->ops += w->a.ops;
        t->post_ops += w->a.post_ops;
        t->fetches += w->fetches;
        t->cancels += w->cancels;
        t->observes += w->observes;
        t->removes += w->removes;
        t->reacquires += w->reacquires;
        t->released_last += w->released_last;
    }
    t->patches += r->patches;
    t->ops += r->cb_ops;
    snprintf(title, sizeof title, "round %d (%s)", index, r->mode_name);
    tu_check(r->patch_failures == 0, __FILE__, __LINE__, "server updates by the mutator", title);

    /* the context's handles, for later rounds: all dead for good */
    add_ancient(1, r->ctx);
    add_ancient(2, r->ent);
    if (r->ndead)
        add_ancient(3, r->dead[0]);
    if (r->w[0].nseen)
        add_ancient(3, r->w[0].seen[0]);
    for (rc = r->recs; rc; rc = rc->next)
        if (rc->handle) {
            add_ancient(rc->kind == REC_FETCH ? 4 : 5, rc->handle);
            break;
        }

    ok = 1;
    for (i = 0; i < NV; i++) {
        char what[200], detail[64];
        snprintf(what, sizeof what, "%s: %s", title, vnames[i]);
        snprintf(detail, sizeof detail, "%ld violations", r->v[i]);
        ok &= tu_check(r->v[i] == 0, __FILE__, __LINE__, what, detail);
    }
    {
        char what[200], detail[64];
        snprintf(what, sizeof what, "%s: no callback for an earlier round", title);
        snprintf(detail, sizeof detail, "%d late callbacks", aload(&late_callbacks));
        ok &= tu_check(aload(&late_callbacks) == 0, __FILE__, __LINE__, what, detail);
    }
    back = check_back_carry(base, title, 1);
    ok &= back;
    if (!back && getenv("TETHER_STRESS_STOP_ON_LEAK")) {
        printf("   tu_counts did not come back: stopping (TETHER_STRESS_STOP_ON_LEAK)\n");
        r->stop = 1;
    }
    if (!back) {
        int k;
        for (k = REC_FETCH; k <= REC_OBS; k++) {
            int raced_ok = 0, raced_handle = 0, raced_other = 0;
            for (rc = r->recs; rc; rc = rc->next) {
                if (rc->kind != k || !rc->start_raced)
                    continue;
                if (rc->start_status == TETHER_OK)
                    raced_ok++;
                else if (rc->start_status == TETHER_E_HANDLE)
                    raced_handle++;
                else
                    raced_other++;
            }
            printf("   %s calls that raced the close: %d gave TETHER_OK, %d TETHER_E_HANDLE, %d other\n",
                   k == REC_FETCH ? "tether_fetch_start" : "tether_object_observe", raced_ok, raced_handle, raced_other);
        }
        /* observers grouped by how they started and ended */
        {
            struct grp {
                int start, start_raced, remove, remove_raced, finals, fwc, n;
            } g[64];
            int ng = 0, j;
            for (rc = r->recs; rc; rc = rc->next) {
                struct grp x;
                if (rc->kind != REC_OBS)
                    continue;
                x.start = rc->start_status;
                x.start_raced = rc->start_raced;
                x.remove = rc->remove_status;
                x.remove_raced = rc->remove_raced;
                x.finals = rc->finals;
                x.fwc = rc->final_while_closing;
                for (j = 0; j < ng; j++)
                    if (g[j].start == x.start && g[j].start_raced == x.start_raced && g[j].remove == x.remove &&
                        g[j].remove_raced == x.remove_raced && g[j].finals == x.finals && g[j].fwc == x.fwc)
                        break;
                if (j == ng && ng < 64) {
                    x.n = 0;
                    g[ng++] = x;
                }
                if (j < 64)
                    g[j].n++;
            }
            for (j = 0; j < ng; j++)
                printf("   observers: %3d x observe %s%s, remove %s%s, %d finals%s\n", g[j].n,
                       tether_errstr(g[j].start), g[j].start_raced ? " (raced the close)" : "",
                       g[j].remove == 1 ? "never" : tether_errstr(g[j].remove),
                       g[j].remove_raced ? " (raced the close)" : "", g[j].finals,
                       g[j].fwc ? " (final with the close begun)" : "");
        }
    }
    if (!ok) {
        t->failed_rounds++;
        printf("   round %d (%s): %d closer(s) after %d/%d us, object cache %zu, staleness %lld ms, mutator %d, "
               "calls in flight at the close %d, poller in poll %d\n",
               index, r->mode_name, r->nclosers, r->close_delay_us[0], r->close_delay_us[1], r->cache_size,
               (long long)r->staleness, r->has_mutator, r->inflight_at_close, r->poller_blocked_at_close);
        printf("   round %d (%s) FAILED: repeat with TETHER_STRESS_SEED=%llu TETHER_STRESS_FIRST=%d "
               "TETHER_STRESS_ROUNDS=1 TETHER_STRESS_MODE=%s\n",
               index, r->mode_name, (unsigned long long)run_seed, index, mode == TETHER_DELIVER_POLL ? "poll" : "thread");
    }
    t->rounds++;
    t->ms += tu_now_ms() - t0;
    return r;
}

static void retire(round *r)
{
    rec *rc;
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    for (rc = r->recs; rc; rc = rc->next)
        astore(&rc->retired, 1);
    pthread_mutex_unlock(&r->mu);
}

static void run_mode(tether_delivery mode, int first, int rounds, int64_t budget_ms, tu_counts *base, round **prev)
{
    int64_t mode_start = tu_now_ms();
    totals t;
    long rss_early = -1, rss_late = -1;
    int i, early = first + (rounds >= 8 ? rounds / 4 : 0);
    if (budget_ms > 0 && rounds >= 8 && early > first + 5)
        early = first + 5; /* the budget may cut the run short */
    const char *name = mode == TETHER_DELIVER_POLL ? "POLL" : "THREAD";
    char title[160];

    memset(&t, 0, sizeof t);
    snprintf(title, sizeof title, "%s delivery: %d rounds, %d workers, close after 0-50 ms", name, rounds, NWORKERS);
    tu_section(title);
    for (i = first; i < first + rounds; i++) {
        round *r = run_round(i, mode, base, &t);
        /* the round before is over for good: a callback for it now is late */
        if (*prev)
            free_round(*prev);
        retire(r);
        *prev = r;
        if (r->stop)
            break;
        if (i == early)
            rss_early = tu_resident_bytes();
        if ((i - first) % 10 == 9 || i == first + rounds - 1)
            printf("   ... %d rounds, %ld calls so far, %lld ms\n", i - first + 1, t.ops, (long long)t.ms);
        if (budget_ms > 0 && tu_now_ms() - mode_start > budget_ms && i + 1 < first + rounds) {
            printf("   time budget of %lld ms spent after %d rounds (set TETHER_STRESS_ROUNDS to run them all)\n",
                   (long long)budget_ms, i - first + 1);
            rounds = i - first + 1;
            break;
        }
    }
    rss_late = tu_resident_bytes();
    printf("   %s: %ld rounds in %lld ms (%d failed); %ld library calls checked, %ld of them after the close;\n"
           "   %ld fetches started (%ld ended OK, %ld cancelled, %ld ended by the close), %ld cancels tried;\n"
           "   %ld observers (%ld removed, %ld ended by the close, %ld change callbacks); %ld callbacks in all;\n"
           "   %ld last references dropped, %ld objects got again; %ld server updates; %ld rounds with two closers;\n"
           "   closes with calls in flight: %ld of %ld; poller blocked in tether_context_poll at the close: %ld;\n"
           "   longest close %lld ms; resident %ld KiB after round %d, %ld KiB at the end\n",
           name, t.rounds, (long long)t.ms, (int)t.failed_rounds, t.ops, t.post_ops, t.fetches, t.fetch_ok, t.cancelled,
           t.ended_by_close, t.cancels, t.observes, t.removes, t.obs_by_close, t.changes, t.callbacks, t.released_last,
           t.reacquires, t.patches, t.double_close, t.mid_flight, t.rounds, t.poller_blocked, (long long)t.close_ms_max,
           rss_early / 1024, early, rss_late / 1024);
    CHECK_INT(t.failed_rounds, 0);
    CHECK(t.rounds == rounds);
    if (rounds >= 8) {
        if (!TU_RSS_MEANINGFUL) {
            printf("   (AddressSanitizer build: resident memory not compared)\n");
        } else {
            char detail[128];
            snprintf(detail, sizeof detail, "grew %ld KiB from round %d to the last (slack %ld KiB)",
                     (rss_late - rss_early) / 1024, early, RSS_SLACK / 1024);
            tu_check(rss_early > 0 && rss_late - rss_early <= RSS_SLACK, __FILE__, __LINE__,
                     "resident memory does not grow across rounds", detail);
        }
    }
}

/* ------------------------------------------------------------ observers racing the close */

/* A narrower race than the rounds above hit: nothing but tether_object_observe
 * (and some removes) on 4 threads while the context closes after 0-5 ms.
 * Each observe that returned OK ends in exactly one CANCELLED callback, and
 * after the close nothing of the context is left alive. */

typedef struct orace {
    tether_context *ctx;
    tether_object *objs[16];
    int stop;
    pthread_mutex_t mu;
    int started, finals, others, bad_status;
    uint64_t rng[4];
} orace;

typedef struct orace_rec {
    orace *o;
    int calls, finals;
} orace_rec;

#define ORACE_MAX 4096

static orace_rec orace_recs[ORACE_MAX];
static int orace_nrecs;

static void orace_cb(tether_object *obj, const char *key, int status, void *userdata)
{
    orace_rec *rc = userdata;
    (void)obj;
    (void)key;
    pthread_mutex_lock(&rc->o->mu);
    rc->calls++;
    if (status == TETHER_E_CANCELLED)
        rc->finals++;
    pthread_mutex_unlock(&rc->o->mu);
}

typedef struct orace_arg {
    orace *o;
    int i;
} orace_arg;

static void *orace_loop(void *arg)
{
    orace_arg *a = arg;
    orace *o = a->o;
    while (!aload(&o->stop)) {
        tether_observer *ob = NULL;
        orace_rec *rc = NULL;
        int s;
        pthread_mutex_lock(&o->mu);
        if (orace_nrecs < ORACE_MAX)
            rc = &orace_recs[orace_nrecs++];
        pthread_mutex_unlock(&o->mu);
        if (!rc)
            break;
        rc->o = o;
        s = tether_object_observe(o->objs[rnd(&o->rng[a->i], 16)], "n", orace_cb, rc, &ob);
        pthread_mutex_lock(&o->mu);
        if (s == TETHER_OK)
            o->started++;
        else if (s != TETHER_E_HANDLE)
            o->bad_status++;
        pthread_mutex_unlock(&o->mu);
        if (s != TETHER_OK)
            rc->finals = -1000; /* no callback may come */
        else if (rnd(&o->rng[a->i], 2)) {
            s = tether_observer_cancel(ob);
            if (s != TETHER_OK && s != TETHER_E_HANDLE) {
                pthread_mutex_lock(&o->mu);
                o->bad_status++;
                pthread_mutex_unlock(&o->mu);
            }
        }
    }
    return NULL;
}

static void observe_race(int cycles, const tu_counts *base)
{
    uint64_t rng = run_seed ^ 0x0B5E;
    int c, i, leaked_cycles = 0, bad_finals = 0, bad_status = 0, open_failures = 0, first_leak = -1;
    int64_t t0 = tu_now_ms();
    char title[160];
    snprintf(title, sizeof title, "observers racing the close: %d cycles of 4 threads observing, close after 0-5 ms",
             cycles);
    tu_section(title);
    for (c = 0; c < cycles; c++) {
        orace o;
        orace_arg args[4];
        pthread_t t[4];
        int s;
        tu_counts now;
        alarm(300);
        memset(&o, 0, sizeof o);
        pthread_mutex_init(&o.mu, NULL);
        o.ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
        if (!o.ctx) {
            open_failures++;
            continue;
        }
        for (i = 0; i < 16; i++) {
            char id[16];
            snprintf(id, sizeof id, "i%04d", i);
            if (tether_context_object(o.ctx, "items", id, &o.objs[i]) != TETHER_OK)
                open_failures++;
        }
        orace_nrecs = 0;
        memset(orace_recs, 0, sizeof orace_recs);
        for (i = 0; i < 4; i++) {
            o.rng[i] = splitmix(&rng);
            args[i].o = &o;
            args[i].i = i;
            pthread_create(&t[i], NULL, orace_loop, &args[i]);
        }
        sleep_us((long)rnd(&rng, 5000));
        s = tether_context_close(o.ctx);
        astore(&o.stop, 1);
        for (i = 0; i < 4; i++)
            pthread_join(t[i], NULL);
        if (s != TETHER_OK)
            bad_status++;
        bad_status += o.bad_status;
        pthread_mutex_lock(&o.mu);
        for (i = 0; i < orace_nrecs; i++) {
            orace_rec *rc = &orace_recs[i];
            if (rc->finals == -1000 ? rc->calls != 0 : (rc->finals != 1 || rc->calls != 1))
                bad_finals++;
        }
        pthread_mutex_unlock(&o.mu);
        /* wait (bounded) for the counts, as check_back does, but count cycles */
        {
            int64_t end = tu_now_ms() + 2000;
            do {
                tu_snapshot(&now);
                if (tu_same_counts(&now, base))
                    break;
                tu_sleep_ms(10);
            } while (tu_now_ms() < end);
        }
        if (!tu_same_counts(&now, base)) {
            leaked_cycles++;
            if (first_leak < 0) {
                first_leak = c;
                printf("   cycle %d (close after the observers started, %d observes gave OK): left alive: "
                       "%lld contexts, %lld objects, %lld observers, %d descriptors (baseline %lld, %lld, %lld, %d)\n",
                       c, o.started, (long long)now.counters[TETHER_DEBUG_CONTEXTS], (long long)now.counters[TETHER_DEBUG_OBJECTS],
                       (long long)now.counters[TETHER_DEBUG_OBSERVERS], now.fds, (long long)base->counters[TETHER_DEBUG_CONTEXTS],
                       (long long)base->counters[TETHER_DEBUG_OBJECTS], (long long)base->counters[TETHER_DEBUG_OBSERVERS],
                       base->fds);
                print_fds();
            }
            /* the leak is for good: compare the next cycles with what is left */
            {
                static tu_counts carried;
                carried = now;
                base = &carried;
            }
        }
        pthread_mutex_destroy(&o.mu);
    }
    printf("   %d cycles in %lld ms; %d left part of their context alive%s\n", cycles, (long long)(tu_now_ms() - t0),
           leaked_cycles, leaked_cycles ? " (see the first above)" : "");
    CHECK_INT(open_failures, 0);
    CHECK_INT(bad_status, 0);
    CHECK_INT(bad_finals, 0);
    {
        char detail[96];
        snprintf(detail, sizeof detail, "%d of %d cycles", leaked_cycles, cycles);
        tu_check(leaked_cycles == 0, __FILE__, __LINE__,
                 "nothing of a context left alive after a close racing tether_object_observe", detail);
    }
}

/* ------------------------------------------------------------ main */

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

int main(int argc, char **argv)
{
    tu_counts base, round_base;
    round *prev = NULL;
    const char *mode = getenv("TETHER_STRESS_MODE");
    int rounds, first, i;
    int64_t budget;
    int64_t t0;
    (void)argc;
    tu_init(argv[0]);
    pthread_key_create(&role_key, NULL);
    for (i = 0; i < 6; i++)
        role_values[i] = i;
    set_role(ROLE_MAIN);
    if (getenv("TETHER_STRESS_SEED") && *getenv("TETHER_STRESS_SEED"))
        run_seed = strtoull(getenv("TETHER_STRESS_SEED"), NULL, 10);
    else
        run_seed = (uint64_t)time(NULL) * 1000003ULL ^ (uint64_t)getpid();
    rounds = (int)env_long("TETHER_STRESS_ROUNDS", DEFAULT_ROUNDS);
    /* by default each mode stops starting rounds after its share of the time */
    budget = getenv("TETHER_STRESS_ROUNDS") && *getenv("TETHER_STRESS_ROUNDS") ? 0 : DEFAULT_BUDGET_MS;
    first = (int)env_long("TETHER_STRESS_FIRST", 0);
    force_closers = (int)env_long("TETHER_STRESS_CLOSERS", 0);
    printf("   random seed %llu (set TETHER_STRESS_SEED to repeat), %d rounds per mode from round %d\n",
           (unsigned long long)run_seed, rounds, first);
    tu_unique(bucket, sizeof bucket, "c-stress");
    tu_store_path(store, sizeof store, "stress");
    if (!CHECK(tu_seed_numbered(bucket, "items", "i%04d", "record", NULL, NULL, NRECORDS)))
        return tu_finish();
    tu_warm_up(bucket, store, "items", NRECORDS);
    t0 = tu_now_ms();
    /* the baseline: the main thread only, nothing of the library open */
    tu_snapshot(&base);
    round_base = base;
    {
        uint64_t keep = run_seed;
        if (!mode || !*mode || strcmp(mode, "both") == 0 || strcmp(mode, "thread") == 0)
            run_mode(TETHER_DELIVER_THREAD, first, rounds, budget, &round_base, &prev);
        run_seed = keep;
        if (!mode || !*mode || strcmp(mode, "both") == 0 || strcmp(mode, "poll") == 0)
            run_mode(TETHER_DELIVER_POLL, first, rounds, budget, &round_base, &prev);
        run_seed = keep;
    }
    tu_section("after the last round: no late callback");
    tu_sleep_ms(200);
    CHECK_INT(aload(&late_callbacks), 0);
    if (prev)
        free_round(prev);
    check_back(&base, "all rounds");
    {
        long cycles = env_long("TETHER_STRESS_OBSERVE_CYCLES", DEFAULT_OBSERVE_CYCLES);
        if (cycles > 0) {
            tu_counts obase;
            /* its own baseline: a leak of the rounds above is reported there */
            tu_snapshot(&obase);
            observe_race((int)cycles, &obase);
        }
    }
    printf("   total %lld ms\n", (long long)(tu_now_ms() - t0));
    return tu_finish();
}
