/* test_kill.c — nothing is lost, nothing is sent twice: a child process makes
 * 1,150 changes (1,000 inserts with ids made by the library, 100 updates, 50
 * deletes), then saves; the parent kills it with SIGKILL at a random moment
 * of the save, and again in each of several rounds, each child reopening
 * the store and saving what is left. At the end the parent saves what
 * remains and checks the server: every insert there exactly once (a second
 * send would be a second record, the ids being random), every update and
 * delete applied, nothing else changed, and the pending changes never grew.
 *
 * Then, journaled: round after round a child reopens the store, makes a
 * burst of mixed changes (inserts with and without values, edits of
 * records seeded, inserted or edited before, deletes) and saves; it is
 * killed at a random moment, during the burst, at the save's start, with
 * batches on the wire or just after the save returned. The child journals
 * (fsync'd, before and after each call) what the library said succeeded;
 * the parent reopens, saves, and compares the server with the journal:
 * nothing lost, nothing duplicated, no delete undone, nothing changed that
 * nobody changed; and every child that was not killed saved with TETHER_OK
 * (a retry meeting its own earlier write is no conflict).
 * TETHER_KILL_ROUNDS sets its rounds (a few by default; make fuzz runs more),
 * TETHER_KILL_SCENARIOS the number of the first kind (3 by default).
 *
 * The server is Kinto, or with TETHER_KILL_SERVER=postgres a PostgreSQL
 * schema of its own (the `postgres` suite of scripts/run-tests): the same
 * changes, kills and checks; kill_server.c is what differs. */
#define _POSIX_C_SOURCE 200809L

#include "kill_server.h"

#include <fcntl.h>
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
    return ks_open(store);
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
        tether_object_free(obj);
    }
    for (i = 0; i < UPDATES + DELETES; i++) {
        tether_object *obj = NULL;
        tether_value n = {TETHER_TYPE_INTEGER, i + 1000, 0.0, NULL, 0};
        snprintf(id, sizeof id, "s%03d", i);
        if (tether_context_object(ctx, collection, id, &obj) != TETHER_OK)
            _exit(5);
        if ((i < UPDATES ? tether_object_set(obj, "N", &n) : tether_object_delete(obj)) != TETHER_OK)
            _exit(6);
        tether_object_free(obj);
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
    char *body = NULL;
    static int ns[INSERTS * 2];
    int i, seen[INSERTS], count;
    long status;
    tu_section("the server holds every change exactly once");
    memset(seen, 0, sizeof seen);
    count = ks_tagged_ns(collection, "kill", ns, INSERTS * 2);
    CHECK_INT(count, INSERTS);
    for (i = 0; i < count && i < INSERTS * 2; i++)
        if (ns[i] >= 0 && ns[i] < INSERTS)
            seen[ns[i]]++;
    for (i = 0; i < INSERTS; i++)
        if (seen[i] != 1) {
            CHECK_INT(seen[i], 1);
            break;
        }
    CHECK(ks_read_all(collection));
    for (i = 0; i < SEEDED; i++) {
        long want = i < UPDATES ? 200 : i < UPDATES + DELETES ? 404 : 200;
        char expect[64], id[16];
        snprintf(id, sizeof id, "s%03d", i);
        status = ks_record(collection, id, &body);
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
    static char names[SEEDED][16];
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
        ids[i] = names[i];
    }
    if (!CHECK(ks_make(collection, ids, SEEDED)))
        return;
    tu_section(section);
    for (i = 0; i < rounds && !finished; i++) {
        /* Most kills early, some late: a save of this size takes a few
         * seconds here over Kinto, a few hundred ms over PostgreSQL. */
        int kill_ms = ks_is_postgres() ? rand() % (i % 3 == 2 ? 300 : 60) : rand() % (i % 3 == 2 ? 2500 : 700);
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

/* ------------------------------------------------------------ journaled */

#define J_SEEDED 60
#define J_OPS 150
#define J_MAX 4096 /* records the journal can name */

static char jpath[512];
static char jcollection[32];

/* The state the journal says a record has: `exists`, N (has_n, n), Tag
 * (a number: the Tag is "t<tag>"; -1 none). `maybe`: its last change was
 * made but not confirmed (killed in the call): either state is right. */
typedef struct jrec {
    char id[48];
    int exists, has_n, maybe;
    long n, tag;
    int prev_exists, prev_has_n;
    long prev_n, prev_tag;
} jrec;

static jrec jrecs[J_MAX];
static int jcount;

static jrec *jfind(const char *id, int create)
{
    for (int i = 0; i < jcount; i++)
        if (strcmp(jrecs[i].id, id) == 0)
            return &jrecs[i];
    if (!create || jcount >= J_MAX)
        return NULL;
    memset(&jrecs[jcount], 0, sizeof jrecs[0]);
    snprintf(jrecs[jcount].id, sizeof jrecs[0].id, "%s", id);
    jrecs[jcount].tag = -1;
    return &jrecs[jcount++];
}

/* Replays the journal over the seeded records: "?op" lines are intents,
 * "op" lines confirmations (the call returned TETHER_OK). An intent never
 * confirmed (the last line only: the child was killed in the call) leaves
 * its record `maybe`. Returns the lines read; *stage gets the last stage
 * line's letter (B burst, S save started, R save returned OK), or 0. */
static int jreplay(int *stage)
{
    FILE *f = fopen(jpath, "r");
    char line[160];
    int lines = 0;
    jcount = 0;
    *stage = 0;
    for (int i = 0; i < J_SEEDED; i++) {
        char id[16];
        jrec *r;
        snprintf(id, sizeof id, "j%03d", i);
        r = jfind(id, 1);
        r->exists = 1;
        r->has_n = 1;
        r->n = i;
    }
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        char op, id[48];
        long value = 0;
        int intent = line[0] == '?';
        const char *text = line + intent;
        jrec *r;
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n')
            break; /* cut by the kill */
        lines++;
        if (text[0] == '#') {
            *stage = text[1];
            continue;
        }
        if (sscanf(text, "%c %47s %ld", &op, id, &value) < 2 || strcmp(id, "-") == 0 || !(r = jfind(id, 1)))
            continue;
        if (intent) {
            r->prev_exists = r->exists, r->prev_has_n = r->has_n, r->prev_n = r->n, r->prev_tag = r->tag;
            r->maybe = 1;
        } else {
            r->maybe = 0;
        }
        switch (op) {
        case 'I': r->exists = 1, r->has_n = 0, r->tag = -1; break;
        case 'N': r->has_n = 1, r->n = value; break;
        case 'T': r->tag = value; break;
        case 'D': r->exists = 0; break;
        }
    }
    fclose(f);
    return lines;
}

static void jwrite(int fd, const char *line)
{
    size_t len = strlen(line);
    if (write(fd, line, len) != (ssize_t)len || fsync(fd) != 0)
        _exit(9);
}

/* Where a journaled round's kill aims: the parent kills soon after the
 * child says it got there. */
enum { AT_BURST, AT_SAVE_START, AT_MID_SAVE, AT_SAVE_RETURNED, AT_COUNT };
static const char *const at_names[AT_COUNT] = {"in the burst", "at the save's start", "mid-save", "after the save returned"};

static void tell(int ready)
{
    if (write(ready, "x", 1) != 1)
        _exit(7);
}

/* The child of a journaled round: a burst of changes made from `seed`,
 * then a save; it tells `ready` when it reaches `at` (op `op` of the burst). */
static void journal_child(int ready, unsigned seed, int at, int op)
{
    tether_context *ctx;
    int fd, stage, live[J_MAX], nlive = 0, i;
    char line[160];
    jreplay(&stage);
    for (i = 0; i < jcount; i++)
        if (jrecs[i].exists && !jrecs[i].maybe)
            live[nlive++] = i;
    ctx = open_quietly();
    fd = open(jpath, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (!ctx || fd < 0)
        _exit(3);
    snprintf(collection, sizeof collection, "%s", jcollection);
    if (!fetch_all(ctx))
        _exit(3);
    srand(seed);
    jwrite(fd, "#B\n");
    for (i = 0; i < J_OPS; i++) {
        int what = rand() % 100;
        tether_object *obj = NULL;
        if (at == AT_BURST && i == op)
            tell(ready);
        if (what < 25 || nlive == 0) {
            /* An insert (id made by the library), with values half the time. */
            jwrite(fd, "?I -\n");
            if (tether_context_insert(ctx, jcollection, NULL, &obj) != TETHER_OK)
                _exit(4);
            snprintf(line, sizeof line, "I %s\n", tu_id(obj));
            jwrite(fd, line);
            {
                jrec *r = jfind(tu_id(obj), 1);
                if (!r)
                    _exit(4);
                r->exists = 1;
                live[nlive++] = (int)(r - jrecs);
            }
            if (what % 2) {
                long n = (long)seed % 100000 * 1000 + i;
                tether_value v = {TETHER_TYPE_INTEGER, n, 0.0, NULL, 0};
                snprintf(line, sizeof line, "?N %s %ld\n", tu_id(obj), n);
                jwrite(fd, line);
                if (tether_object_set(obj, "N", &v) != TETHER_OK)
                    _exit(4);
                jwrite(fd, line + 1);
            }
        } else {
            int pick = rand() % nlive;
            const char *id = jrecs[live[pick]].id;
            if (tether_context_object(ctx, jcollection, id, &obj) != TETHER_OK)
                _exit(5);
            if (what < 40) {
                snprintf(line, sizeof line, "?D %s\n", id);
                jwrite(fd, line);
                if (tether_object_delete(obj) != TETHER_OK)
                    _exit(6);
                jwrite(fd, line + 1);
                live[pick] = live[--nlive];
            } else if (what < 75) {
                long n = (long)seed % 100000 * 1000 + i;
                tether_value v = {TETHER_TYPE_INTEGER, n, 0.0, NULL, 0};
                snprintf(line, sizeof line, "?N %s %ld\n", id, n);
                jwrite(fd, line);
                if (tether_object_set(obj, "N", &v) != TETHER_OK)
                    _exit(6);
                jwrite(fd, line + 1);
            } else {
                char text[32];
                long tag = (long)seed % 100000 * 1000 + i;
                tether_value v = {TETHER_TYPE_TEXT, 0, 0.0, text, 0};
                snprintf(text, sizeof text, "t%ld", tag);
                v.length = strlen(text);
                snprintf(line, sizeof line, "?T %s %ld\n", id, tag);
                jwrite(fd, line);
                if (tether_object_set(obj, "Tag", &v) != TETHER_OK)
                    _exit(6);
                jwrite(fd, line + 1);
            }
        }
        tether_object_free(obj);
    }
    jwrite(fd, "#S\n");
    if (at == AT_SAVE_START || at == AT_MID_SAVE)
        tell(ready);
    if (save_and_wait(ctx, 600) != TETHER_OK)
        _exit(8);
    jwrite(fd, "#R\n");
    if (at == AT_SAVE_RETURNED)
        tell(ready);
    if (tether_context_close(ctx) != TETHER_OK)
        _exit(8);
    _exit(0);
}

/* Whether the server's record `body` (NULL: none) is the state r says (prev: the one before its last change). */
static int jmatches(const jrec *r, const char *body, int prev)
{
    int exists = prev ? r->prev_exists : r->exists, has_n = prev ? r->prev_has_n : r->has_n;
    long n = prev ? r->prev_n : r->n, tag = prev ? r->prev_tag : r->tag;
    char want[64];
    if (!exists || !body)
        return !exists && !body;
    if (has_n) {
        snprintf(want, sizeof want, "\"N\":%ld,", n);
        if (!strstr(body, want)) {
            snprintf(want, sizeof want, "\"N\":%ld}", n);
            if (!strstr(body, want))
                return 0;
        }
    } else if (strstr(body, "\"N\":")) {
        return 0;
    }
    if (tag >= 0) {
        snprintf(want, sizeof want, "\"Tag\":\"t%ld\"", tag);
        return strstr(body, want) != NULL;
    }
    return r->id[0] == 'j' ? strstr(body, "\"Tag\":\"seed\"") != NULL : strstr(body, "\"Tag\":") == NULL;
}

static void check_journal(void)
{
    static char ids[J_MAX][48];
    int stage, count, unknown = 0, wrong = 0, maybe_insert = 0;
    jreplay(&stage);
    count = ks_ids(jcollection, ids, J_MAX);
    tu_section("the server holds what the journal says succeeded, each once, nothing else");
    if (!CHECK(count >= 0 && count <= J_MAX))
        return;
    /* An insert killed in its call (its id never journaled) may have reached
     * the outbox, hence the server: a "?I" line not followed by its "I id",
     * wherever it is (a later round's child journals after it). */
    {
        FILE *f = fopen(jpath, "r");
        char line[160];
        int open_insert = 0;
        while (f && fgets(line, sizeof line, f)) {
            if (line[strlen(line) - 1] != '\n')
                break; /* a line cut by the kill */
            if (open_insert && strncmp(line, "I ", 2) != 0)
                maybe_insert++;
            open_insert = strncmp(line, "?I", 2) == 0;
        }
        maybe_insert += open_insert;
        if (f)
            fclose(f);
    }
    for (int i = 0; i < count; i++)
        if (!jfind(ids[i], 0) || !jfind(ids[i], 0)->exists) {
            const jrec *r = jfind(ids[i], 0);
            if (r && r->maybe && r->prev_exists)
                continue; /* a delete killed in its call */
            unknown++;
            if (unknown > maybe_insert)
                printf("  on the server, and no journaled change made it: %s\n", ids[i]);
        }
    CHECK(unknown <= maybe_insert);
    CHECK(ks_read_all(jcollection));
    for (int i = 0; i < jcount; i++) {
        const jrec *r = &jrecs[i];
        char *body = NULL;
        long status = ks_record(jcollection, r->id, &body);
        if (status != 200 && status != 404) {
            CHECK_INT(status, 200);
        } else if (!jmatches(r, status == 200 ? body : NULL, 0) && !(r->maybe && jmatches(r, status == 200 ? body : NULL, 1))) {
            if (wrong++ < 5)
                printf("  %s: the server has %s; the journal says %s (N %s%ld, Tag %ld)%s\n", r->id,
                       status == 200 ? body : "nothing", r->exists ? "it exists" : "it was deleted",
                       r->has_n ? "" : "none/", r->n, r->tag, r->maybe ? " or its state before" : "");
        }
        free(body);
    }
    CHECK_INT(wrong, 0);
    printf("%d records journaled, %d on the server\n", jcount, count);
}

static void journaled(int rounds)
{
    static char names[J_SEEDED][16];
    const char *ids[J_SEEDED];
    int i, kills[AT_COUNT] = {0}, finished_count = 0;
    tether_context *ctx;
    size_t left = 0;
    snprintf(jcollection, sizeof jcollection, "journal");
    tu_store_path(store, sizeof store, "journal");
    tu_store_path(jpath, sizeof jpath, "journal-log");
    for (i = 0; i < J_SEEDED; i++) {
        snprintf(names[i], sizeof names[i], "j%03d", i);
        ids[i] = names[i];
    }
    if (!CHECK(ks_make(jcollection, ids, J_SEEDED)))
        return;
    tu_section("journaled: kills during a burst of mixed changes, at the save's start, mid-save, after it");
    for (i = 0; i < rounds; i++) {
        int pipefd[2], status = 0;
        unsigned seed = (unsigned)rand();
        int at = i % AT_COUNT, op = rand() % J_OPS;
        /* Mid-save: batches on the wire (a save of this size takes a few
         * hundred ms here over Kinto, a few tens over PostgreSQL). */
        int kill_ms = at == AT_MID_SAVE ? (ks_is_postgres() ? rand() % 30 : 5 + rand() % 300) : rand() % 4;
        pid_t pid;
        char byte;
        if (!CHECK(pipe(pipefd) == 0))
            return;
        pid = fork();
        if (pid == 0) {
            close(pipefd[0]);
            journal_child(pipefd[1], seed, at, op);
        }
        close(pipefd[1]);
        if (read(pipefd[0], &byte, 1) == 1) {
            tu_sleep_ms(kill_ms);
            kill(pid, SIGKILL);
        }
        close(pipefd[0]);
        CHECK(waitpid(pid, &status, 0) == pid);
        if (WIFEXITED(status)) {
            CHECK_INT(WEXITSTATUS(status), 0); /* not killed: its save was TETHER_OK */
            finished_count++;
        } else {
            kills[at]++;
        }
    }
    printf("%d rounds, %d finished; killed", rounds, finished_count);
    for (i = 0; i < AT_COUNT; i++)
        printf("%s %s %d", i ? "," : "", at_names[i], kills[i]);
    printf("\n");
    tu_section("journaled: reopened, the rest is saved");
    snprintf(collection, sizeof collection, "%s", jcollection);
    ctx = open_quietly();
    if (CHECK(ctx != NULL)) {
        CHECK_CODE(save_and_wait(ctx, 600), TETHER_OK);
        CHECK_OK(tether_context_change_count(ctx, &left));
        CHECK_INT(left, 0);
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }
    check_journal();
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
    if (getenv("TETHER_KILL_SCENARIOS")) /* the unjournaled ones; 0: the journaled only */
        scenarios = atoi(getenv("TETHER_KILL_SCENARIOS"));
    srand(seed);
    if (!ks_init())
        return tu_finish();
    printf("random seed %u, over %s\n", seed, ks_name());
    for (i = 0; i < scenarios; i++)
        scenario(i, TU_SANITIZED ? 4 : 8);
    {
        const char *env = getenv("TETHER_KILL_ROUNDS");
        journaled(env && atoi(env) > 0 ? atoi(env) : TU_SANITIZED ? 4 : 8);
    }
    ks_finish();
    return tu_finish();
}
