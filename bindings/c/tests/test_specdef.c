/* test_specdef.c — Perforce spec definitions from C: parsing real ones into
 * fields as Perforce's decoder reads them (AutoId codes, index codes, `z`,
 * a single ';' at the end), what Perforce refuses refused as
 * TETHER_E_INVALID with the field named, the spec of specs (a jobspec form)
 * into a specdef, and the tether_specdef handle's lifetime (NULL, freed and
 * forged handles give TETHER_E_HANDLE). Needs no server. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdlib.h>

/* From p4python's SpecMgr.cpp, 2026.1 release (github.com/perforce/p4python,
 * commit 9cec853): the spec definitions Perforce's Python API keeps for
 * working offline, as servers send them in tagged output. */
static const char *CLIENT_SPECDEF =
    "Client;code:301;rq;ro;seq:1;len:32;;"
    "Update;code:302;type:date;ro;seq:2;fmt:L;len:20;;"
    "Access;code:303;type:date;ro;seq:4;fmt:L;len:20;;"
    "Owner;code:304;seq:3;fmt:R;len:32;;"
    "Host;code:305;seq:5;fmt:R;len:32;;"
    "Description;code:306;type:text;len:128;;"
    "Root;code:307;rq;type:line;len:64;;"
    "AltRoots;code:308;type:llist;len:64;;"
    "Options;code:309;type:line;len:64;val:"
    "noallwrite/allwrite,noclobber/clobber,nocompress/compress,"
    "unlocked/locked,nomodtime/modtime,normdir/rmdir,noaltsync/altsync;;"
    "SubmitOptions;code:313;type:select;fmt:L;len:25;val:"
    "submitunchanged/submitunchanged+reopen/revertunchanged/"
    "revertunchanged+reopen/leaveunchanged/leaveunchanged+reopen;;"
    "LineEnd;code:310;type:select;fmt:L;len:12;val:local/unix/mac/win/share;;"
    "Stream;code:314;type:line;len:64;;"
    "StreamAtChange;code:316;type:line;len:64;;"
    "ServerID;code:315;type:line;ro;len:64;;"
    "Type;code:318;type:select;len:10;val:writeable/readonly/graph/partitioned/partitioned-jnl;;"
    "Backup;code:319;type:select;len:10;val:enable/disable;;"
    "View;code:311;fmt:C;type:wlist;words:2;len:64;;"
    "ChangeView;code:317;type:llist;len:64;;"
    "LimitView;code:320;fmt:C;type:llist;len:64;;";

/* Same source. */
static const char *JOB_SPECDEF =
    "Job;code:101;rq;len:32;;"
    "Status;code:102;type:select;rq;len:10;pre:open;val:open/suspended/closed;;"
    "User;code:103;rq;len:32;pre:$user;;"
    "Date;code:104;type:date;ro;len:20;pre:$now;;"
    "Description;code:105;type:text;rq;pre:$blank;;";

static int field_at(tether_specdef *sd, size_t i, tether_specdef_field *f)
{
    memset(f, 0x5a, sizeof *f);
    return tether_specdef_field_at(sd, i, f);
}

static void test_client(void)
{
    tether_specdef *sd = NULL;
    tether_specdef_field f;
    size_t n = 0;
    tu_section("client");
    if (!CHECK_OK(tether_specdef_parse(CLIENT_SPECDEF, &sd)))
        return;
    CHECK_STR(tether_errmsg(), "");
    CHECK_OK(tether_specdef_field_count(sd, &n));
    CHECK_INT(n, 19);

    if (CHECK_OK(field_at(sd, 0, &f))) {
        CHECK_STR(f.tag, "Client");
        CHECK_INT(f.code, 301);
        CHECK_STR(f.type, "word"); /* no type: a word */
        CHECK_STR(f.opt, "key");   /* rq;ro */
        CHECK_INT(f.key, 1);
        CHECK_INT(f.len, 32);
        CHECK_INT(f.seq, 1);
        CHECK_INT(f.words, 1);    /* not given: 1 */
        CHECK_INT(f.maxwords, 0); /* not given: 0 */
        CHECK(f.fmt == NULL);
        CHECK(f.open == NULL);
        CHECK(f.pre == NULL);
        CHECK(f.val == NULL);
        CHECK_INT(f.val_count, 0);
    }
    if (CHECK_OK(field_at(sd, 1, &f))) {
        CHECK_STR(f.tag, "Update");
        CHECK_INT(f.code, 302);
        CHECK_STR(f.type, "date");
        CHECK_STR(f.opt, "always"); /* ro */
        CHECK_INT(f.key, 0);
        CHECK_STR(f.fmt, "L");
    }
    if (CHECK_OK(field_at(sd, 6, &f))) {
        CHECK_STR(f.tag, "Root");
        CHECK_INT(f.code, 307);
        CHECK_STR(f.type, "line");
        CHECK_STR(f.opt, "required"); /* rq */
    }
    if (CHECK_OK(field_at(sd, 10, &f))) {
        CHECK_STR(f.tag, "LineEnd");
        CHECK_INT(f.code, 310);
        CHECK_STR(f.type, "select");
        CHECK_STR(f.val, "local/unix/mac/win/share");
        CHECK_INT(f.val_count, 5);
    }
    if (CHECK_OK(field_at(sd, 16, &f))) {
        CHECK_STR(f.tag, "View");
        CHECK_INT(f.code, 311);
        CHECK_STR(f.type, "wlist");
        CHECK_INT(f.words, 2);
        CHECK_STR(f.fmt, "C");
        CHECK_STR(f.opt, "optional");
    }
    CHECK_STATUS(field_at(sd, 19, &f), TETHER_E_NOT_FOUND);
    CHECK_STATUS(field_at(sd, (size_t)-1, &f), TETHER_E_NOT_FOUND);
    CHECK_STATUS(tether_specdef_field_at(sd, 0, NULL), TETHER_E_MISUSE);
    CHECK_STATUS(tether_specdef_field_count(sd, NULL), TETHER_E_MISUSE);
    CHECK_OK(tether_specdef_free(sd));
}

static void test_job(void)
{
    tether_specdef *sd = NULL;
    tether_specdef_field f;
    size_t n = 0, i;
    static const int codes[] = {101, 102, 103, 104, 105};
    tu_section("job");
    if (!CHECK_OK(tether_specdef_parse(JOB_SPECDEF, &sd)))
        return;
    CHECK_OK(tether_specdef_field_count(sd, &n));
    CHECK_INT(n, 5);
    for (i = 0; i < n && i < 5; i++)
        if (CHECK_OK(field_at(sd, i, &f)))
            CHECK_INT(f.code, codes[i]);
    /* A job has no key field: its name, 101, is the first required one. */
    if (CHECK_OK(field_at(sd, 0, &f))) {
        CHECK_STR(f.tag, "Job");
        CHECK_STR(f.opt, "required");
        CHECK_INT(f.key, 1);
    }
    if (CHECK_OK(field_at(sd, 1, &f))) {
        CHECK_STR(f.pre, "open");
        CHECK_STR(f.val, "open/suspended/closed");
        CHECK_INT(f.val_count, 3);
        CHECK_INT(f.key, 0);
    }
    if (CHECK_OK(field_at(sd, 2, &f)))
        CHECK_STR(f.pre, "$user");
    CHECK_OK(tether_specdef_free(sd));
}

/* `text` is refused as TETHER_E_INVALID and the message holds `needle`. */
static void check_invalid(const char *text, const char *needle)
{
    tether_specdef *sd = (tether_specdef *)0;
    if (CHECK_STATUS(tether_specdef_parse(text, &sd), TETHER_E_INVALID)) {
        char detail[400];
        snprintf(detail, sizeof detail, "message \"%s\" names \"%s\"", tether_errmsg(), needle);
        tu_check(strstr(tether_errmsg(), needle) != NULL, __FILE__, __LINE__, "message", detail);
    }
    CHECK(sd == NULL); /* out is written only on success */
}

static void test_malformed(void)
{
    tu_section("malformed");
    check_invalid("", "empty");
    check_invalid(";;;;", "no fields");
    check_invalid(";code:1;;", "no tag");
    check_invalid("Client;code:301;type:wordy;;", "'Client': unknown type 'wordy'");
    check_invalid("Client;code:301;opt:sometimes;;", "'Client': unknown opt 'sometimes'");
    check_invalid("Owner;code:704;open:sometimes;;", "'Owner': unknown open 'sometimes'");
    check_invalid("Client;code:301;;Client;code:302;;", "repeats the tag 'Client'");
    check_invalid("Client\xff;code:1;;", "UTF-8");
    {
        tether_specdef *sd = NULL;
        CHECK_STATUS(tether_specdef_parse(NULL, &sd), TETHER_E_MISUSE);
        CHECK_STATUS(tether_specdef_parse(JOB_SPECDEF, NULL), TETHER_E_MISUSE);
    }
}

/* Read as Perforce's decoder reads them: P4Perl 2026.1's group (github.com/
 * perforce/p4perl, 2b290b2: `code:NNN` is 0, shared; an unknown fmt
 * ignored), a 2012.1 server's triggers (one ';' at the end), P4Win's 97.3
 * client (no codes: each field its index), and the `z` of the typemap. */
static void test_as_perforce_reads_them(void)
{
    tether_specdef *sd = NULL;
    tether_specdef_field f;
    size_t n = 0;
    const char *text = NULL;
    tu_section("as Perforce reads them");
    if (CHECK_OK(tether_specdef_parse("Group;code:401;rq;ro;len:32;;"
                                      "Description;code:NNN;type:text;fmt:L:len:128;;"
                                      "MaxResults;code:402;type:word;len:12;;"
                                      "MaxMemory;code:NNN;type:word;len:12;;", &sd))) {
        if (CHECK_OK(field_at(sd, 1, &f))) {
            CHECK_INT(f.code, 0);
            CHECK(f.fmt == NULL);
            CHECK_INT(f.len, 0);
        }
        if (CHECK_OK(field_at(sd, 3, &f)))
            CHECK_INT(f.code, 0);
        CHECK_OK(tether_specdef_free(sd));
    }
    if (CHECK_OK(tether_specdef_parse("Triggers;code:551;type:wlist;words:4;len:64;opt:default;", &sd))) {
        CHECK_OK(tether_specdef_field_count(sd, &n));
        CHECK_INT(n, 1);
        if (CHECK_OK(field_at(sd, 0, &f))) {
            CHECK_STR(f.opt, "default");
            CHECK_INT(f.words, 4);
            CHECK_INT(f.key, 1);
        }
        if (CHECK_OK(tether_specdef_text(sd, &text)))
            CHECK_STR(text, "Triggers;code:551;type:wlist;opt:default;words:4;len:64;;");
        CHECK_OK(tether_specdef_free(sd));
    }
    if (CHECK_OK(tether_specdef_parse("Client;rq;ro;len:32;;Date;type:line;ro;len:20;;Owner;len:32;;", &sd))) {
        if (CHECK_OK(field_at(sd, 0, &f))) {
            CHECK_INT(f.code, 0);
            CHECK_INT(f.key, 1);
        }
        if (CHECK_OK(field_at(sd, 2, &f)))
            CHECK_INT(f.code, 2);
        if (CHECK_OK(tether_specdef_text(sd, &text)))
            CHECK_STR(text, "Client;rq;ro;len:32;;Date;type:line;opt:always;ro;len:20;;Owner;len:32;;");
        CHECK_OK(tether_specdef_free(sd));
    }
    if (CHECK_OK(tether_specdef_parse("TypeMap;code:601;fmt:C;type:wlist;words:2;len:64;opt:default;z;;;;\n", &sd))) {
        CHECK_OK(tether_specdef_field_count(sd, &n));
        CHECK_INT(n, 1);
        if (CHECK_OK(field_at(sd, 0, &f))) {
            CHECK_STR(f.opt, "empty");
            CHECK_INT(f.key, 1);
        }
        CHECK_OK(tether_specdef_free(sd));
    }
    CHECK_STATUS(tether_specdef_text(NULL, &text), TETHER_E_HANDLE);
}

/* The spec of specs: a jobspec form, as `p4 -ztag -Mj jobspec -o` gives it,
 * with a field an administrator added with NNN for its code. */
static void test_from_form(void)
{
    tether_specdef *sd = NULL;
    tether_specdef_field f;
    size_t n = 0;
    const char *text = NULL;
    tu_section("from a form");
    if (CHECK_OK(tether_specdef_from_form(
            "{\"Fields0\": \"101 Job word 32 required\", \"Fields1\": \"102 Status select 10 required\","
            " \"Fields2\": \"NNN Severity select 10 optional\","
            " \"Values0\": \"Status open/closed\", \"Values1\": \"Severity A/B/C\","
            " \"Presets0\": \"Status open\", \"Formats0\": \"Severity 3 R\","
            " \"Comments\": \"# A Perforce Job Specification.\\n\"}", &sd))) {
        CHECK_OK(tether_specdef_field_count(sd, &n));
        CHECK_INT(n, 3);
        if (CHECK_OK(field_at(sd, 0, &f))) {
            CHECK_STR(f.tag, "Job");
            CHECK_INT(f.key, 1);
        }
        if (CHECK_OK(field_at(sd, 2, &f))) {
            CHECK_STR(f.tag, "Severity");
            CHECK_INT(f.code, 0);
            CHECK_STR(f.val, "A/B/C");
            CHECK_STR(f.fmt, "R");
            CHECK_INT(f.seq, 3);
        }
        if (CHECK_OK(tether_specdef_text(sd, &text)))
            CHECK_STR(text, "Job;code:101;opt:required;rq;len:32;;"
                            "Status;code:102;type:select;opt:required;rq;len:10;pre:open;val:open/closed;;"
                            "Severity;code:0;type:select;fmt:R;seq:3;len:10;val:A/B/C;;");
        CHECK_OK(tether_specdef_free(sd));
    }
    CHECK_STATUS(tether_specdef_from_form("{\"Fields0\": \"101 Job wordy 32 required\"}", &sd), TETHER_E_INVALID);
    CHECK(strstr(tether_errmsg(), "unknown type 'wordy'") != NULL);
    CHECK_STATUS(tether_specdef_from_form("[]", &sd), TETHER_E_INVALID);
    CHECK_STATUS(tether_specdef_from_form("{\"Comments\": \"\"}", &sd), TETHER_E_INVALID);
    CHECK(strstr(tether_errmsg(), "no Fields") != NULL);
    CHECK_STATUS(tether_specdef_from_form(NULL, &sd), TETHER_E_MISUSE);
    CHECK_STATUS(tether_specdef_from_form("{}", NULL), TETHER_E_MISUSE);
}

static void test_handles(void)
{
    tether_specdef *sd = NULL;
    tether_specdef_field f;
    size_t n = 0;
    tu_section("handles");
    CHECK_OK(tether_specdef_free(NULL));
    CHECK_STATUS(tether_specdef_field_count(NULL, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_specdef_field_at(NULL, 0, &f), TETHER_E_HANDLE);
    /* Forged handles: aligned and not. */
    CHECK_STATUS(tether_specdef_field_count((tether_specdef *)(uintptr_t)0x7ff0, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_specdef_field_count((tether_specdef *)(uintptr_t)0x1235, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_specdef_free((tether_specdef *)(uintptr_t)0xdead0), TETHER_E_HANDLE);
    if (!CHECK_OK(tether_specdef_parse(JOB_SPECDEF, &sd)))
        return;
    CHECK_OK(tether_specdef_free(sd));
    /* Freed: dead, and freeing again is an error, not a crash. */
    CHECK_STATUS(tether_specdef_field_count(sd, &n), TETHER_E_HANDLE);
    CHECK_STATUS(tether_specdef_field_at(sd, 0, &f), TETHER_E_HANDLE);
    CHECK_STATUS(tether_specdef_free(sd), TETHER_E_HANDLE);
    {
        /* Handle values are not reused. */
        tether_specdef *again = NULL;
        if (CHECK_OK(tether_specdef_parse(JOB_SPECDEF, &again))) {
            CHECK(again != sd);
            CHECK_OK(tether_specdef_free(again));
        }
    }
}

static void *parse_many(void *arg)
{
    int i, failures = 0;
    (void)arg;
    for (i = 0; i < 300; i++) {
        tether_specdef *sd = NULL;
        tether_specdef_field f;
        if (tether_specdef_parse(i % 2 ? CLIENT_SPECDEF : JOB_SPECDEF, &sd) != TETHER_OK ||
            tether_specdef_field_at(sd, 0, &f) != TETHER_OK ||
            strcmp(f.tag, i % 2 ? "Client" : "Job") != 0 || tether_specdef_free(sd) != TETHER_OK)
            failures++;
    }
    return (void *)(intptr_t)failures;
}

static void test_threads(void)
{
    pthread_t threads[4];
    int i;
    tu_section("threads");
    for (i = 0; i < 4; i++)
        CHECK_INT(pthread_create(&threads[i], NULL, parse_many, NULL), 0);
    for (i = 0; i < 4; i++) {
        void *failures = NULL;
        pthread_join(threads[i], &failures);
        CHECK_INT((intptr_t)failures, 0);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_init(argv[0]);
    test_client();
    test_job();
    test_malformed();
    test_as_perforce_reads_them();
    test_from_form();
    test_handles();
    test_threads();
    return tu_finish();
}
