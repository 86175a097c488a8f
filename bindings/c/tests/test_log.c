/* test_log.c — the log hook (tether_log_set): off by default (nothing on
 * stderr), levels up to the maximum only, a request per message at DEBUG, a
 * warning for a server that cannot be reached, no password in any message
 * (given as options or in the URL), calls never overlapping, and a hook
 * replaced while threads log never called once tether_log_set returns (its
 * userdata is freed right after: AddressSanitizer would see a late call). */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char bucket[128];
static char password[128];

/* ------------------------------------------------------------ recorder */

#define MAX_LINES 4000

typedef struct line {
    tether_log_level level;
    char category[32];
    char message[512];
} line;

typedef struct recorder {
    pthread_mutex_t mu;
    line *lines;
    int count;       /* lines kept (at most MAX_LINES) */
    int total;       /* calls */
    int bad_args;    /* NULL strings, unknown level or category */
    int set_inside;  /* tether_log_set's status when called from the hook */
    int try_set;     /* call tether_log_set from the hook once */
} recorder;

static atomic_int in_hook;    /* hooks running now */
static atomic_int overlapped; /* calls that found another running */

static void rec_init(recorder *r)
{
    pthread_mutex_init(&r->mu, NULL);
    r->lines = calloc(MAX_LINES, sizeof(line));
    r->count = r->total = r->bad_args = 0;
    r->set_inside = 1;
    r->try_set = 0;
}

static void rec_destroy(recorder *r)
{
    free(r->lines);
    pthread_mutex_destroy(&r->mu);
}

static int known_category(const char *c)
{
    static const char *const known[] = {"http", "sync", "store", "save", "migration", "context"};
    size_t i;
    for (i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(c, known[i]) == 0)
            return 1;
    return 0;
}

static void on_log(tether_log_level level, const char *category, const char *message, void *userdata)
{
    recorder *r = userdata;
    if (atomic_fetch_add(&in_hook, 1) != 0)
        atomic_fetch_add(&overlapped, 1);
    pthread_mutex_lock(&r->mu);
    r->total++;
    if (!category || !message || level < TETHER_LOG_ERROR || level > TETHER_LOG_DEBUG ||
        !known_category(category)) {
        r->bad_args++;
    } else if (r->count < MAX_LINES) {
        line *l = &r->lines[r->count++];
        l->level = level;
        snprintf(l->category, sizeof l->category, "%s", category);
        snprintf(l->message, sizeof l->message, "%s", message);
    }
    if (r->try_set) {
        r->try_set = 0;
        r->set_inside = tether_log_set(TETHER_LOG_OFF, NULL, NULL);
    }
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_sub(&in_hook, 1);
}

/* Lines at `level` (0: any) of `category` (NULL: any) whose message holds
 * `text` (NULL: any). */
static int rec_find(recorder *r, tether_log_level level, const char *category, const char *text)
{
    int i, n = 0;
    pthread_mutex_lock(&r->mu);
    for (i = 0; i < r->count; i++) {
        line *l = &r->lines[i];
        if ((level == 0 || l->level == level) && (!category || strcmp(l->category, category) == 0) &&
            (!text || strstr(l->message, text)))
            n++;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

static int rec_max_level(recorder *r)
{
    int i, max = 0;
    pthread_mutex_lock(&r->mu);
    for (i = 0; i < r->count; i++)
        if ((int)r->lines[i].level > max)
            max = (int)r->lines[i].level;
    pthread_mutex_unlock(&r->mu);
    return max;
}

static void rec_print(recorder *r, int most)
{
    int i;
    pthread_mutex_lock(&r->mu);
    for (i = 0; i < r->count && i < most; i++)
        printf("   [%d %s] %s\n", (int)r->lines[i].level, r->lines[i].category, r->lines[i].message);
    pthread_mutex_unlock(&r->mu);
}

/* ------------------------------------------------------------ sessions */

static int seed(void)
{
    char path[256];
    /* Open to any user: the tests sign in as logtest, with a password of their own. */
    snprintf(path, sizeof path, "/buckets/%s", bucket);
    if (tu_http("PUT", path, "{\"permissions\": {\"read\": [\"system.Everyone\"], \"write\": [\"system.Everyone\"]}}",
                NULL) / 100 != 2 ||
        !tu_put_collection(bucket, "tasks",
                           "{\"type\": \"object\", \"properties\": {"
                           "\"n\": {\"type\": \"integer\"}, \"title\": {\"type\": \"string\"}}}"))
        return 0;
    return tu_put_numbered(bucket, "tasks", "t%02d", "{\"n\": %d, \"title\": \"task %d\"}", 20);
}

/* Opens as logtest:<password>, on `url`; fetches every task; edits one and
 * saves; closes. */
static void session(const char *url, const char *user, const char *store, const char *title)
{
    tether_context_options o;
    tether_kinto_options k;
    tether_context *ctx = NULL;
    tether_object *obj = NULL;
    tether_value v = {TETHER_TYPE_TEXT, 0, 0.0, (char *)title, strlen(title)};
    size_t saved = 0;

    tu_options(&o, &k, url, bucket, store, TETHER_DELIVER_THREAD, 10000);
    k.username = user;
    k.password = user ? password : NULL;
    if (CHECK_OK(tether_context_open_kinto(&o, &k, &ctx)) != TETHER_OK)
        return;
    tu_fetch_all(ctx, "tasks");
    if (CHECK_OK(tether_context_object(ctx, "tasks", "t03", &obj)) == TETHER_OK) {
        CHECK_OK(tether_object_set(obj, "title", &v));
        CHECK_OK(tu_save(ctx, &saved));
        CHECK_INT(saved, 1);
        tether_object_free(obj);
    }
    CHECK_OK(tether_context_close(ctx));
}

static void test_off_by_default(void)
{
    char store[512], err_path[512];
    int saved_fd, fd;
    struct stat st;

    tu_section("off by default: a session writes nothing to stderr or anywhere");
    tu_store_path(store, sizeof store, "log-off");
    tu_store_path(err_path, sizeof err_path, "log-off-stderr");
    fflush(stderr);
    saved_fd = dup(2);
    fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    dup2(fd, 2);
    close(fd);
    session(tu_url(), "logtest", store, "off");
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    CHECK(stat(err_path, &st) == 0);
    CHECK_INT(st.st_size, 0);
    unlink(err_path);
}

static void test_arguments(void)
{
    recorder r;
    rec_init(&r);
    tu_section("tether_log_set: bad levels, removal, and from inside the hook");
    CHECK_STATUS(tether_log_set((tether_log_level)5, on_log, &r), TETHER_E_INVALID);
    CHECK_STATUS(tether_log_set((tether_log_level)-1, on_log, &r), TETHER_E_INVALID);
    CHECK_OK(tether_log_set(TETHER_LOG_OFF, NULL, NULL));
    CHECK_OK(tether_log_set(TETHER_LOG_DEBUG, NULL, &r)); /* no callback: off */
    CHECK_OK(tether_log_set(TETHER_LOG_OFF, on_log, &r)); /* level off: off */
    {
        char store[512];
        tu_store_path(store, sizeof store, "log-args");
        session(tu_url(), "logtest", store, "args");
    }
    CHECK_INT(r.total, 0);

    /* From inside the hook: TETHER_E_BUSY, and the hook stays. */
    r.try_set = 1;
    CHECK_OK(tether_log_set(TETHER_LOG_INFO, on_log, &r));
    {
        char store[512];
        tu_store_path(store, sizeof store, "log-inside");
        session(tu_url(), "logtest", store, "inside");
    }
    CHECK_OK(tether_log_set(TETHER_LOG_OFF, NULL, NULL));
    CHECK_INT(r.set_inside, TETHER_E_BUSY);
    CHECK(r.total > 1);
    CHECK_INT(r.bad_args, 0);
    rec_destroy(&r);
}

static void test_levels(void)
{
    static const tether_log_level levels[] = {TETHER_LOG_ERROR, TETHER_LOG_WARNING, TETHER_LOG_INFO,
                                              TETHER_LOG_DEBUG};
    size_t i;
    for (i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        recorder r;
        char store[512], name[64];
        rec_init(&r);
        snprintf(name, sizeof name, "messages up to level %d only", (int)levels[i]);
        tu_section(name);
        CHECK_OK(tether_log_set(levels[i], on_log, &r));
        snprintf(name, sizeof name, "log-level-%d", (int)levels[i]);
        tu_store_path(store, sizeof store, name);
        session(tu_url(), "logtest", store, name);
        CHECK_OK(tether_log_set(TETHER_LOG_OFF, NULL, NULL));
        CHECK(rec_max_level(&r) <= (int)levels[i]);
        CHECK_INT(r.bad_args, 0);
        if (levels[i] >= TETHER_LOG_INFO) {
            CHECK(rec_find(&r, TETHER_LOG_INFO, "store", "store opened") >= 1);
            CHECK(rec_find(&r, TETHER_LOG_INFO, "context", "context opened online") == 1);
            CHECK(rec_find(&r, TETHER_LOG_INFO, "save", "save of 1 changes: 1 saved") == 1);
            CHECK(rec_find(&r, TETHER_LOG_INFO, "migration", "tasks: table") == 1);
        }
        if (levels[i] == TETHER_LOG_DEBUG) {
            /* Each request: method, path, status, time. */
            CHECK(rec_find(&r, TETHER_LOG_DEBUG, "http", "GET /v1/ -> 200") >= 1);
            CHECK(rec_find(&r, TETHER_LOG_DEBUG, "http", "/collections/tasks/records") >= 1);
            CHECK(rec_find(&r, TETHER_LOG_DEBUG, "http", "POST /v1/batch") +
                      rec_find(&r, TETHER_LOG_DEBUG, "http", "PATCH /v1/buckets/") >= 1);
            CHECK(rec_find(&r, TETHER_LOG_DEBUG, "http", " ms)") >= 3);
            CHECK(rec_find(&r, TETHER_LOG_DEBUG, "sync", "fetch of tasks") >= 1);
            if (!rec_find(&r, TETHER_LOG_DEBUG, "http", "/collections/tasks/records"))
                rec_print(&r, 40);
        } else {
            CHECK_INT(rec_find(&r, TETHER_LOG_DEBUG, NULL, NULL), 0);
        }
        rec_destroy(&r);
    }
}

static void test_unreachable(void)
{
    recorder r;
    char store[512], cached[512], dead[256];
    tether_context_options o;
    tether_kinto_options k;
    tether_context *ctx = NULL;
    tu_proxy *px;

    tu_section("a server that cannot be reached: a warning");
    px = tu_proxy_start();
    snprintf(dead, sizeof dead, "%s", tu_proxy_url(px));
    tu_store_path(cached, sizeof cached, "log-offline");
    session(dead, "logtest", cached, "offline"); /* a store with a model, through the proxy */
    tu_proxy_stop(px); /* its port now refuses connections */

    rec_init(&r);
    CHECK_OK(tether_log_set(TETHER_LOG_WARNING, on_log, &r));
    tu_store_path(store, sizeof store, "log-unreachable");
    tu_options(&o, &k, dead, bucket, store, TETHER_DELIVER_THREAD, 3000);
    CHECK_FAILS(tether_context_open_kinto(&o, &k, &ctx));
    CHECK(rec_find(&r, TETHER_LOG_WARNING, "http", "cannot reach the server") >= 1);

    /* With a store holding a model: it opens offline, and says so. */
    tu_options(&o, &k, dead, bucket, cached, TETHER_DELIVER_THREAD, 3000);
    k.username = "logtest";
    k.password = password;
    if (CHECK_OK(tether_context_open_kinto(&o, &k, &ctx)) == TETHER_OK)
        CHECK_OK(tether_context_close(ctx));
    CHECK(rec_find(&r, TETHER_LOG_WARNING, "context", "opening offline") == 1);
    CHECK_OK(tether_log_set(TETHER_LOG_OFF, NULL, NULL));
    if (!rec_find(&r, TETHER_LOG_WARNING, "http", "cannot reach the server"))
        rec_print(&r, 20);
    CHECK(rec_max_level(&r) <= TETHER_LOG_WARNING);
    rec_destroy(&r);
}

static void test_no_password(void)
{
    recorder r;
    char store[512], url[512];
    const char *root = tu_url(), *scheme = strstr(root, "://");
    int i, leaks = 0;

    tu_section("no password in any message (options, then the URL's user info)");
    rec_init(&r);
    CHECK_OK(tether_log_set(TETHER_LOG_DEBUG, on_log, &r));
    tu_store_path(store, sizeof store, "log-password");
    session(root, "logtest", store, "secret-free");
    CHECK(scheme != NULL);
    snprintf(url, sizeof url, "%.*s://logtest:%s@%s", (int)(scheme - root), root, password, scheme + 3);
    tu_store_path(store, sizeof store, "log-password-url");
    session(url, NULL, store, "secret-free again");
    CHECK_OK(tether_log_set(TETHER_LOG_OFF, NULL, NULL));
    CHECK(r.count > 20);
    for (i = 0; i < r.count; i++) {
        const char *m = r.lines[i].message;
        if (strstr(m, password) || strstr(m, "logtest:") || strstr(m, "Authorization") ||
            strstr(m, "authorization")) {
            printf("   leaked: %s\n", m);
            leaks++;
        }
    }
    CHECK_INT(leaks, 0);
    CHECK_INT(r.count < MAX_LINES, 1);
    rec_destroy(&r);
}

/* ------------------------------------------------------------ replacing */

#define HOOK_ALIVE 0x600d600d
#define HOOK_DEAD 0x0dead0ff

typedef struct hook_data {
    atomic_int magic;
    atomic_int calls;
} hook_data;

static atomic_int late_calls;
static atomic_int stress_calls;
static atomic_int stop_threads;
static atomic_int fetches_done;

static void on_stress(tether_log_level level, const char *category, const char *message, void *userdata)
{
    hook_data *d = userdata;
    (void)level, (void)category, (void)message;
    if (atomic_fetch_add(&in_hook, 1) != 0)
        atomic_fetch_add(&overlapped, 1);
    if (atomic_load(&d->magic) != HOOK_ALIVE)
        atomic_fetch_add(&late_calls, 1);
    atomic_fetch_add(&d->calls, 1);
    atomic_fetch_add(&stress_calls, 1);
    atomic_fetch_sub(&in_hook, 1);
}

static void *fetching(void *arg)
{
    tether_context *ctx = arg;
    while (!atomic_load(&stop_threads)) {
        tu_fetch f;
        tu_fetch_init(&f);
        if (tu_fetch_start(ctx, &f, "tasks", "n", 0, TETHER_POLICY_CACHE_ONLY, NULL) == TETHER_OK &&
            tu_fetch_wait(&f, TU_WAIT_MS))
            atomic_fetch_add(&fetches_done, 1);
        tu_fetch_destroy(&f);
    }
    return NULL;
}

static void test_replace_while_logging(void)
{
    char store[512];
    tether_context *ctx;
    pthread_t threads[3];
    hook_data *current = NULL;
    int i, rounds = 0;
    int64_t end;

    tu_section("a hook replaced while threads log: never called after tether_log_set returns");
    tu_store_path(store, sizeof store, "log-stress");
    ctx = tu_open(bucket, store, TETHER_DELIVER_THREAD);
    if (!ctx)
        return;
    tu_fetch_all(ctx, "tasks");
    atomic_store(&stop_threads, 0);
    for (i = 0; i < 3; i++)
        pthread_create(&threads[i], NULL, fetching, ctx);
    tu_sleep_ms(50); /* the threads are fetching */
    end = tu_now_ms() + (TU_SANITIZED ? 700 : 1500);
    for (i = 0; tu_now_ms() < end; i++) {
        hook_data *next = NULL, *old = current;
        int off = i % 10 == 9;
        if (!off) {
            next = malloc(sizeof *next);
            atomic_init(&next->magic, HOOK_ALIVE);
            atomic_init(&next->calls, 0);
        }
        if (tether_log_set(off ? TETHER_LOG_OFF : (i % 2 ? TETHER_LOG_DEBUG : TETHER_LOG_INFO), on_stress, next) !=
            TETHER_OK)
            CHECK(0);
        current = next;
        if (old) {
            /* The old hook may not run from here on: free what it uses. */
            atomic_store(&old->magic, HOOK_DEAD);
            free(old);
        }
        if (i % 16 == 1) /* a DEBUG hook: each fetch's end is heard */
            tu_sleep_ms(1);
        rounds++;
    }
    CHECK_OK(tether_log_set(TETHER_LOG_OFF, NULL, NULL));
    if (current) {
        atomic_store(&current->magic, HOOK_DEAD);
        free(current);
    }
    atomic_store(&stop_threads, 1);
    for (i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
    CHECK_OK(tether_context_close(ctx));
    printf("   %d swaps, %d fetches, %d messages heard\n", rounds, atomic_load(&fetches_done),
           atomic_load(&stress_calls));
    CHECK(atomic_load(&stress_calls) > 0);
    CHECK_INT(atomic_load(&late_calls), 0);
    CHECK_INT(atomic_load(&overlapped), 0);
}

int main(void)
{
    tu_init("test_log");
    tu_unique(bucket, sizeof bucket, "log");
    snprintf(password, sizeof password, "pw-%ld-%lld-not-for-logs", (long)getpid(), (long long)tu_now_ms());
    if (!seed()) {
        CHECK(0);
        return tu_finish();
    }
    test_off_by_default();
    test_arguments();
    test_levels();
    test_unreachable();
    test_no_password();
    test_replace_while_logging();
    CHECK_INT(atomic_load(&overlapped), 0);
    return tu_finish();
}
