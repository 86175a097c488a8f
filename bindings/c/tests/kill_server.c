/* kill_server.c — see kill_server.h. */
#define _POSIX_C_SOURCE 200809L

#include "kill_server.h"

#include <stdlib.h>
#include <string.h>

static int postgres;
static const char *conninfo;
static char space[64]; /* the Kinto bucket, or the PostgreSQL schema */

const char *ks_name(void) { return postgres ? "PostgreSQL" : "Kinto"; }
int ks_is_postgres(void) { return postgres; }

/* ------------------------------------------------------------ PostgreSQL */

/* `value` as a SQL literal ('' doubled) into buf. */
static const char *literal(const char *value, char *buf, size_t size)
{
    size_t j = 0;
    if (size < 3)
        return "''";
    buf[j++] = '\'';
    for (const char *p = value; *p && j + 3 < size; p++) {
        if (*p == '\'')
            buf[j++] = '\'';
        buf[j++] = *p;
    }
    buf[j++] = '\'';
    buf[j] = '\0';
    return buf;
}

/* ------------------------------------------------------------ both */

int ks_init(void)
{
    const char *which = getenv("TETHER_KILL_SERVER");
    postgres = which && strcmp(which, "postgres") == 0;
    if (!postgres) {
        tu_unique(space, sizeof space, "c-kill");
        return CHECK(tu_put_bucket(space));
    }
    conninfo = getenv("TETHER_PG_CONNINFO");
    if (!CHECK(conninfo && *conninfo)) {
        printf("TETHER_KILL_SERVER=postgres needs TETHER_PG_CONNINFO (scripts/with-postgres sets it)\n");
        return 0;
    }
    tu_unique(space, sizeof space, "c_kill");
    for (char *p = space; *p; p++)
        if (*p == '-')
            *p = '_';
    {
        char sql[256];
        snprintf(sql, sizeof sql, "CREATE SCHEMA \"%s\";", space);
        return CHECK(tu_psql(conninfo, sql, NULL));
    }
}

tether_context *ks_open(const char *store)
{
    tether_context_options o;
    tether_context *ctx = NULL;
    if (!postgres) {
        tether_kinto_options k;
        tu_options(&o, &k, tu_url(), space, store, TETHER_DELIVER_THREAD, 20000);
        return tether_context_open_kinto(&o, &k, &ctx) == TETHER_OK ? ctx : NULL;
    }
    tether_postgres_options pg;
    tether_context_options_init(&o, TETHER_CONTEXT_OPTIONS_VERSION);
    tether_postgres_options_init(&pg, TETHER_POSTGRES_OPTIONS_VERSION);
    o.store_path = store;
    o.delivery = TETHER_DELIVER_THREAD;
    o.timeout_ms = 20000;
    pg.conninfo = conninfo;
    pg.schema = space;
    return tether_context_open_postgres(&o, &pg, &ctx) == TETHER_OK ? ctx : NULL;
}

int ks_make(const char *collection, const char *const *ids, int count)
{
    if (!postgres) {
        static char data[4096][48];
        const char *datas[4096];
        if (count > 4096)
            return 0;
        for (int i = 0; i < count; i++) {
            snprintf(data[i], sizeof data[i], "{\"N\": %d, \"Tag\": \"seed\"}", i);
            datas[i] = data[i];
        }
        return tu_put_collection(space, collection, "{\"type\": \"object\", \"properties\": {"
                                 "\"N\": {\"type\": \"integer\"}, \"Tag\": {\"type\": \"string\"}}}") &&
               tu_put_records(space, collection, ids, datas, count);
    }
    size_t size = 256 + (size_t)count * 80, used;
    char *sql = malloc(size), id[112];
    int ok;
    if (!sql)
        return 0;
    used = (size_t)snprintf(sql, size, "CREATE TABLE \"%s\".\"%s\" (id text PRIMARY KEY, \"N\" bigint, \"Tag\" text);\n"
                            "INSERT INTO \"%s\".\"%s\" (id, \"N\", \"Tag\") VALUES ", space, collection, space, collection);
    for (int i = 0; i < count; i++)
        used += (size_t)snprintf(sql + used, size - used, "%s(%s, %d, 'seed')", i ? ", " : "",
                                 literal(ids[i], id, sizeof id), i);
    snprintf(sql + used, size - used, ";");
    ok = tu_psql(conninfo, sql, NULL);
    free(sql);
    return ok;
}

/* ks_read_all's copy: lines "id<TAB>json", and the collection it is of. */
static char *copy_text;
static char copy_of[64];

int ks_read_all(const char *collection)
{
    char sql[512];
    if (!postgres)
        return 1;
    free(copy_text);
    copy_text = NULL;
    snprintf(copy_of, sizeof copy_of, "%s", collection);
    snprintf(sql, sizeof sql, "SELECT id || E'\\t' || json_strip_nulls(row_to_json(t)) FROM \"%s\".\"%s\" t;", space,
             collection);
    return tu_psql(conninfo, sql, &copy_text);
}

long ks_record(const char *collection, const char *id, char **body)
{
    *body = NULL;
    if (!postgres) {
        char path[640];
        snprintf(path, sizeof path, "/buckets/%s/collections/%.31s/records/%.47s", space, collection, id);
        return tu_http("GET", path, NULL, body);
    }
    if (!copy_text || strcmp(copy_of, collection) != 0)
        return -1; /* ks_read_all first */
    size_t length = strlen(id);
    for (const char *line = copy_text; *line;) {
        const char *end = strchr(line, '\n');
        if (!end)
            end = line + strlen(line);
        if ((size_t)(end - line) > length && strncmp(line, id, length) == 0 && line[length] == '\t') {
            *body = strndup(line + length + 1, (size_t)(end - line) - length - 1);
            return *body ? 200 : -1;
        }
        line = *end ? end + 1 : end;
    }
    return 404;
}

int ks_ids(const char *collection, char (*ids)[48], int capacity)
{
    int count = 0;
    if (!postgres) {
        char path[512], last[48] = "";
        int page = 1;
        while (page > 0) {
            char *body = NULL;
            const char *p;
            snprintf(path, sizeof path, "/buckets/%s/collections/%s/records?_sort=id&_fields=id%s%s", space,
                     collection, last[0] ? "&gt_id=" : "", last);
            if (tu_http("GET", path, NULL, &body) != 200 || !body) {
                free(body);
                return -1;
            }
            page = 0;
            for (p = body; (p = strstr(p, "\"id\":\"")) != NULL;) {
                const char *end;
                p += 6;
                end = strchr(p, '"');
                if (!end || end - p >= 48)
                    break;
                if (count < capacity)
                    snprintf(ids[count], 48, "%.*s", (int)(end - p), p);
                snprintf(last, sizeof last, "%.*s", (int)(end - p), p);
                count++;
                page++;
            }
            free(body);
        }
        return count;
    }
    char sql[256], *out = NULL, *line, *save = NULL;
    snprintf(sql, sizeof sql, "SELECT id FROM \"%s\".\"%s\" ORDER BY id;", space, collection);
    if (!tu_psql(conninfo, sql, &out))
        return -1;
    for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (count < capacity)
            snprintf(ids[count], 48, "%s", line);
        count++;
    }
    free(out);
    return count;
}

int ks_tagged_ns(const char *collection, const char *tag, int *ns, int capacity)
{
    int count = 0;
    if (!postgres) {
        char path[512];
        /* Page by page in N order (the server's pages are short). */
        for (int last = -1, page = 1; page > 0;) {
            char *body = NULL;
            snprintf(path, sizeof path, "/buckets/%s/collections/%s/records?Tag=%%22%s%%22&_sort=N&gt_N=%d", space,
                     collection, tag, last);
            if (tu_http("GET", path, NULL, &body) != 200 || !body) {
                free(body);
                return -1;
            }
            page = 0;
            for (const char *p = body; (p = strstr(p, "\"N\":")) != NULL;) {
                int n = atoi(p + 4);
                p += 4;
                if (count < capacity)
                    ns[count] = n;
                count++;
                page++;
                last = n > last ? n : last;
            }
            free(body);
        }
        return count;
    }
    char sql[512], quoted[112], *out = NULL, *line, *save = NULL;
    snprintf(sql, sizeof sql, "SELECT coalesce(\"N\", -1) FROM \"%s\".\"%s\" WHERE \"Tag\" = %s ORDER BY \"N\";",
             space, collection, literal(tag, quoted, sizeof quoted));
    if (!tu_psql(conninfo, sql, &out))
        return -1;
    for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (count < capacity)
            ns[count] = atoi(line);
        count++;
    }
    free(out);
    return count;
}

void ks_finish(void)
{
    free(copy_text);
    copy_text = NULL;
    if (!postgres) {
        /* Its thousands of records (and their permissions, which Kinto's
         * memory backend scans for every /permissions request a context's
         * open makes) would slow every program after this one. */
        char path[160];
        snprintf(path, sizeof path, "/buckets/%s", space);
        CHECK_INT(tu_http("DELETE", path, NULL, NULL), 200);
        return;
    }
    char sql[128];
    snprintf(sql, sizeof sql, "DROP SCHEMA \"%s\" CASCADE;", space);
    CHECK(tu_psql(conninfo, sql, NULL));
}
