/* test_kinto_faults.c — Kinto pages and batches that a real Kinto cannot be
 * made to send on demand, through scripts/faultproxy.py (issue 22): records
 * without a usable id in a Kinto-shaped listing are left out with a
 * diagnostic, the rest stored; a Next-Page that repeats ends the fetch with
 * TETHER_E_PROTOCOL naming it; and a save goes in batches of the server's
 * announced batch_max_requests (a Kinto of its own, started with 200),
 * counted at the proxy. */
#include "testutil.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct { char *data; size_t size; } buf;

static size_t collect(char *p, size_t size, size_t n, void *userdata)
{
    buf *b = userdata;
    char *grown = realloc(b->data, b->size + size * n + 1);
    if (!grown)
        return 0;
    memcpy(grown + b->size, p, size * n);
    b->size += size * n;
    grown[b->size] = 0;
    b->data = grown;
    return size * n;
}

/* An HTTP request to a full URL as test:test; the answer's body in *out (free it). */
static long http(const char *method, const char *url, const char *body, char **out)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    buf b = {NULL, 0};
    long code = -1;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_USERPWD, "test:test");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    if (out)
        *out = b.data;
    else
        free(b.data);
    return code;
}

/* ------------------------------------------------------------ the fault proxy */

typedef struct proxy {
    pid_t pid;
    char url[128];     /* http://127.0.0.1:PORT/v1 */
    char control[128]; /* http://127.0.0.1:PORT/__fault__ */
} proxy;

/* scripts/faultproxy.py in front of `upstream` (a ".../v1" URL). */
static int proxy_start(proxy *p, const char *upstream)
{
    char origin[256], line[64];
    int fds[2];
    FILE *in;
    size_t n = strlen(upstream);
    snprintf(origin, sizeof origin, "%.*s", (int)(n >= 3 && strcmp(upstream + n - 3, "/v1") == 0 ? n - 3 : n), upstream);
    if (pipe(fds) != 0)
        return 0;
    p->pid = fork();
    if (p->pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execlp("python3", "python3", "../../scripts/faultproxy.py", "--upstream", origin, "--port", "0", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    in = fdopen(fds[0], "r");
    if (!in || !fgets(line, sizeof line, in)) {
        if (in)
            fclose(in);
        return 0;
    }
    fclose(in);
    snprintf(p->url, sizeof p->url, "http://127.0.0.1:%d/v1", atoi(line));
    snprintf(p->control, sizeof p->control, "http://127.0.0.1:%d/__fault__", atoi(line));
    return 1;
}

static void proxy_stop(proxy *p)
{
    kill(p->pid, SIGTERM);
    waitpid(p->pid, NULL, 0);
}

static void proxy_fault(proxy *p, const char *json)
{
    CHECK_INT(http("POST", p->control, json, NULL), 200);
}

/* How many requests the proxy saw whose "METHOD target" contains `what`. */
static int proxy_count(proxy *p, const char *what)
{
    char *state = NULL, *at, pattern[256];
    int count = 0;
    http("GET", p->control, NULL, &state);
    snprintf(pattern, sizeof pattern, "\"%s", what);
    for (at = state ? strstr(state, "\"log\"") : NULL; at && (at = strstr(at, pattern)); at++)
        count++;
    free(state);
    return count;
}

static int fetch_all(tether_context *ctx, const char *entity, tu_fetch *f)
{
    tu_fetch_init(f);
    if (CHECK_OK(tu_fetch_start(ctx, f, entity, NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL)) != TETHER_OK)
        return TETHER_E_ERROR;
    CHECK(tu_fetch_wait(f, TU_WAIT_MS));
    return f->final_status;
}

static void test_bad_ids(proxy *p, const char *bucket)
{
    char store[512];
    tether_context *ctx;
    tu_fetch f;
    size_t before = 0, after = 0, i;
    int found = 0;
    tu_section("Kinto-shaped records without a usable id: left out with a diagnostic, the rest stored");
    tu_store_path(store, sizeof store, "kinto-bad-ids");
    ctx = tu_open_url(p->url, bucket, store, TETHER_DELIVER_THREAD, 30000);
    if (!ctx)
        return;
    CHECK_OK(tether_context_diagnostic_count(ctx, &before));
    proxy_fault(p, "{\"mode\": \"pass\", \"rewrite\": [[\"\\\"id\\\":\\\"noid-x\\\",\", \"\"],"
                   " [\"\\\"intid-x\\\"\", \"7\"], [\"\\\"empty-x\\\"\", \"\\\"\\\"\"]]}");
    CHECK_CODE(fetch_all(ctx, "items", &f), TETHER_OK);
    CHECK_INT(f.final_count, 2);
    tu_fetch_destroy(&f);
    CHECK_OK(tether_context_diagnostic_count(ctx, &after));
    CHECK_INT(after, before + 3);
    for (i = before; i < after; i++) {
        const char *entity = NULL, *message = NULL;
        CHECK_OK(tether_context_diagnostic_at(ctx, i, &entity, NULL, &message));
        CHECK_STR(entity, "items");
        if (message && strstr(message, "its id \"id\" is 7, not text"))
            found++;
    }
    CHECK_INT(found, 1);
    CHECK_CODE(fetch_all(ctx, "items", &f), TETHER_OK); /* again: the same diagnostics, none added */
    tu_fetch_destroy(&f);
    CHECK_OK(tether_context_diagnostic_count(ctx, &i));
    CHECK_INT(i, after);
    proxy_fault(p, "{\"mode\": \"pass\"}");
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
}

static void test_repeating_next_page(proxy *p, const char *bucket)
{
    char store[512], fault[1024];
    tether_context *ctx;
    tu_fetch f;
    tu_section("a Next-Page that repeats: TETHER_E_PROTOCOL naming it, after a few requests");
    tu_store_path(store, sizeof store, "kinto-next-page");
    ctx = tu_open_url(p->url, bucket, store, TETHER_DELIVER_THREAD, 30000);
    if (!ctx)
        return;
    snprintf(fault, sizeof fault,
             "{\"mode\": \"headers\", \"match\": \"/collections/items/records\", \"reset_log\": true,"
             " \"headers\": {\"Next-Page\": \"%s/buckets/%s/collections/items/records?_limit=2\"}}", p->url, bucket);
    proxy_fault(p, fault);
    CHECK_CODE(fetch_all(ctx, "items", &f), TETHER_E_PROTOCOL);
    CHECK(strstr(f.final_message, "/collections/items/records?_limit=2\"") != NULL);
    CHECK(proxy_count(p, "GET /v1/buckets") <= 3);
    tu_fetch_destroy(&f);
    proxy_fault(p, "{\"mode\": \"pass\"}");
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
}

static void test_batch_limit(void)
{
    char dir[600], command[1400], url[256] = "", path[512], store[512];
    FILE *started;
    proxy p;
    tether_context *ctx;
    size_t saved = 0;
    int i;
    char *info = NULL;
    tu_section("a save goes in batches of the server's batch_max_requests (200): 120 inserts in one request");
    snprintf(dir, sizeof dir, "%s.kinto", (tu_store_path(store, sizeof store, "batch-store"), store));
    snprintf(command, sizeof command, "KINTO_BATCH_MAX_REQUESTS=200 ../../scripts/kinto-start '%s' 2>/dev/null", dir);
    started = popen(command, "r");
    if (!CHECK(started && fgets(url, sizeof url, started)))
        return;
    pclose(started);
    url[strcspn(url, "\n")] = 0;
    if (CHECK(proxy_start(&p, url))) {
        snprintf(path, sizeof path, "%s/", p.url);
        CHECK_INT(http("GET", path, NULL, &info), 200);
        CHECK(info && strstr(info, "\"batch_max_requests\":200") != NULL);
        free(info);
        snprintf(path, sizeof path, "%s/buckets/big", url);
        CHECK_INT(http("PUT", path, NULL, NULL), 201);
        snprintf(path, sizeof path, "%s/buckets/big/collections/notes", url);
        CHECK_INT(http("PUT", path, "{\"data\": {\"schema\": {\"type\": \"object\", \"properties\":"
                                    " {\"n\": {\"type\": \"integer\"}}}}}", NULL), 201);
        ctx = tu_open_url(p.url, "big", store, TETHER_DELIVER_THREAD, 30000);
        if (ctx) {
            for (i = 0; i < 120; i++) {
                tether_object *obj = NULL;
                char id[32];
                tether_value v = {TETHER_TYPE_INTEGER, 0, 0.0, NULL, 0};
                v.integer = i;
                snprintf(id, sizeof id, "n%03d", i);
                CHECK_OK(tether_context_insert(ctx, "notes", id, &obj));
                CHECK_OK(tether_object_set(obj, "n", &v));
                tether_object_free(obj);
            }
            proxy_fault(&p, "{\"mode\": \"pass\", \"reset_log\": true}");
            CHECK_CODE(tu_save(ctx, &saved), TETHER_OK);
            CHECK_INT(saved, 120);
            CHECK_INT(proxy_count(&p, "POST /v1/batch"), 1);
            CHECK_INT(tether_context_close(ctx), TETHER_OK);
        }
        proxy_stop(&p);
    }
    snprintf(command, sizeof command, "../../scripts/kinto-stop '%s'", dir);
    CHECK(system(command) == 0);
}

int main(int argc, char **argv)
{
    char bucket[64];
    proxy p;
    (void)argc;
    tu_init(argv[0]);
    tu_unique(bucket, sizeof bucket, "kfaults");
    if (!CHECK(tu_put_bucket(bucket)) ||
        !CHECK(tu_put_collection(bucket, "items", "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}}")))
        return tu_finish();
    CHECK(tu_put_record(bucket, "items", "keep1", "{\"n\": 1}"));
    CHECK(tu_put_record(bucket, "items", "noid-x", "{\"n\": 2}"));
    CHECK(tu_put_record(bucket, "items", "intid-x", "{\"n\": 3}"));
    CHECK(tu_put_record(bucket, "items", "empty-x", "{\"n\": 4}"));
    CHECK(tu_put_record(bucket, "items", "keep2", "{\"n\": 5}"));
    if (CHECK(proxy_start(&p, tu_url()))) {
        test_bad_ids(&p, bucket);
        test_repeating_next_page(&p, bucket);
        proxy_stop(&p);
    }
    test_batch_limit();
    return tu_finish();
}
