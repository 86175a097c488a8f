/*
 * shell.c — `tether`, a command shell over Tether's public C API, as sqlite3
 * has one. It opens a context on a Kinto server and bucket, then runs one
 * command given on the command line, or reads commands line by line from
 * stdin (on a tty: a prompt, and libedit's line editing, history and
 * completion). `tether --help` and the `help` command list
 * them; README.md ("The tether shell") walks through them.
 *
 * Delivery is TETHER_DELIVER_POLL: the shell is one thread that prints
 * tables, so callbacks run inside tether_context_poll() on that thread, in
 * the order they come, between commands never. Nothing needs a lock, output
 * never interleaves, and Ctrl-C (a flag set by SIGINT) is checked between
 * polls, where cancelling the task in flight is simple and safe.
 *
 * Output: aligned tables on stdout, or with --json one JSON document per
 * command, on one line (watch: one per answer). Errors go to stderr as
 * "tether: STATUS_NAME: message" (and, with --json, as a document on
 * stdout); the exit status is 0 on success, 1 after a failed command, 2 for
 * a usage error.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Line editing, history and completion on a terminal: libedit's readline
 * interface (Debian's libedit-dev; BSD-licensed, as the library is). */
#include <editline/readline.h>

#include "tether.h"

#define SHELL_OK 0
#define SHELL_FAILED 1
#define SHELL_USAGE 2

#define MAX_ARGS 32         /* $1..$32 in a predicate */
#define MAX_WORDS 256       /* words in a command line */
#define CELL_WIDTH 60       /* table cells are cut here (--json is exact) */
#define POLL_SLICE_MS 100   /* how often a wait looks at Ctrl-C */

static const char USAGE[] =
    "usage: tether [OPTIONS] [COMMAND [ARGS...]]\n"
    "\n"
    "Opens a Tether context on a Kinto bucket (or a PostgreSQL schema) and runs\n"
    "COMMAND, or, with none,\n"
    "reads commands from stdin, one a line (a prompt on a tty; '#' comments).\n"
    "\n"
    "Options:\n"
    "  --server URL        Kinto root, e.g. http://127.0.0.1:8888/v1 (or $TETHER_SERVER)\n"
    "  --bucket NAME       the bucket whose collections are the entities (or $TETHER_BUCKET)\n"
    "  --postgres CONNINFO a PostgreSQL database instead of Kinto: libpq's conninfo,\n"
    "                      e.g. 'host=127.0.0.1 dbname=app user=me' (or $TETHER_POSTGRES)\n"
    "  --schema NAME       with --postgres: the schema whose tables are the entities\n"
    "                      (default public)\n"
    "  --store PATH        the SQLite store, created if missing (or $TETHER_STORE)\n"
    "  --user NAME:PASS    basic auth (or $TETHER_USER); anonymous without\n"
    "  --offline           answer from the store only: fetches are cache-only, get\n"
    "                      does not refresh, save is refused\n"
    "  --timeout MS        per HTTP request (default 30000)\n"
    "  --exclusive         the store is this shell's alone while it runs: refused\n"
    "                      while another process has it open, and refusing others\n"
    "  --sync-interval MS  while a watch runs, ask the server for changes every MS\n"
    "                      (default the library's, 10000; 0: never)\n"
    "  --json              one JSON document per command on stdout (watch: per answer)\n"
    "  --progress          show fetch and save progress on stderr even when it is\n"
    "                      not a tty\n"
    "  --version           print the shell's and the library's version\n"
    "  --help              this text\n"
    "\n"
    "On a terminal, lines are edited with libedit: arrows, Ctrl-R, Tab completes\n"
    "commands, options, entities, fields and words; the history is kept in\n"
    "$XDG_STATE_HOME/tether/history (else ~/.local/state/tether/history).\n";

static const char COMMANDS[] =
    "Commands:\n"
    "  help                                  this list\n"
    "  info                                  server, bucket, store, online, changes\n"
    "  entities                              the entities of the model\n"
    "  fields ENTITY                         an entity's fields: codes, types, flags\n"
    "  fetch ENTITY [FETCH-OPTIONS] [--fields a,b] [--limit N] [--offset N]\n"
    "                                        a table of the matching objects\n"
    "  count ENTITY [FETCH-OPTIONS]          how many match\n"
    "  watch ENTITY [FETCH-OPTIONS] [--fields a,b] [--count N] [--timeout S]\n"
    "                                        a live fetch: its answer, then each\n"
    "                                        change (the server asked every\n"
    "                                        --sync-interval) until Ctrl-C, N changes\n"
    "                                        or S seconds\n"
    "  peek ENTITY ID [KEY...]               cached values, no network (all keys\n"
    "                                        without KEY)\n"
    "  get ENTITY ID KEY                     the cached value, then the refreshed one\n"
    "  set ENTITY ID KEY VALUE               an unsaved change (VALUE read as the\n"
    "                                        key's type; JSON keys take JSON text)\n"
    "  unset ENTITY ID KEY                   sets KEY to null\n"
    "  insert ENTITY [--id ID] [KEY=VALUE...] a new object (a pending insert)\n"
    "  delete ENTITY ID                      a pending delete\n"
    "  rollback [ENTITY ID]                  drop one object's unsaved change, or all\n"
    "  pending                               the unsaved changes, key by key\n"
    "  save [--merge report|server_wins|client_wins|properties]\n"
    "                                        send them; prints the save report\n"
    "  quit                                  (or exit, or end of input)\n"
    "\n"
    "FETCH-OPTIONS: --where PREDICATE (Core Data format: Status == 'pending' AND\n"
    "  User BEGINSWITH[c] $1), --arg VALUE for $1, $2... (42, 1.5, true, false,\n"
    "  null, \"quoted text\"; anything else is text), --sort KEYS (-Date,Change),\n"
    "  --policy cache_then_server|cache_only|server_only|cache_else_server (the\n"
    "  header's names; cache-only with hyphens is the same word).\n"
    "KEY: a field name, a code (#205) or, for peek and get, a key path\n"
    "  (Client.Owner). Words are split as a shell does: 'single' and \"double\" quotes.\n";

/* ------------------------------------------------------------ state */

static struct {
    const char *server, *bucket, *store;
    const char *postgres, *schema; /* a libpq conninfo instead of --server/--bucket */
    char *username, *password;
    int json, progress, offline, exclusive;
    int64_t timeout_ms;
    int64_t sync_interval_ms; /* -1: the library's default */
    tether_context *ctx;
    int online;
} g = {.timeout_ms = 30000, .sync_interval_ms = -1};

static volatile sig_atomic_t g_interrupted;
static pthread_t g_main_thread;

/* A terminal's Ctrl-C is sent to the process, and any thread may take it:
 * the library's own threads too. Only the main thread's read at the prompt
 * (or its wait) must be interrupted, so another thread passes it on. */
static void on_sigint(int sig)
{
    g_interrupted = 1;
    if (!pthread_equal(pthread_self(), g_main_thread))
        pthread_kill(g_main_thread, sig);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d) {
        fputs("tether: out of memory\n", stderr);
        exit(SHELL_FAILED);
    }
    return d;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fputs("tether: out of memory\n", stderr);
        exit(SHELL_FAILED);
    }
    return q;
}

/* ------------------------------------------------------------ strings */

typedef struct {
    char *s;
    size_t len, cap;
} buf;

static void buf_add(buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->s = xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void buf_str(buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static void buf_printf(buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        buf_add(b, tmp, (size_t)n);
        return;
    }
    char *big = xrealloc(NULL, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    buf_add(b, big, (size_t)n);
    free(big);
}

static char *buf_take(buf *b)
{
    char *s = b->s ? b->s : xstrdup("");
    b->s = NULL;
    b->len = b->cap = 0;
    return s;
}

/* A JSON string literal of `n` bytes of UTF-8 (NULs included). Control
 * characters are escaped; the library hands out valid UTF-8 only, so the
 * other bytes pass as they are. */
static void buf_json_string(buf *b, const char *s, size_t n)
{
    buf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': buf_add(b, "\\\"", 2); break;
        case '\\': buf_add(b, "\\\\", 2); break;
        case '\n': buf_add(b, "\\n", 2); break;
        case '\r': buf_add(b, "\\r", 2); break;
        case '\t': buf_add(b, "\\t", 2); break;
        default:
            if (c < 0x20 || c == 0x7f)
                buf_printf(b, "\\u%04x", c);
            else
                buf_add(b, (const char *)&c, 1);
        }
    }
    buf_add(b, "\"", 1);
}

static void buf_json_cstr(buf *b, const char *s)
{
    if (s)
        buf_json_string(b, s, strlen(s));
    else
        buf_str(b, "null");
}

/* The shortest %g that reads back as the same double. */
static void buf_real(buf *b, double d)
{
    char tmp[64];
    if (!isfinite(d)) { /* not in JSON; never from a JSON server, but never crash */
        buf_str(b, "null");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    /* Keep it a real for JSON readers: 2 -> 2.0 */
    if (!strpbrk(tmp, ".eEn"))
        strcat(tmp, ".0");
    buf_str(b, tmp);
}

static void buf_json_value(buf *b, const tether_value *v)
{
    switch (v->type) {
    case TETHER_TYPE_TEXT: buf_json_string(b, v->text ? v->text : "", v->text ? v->length : 0); break;
    case TETHER_TYPE_INTEGER: buf_printf(b, "%" PRId64, v->integer); break;
    case TETHER_TYPE_REAL: buf_real(b, v->real); break;
    case TETHER_TYPE_BOOLEAN: buf_str(b, v->integer ? "true" : "false"); break;
    case TETHER_TYPE_JSON: /* serialized JSON from the library */
        if (v->text && v->length)
            buf_add(b, v->text, v->length);
        else
            buf_str(b, "null");
        break;
    default: buf_str(b, "null");
    }
}

/* A value as a table cell: control characters escaped, cut at CELL_WIDTH
 * characters. Owned. */
static char *cell_value(const tether_value *v)
{
    buf b = {0};
    switch (v->type) {
    case TETHER_TYPE_NULL: return xstrdup("null");
    case TETHER_TYPE_TEXT:
    case TETHER_TYPE_JSON: {
        size_t chars = 0;
        for (size_t i = 0; v->text && i < v->length; i++) {
            unsigned char c = (unsigned char)v->text[i];
            if ((c & 0xc0) != 0x80 && ++chars > CELL_WIDTH) {
                buf_str(&b, "...");
                break;
            }
            if (c == '\n')
                buf_str(&b, "\\n");
            else if (c == '\t')
                buf_str(&b, "\\t");
            else if (c < 0x20 || c == 0x7f)
                buf_printf(&b, "\\x%02x", c);
            else
                buf_add(&b, (const char *)&c, 1);
        }
        return buf_take(&b);
    }
    default:
        buf_json_value(&b, v);
        return buf_take(&b);
    }
}

static const char *type_name(tether_type t)
{
    switch (t) {
    case TETHER_TYPE_NULL: return "null";
    case TETHER_TYPE_TEXT: return "text";
    case TETHER_TYPE_INTEGER: return "integer";
    case TETHER_TYPE_REAL: return "real";
    case TETHER_TYPE_BOOLEAN: return "boolean";
    case TETHER_TYPE_JSON: return "json";
    }
    return "unknown";
}

static const char *pending_name(tether_pending p)
{
    switch (p) {
    case TETHER_PENDING_INSERT: return "insert";
    case TETHER_PENDING_UPDATE: return "update";
    case TETHER_PENDING_DELETE: return "delete";
    default: return "none";
    }
}

/* ------------------------------------------------------------ output */

/* Every command's failure: stderr, and with --json a document on stdout.
 * `status` is a TETHER_E_* code, or 0 with `name` for the shell's own. */
static int report(int status, const char *name, const char *message)
{
    const char *st = name ? name : tether_errstr(status);
    fprintf(stderr, "tether: %s: %s\n", st, message && *message ? message : "(no message)");
    if (g.json) {
        buf b = {0};
        buf_str(&b, "{\"error\":{\"status\":");
        buf_json_cstr(&b, st);
        /* A library error's code is its TETHER_E_* value; the shell's own
         * (usage) carry the exit status they end in, 2. */
        buf_printf(&b, ",\"code\":%d,\"message\":", name ? (strcmp(name, "usage") ? 1 : SHELL_USAGE) : status);
        buf_json_cstr(&b, message ? message : "");
        buf_str(&b, "}}\n");
        fputs(b.s, stdout);
        free(b.s);
    }
    return name && strcmp(name, "usage") == 0 ? SHELL_USAGE : SHELL_FAILED;
}

/* A failed tether call: its status name and tether_errmsg(). */
static int api_error(int status) { return report(status, NULL, tether_errmsg()); }

static int usage_error(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return report(0, "usage", msg);
}

/* One vocabulary for every binding: the header's names, lower case
 * (TETHER_POLICY_CACHE_ONLY: cache_only), indexed by the enum's value; '-'
 * may stand for '_' (cache-only). The shell's 0.2 words are refused with
 * the new one named, rather than kept as aliases: one word for one thing,
 * in scripts as in Python and LuaJIT. */
static const char *const POLICY_NAMES[] = {"cache_then_server", "cache_only", "server_only", "cache_else_server",
                                           NULL};
static const char *const MERGE_NAMES[] = {"report", "server_wins", "client_wins", "properties", NULL};
/* Pairs: an old word, its new one. merge_properties is Python's spelling. */
static const char *const OLD_POLICY_NAMES[] = {"cache", "cache_only", "server", "server_only", NULL};
static const char *const OLD_MERGE_NAMES[] = {"server", "server_wins", "client", "client_wins",
                                              "merge_properties", "properties", NULL};

/* The index of `word` in `names`, or -1 after a usage error. */
static int vocabulary(const char *cmd, const char *option, const char *word, const char *const *names,
                      const char *const *old)
{
    char w[64];
    size_t n = strlen(word);
    if (n < sizeof w) {
        for (size_t i = 0; i <= n; i++)
            w[i] = word[i] == '-' ? '_' : word[i];
        for (int i = 0; names[i]; i++)
            if (!strcmp(w, names[i]))
                return i;
        for (int i = 0; old[i]; i += 2)
            if (!strcmp(w, old[i])) {
                if (!strcmp(old[i], "merge_properties"))   /* Python's word: the same thing */
                    for (int j = 0; names[j]; j++)
                        if (!strcmp(old[i + 1], names[j]))
                            return j;
                usage_error("%s: %s %s is now %s (the header's name)", cmd, option, word, old[i + 1]);
                return -1;
            }
    }
    buf b = {0};
    for (int i = 0; names[i]; i++)
        buf_printf(&b, "%s%s", i ? ", " : "", names[i]);
    usage_error("%s: %s is one of %s, not '%s'", cmd, option, b.s, word);
    free(b.s);
    return -1;
}

static void json_out(buf *b)
{
    buf_str(b, "\n");
    fputs(b->s, stdout);
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

/* An aligned table: cells are owned strings, row-major, header first. */
typedef struct {
    size_t cols, rows;
    char **cells;
} table;

static void table_init(table *t, size_t cols, const char *const *headers)
{
    t->cols = cols;
    t->rows = 1;
    t->cells = xrealloc(NULL, cols * sizeof *t->cells);
    for (size_t c = 0; c < cols; c++)
        t->cells[c] = xstrdup(headers[c]);
}

/* Adds a row; takes the strings (NULL reads as ""). */
static void table_add(table *t, char **row)
{
    t->cells = xrealloc(t->cells, (t->rows + 1) * t->cols * sizeof *t->cells);
    for (size_t c = 0; c < t->cols; c++)
        t->cells[t->rows * t->cols + c] = row[c] ? row[c] : xstrdup("");
    t->rows++;
}

static size_t display_width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80)
            n++;
    return n;
}

static void table_print(table *t)
{
    size_t *w = xrealloc(NULL, t->cols * sizeof *w);
    for (size_t c = 0; c < t->cols; c++) {
        w[c] = 0;
        for (size_t r = 0; r < t->rows; r++) {
            size_t n = display_width(t->cells[r * t->cols + c]);
            if (n > w[c])
                w[c] = n;
        }
    }
    for (size_t r = 0; r < t->rows; r++) {
        for (size_t c = 0; c < t->cols; c++) {
            const char *s = t->cells[r * t->cols + c];
            fputs(s, stdout);
            if (c + 1 < t->cols)
                printf("%*s", (int)(w[c] - display_width(s) + 2), "");
        }
        putchar('\n');
    }
    free(w);
}

static void table_free(table *t)
{
    for (size_t i = 0; i < t->rows * t->cols; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
}

/* ------------------------------------------------------------ context */

/* Whether the options name a server and a store to open a context on. */
static int have_target(void)
{
    return g.store && (g.postgres || (g.server && g.bucket));
}

static int need_ctx(void)
{
    if (g.ctx)
        return SHELL_OK;
    if (!have_target())
        return usage_error("no context: give --server, --bucket and --store, or --postgres and --store "
                           "(or $TETHER_SERVER, $TETHER_BUCKET, $TETHER_POSTGRES, $TETHER_STORE)");
    tether_context_options opts;
    tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
    opts.store_path = g.store;
    opts.timeout_ms = g.timeout_ms;
    opts.exclusive = g.exclusive;
    if (g.sync_interval_ms >= 0)
        opts.sync_interval_ms = g.sync_interval_ms;
    if (g.offline)
        opts.sync_interval_ms = 0; /* the store only: no periodic requests either */
    opts.delivery = TETHER_DELIVER_POLL; /* see the top of this file */
    int rc;
    if (g.postgres) {
        tether_postgres_options pg;
        tether_postgres_options_init(&pg, TETHER_POSTGRES_OPTIONS_VERSION);
        pg.conninfo = g.postgres;
        pg.schema = g.schema;
        rc = tether_context_open_postgres(&opts, &pg, &g.ctx);
    } else {
        tether_kinto_options kinto;
        tether_kinto_options_init(&kinto, TETHER_KINTO_OPTIONS_VERSION);
        kinto.server_url = g.server;
        kinto.bucket = g.bucket;
        kinto.username = g.username;
        kinto.password = g.password;
        rc = tether_context_open_kinto(&opts, &kinto, &g.ctx);
    }
    if (rc != TETHER_OK) {
        g.ctx = NULL;
        return api_error(rc);
    }
    tether_context_is_online(g.ctx, &g.online);
    if (!g.online && !g.json)
        fprintf(stderr, "tether: the server cannot be reached: working offline from %s\n", g.store);
    return SHELL_OK;
}

/* Runs callbacks until *done, Ctrl-C (then cancels `task` and waits for its
 * FINAL) or `deadline` (a now_ms() value; 0: none; then cancels too).
 * Returns 0 when done by itself, 1 after Ctrl-C, 2 after the deadline. */
static int wait_done(int *done, tether_task *task, int64_t deadline)
{
    int why = 0;
    while (!*done) {
        if (why == 0 && (g_interrupted || (deadline && now_ms() >= deadline))) {
            why = g_interrupted ? 1 : 2;
            if (task)
                tether_task_cancel(task); /* its FINAL (cancelled) still comes */
        }
        if (tether_context_poll(g.ctx, POLL_SLICE_MS, NULL) != TETHER_OK)
            break; /* the context is gone: nothing more will come */
    }
    return why;
}

/* ------------------------------------------------------------ keys and values */

typedef struct {
    tether_entity *entity;
    const char *name;     /* entity name (borrowed from the model) */
    const char *id_field; /* the id attribute's name */
} entity_info;

static int lookup_entity(const char *name, entity_info *out)
{
    int rc = tether_context_entity(g.ctx, name, &out->entity);
    if (rc != TETHER_OK)
        return api_error(rc);
    tether_entity_name(out->entity, &out->name);
    out->id_field = "id";
    size_t n = 0;
    tether_entity_attribute_count(out->entity, &n);
    for (size_t i = 0; i < n; i++) {
        const char *an;
        unsigned int flags;
        if (tether_entity_attribute_at(out->entity, i, &an, NULL, NULL, &flags) == TETHER_OK &&
            (flags & TETHER_ATTR_ID))
            out->id_field = an;
    }
    return SHELL_OK;
}

/* "#205" is a code; returns 1 and sets *code for one. */
static int key_code(const char *key, int *code)
{
    if (key[0] != '#' || !key[1])
        return 0;
    char *end;
    errno = 0;
    long c = strtol(key + 1, &end, 10);
    if (*end || errno || c < 0 || c > 0x7fffffff)
        return 0;
    *code = (int)c;
    return 1;
}

/* The attribute a key (name or #code, not a path) names: its index, name and
 * type. Reports NOT_FOUND itself. */
static int lookup_key(tether_entity *e, const char *key, const char **out_name, tether_type *out_type)
{
    size_t index;
    int code;
    int rc = key_code(key, &code) ? tether_entity_attribute_index_by_code(e, code, &index)
                                  : tether_entity_attribute_index(e, key, &index);
    if (rc == TETHER_OK)
        rc = tether_entity_attribute_at(e, index, out_name, NULL, out_type, NULL);
    return rc == TETHER_OK ? SHELL_OK : api_error(rc);
}

static int read_key(tether_object *obj, const char *key, int refresh, tether_value *out)
{
    int code;
    if (key_code(key, &code))
        return refresh ? tether_object_get_code(obj, code, out) : tether_object_peek_code(obj, code, out);
    return refresh ? tether_object_get(obj, key, out) : tether_object_peek(obj, key, out);
}

/* A predicate argument: a JSON scalar is that value, "quoted" text is the
 * text inside, anything else is text as typed. Points into `s`. */
static void parse_arg(const char *s, tether_value *v)
{
    size_t n = strlen(s);
    char *end;
    memset(v, 0, sizeof *v);
    if (!strcmp(s, "null"))
        return;
    if (!strcmp(s, "true") || !strcmp(s, "false")) {
        v->type = TETHER_TYPE_BOOLEAN;
        v->integer = s[0] == 't';
        return;
    }
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
        v->type = TETHER_TYPE_TEXT;
        v->text = (char *)s + 1;
        v->length = n - 2;
        return;
    }
    if (n) {
        errno = 0;
        long long i = strtoll(s, &end, 10);
        if (!*end && !errno) {
            v->type = TETHER_TYPE_INTEGER;
            v->integer = i;
            return;
        }
        errno = 0;
        double d = strtod(s, &end);
        if (!*end && !errno && isfinite(d) && strpbrk(s, "0123456789")) {
            v->type = TETHER_TYPE_REAL;
            v->real = d;
            return;
        }
    }
    v->type = TETHER_TYPE_TEXT;
    v->text = (char *)s;
    v->length = n;
}

/* A value for `set`, read as the attribute's type. Text points into `s`.
 * Returns a message for text that is not of that type, else NULL. */
static const char *parse_typed(const char *s, tether_type type, tether_value *v)
{
    char *end;
    memset(v, 0, sizeof *v);
    v->type = type;
    switch (type) {
    case TETHER_TYPE_INTEGER:
        errno = 0;
        v->integer = strtoll(s, &end, 10);
        return (!*s || *end || errno) ? "not an integer" : NULL;
    case TETHER_TYPE_REAL:
        errno = 0;
        v->real = strtod(s, &end);
        return (!*s || *end || errno || !isfinite(v->real)) ? "not a number" : NULL;
    case TETHER_TYPE_BOOLEAN:
        if (!strcmp(s, "true") || !strcmp(s, "1"))
            v->integer = 1;
        else if (strcmp(s, "false") && strcmp(s, "0"))
            return "not a boolean (true, false, 1 or 0)";
        return NULL;
    default: /* TEXT; JSON takes JSON text, which the library parses */
        if (type != TETHER_TYPE_JSON)
            v->type = TETHER_TYPE_TEXT;
        v->text = (char *)s;
        v->length = strlen(s);
        return NULL;
    }
}

static int set_typed(tether_object *obj, tether_entity *e, const char *key, const char *text)
{
    const char *name;
    tether_type type;
    int rc = lookup_key(e, key, &name, &type);
    if (rc != SHELL_OK)
        return rc;
    tether_value v;
    const char *bad = parse_typed(text, type, &v);
    if (bad) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s: '%.100s' is %s (%s is %s)", name, text, bad, name, type_name(type));
        return report(TETHER_E_TYPE, NULL, msg);
    }
    rc = tether_object_set(obj, name, &v);
    return rc == TETHER_OK ? SHELL_OK : api_error(rc);
}

/* ------------------------------------------------------------ fetch options */

typedef struct {
    entity_info ent;
    const char *where, *sort, *fields;
    tether_value args[MAX_ARGS];
    size_t nargs;
    int64_t limit, offset;
    int policy; /* -1: default */
    /* watch */
    int64_t count, timeout_s;
    /* the columns: the id first, then these (owned) */
    char **cols;
    size_t ncols;
} fetch_spec;

static void fetch_spec_free(fetch_spec *fs)
{
    for (size_t i = 0; i < fs->ncols; i++)
        free(fs->cols[i]);
    free(fs->cols);
}

static int parse_int_opt(const char *opt, const char *s, int64_t min, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < min)
        return usage_error("%s: '%s' is not a whole number >= %lld", opt, s, (long long)min);
    *out = v;
    return SHELL_OK;
}

/* Parses ENTITY and the options of fetch/count/watch (`allowed` lists the
 * ones beyond --where/--arg/--sort/--policy), looks the entity up and
 * chooses the columns. */
static int parse_fetch(int argc, char **argv, const char *cmd, const char *allowed, fetch_spec *fs)
{
    memset(fs, 0, sizeof *fs);
    fs->policy = -1;
    const char *entity = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !a[1]) {
            if (entity)
                return usage_error("%s: unexpected '%s' (one ENTITY; options start with --)", cmd, a);
            entity = a;
            continue;
        }
        if (!strcmp(cmd, "watch") && !strcmp(a, "--interval"))
            return usage_error("watch: --interval is now the shell's option --sync-interval MS "
                               "(the context asks the server every MS while something is watched)");
        if (strstr(allowed, a) == NULL && strcmp(a, "--where") && strcmp(a, "--arg") && strcmp(a, "--sort") &&
            strcmp(a, "--policy"))
            return usage_error("%s: unknown option '%s' (see help)", cmd, a);
        if (i + 1 >= argc)
            return usage_error("%s: %s needs a value", cmd, a);
        const char *v = argv[++i];
        int rc = SHELL_OK;
        if (!strcmp(a, "--where"))
            fs->where = v;
        else if (!strcmp(a, "--arg")) {
            if (fs->nargs == MAX_ARGS)
                return usage_error("%s: at most %d --arg", cmd, MAX_ARGS);
            parse_arg(v, &fs->args[fs->nargs++]);
        } else if (!strcmp(a, "--sort"))
            fs->sort = v;
        else if (!strcmp(a, "--fields"))
            fs->fields = v;
        else if (!strcmp(a, "--limit"))
            rc = parse_int_opt(a, v, 0, &fs->limit);
        else if (!strcmp(a, "--offset"))
            rc = parse_int_opt(a, v, 0, &fs->offset);
        else if (!strcmp(a, "--count"))
            rc = parse_int_opt(a, v, 1, &fs->count);
        else if (!strcmp(a, "--timeout"))
            rc = parse_int_opt(a, v, 1, &fs->timeout_s);
        else if (!strcmp(a, "--policy")) {
            fs->policy = vocabulary(cmd, a, v, POLICY_NAMES, OLD_POLICY_NAMES);
            if (fs->policy < 0)
                return SHELL_USAGE;
        }
        if (rc != SHELL_OK)
            return rc;
    }
    if (!entity)
        return usage_error("%s: which ENTITY? (see `entities`)", cmd);
    int rc = need_ctx();
    if (rc == SHELL_OK)
        rc = lookup_entity(entity, &fs->ent);
    if (rc != SHELL_OK)
        return rc;

    /* The columns: the id, then --fields, or every attribute but the id and version. */
    if (fs->fields) {
        const char *p = fs->fields;
        while (*p) {
            size_t n = strcspn(p, ",");
            if (n) {
                char *f = xrealloc(NULL, n + 1);
                memcpy(f, p, n);
                f[n] = '\0';
                /* A plain name or code must be a key; a path is the library's to check. */
                if (!strchr(f, '.') && strcmp(f, fs->ent.id_field)) {
                    rc = lookup_key(fs->ent.entity, f, NULL, NULL);
                    if (rc != SHELL_OK) {
                        free(f);
                        return rc;
                    }
                }
                if (!strcmp(f, fs->ent.id_field)) {
                    free(f);
                } else {
                    fs->cols = xrealloc(fs->cols, (fs->ncols + 1) * sizeof *fs->cols);
                    fs->cols[fs->ncols++] = f;
                }
            }
            p += n;
            if (*p == ',')
                p++;
        }
    } else {
        size_t n = 0;
        tether_entity_attribute_count(fs->ent.entity, &n);
        for (size_t i = 0; i < n; i++) {
            const char *an;
            unsigned int flags = 0;
            if (tether_entity_attribute_at(fs->ent.entity, i, &an, NULL, NULL, &flags) != TETHER_OK ||
                (flags & (TETHER_ATTR_ID | TETHER_ATTR_VERSION)))
                continue;
            fs->cols = xrealloc(fs->cols, (fs->ncols + 1) * sizeof *fs->cols);
            fs->cols[fs->ncols++] = xstrdup(an);
        }
    }
    return SHELL_OK;
}

static void fetch_options_from(const fetch_spec *fs, tether_fetch_options *o)
{
    tether_fetch_options_init(o, TETHER_FETCH_OPTIONS_VERSION);
    o->entity = fs->ent.name;
    o->predicate = fs->where;
    o->arguments = fs->nargs ? fs->args : NULL;
    o->argument_count = fs->nargs;
    o->sort = fs->sort;
    o->limit = fs->limit;
    o->offset = fs->offset;
    if (fs->policy >= 0)
        o->policy = (tether_cache_policy)fs->policy;
    else if (g.offline || !g.online)
        o->policy = TETHER_POLICY_CACHE_ONLY; /* offline: the store is all there is */
}

/* ------------------------------------------------------------ progress */

static int g_progress_shown;

static int show_progress(void) { return g.progress || isatty(STDERR_FILENO); }

static void progress_line(const char *what, int64_t done, int64_t total)
{
    if (!show_progress())
        return;
    int tty = isatty(STDERR_FILENO);
    if (total >= 0)
        fprintf(stderr, "%s%s: %" PRId64 " of %" PRId64 "%s", tty ? "\r" : "", what, done, total, tty ? "" : "\n");
    else
        fprintf(stderr, "%s%s: %" PRId64 "%s", tty ? "\r" : "", what, done, tty ? "" : "\n");
    g_progress_shown = tty;
}

static void progress_clear(void)
{
    if (g_progress_shown)
        fputs("\r\033[K", stderr);
    g_progress_shown = 0;
}

static void on_fetch_progress(tether_task *task, int64_t received, int64_t total, void *ud)
{
    (void)task;
    (void)ud;
    progress_line("fetched", received, total);
}

/* ------------------------------------------------------------ one fetch */

typedef struct {
    int done, status;
    char *message;
    tether_results *results;
} fetch_wait;

static void on_fetch(tether_task *task, tether_phase phase, int status, const char *message,
                     tether_results *results, void *ud)
{
    (void)task;
    fetch_wait *w = ud;
    if (phase != TETHER_PHASE_FINAL) { /* the cache's answer: the server's follows */
        tether_results_free(results);
        return;
    }
    w->done = 1;
    w->status = status;
    w->message = xstrdup(message);
    w->results = results; /* released by run_fetch's caller */
}

/* Starts a fetch, waits for its FINAL. On success *w holds the results. */
static int run_fetch(const tether_fetch_options *o, fetch_wait *w)
{
    memset(w, 0, sizeof *w);
    tether_task *task = NULL;
    int rc = tether_fetch_start(g.ctx, o, on_fetch, w, &task);
    if (rc != TETHER_OK)
        return api_error(rc); /* bad predicate, sort key...: no callback comes */
    wait_done(&w->done, task, 0);
    progress_clear();
    if (!w->done) /* the context died under us */
        return report(TETHER_E_HANDLE, NULL, "the context closed");
    if (w->status != TETHER_OK) {
        rc = report(w->status, NULL, w->message);
        tether_results_free(w->results);
        w->results = NULL;
        free(w->message);
        w->message = NULL;
        return rc;
    }
    free(w->message);
    w->message = NULL;
    return SHELL_OK;
}

/* One object's row: the id, then each column's peeked value. */
static char **row_cells(const fetch_spec *fs, tether_object *obj)
{
    char **row = xrealloc(NULL, (fs->ncols + 1) * sizeof *row);
    const char *id = NULL;
    tether_object_id(obj, &id);
    row[0] = xstrdup(id);
    for (size_t c = 0; c < fs->ncols; c++) {
        tether_value v;
        int rc = read_key(obj, fs->cols[c], 0, &v);
        if (rc == TETHER_OK) {
            row[c + 1] = cell_value(&v);
            tether_value_free(&v);
        } else {
            row[c + 1] = xstrdup(tether_errstr(rc));
        }
    }
    return row;
}

static void row_json(buf *b, const fetch_spec *fs, tether_object *obj)
{
    const char *id = NULL;
    tether_object_id(obj, &id);
    buf_str(b, "{");
    buf_json_cstr(b, fs->ent.id_field);
    buf_str(b, ":");
    buf_json_cstr(b, id);
    for (size_t c = 0; c < fs->ncols; c++) {
        tether_value v;
        buf_str(b, ",");
        buf_json_cstr(b, fs->cols[c]);
        buf_str(b, ":");
        int rc = read_key(obj, fs->cols[c], 0, &v);
        if (rc == TETHER_OK) {
            buf_json_value(b, &v);
            tether_value_free(&v);
        } else {
            buf_str(b, "{\"error\":");
            buf_json_cstr(b, tether_errstr(rc));
            buf_str(b, "}");
        }
    }
    buf_str(b, "}");
}

static void table_header_for(const fetch_spec *fs, table *t, const char *first)
{
    size_t n = fs->ncols + 1 + (first != NULL);
    const char **h = xrealloc(NULL, n * sizeof *h);
    size_t k = 0;
    if (first)
        h[k++] = first;
    h[k++] = fs->ent.id_field;
    for (size_t c = 0; c < fs->ncols; c++)
        h[k++] = fs->cols[c];
    table_init(t, n, h);
    free(h);
}

/* The whole answer: a table, or {"entity","count","rows"} in JSON. */
static void print_answer(const fetch_spec *fs, tether_results *results, const char *json_prefix)
{
    size_t n = 0;
    tether_results_count(results, &n);
    if (g.json) {
        buf b = {0};
        buf_str(&b, "{");
        if (json_prefix)
            buf_str(&b, json_prefix);
        buf_str(&b, "\"entity\":");
        buf_json_cstr(&b, fs->ent.name);
        buf_printf(&b, ",\"count\":%zu,\"rows\":[", n);
        for (size_t i = 0; i < n; i++) {
            tether_object *obj;
            if (tether_results_object_at(results, i, &obj) != TETHER_OK)
                continue;
            if (i)
                buf_str(&b, ",");
            row_json(&b, fs, obj);
        }
        buf_str(&b, "]}");
        json_out(&b);
        return;
    }
    table t;
    table_header_for(fs, &t, NULL);
    for (size_t i = 0; i < n; i++) {
        tether_object *obj;
        if (tether_results_object_at(results, i, &obj) != TETHER_OK)
            continue;
        char **row = row_cells(fs, obj);
        table_add(&t, row);
        free(row);
    }
    table_print(&t);
    table_free(&t);
    printf("(%zu %s)\n", n, n == 1 ? "row" : "rows");
}

static int cmd_fetch(int argc, char **argv)
{
    fetch_spec fs;
    int rc = parse_fetch(argc, argv, "fetch", "--fields --limit --offset", &fs);
    if (rc == SHELL_OK) {
        tether_fetch_options o;
        fetch_options_from(&fs, &o);
        o.progress = on_fetch_progress;
        fetch_wait w;
        rc = run_fetch(&o, &w);
        if (rc == SHELL_OK) {
            print_answer(&fs, w.results, NULL);
            tether_results_free(w.results);
        }
    }
    fetch_spec_free(&fs);
    return rc;
}

static int cmd_count(int argc, char **argv)
{
    fetch_spec fs;
    int rc = parse_fetch(argc, argv, "count", "", &fs);
    if (rc == SHELL_OK) {
        tether_fetch_options o;
        fetch_options_from(&fs, &o);
        o.result_type = TETHER_RESULT_COUNT;
        fetch_wait w;
        rc = run_fetch(&o, &w);
        if (rc == SHELL_OK) {
            size_t n = 0;
            tether_results_count(w.results, &n);
            if (g.json) {
                buf b = {0};
                buf_str(&b, "{\"entity\":");
                buf_json_cstr(&b, fs.ent.name);
                buf_printf(&b, ",\"count\":%zu}", n);
                json_out(&b);
            } else {
                printf("%zu\n", n);
            }
            tether_results_free(w.results);
        }
    }
    fetch_spec_free(&fs);
    return rc;
}

/* ------------------------------------------------------------ watch */

typedef struct {
    fetch_spec *fs;
    tether_results *prev; /* the last answer, for the ids of deleted rows */
    int64_t answers;      /* LIVE answers printed */
    int done, status;
    char *message;
} watch_state;

static const char *change_names[] = {"", "delete", "insert", "move", "update"};

static void print_changes(watch_state *w, tether_results *now)
{
    size_t n = 0;
    tether_results_count(now, &n);
    buf b = {0};
    table t = {0};
    if (g.json)
        buf_printf(&b, "{\"answer\":%" PRId64 ",\"entity\":", w->answers);
    if (g.json) {
        buf_json_cstr(&b, w->fs->ent.name);
        buf_printf(&b, ",\"count\":%zu,\"changes\":[", n);
    } else {
        table_header_for(w->fs, &t, "change");
    }
    int first = 1;
    for (int kind = TETHER_CHANGE_DELETE; kind <= TETHER_CHANGE_UPDATE; kind++) {
        size_t count = 0;
        tether_results_change_count(now, (tether_change)kind, &count);
        for (size_t i = 0; i < count; i++) {
            size_t old_i = SIZE_MAX, new_i = SIZE_MAX;
            if (tether_results_change_at(now, (tether_change)kind, i, &old_i, &new_i) != TETHER_OK)
                continue;
            tether_object *obj = NULL;
            const char *old_id = NULL;
            if (new_i != SIZE_MAX)
                tether_results_object_at(now, new_i, &obj);
            if (kind == TETHER_CHANGE_DELETE && w->prev)
                tether_results_id_at(w->prev, old_i, &old_id);
            if (g.json) {
                buf_printf(&b, "%s{\"change\":\"%s\"", first ? "" : ",", change_names[kind]);
                if (old_i != SIZE_MAX)
                    buf_printf(&b, ",\"old_index\":%zu", old_i);
                if (new_i != SIZE_MAX)
                    buf_printf(&b, ",\"index\":%zu", new_i);
                if (obj) {
                    buf_str(&b, ",\"row\":");
                    row_json(&b, w->fs, obj);
                } else {
                    buf_str(&b, ",\"id\":");
                    buf_json_cstr(&b, old_id);
                }
                buf_str(&b, "}");
            } else {
                char **row;
                if (obj) {
                    char **cells = row_cells(w->fs, obj);
                    row = xrealloc(NULL, (w->fs->ncols + 2) * sizeof *row);
                    memcpy(row + 1, cells, (w->fs->ncols + 1) * sizeof *row);
                    free(cells);
                } else {
                    row = calloc(w->fs->ncols + 2, sizeof *row);
                    if (!row)
                        exit(SHELL_FAILED);
                    row[1] = xstrdup(old_id ? old_id : "?");
                }
                row[0] = xstrdup(change_names[kind]);
                table_add(&t, row);
                free(row);
            }
            first = 0;
        }
    }
    if (g.json) {
        buf_str(&b, "]}");
        json_out(&b);
    } else {
        table_print(&t);
        table_free(&t);
        printf("(%zu %s now)\n", n, n == 1 ? "row" : "rows");
    }
    fflush(stdout);
}

static void on_watch(tether_task *task, tether_phase phase, int status, const char *message,
                     tether_results *results, void *ud)
{
    (void)task;
    watch_state *w = ud;
    if (phase == TETHER_PHASE_FINAL) { /* the cancel, or a failure to start */
        w->done = 1;
        w->status = status;
        w->message = xstrdup(message);
        tether_results_free(results);
        return;
    }
    if (phase != TETHER_PHASE_LIVE) { /* the cache's first answer: the live one follows */
        tether_results_free(results);
        return;
    }
    progress_clear();
    if (status != TETHER_OK) /* the answer is the cache's: say why */
        fprintf(stderr, "tether: %s: %s\n", tether_errstr(status), message);
    if (w->answers == 0) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "\"answer\":0,");
        print_answer(w->fs, results, prefix);
        fflush(stdout);
    } else {
        print_changes(w, results);
    }
    w->answers++;
    tether_results_free(w->prev);
    w->prev = results;
}

/* A live fetch answers again whenever the context brings in changes: its
 * own syncs every --sync-interval while it watches (the library's periodic
 * sync; PostgreSQL pushes them), other fetches, refreshes and saves. */
static int cmd_watch(int argc, char **argv)
{
    fetch_spec fs;
    int rc = parse_fetch(argc, argv, "watch", "--fields --count --timeout", &fs);
    if (rc != SHELL_OK) {
        fetch_spec_free(&fs);
        return rc;
    }
    watch_state w = {.fs = &fs};
    tether_fetch_options o;
    fetch_options_from(&fs, &o);
    o.live = 1;
    o.progress = on_fetch_progress;
    tether_task *task = NULL;
    rc = tether_fetch_start(g.ctx, &o, on_watch, &w, &task);
    if (rc != TETHER_OK) {
        fetch_spec_free(&fs);
        return api_error(rc);
    }
    int64_t deadline = fs.timeout_s ? now_ms() + fs.timeout_s * 1000 : 0;
    int cancelled = 0;
    while (!w.done) {
        int stop = g_interrupted || (deadline && now_ms() >= deadline) ||
                   (fs.count && w.answers > fs.count); /* the first answer is not a change */
        if (stop && !cancelled) {
            cancelled = 1;
            tether_task_cancel(task);
        }
        if (tether_context_poll(g.ctx, POLL_SLICE_MS, NULL) != TETHER_OK)
            break;
    }
    progress_clear();
    rc = SHELL_OK;
    if (w.done && w.status != TETHER_E_CANCELLED && w.status != TETHER_OK)
        rc = report(w.status, NULL, w.message);
    tether_results_free(w.prev);
    free(w.message);
    fetch_spec_free(&fs);
    return rc;
}

/* ------------------------------------------------------------ model */

static int cmd_entities(int argc, char **argv)
{
    (void)argv;
    if (argc != 1)
        return usage_error("entities takes no arguments");
    int rc = need_ctx();
    if (rc != SHELL_OK)
        return rc;
    size_t n = 0;
    tether_context_entity_count(g.ctx, &n);
    static const char *h[] = {"entity", "code", "fields", "operations", "store", "route"};
    table t;
    buf b = {0};
    if (g.json)
        buf_str(&b, "{\"entities\":[");
    else
        table_init(&t, 6, h);
    for (size_t i = 0; i < n; i++) {
        tether_entity *e;
        if (tether_context_entity_at(g.ctx, i, &e) != TETHER_OK)
            continue;
        const char *name = "", *route = "", *conf = "";
        int code = 0;
        unsigned int ops = 0;
        size_t nattr = 0;
        tether_entity_name(e, &name);
        tether_entity_route(e, &route);
        tether_entity_configuration(e, &conf);
        tether_entity_code(e, &code);
        tether_entity_operations(e, &ops);
        tether_entity_attribute_count(e, &nattr);
        static const struct { unsigned int bit; const char *name; } opnames[] = {
            {TETHER_OP_FETCH, "fetch"}, {TETHER_OP_INSERT, "insert"},
            {TETHER_OP_UPDATE, "update"}, {TETHER_OP_DELETE, "delete"}};
        if (g.json) {
            buf_str(&b, i ? ",{\"name\":" : "{\"name\":");
            buf_json_cstr(&b, name);
            buf_printf(&b, ",\"code\":%d,\"fields\":%zu,\"operations\":[", code, nattr);
            int first = 1;
            for (int k = 0; k < 4; k++)
                if (ops & opnames[k].bit) {
                    buf_printf(&b, "%s\"%s\"", first ? "" : ",", opnames[k].name);
                    first = 0;
                }
            buf_str(&b, "],\"store\":");
            buf_json_cstr(&b, *conf ? conf : "server");
            buf_str(&b, ",\"route\":");
            buf_json_cstr(&b, route);
            buf_str(&b, "}");
        } else {
            buf ops_b = {0};
            for (int k = 0; k < 4; k++)
                if (ops & opnames[k].bit)
                    buf_printf(&ops_b, "%s%s", ops_b.len ? "," : "", opnames[k].name);
            char **row = xrealloc(NULL, 6 * sizeof *row);
            buf cb = {0}, fb = {0};
            buf_printf(&cb, "%d", code);
            buf_printf(&fb, "%zu", nattr);
            row[0] = xstrdup(name);
            row[1] = buf_take(&cb);
            row[2] = buf_take(&fb);
            row[3] = buf_take(&ops_b);
            row[4] = xstrdup(*conf ? conf : "server");
            row[5] = xstrdup(route);
            table_add(&t, row);
            free(row);
        }
    }
    if (g.json) {
        buf_str(&b, "]}");
        json_out(&b);
    } else {
        table_print(&t);
        table_free(&t);
    }
    return SHELL_OK;
}

/* A table cell for an allowed-values array: its members, '|' between them,
 * text without its quotes when that reads the same ("pending|submitted").
 * --json gives the array exactly. */
static char *allowed_cell(const char *json)
{
    if (!json)
        return xstrdup("");
    buf b = {0};
    const char *p = json + (*json == '[');
    int first = 1;
    while (*p && *p != ']') {
        const char *q = p;
        int in_string = 0;
        while (*q && (in_string || (*q != ',' && *q != ']'))) {
            if (*q == '\\' && in_string && q[1])
                q++;
            else if (*q == '"')
                in_string = !in_string;
            q++;
        }
        if (!first)
            buf_str(&b, "|");
        first = 0;
        size_t len = (size_t)(q - p);
        if (len >= 2 && *p == '"' && p[len - 1] == '"' && !memchr(p + 1, '\\', len - 2) && !memchr(p + 1, '|', len - 2))
            buf_add(&b, p + 1, len - 2);
        else
            buf_add(&b, p, len);
        p = *q == ',' ? q + 1 : q;
    }
    return b.s ? buf_take(&b) : xstrdup("");
}

static int cmd_fields(int argc, char **argv)
{
    if (argc != 2)
        return usage_error("fields ENTITY");
    int rc = need_ctx();
    entity_info ent;
    if (rc == SHELL_OK)
        rc = lookup_entity(argv[1], &ent);
    if (rc != SHELL_OK)
        return rc;
    size_t n = 0;
    tether_entity_attribute_count(ent.entity, &n);
    static const char *h[] = {"field", "code", "type", "flags", "refers to", "allowed"};
    table t;
    buf b = {0};
    if (g.json) {
        buf_str(&b, "{\"entity\":");
        buf_json_cstr(&b, ent.name);
        buf_str(&b, ",\"fields\":[");
    } else {
        table_init(&t, 6, h);
    }
    for (size_t i = 0; i < n; i++) {
        const char *name = "";
        int code = 0;
        tether_type type = TETHER_TYPE_NULL;
        unsigned int flags = 0;
        if (tether_entity_attribute_at(ent.entity, i, &name, &code, &type, &flags) != TETHER_OK)
            continue;
        tether_entity *target = NULL;
        const char *target_name = NULL;
        if (tether_entity_attribute_target(ent.entity, i, &target, NULL) == TETHER_OK)
            tether_entity_name(target, &target_name);
        const char *allowed = NULL; /* a JSON array, or NULL: any value of the type */
        tether_entity_attribute_allowed(ent.entity, i, &allowed);
        if (g.json) {
            buf_str(&b, i ? ",{\"name\":" : "{\"name\":");
            buf_json_cstr(&b, name);
            buf_printf(&b, ",\"code\":%d,\"type\":\"%s\",\"id\":%s,\"version\":%s,\"required\":%s,\"target\":",
                       code, type_name(type), flags & TETHER_ATTR_ID ? "true" : "false",
                       flags & TETHER_ATTR_VERSION ? "true" : "false",
                       flags & TETHER_ATTR_REQUIRED ? "true" : "false");
            buf_json_cstr(&b, target_name);
            buf_str(&b, ",\"allowed\":");
            buf_str(&b, allowed ? allowed : "null");
            buf_str(&b, "}");
        } else {
            buf cb = {0}, fb = {0};
            buf_printf(&cb, "#%d", code);
            if (flags & TETHER_ATTR_ID)
                buf_str(&fb, "id");
            if (flags & TETHER_ATTR_VERSION)
                buf_str(&fb, fb.len ? ",version" : "version");
            if (flags & TETHER_ATTR_REQUIRED)
                buf_str(&fb, fb.len ? ",required" : "required");
            char *row[6] = {xstrdup(name), buf_take(&cb), xstrdup(type_name(type)), buf_take(&fb),
                            xstrdup(target_name), allowed_cell(allowed)};
            table_add(&t, row);
        }
    }
    if (g.json) {
        buf_str(&b, "]}");
        json_out(&b);
    } else {
        table_print(&t);
        table_free(&t);
    }
    return SHELL_OK;
}

static int cmd_info(int argc, char **argv)
{
    (void)argv;
    if (argc != 1)
        return usage_error("info takes no arguments");
    int rc = need_ctx();
    if (rc != SHELL_OK)
        return rc;
    size_t entities = 0, changes = 0, diags = 0;
    tether_context_entity_count(g.ctx, &entities);
    tether_context_change_count(g.ctx, &changes);
    tether_context_diagnostic_count(g.ctx, &diags);
    if (g.json) {
        buf b = {0};
        buf_str(&b, "{\"server\":");
        buf_json_cstr(&b, g.postgres ? "postgres" : g.server); /* a conninfo may hold a password */
        buf_str(&b, ",\"bucket\":");
        buf_json_cstr(&b, g.postgres ? (g.schema ? g.schema : "public") : g.bucket);
        buf_str(&b, ",\"store\":");
        buf_json_cstr(&b, g.store);
        buf_printf(&b, ",\"online\":%s,\"library\":\"%s\",\"entities\":%zu,\"pending\":%zu,\"diagnostics\":[",
                   g.online ? "true" : "false", tether_version(), entities, changes);
        for (size_t i = 0; i < diags; i++) {
            const char *e = NULL, *a = NULL, *m = NULL;
            tether_context_diagnostic_at(g.ctx, i, &e, &a, &m);
            buf_str(&b, i ? ",{\"entity\":" : "{\"entity\":");
            buf_json_cstr(&b, e);
            buf_str(&b, ",\"field\":");
            buf_json_cstr(&b, a);
            buf_str(&b, ",\"message\":");
            buf_json_cstr(&b, m);
            buf_str(&b, "}");
        }
        buf_str(&b, "]}");
        json_out(&b);
        return SHELL_OK;
    }
    printf("server     %s\n%-10s %s\nstore      %s\nonline     %s\nlibrary    %s\n"
           "entities   %zu\npending    %zu\n",
           g.postgres ? "postgres" : g.server, g.postgres ? "schema" : "bucket", g.postgres ? (g.schema ? g.schema : "public") : g.bucket,
           g.store, g.online ? "yes" : "no (opened from the store)", tether_version(),
           entities, changes);
    for (size_t i = 0; i < diags; i++) {
        const char *e = NULL, *a = NULL, *m = NULL;
        tether_context_diagnostic_at(g.ctx, i, &e, &a, &m);
        printf("diagnostic %s%s%s: %s\n", e ? e : "", a ? "." : "", a ? a : "", m ? m : "");
    }
    return SHELL_OK;
}

/* ------------------------------------------------------------ objects */

/* Opens ENTITY ID: the entity and a new object reference (release it). */
static int open_object(const char *entity, const char *id, entity_info *ent, tether_object **obj)
{
    int rc = need_ctx();
    if (rc == SHELL_OK)
        rc = lookup_entity(entity, ent);
    if (rc != SHELL_OK)
        return rc;
    int st = tether_context_object(g.ctx, ent->name, id, obj);
    return st == TETHER_OK ? SHELL_OK : api_error(st);
}

static int cmd_peek(int argc, char **argv)
{
    if (argc < 3)
        return usage_error("peek ENTITY ID [KEY...]");
    entity_info ent;
    tether_object *obj;
    int rc = open_object(argv[1], argv[2], &ent, &obj);
    if (rc != SHELL_OK)
        return rc;
    /* Keys: those given, else every attribute. */
    size_t nkeys = (size_t)argc - 3;
    const char **keys;
    if (nkeys) {
        keys = xrealloc(NULL, nkeys * sizeof *keys);
        for (size_t i = 0; i < nkeys; i++)
            keys[i] = argv[3 + i];
    } else {
        tether_entity_attribute_count(ent.entity, &nkeys);
        keys = xrealloc(NULL, nkeys * sizeof *keys);
        for (size_t i = 0; i < nkeys; i++)
            if (tether_entity_attribute_at(ent.entity, i, &keys[i], NULL, NULL, NULL) != TETHER_OK)
                keys[i] = "";
    }
    tether_value *vals = xrealloc(NULL, nkeys * sizeof *vals);
    for (size_t i = 0; i < nkeys && rc == SHELL_OK; i++) {
        int st = read_key(obj, keys[i], 0, &vals[i]);
        if (st == TETHER_E_NOT_CACHED) {
            /* peek never asks the server, so it cannot say more: get can. */
            char msg[300];
            snprintf(msg, sizeof msg, "%s/%.200s is not cached (peek does not ask the server: get does)",
                     ent.name, argv[2]);
            rc = report(st, NULL, msg);
            nkeys = i;
        } else if (st != TETHER_OK) {
            rc = api_error(st);
            nkeys = i; /* the ones read so far are cleared below */
        }
    }
    if (rc == SHELL_OK) {
        if (g.json) {
            buf b = {0};
            buf_str(&b, "{\"entity\":");
            buf_json_cstr(&b, ent.name);
            buf_str(&b, ",\"id\":");
            buf_json_cstr(&b, argv[2]);
            buf_str(&b, ",\"values\":{");
            for (size_t i = 0; i < nkeys; i++) {
                if (i)
                    buf_str(&b, ",");
                buf_json_cstr(&b, keys[i]);
                buf_str(&b, ":");
                buf_json_value(&b, &vals[i]);
            }
            buf_str(&b, "}}");
            json_out(&b);
        } else {
            static const char *h[] = {"key", "value"};
            table t;
            table_init(&t, 2, h);
            for (size_t i = 0; i < nkeys; i++) {
                char *row[2] = {xstrdup(keys[i]), cell_value(&vals[i])};
                table_add(&t, row);
            }
            table_print(&t);
            table_free(&t);
        }
    }
    for (size_t i = 0; i < nkeys; i++)
        tether_value_free(&vals[i]);
    free(vals);
    free(keys);
    tether_object_free(obj);
    return rc;
}

/* get: the cached value (get starts the object's refresh), then, once the
 * server has answered, the refreshed one. A get's refresh says nothing when
 * the value did not change, so the shell waits on a server fetch of that one
 * record instead: when it ends the store holds the server's record. */
static int cmd_get(int argc, char **argv)
{
    if (argc != 4)
        return usage_error("get ENTITY ID KEY");
    entity_info ent;
    tether_object *obj;
    int rc = open_object(argv[1], argv[2], &ent, &obj);
    if (rc != SHELL_OK)
        return rc;
    const char *key = argv[3];
    tether_value cached = {0}, fresh = {0};
    int cached_st = read_key(obj, key, !g.offline && g.online, &cached);
    int fresh_st = cached_st;
    if (cached_st != TETHER_OK && cached_st != TETHER_E_NOT_CACHED) {
        rc = api_error(cached_st); /* bad key: nothing to wait for */
        goto out;
    }
    if (!g.offline && g.online) {
        char predicate[300];
        snprintf(predicate, sizeof predicate, "`%s` == $1", ent.id_field);
        tether_value id = {.type = TETHER_TYPE_TEXT, .text = argv[2], .length = strlen(argv[2])};
        tether_fetch_options o;
        tether_fetch_options_init(&o, TETHER_FETCH_OPTIONS_VERSION);
        o.entity = ent.name;
        o.predicate = strchr(ent.id_field, '`') ? NULL : predicate;
        o.arguments = o.predicate ? &id : NULL;
        o.argument_count = o.predicate ? 1 : 0;
        o.policy = TETHER_POLICY_SERVER_ONLY;
        o.result_type = TETHER_RESULT_IDS;
        fetch_wait w;
        rc = run_fetch(&o, &w);
        if (rc != SHELL_OK)
            goto out;
        tether_results_free(w.results);
        tether_context_poll(g.ctx, 0, NULL); /* observers and the like, if any */
        fresh_st = read_key(obj, key, 0, &fresh);
        /* The server answered without it: it has no such record (as the
         * library says of a get whose refresh finds none). */
        if (fresh_st == TETHER_E_NOT_CACHED)
            fresh_st = TETHER_E_NOT_FOUND;
    }
    if (fresh_st != TETHER_OK && fresh_st != TETHER_E_NOT_CACHED && fresh_st != TETHER_E_NOT_FOUND) {
        rc = api_error(fresh_st);
        goto out;
    }
    if (g.json && fresh_st == TETHER_OK) { /* else the error is the document */
        buf b = {0};
        buf_str(&b, "{\"entity\":");
        buf_json_cstr(&b, ent.name);
        buf_str(&b, ",\"id\":");
        buf_json_cstr(&b, argv[2]);
        buf_str(&b, ",\"key\":");
        buf_json_cstr(&b, key);
        buf_str(&b, ",\"cached\":");
        if (cached_st == TETHER_OK)
            buf_json_value(&b, &cached);
        else
            buf_str(&b, "null");
        buf_printf(&b, ",\"cached_status\":\"%s\",\"refreshed\":", tether_errstr(cached_st));
        if (fresh_st == TETHER_OK)
            buf_json_value(&b, &fresh);
        else
            buf_str(&b, "null");
        buf_printf(&b, ",\"refreshed_status\":\"%s\"}", tether_errstr(fresh_st));
        json_out(&b);
    } else if (!g.json) {
        char *c = cached_st == TETHER_OK ? cell_value(&cached) : xstrdup("(not cached)");
        char *f = fresh_st == TETHER_OK            ? cell_value(&fresh)
                  : xstrdup("(no record on the server)");
        printf("cached     %s\n", c);
        if (!g.offline && g.online)
            printf("refreshed  %s\n", f);
        free(c);
        free(f);
    }
    /* No record anywhere is an error, as peek's. After the server's answer
     * a record still not cached is one the server does not have. */
    if (fresh_st != TETHER_OK) {
        char msg[300];
        if (g.offline || !g.online)
            snprintf(msg, sizeof msg, "%s/%.200s is not cached (offline: the server was not asked)", ent.name,
                     argv[2]);
        else
            snprintf(msg, sizeof msg, "no record %s/%.200s on the server", ent.name, argv[2]);
        rc = report(fresh_st, NULL, msg);
    }
out:
    tether_value_free(&cached);
    tether_value_free(&fresh);
    tether_object_free(obj);
    return rc;
}

static void print_set(const entity_info *ent, tether_object *obj, const char *key)
{
    const char *id = "";
    tether_object_id(obj, &id);
    tether_pending p = TETHER_PENDING_NONE;
    tether_object_pending(obj, &p);
    tether_value v = {0};
    int st = key ? read_key(obj, key, 0, &v) : TETHER_E_NOT_FOUND;
    if (g.json) {
        buf b = {0};
        buf_str(&b, "{\"entity\":");
        buf_json_cstr(&b, ent->name);
        buf_str(&b, ",\"id\":");
        buf_json_cstr(&b, id);
        if (key) {
            buf_str(&b, ",\"key\":");
            buf_json_cstr(&b, key);
            buf_str(&b, ",\"value\":");
            if (st == TETHER_OK)
                buf_json_value(&b, &v);
            else
                buf_str(&b, "null");
        }
        buf_printf(&b, ",\"pending\":\"%s\"}", pending_name(p));
        json_out(&b);
    } else if (key) {
        char *c = st == TETHER_OK ? cell_value(&v) : xstrdup(tether_errstr(st));
        printf("%s %s: %s = %s (pending %s)\n", ent->name, id, key, c, pending_name(p));
        free(c);
    } else {
        printf("%s %s (pending %s)\n", ent->name, id, pending_name(p));
    }
    tether_value_free(&v);
}

static int cmd_set(int argc, char **argv)
{
    int unset = !strcmp(argv[0], "unset");
    if (argc != (unset ? 4 : 5))
        return usage_error(unset ? "unset ENTITY ID KEY" : "set ENTITY ID KEY VALUE");
    entity_info ent;
    tether_object *obj;
    int rc = open_object(argv[1], argv[2], &ent, &obj);
    if (rc != SHELL_OK)
        return rc;
    if (unset) {
        const char *name;
        rc = lookup_key(ent.entity, argv[3], &name, NULL);
        if (rc == SHELL_OK) {
            tether_value null = {.type = TETHER_TYPE_NULL};
            int st = tether_object_set(obj, name, &null);
            rc = st == TETHER_OK ? SHELL_OK : api_error(st);
        }
    } else {
        rc = set_typed(obj, ent.entity, argv[3], argv[4]);
    }
    if (rc == SHELL_OK)
        print_set(&ent, obj, argv[3]);
    tether_object_free(obj);
    return rc;
}

static int cmd_insert(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("insert ENTITY [--id ID] [KEY=VALUE...]");
    const char *id = NULL;
    int first = 2;
    if (argc >= 4 && !strcmp(argv[2], "--id")) {
        id = argv[3];
        first = 4;
    }
    for (int i = first; i < argc; i++)
        if (!strchr(argv[i], '=') || argv[i][0] == '=')
            return usage_error("insert: '%s' is not KEY=VALUE", argv[i]);
    int rc = need_ctx();
    entity_info ent;
    if (rc == SHELL_OK)
        rc = lookup_entity(argv[1], &ent);
    if (rc != SHELL_OK)
        return rc;
    tether_object *obj;
    int st = tether_context_insert(g.ctx, ent.name, id, &obj);
    if (st != TETHER_OK)
        return api_error(st);
    for (int i = first; i < argc && rc == SHELL_OK; i++) {
        char *key = xstrdup(argv[i]);
        char *eq = strchr(key, '=');
        *eq = '\0';
        rc = set_typed(obj, ent.entity, key, eq + 1);
        free(key);
    }
    if (rc == SHELL_OK)
        print_set(&ent, obj, NULL);
    else
        tether_object_rollback(obj); /* all or nothing: no half-made record left pending */
    tether_object_free(obj);
    return rc;
}

static int cmd_delete(int argc, char **argv)
{
    if (argc != 3)
        return usage_error("delete ENTITY ID");
    entity_info ent;
    tether_object *obj;
    int rc = open_object(argv[1], argv[2], &ent, &obj);
    if (rc != SHELL_OK)
        return rc;
    int st = tether_object_delete(obj);
    if (st == TETHER_OK) {
        print_set(&ent, obj, NULL);
    } else {
        rc = api_error(st);
    }
    tether_object_free(obj);
    return rc;
}

static int cmd_rollback(int argc, char **argv)
{
    if (argc != 1 && argc != 3)
        return usage_error("rollback [ENTITY ID]");
    int rc = need_ctx();
    if (rc != SHELL_OK)
        return rc;
    if (argc == 1) {
        int st = tether_context_rollback(g.ctx);
        if (st != TETHER_OK)
            return api_error(st);
        if (g.json)
            puts("{\"rolled_back\":\"all\"}");
        else
            puts("every unsaved change dropped");
        return SHELL_OK;
    }
    entity_info ent;
    tether_object *obj;
    rc = open_object(argv[1], argv[2], &ent, &obj);
    if (rc != SHELL_OK)
        return rc;
    int st = tether_object_rollback(obj);
    if (st == TETHER_OK)
        print_set(&ent, obj, NULL);
    else
        rc = api_error(st);
    tether_object_free(obj);
    return rc;
}

/* ------------------------------------------------------------ pending */

/* One pending object's rows (table) or document (JSON). */
static void pending_object(tether_object *obj, const char *entity, table *t, buf *b, int *first)
{
    tether_pending p = TETHER_PENDING_NONE;
    if (tether_object_pending(obj, &p) != TETHER_OK || p == TETHER_PENDING_NONE)
        return;
    const char *id = "";
    tether_object_id(obj, &id);
    size_t nkeys = 0;
    tether_object_changed_key_count(obj, &nkeys);
    if (g.json) {
        buf_str(b, *first ? "{\"entity\":" : ",{\"entity\":");
        buf_json_cstr(b, entity);
        buf_str(b, ",\"id\":");
        buf_json_cstr(b, id);
        buf_printf(b, ",\"change\":\"%s\",\"keys\":[", pending_name(p));
    }
    *first = 0;
    for (size_t k = 0; k < nkeys; k++) {
        const char *key = "";
        tether_object_changed_key_at(obj, k, &key);
        tether_value was = {0}, now = {0};
        int was_st = tether_object_committed(obj, key, &was);
        int now_st = tether_object_peek(obj, key, &now);
        if (g.json) {
            buf_str(b, k ? ",{\"key\":" : "{\"key\":");
            buf_json_cstr(b, key);
            buf_str(b, ",\"server\":");
            if (was_st == TETHER_OK)
                buf_json_value(b, &was);
            else
                buf_str(b, "null");
            buf_str(b, ",\"local\":");
            if (now_st == TETHER_OK)
                buf_json_value(b, &now);
            else
                buf_str(b, "null");
            buf_str(b, "}");
        } else {
            char *row[6] = {xstrdup(entity), xstrdup(id), xstrdup(pending_name(p)), xstrdup(key),
                            was_st == TETHER_OK ? cell_value(&was) : xstrdup(""),
                            now_st == TETHER_OK ? cell_value(&now) : xstrdup(tether_errstr(now_st))};
            table_add(t, row);
        }
        tether_value_free(&was);
        tether_value_free(&now);
    }
    if (g.json) {
        buf_str(b, "]}");
    } else if (nkeys == 0) {
        char *row[6] = {xstrdup(entity), xstrdup(id), xstrdup(pending_name(p)), NULL, NULL, NULL};
        table_add(t, row);
    }
}

/* Every unsaved change, in the order made (tether_context_changes), key by
 * key: the server's value and the local one. */
static int cmd_pending(int argc, char **argv)
{
    (void)argv;
    if (argc != 1)
        return usage_error("pending takes no arguments");
    int rc = need_ctx();
    if (rc != SHELL_OK)
        return rc;
    tether_results *changes;
    int st = tether_context_changes(g.ctx, &changes);
    if (st != TETHER_OK)
        return api_error(st);
    size_t total = 0;
    tether_results_count(changes, &total);
    static const char *h[] = {"entity", "id", "change", "key", "server", "local"};
    table t;
    buf b = {0};
    int first = 1;
    if (g.json)
        buf_str(&b, "{\"changes\":[");
    else
        table_init(&t, 6, h);
    for (size_t i = 0; i < total; i++) {
        tether_object *obj;
        tether_entity *e;
        const char *name;
        if (tether_results_object_at(changes, i, &obj) != TETHER_OK)
            continue;
        if (tether_object_entity(obj, &e) == TETHER_OK && tether_entity_name(e, &name) == TETHER_OK)
            pending_object(obj, name, &t, &b, &first);
        tether_object_free(obj);
    }
    tether_results_free(changes);
    if (g.json) {
        buf_printf(&b, "],\"count\":%zu}", total);
        json_out(&b);
    } else {
        if (total)
            table_print(&t);
        table_free(&t);
        printf("(%zu unsaved %s)\n", total, total == 1 ? "change" : "changes");
    }
    return rc;
}

/* ------------------------------------------------------------ save */

typedef struct {
    int done, status;
} save_wait;

static void on_save_progress(tether_task *task, int64_t answered, int64_t sent, void *ud)
{
    (void)task;
    (void)ud;
    progress_line("saved", answered, sent);
}

/* The report is borrowed for the callback only: it is printed here (POLL
 * delivery: this is the shell's own thread, between its polls). */
static void on_save(tether_task *task, int status, const char *message, tether_save_report *report_,
                    void *ud)
{
    (void)task;
    save_wait *w = ud;
    w->done = 1;
    w->status = status;
    progress_clear();
    size_t saved = 0, discarded = 0, failed = 0;
    tether_save_report_counts(report_, &saved, &discarded);
    tether_save_report_failure_count(report_, &failed);
    buf b = {0};
    table t;
    if (g.json) {
        buf_printf(&b, "{\"status\":\"%s\",\"message\":", tether_errstr(status));
        buf_json_cstr(&b, message);
        buf_printf(&b, ",\"saved\":%zu,\"discarded\":%zu,\"failures\":[", saved, discarded);
    } else {
        printf("saved %zu, discarded %zu, not saved %zu%s%s\n", saved, discarded, failed,
               status == TETHER_OK ? "" : ": ", status == TETHER_OK ? "" : message);
        static const char *h[] = {"entity", "id", "status", "message", "conflict"};
        table_init(&t, 5, h);
    }
    for (size_t i = 0; i < failed; i++) {
        tether_object *obj = NULL;
        int st = 0;
        const char *msg = "", *id = "", *ename = "";
        tether_entity *e = NULL;
        tether_save_report_failure_at(report_, i, &obj, &st, &msg);
        if (obj) {
            tether_object_id(obj, &id);
            if (tether_object_entity(obj, &e) == TETHER_OK)
                tether_entity_name(e, &ename);
        }
        int64_t mine = -1, theirs = -1;
        size_t nkeys = 0;
        int conflict = tether_save_report_conflict_at(report_, i, &mine, &theirs, &nkeys) == TETHER_OK;
        buf cb = {0};
        if (g.json) {
            buf_str(&b, i ? ",{\"entity\":" : "{\"entity\":");
            buf_json_cstr(&b, ename);
            buf_str(&b, ",\"id\":");
            buf_json_cstr(&b, id);
            buf_printf(&b, ",\"status\":\"%s\",\"message\":", tether_errstr(st));
            buf_json_cstr(&b, msg);
            if (conflict)
                buf_printf(&b, ",\"conflict\":{\"local_version\":%" PRId64 ",\"server_version\":%" PRId64
                               ",\"keys\":[", mine, theirs);
        } else if (conflict) {
            buf_printf(&cb, "edited from version %" PRId64 ", server has %" PRId64, mine, theirs);
        }
        for (size_t k = 0; conflict && k < nkeys; k++) {
            const char *key = "";
            tether_save_report_conflict_key_at(report_, i, k, &key);
            tether_value server = {0}, local = {0};
            int sst = tether_save_report_server_value(report_, i, key, &server);
            int lst = obj ? tether_object_peek(obj, key, &local) : TETHER_E_HANDLE;
            if (g.json) {
                buf_str(&b, k ? ",{\"key\":" : "{\"key\":");
                buf_json_cstr(&b, key);
                buf_str(&b, ",\"local\":");
                if (lst == TETHER_OK)
                    buf_json_value(&b, &local);
                else
                    buf_str(&b, "null");
                buf_str(&b, ",\"server\":");
                if (sst == TETHER_OK)
                    buf_json_value(&b, &server);
                else
                    buf_str(&b, "null");
                buf_str(&b, "}");
            } else {
                char *l = lst == TETHER_OK ? cell_value(&local) : xstrdup("null");
                char *s = sst == TETHER_OK ? cell_value(&server) : xstrdup("(deleted)");
                buf_printf(&cb, "; %s: mine %s, server %s", key, l, s);
                free(l);
                free(s);
            }
            tether_value_free(&server);
            tether_value_free(&local);
        }
        if (g.json) {
            buf_str(&b, conflict ? "]}}" : "}");
        } else {
            char *row[5] = {xstrdup(ename), xstrdup(id), xstrdup(tether_errstr(st)), xstrdup(msg),
                            buf_take(&cb)};
            table_add(&t, row);
        }
        free(cb.s);
    }
    if (g.json) {
        buf_str(&b, "]}");
        json_out(&b);
    } else {
        if (failed)
            table_print(&t);
        table_free(&t);
    }
    if (status != TETHER_OK)
        fprintf(stderr, "tether: %s: %s\n", tether_errstr(status), message);
}

static int cmd_save(int argc, char **argv)
{
    tether_save_options so;
    tether_save_options_init(&so, TETHER_SAVE_OPTIONS_VERSION);
    if (argc == 3 && !strcmp(argv[1], "--merge")) {
        so.merge_policy = vocabulary("save", "--merge", argv[2], MERGE_NAMES, OLD_MERGE_NAMES);
        if (so.merge_policy < 0)
            return SHELL_USAGE;
    } else if (argc != 1) {
        return usage_error("save [--merge report|server_wins|client_wins|properties]");
    }
    int rc = need_ctx();
    if (rc != SHELL_OK)
        return rc;
    if (g.offline)
        return report(TETHER_E_NETWORK, NULL, "--offline: save needs the server (the changes stay pending)");
    so.progress = on_save_progress;
    save_wait w = {0};
    tether_task *task = NULL;
    int st = tether_save_start(g.ctx, &so, on_save, &w, &task);
    if (st != TETHER_OK)
        return api_error(st);
    wait_done(&w.done, task, 0);
    /* on_save printed the report and the error line */
    return w.done && w.status == TETHER_OK ? SHELL_OK : SHELL_FAILED;
}

/* ------------------------------------------------------------ dispatch */

static int cmd_help(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    if (g.json) {
        buf b = {0};
        buf_str(&b, "{\"help\":");
        buf_json_cstr(&b, COMMANDS);
        buf_str(&b, "}");
        json_out(&b);
    } else {
        fputs(COMMANDS, stdout);
    }
    return SHELL_OK;
}

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} COMMAND_TABLE[] = {
    {"help", cmd_help},       {"info", cmd_info},         {"entities", cmd_entities}, {"fields", cmd_fields},
    {"fetch", cmd_fetch},     {"count", cmd_count},       {"watch", cmd_watch},       {"peek", cmd_peek},
    {"get", cmd_get},         {"set", cmd_set},           {"unset", cmd_set},         {"insert", cmd_insert},
    {"delete", cmd_delete},   {"rollback", cmd_rollback}, {"pending", cmd_pending},   {"save", cmd_save},
};

static int run_command(int argc, char **argv)
{
    g_interrupted = 0;
    for (size_t i = 0; i < sizeof COMMAND_TABLE / sizeof COMMAND_TABLE[0]; i++)
        if (!strcmp(argv[0], COMMAND_TABLE[i].name)) {
            int rc = COMMAND_TABLE[i].run(argc, argv);
            fflush(stdout);
            return rc;
        }
    int rc = usage_error("unknown command '%s' (try help)", argv[0]);
    fflush(stdout);
    return rc;
}

/* Splits a line into words as a shell does: whitespace separates; 'single'
 * quotes keep everything; "double" quotes and bare words take \ escapes.
 * Words are written into `line` itself. Returns the count, or -1 with a
 * message for an open quote. */
static int split_words(char *line, char **words, int max, const char **error)
{
    int n = 0;
    char *r = line, *w = line;
    for (;;) {
        while (*r == ' ' || *r == '\t' || *r == '\r' || *r == '\n')
            r++;
        if (!*r)
            return n;
        if (n == max) {
            *error = "too many words";
            return -1;
        }
        words[n++] = w;
        char quote = 0;
        while (*r) {
            char c = *r;
            if (quote == '\'') {
                if (c == '\'')
                    quote = 0;
                else
                    *w++ = c;
                r++;
            } else if (c == '\\' && r[1] && quote != '\'') {
                *w++ = r[1];
                r += 2;
            } else if (quote == '"') {
                if (c == '"')
                    quote = 0;
                else
                    *w++ = c;
                r++;
            } else if (c == '\'' || c == '"') {
                quote = c;
                r++;
            } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
                break;
            } else {
                *w++ = c;
                r++;
            }
        }
        if (quote) {
            *error = quote == '\'' ? "unterminated ' quote" : "unterminated \" quote";
            return -1;
        }
        int more = *r != '\0';
        *w++ = '\0';
        if (!more) /* the last word of a line with no newline: w is past r now, harmlessly */
            return n;
        r++;
        if (w > r) { /* cannot happen: writing never overtakes reading */
            *error = "internal error splitting the line";
            return -1;
        }
    }
}

/* ------------------------------------------------------------ line editing */

/* The history file: $XDG_STATE_HOME/tether/history, else
 * ~/.local/state/tether/history (the XDG base directory rule for state),
 * its folder made if missing. NULL (no history kept) without either. */
static char *history_path(void)
{
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    buf b = {0};
    if (state && state[0] == '/')
        buf_printf(&b, "%s/tether", state);
    else if (home && *home)
        buf_printf(&b, "%s/.local/state/tether", home);
    else
        return NULL;
    for (char *p = b.s + 1;; p++) /* mkdir -p */
        if (*p == '/' || !*p) {
            char c = *p;
            *p = '\0';
            if (mkdir(b.s, 0700) != 0 && errno != EEXIST) {
                free(b.s);
                return NULL;
            }
            *p = c;
            if (!c)
                break;
        }
    buf_str(&b, "/history");
    return buf_take(&b);
}

/* Completion: the candidates for the word being typed, gathered by
 * complete_line, handed out one by one by complete_next. */
static char **g_cands;
static size_t g_ncands;

static void cand_add(const char *prefix, const char *word)
{
    g_cands = xrealloc(g_cands, (g_ncands + 1) * sizeof *g_cands);
    buf b = {0};
    buf_printf(&b, "%s%s", prefix, word);
    g_cands[g_ncands++] = buf_take(&b);
}

static void cand_list(const char *const *words)
{
    for (int i = 0; words[i]; i++)
        cand_add("", words[i]);
}

static void cand_entities(void)
{
    size_t n = 0;
    if (!g.ctx)
        return;
    tether_context_entity_count(g.ctx, &n);
    for (size_t i = 0; i < n; i++) {
        tether_entity *e;
        const char *name;
        if (tether_context_entity_at(g.ctx, i, &e) == TETHER_OK && tether_entity_name(e, &name) == TETHER_OK)
            cand_add("", name);
    }
}

/* The fields of `entity` (nothing if there is none), each after `prefix`. */
static void cand_fields(const char *entity, const char *prefix)
{
    tether_entity *e;
    size_t n = 0;
    if (!g.ctx || !entity || tether_context_entity(g.ctx, entity, &e) != TETHER_OK)
        return;
    tether_entity_attribute_count(e, &n);
    for (size_t i = 0; i < n; i++) {
        const char *name;
        if (tether_entity_attribute_at(e, i, &name, NULL, NULL, NULL) == TETHER_OK)
            cand_add(prefix, name);
    }
}

/* The allowed values of `entity`'s `key` that are plain text. */
static void cand_allowed(const char *entity, const char *key)
{
    tether_entity *e;
    size_t i;
    const char *json = NULL;
    if (!g.ctx || !entity || !key || tether_context_entity(g.ctx, entity, &e) != TETHER_OK ||
        tether_entity_attribute_index(e, key, &i) != TETHER_OK ||
        tether_entity_attribute_allowed(e, i, &json) != TETHER_OK || !json)
        return;
    char *cell = allowed_cell(json);
    for (char *p = cell, *bar; *p; p = bar + 1) {
        bar = strchr(p, '|');
        if (bar)
            *bar = '\0';
        if (*p != '"' && *p != '[' && *p != '{')
            cand_add("", p);
        if (!bar)
            break;
    }
    free(cell);
}

static const char *const ENTITY_COMMANDS[] = {"fields", "fetch", "count", "watch", "peek", "get", "set",
                                              "unset", "insert", "delete", "rollback", NULL};

static int is_one_of(const char *word, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(word, list[i]))
            return 1;
    return 0;
}

/* Gathers the candidates for a word starting at `start` of `line`: the
 * command, its options, then by position entity, id (none), keys; an
 * option's value by the option (--policy, --merge, --fields a,b, --sort -k). */
static void complete_line(const char *line, int start)
{
    static const char *const fetch_opts[] = {"--where", "--arg", "--sort", "--policy", "--fields", "--limit",
                                             "--offset", NULL};
    static const char *const count_opts[] = {"--where", "--arg", "--sort", "--policy", NULL};
    static const char *const watch_opts[] = {"--where", "--arg", "--sort", "--policy", "--fields", "--count",
                                             "--timeout", NULL};
    static const char *const save_opts[] = {"--merge", NULL};
    static const char *const insert_opts[] = {"--id", NULL};
    /* The whole words before this one (a word after ',' or '=' is a part). */
    char *copy = strndup(line, (size_t)start);
    char *words[MAX_WORDS];
    int n = 0;
    for (char *w = strtok(copy, " \t"); w && n < MAX_WORDS; w = strtok(NULL, " \t"))
        words[n++] = w;
    const char *part = NULL; /* "Change," of "--fields Change,Sta", "Status" of "Status=pe" */
    if (start > 0 && line[start - 1] != ' ' && line[start - 1] != '\t' && n > 0)
        part = words[--n];
    const char *cmd = n > 0 ? words[0] : NULL;
    const char *prev = n > 0 ? words[n - 1] : NULL;
    const char *entity = n > 1 && words[1][0] != '-' ? words[1] : NULL;
    if (!cmd) {
        for (size_t i = 0; i < sizeof COMMAND_TABLE / sizeof COMMAND_TABLE[0]; i++)
            cand_add("", COMMAND_TABLE[i].name);
        cand_add("", "quit");
    } else if (!strcmp(prev, "--policy")) {
        cand_list(POLICY_NAMES);
    } else if (!strcmp(prev, "--merge")) {
        cand_list(MERGE_NAMES);
    } else if (!strcmp(prev, "--fields") || !strcmp(prev, "--sort") || !strcmp(prev, "--where")) {
        if (!strcmp(prev, "--sort") && line[start] == '-')
            cand_fields(entity, "-");
        else
            cand_fields(entity, "");
    } else if (part && strchr(part, '=') && !strcmp(cmd, "insert")) {
        char *key = strndup(part, strcspn(part, "="));
        cand_allowed(entity, key);
        free(key);
    } else if (line[start] == '-') {
        const char *const *opts = !strcmp(cmd, "fetch")    ? fetch_opts
                                  : !strcmp(cmd, "count")  ? count_opts
                                  : !strcmp(cmd, "watch")  ? watch_opts
                                  : !strcmp(cmd, "save")   ? save_opts
                                  : !strcmp(cmd, "insert") ? insert_opts
                                                           : NULL;
        if (opts)
            cand_list(opts);
    } else if (is_one_of(cmd, ENTITY_COMMANDS)) {
        if (n == 1)
            cand_entities();
        else if (!strcmp(cmd, "insert"))
            cand_fields(entity, "");
        else if (n >= 3 && (!strcmp(cmd, "peek") || !strcmp(cmd, "get") || ((!strcmp(cmd, "set") ||
                 !strcmp(cmd, "unset")) && n == 3)))
            cand_fields(entity, "");
        else if (n == 4 && !strcmp(cmd, "set"))
            cand_allowed(entity, words[3]);
    }
    free(copy);
}

static char *complete_next(const char *text, int state)
{
    static size_t next;
    if (state == 0)
        next = 0;
    while (next < g_ncands) {
        const char *c = g_cands[next++];
        if (!strncmp(c, text, strlen(text)))
            return xstrdup(c);
    }
    return NULL;
}

static char **complete(const char *text, int start, int end)
{
    (void)end;
    for (size_t i = 0; i < g_ncands; i++)
        free(g_cands[i]);
    g_ncands = 0;
    complete_line(rl_line_buffer, start);
    rl_attempted_completion_over = 1; /* never file names */
    return rl_completion_matches(text, complete_next);
}

/* libedit's reads at the prompt. SIGINT is blocked on the main thread
 * while it edits and let in only inside pselect, so a Ctrl-C can never land
 * between the check of the flag and a read that would then block past it. */
static int read_keystroke(FILE *in)
{
    int fd = fileno(in);
    sigset_t waiting;
    pthread_sigmask(SIG_SETMASK, NULL, &waiting);
    sigdelset(&waiting, SIGINT);
    for (;;) {
        if (g_interrupted)
            return EOF;
        fd_set readable;
        FD_ZERO(&readable);
        FD_SET(fd, &readable);
        if (pselect(fd + 1, &readable, NULL, NULL, NULL, &waiting) < 0) {
            if (errno == EINTR)
                continue;
            return EOF;
        }
        unsigned char key;
        ssize_t n = read(fd, &key, 1);
        if (n == 1)
            return key;
        if (n == 0 || errno != EINTR)
            return EOF;
    }
}

/* One line from the terminal, edited (libedit), or NULL at the end of
 * input; Ctrl-C at the prompt gives an empty line. */
static char *read_edited(const char *history)
{
    sigset_t sigint, before;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    for (;;) {
        g_interrupted = 0;
        pthread_sigmask(SIG_BLOCK, &sigint, &before);
        char *line = readline("tether> ");
        pthread_sigmask(SIG_SETMASK, &before, NULL);
        if (line) {
            if (*line) {
                add_history(line);
                if (history)
                    write_history(history);
            }
            return line;
        }
        if (!g_interrupted)
            return NULL;
        putchar('\n');
    }
}

static int run_stdin(void)
{
    int tty = isatty(STDIN_FILENO);
    int worst = SHELL_OK;
    char *line = NULL;
    size_t cap = 0;
    char *history = NULL;
    if (tty) {
        /* On a terminal the context opens before the first prompt, so that
         * completion knows the entities and fields. */
        if (have_target() && need_ctx() != SHELL_OK)
            worst = SHELL_FAILED;
        rl_readline_name = "tether";
        rl_catch_signals = 0;  /* Ctrl-C is the shell's (read_keystroke), not libedit's */
        rl_getc_function = read_keystroke;
        rl_attempted_completion_function = complete;
        rl_basic_word_break_characters = " \t\n,=";
        history = history_path();
        stifle_history(1000);
        if (history)
            read_history(history);
    }
    for (;;) {
        ssize_t len;
        if (tty) {
            free(line);
            line = read_edited(history);
            if (!line)
                break;
            len = (ssize_t)strlen(line);
        } else {
            errno = 0;
            g_interrupted = 0;
            len = getline(&line, &cap, stdin);
            if (len < 0)
                break;
        }
        if (memchr(line, '\0', (size_t)len)) {
            worst = report(0, "usage", "a NUL byte in the input line");
            continue;
        }
        char *words[MAX_WORDS];
        const char *error = NULL;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '#')
            continue;
        int n = split_words(line, words, MAX_WORDS, &error);
        if (n < 0) {
            report(0, "usage", error);
            worst = SHELL_FAILED;
            continue;
        }
        if (n == 0)
            continue;
        if (!strcmp(words[0], "quit") || !strcmp(words[0], "exit") || !strcmp(words[0], ".quit"))
            break;
        if (run_command(n, words) != SHELL_OK)
            worst = SHELL_FAILED;
    }
    if (tty)
        putchar('\n');
    free(line);
    free(history);
    for (size_t i = 0; i < g_ncands; i++)
        free(g_cands[i]);
    free(g_cands);
    return worst;
}

/* --name VALUE or --name=VALUE; advances *i. NULL if argv[*i] is not --name. */
static const char *option_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n))
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n])
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

/* An environment variable's value; NULL when unset or empty. */
static const char *env_value(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int main(int argc, char **argv)
{
    const char *user = env_value("TETHER_USER");
    g.server = env_value("TETHER_SERVER");
    g.bucket = env_value("TETHER_BUCKET");
    g.store = env_value("TETHER_STORE");
    g.postgres = env_value("TETHER_POSTGRES");
    /* Options beat the environment: --server or --bucket without --postgres
     * chooses Kinto even with $TETHER_POSTGRES set. */
    int kinto_given = 0, postgres_given = 0;
    /* --json first, wherever it is among the options: their usage errors
     * are documents too. */
    static const char *const with_value[] = {"--server", "--bucket", "--store", "--user", "--timeout",
                                             "--sync-interval", "--postgres", "--schema", NULL};
    for (int j = 1; j < argc && argv[j][0] == '-' && strcmp(argv[j], "--"); j++) {
        if (!strcmp(argv[j], "--json"))
            g.json = 1;
        for (int k = 0; with_value[k]; k++)
            if (!strcmp(argv[j], with_value[k])) {
                j++; /* skip its value */
                break;
            }
    }
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        const char *v;
        int missing = 0;
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE, stdout);
            putchar('\n');
            fputs(COMMANDS, stdout);
            return SHELL_OK;
        } else if (!strcmp(argv[i], "--version")) {
            printf("tether %s (library %s)\n", TETHER_VERSION, tether_version());
            return SHELL_OK;
        } else if (!strcmp(argv[i], "--json")) {
            g.json = 1;
        } else if (!strcmp(argv[i], "--progress")) {
            g.progress = 1;
        } else if (!strcmp(argv[i], "--exclusive")) {
            g.exclusive = 1;
        } else if (!strcmp(argv[i], "--offline")) {
            g.offline = 1;
        } else if ((v = option_value(argc, argv, &i, "--server", &missing))) {
            g.server = v;
            kinto_given = 1;
        } else if ((v = option_value(argc, argv, &i, "--bucket", &missing))) {
            g.bucket = v;
            kinto_given = 1;
        } else if ((v = option_value(argc, argv, &i, "--postgres", &missing))) {
            g.postgres = v;
            postgres_given = 1;
        } else if ((v = option_value(argc, argv, &i, "--schema", &missing))) {
            g.schema = v;
        } else if ((v = option_value(argc, argv, &i, "--store", &missing))) {
            g.store = v;
        } else if ((v = option_value(argc, argv, &i, "--user", &missing))) {
            user = v;
        } else if ((v = option_value(argc, argv, &i, "--sync-interval", &missing))) {
            char *end;
            errno = 0;
            g.sync_interval_ms = strtoll(v, &end, 10);
            if (!*v || *end || errno || g.sync_interval_ms < 0) {
                usage_error("--sync-interval: '%s' is not a number of milliseconds, 0 or more", v);
                fputs(USAGE, stderr);
                return SHELL_USAGE;
            }
        } else if ((v = option_value(argc, argv, &i, "--timeout", &missing))) {
            char *end;
            errno = 0;
            g.timeout_ms = strtoll(v, &end, 10);
            if (!*v || *end || errno || g.timeout_ms <= 0) {
                usage_error("--timeout: '%s' is not a number of milliseconds", v);
                fputs(USAGE, stderr);
                return SHELL_USAGE;
            }
        } else {
            usage_error("%s '%s'", missing ? "a value is missing after" : "unknown option", argv[i]);
            fputs(USAGE, stderr);
            return SHELL_USAGE;
        }
    }
    if (kinto_given && !postgres_given)
        g.postgres = NULL;
    if (g.schema && !g.postgres) {
        usage_error("--schema is for --postgres (a Kinto context's entities come from --bucket)");
        fputs(USAGE, stderr);
        return SHELL_USAGE;
    }
    if (user && *user) {
        const char *colon = strchr(user, ':');
        if (!colon)
            return usage_error("--user: NAME:PASSWORD, not '%s'", user);
        g.username = strndup(user, (size_t)(colon - user));
        g.password = xstrdup(colon + 1);
        if (!g.username)
            return SHELL_FAILED;
    }

    /* Ctrl-C stops what is waiting (a watch, a fetch), not the shell. No
     * SA_RESTART, so that a read at the prompt returns. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    g_main_thread = pthread_self();
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);

    int rc = i < argc ? run_command(argc - i, argv + i) : run_stdin();

    if (g.ctx && tether_context_close(g.ctx) != TETHER_OK)
        rc = api_error(TETHER_E_ERROR);
    free(g.username);
    free(g.password);
    return rc;
}
