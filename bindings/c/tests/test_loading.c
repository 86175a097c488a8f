/* test_loading.c — libtether loads libcurl when it first needs HTTP, not when
 * it is loaded itself: loading libcurl.so.4 (some 30 libraries) was most of
 * the time of a dlopen of libtether.so.
 *
 * This program cannot see that in its own address space: like every test
 * program it links libcurl (testutil seeds the server with it). So it seeds
 * a bucket, then runs a probe (this file built with TU_LOADING_PROBE; see the
 * Makefile) that links neither libtether nor libcurl: the probe dlopens the
 * libtether.so this program uses and reports, from /proc/self/maps, whether
 * libcurl is mapped after the dlopen (it must not be) and after opening a
 * context on the server and fetching (it must be). */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The path of the first mapping of this process whose path contains `part`
 * into buf (size > 0); 1 if there is one. */
static int mapped(const char *part, char *buf, size_t size)
{
    char line[1024];
    int found = 0;
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps)
        return 0;
    while (!found && fgets(line, sizeof line, maps)) {
        char *path = strchr(line, '/');
        if (path && strstr(path, part)) {
            path[strcspn(path, "\n")] = '\0';
            snprintf(buf, size, "%s", path);
            found = 1;
        }
    }
    fclose(maps);
    return found;
}

#ifdef TU_LOADING_PROBE

/* loading_probe LIBTETHER URL BUCKET STORE: prints "name value" lines, each a
 * fact test_loading checks; exits 0 unless its arguments are wrong. */

#include <dlfcn.h>
#include <time.h>

#include "tether.h"

static int curl_mapped(void)
{
    char path[512];
    return mapped("/libcurl", path, sizeof path);
}

static struct {
    int (*options_init)(tether_context_options *, unsigned int);
    int (*kinto_options_init)(tether_kinto_options *, unsigned int);
    int (*open)(const tether_context_options *, const tether_kinto_options *, tether_context **);
    int (*close)(tether_context *);
    int (*poll)(tether_context *, int, size_t *);
    int (*fetch_options_init)(tether_fetch_options *, unsigned int);
    int (*fetch_start)(tether_context *, const tether_fetch_options *, tether_fetch_cb, void *, tether_task **);
    int (*results_count)(tether_results *, size_t *);
    int (*results_free)(tether_results *);
    const char *(*errmsg)(void);
} t;

static int final_status = 1; /* not yet */
static size_t final_count;

static void on_fetch(tether_task *task, tether_phase phase, int status, const char *message,
                     tether_results *results, void *userdata)
{
    (void)task, (void)message, (void)userdata;
    if (phase == TETHER_PHASE_FINAL) {
        final_status = status;
        t.results_count(results, &final_count);
    }
    t.results_free(results);
}

static int resolve(void *library, const char *name, void *field)
{
    void *address = dlsym(library, name);
    if (!address)
        printf("dlsym %s: %s\n", name, dlerror());
    memcpy(field, &address, sizeof address); /* POSIX: dlsym's answer is the function's address */
    return address != NULL;
}

int main(int argc, char **argv)
{
    tether_context_options o;
    tether_kinto_options k;
    tether_fetch_options f;
    tether_context *ctx = NULL;
    void *library;
    time_t deadline;
    int ok;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 5) {
        fprintf(stderr, "usage: loading_probe LIBTETHER URL BUCKET STORE\n");
        return 2;
    }
    printf("curl_at_start %d\n", curl_mapped());
    library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    printf("dlopen %d\n", library != NULL);
    if (!library) {
        printf("dlopen: %s\n", dlerror());
        return 0;
    }
    printf("curl_after_dlopen %d\n", curl_mapped());
    ok = resolve(library, "tether_context_options_init", &t.options_init);
    ok &= resolve(library, "tether_kinto_options_init", &t.kinto_options_init);
    ok &= resolve(library, "tether_context_open_kinto", &t.open);
    ok &= resolve(library, "tether_context_close", &t.close);
    ok &= resolve(library, "tether_context_poll", &t.poll);
    ok &= resolve(library, "tether_fetch_options_init", &t.fetch_options_init);
    ok &= resolve(library, "tether_fetch_start", &t.fetch_start);
    ok &= resolve(library, "tether_results_count", &t.results_count);
    ok &= resolve(library, "tether_results_free", &t.results_free);
    ok &= resolve(library, "tether_errmsg", &t.errmsg);
    if (!ok)
        return 0;

    t.options_init(&o, TETHER_CONTEXT_OPTIONS_VERSION);
    t.kinto_options_init(&k, TETHER_KINTO_OPTIONS_VERSION);
    k.server_url = argv[2];
    k.bucket = argv[3];
    o.store_path = argv[4];
    k.username = "test";
    k.password = "test";
    o.delivery = TETHER_DELIVER_POLL;
    o.timeout_ms = 10000;
    printf("open %d\n", t.open(&o, &k, &ctx));
    if (!ctx) {
        printf("open: %s\n", t.errmsg());
        return 0;
    }
    t.fetch_options_init(&f, TETHER_FETCH_OPTIONS_VERSION);
    f.entity = "items";
    f.policy = TETHER_POLICY_SERVER_ONLY;
    printf("fetch_start %d\n", t.fetch_start(ctx, &f, on_fetch, NULL, NULL));
    deadline = time(NULL) + 10;
    while (final_status == 1 && time(NULL) < deadline)
        t.poll(ctx, 100, NULL);
    printf("fetch %d\n", final_status);
    printf("fetched %zu\n", final_count);
    printf("curl_after_fetch %d\n", curl_mapped());
    printf("close %d\n", t.close(ctx));
    return 0;
}

#else /* the test */

#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define NITEMS 3
#define MAXFACTS 16

static struct {
    char name[64];
    long value;
} facts[MAXFACTS];
static int nfacts;

/* The value the probe printed for `name`, or -99 if it printed none. */
static long fact(const char *name)
{
    int i;
    for (i = 0; i < nfacts; i++)
        if (strcmp(facts[i].name, name) == 0)
            return facts[i].value;
    return -99;
}

/* Runs the probe (next to this program) and reads its facts; echoes every
 * line it prints. Returns its exit status, or -1. */
static int run_probe(const char *library, const char *bucket, const char *store)
{
    char self[512], probe[600], line[1024];
    char *const args[] = {probe, (char *)library, (char *)tu_url(), (char *)bucket, (char *)store, NULL};
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    int out[2], status = -1;
    FILE *from;
    pid_t pid;
    if (n <= 0)
        return -1;
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(probe, sizeof probe, "%s/loading_probe", self);
    fflush(stdout);
    if (pipe(out) != 0 || (pid = fork()) < 0)
        return -1;
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        execv(probe, args);
        perror(probe);
        _exit(127);
    }
    close(out[1]);
    from = fdopen(out[0], "r");
    while (from && fgets(line, sizeof line, from)) {
        printf("  probe: %s", line);
        if (nfacts < MAXFACTS && sscanf(line, "%63s %ld", facts[nfacts].name, &facts[nfacts].value) == 2)
            nfacts++;
    }
    if (from)
        fclose(from);
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(int argc, char **argv)
{
    char bucket[128], store[512], library[512];
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "c-loading");
    tu_store_path(store, sizeof store, "loading");
    if (!CHECK(tu_seed_numbered(bucket, "items", "q%03d", "item", NULL, NULL, NITEMS)))
        return tu_finish();
    if (!CHECK(mapped("/libtether.so", library, sizeof library)))
        return tu_finish();

#if TU_THREAD_SANITIZED
    /* The library is then a ThreadSanitizer build, whose __tsan_* symbols
     * only a program linked against it brings: the probe, linked with
     * neither library, cannot load it. The plain C suite runs the checks. */
    tu_section("skipped under ThreadSanitizer (the plain C suite checks loading)");
    return tu_finish();
#endif
    tu_section("a process that dlopens libtether.so does not map libcurl");
    CHECK_INT(run_probe(library, bucket, store), 0);
    CHECK_INT(fact("curl_at_start"), 0);
    CHECK_INT(fact("dlopen"), 1);
    CHECK_INT(fact("curl_after_dlopen"), 0);

    tu_section("opening a context on the server and fetching maps libcurl");
    CHECK_INT(fact("open"), TETHER_OK);
    CHECK_INT(fact("fetch_start"), TETHER_OK);
    CHECK_INT(fact("fetch"), TETHER_OK);
    CHECK_INT(fact("fetched"), NITEMS);
    CHECK_INT(fact("curl_after_fetch"), 1);
    CHECK_INT(fact("close"), TETHER_OK);
    return tu_finish();
}

#endif
