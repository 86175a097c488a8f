/* test_poll.c — POLL delivery: the descriptor, callbacks only inside
 * tether_context_poll on the calling thread, BUSY from inside a callback,
 * close delivering finals on the calling thread, close from another thread
 * waking a blocked poll (and two of them, against the header's advice). */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>

static char bucket[128];

static int fd_readable(int fd, int timeout_ms)
{
    struct pollfd p;
    int r;
    p.fd = fd;
    p.events = POLLIN;
    p.revents = 0;
    r = poll(&p, 1, timeout_ms);
    return r > 0 && (p.revents & POLLIN);
}

static int seed(void)
{
    if (!tu_put_bucket(bucket) ||
        !tu_put_collection(bucket, "notes",
                           "{\"type\": \"object\", \"properties\": {"
                           "\"n\": {\"type\": \"integer\"}, \"title\": {\"type\": \"string\"}}}"))
        return 0;
    return tu_put_numbered(bucket, "notes", "n%02d", "{\"n\": %d, \"title\": \"note %d\"}", 80);
}

static void test_poll_fetch(tether_context *ctx)
{
    int fd = -1, fd2 = -1;
    size_t delivered = 99;
    tu_fetch f;
    int64_t t0;

    tu_section("descriptor");
    CHECK_OK(tether_context_fd(ctx, &fd));
    CHECK(fd >= 0);
    CHECK_OK(tether_context_fd(ctx, &fd2));
    CHECK_INT(fd2, fd);
    CHECK_STATUS(tether_context_fd(ctx, NULL), TETHER_E_MISUSE);
    CHECK(!fd_readable(fd, 0)); /* nothing waits yet */

    tu_section("poll with nothing to deliver");
    t0 = tu_now_ms();
    CHECK_OK(tether_context_poll(ctx, 0, &delivered));
    CHECK_INT(delivered, 0);
    delivered = 99;
    CHECK_OK(tether_context_poll(ctx, 150, &delivered));
    CHECK_INT(delivered, 0);
    CHECK(tu_now_ms() - t0 >= 100);
    CHECK(tu_now_ms() - t0 < 5000);
    CHECK_OK(tether_context_poll(ctx, 0, NULL));

    tu_section("fetch: fd readable, callbacks only inside poll, on this thread");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "notes", "n", 0, TETHER_POLICY_CACHE_THEN_SERVER, NULL));
    CHECK(fd_readable(fd, TU_WAIT_MS));
    tu_sleep_ms(500); /* the server answer lands meanwhile; still no callback */
    CHECK_INT(tu_fetch_calls(&f), 0);
    {
        int64_t end = tu_now_ms() + TU_WAIT_MS;
        size_t total = 0;
        while (tu_fetch_finals(&f) == 0 && tu_now_ms() < end) {
            size_t n = 0;
            if (!fd_readable(fd, 1000))
                continue;
            if (CHECK_OK(tether_context_poll(ctx, 0, &n)) != TETHER_OK)
                break;
            total += n;
        }
        CHECK_INT(total, 2);
    }
    CHECK_INT(f.finals, 1);
    CHECK_INT(f.cached, 1);
    CHECK_INT(f.off_main, 0);
    CHECK_CODE(f.final_status, TETHER_OK);
    CHECK_INT(f.final_count, 80);
    CHECK_INT(f.order_errors, 0);
    CHECK_INT(f.results_errors, 0);
    /* All delivered: the descriptor is quiet again. */
    CHECK_OK(tether_context_poll(ctx, 0, &delivered));
    CHECK_INT(delivered, 0);
    CHECK(!fd_readable(fd, 50));
    tu_fetch_destroy(&f);

    tu_section("poll(-1) returns once a callback ran");
    tu_fetch_init(&f);
    CHECK_OK(tu_fetch_start(ctx, &f, "notes", NULL, 5, TETHER_POLICY_CACHE_ONLY, NULL));
    delivered = 0;
    CHECK_OK(tether_context_poll(ctx, -1, &delivered));
    CHECK_INT(delivered, 1);
    CHECK_INT(f.finals, 1);
    CHECK_INT(f.final_count, 5);
    tu_fetch_destroy(&f);

    tu_section("poll and close from inside a callback: BUSY");
    tu_fetch_init(&f);
    f.poll_in_cb = ctx;
    f.close_in_cb = ctx;
    CHECK_OK(tu_fetch_start(ctx, &f, "notes", NULL, 0, TETHER_POLICY_CACHE_ONLY, NULL));
    CHECK(tu_fetch_wait_poll(&f, ctx, TU_WAIT_MS));
    CHECK_CODE(f.poll_in_cb_status, TETHER_E_BUSY);
    CHECK_CODE(f.close_in_cb_status, TETHER_E_BUSY);
    CHECK(f.poll_in_cb_errmsg[0] != '\0');
    CHECK(f.close_in_cb_errmsg[0] != '\0');
    CHECK_OK(tether_context_poll(ctx, 0, NULL)); /* still usable */
    tu_fetch_destroy(&f);

    tu_section("cancel in POLL mode before polling: only the cancelled FINAL is delivered");
    {
        tether_task *task = NULL;
        tu_fetch_init(&f);
        CHECK_OK(tu_fetch_start(ctx, &f, "notes", NULL, 0, TETHER_POLICY_CACHE_THEN_SERVER, &task));
        tu_sleep_ms(300); /* let the CACHED answer queue up */
        if (task)
            CHECK_OK(tu_fetch_cancel(&f, task));
        CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE); /* already cancelled */
        CHECK(tu_fetch_wait_poll(&f, ctx, TU_WAIT_MS));
        CHECK_OK(tether_context_poll(ctx, 200, NULL));
        CHECK_INT(f.calls, 1);
        CHECK_INT(f.finals, 1);
        CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
        CHECK_INT(f.final_count, 0);
        CHECK_INT(f.results_errors, 0);
        CHECK_INT(f.after_cancel_bad, 0);
        CHECK_INT(f.off_main, 0);
        CHECK_STATUS(tether_task_cancel(task), TETHER_E_HANDLE);
        tu_fetch_destroy(&f);
    }
}

static void test_cancel_in_callback(tether_context *ctx)
{
    tu_fetch f;
    tu_section("cancel from inside the task's own callback (POLL)");
    tu_fetch_init(&f);
    f.cancel_in_cb = 1;
    CHECK_OK(tu_fetch_start(ctx, &f, "notes", NULL, 0, TETHER_POLICY_CACHE_THEN_SERVER, NULL));
    CHECK(tu_fetch_wait_poll(&f, ctx, TU_WAIT_MS));
    CHECK_OK(tether_context_poll(ctx, 100, NULL));
    CHECK_CODE(f.cancel_in_cb_status, TETHER_OK);
    CHECK_INT(f.calls, 2);
    CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
    CHECK_INT(f.off_main, 0);
    tu_fetch_destroy(&f);
}

static void test_poll_observer(tether_context *ctx)
{
    tether_object *obj = NULL;
    tether_observer *ob = NULL;
    tether_value v = {TETHER_TYPE_NULL, 0, 0.0, NULL, 0};
    tu_obs o;
    int64_t end;

    tu_section("observer in POLL mode: told inside poll, on this thread");
    CHECK_OK(tether_context_object(ctx, "notes", "n07", &obj));
    if (!obj)
        return;
    tu_obs_init(&o, obj, "title", "title");
    CHECK_OK(tu_observe(&o, &ob));
    CHECK(tu_patch_record(bucket, "notes", "n07", "{\"title\": \"seventh note\"}"));
    if (CHECK_OK(tether_object_get(obj, "title", &v)) == TETHER_OK)
        CHECK_STR(v.text, "note 7"); /* the cached value, at once */
    tether_value_free(&v);
    tu_sleep_ms(500);
    CHECK_INT(tu_obs_changes(&o), 0); /* not before poll */
    end = tu_now_ms() + TU_WAIT_MS;
    while (tu_obs_changes(&o) == 0 && tu_now_ms() < end)
        tether_context_poll(ctx, 100, NULL);
    CHECK_INT(o.changes, 1);
    CHECK_INT(o.off_main, 0);
    CHECK_STR(o.peeked, "seventh note");
    CHECK_OK(tether_observer_cancel(ob));
    /* Already removed, though its final callback has not run yet. */
    CHECK_STATUS(tether_observer_cancel(ob), TETHER_E_HANDLE);
    /* The final cancelled callback comes through poll too. */
    end = tu_now_ms() + TU_WAIT_MS;
    while (tu_obs_cancels(&o) == 0 && tu_now_ms() < end)
        tether_context_poll(ctx, 100, NULL);
    CHECK_INT(o.cancels, 1);
    CHECK_INT(o.off_main, 0);
    CHECK_STATUS(tether_observer_cancel(ob), TETHER_E_HANDLE);
    CHECK_OK(tether_object_free(obj));
    tu_obs_destroy(&o);
}

static void test_close_poll(const char *store)
{
    tether_context *ctx = tu_open(bucket, store, TETHER_DELIVER_POLL);
    tu_fetch f;
    tu_obs o;
    tether_object *obj = NULL;
    tether_observer *ob = NULL;

    tu_section("close in POLL mode: finals delivered on the calling thread before close returns");
    if (!ctx)
        return;
    tu_fetch_init(&f);
    CHECK_OK(tether_context_object(ctx, "notes", "n01", &obj));
    tu_obs_init(&o, obj, "titlePeek", NULL);
    CHECK_OK(tu_observe(&o, &ob));
    CHECK_OK(tu_fetch_start(ctx, &f, "notes", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    CHECK_INT(f.calls, 1);
    CHECK_INT(f.finals, 1);
    CHECK_CODE(f.final_status, TETHER_E_CANCELLED);
    CHECK_INT(f.off_main, 0);
    CHECK_INT(o.cancels, 1);
    CHECK_INT(o.off_main, 0);
    CHECK_INT(o.changes, 0);
    CHECK_STATUS(tether_object_free(obj), TETHER_E_HANDLE); /* held past close */
    tu_fetch_destroy(&f);
    tu_obs_destroy(&o);
}

typedef struct closer {
    tether_context *ctx;
    int delay_ms;
    int status;
} closer;

static void *close_later(void *arg)
{
    closer *c = arg;
    tu_sleep_ms(c->delay_ms);
    c->status = tether_context_close(c->ctx);
    return NULL;
}

static void test_close_while_polling(const char *store)
{
    tether_context *ctx = tu_open(bucket, store, TETHER_DELIVER_POLL);
    tether_object *obj = NULL;
    tether_observer *ob = NULL;
    tu_obs o;
    closer c;
    pthread_t t;
    size_t delivered = 99;
    int64_t t0, waited;
    int s;

    tu_section("close from another thread wakes a thread blocked in poll");
    if (!ctx)
        return;
    CHECK_OK(tether_context_object(ctx, "notes", "n02", &obj));
    tu_obs_init(&o, obj, "title", NULL);
    CHECK_OK(tu_observe(&o, &ob));
    c.ctx = ctx;
    c.delay_ms = 300;
    c.status = 1;
    if (!CHECK(pthread_create(&t, NULL, close_later, &c) == 0))
        return;
    t0 = tu_now_ms();
    s = tether_context_poll(ctx, 5000, &delivered); /* nothing to deliver: blocks */
    waited = tu_now_ms() - t0;
    pthread_join(t, NULL);
    /* Either it was blocked when close came (OK), or close won the race. */
    CHECK(s == TETHER_OK || s == TETHER_E_HANDLE);
    printf("   poll returned %s after %lld ms\n", tether_errstr(s), (long long)waited);
    CHECK(waited < 2500);
    CHECK_CODE(c.status, TETHER_OK);
    /* the closer delivered the observer's final, on its own thread */
    CHECK_INT(tu_obs_cancels(&o), 1);
    CHECK_INT(o.changes, 0);
    CHECK_INT(o.off_main, 1);
    CHECK_STATUS(tether_context_poll(ctx, 0, NULL), TETHER_E_HANDLE);
    CHECK_STATUS(tether_object_free(obj), TETHER_E_HANDLE);
    tu_obs_destroy(&o);
}

/* Two threads polling without a time limit while events flow, then a close:
 * both must return. Once a poller emptied the descriptor after close had
 * written to it, the other slept in poll() for good and close waited for it. */
#define TWO_POLLER_ROUNDS 150

typedef struct {
    tether_context *ctx;
    atomic_int done;
} poller;

static void *poll_until_closed(void *arg)
{
    poller *p = arg;
    while (tether_context_poll(p->ctx, -1, NULL) == TETHER_OK) {
    }
    atomic_store(&p->done, 1);
    return NULL;
}

static void test_two_pollers_at_close(const char *store)
{
    int round, stranded = 0, close_bad = 0, opened = 0;
    unsigned int seed_value = 7;

    tu_section("two threads blocked in poll (no time limit) both return when the context closes");
    for (round = 0; round < TWO_POLLER_ROUNDS && !stranded; round++) {
        tether_context *ctx = tu_open(bucket, store, TETHER_DELIVER_POLL);
        poller p[2];
        pthread_t t[2];
        tu_fetch f;
        int i, waited;
        if (!ctx)
            continue;
        opened++;
        tu_fetch_init(&f);
        tu_fetch_start(ctx, &f, "notes", NULL, 0, TETHER_POLICY_CACHE_THEN_SERVER, NULL);
        for (i = 0; i < 2; i++) {
            p[i].ctx = ctx;
            atomic_init(&p[i].done, 0);
            pthread_create(&t[i], NULL, poll_until_closed, &p[i]);
        }
        tu_sleep_ms((int)(rand_r(&seed_value) % 15));
        if (tether_context_close(ctx) != TETHER_OK)
            close_bad++;
        for (waited = 0; waited < 5000 && !(atomic_load(&p[0].done) && atomic_load(&p[1].done)); waited += 5)
            tu_sleep_ms(5);
        if (atomic_load(&p[0].done) && atomic_load(&p[1].done)) {
            pthread_join(t[0], NULL);
            pthread_join(t[1], NULL);
            tu_fetch_destroy(&f);
        } else {
            stranded++; /* left running: the program ends with the checks */
            printf("   round %d: a poller did not return within 5 s of close\n", round);
        }
    }
    printf("   %d rounds\n", opened);
    CHECK(opened > 0);
    CHECK_INT(stranded, 0);
    CHECK_INT(close_bad, 0);
}

int main(int argc, char **argv)
{
    char store[512];
    tether_context *ctx;
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-poll");
    tu_store_path(store, sizeof store, "poll");
    if (!CHECK(seed()))
        return tu_finish();
    ctx = tu_open(bucket, store, TETHER_DELIVER_POLL);
    if (ctx) {
        test_poll_fetch(ctx);
        test_cancel_in_callback(ctx);
        test_poll_observer(ctx);
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }
    test_close_poll(store);
    test_close_while_polling(store);
    test_two_pollers_at_close(store);
    return tu_finish();
}
