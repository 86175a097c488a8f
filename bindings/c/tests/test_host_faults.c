/* test_host_faults.c — a host connection that misbehaves on purpose (issue
 * 22): every status a host can complete a request with ends it (a bad one as
 * TETHER_E_PROTOCOL, the fetch or open told); a host that never answers is
 * bounded by timeout_ms; records without a usable id are left out of their
 * page with a diagnostic (deduplicated), the rest stored; a cursor that
 * repeats, or pages that bring nothing new, end the fetch. The host answers
 * inline, from the request callback, as the header allows. */
#include "testutil.h"

#include <limits.h>
#include <stdlib.h>

/* What the host does with the next requests. */
enum mode { GOOD, STATUS, SILENT, BAD_RECORDS, SAME_CURSOR, EMPTY_PAGES, CYCLE };

typedef struct host {
    pthread_mutex_t mu;
    enum mode info_mode, specs_mode, page_mode;
    int status;          /* STATUS: the status to complete with */
    int complete_result; /* what the last tether_request_complete returned */
    int pages, cancels, releases;
    tether_request *held; /* SILENT: the request never answered */
} host;

static void answer_page(host *h, tether_request *r, enum mode mode)
{
    const char *cursor = NULL;
    char next[64];
    int pages;
    tether_request_cursor(r, &cursor);
    pthread_mutex_lock(&h->mu);
    pages = ++h->pages;
    pthread_mutex_unlock(&h->mu);
    switch (mode) {
    case BAD_RECORDS:
        tether_request_add_record(r, "{\"id\": \"g1\", \"rev\": 1, \"Text\": \"first\"}");
        tether_request_add_record(r, "{\"rev\": 1, \"Text\": \"no id\"}");
        tether_request_add_record(r, "{\"id\": 5, \"rev\": 1}");
        tether_request_add_record(r, "{\"id\": \"\", \"rev\": 1}");
        tether_request_add_record(r, "{\"id\": [\"x\"], \"rev\": 1}");
        tether_request_add_record(r, "{\"id\": \"g2\", \"rev\": 1, \"Text\": \"second\"}");
        tether_request_set_page(r, NULL, -1, -1);
        break;
    case SAME_CURSOR: /* every page the same, and the same cursor */
        tether_request_add_record(r, "{\"id\": \"s1\", \"rev\": 1}");
        tether_request_set_page(r, "always-the-same", -1, -1);
        break;
    case EMPTY_PAGES: /* a new cursor each time, and nothing on the pages */
        snprintf(next, sizeof next, "empty-%d", pages);
        tether_request_set_page(r, next, -1, -1);
        break;
    case CYCLE: /* first -> c1 -> c2 -> c1 ..., a new record each time */
        snprintf(next, sizeof next, "{\"id\": \"r%d\", \"rev\": 1}", pages);
        tether_request_add_record(r, next);
        tether_request_set_page(r, cursor && strcmp(cursor, "c1") == 0 ? "c2" : "c1", -1, -1);
        break;
    default:
        tether_request_add_record(r, "{\"id\": \"g1\", \"rev\": 1, \"Text\": \"first\"}");
        tether_request_set_page(r, NULL, -1, -1);
        break;
    }
}

static void host_request(tether_request *r, void *userdata)
{
    host *h = userdata;
    tether_request_kind_t kind;
    enum mode mode;
    int status = TETHER_OK, result;
    tether_request_kind(r, &kind);
    pthread_mutex_lock(&h->mu);
    mode = kind == TETHER_REQUEST_SERVER_INFO ? h->info_mode : kind == TETHER_REQUEST_SPECS ? h->specs_mode : h->page_mode;
    if (mode == STATUS)
        status = h->status;
    if (mode == SILENT)
        h->held = r;
    pthread_mutex_unlock(&h->mu);
    if (mode == SILENT)
        return;
    if (mode != STATUS) {
        if (kind == TETHER_REQUEST_SERVER_INFO)
            tether_request_set_server_info(r, "faulty", "1");
        else if (kind == TETHER_REQUEST_SPECS)
            tether_request_add_spec(r, "items", "id", "rev", "{\"properties\": {\"Text\": {\"type\": \"string\"}}}",
                                    TETHER_OP_FETCH);
        else if (kind == TETHER_REQUEST_PAGE)
            answer_page(h, r, mode);
    }
    result = tether_request_complete(r, status, status == TETHER_OK ? NULL : "the host says so");
    pthread_mutex_lock(&h->mu);
    h->complete_result = result;
    pthread_mutex_unlock(&h->mu);
}

static void host_cancel(tether_request *r, void *userdata)
{
    host *h = userdata;
    (void)r;
    pthread_mutex_lock(&h->mu);
    h->cancels++;
    pthread_mutex_unlock(&h->mu);
}

static void host_release(void *userdata)
{
    host *h = userdata;
    pthread_mutex_lock(&h->mu);
    h->releases++;
    pthread_mutex_unlock(&h->mu);
}

static int read_int(host *h, int *field)
{
    int v;
    pthread_mutex_lock(&h->mu);
    v = *field;
    pthread_mutex_unlock(&h->mu);
    return v;
}

static void set_modes(host *h, enum mode info, enum mode specs, enum mode page, int status)
{
    pthread_mutex_lock(&h->mu);
    h->info_mode = info;
    h->specs_mode = specs;
    h->page_mode = page;
    h->status = status;
    h->pages = 0;
    h->held = NULL;
    pthread_mutex_unlock(&h->mu);
}

static int open_host(host *h, const char *store, int64_t timeout_ms, tether_context **out)
{
    tether_context_options opts;
    tether_connection c;
    tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
    opts.store_path = store;
    opts.timeout_ms = timeout_ms;
    tether_connection_init(&c, TETHER_CONNECTION_VERSION);
    c.identity = "faulty host";
    c.request = host_request;
    c.cancel = host_cancel;
    c.release = host_release;
    c.userdata = h;
    *out = NULL;
    return tether_context_open_host(&opts, &c, out);
}

/* A server-only fetch of items; waits for its final; returns its status. */
static int fetch_items(tether_context *ctx, tu_fetch *f)
{
    tu_fetch_init(f);
    if (CHECK_OK(tu_fetch_start(ctx, f, "items", NULL, 0, TETHER_POLICY_SERVER_ONLY, NULL)) != TETHER_OK)
        return TETHER_E_ERROR;
    CHECK(tu_fetch_wait(f, TU_WAIT_MS));
    return f->final_status;
}

static const int known[] = {TETHER_E_ERROR, TETHER_E_MISUSE, TETHER_E_HANDLE, TETHER_E_NOT_FOUND, TETHER_E_TYPE,
                            TETHER_E_INVALID, TETHER_E_NETWORK, TETHER_E_AUTH, TETHER_E_SERVER, TETHER_E_PROTOCOL,
                            TETHER_E_STORE, TETHER_E_CANCELLED, TETHER_E_NOT_CACHED, TETHER_E_BUSY,
                            TETHER_E_CONFLICT, TETHER_E_NOT_ALLOWED, TETHER_E_EXPIRED};
static const int bad[] = {1, 42, INT_MAX, -18, -1000, INT_MIN};

static void test_statuses(void)
{
    host h;
    tether_context *ctx = NULL;
    char store[512], text[64];
    tu_fetch f;
    size_t i;
    memset(&h, 0, sizeof h);
    pthread_mutex_init(&h.mu, NULL);
    tu_store_path(store, sizeof store, "host-statuses");

    tu_section("a bad status for server info or specs ends open_host (TETHER_E_PROTOCOL), released once");
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int releases = read_int(&h, &h.releases);
        set_modes(&h, STATUS, GOOD, GOOD, bad[i]);
        CHECK_STATUS(open_host(&h, store, 30000, &ctx), TETHER_E_PROTOCOL);
        snprintf(text, sizeof text, "status %d", bad[i]);
        CHECK(strstr(tether_errmsg(), text) != NULL);
        CHECK_CODE(read_int(&h, &h.complete_result), TETHER_E_INVALID);
        CHECK_INT(read_int(&h, &h.releases), releases + 1);
        set_modes(&h, GOOD, STATUS, GOOD, bad[i]);
        CHECK_STATUS(open_host(&h, store, 30000, &ctx), TETHER_E_PROTOCOL);
        CHECK_CODE(read_int(&h, &h.complete_result), TETHER_E_INVALID);
        CHECK_INT(read_int(&h, &h.releases), releases + 2);
        CHECK(ctx == NULL);
    }
    tu_section("the host ends an open by completing with TETHER_E_CANCELLED");
    set_modes(&h, GOOD, STATUS, GOOD, TETHER_E_CANCELLED);
    CHECK_STATUS(open_host(&h, store, 30000, &ctx), TETHER_E_CANCELLED);
    CHECK_CODE(read_int(&h, &h.complete_result), TETHER_OK);

    tu_section("every status completes a page: the fetch ends with it (a bad one as TETHER_E_PROTOCOL naming it)");
    set_modes(&h, GOOD, GOOD, GOOD, 0);
    if (CHECK_OK(open_host(&h, store, 30000, &ctx)) != TETHER_OK)
        return;
    for (i = 0; i < sizeof known / sizeof known[0]; i++) {
        set_modes(&h, GOOD, GOOD, STATUS, known[i]);
        CHECK_CODE(fetch_items(ctx, &f), known[i]);
        CHECK_CODE(read_int(&h, &h.complete_result), TETHER_OK);
        CHECK_INT(f.finals, 1);
        tu_fetch_destroy(&f);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set_modes(&h, GOOD, GOOD, STATUS, bad[i]);
        CHECK_CODE(fetch_items(ctx, &f), TETHER_E_PROTOCOL);
        snprintf(text, sizeof text, "status %d", bad[i]);
        CHECK(strstr(f.final_message, text) != NULL);
        CHECK_CODE(read_int(&h, &h.complete_result), TETHER_E_INVALID);
        tu_fetch_destroy(&f);
    }
    CHECK_INT(tu_debug_count(TETHER_DEBUG_REQUESTS), 0);
    set_modes(&h, GOOD, GOOD, GOOD, 0);
    CHECK_CODE(fetch_items(ctx, &f), TETHER_OK); /* and it still works */
    CHECK_INT(f.final_count, 1);
    tu_fetch_destroy(&f);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    pthread_mutex_destroy(&h.mu);
}

static void test_timeouts(void)
{
    host h;
    tether_context *ctx = NULL;
    char store[512];
    tu_fetch f;
    int64_t started;
    int cancels;
    memset(&h, 0, sizeof h);
    pthread_mutex_init(&h.mu, NULL);
    tu_store_path(store, sizeof store, "host-timeouts");

    tu_section("a host that never answers server info, or specs: open_host fails after timeout_ms");
    set_modes(&h, SILENT, GOOD, GOOD, 0);
    started = tu_now_ms();
    CHECK_STATUS(open_host(&h, store, 300, &ctx), TETHER_E_NETWORK);
    CHECK(strstr(tether_errmsg(), "within 300 ms") != NULL);
    CHECK(tu_now_ms() - started < 5000);
    CHECK(ctx == NULL);
    CHECK_INT(read_int(&h, &h.releases), 1);
    set_modes(&h, GOOD, SILENT, GOOD, 0);
    CHECK_STATUS(open_host(&h, store, 300, &ctx), TETHER_E_NETWORK);
    CHECK_INT(read_int(&h, &h.releases), 2);
    CHECK_INT(tu_debug_count(TETHER_DEBUG_REQUESTS), 0);

    tu_section("a page never answered: the fetch ends with TETHER_E_NETWORK; the host is told; its answer is dropped");
    set_modes(&h, GOOD, GOOD, GOOD, 0);
    if (CHECK_OK(open_host(&h, store, 300, &ctx)) != TETHER_OK)
        return;
    set_modes(&h, GOOD, GOOD, SILENT, 0);
    cancels = read_int(&h, &h.cancels);
    started = tu_now_ms();
    CHECK_CODE(fetch_items(ctx, &f), TETHER_E_NETWORK);
    CHECK(strstr(f.final_message, "did not answer") != NULL);
    CHECK(tu_now_ms() - started < 5000);
    tu_fetch_destroy(&f);
    {
        int64_t deadline = tu_now_ms() + TU_WAIT_MS;
        while (read_int(&h, &h.cancels) < cancels + 1 && tu_now_ms() < deadline)
            tu_sleep_ms(2);
    }
    CHECK_INT(read_int(&h, &h.cancels), cancels + 1);
    CHECK(h.held != NULL);
    CHECK_STATUS(tether_request_complete(h.held, TETHER_OK, NULL), TETHER_E_CANCELLED);
    CHECK(strstr(tether_errmsg(), "timed out") != NULL);

    tu_section("the store has the model: a silent server info opens offline");
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    set_modes(&h, SILENT, GOOD, GOOD, 0);
    if (CHECK_OK(open_host(&h, store, 300, &ctx)) == TETHER_OK) {
        int online = 1;
        CHECK_OK(tether_context_is_online(ctx, &online));
        CHECK_INT(online, 0);
        CHECK_INT(tether_context_close(ctx), TETHER_OK);
    }
    CHECK_INT(tu_debug_count(TETHER_DEBUG_REQUESTS), 0);
    pthread_mutex_destroy(&h.mu);
}

static int warnings;
static char last_warning[512];
static void log_hook(tether_log_level level, const char *category, const char *message, void *userdata)
{
    (void)category;
    (void)userdata;
    if (level == TETHER_LOG_WARNING && strstr(message, "left out")) {
        warnings++;
        snprintf(last_warning, sizeof last_warning, "%s", message);
    }
}

static void test_bad_records(void)
{
    host h;
    tether_context *ctx = NULL;
    char store[512];
    tu_fetch f;
    size_t before = 0, after = 0, again = 0, i;
    memset(&h, 0, sizeof h);
    pthread_mutex_init(&h.mu, NULL);
    tu_store_path(store, sizeof store, "host-records");

    tu_section("records without a usable id are left out with a diagnostic; the rest of the page is stored");
    set_modes(&h, GOOD, GOOD, GOOD, 0);
    if (CHECK_OK(open_host(&h, store, 30000, &ctx)) != TETHER_OK)
        return;
    CHECK_OK(tether_context_diagnostic_count(ctx, &before));
    CHECK_OK(tether_log_set(TETHER_LOG_WARNING, log_hook, NULL));
    set_modes(&h, GOOD, GOOD, BAD_RECORDS, 0);
    CHECK_CODE(fetch_items(ctx, &f), TETHER_OK);
    CHECK_INT(f.final_count, 2);
    tu_fetch_destroy(&f);
    CHECK_OK(tether_log_set(TETHER_LOG_OFF, NULL, NULL));
    CHECK_INT(warnings, 4);
    CHECK(strstr(last_warning, "record 5 of a page of items") != NULL);
    CHECK_OK(tether_context_diagnostic_count(ctx, &after));
    CHECK_INT(after, before + 4);
    for (i = before; i < after; i++) {
        const char *entity = NULL, *attribute = (const char *)1, *message = NULL;
        CHECK_OK(tether_context_diagnostic_at(ctx, i, &entity, &attribute, &message));
        CHECK_STR(entity, "items");
        CHECK(attribute == NULL);
        CHECK(message && strstr(message, "left out") != NULL);
        if (i == before) {
            CHECK_STR(message, "record 2 of a page of items was left out: it has no id (no field \"id\")");
        } else if (i == before + 1) {
            CHECK_STR(message, "record 3 of a page of items was left out: its id \"id\" is 5, not text");
        } else if (i == before + 2) {
            CHECK_STR(message, "record 4 of a page of items was left out: its id is empty");
        }
    }
    {
        tether_object *obj = NULL;
        char text[32];
        CHECK_OK(tether_context_object(ctx, "items", "g2", &obj));
        CHECK_OK(tu_peek_text(obj, "Text", text, sizeof text));
        CHECK_STR(text, "second");
        tether_object_free(obj);
    }
    tu_section("the same bad records again: no new diagnostic (one each, at most 100 in all)");
    CHECK_CODE(fetch_items(ctx, &f), TETHER_OK);
    CHECK_INT(f.final_count, 2);
    tu_fetch_destroy(&f);
    CHECK_OK(tether_context_diagnostic_count(ctx, &again));
    CHECK_INT(again, after);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    pthread_mutex_destroy(&h.mu);
}

static void test_cursors(void)
{
    host h;
    tether_context *ctx = NULL;
    char store[512];
    tu_fetch f;
    memset(&h, 0, sizeof h);
    pthread_mutex_init(&h.mu, NULL);
    tu_store_path(store, sizeof store, "host-cursors");
    set_modes(&h, GOOD, GOOD, GOOD, 0);
    if (CHECK_OK(open_host(&h, store, 30000, &ctx)) != TETHER_OK)
        return;

    tu_section("a host answering every page with the same cursor: TETHER_E_PROTOCOL naming it");
    set_modes(&h, GOOD, GOOD, SAME_CURSOR, 0);
    CHECK_CODE(fetch_items(ctx, &f), TETHER_E_PROTOCOL);
    CHECK(strstr(f.final_message, "\"always-the-same\"") != NULL);
    CHECK(read_int(&h, &h.pages) <= 3);
    tu_fetch_destroy(&f);

    tu_section("cursors in a cycle (c1, c2, c1): TETHER_E_PROTOCOL naming the cursor");
    set_modes(&h, GOOD, GOOD, CYCLE, 0);
    CHECK_CODE(fetch_items(ctx, &f), TETHER_E_PROTOCOL);
    CHECK(strstr(f.final_message, "\"c1\"") != NULL);
    CHECK(read_int(&h, &h.pages) <= 4);
    tu_fetch_destroy(&f);

    tu_section("new cursors, pages that bring nothing: TETHER_E_PROTOCOL naming the cursor");
    set_modes(&h, GOOD, GOOD, EMPTY_PAGES, 0);
    CHECK_CODE(fetch_items(ctx, &f), TETHER_E_PROTOCOL);
    CHECK(strstr(f.final_message, "\"empty-") != NULL);
    CHECK(strstr(f.final_message, "nothing new") != NULL);
    CHECK(read_int(&h, &h.pages) <= 3);
    tu_fetch_destroy(&f);

    set_modes(&h, GOOD, GOOD, GOOD, 0);
    CHECK_CODE(fetch_items(ctx, &f), TETHER_OK);
    tu_fetch_destroy(&f);
    CHECK_INT(tether_context_close(ctx), TETHER_OK);
    CHECK_INT(tu_debug_count(TETHER_DEBUG_REQUESTS), 0);
    pthread_mutex_destroy(&h.mu);
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_init(argv[0]);
    test_statuses();
    test_timeouts();
    test_bad_records();
    test_cursors();
    return tu_finish();
}
