/* test_processes.c — several processes on one store (issue 41): this
 * program runs copies of itself (fork, then exec of its own file: fresh
 * processes, each with its own library) on one store file.
 *  - 2 and 4 processes edit and insert their own records, saving in rounds
 *    at once: every value on the server is its process's last, nothing is
 *    duplicated, no save meets a conflict or sends another's change, every
 *    outbox ends empty, and every process's objects come to equal the server.
 *  - A edits r01 (unsaved); B opens the store and saves its own edit, not A's;
 *    A edits r01 again and saves its latest value, with no conflict.
 *  - `exclusive`: while a child holds the store, opens fail naming its pid.
 * A child's stdin and stdout are pipes to this process: it waits for a line
 * at each barrier, and says how far it got and what failed ("FAIL ...",
 * passed on here); its exit status says whether every check passed (and,
 * under a sanitizer, that nothing was reported). */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEEDS 80     /* r00..r79, label "seed I" */
#define BLOCK 20     /* process K edits r(K*BLOCK) .. r(K*BLOCK+EDITED-1) */
#define EDITED 5
#define ROUNDS 5     /* each inserts pK-nR in round R */
#define HEAR_MS 3000 /* bound for objects to hear another process (~200 ms promised) */

static const char *self_path;        /* this program, for the children's exec */
static char bucket[128], store[512]; /* each test's; a child's from its argv */

typedef struct child {
    pid_t pid;
    FILE *in, *out; /* its stdin (we write), its stdout (we read) */
    int index;
} child;

/* ------------------------------------------------------------ both sides */

static void set_label(tether_object *obj, const char *text)
{
    tether_value v = {TETHER_TYPE_TEXT, 0, 0.0, (char *)text, strlen(text)};
    CHECK_OK(tether_object_set(obj, "label", &v));
}

/* What the rounds of `nproc` processes leave in record `id` (nproc 0: what
 * the server holds before them); 0 for an id no process should have made. */
static int expected_label(const char *id, int nproc, char *out, size_t size)
{
    int i, k, r, end = 0;
    if (sscanf(id, "r%2d%n", &i, &end) == 1 && end == 3 && !id[end] && i < SEEDS) {
        if (i / BLOCK < nproc && i % BLOCK < EDITED)
            snprintf(out, size, "p%d round %d", i / BLOCK, ROUNDS - 1);
        else
            snprintf(out, size, "seed %d", i);
        return 1;
    }
    if (sscanf(id, "p%d-n%d%n", &k, &r, &end) == 2 && !id[end] && k < nproc && r < ROUNDS)
        return snprintf(out, size, "p%d new %d", k, r) > 0;
    return 0;
}

static tether_context *open_store(int exclusive)
{
    tether_context_options o;
    tether_kinto_options k;
    tether_context *ctx = NULL;
    tu_options(&o, &k, tu_url(), bucket, store, TETHER_DELIVER_THREAD, 10000);
    o.exclusive = exclusive;
    CHECK_OK(tether_context_open_kinto(&o, &k, &ctx));
    return ctx;
}

/* ------------------------------------------------------------ children */

static void wait_parent(void)
{
    char line[64];
    CHECK(fgets(line, sizeof line, stdin) != NULL);
}

/* Unless why already says something: says so in why if obj's label is not
 * what the rounds of `nproc` processes leave. */
static void check_label(tether_object *obj, int nproc, const char *what, char *why, size_t size)
{
    char want[64] = "(no such record)", got[64];
    expected_label(tu_id(obj), nproc, want, sizeof want);
    tu_peek_text(obj, "label", got, sizeof got);
    if (!why[0] && strcmp(got, want) != 0)
        snprintf(why, size, "%s %s is \"%s\", not \"%s\"", what, tu_id(obj), got, want);
}

/* Into why, the first record whose label here is not what the rounds of
 * `nproc` processes leave ("" if none): each object `held` keeps in memory
 * (never fetched again: it must hear the others' saves), then the cache's
 * listing, which must hold each record once. */
static void cache_mismatch(tether_context *ctx, const tu_fetch *held, int nproc, char *why, size_t size)
{
    tu_fetch f;
    why[0] = '\0';
    for (size_t i = 0; i < held->final_count; i++)
        check_label(held->final_objs[i], nproc, "held", why, size);
    tu_fetch_init(&f);
    if (tu_fetch_start(ctx, &f, "notes", NULL, 0, TETHER_POLICY_CACHE_ONLY, NULL) != TETHER_OK ||
        !tu_fetch_wait(&f, TU_WAIT_MS))
        snprintf(why, size, "the cache-only fetch failed");
    else if (!why[0] && f.final_count != (size_t)(SEEDS + nproc * ROUNDS))
        snprintf(why, size, "the cache lists %zu records", f.final_count);
    for (size_t i = 0; i < f.final_count; i++)
        check_label(f.final_objs[i], nproc, "cached", why, size);
    tu_fetch_destroy(&f);
}

/* child-rounds STORE BUCKET K NPROC: ROUNDS rounds of editing its records,
 * inserting one and saving; the first round waits before its save (the
 * parent opens the next process meanwhile). Once every process has saved,
 * its objects must come to equal the server. */
static void child_rounds(int me, int nproc)
{
    tether_context *ctx = open_store(0);
    tether_object *obj = NULL;
    tu_fetch held;
    char id[32], text[64], why[256];
    size_t saved = 0, pending = 99;
    int64_t start;
    if (!ctx)
        return;
    tu_fetch_init(&held); /* keeps the seeds' objects in memory to the end */
    CHECK_OK(tu_fetch_start(ctx, &held, "notes", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL));
    CHECK(tu_fetch_wait(&held, TU_WAIT_MS) && held.final_count == SEEDS);
    /* Reads each object now (its values load at its first read: later they
     * must be told of the others' saves); none is another's unsaved change. */
    cache_mismatch(ctx, &held, 0, why, sizeof why);
    tu_check(!why[0], __FILE__, __LINE__, "the cache holds the server's records", why);
    for (int round = 0; round < ROUNDS; round++) {
        const char *keys[] = {"n", "label"};
        tether_value values[] = {{TETHER_TYPE_INTEGER, round, 0.0, NULL, 0}, {TETHER_TYPE_TEXT, 0, 0.0, text, 0}};
        snprintf(text, sizeof text, "p%d round %d", me, round);
        for (int j = 0; j < EDITED; j++) {
            snprintf(id, sizeof id, "r%02d", me * BLOCK + j);
            if (CHECK_OK(tether_context_object(ctx, "notes", id, &obj)) == TETHER_OK)
                set_label(obj, text);
            tether_object_free(obj);
        }
        snprintf(id, sizeof id, "p%d-n%d", me, round);
        values[1].length = (size_t)snprintf(text, sizeof text, "p%d new %d", me, round);
        CHECK_OK(tether_context_insert_values(ctx, "notes", id, keys, values, 2, &obj));
        tether_object_free(obj);
        if (round == 0) {
            printf("edited\n");
            wait_parent();
        }
        /* OK: no conflict; and it sent its own changes, no other's. */
        CHECK_CODE(tu_save(ctx, &saved), TETHER_OK);
        CHECK_INT(saved, EDITED + 1);
    }
    CHECK_OK(tether_context_change_count(ctx, &pending));
    CHECK_INT(pending, 0);
    printf("saved\n");
    wait_parent(); /* every process has saved its last round */
    start = tu_now_ms();
    for (;;) {
        cache_mismatch(ctx, &held, nproc, why, sizeof why);
        if (!why[0] || tu_now_ms() - start >= HEAR_MS)
            break;
        tu_sleep_ms(50);
    }
    tu_check(!why[0], __FILE__, __LINE__, "the objects equal the server", why);
    printf("heard %lld\n", (long long)(tu_now_ms() - start));
    tu_fetch_destroy(&held);
    CHECK_OK(tether_context_close(ctx));
}

/* child-a STORE BUCKET: edits r01, waits (B saves meanwhile), edits r01
 * again and saves. */
static void child_a(void)
{
    tether_context *ctx = open_store(0);
    tether_object *r01 = NULL;
    size_t saved = 0, pending = 99;
    if (!ctx)
        return;
    tu_fetch_all(ctx, "notes");
    if (CHECK_OK(tether_context_object(ctx, "notes", "r01", &r01)) == TETHER_OK) {
        set_label(r01, "A first");
        printf("edited\n");
        wait_parent();
        set_label(r01, "A second");
        CHECK_CODE(tu_save(ctx, &saved), TETHER_OK);
        CHECK_INT(saved, 1);
        CHECK_OK(tether_context_change_count(ctx, &pending));
        CHECK_INT(pending, 0);
    }
    printf("saved\n");
    tether_object_free(r01);
    CHECK_OK(tether_context_close(ctx));
}

/* child-exclusive STORE BUCKET: holds the store exclusively until told. */
static void child_exclusive(void)
{
    tether_context *ctx = open_store(1);
    printf("opened\n");
    wait_parent();
    if (ctx)
        CHECK_OK(tether_context_close(ctx));
}

/* ------------------------------------------------------------ parent */

/* Runs `self_path MODE STORE BUCKET [K NPROC]` (k NULL: without them). */
static int spawn(child *c, int index, const char *mode, const char *k, const char *nproc)
{
    int to[2], from[2];
    char *args[] = {(char *)self_path, (char *)mode, store, bucket, (char *)k, (char *)nproc, NULL};
    c->index = index;
    if (!CHECK(pipe(to) == 0 && pipe(from) == 0))
        return 0;
    for (int i = 0; i < 2; i++) /* no later child inherits them */
        fcntl(to[i], F_SETFD, FD_CLOEXEC), fcntl(from[i], F_SETFD, FD_CLOEXEC);
    fflush(NULL);
    if ((c->pid = fork()) == 0) { /* only async-signal-safe calls until exec */
        dup2(to[0], 0);
        dup2(from[1], 1);
        execv(self_path, args);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    c->in = fdopen(to[1], "w");
    c->out = fdopen(from[0], "r");
    return CHECK(c->pid > 0 && c->in && c->out);
}

/* Reads the child's lines until one starting with `word` (left in line),
 * passing its failed checks on; 0 if it ended first. NULL: to its end. */
static int expect(child *c, const char *word, char *line, size_t size)
{
    while (fgets(line, (int)size, c->out)) {
        if (strncmp(line, "FAIL", 4) == 0)
            printf("child %d (pid %d): %s", c->index, (int)c->pid, line);
        else if (word && strncmp(line, word, strlen(word)) == 0)
            return 1;
    }
    if (word)
        printf("child %d (pid %d) ended before \"%s\"\n", c->index, (int)c->pid, word);
    return 0;
}

static void tell(child *c)
{
    fputs("go\n", c->in);
    fflush(c->in);
}

/* Reads the child's output to its end and checks that it exited with 0. */
static void reap(child *c)
{
    char line[512];
    int status = -1;
    expect(c, NULL, line, sizeof line);
    fclose(c->in);
    fclose(c->out);
    waitpid(c->pid, &status, 0);
    snprintf(line, sizeof line, "child %d (pid %d): wait status 0x%x", c->index, (int)c->pid, status);
    tu_check(WIFEXITED(status) && WEXITSTATUS(status) == 0, __FILE__, __LINE__, "the child passed", line);
}

/* A fresh bucket of the SEEDS records, and a fresh store path. */
static void setup(const char *name)
{
    tu_unique(bucket, sizeof bucket, "c-processes");
    CHECK(tu_seed_numbered(bucket, "notes", "r%02d", "seed", NULL, NULL, SEEDS));
    tu_store_path(store, sizeof store, name);
}

/* The server's label of `id` ("" if it has none). */
static void server_label(const char *id, char *out, size_t size)
{
    char path[256], *body = NULL, *p;
    snprintf(path, sizeof path, "/buckets/%s/collections/notes/records/%s", bucket, id);
    out[0] = '\0';
    if (tu_http("GET", path, NULL, &body) == 200 && body && (p = strstr(body, "\"label\":\"")) != NULL)
        snprintf(out, size, "%.*s", (int)strcspn(p + 9, "\""), p + 9);
    free(body);
}

/* Every record on the server (pages of at most 50, by id) against the rounds'
 * outcome: ids strictly ascending (none twice), each label as expected. */
static void check_server(int nproc)
{
    char path[512], last[32] = "", wrong[160] = "";
    int count = 0, page = 1;
    while (page > 0) {
        char *body = NULL, *p = NULL;
        snprintf(path, sizeof path, "/buckets/%s/collections/notes/records?_sort=id&_fields=label%s%s", bucket,
                 last[0] ? "&gt_id=" : "", last);
        if (!CHECK(tu_http("GET", path, NULL, &body) == 200 && body && (p = strstr(body, "\"data\":[")) != NULL)) {
            free(body);
            return;
        }
        for (page = 0; (p = strchr(p + 1, '{')) != NULL && strchr(p, '}'); page++, count++) {
            char id[32] = "", label[64] = "", want[64] = "(no such record)", *f;
            *strchr(p, '}') = '\0'; /* the record's fields: labels hold no braces */
            if ((f = strstr(p, "\"id\":\"")) != NULL)
                snprintf(id, sizeof id, "%.*s", (int)strcspn(f + 6, "\""), f + 6);
            if ((f = strstr(p, "\"label\":\"")) != NULL)
                snprintf(label, sizeof label, "%.*s", (int)strcspn(f + 9, "\""), f + 9);
            if (!wrong[0] && (strcmp(id, last) <= 0 || !expected_label(id, nproc, want, sizeof want) ||
                              strcmp(label, want) != 0))
                snprintf(wrong, sizeof wrong, "%s is \"%s\" (after %s)", id, label, last);
            snprintf(last, sizeof last, "%s", id);
            p += strlen(p);
        }
        free(body);
    }
    tu_check(!wrong[0], __FILE__, __LINE__, "every value on the server is its process's last", wrong);
    CHECK_INT(count, SEEDS + nproc * ROUNDS);
}

static void test_rounds(int nproc)
{
    char line[128], k[16], n[16], title[96];
    child kids[4];
    long long slowest = 0;
    int64_t start;
    snprintf(title, sizeof title, "%d processes edit, insert and save in %d rounds at once", nproc, ROUNDS);
    tu_section(title);
    setup("processes");
    snprintf(n, sizeof n, "%d", nproc);
    /* Each opens the store while the ones before it hold their first round's
     * changes unsaved in it (before issue 41 it took them for its own, and
     * sent them); then all save at once, and go on unhindered. */
    for (int i = 0; i < nproc; i++) {
        snprintf(k, sizeof k, "%d", i);
        if (!spawn(&kids[i], i, "child-rounds", k, n))
            return;
        CHECK(expect(&kids[i], "edited", line, sizeof line));
    }
    start = tu_now_ms();
    for (int i = 0; i < nproc; i++)
        tell(&kids[i]);
    for (int i = 0; i < nproc; i++)
        CHECK(expect(&kids[i], "saved", line, sizeof line));
    printf("  %d processes: %d rounds saved in %lld ms\n", nproc, ROUNDS, (long long)(tu_now_ms() - start));
    /* Every save is in the store: each child waits for its objects to hear
     * the others' (timed from here) while we read the server. */
    for (int i = 0; i < nproc; i++)
        tell(&kids[i]);
    check_server(nproc);
    for (int i = 0; i < nproc; i++) {
        if (CHECK(expect(&kids[i], "heard", line, sizeof line)) && atoll(line + 6) > slowest)
            slowest = atoll(line + 6);
        reap(&kids[i]);
    }
    printf("  %d processes: the slowest cache's check took %lld ms\n", nproc, slowest);
}

static void test_edit_save_edit(void)
{
    char line[128], label[64] = "";
    tether_context *b;
    tether_object *r01 = NULL, *r02 = NULL;
    size_t saved = 0, pending = 99;
    int64_t start;
    child a;
    tu_section("A edits r01, B saves, A edits r01 again and saves: no conflict");
    setup("processes-ab");
    if (!spawn(&a, 0, "child-a", NULL, NULL) || !CHECK(expect(&a, "edited", line, sizeof line)))
        return;
    if ((b = open_store(0)) != NULL) { /* while A's edit is in the store's outbox */
        tu_fetch_all(b, "notes");
        CHECK_OK(tether_context_change_count(b, &pending));
        CHECK_INT(pending, 0);
        CHECK_OK(tether_context_object(b, "notes", "r01", &r01));
        CHECK_OK(tether_context_object(b, "notes", "r02", &r02));
        CHECK_OK(tu_peek_text(r01, "label", label, sizeof label));
        CHECK_STR(label, "seed 1");
        set_label(r02, "B's");
        CHECK_CODE(tu_save(b, &saved), TETHER_OK);
        CHECK_INT(saved, 1);
        server_label("r01", label, sizeof label);
        CHECK_STR(label, "seed 1"); /* B did not send A's edit */
        server_label("r02", label, sizeof label);
        CHECK_STR(label, "B's");
    }
    tell(&a);
    CHECK(expect(&a, "saved", line, sizeof line));
    server_label("r01", label, sizeof label);
    CHECK_STR(label, "A second");
    start = tu_now_ms(); /* B's object hears A's save through the store */
    while (r01 && tu_peek_text(r01, "label", label, sizeof label) == TETHER_OK && strcmp(label, "A second") != 0 &&
           tu_now_ms() - start < HEAR_MS)
        tu_sleep_ms(20);
    CHECK_STR(label, "A second");
    printf("  B's object heard A's save in %lld ms\n", (long long)(tu_now_ms() - start));
    reap(&a);
    tether_object_free(r01);
    tether_object_free(r02);
    if (b)
        CHECK_OK(tether_context_close(b));
}

static void test_exclusive(void)
{
    char line[128], want[64], message[512];
    tether_context_options o;
    tether_kinto_options k;
    tether_context *ctx = NULL;
    child holder;
    tu_section("exclusive: another process's open fails naming the holder");
    setup("processes-exclusive");
    if (!spawn(&holder, 0, "child-exclusive", NULL, NULL) || !CHECK(expect(&holder, "opened", line, sizeof line)))
        return;
    snprintf(want, sizeof want, "process %d", (int)holder.pid);
    tu_options(&o, &k, tu_url(), bucket, store, TETHER_DELIVER_THREAD, 10000);
    for (o.exclusive = 0; o.exclusive <= 1; o.exclusive++) { /* a shared open, then an exclusive one */
        CHECK_STATUS(tether_context_open_kinto(&o, &k, &ctx), TETHER_E_BUSY);
        snprintf(message, sizeof message, "%s", tether_errmsg());
        tu_check(strstr(message, want) != NULL, __FILE__, __LINE__, "the message names the holder's pid", message);
        CHECK(ctx == NULL);
    }
    tell(&holder);
    reap(&holder);
    if ((ctx = open_store(1)) != NULL) /* once it closed, the store opens, exclusively too */
        CHECK_OK(tether_context_close(ctx));
}

int main(int argc, char **argv)
{
    self_path = strchr(argv[0], '/') ? argv[0] : "/proc/self/exe";
    tu_init(argv[0]);
    if (argc >= 4) { /* a child: MODE STORE BUCKET [K NPROC] */
        snprintf(store, sizeof store, "%s", argv[2]);
        snprintf(bucket, sizeof bucket, "%s", argv[3]);
    }
    if (argc == 6 && strcmp(argv[1], "child-rounds") == 0)
        child_rounds(atoi(argv[4]), atoi(argv[5]));
    else if (argc == 4 && strcmp(argv[1], "child-a") == 0)
        child_a();
    else if (argc == 4 && strcmp(argv[1], "child-exclusive") == 0)
        child_exclusive();
    else if (argc == 1) {
        test_rounds(2);
        test_rounds(4);
        test_edit_save_edit();
        test_exclusive();
    } else
        CHECK(!"usage: test_processes [child-rounds|child-a|child-exclusive STORE BUCKET [K NPROC]]");
    return tu_finish();
}
