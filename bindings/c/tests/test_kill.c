/* test_kill.c — nothing is lost, nothing is sent twice: a child process makes
 * 1,150 changes (1,000 inserts with ids made by the library, 100 updates, 50
 * deletes), then saves; the parent kills it with SIGKILL at a random moment
 * of the save, and again in each of several rounds, each child reopening
 * the store and saving what is left. At the end the parent saves what
 * remains and checks the server: every insert there exactly once (a second
 * send would be a second record, the ids being random), every update and
 * delete applied, nothing else changed, and the pending changes never grew. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEEDED 200
#define INSERTS 1000
#define UPDATES 100   /* s000 .. s099: N += 1000 */
#define DELETES 50    /* s100 .. s149 */
#define CHANGES (INSERTS + UPDATES + DELETES)

static char bucket[128];
static char store[512];
static char collection[32];

typedef struct waiter {
    pthread_mutex_t mu;
    int done, status;
} waiter;

static void on_save(tether_task *task, int status, const char *message, tether_save_report *report, void *userdata)
{
    waiter *w = userdata;
    (void)task;
    (void)message;
    (void)report;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    w->done = 1;
    pthread_mutex_unlock(&w->mu);
}

/* Saves and waits (at most `seconds`); the save's status. */
static int save_and_wait(tether_context *ctx, int seconds)
{
    waiter w = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    int64_t deadline = tu_now_ms() + seconds * 1000LL;
    int done = 0;
    if (tether_save_start(ctx, NULL, on_save, &w, NULL) != TETHER_OK)
        return TETHER_E_ERROR;
    while (!done && tu_now_ms() < deadline) {
        tu_sleep_ms(5);
        pthread_mutex_lock(&w.mu);
        done = w.done;
        pthread_mutex_unlock(&w.mu);
    }
    return done ? w.status : TETHER_E_ERROR;
}

static tether_context *open_quietly(void)
{
    tether_context_options o;
    tether_context *ctx = NULL;
    tu_options(&o, tu_url(), bucket, store, TETHER_DELIVER_THREAD, 20000);
    return tether_context_open(&o, &ctx) == TETHER_OK ? ctx : NULL;
}

static int fetch_all(tether_context *ctx)
{
    tu_fetch f;
    int ok;
    tu_fetch_init(&f);
    ok = tu_fetch_start(ctx, &f, collection, NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL) == TETHER_OK &&
         tu_fetch_wait(&f, 60000) && f.final_status == TETHER_OK;
    tu_fetch_destroy(&f);
    return ok;
}

/* The first child: every change, made durable one by one, then written to
 * `ready` (so the parent knows the save starts), then the save. */
static void first_child(int ready)
{
    tether_context *ctx = open_quietly();
    char id[16];
    int i;
    if (!ctx || !fetch_all(ctx))
        _exit(3);
    for (i = 0; i < INSERTS; i++) {
        tether_object *obj = NULL;
        tether_value n = {TETHER_TYPE_INTEGER, i, 0.0, NULL, 0};
        tether_value tag = {TETHER_TYPE_TEXT, 0, 0.0, (char *)"kill", 4};
        if (tether_context_insert(ctx, collection, NULL, &obj) != TETHER_OK ||
            tether_object_set(obj, "N", &n) != TETHER_OK || tether_object_set(obj, "Tag", &tag) != TETHER_OK)
            _exit(4);
        tether_object_release(obj);
    }
    for (i = 0; i < UPDATES + DELETES; i++) {
        tether_object *obj = NULL;
        tether_value n = {TETHER_TYPE_INTEGER, i + 1000, 0.0, NULL, 0};
        snprintf(id, sizeof id, "s%03d", i);
        if (tether_context_object(ctx, collection, id, &obj) != TETHER_OK)
            _exit(5);
        if ((i < UPDATES ? tether_object_set(obj, "N", &n) : tether_object_delete(obj)) != TETHER_OK)
            _exit(6);
        tether_object_release(obj);
    }
    if (write(ready, "x", 1) != 1)
        _exit(7);
    _exit(save_and_wait(ctx, 600) == TETHER_OK ? 0 : 8);
}

/* A later child: reopens the store and saves what is left. */
static void later_child(int ready)
{
    tether_context *ctx = open_quietly();
    size_t pending = 0;
    if (!ctx || tether_context_change_count(ctx, &pending) != TETHER_OK)
        _exit(3);
    if (write(ready, &pending, sizeof pending) != (ssize_t)sizeof pending)
        _exit(7);
    _exit(save_and_wait(ctx, 600) == TETHER_OK ? 0 : 8);
}

/* Runs one child; kills it `kill_ms` after it says it is ready (-1: lets it
 * finish). Returns the pending count a later child reported (or CHANGES). */
static long run_round(int round, int kill_ms, int *finished)
{
    int pipefd[2];
    pid_t pid;
    size_t pending = CHANGES;
    int status = 0;
    char byte;
    if (!CHECK(pipe(pipefd) == 0))
        return -1;
    pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        if (round == 0)
            first_child(pipefd[1]);
        later_child(pipefd[1]);
    }
    close(pipefd[1]);
    if (round == 0)
        CHECK(read(pipefd[0], &byte, 1) == 1);
    else
        CHECK(read(pipefd[0], &pending, sizeof pending) == (ssize_t)sizeof pending);
    close(pipefd[0]);
    if (kill_ms >= 0) {
        tu_sleep_ms(kill_ms);
        kill(pid, SIGKILL);
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    *finished = WIFEXITED(status);
    if (WIFEXITED(status))
        CHECK_INT(WEXITSTATUS(status), 0);
    return (long)pending;
}

static void check_server(void)
{
    char path[512], *body = NULL;
    int i, seen[INSERTS], count = 0;
    long status;
    tu_section("the server holds every change exactly once");
    memset(seen, 0, sizeof seen);
    /* Page by page in N order (the server's pages are short). */
    for (int last = -1, page = 1; page > 0;) {
        snprintf(path, sizeof path, "/buckets/%s/collections/%s/records?Tag=%%22kill%%22&_sort=N&gt_N=%d",
                 bucket, collection, last);
        body = NULL;
        status = tu_http("GET", path, NULL, &body);
        CHECK_INT(status, 200);
        page = 0;
        if (status == 200 && body) {
            /* Each record of the listing: {"N":..,"Tag":"kill","id":..}; count the Ns. */
            const char *p = body;
            while ((p = strstr(p, "\"N\":")) != NULL) {
                int n = atoi(p + 4);
                p += 4;
                count++;
                page++;
                last = n > last ? n : last;
                if (n >= 0 && n < INSERTS)
                    seen[n]++;
            }
        }
        free(body);
    }
    CHECK_INT(count, INSERTS);
    for (i = 0; i < INSERTS; i++)
        if (seen[i] != 1) {
            CHECK_INT(seen[i], 1);
            break;
        }
    for (i = 0; i < SEEDED; i++) {
        long want = i < UPDATES ? 200 : i < UPDATES + DELETES ? 404 : 200;
        char expect[64];
        snprintf(path, sizeof path, "/buckets/%s/collections/%s/records/s%03d", bucket, collection, i);
        body = NULL;
        status = tu_http("GET", path, NULL, &body);
        CHECK_INT(status, want);
        if (status == 200 && body) {
            snprintf(expect, sizeof expect, "\"N\":%d,", i < UPDATES ? i + 1000 : i);
            if (!strstr(body, expect))
                CHECK(strstr(body, expect) != NULL);
        }
        free(body);
    }
}

/* One scenario: a fresh collection and store, changes made, the save
 * killed round after round, then finished; the server checked. */
static void scenario(int number, int rounds)
{
    const char *ids[SEEDED];
    static char names[SEEDED][16], data[SEEDED][48];
    const char *datas[SEEDED];
    int i, finished = 0, kills = 0;
    long last = CHANGES;
    tether_context *ctx;
    size_t left = 0;
    char section[96];
    snprintf(collection, sizeof collection, "kills%d", number);
    snprintf(section, sizeof section, "scenario %d: kills during the save, round after round", number);
    snprintf(store, sizeof store, "%s", "");
    {
        char name[32];
        snprintf(name, sizeof name, "kill%d", number);
        tu_store_path(store, sizeof store, name);
    }
    for (i = 0; i < SEEDED; i++) {
        snprintf(names[i], sizeof names[i], "s%03d", i);
        snprintf(data[i], sizeof data[i], "{\"N\": %d, \"Tag\": \"seed\"}", i);
        ids[i] = names[i];
        datas[i] = data[i];
    }
    if (!CHECK(tu_put_collection(bucket, collection, "{\"type\": \"object\", \"properties\": {"
                                 "\"N\": {\"type\": \"integer\"}, \"Tag\": {\"type\": \"string\"}}}") &&
               tu_put_records(bucket, collection, ids, datas, SEEDED)))
        return;
    tu_section(section);
    for (i = 0; i < rounds && !finished; i++) {
        /* Most kills early, some late: a save of this size takes a few seconds here. */
        int kill_ms = rand() % (i % 3 == 2 ? 2500 : 700);
        long pending = run_round(i, kill_ms, &finished);
        if (i > 0) {
            printf("round %d: %ld changes pending at open, killed after %d ms%s\n", i, pending, kill_ms,
                   finished ? " (it had finished)" : "");
            CHECK(pending <= last); /* what the server confirmed never comes back */
            last = pending;
        } else {
            printf("round 0: %d changes made, killed %d ms into the save%s\n", CHANGES, kill_ms,
                   finished ? " (it had finished)" : "");
        }
        kills += !finished;
    }
    CHECK(kills >= 1);

    tu_section("reopened, the rest is saved");
    ctx = open_quietly();
    if (CHECK(ctx != NULL)) {
        CHECK_OK(tether_context_change_count(ctx, &left));
        CHECK((long)left <= last);
        printf("%d kills; %zu changes left for the last save\n", kills, left);
        CHECK_CODE(save_and_wait(ctx, 600), TETHER_OK);
        CHECK_OK(tether_context_change_count(ctx, &left));
        CHECK_INT(left, 0);
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }
    check_server();
}

int main(int argc, char **argv)
{
    unsigned seed = (unsigned)tu_now_ms();
    int scenarios = TU_SANITIZED ? 1 : 3, i;
    (void)argc;
    tu_init(argv[0]);
#if TU_THREAD_SANITIZED
    /* ThreadSanitizer's runtime runs a thread of its own, and a child forked
     * from a process with threads may not start any (the library's): the
     * plain and ASan suites run the kills. */
    tu_section("skipped under ThreadSanitizer (the plain and ASan suites kill)");
    (void)seed;
    (void)i;
    (void)scenarios;
    return tu_finish();
#endif
    tu_unique(bucket, sizeof bucket, "c-kill");
    srand(seed);
    printf("random seed %u\n", seed);
    if (!CHECK(tu_put_bucket(bucket)))
        return tu_finish();
    for (i = 0; i < scenarios; i++)
        scenario(i, TU_SANITIZED ? 4 : 8);
    {
        /* Its thousands of records (and their permissions, which Kinto's
         * memory backend scans for every /permissions request a context's
         * open makes) would slow every program after this one. */
        char path[160];
        snprintf(path, sizeof path, "/buckets/%s", bucket);
        CHECK_INT(tu_http("DELETE", path, NULL, NULL), 200);
    }
    return tu_finish();
}
