/*
 * tether.h — the C interface of Tether, an embeddable object-graph cache for
 * remote record servers.
 *
 * This header is the specification. Every function says what it does, who owns
 * what it hands back, and from which threads it may be called.
 *
 * Conventions
 * -----------
 * - Functions return a status: TETHER_OK (0) on success, a negative TETHER_E_*
 *   code on failure. Codes are stable and never reused. After a failure,
 *   tether_errmsg() gives a message for it on the calling thread.
 * - Results come back through a trailing `out` parameter, written only on
 *   success.
 * - Handles are opaque. A handle that is NULL, closed, freed, or of the
 *   wrong kind is reported as TETHER_E_HANDLE; it never crashes the host.
 *   Handle values are never reused within a process.
 * - Strings passed in are NUL-terminated UTF-8; invalid UTF-8 is
 *   TETHER_E_INVALID. Strings handed out are UTF-8 and either *borrowed*
 *   (owned by the library; the doc says how long they live) or *owned* (the
 *   caller frees them with the function the doc names).
 * - Option structs start with a `version` field and only grow at the end. Fill
 *   one with its `_init` function, then set the fields you need.
 * - Callbacks take a trailing `void *userdata`. Every asynchronous request ends
 *   in exactly one final callback (success, error or TETHER_E_CANCELLED), so
 *   the host can always free its userdata there. A context never runs two of
 *   its callbacks at the same time.
 * - Unless a function says otherwise, it may be called from any thread,
 *   including from inside a callback.
 * - Names are tether_<noun>_<verb>, and a getter is tether_<noun>_<property>
 *   with no get_ (tether_request_kind, tether_entity_name): `get` is the
 *   object's read that refreshes (tether_object_get), never a prefix. Where a
 *   getter's name would also be its value's type, the type takes libgit2's
 *   `_t` (tether_request_kind_t).
 * - One verb per way a thing ends:
 *     _free    gives back what the caller owns: a handle (results, specdef),
 *              one reference to an object (each tether_context_object,
 *              tether_object_retain... needs one tether_object_free), or
 *              the memory a tether_value holds. After it the handle is dead;
 *              NULL is a no-op.
 *     _cancel  ends what the library owns and calls back (a task, an
 *              observer): exactly one final TETHER_E_CANCELLED callback
 *              follows, after which the library frees it.
 *     _close   ends a context and every handle that came from it.
 *     _complete  the host's answer to a request, which ends it.
 *   tether_local_store_drop drops data, not a handle. The one callback the
 *   library calls for the host to free its own userdata is
 *   tether_connection.release.
 * - The generic API speaks of "the server": its version of a record (an
 *   integer that grows with each change), its id, its record types
 *   ("entities"). What these are for Kinto is said once, in the Kinto
 *   section.
 *
 * Ownership at a glance
 * ---------------------
 *   handle            comes from                         given back by
 *   tether_context    tether_context_open_kinto,         tether_context_close
 *                     tether_context_open_postgres,
 *                     tether_context_open_host,
 *                     tether_context_open_sibling
 *   tether_object     tether_context_object,             tether_object_free (one
 *                     tether_object_retain...              per reference)
 *   tether_results    a fetch callback,                  tether_results_free
 *                     tether_context_changes
 *   tether_task       tether_fetch_start,                the library, after its FINAL
 *                     tether_save_start                    callback returns
 *   tether_observer   tether_object_observe,             the library, after its final
 *                     tether_context_observe_online        (TETHER_E_CANCELLED) callback;
 *                                                          tether_observer_cancel asks it
 *   tether_entity     the context's model                the context, when it closes
 *   tether_value      tether_object_peek/get...          tether_value_free (what it holds;
 *                                                          the struct is the caller's)
 *   tether_request    a host connection's request        tether_request_complete (once;
 *                       callback                           close ends the rest)
 *   tether_specdef    tether_specdef_parse or            tether_specdef_free
 *                       tether_specdef_from_form
 * Closing a context frees every handle that came from it: afterwards they
 * are dead (TETHER_E_HANDLE), and freeing one is harmless.
 *
 * Changes in 0.3 (every rename old -> new; CHANGES.md says more)
 * ---------------------------------------------------------------
 *   tether_context_open(opts, out)     -> tether_context_open_kinto(opts, kinto, out):
 *                                         Kinto's server_url, bucket, username and
 *                                         password moved from tether_context_options
 *                                         (now version 5; earlier versions refused)
 *                                         to tether_kinto_options (new, with
 *                                         tether_kinto_options_init)
 *   tether_object_release              -> tether_object_free
 *   tether_results_release             -> tether_results_free
 *   tether_value_clear                 -> tether_value_free
 *   tether_observer_remove             -> tether_observer_cancel
 *   tether_request_get_kind            -> tether_request_kind
 *   tether_request_kind (enum type)    -> tether_request_kind_t
 *   tether_live_count                  -> tether_debug_count
 *   tether_live (enum type)            -> tether_debug_counter
 *   TETHER_LIVE_<X>                    -> TETHER_DEBUG_<X> (all nine counters)
 *   tether_request_add_specdef and tether_specdef moved to the Perforce
 *   section; nothing else changed meaning.
 */
#ifndef TETHER_H
#define TETHER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TETHER_API __attribute__((visibility("default")))
#else
#define TETHER_API
#endif

/* ---------------------------------------------------------------- version */

#define TETHER_VERSION_MAJOR 0
#define TETHER_VERSION_MINOR 3
#define TETHER_VERSION_PATCH 0
#define TETHER_VERSION "0.3.0"
/* MAJOR * 1000000 + MINOR * 1000 + PATCH */
#define TETHER_VERSION_NUMBER 3000

/* The version of the library loaded at run time, as TETHER_VERSION. Static
 * string; never NULL. */
TETHER_API const char *tether_version(void);
/* As TETHER_VERSION_NUMBER, for the library loaded at run time. */
TETHER_API int tether_version_number(void);

/* ---------------------------------------------------------------- status */

#define TETHER_OK               0
#define TETHER_E_ERROR         -1  /* internal error; the message says more */
#define TETHER_E_MISUSE        -2  /* NULL argument, bad option version, wrong mode */
#define TETHER_E_HANDLE        -3  /* NULL, closed, freed or wrong kind of handle */
#define TETHER_E_NOT_FOUND     -4  /* unknown entity, key, code or record */
#define TETHER_E_TYPE          -5  /* value of the wrong type */
#define TETHER_E_INVALID       -6  /* invalid argument: bad UTF-8, URL, sort key... */
#define TETHER_E_NETWORK       -7  /* server unreachable, timed out, answer cut short */
#define TETHER_E_AUTH          -8  /* server refused the credentials (401, 403) */
#define TETHER_E_SERVER        -9  /* server answered with an error status (5xx...) */
#define TETHER_E_PROTOCOL     -10  /* server answered something that is not its protocol
                                      (for Kinto: not Kinto's JSON) */
#define TETHER_E_STORE        -11  /* the SQLite store failed or belongs elsewhere */
#define TETHER_E_CANCELLED    -12  /* the request was cancelled, or its context closed */
#define TETHER_E_NOT_CACHED   -13  /* the record has no cached value yet */
#define TETHER_E_BUSY         -14  /* not allowed from inside this context's callback;
                                      a store held by another (exclusive) open */
#define TETHER_E_CONFLICT     -15  /* the server's record changed since it was read */
#define TETHER_E_NOT_ALLOWED  -16  /* the server's spec does not allow the operation
                                      (insert, update or delete) on the entity */
#define TETHER_E_EXPIRED      -17  /* the server no longer has the history a request
                                      asked for (a host connection's answer to a page
                                      `since` a version it forgot: the library lists
                                      everything again) */

/* The last failure's message on the calling thread. Borrowed: valid until
 * the next tether_* call on this thread. Never NULL ("" after success). */
TETHER_API const char *tether_errmsg(void);

/* A short constant name for a status, e.g. "TETHER_E_NETWORK". Static string;
 * never NULL ("TETHER_E_UNKNOWN" for a code this version does not know). */
TETHER_API const char *tether_errstr(int status);

/* ---------------------------------------------------------------- handles */

typedef struct tether_context tether_context;     /* a connection + store + object graph */
typedef struct tether_entity tether_entity;       /* a record type of the model */
typedef struct tether_object tether_object;       /* one record, uniqued per context */
typedef struct tether_task tether_task;           /* an asynchronous request */
typedef struct tether_observer tether_observer;   /* a key observation */
typedef struct tether_results tether_results;     /* the objects a fetch answered */

/* ---------------------------------------------------------------- values */

typedef enum tether_type {
    TETHER_TYPE_NULL = 0,     /* no value (JSON null or absent) */
    TETHER_TYPE_TEXT = 1,     /* `text`, `length` bytes of UTF-8 */
    TETHER_TYPE_INTEGER = 2,  /* `integer` */
    TETHER_TYPE_REAL = 3,     /* `real` */
    TETHER_TYPE_BOOLEAN = 4,  /* `integer`, 0 or 1 */
    TETHER_TYPE_JSON = 5      /* `text`: serialized JSON (arrays, objects, or a
                                 value whose type differs from the spec's) */
} tether_type;

/* A value read from an object. Filled by tether_object_peek/get; the text it
 * carries is owned by the value: free it with tether_value_free. */
typedef struct tether_value {
    tether_type type;
    int64_t integer;
    double real;
    char *text;       /* NUL-terminated; NULL unless TEXT or JSON */
    size_t length;    /* bytes in text, without the NUL */
} tether_value;

/* Frees what `value` owns (its text) and resets it to TETHER_TYPE_NULL; the
 * struct itself is the caller's storage. NULL is a no-op; freeing twice is
 * safe. */
TETHER_API void tether_value_free(tether_value *value);

/* ---------------------------------------------------------------- context */

typedef enum tether_delivery {
    /* Callbacks run on a thread of the library's own, one at a time. */
    TETHER_DELIVER_THREAD = 0,
    /* Callbacks run on the host's thread inside tether_context_poll(); the
     * descriptor from tether_context_fd() is readable while any wait. */
    TETHER_DELIVER_POLL = 1
} tether_delivery;

/* What a save does when the server's record is not the version a change was
 * made against (another writer changed it: HTTP 412), or is gone while it was
 * edited here. */
typedef enum tether_merge_policy {
    /* The save reports the conflict (TETHER_E_CONFLICT, with both sides in
     * its report); the local change stays pending. The default. */
    TETHER_MERGE_REPORT = 0,
    /* The server's record is taken and the local change dropped. */
    TETHER_MERGE_SERVER_WINS = 1,
    /* The local object, every value, is written over the server's record
     * (made again if the server deleted it). */
    TETHER_MERGE_CLIENT_WINS = 2,
    /* The keys changed here are written over the server's record; the other
     * keys are the server's (a record the server deleted is made again). */
    TETHER_MERGE_PROPERTIES = 3
} tether_merge_policy;

/* A local-only store attached beside the server's (Core Data's several
 * stores, one per configuration): a SQLite file holding the entities its
 * configuration defines, for records that never go to the server (private
 * annotations on server records, say). They are edited, fetched, observed
 * and saved as server records are, but a save writes them to this file, their
 * only copy, under the same conditions a server applies (a change made
 * against an older version conflicts), and a fetch answers once, from the
 * file (phase FINAL, whatever the policy); get starts no refresh. Their
 * unsaved changes are kept in this file too. A relationship from an entity
 * of one store to one of another holds the target's object URI (see
 * tether_object_uri) instead of its id, spelled exactly as that function
 * spells it (setting another spelling of it, such as lower-case hex or an
 * escape of a letter, is TETHER_E_INVALID naming the canonical one: to-many
 * fetches and delete rules compare the text); when the target is deleted (by
 * this context, or by the server: seen in a fetch or a refresh) the referring
 * records follow the inverse's delete rule at once (cascade deletes them;
 * nullify, and deny, which cannot refuse a deletion already made, clear the
 * reference), and a local record so deleted takes its own referrers in its
 * store along by their rules, transitively (also at the next open, for any
 * a clean-up cut short). A target deleted on the server while edited here
 * keeps its referrers while a merge policy may make it again; once its change
 * is gone (rolled back, or dropped by server_wins) they follow their rules.
 * A server record known deleted (a fetch, a refresh or a save learned it)
 * gets the server records that this store caches referring to it refreshed
 * at once, gathered as gets' refreshes are (those with unsaved changes are
 * left to their save): the cache takes what the server made of them by its
 * rules (deleted, cleared), transitively, siblings too. A referrer the
 * server still holds as it was (a writer that ignored the rules) keeps its
 * reference, as the server does; reads through it (a key path) say
 * TETHER_E_NOT_FOUND ("... was deleted"), never the values the target had,
 * and tether_object_related gives TETHER_E_NOT_FOUND, no object.
 * Sibling contexts take a clean-up as they take a save's answers (their
 * objects read it; their unsaved edits of a note it cleared apply to the
 * cleared version, so saving them is no conflict). No save writes a
 * reference to a target known gone (deleted on the server, as a context of
 * this store learned, and not wanted again here; or absent from its local
 * store): a change setting one is not sent (TETHER_E_INVALID, "notes/n3 not
 * sent: its Also refers to items/i1, which was deleted"), and a conflict
 * that client_wins or properties would settle by writing one (a note
 * edited here, cascaded away by its target's deletion, made again) is
 * reported instead (TETHER_E_CONFLICT). A URI does not name the server: instead a local
 * store records the server it was first attached beside (its connection's
 * identity: for Kinto, its URL and bucket), and an
 * open that attaches it beside another fails with TETHER_E_STORE naming both
 * (its references name that server's records: resolving or cleaning them up
 * against another's would delete and clear what is not gone). A local record
 * the file does not hold does not exist: reads of it give TETHER_E_NOT_FOUND
 * ("no record notes/x in local store private"), and the first get of it
 * tells its observers so, once, as for a record the server never had. A
 * local store's data is never dropped by an open: see
 * tether_local_store_drop. A reference whose target's store is not attached is kept
 * untouched, and read as a plain TEXT attribute (tether_object_related gives
 * TETHER_E_NOT_FOUND); references to server records deleted while the store
 * was not attached are cleaned up soon after an open that attaches it (the
 * records not cached are asked for in the background). A server collection
 * named as a local entity is left out of the model, with a diagnostic. */
#define TETHER_LOCAL_STORE_VERSION 1

typedef struct tether_local_store {
    unsigned int version;       /* TETHER_LOCAL_STORE_VERSION */
    const char *configuration;  /* names the store in object URIs: 1 to 64 ASCII
                                   letters, digits, '-' or '_', not "server" */
    const char *path;           /* SQLite file, created if missing; not the
                                   server's store nor another local store's;
                                   refused as store_path is if it is not
                                   Tether's (TETHER_E_STORE, left as it was) */
    const char *specs_json;     /* the entities: a JSON object of entity name to
                                   JSON schema, as a Kinto collection's (types,
                                   "required", "enum", "x-tether-code",
                                   "x-tether-to"...). Each entity also has "id"
                                   (TEXT) and "version" (INTEGER, set by saves) */
} tether_local_store;

/* Fills `store` with defaults (all NULL) for the given struct version.
 * TETHER_E_MISUSE if `store` is NULL or the version is unknown. */
TETHER_API int tether_local_store_init(tether_local_store *store, unsigned int version);

/* A local store's file is its records' only copy, so an open never drops
 * what it holds: specs that leave out an entity whose table holds records,
 * or a field (or change its column's type: TEXT, INTEGER, REAL) that holds
 * values, make a context open fail with TETHER_E_STORE naming each
 * ("local store private: the specs leave out ...: other (3 records),
 * notes.Extra (2 values) ..."), and nothing changes. Left-out entities and
 * fields that hold nothing are dropped. To drop data on purpose, call this
 * with no context open on the file: it drops `entity`'s records and its
 * table (every context's unsaved changes of it too), or, with `field`
 * non-NULL, only that field's values and column (and its unsaved values:
 * an unsaved update that set only it is dropped, other changes keep their
 * other values); the next open whose specs leave them out is
 * then taken. Codes are not given again: an entity or field defined again
 * later starts empty. Only store->configuration and store->path are read
 * (configuration must be the one the file was made for: TETHER_E_STORE
 * otherwise). TETHER_E_NOT_FOUND if the file, the entity or the field is not
 * there (no file is made); TETHER_E_INVALID for the "id" or "version" field;
 * TETHER_E_BUSY while a context of this process has the file open. */
TETHER_API int tether_local_store_drop(const tether_local_store *store, const char *entity, const char *field);

/* The options every context takes, whatever its server. Version 2 added
 * object_cache_size, version 3 merge_policy, version 4 local_stores; version
 * 5 (0.3) moved the server's own options out (Kinto's to
 * tether_kinto_options), version 6 added sync_interval_ms and
 * full_check_interval_ms, version 7 exclusive (an older struct gets their
 * defaults). A struct
 * of version 1 to 4 has 0.2's layout and is refused (TETHER_E_MISUSE);
 * later versions will only grow at the end. */
#define TETHER_CONTEXT_OPTIONS_VERSION 7

typedef struct tether_context_options {
    unsigned int version;      /* TETHER_CONTEXT_OPTIONS_VERSION */
    const char *store_path;    /* SQLite file, created if missing (required).
                                  An existing file is taken only if it is
                                  empty (zero length, or an SQLite database
                                  without tables) or a Tether store; any
                                  other is refused (TETHER_E_STORE) and
                                  never written */
    tether_delivery delivery;  /* default TETHER_DELIVER_THREAD */
    int64_t staleness_ms;      /* get() skips its refresh while a value is younger
                                  than this; default 0: every get refreshes */
    int64_t timeout_ms;        /* per request to the server (an HTTP request,
                                  a request to a host connection); default
                                  30000 */
    size_t object_cache_size;  /* objects no handle, result or observer holds
                                  that the context keeps in memory anyway,
                                  most recently used first; the rest reload
                                  from the store on demand. Default 1024; 0
                                  keeps only what is held; at most 1048576
                                  (TETHER_E_INVALID above) */
    tether_merge_policy merge_policy; /* for saves that do not name one;
                                         default TETHER_MERGE_REPORT */
    const tether_local_store *local_stores; /* local_store_count stores to
                                               attach (borrowed: read during
                                               open only); default NULL */
    size_t local_store_count;               /* default 0 */
    int64_t sync_interval_ms;  /* live data over a server that does not push
                                  its changes (Kinto, host connections, a
                                  PostgreSQL table not tracked): while an entity
                                  has a live fetch or an observed object, its
                                  changes are asked for this often (see "Live
                                  data" below). Default
                                  TETHER_DEFAULT_SYNC_INTERVAL_MS; 0: never
                                  (tether_context_changed still works) */
    int64_t full_check_interval_ms; /* a periodic sync ends with the checks
                                       for history rewritten on the server
                                       (Kinto: a restore) at most this often
                                       per entity; fetches the host starts
                                       always end with them. Default 300000 */
    int exclusive;             /* nonzero: the store is this process's alone
                                  while the context is open. The open fails
                                  with TETHER_E_BUSY, naming a process, while
                                  another process has the store open, and
                                  other processes' opens fail so meanwhile.
                                  Default 0: processes share the store (see
                                  "Several processes, one store") */
} tether_context_options;

/* Live data: every sync_interval_ms (plus or minus a tenth, at random, so
 * that a fleet of clients does not ask in step), each watched entity (one
 * with a live fetch or an observed object; a live fetch with
 * TETHER_POLICY_CACHE_ONLY never asks the server, so does not count) is
 * synced as a fetch syncs it, and its live fetches and observers answer
 * what changed. Cost per watched entity and round, over Kinto: one request
 * with If-None-Match, answered 304 Not Modified (no body) when nothing
 * changed; what changed since the last sync when something did. An entity
 * never listed whole is listed whole in its first round (then each round
 * asks what changed since). Observed objects of an entity without a live
 * fetch are refreshed by id instead (one request per entity and round).
 * Every full_check_interval_ms a round also counts the collection (a HEAD)
 * and lists its ids and versions (about 40 bytes a record), which is how a
 * record put back with an older version is found. A Kinto with the history
 * plugin (kinto.plugins.history, named in its capabilities) keeps one list
 * of every write to the bucket: then a round is one request for every
 * watched collection together (304 while nothing was written to the bucket;
 * its entries, about 200 bytes each, when something was), only the
 * collections it names are asked what changed, and a record it shows put
 * back with an older version is asked for by id at once. If the list
 * cannot be read (401, 403, 404) the rounds ask each collection, said once
 * at INFO. Writes the server leaves out of its history (history.exclude_*
 * settings, trimming) are still found by the full checks. Rounds stop when the last
 * live fetch and observer of the context are gone, are skipped while the
 * server asks to back off (Kinto's Backoff header, or Retry-After on a 503
 * or 429: its seconds, at most a day, logged at INFO when a backoff begins;
 * fetches, saves and tether_context_changed still go, as Kinto's clients'
 * user-started requests do), and while it cannot be reached they ask for one entity only: the first
 * answer from the server starts a round of every watched entity at once.
 * PostgreSQL pushes the changes of tracked tables instead
 * (tether_postgres_install); an untracked table's entity gets the rounds. */
#define TETHER_DEFAULT_SYNC_INTERVAL_MS 10000

/* Fills `opts` with defaults for the given struct version. Returns
 * TETHER_E_MISUSE if `opts` is NULL or the version is unknown (1 to 4
 * included: see TETHER_CONTEXT_OPTIONS_VERSION). */
TETHER_API int tether_context_options_init(tether_context_options *opts, unsigned int version);

/* ---------------------------------------------------------------- Kinto */

/* Kinto (https://kinto.readthedocs.io) is the server Tether speaks over
 * HTTP itself. In Kinto's words: the model is a bucket, each entity one of
 * its collections (the entity's name is the collection id, its route
 * "/buckets/B/collections/C/records", its fields the collection's JSON
 * schema), a record's id is its "id" and the server's version of it is its
 * "last_modified" (milliseconds, growing with each change); a data set's
 * version is a collection's ETag. Where the generic doc gives Kinto's way
 * of doing a thing, it says "Kinto:". */
#define TETHER_KINTO_OPTIONS_VERSION 1

typedef struct tether_kinto_options {
    unsigned int version;      /* TETHER_KINTO_OPTIONS_VERSION */
    const char *server_url;    /* Kinto root, e.g. "http://127.0.0.1:8888/v1" (required) */
    const char *bucket;        /* the bucket whose collections form the model (required) */
    const char *username;      /* basic auth; NULL for anonymous. Never stored or logged */
    const char *password;      /* basic auth; NULL for anonymous. Never stored or logged */
} tether_kinto_options;

/* Fills `kinto` with defaults (all NULL) for the given struct version.
 * TETHER_E_MISUSE if `kinto` is NULL or the version is unknown. */
TETHER_API int tether_kinto_options_init(tether_kinto_options *kinto, unsigned int version);

/* Opens a context on a Kinto bucket: opens (or creates) the store, reads the
 * server's info and every collection's schema of the bucket, builds the
 * model, migrates the store's tables to it and saves the model in the store.
 * An entity whose table changed (a field added, gone or given another type)
 * lists everything again at its next fetch; until then a field given another
 * type reads null in its cached records (predicates and peek alike), except
 * a value the server sent that did not fit the old type and fits the new
 * one, which is kept as the new type's value.
 *
 * Blocks for at most about opts->timeout_ms per request. If the server cannot
 * be reached at all (connection refused or closed, name unknown, time-out,
 * with not a byte of answer) and the store holds a model for this server and
 * bucket, the context opens offline from the store (TETHER_OK; see
 * tether_context_is_online). With no such store it fails with
 * TETHER_E_NETWORK. A server that answers badly is not "offline": an answer
 * cut short or a dropped connection gives TETHER_E_NETWORK, refused
 * credentials TETHER_E_AUTH, an unknown bucket TETHER_E_NOT_FOUND, a
 * server_url that Kinto redirects (its root without /v1) TETHER_E_INVALID,
 * saying "add /v1" (not followed: the store is keyed by the URL given, and
 * an offline open could not ask where it leads), a
 * malformed answer TETHER_E_PROTOCOL, a 5xx TETHER_E_SERVER. In each failure
 * the store is left as it was (a store file this call created is removed).
 * A store file that is not empty and not a Tether store (the host's own SQLite
 * database, a file that is not SQLite) gives TETHER_E_STORE and is left byte
 * for byte as it was: no table made, no journal mode changed, no -wal or -shm
 * file left beside it. A zero-length file or an SQLite database without
 * tables is empty, and becomes the store.
 * A store saved for another server or bucket gives TETHER_E_STORE, and a store
 * file a context of this process has open already gives TETHER_E_BUSY (a
 * store's unsaved changes have one keeper: open a sibling of that context
 * instead, see tether_context_open_sibling). An exclusive open (opts'
 * exclusive) while another process has the store open, or any open while
 * another process holds it exclusively, gives TETHER_E_BUSY naming that
 * process. `opts` and `kinto` are read during the call only.
 *
 * Several processes, one store: any number of processes may open one store
 * file (an app and its background sync, workers of a service), on one host.
 * A context's unsaved changes are its process's own: another process's
 * context of the same name keeps its changes apart and never sends them.
 * When a process ends (closed, or killed) holding unsaved changes, the next
 * context of that name to open the store, or the next save of one already
 * open in another process, takes them over and saves them, once (an object
 * with a change of its own there keeps it; the other waits for that save
 * and follows it, as a later edit would). The log says at INFO how many it
 * took over and from which process. What one process stores (records it
 * fetched, refreshed, saved or saw deleted) reaches the others' objects in
 * memory, observers and live fetches within about 200 ms, with no request
 * to the server: every 200 ms each context asks SQLite whether another
 * connection wrote to its store (PRAGMA data_version, no I/O), and if one
 * did, its objects in memory read their rows again and its live fetches
 * look again. Unsaved changes stay their process's own until saved.
 * A process that opens the store while the server's specs have changed
 * migrates it to the new model (tables and columns made or dropped); a
 * context of another process opened for the old model then writes no row
 * (a fetch or save that would fails with TETHER_E_STORE, saying so): close
 * it and open it again. An open or a write that finds another process
 * holding the store's write lock for more than 5 s fails with TETHER_E_BUSY.
 * Processes on different hosts or in different PID namespaces (containers)
 * must not share a store file.
 *
 * On success *out is a new context owned by the caller: close it with
 * tether_context_close. */
TETHER_API int tether_context_open_kinto(const tether_context_options *opts, const tether_kinto_options *kinto,
                                         tether_context **out);

/* ---------------------------------------------------------------- PostgreSQL */

/* PostgreSQL, spoken through libpq (libpq.so.5, loaded the first time a
 * context opens on PostgreSQL: a host that never does never loads it). In
 * PostgreSQL's words: the model is a schema, each entity one of its tables
 * with a primary key of one text, varchar, char, uuid or integer column
 * (the entity's name is the table's, its route "schema.table"); a table
 * without one is left out (logged, category "sync"). A record's id is its
 * key as text (42 -> "42"; a predicate on the key compares text, so an
 * int8 key `change` is asked as change == '1001', and "10" sorts before "9"),
 * the server's version of it is the row's xmin
 * (the transaction that last wrote it), as the field "xmin", which no
 * column can be named. xmin is 32 bits and wraps around (a busy server's
 * within weeks); the version is the 64-bit transaction id it stands for,
 * which only grows (the same number until the first wrap).
 *
 * Columns: int2/int4/int8 -> integer; float4/float8/numeric -> real (as
 * JSON reads the number: a numeric beyond a double is kept as its digits,
 * a misfit; NaN and Infinity are text, misfits); bool -> boolean;
 * json/jsonb and arrays -> json; timestamptz -> text, ISO 8601 in UTC with
 * microseconds ("2026-01-02T03:04:05.000000Z"), timestamp and date -> the
 * same without the zone, so text order is time order; text, varchar, char,
 * uuid, enums and every other type -> text (PostgreSQL's text output). A
 * domain maps as its base type. NOT NULL (of the column or its domain) ->
 * required; an enum's labels, or a one-column check `col IN (...)`, ->
 * allowed values; a one-column foreign key onto an entity's key -> a
 * relationship (its inverse named after the referring table, or
 * table_column when one table refers to the same target twice) whose
 * ON DELETE CASCADE is cascade, SET NULL nullify, and RESTRICT, NO ACTION
 * and SET DEFAULT deny. The role's privileges on a table are its
 * entity's operations: SELECT fetch, INSERT insert, UPDATE update, DELETE
 * delete (a save the privileges do not allow fails TETHER_E_NOT_ALLOWED).
 *
 * Saves: each batch of writes is one transaction, each record in a savepoint
 * of its own. An insert is INSERT ... ON CONFLICT (key) DO NOTHING (a row
 * there already: a conflict); an update sets the changed columns (a replace,
 * every column) WHERE the key and the row's xmin are the version the object
 * last saw; a delete likewise. No row matched: a conflict with the row as it
 * is now (a delete of a row already gone is done), settled by the merge
 * policy as over Kinto; a write sent again after a lost answer finds the new
 * xmin and is never applied twice. Values PostgreSQL refuses (NOT NULL, a
 * check, a foreign key, a unique index, a value the column's type cannot
 * hold) fail that record with TETHER_E_INVALID and the message PostgreSQL
 * gave; its neighbours are saved. A connection lost before the COMMIT's
 * answer fails the batch with TETHER_E_NETWORK, every change kept.
 *
 * A predicate's comparisons on text, integer and
 * boolean attributes run in PostgreSQL, as the cache runs them (text by
 * bytes of UTF-8, in the "C" collation); others run in the cache.
 *
 * Refreshes sync incrementally where Tether's change tracking is installed
 * (tether_postgres_install, or a DBA applying sql/tether-postgres.sql with
 * psql and calling tether.track('schema')): triggers record each change in
 * schema tether (no column is added to any table), and a refresh asks only
 * for what changed since its last one, deletions included; one that finds
 * nothing new reads no row of the table. The sync cursor is a transaction
 * horizon, so a change committed late is never skipped. A table not tracked
 * (or truncated, or tracked anew, since the last refresh) is listed whole,
 * as is every table where tracking is not installed: the connection says
 * so once (log, category "sync"). The triggers also send NOTIFY
 * tether_changes with 'schema.table' as the payload.
 *
 * Changes pushed: while a context has a live fetch of a table's entity, or
 * an observer of one of its objects, the process keeps one more connection
 * to the database (application_name "tether listen") that runs LISTEN
 * tether_changes and waits on its socket on a thread of its own (no
 * polling). One per process and database (the same conninfo parameters),
 * whatever the number of contexts, siblings and schemas: 100 processes of
 * one context each hold 100 listening connections, a process of 100
 * contexts one. The channel's payload must be "<schema>.<table>": the triggers
 * of sql/tether-postgres.sql send it on every insert, update and delete
 * (a refresh so started is incremental where tracking is installed); a
 * table without Tether's tracking pushes nothing of its own: once a
 * listing finds it untracked, its live fetches and observers get the sync
 * interval instead, as over Kinto (see "Live data"; logged once at
 * WARNING; so too a table no listing has found tracked yet, as an object
 * observed but never fetched). A notice for an untracked table (a trigger of the host's own)
 * lists it from the server once (as a fetch with TETHER_POLICY_SERVER_ONLY would), and its
 * live fetches and observers answer as after any fetch (with observers only,
 * their objects are refreshed by id instead). The delay from the commit is
 * about 20 ms of gathering (a burst of commits costs one listing; notices
 * while a listing runs cause one more after it) plus the listing: with
 * tracking, a listing of what changed, except the first after the store
 * holds only filtered answers of the table (a live fetch whose predicate
 * PostgreSQL evaluated), which lists the table whole, once, and takes as
 * long as a first sync of it. When that
 * connection is lost (the server restarted) it connects again after 0.1 s,
 * doubling up to 5 s; once back, every watched table is listed once, for the
 * notices missed meanwhile (so too right after the first LISTEN). The
 * connection closes when the process's last live fetch and observer on the
 * database go, and with its last context on it; a context's close ends only
 * its own subscriptions, and tether_context_close does not wait for the
 * server for it. */
#define TETHER_POSTGRES_OPTIONS_VERSION 1

typedef struct tether_postgres_options {
    unsigned int version;      /* TETHER_POSTGRES_OPTIONS_VERSION */
    const char *conninfo;      /* libpq connection string: "host=... port=... dbname=... user=..."
                                  or a postgresql:// URI (required). Its password, if any, is
                                  never stored or logged */
    const char *schema;        /* the schema whose tables form the model; NULL: "public" */
} tether_postgres_options;

/* Fills `pg` with defaults (all NULL) for the given struct version.
 * TETHER_E_MISUSE if `pg` is NULL or the version is unknown. */
TETHER_API int tether_postgres_options_init(tether_postgres_options *pg, unsigned int version);

/* Opens a context on a PostgreSQL schema, as tether_context_open_kinto
 * opens one on a bucket (store, model, migration and offline open alike).
 * The store is keyed by the conninfo's host, hostaddr, port, dbname and
 * user, and the schema. Connecting waits at most opts->timeout_ms (rounded
 * up to whole seconds, at least 2). A server that cannot be reached at all
 * (no answer to the connection), or that is starting up or shutting down
 * (SQLSTATE 57P03, a restart in progress), opens offline from a store of the
 * same database and schema, else gives TETHER_E_NETWORK, as a fetch or save
 * meeting it does; a conninfo libpq cannot
 * parse, or a schema that is empty or over 63 bytes, TETHER_E_INVALID; an
 * unknown schema or database TETHER_E_NOT_FOUND; a refused role or password
 * TETHER_E_AUTH; libpq.so.5 missing TETHER_E_ERROR, saying so. `opts` and
 * `pg` are read during the call only. On success *out is a new context
 * owned by the caller: close it with tether_context_close. */
TETHER_API int tether_context_open_postgres(const tether_context_options *opts, const tether_postgres_options *pg,
                                            tether_context **out);

/* Installs Tether's change tracking (the text of sql/tether-postgres.sql,
 * which the library holds) in the database `pg->conninfo` names, and tracks
 * every table of `pg->schema` (NULL: "public") with a primary key of one
 * column: what the connection then syncs incrementally. Installing again is
 * harmless and tracks the schema's new tables. The role needs CREATE on the
 * database and ownership of the tables. If `tracked` is not NULL, it
 * receives how many tables were tracked by this call. Blocks until the
 * server answers (connecting waits at most 30 s); any thread. Statuses as
 * tether_context_open_postgres gives them for the connection; an unknown
 * schema TETHER_E_NOT_FOUND; a role without the rights TETHER_E_AUTH; a
 * statement that fails TETHER_E_SERVER, the install then undone; `pg` NULL
 * or not initialised TETHER_E_MISUSE. `pg` is read during the call only. */
TETHER_API int tether_postgres_install(const tether_postgres_options *pg, int *tracked);

/* ---------------------------------------------------------------- context lifetime */

/* Closes a context: cancels its tasks and observers, ends every request in
 * flight, delivers each task's and observer's final TETHER_E_CANCELLED
 * callback (on the calling thread in POLL mode, on the library's thread in
 * THREAD mode, before returning), closes the store, its descriptors and its
 * threads, and invalidates every handle that came from the context: objects,
 * results, entities, tasks, observers. A thread blocked in
 * tether_context_poll on this context returns. Safe from any thread at any
 * moment; calls racing it on other threads get TETHER_E_HANDLE. Of closes
 * racing each other one returns TETHER_OK; the others first wait until it is
 * done (so no callback runs after any of them returns), then return
 * TETHER_E_HANDLE, as a later close does. NULL is a no-op that returns
 * TETHER_OK. Returns TETHER_E_BUSY if called from inside one of this
 * context's callbacks (the context stays open).
 *
 * Unsaved changes are not lost by a close: they stay in the store's outbox
 * under the context's name ("" for a context from tether_context_open_kinto
 * or tether_context_open_host, the
 * sibling's name for a sibling), and the next context opened on the store
 * under that name has them as its own and sends them at its next save. A
 * close that leaves any logs so at TETHER_LOG_INFO (category "context"),
 * with their count. */
TETHER_API int tether_context_close(tether_context *ctx);

/* Opens a sibling of `ctx`: another context on the same store, model and
 * connection, with its own objects, callbacks (delivered as `delivery` says)
 * and unsaved changes, as Core Data has a background context for imports
 * beside the main one for a UI. Its options are ctx's otherwise. Unsaved
 * changes are each context's own and are kept in the store under its
 * `name` (UTF-8; the first context's changes have the name "", which a
 * sibling takes once the first context has closed), so a sibling opened
 * again under a name finds the changes left under it.
 * When a save or a fetch in one context settles a record (or learns it was
 * deleted), the objects of the others for that record take the server's
 * values (their own unsaved changes stay) and their observers and live
 * fetches are told.
 * TETHER_E_INVALID if a context of that name is open on the store. *out is
 * owned by the caller: close it with tether_context_close. Contexts may be
 * closed in any order; the store and the connection close with the last. */
TETHER_API int tether_context_open_sibling(tether_context *ctx, const char *name, tether_delivery delivery,
                                           tether_context **out);

/* The object of `ctx` for the record that `obj`, an object of another
 * context on the same store, stands for (Core Data's objectWithID: in
 * another context). TETHER_E_INVALID if obj's context is on another store.
 * *out is a new reference, as from tether_context_object. */
TETHER_API int tether_context_local_object(tether_context *ctx, tether_object *obj, tether_object **out);

/* *out = 1 while the server answers, 0 while it cannot be reached. It is 0
 * from an offline open, and from any request that cannot reach the server
 * by the rule of an offline open (connection refused, or closed before a
 * byte of answer; unknown name; timed out with no byte of answer), and 1
 * again from any answer, whatever its status: a server that answers badly
 * (an error status, an answer cut short) is not offline. So a context
 * opened offline comes back online by itself when a later request (a fetch,
 * a get's refresh, a save) reaches the server; nothing retries for it. Each
 * change is logged at TETHER_LOG_WARNING (category "context"). Siblings
 * share their connection, and this state with it: one server. */
TETHER_API int tether_context_is_online(tether_context *ctx, int *out);

/* The host learned, by a channel of its own (a WebSocket, server-sent
 * events, a mobile push, a message queue; a host connection's server), that
 * `entity` (NULL: every entity) changed on the server: the context syncs it
 * now, as a round of sync_interval_ms does (see "Live data"), whatever that
 * interval, even 0, and its live fetches and observers answer what changed.
 * An entity nothing watches has nothing to answer: the call does nothing
 * for it. Coalesced: while a sync of the entity runs, calls make one more
 * after it. Returns at once; safe from any thread, and from callbacks.
 * TETHER_E_NOT_FOUND for an entity the model lacks, TETHER_E_INVALID for a
 * local store's entity. */
TETHER_API int tether_context_changed(tether_context *ctx, const char *entity);

/* Called with TETHER_OK each time the context goes offline or back online
 * (see tether_context_is_online), `online` the state that change led to
 * (changes are told in order, one call each); and exactly once more, last,
 * with TETHER_E_CANCELLED (`online` then the state at that time) when the
 * observer is cancelled or its context closes: free userdata then. `ctx` is
 * borrowed for the call. Delivered as the context's delivery mode says, as
 * every callback of the context. */
typedef void (*tether_online_cb)(tether_context *ctx, int online, int status, void *userdata);

/* Observes tether_context_is_online. *out (may be NULL) is the observer,
 * owned by the library, cancelled with tether_observer_cancel (as a key
 * observer): it stays valid until its final callback has returned, and then
 * the library drops it, its callback and every reference to userdata. The
 * state when this returns is tether_context_is_online's; changes after it
 * are told. Siblings each observe the one state of their connection. */
TETHER_API int tether_context_observe_online(tether_context *ctx, tether_online_cb callback, void *userdata,
                                             tether_observer **out);

/* POLL mode: *out is a descriptor that is readable while callbacks wait to be
 * delivered; add it to select/poll/epoll/an event loop and call
 * tether_context_poll when it is readable. Borrowed: the context owns it and
 * closes it on tether_context_close. TETHER_E_MISUSE in THREAD mode. */
TETHER_API int tether_context_fd(tether_context *ctx, int *out);

/* POLL mode: waits up to timeout_ms (0: do not wait, -1: no limit) for
 * callbacks, then runs every callback waiting, on the calling thread.
 * *out_delivered (may be NULL) gets how many ran. If another thread closes
 * the context meanwhile, it returns at once (TETHER_OK; the closer delivers
 * the final callbacks) and later calls give TETHER_E_HANDLE. TETHER_E_MISUSE
 * in THREAD mode; TETHER_E_BUSY from inside one of this context's callbacks.
 * Call it from one thread at a time. */
TETHER_API int tether_context_poll(tether_context *ctx, int timeout_ms, size_t *out_delivered);

/* ---------------------------------------------------------------- model */

/* Operations an entity allows, as a bit set. */
#define TETHER_OP_FETCH   1u
#define TETHER_OP_INSERT  2u
#define TETHER_OP_UPDATE  4u
#define TETHER_OP_DELETE  8u

/* Attribute flags, as a bit set. */
#define TETHER_ATTR_ID        1u  /* the record's id */
#define TETHER_ATTR_VERSION   2u  /* the server's version of the record */
#define TETHER_ATTR_REQUIRED  4u  /* the spec requires it */

/* The number of entities in the model. */
TETHER_API int tether_context_entity_count(tether_context *ctx, size_t *out);

/* The entity at `index` (0 ≤ index < count, sorted by name). Borrowed: valid
 * until the context closes. TETHER_E_NOT_FOUND past the end. */
TETHER_API int tether_context_entity_at(tether_context *ctx, size_t index, tether_entity **out);

/* The entity named `name` (as the server names the record type). Borrowed: valid until
 * the context closes. TETHER_E_NOT_FOUND if the model has none. */
TETHER_API int tether_context_entity(tether_context *ctx, const char *name, tether_entity **out);

/* What the model left out or changed when the context opened, and why: a
 * collection that cannot be modelled (its name empty or holding U+0000, or
 * described twice) is left out and the rest of the model is built; a field
 * likewise (its values stay in each record's extra fields); an explicit code
 * out of range or taken gives the attribute another. One entry each; none
 * for a context opened offline.
 *
 * Then the unsaved changes kept for what the server's model no longer has:
 * a collection (or a field of one) that had unsaved changes here and has
 * since left the server's model, named with the count of changes kept, e.g.
 * "the server's model no longer has the field jobs.Note: 1 unsaved change to
 * it is kept in the store for its return, and not saved until then" (also
 * logged at TETHER_LOG_WARNING). Codes are stable: a collection or field that
 * comes back gets its codes back, and its unsaved changes with them.
 *
 * Then, as pages come, what the context left out of them: a record without a
 * usable id (none, not text, or empty) or an item that is no record, named
 * by its entity, its place in the page and the reason, e.g. "record 3 of a
 * page of jobs was left out: its id "id" is 5, not text"; the rest of the
 * page is stored and answered. Each is also logged at TETHER_LOG_WARNING.
 * These are kept once per entity and message, and at most 100 in all (the
 * last saying so; the log still names each), so a long-running host's list
 * stays small. The count only grows while the context is open. */
TETHER_API int tether_context_diagnostic_count(tether_context *ctx, size_t *out);

/* The diagnostic at `index` (0 ≤ index < count). Each out parameter may be
 * NULL. *out_entity is the entity's name as the server gave it;
 * *out_attribute the field's, or NULL when the whole entity is concerned;
 * *out_message says what happened, for people. Borrowed: valid until the
 * context closes. TETHER_E_NOT_FOUND past the end. */
TETHER_API int tether_context_diagnostic_at(tether_context *ctx, size_t index, const char **out_entity,
                                            const char **out_attribute, const char **out_message);

/* The entity's name. Borrowed: valid until the context closes. */
TETHER_API int tether_entity_name(tether_entity *entity, const char **out);

/* The entity's route on the server (Kinto: e.g. "/buckets/demo/collections/users/records").
 * Borrowed: valid until the context closes. */
TETHER_API int tether_entity_route(tether_entity *entity, const char **out);

/* The configuration of the store holding the entity's records: "" for the
 * server's, else a local store's (see tether_local_store). Borrowed: valid
 * until the context closes. */
TETHER_API int tether_entity_configuration(tether_entity *entity, const char **out);

/* The entity's code: stable across runs and model changes, as attribute
 * codes are, and never given to another entity of its store (a local
 * store's entities have codes of their own). */
TETHER_API int tether_entity_code(tether_entity *entity, int *out);

/* The operations the server allows on the entity (TETHER_OP_* bits). */
TETHER_API int tether_entity_operations(tether_entity *entity, unsigned int *out);

/* The number of attributes, including the id and version attributes. */
TETHER_API int tether_entity_attribute_count(tether_entity *entity, size_t *out);

/* Describes the attribute at `index` (0 ≤ index < count). Each out parameter
 * may be NULL. *out_name is borrowed: valid until the context closes. Codes
 * are stable: an attribute keeps its code across runs and model changes, and
 * a removed attribute's code is not given to another. A spec may set a code
 * with the property keyword "x-tether-code". TETHER_E_NOT_FOUND past the end. */
TETHER_API int tether_entity_attribute_at(tether_entity *entity, size_t index,
                                          const char **out_name, int *out_code,
                                          tether_type *out_type, unsigned int *out_flags);

/* The values the attribute at `index` may hold (a JSON schema's "enum"), as
 * a JSON array ("[\"open\",\"closed\"]"), or NULL when any value of its
 * type is allowed. *out is borrowed: valid until the context closes. A set
 * outside them is TETHER_E_INVALID. TETHER_E_NOT_FOUND past the end. */
TETHER_API int tether_entity_attribute_allowed(tether_entity *entity, size_t index, const char **out);

/* What deleting a record does to the records referring to it. */
typedef enum tether_delete_rule {
    TETHER_DELETE_NULLIFY = 0,  /* their reference becomes NULL */
    TETHER_DELETE_CASCADE = 1,  /* they are deleted too */
    TETHER_DELETE_DENY = 2      /* the delete is refused while any refers to it
                                   (TETHER_E_NOT_ALLOWED), unless that one is
                                   deleted by the same delete's cascades */
} tether_delete_rule;

/* Relationships. A to-one relationship is a TEXT attribute holding the id of
 * a record of another entity (a reference; in a spec's JSON schema, the property
 * keywords "x-tether-to": "<collection>", "x-tether-inverse": "<name>"
 * (default: this collection's name) and "x-tether-delete": "nullify",
 * "cascade" or "deny", in any case (default nullify); another word is a
 * diagnostic and taken as deny, which deletes and clears nothing). Its
 * inverse, a to-many on the target entity, is named by "x-tether-inverse";
 * a name two references to one entity would share (both defaulted to the
 * source's name, say changes.Owner and changes.Reviewer to people) is
 * neither's: each is named "<source entity>.<attribute>" ("changes.Owner"),
 * with a diagnostic. The to-many holds every record referring to one: fetch it with
 * tether_fetch_options.related_owner and related_name. peek and get read
 * through to-one relationships by key path ("Client.Owner"; NULL when a
 * reference on the way is). */

/* If the attribute at `index` is a reference: its target entity (borrowed:
 * valid until the context closes) and the delete rule of its inverse.
 * TETHER_E_NOT_FOUND for a plain attribute or an index past the end. Each
 * out may be NULL. */
TETHER_API int tether_entity_attribute_target(tether_entity *entity, size_t index, tether_entity **out_target,
                                              tether_delete_rule *out_rule);

/* The entity's to-many relationships: how many, and each one's name
 * (borrowed: valid until the context closes), the entity of the records it
 * holds (borrowed) and the index of their attribute that refers to this
 * entity. TETHER_E_NOT_FOUND past the end. Each out may be NULL. */
TETHER_API int tether_entity_relationship_count(tether_entity *entity, size_t *out);
TETHER_API int tether_entity_relationship_at(tether_entity *entity, size_t index, const char **out_name,
                                             tether_entity **out_source, size_t *out_attribute);

/* The index of the attribute named `name`, or of the one with `code`.
 * TETHER_E_NOT_FOUND if there is none. */
TETHER_API int tether_entity_attribute_index(tether_entity *entity, const char *name, size_t *out);
TETHER_API int tether_entity_attribute_index_by_code(tether_entity *entity, int code, size_t *out);

/* ---------------------------------------------------------------- objects */

/* The object for record `id` of `entity`. The record need not be cached yet
 * (reads then give TETHER_E_NOT_CACHED until a fetch or a get brings it).
 *
 * Owned: *out is a new reference; free it with tether_object_free.
 * While any reference to an object is held (by the host, a results handle or
 * an observer), the context returns the same handle for the same record, so
 * handles can be compared. Once the last is freed the handle is dead and
 * a later call returns a new one (handles are never reused); the record stays
 * in the store and, for a while, in the context's object cache. */
TETHER_API int tether_context_object(tether_context *ctx, const char *entity, const char *id,
                                     tether_object **out);

/* Adds a reference to `obj` (for instance to keep an object of a results
 * handle past its free). Each retain needs one tether_object_free. */
TETHER_API int tether_object_retain(tether_object *obj);

/* Drops one reference. When the last is gone the handle is dead. NULL is a
 * no-op (TETHER_OK); a dead handle, or one whose context has closed, gives
 * TETHER_E_HANDLE and does nothing else. */
TETHER_API int tether_object_free(tether_object *obj);

/* The object's entity. Borrowed: valid until the context closes. */
TETHER_API int tether_object_entity(tether_object *obj, tether_entity **out);

/* The object's record id. Borrowed: valid while the object handle is. */
TETHER_API int tether_object_id(tether_object *obj, const char **out);

/* The server's version of the record, as cached: an integer that grows
 * with each change (see tether_context_open_kinto for Kinto's).
 * TETHER_E_NOT_CACHED if the record is not cached. */
TETHER_API int tether_object_version(tether_object *obj, int64_t *out);

/* peek: the cached value of `key`; never touches the network.
 * TETHER_E_NOT_FOUND for a key the entity does not have, or a record that the
 * server no longer has: "ENTITY/ID was deleted" for one cached here before,
 * "no record ENTITY/ID on the server" for one the server was asked about
 * (by a get's refresh) and never had, a wrong id; TETHER_E_NOT_CACHED if
 * the record is not cached (nor known absent). A deletion the store saw (of
 * a record it held) survives a reopen: the store keeps a tombstone for the
 * newest 10000 deleted records of each entity (an older one reads
 * TETHER_E_NOT_CACHED again); a later answer that has the record drops it,
 * unless the answer was read before the deletion (a get's refresh or a page
 * taken after this context's own save deleted the record): one holding the
 * record at a version the deletion follows (the deleted row's, or the
 * server's for the deletion, Kinto's tombstone) or an older one; and, for
 * a save's delete of a record already gone (the server does not say its
 * deletion's version), any answer asked for before the save's answer was
 * taken. Likewise an answer saying a record is gone (a refresh's, a sync's)
 * removes no row written since it was asked for (a save's answer).
 * On success *out holds the value; free it with tether_value_free.
 * `out` is written only on success. `key` may be a key path through to-one
 * relationships ("Client.Owner"). */
TETHER_API int tether_object_peek(tether_object *obj, const char *key, tether_value *out);

/* get: as peek, and also starts a background refresh of the object unless
 * the cached value is younger than the context's staleness window. At most
 * one refresh per object is in flight: a get during one asks for a single
 * further refresh after it, however many gets come meanwhile. Refreshes of
 * many objects of one entity are gathered while the calling thread keeps
 * asking (a burst of gets, from any threads) and batched into few server
 * requests (Kinto: one POST /v1/batch of in_id listings carries thousands
 * of ids). The burst ends when the thread of its first get has gone 5 ms of
 * its own time without another get (running other code, or blocked), or
 * after 100 ms of its own time; time it spends waiting for a CPU does not
 * count (on Linux, read from /proc by the get that starts a burst, a few
 * microseconds, then by the library's thread; without /proc, the wall
 * clock), so a loaded machine does not split a loop of gets. A lone get's
 * refresh leaves about 5 ms after it, a burst's 5 to 10 ms after its last
 * get (later while the thread waits for a CPU). The refreshes that a
 * server deletion starts for records referring to the deleted one are
 * gathered the same way, and so are a key path's ("Client.Owner": each
 * object on the way). When a refresh changes a value, observers of that
 * key are told. Returns TETHER_E_NOT_CACHED (after starting the refresh)
 * if the record is not cached yet. */
TETHER_API int tether_object_get(tether_object *obj, const char *key, tether_value *out);

/* The object the to-one relationship `key` of `obj` refers to: *out is a new
 * reference (free it), or NULL (TETHER_OK) when the reference is NULL; NULL
 * too whenever the status is not TETHER_OK.
 * TETHER_E_INVALID if `key` is not a relationship (an unknown key included);
 * TETHER_E_NOT_FOUND if its target's store is not attached, or if the target
 * is known gone (deleted on the server, as this store learned, none here
 * wanting it again; or absent from its local store: "... refers to
 * changes/c1, which was deleted"); TETHER_E_NOT_CACHED if
 * obj is not cached. The target need not be cached: reads of it then give
 * TETHER_E_NOT_CACHED until a fetch or a get brings it. */
TETHER_API int tether_object_related(tether_object *obj, const char *key, tether_object **out);

/* Points the to-one relationship `key` of `obj` at `target` (NULL: at
 * nothing): an unsaved change, as tether_object_set of the target's id, or
 * of its object URI when the two are in different stores.
 * TETHER_E_INVALID if `key` is not a relationship (an unknown key included),
 * target is another context's, or target is a pending delete (as
 * tether_object_set says); TETHER_E_TYPE if target is not of the
 * relationship's entity. */
TETHER_API int tether_object_set_related(tether_object *obj, const char *key, tether_object *target);

/* The object's URI, its name across stores: "tether://<store>/<entity>/<id>",
 * <store> being "server" or a local store's configuration, entity and id
 * percent-encoded. On success *out is TEXT: free it with
 * tether_value_free. */
TETHER_API int tether_object_uri(tether_object *obj, tether_value *out);

/* The object an object URI names, as tether_context_object (*out is a new
 * reference). TETHER_E_INVALID if `uri` is not one; TETHER_E_NOT_FOUND if
 * its store is not attached to ctx or its entity unknown. */
TETHER_API int tether_context_object_for_uri(tether_context *ctx, const char *uri, tether_object **out);

/* peek and get by the attribute's numeric code. */
TETHER_API int tether_object_peek_code(tether_object *obj, int code, tether_value *out);
TETHER_API int tether_object_get_code(tether_object *obj, int code, tether_value *out);

/* ---------------------------------------------------------------- editing */

/* Editing is local and durable: each call below writes the object's change to
 * the store's outbox before it returns, so a process killed at any moment
 * loses no change it was told succeeded. Nothing reaches the server until
 * tether_save_start. An object with unsaved changes stays in the context
 * (its handle, if freed, is made again by tether_context_object) until
 * the server confirms them or they are rolled back. peek and get read the
 * pending value, and observers of a key are told of local changes as of
 * server ones. Each may be called from any thread. */

/* Sets `key` (an attribute name) of `obj` to `value`. The value must have the
 * attribute's type (TETHER_E_TYPE otherwise): an INTEGER is taken for a REAL
 * attribute when exact; a JSON attribute takes any value (TEXT as a JSON
 * string) and JSON text, which must parse (TETHER_E_TYPE). NULL is refused for
 * a required attribute (TETHER_E_TYPE). TEXT must be valid UTF-8
 * (TETHER_E_INVALID); it may hold NUL bytes (`length` counts). The id and
 * version attributes are the server's (TETHER_E_INVALID), and so is a value
 * outside the spec's allowed values (a JSON schema's "enum"). A reference
 * naming a record this context has deleted and not yet saved is refused
 * (TETHER_E_INVALID: the save would leave it pointing at nothing; roll the
 * delete back first). Setting a value back to the server's undoes the
 * change of that key.
 *
 * An object that is not a pending insert must be cached (TETHER_E_NOT_CACHED:
 * its version is what the update is conditional on); TETHER_E_NOT_FOUND if it
 * was deleted; TETHER_E_MISUSE if it is a pending delete;
 * TETHER_E_NOT_ALLOWED if the entity's spec does not allow updates. `value`
 * is copied. */
TETHER_API int tether_object_set(tether_object *obj, const char *key, const tether_value *value);

/* tether_object_set by the attribute's numeric code. */
TETHER_API int tether_object_set_code(tether_object *obj, int code, const tether_value *value);

/* A new object of `entity`, a pending insert: every attribute NULL but its id
 * until set. `id` NULL: a random UUID (version 4), made here. Ids are made by
 * the client so that an insert sent twice (a retry, a save after a crash)
 * can never make two records. TETHER_E_CONFLICT if the context or its store
 * already holds a record of that id; TETHER_E_NOT_ALLOWED if the spec does
 * not allow inserts. *out is a new reference, as from tether_context_object. */
TETHER_API int tether_context_insert(tether_context *ctx, const char *entity, const char *id, tether_object **out);

/* tether_context_insert with values: keys[i] (an attribute name) is set to
 * values[i], for i below `count` (a key given twice: the later value). All
 * or nothing: every key, type and allowed value is checked as
 * tether_object_set checks one before anything changes, and a call that
 * fails (TETHER_E_NOT_FOUND for a key the entity does not have,
 * TETHER_E_TYPE, TETHER_E_INVALID...) inserts nothing. On success the insert
 * and its values are in the outbox, as one change. `keys` and `values` are
 * borrowed for the call (copied); both may be NULL when `count` is 0
 * (TETHER_E_MISUSE otherwise). Any thread. *out is a new reference, as from
 * tether_context_object. */
TETHER_API int tether_context_insert_values(tether_context *ctx, const char *entity, const char *id,
                                            const char *const *keys, const tether_value *values, size_t count,
                                            tether_object **out);

/* Deletes the record: a pending delete, conditional on the cached version
 * (its unsaved edits are dropped). A pending insert never sent is simply
 * dropped (reads then give TETHER_E_NOT_FOUND). Deleting twice is a no-op.
 * TETHER_E_NOT_CACHED if the object is not cached; TETHER_E_NOT_ALLOWED if the
 * spec does not allow deletes.
 *
 * The delete rules of the records referring to it apply at once, as one
 * unit with the delete: a delete refused (TETHER_E_NOT_ALLOWED for deny,
 * TETHER_E_TYPE when nullify would clear a required reference) changes
 * nothing, here or in the outbox. A save sends the referrers' cascade
 * deletes and nullify clearings only after the server has confirmed the
 * target's delete; while that delete is not saved (a conflict, an error)
 * they stay pending and unsent, each in the save report with the target's
 * status. When the delete is dropped (tether_object_rollback, or a save
 * under TETHER_MERGE_SERVER_WINS), what its rules changed is undone:
 * cascaded records come back with the change they had before, cleared
 * references are set back (other edits of those records kept); the save
 * counts them as discarded. This undo lives in the context's memory: after
 * a reopen, the rules' changes of a delete not yet saved still wait for it
 * at save, but rolling the delete back leaves them pending.
 *
 * The rules apply to what the server holds, not only to the cache: before a
 * save sends deletes, it lists the records the server holds that refer to
 * them (one filtered listing per inverse: an equality, or one-of, filter
 * on the reference attribute, through the connection), stores them, and
 * applies the rules to those not cached before: a deny among them refuses
 * the delete (it stays pending, reported with TETHER_E_NOT_ALLOWED, and
 * nothing of it is sent), cascade and nullify reach them (sent after the
 * delete, as above). A listing that fails leaves the delete pending and
 * unsent, reported with that listing's status. The delete call itself,
 * which works offline, sees the cache only. A host connection that does
 * not support the filter: the rules see the cache only. */
TETHER_API int tether_object_delete(tether_object *obj);

/* Drops the object's unsaved change, and the conflict its last save met;
 * values read as the server last sent them. An object with none: a no-op.
 * Rolling back a delete undoes what its delete rules changed (see
 * tether_object_delete). A record back from its change that refers to a
 * target known gone (deleted on the server, as this store learned or a
 * save of it did, or absent from its local store: the clean-up and the
 * target's rules left it to its own pending delete or edit) follows that
 * target's delete rule at once, as a new unsaved change: cascade deletes
 * it (its referrers following their rules), nullify and deny clear the
 * reference; so no reference to a deleted record is read or saved. A rule
 * that cannot apply (nullify of a required reference) leaves the reference,
 * logged. */
TETHER_API int tether_object_rollback(tether_object *obj);

/* tether_object_rollback of every object with an unsaved change. */
TETHER_API int tether_context_rollback(tether_context *ctx);

typedef enum tether_pending {
    TETHER_PENDING_NONE = 0,    /* nothing unsaved */
    TETHER_PENDING_INSERT = 1,  /* a new record, not yet on the server */
    TETHER_PENDING_UPDATE = 2,  /* values set here, not yet on the server */
    TETHER_PENDING_DELETE = 3   /* deleted here, not yet on the server */
} tether_pending;

/* The object's unsaved change. */
TETHER_API int tether_object_pending(tether_object *obj, tether_pending *out);

/* The attributes a pending insert or update sets (a delete sets none), in
 * model order: the count, then each one's name (borrowed: valid until the
 * context closes; TETHER_E_NOT_FOUND past the end). */
TETHER_API int tether_object_changed_key_count(tether_object *obj, size_t *out);
TETHER_API int tether_object_changed_key_at(tether_object *obj, size_t index, const char **out);

/* The value of `key` as the server last confirmed it, whatever is pending
 * (peek gives the pending one). TETHER_E_NOT_CACHED for a pending insert or
 * an object not cached. Free *out with tether_value_free. */
TETHER_API int tether_object_committed(tether_object *obj, const char *key, tether_value *out);

/* How many objects have unsaved changes (*out 0: none). */
TETHER_API int tether_context_change_count(tether_context *ctx, size_t *out);

/* The objects with unsaved changes (inserts, updates and deletes), in the
 * order they were first changed, as a results handle of type
 * TETHER_RESULT_OBJECTS: read it as a fetch's (tether_results_count,
 * tether_results_object_at); tether_object_pending says each one's change
 * and tether_object_changed_key_at its keys. A snapshot: later edits and
 * saves do not change it. Owned: free *out with tether_results_free. */
TETHER_API int tether_context_changes(tether_context *ctx, tether_results **out);

/* ---------------------------------------------------------------- observers */

/* Called with status TETHER_OK each time the observed key's value changes
 * (a refresh or fetch landed with a different value, or the record was
 * deleted on the server); with an error status (TETHER_E_NETWORK,
 * TETHER_E_SERVER, TETHER_E_PROTOCOL...) each time a background refresh of
 * the object failed, the cached value staying as it was; once with
 * TETHER_E_NOT_FOUND when a refresh finds that the server has no such record
 * and none was ever cached (a get of a wrong id: no value will come); and
 * exactly once more, last, with TETHER_E_CANCELLED when the observer is cancelled or its
 * context closes: free userdata then. `obj` and `key` (the key as it was observed) are borrowed
 * for the call; retain `obj` to keep it. An observer holds its object. */
typedef void (*tether_observer_cb)(tether_object *obj, const char *key, int status, void *userdata);

/* Observes `key` of `obj`. `key` is an attribute name, or its peek form: the
 * name followed by "Peek" (observers of "Client" and "ClientPeek" are told
 * alike). *out (may be NULL) is the observer, owned by the library: it stays
 * valid until its final callback has returned, and then the library drops
 * it, its callback and every reference to userdata. */
TETHER_API int tether_object_observe(tether_object *obj, const char *key, tether_observer_cb callback,
                                     void *userdata, tether_observer **out);

/* Cancels an observer (of a key, or of tether_context_is_online): ends the
 * registration (not a handle the caller owns). After it returns, the observer's callback runs only
 * once more, with TETHER_E_CANCELLED. Called outside any Tether callback, it
 * first waits for a call of this observer in progress on another thread to
 * return; called from inside a callback it does not wait (so two callbacks
 * cancelling each other's observers cannot deadlock), and the call in progress
 * may still be running when it returns. TETHER_E_HANDLE if it was already
 * cancelled. */
TETHER_API int tether_observer_cancel(tether_observer *observer);

/* ---------------------------------------------------------------- fetch */

typedef enum tether_phase {
    TETHER_PHASE_CACHED = 1,  /* what the cache holds; more will follow */
    TETHER_PHASE_FINAL = 2,   /* the last callback of the fetch */
    TETHER_PHASE_LIVE = 3     /* a live fetch's answer: after the CACHED one
                                 its policy gives, the answer a FINAL would
                                 be (status and all: on an error, the
                                 cache's), then again each time it changes,
                                 with what moved (tether_results_change_count;
                                 a row changed when its version did, so a
                                 record written again unchanged tells
                                 nothing). A live fetch ends only when
                                 cancelled (or its context closes): its
                                 FINAL is TETHER_E_CANCELLED. */
} tether_phase;

typedef enum tether_cache_policy {
    /* A CACHED callback with the cache's answer, then a FINAL one with the
     * server's answer merged into the cache. */
    TETHER_POLICY_CACHE_THEN_SERVER = 0,
    /* One FINAL callback from the cache; no network. */
    TETHER_POLICY_CACHE_ONLY = 1,
    /* One FINAL callback with the server's answer. */
    TETHER_POLICY_SERVER_ONLY = 2,
    /* One FINAL callback: the cache's answer if the cache can answer, else
     * the server's. The cache can answer once the entity is synced (see
     * "Sync" at tether_fetch_start) and holds a match: before, it holds
     * only what earlier answers happened to bring (one page, one get), so
     * the server is asked, as CACHE_THEN_SERVER's server phase would. An
     * empty answer of a synced entity is also asked of the server (a sync:
     * cheap when nothing changed). A local entity's cache always answers. */
    TETHER_POLICY_CACHE_ELSE_SERVER = 3
} tether_cache_policy;

/* What a fetch answers (tether_fetch_options.result_type); another value
 * is refused with TETHER_E_INVALID. */
typedef enum tether_result_type {
    TETHER_RESULT_OBJECTS = 0,  /* objects, with their values */
    TETHER_RESULT_IDS = 1,      /* ids only: no values are read; an object is
                                   made when tether_results_object_at asks */
    TETHER_RESULT_COUNT = 2,    /* how many match (after offset, at most
                                   limit): tether_results_count; no rows. The
                                   server counts without sending records
                                   (Kinto: HEAD, Total-Records) where it can
                                   filter the whole predicate; the cache
                                   with COUNT(*) */
    TETHER_RESULT_VALUES = 3    /* the values of chosen attributes
                                   (`properties`), read with
                                   tether_results_value_at; no objects are
                                   made unless asked for */
} tether_result_type;

/* Called as records arrive from the server, at most every 100 ms and
 * always for the listing's last page (a fetch stopped at its limit may end
 * without it), on the thread that gets the fetch's callbacks, with the
 * fetch's userdata:
 * `received` counts every record the server sent in this fetch (matching
 * or not, deletions included), `total` is how many the listing holds if
 * the server said, else -1. Never after the FINAL callback. Cancelling the
 * task from inside it works as from any callback. */
typedef void (*tether_progress_cb)(tether_task *task, int64_t received, int64_t total, void *userdata);

/* Version 2 added predicate, arguments and argument_count; version 3 offset
 * and server_query; version 4 result_type, properties, batch_size and
 * progress; version 5 live; version 6 related_owner and related_name.
 * Older structs are still accepted (their later fields take the
 * defaults). */
#define TETHER_FETCH_OPTIONS_VERSION 6

typedef struct tether_fetch_options {
    unsigned int version;        /* TETHER_FETCH_OPTIONS_VERSION */
    const char *entity;          /* entity name (required, unless
                                    related_owner is set) */
    const char *sort;            /* attribute names, comma-separated, "-" for
                                    descending, e.g. "-Date,Change"; NULL: none.
                                    Per key, ascending: null first (also a
                                    value of another type than the
                                    attribute's, or none), then numbers and
                                    booleans by value, then text by Unicode
                                    scalar values; ties by id, ascending
                                    (see "Sort order" below). The cache's
                                    answers and the server's alike: every
                                    policy gives the same records in the same
                                    order, with a limit too (the server is
                                    asked to sort by id alone, whatever the
                                    keys; with keys and a limit, every
                                    matching record is read and the cut made
                                    here). NULL: by id alone, in every
                                    policy. A sync's or whole listing's
                                    answer is read from the store at its
                                    end (by id: its primary key, not a
                                    sort of the objects), and its objects
                                    (without a batch size) are made as the
                                    host reads them (tether_results_object_at),
                                    their values read from the store then.
                                    A filtered or limited listing's objects
                                    come in the server's order by id, which
                                    one pass checks (sorted only if it is
                                    not). */
    int64_t limit;               /* at most this many objects; 0: no limit */
    tether_cache_policy policy;  /* default TETHER_POLICY_CACHE_THEN_SERVER */
    /* Version 2: */
    const char *predicate;       /* which records; NULL: all. See below. */
    const tether_value *arguments;  /* the values of $1, $2… (borrowed for the
                                    call): TEXT (`text`, `length` bytes, may
                                    hold NUL), INTEGER, REAL, BOOLEAN or NULL */
    size_t argument_count;       /* exactly as many as the predicate uses */
    /* Version 3: */
    int64_t offset;              /* skip this many results (in sort order)
                                    first; 0 to 2^31-1 */
    const char *server_query;    /* NULL, or a query in the server's own
                                    language, used as given for the server
                                    phase instead of the predicate's filters
                                    (Kinto: query parameters, e.g.
                                    "in_Status=1,2&_since=42"), percent-
                                    encoded printable ASCII. The FINAL answer
                                    is then the server's as it gives it (with
                                    sort, offset and limit). A limit in it is
                                    a limit: Kinto's "_limit=N" (to Kinto a
                                    page size) gives the server's first N
                                    records in its order, however many pages
                                    hold them; offset and limit then cut
                                    those N, and a count counts at most N.
                                    The predicate still selects from the
                                    cache, for the CACHED phase, cache-only
                                    fetches and CACHE_ELSE_SERVER's cache
                                    answer. A live
                                    fetch with a server query is refused
                                    (TETHER_E_INVALID): a live fetch follows
                                    the cache, which cannot answer the
                                    server's own query, so its answers
                                    would change meaning after the first.
                                    Records a query makes partial (Kinto:
                                    "_fields=") never write what they lack:
                                    one of the version cached keeps the
                                    cached values for its other fields, any
                                    other leaves the cache as it was (its
                                    object is in the answer, as cached or
                                    not cached), until a sync brings it. */
    /* Version 4: */
    tether_result_type result_type;  /* default TETHER_RESULT_OBJECTS */
    const char *properties;      /* TETHER_RESULT_VALUES: attribute names,
                                    comma-separated; NULL: every attribute.
                                    Must be NULL for other result types. */
    size_t batch_size;           /* 0: the results hold their objects. n: they
                                    hold ids, and make objects n at a time as
                                    rows are read (one store query per
                                    batch), keeping only the batch of the
                                    last row read: iterating a very large
                                    answer keeps memory flat. An OBJECTS or
                                    VALUES answer from the cache holds each
                                    row's place in the store (its rowid: 4
                                    or 8 bytes a row, whatever the ids), so
                                    while the store changes during the
                                    iteration: the answer's count and order
                                    stay the fetch's; a row's values (and
                                    its object's, if not in memory) are read
                                    when its batch is, so a record changed
                                    since reads as changed; a record deleted
                                    from the store since (a sync, a saved
                                    delete) or stored again after a deletion
                                    is TETHER_E_NOT_FOUND at its index (for
                                    object_at, id_at and value_at); records
                                    stored since are not in the answer. */
    tether_progress_cb progress; /* NULL: none */
    /* Version 5: */
    int live;                    /* nonzero: keep the fetch live. After its
                                    answer it answers again (PHASE_LIVE)
                                    whenever records it matches are inserted,
                                    changed or deleted in the context - by a
                                    sync, another fetch, a get's refresh, and
                                    another client's changes on the server
                                    (see "Live data": the context's periodic
                                    sync, PostgreSQL's pushed changes,
                                    tether_context_changed) - coalesced: at most one answer waits to be
                                    delivered, and it covers every change
                                    since the one before. It converges:
                                    whatever the order of its own listing
                                    and other writes (another fetch's
                                    pages, saves, refreshes), its last
                                    answer is the query over the store once
                                    every change has landed - a change made
                                    while its server phase runs is looked
                                    at after its first answer. Applying each
                                    answer's changes to the answer before
                                    gives it. */
    /* Version 6: */
    tether_object *related_owner; /* with related_name: fetch a to-many
                                    relationship, the records referring to
                                    this object (borrowed for the call).
                                    The entity is the relationship's
                                    (`entity` may be NULL; if given it must
                                    match); a predicate narrows it further. */
    const char *related_name;    /* the to-many's name on the owner's entity
                                    (tether_entity_relationship_at) */
} tether_fetch_options;

/* Predicates, in Core Data's format (in part):
 *
 *     Status == 'pending' AND (User BEGINSWITH[c] $1 OR #205 IN {3, 5})
 *
 * Keys: an attribute name, any name in backquotes (`two words`), or a code
 * (#205); key paths through relationships (Client.Owner) work in
 * tether_object_peek and _get, not yet in predicates. Values: 'text' or "text" (escapes \n \t \r \0, and \ before any
 * other character gives that character), integers, reals, true/false
 * (YES/NO), nil (NULL), and $1, $2... from `arguments`, so that nothing
 * needs quoting. Comparisons: == (=), != (<>), <, <= (=<), >, >= (=>),
 * IN {a, b}, BETWEEN {low, high}, and on text BEGINSWITH, ENDSWITH,
 * CONTAINS, LIKE, each with [c] (case-insensitive), [d] (diacritic-
 * insensitive) or [cd]. AND (&&), OR (||), NOT (!), parentheses,
 * TRUEPREDICATE, FALSEPREDICATE. Keywords are case-insensitive.
 *
 * One meaning for the cache, the server and memory (what the server cannot
 * filter exactly is fetched more broadly and filtered here):
 * - Null: a null value, a field the record lacks, and a value the server
 *   sent with another type than the attribute's (a "misfit": text in an
 *   integer attribute, 2^63 or more in any, an integer a double cannot hold
 *   exactly in a real attribute; an integer it can hold is a real's value)
 *   are all null. A comparison with null is false, except == nil, != nil,
 *   and != a value, which is true for null (Core Data's rule). NOT negates
 *   that two-valued answer, so NOT (n > 3) holds for a null n.
 * - Numbers compare by exact value, integers with reals too: no rounding
 *   through a double (2^53 + 1 is not equal to 2^53 as a real, nor below
 *   it). A real against an integer attribute (age < 40.5) is accepted and
 *   compared exactly; age == 40.5 matches nothing. An integer literal no
 *   int64 holds is exact too: n > -9223372036854775809 holds for every
 *   integer, r == 18446744073709551617 for no real (no double is 2^64 + 1),
 *   r == 18446744073709551616 for 2^64. A literal with a point or an
 *   exponent is a real, the nearest double; one beyond a double's range
 *   (1e309, or as many digits) is refused. Booleans: false < true.
 * - Text compares by Unicode scalar values (UTF-8 byte order), as written:
 *   no normalization ("e" + U+0301 is not U+00E9 unless [d]).
 *   [c] replaces each scalar by its Unicode full lowercase mapping (the
 *   Swift runtime's Unicode version; no locale and no context: "SS" is not
 *   "ß", "Σ" is always "σ", "İ" is "i" + U+0307); not case folding, so "ß"
 *   stays "ß". [d] decomposes canonically (NFD) and removes every scalar
 *   whose canonical combining class is not 0 ("é" is "e"; "ø", which has no
 *   decomposition, stays). [cd] does [c] then [d]. Both apply to the value
 *   and to the operand.
 * - On a non-text attribute, [c] and [d] are accepted and ignored (age
 *   ==[c] 41 is age == 41), as NSPredicate does: they change only how text
 *   compares, so a predicate written for Core Data works unchanged.
 *   BEGINSWITH, ENDSWITH, CONTAINS and LIKE on a non-text attribute are
 *   refused.
 * - BEGINSWITH '', ENDSWITH '' and CONTAINS '' hold for every text (not
 *   for null). IN {} holds for nothing (NOT of it for everything, null
 *   included). BETWEEN {low, high} is >= low AND <= high: with low > high,
 *   nothing.
 * - LIKE: '*' matches any run of scalars (none included), '?' exactly one
 *   scalar (after folding), and '\' makes the next character literal:
 *   LIKE 'a\*b' matches the text a*b only, 'a\?b' a?b, 'a\\b' a\b. In a
 *   LIKE literal, backslash escapes other than \n \t \r \0 reach the
 *   pattern as written; a pattern given as an argument is read the same
 *   (the C string "a\\*b"). A pattern ending in a lone '\' is refused.
 *   SQL's % and _ are not wildcards: a pattern holding either and no '*'
 *   or '?' (LIKE 'Fix%', which matches only the text Fix%) is logged at
 *   WARNING, once per predicate text, naming the attribute, not the value.
 * - JSON attributes test only == nil and != nil.
 *
 * Sort order (tether_fetch_options.sort), the same in every policy: per
 * key, ascending: null first (null, missing and misfits alike), then
 * numbers and booleans by exact value, then text by Unicode scalar values;
 * a JSON attribute sorts by its value's compact JSON text (object keys
 * sorted, no spaces) by bytes, so "[10]" < "[2]" < "{...}". Descending
 * reverses a key (null last). Ties go by id bytes, ascending, whatever the
 * keys' directions.
 *
 * The server is sent, as filters, only comparisons it evaluates with this
 * meaning, at most one per field (an attribute's == and IN conditions are
 * sent as one filter of their common values; its other conditions are
 * checked here). A count, or the cut of a limit, is the server's only when
 * it filters the whole predicate exactly; else the library counts and cuts
 * what the filtered listing holds. With Kinto: text == and IN (text
 * without a comma, or a control character, for IN) and boolean == are
 * exact; integer comparisons (not !=) narrow the listing, which is then
 * filtered here (Kinto takes 5.0 as 5, and orders null and text below
 * numbers); nothing else is sent (real values, text order, !=, BEGINSWITH
 * and the rest, [c] and [d]). A name goes to Kinto only if made of ASCII
 * letters, digits and '_' (not last_modified; a dot would be a path into an
 * object), always with its operator's prefix (eq_min_age=18), so that no
 * name reads as one of Kinto's operators. A host connection is sent no
 * filters.
 *
 * NOT NOT cancels and nested ANDs (ORs) merge; what is still nested deeper
 * than 16 levels of NOT, AND and OR is refused (SQLite's parser has a fixed
 * stack). A flat AND or OR may have any number of terms (10,000 work); a
 * predicate with more values than the store binds in one query (SQLite's
 * variable limit, 250,000 on most systems) is refused, at the column of
 * the first value past it.
 *
 * tether_fetch_start returns TETHER_E_INVALID for bad syntax, an unknown
 * key, a value of the wrong type, an argument count that does not match or
 * more values than the store binds;
 * tether_errmsg() says what, and the column where there is one (an argument
 * given but not used has none: the message names it). */

/* Fills `opts` with defaults for the given struct version. */
TETHER_API int tether_fetch_options_init(tether_fetch_options *opts, unsigned int version);

/* Called once per phase. `status` is TETHER_OK, a TETHER_E_* error (FINAL
 * only), or TETHER_E_CANCELLED (FINAL only). `message` is "" on success
 * (borrowed for the call).
 *
 * `results` is never NULL and is owned by the callee: free it with
 * tether_results_free, during the callback or any time later (it may
 * outlive the task; it dies when the context closes). It holds the objects in
 * result order; on a FINAL error, those of the cache (possibly none); when
 * cancelled, none. `task` is valid until the FINAL callback returns. */
typedef void (*tether_fetch_cb)(tether_task *task, tether_phase phase, int status, const char *message,
                                tether_results *results, void *userdata);

/* Starts a fetch. Records from the server are written to the store, one
 * transaction per page, before the FINAL callback; pages are followed until
 * the end or the limit.
 *
 * Sync: the first fetch of an entity that asks for all of it (no predicate,
 * limit, offset or server query) lists every record, removes from the store
 * those the server no longer has, and from then on the store keeps that
 * entity in sync: the server phase of every later fetch of it, whatever its
 * predicate, sort, limit or offset, asks only for what changed since
 * (changed and deleted records; nothing at all when nothing changed), and
 * the FINAL answer is the store's, brought up to date. The sync state is
 * kept in the store, so it outlives the context; if the server no longer
 * has the history since (or the entity's table had to change with its
 * spec) the fetch lists everything again. Before an entity is synced, a
 * fetch with a predicate, limit or offset gets its answer from the server,
 * filtered there where the server can; when that answer is complete (no
 * limit), records the store still holds as matching but the server did not
 * name are asked for by id, so that one changed or deleted there leaves the
 * store's answers too. A server query always asks the server exactly that.
 *
 * Snapshots: a listing of several pages is not one state of the server (a
 * record changed meanwhile may move to a page already read), so after its
 * last page (server queries apart) the fetch asks what changed since its
 * first page's version (Kinto: `_since` its ETag; 304 when nothing did),
 * stores it and puts it in the answer, then removes what the listing did
 * not see: a record that existed throughout is never removed. A catch-up
 * of several pages is followed by another, up to 3 in all; later changes
 * are the next sync's. What changed since a version cannot show history
 * rewritten behind a newer change (Kinto keeps the older last_modified a
 * restore puts back, so no `_since` listing names it), so against Kinto
 * every sync and whole listing (but one into a table that held no row of
 * the entity when it began: every row is then one of its pages, as the
 * server had it when listed) ends with a listing of ids and versions only
 * (`_fields=id,last_modified`, about 45 bytes a record, a request per 10,000
 * records at Kinto's default page size), compared with the store: records
 * that differ or that the store lacks are asked for by id and taken as the
 * server has them, older or not; those the server lacks leave the store,
 * their observers and live fetches told. A page older than the entity's
 * synced version (another fetch's newer listing landed first) is not
 * stored: that fetch answers from the cache. Over a host connection a sync
 * asks how many records the host holds instead; when that differs from the
 * store, or when what changed since our version names no change as recent
 * as the data set's version, the fetch lists everything again.
 *
 * A listing must move on: a next cursor (Kinto's Next-Page) that the
 * listing gave before, or a page that names a next cursor yet brings no
 * record or deletion the page before did not, ends the fetch with
 * TETHER_E_PROTOCOL naming the cursor, instead of paging forever.
 *
 * On success *out (may be NULL) is the task: it is
 * owned by the library, stays valid until its FINAL callback returns, and
 * then the library drops it, its callback and every reference to userdata.
 * Validation errors (unknown entity, bad sort key) are returned here, and
 * then no callback runs. */
TETHER_API int tether_fetch_start(tether_context *ctx, const tether_fetch_options *opts,
                                  tether_fetch_cb callback, void *userdata, tether_task **out);

/* Cancels a task. After it returns, the task's callback runs only once more,
 * FINAL with TETHER_E_CANCELLED; the request on the wire, if any, is
 * abandoned. Outside any Tether callback it first waits for a callback of the
 * task in progress on another thread to return; from inside a callback it
 * does not wait (see tether_observer_cancel). TETHER_E_HANDLE if the task
 * was already cancelled or its FINAL callback is under way: from the moment
 * the library starts delivering it (which may be a little before your
 * callback is entered) until it has returned, the task ends as that FINAL
 * says. Either way exactly one FINAL callback comes. */
TETHER_API int tether_task_cancel(tether_task *task);

/* ---------------------------------------------------------------- save */

/* A save's outcome, passed to its callback. Borrowed: valid only during the
 * callback (copy what you need; retain an object to keep it). */
typedef struct tether_save_report tether_save_report;

/* Version 1 is the first. */
#define TETHER_SAVE_OPTIONS_VERSION 1

typedef struct tether_save_options {
    unsigned int version;              /* TETHER_SAVE_OPTIONS_VERSION */
    int merge_policy;                  /* a tether_merge_policy; -1 (the
                                          default): the context's */
    tether_progress_cb progress;       /* optional: (task, changes answered,
                                          changes sent, userdata) after each
                                          server answer, before the final */
} tether_save_options;

/* Fills `opts` with defaults for the given struct version. */
TETHER_API int tether_save_options_init(tether_save_options *opts, unsigned int version);

/* Called exactly once when the save ends: `status` TETHER_OK when every change
 * was settled (saved, or dropped by TETHER_MERGE_SERVER_WINS); otherwise the
 * changes not saved stay pending and `status` says why: TETHER_E_CONFLICT if
 * any met a conflict (see the report), else the first failure's status
 * (TETHER_E_NETWORK, TETHER_E_SERVER, TETHER_E_AUTH, TETHER_E_INVALID for a
 * record the server's schema refused: its message names each field the
 * server names, as "FIELD: what is wrong", TETHER_E_NOT_ALLOWED...), and
 * TETHER_E_CANCELLED when cancelled or closed. `message` (borrowed) says how
 * many changes were not saved and why the first was not. `report` is never
 * NULL; after a cancel it is empty. `task` is valid until the callback
 * returns. */
typedef void (*tether_save_cb)(tether_task *task, int status, const char *message,
                               tether_save_report *report, void *userdata);

/* Saves every unsaved change of the context, asynchronously. Changes go in
 * the order objects were first changed, each only as its spec allows
 * (TETHER_E_NOT_ALLOWED for the others, which stay pending), and each
 * conditional: an insert only if the server has no record of its id, an
 * update or delete only if the server still has the version it was made
 * against. Kinto: PUT with If-None-Match: *, PATCH and DELETE with If-Match,
 * grouped in POST /v1/batch requests of as many as the server's
 * batch_max_requests (GET /v1/, read at open) allows, so in as few requests
 * as it allows, one after another.
 *
 * Before anything is sent, every insert is checked for its spec's required
 * fields: if one lacks a value, nothing is sent, every change stays pending,
 * and the save ends with TETHER_E_INVALID, its message naming the change and
 * the field ("jobs/j1 has no value for the required field \"Title\"").
 *
 * As the server answers each change, the store and the object take the
 * record as the server now has it (its version and any value it set), in
 * one transaction with the removal of the change from the outbox; a deleted
 * object leaves the context. A change edited again while it was on the wire
 * stays pending, now against the server's new version. A change the server
 * turns out to hold already (its answer was lost; the process was killed
 * before it could be recorded) is confirmed, never sent twice. The outbox
 * keeps what each write carried before it goes, so a change edited again
 * after such a write is not a conflict with that write: when the server holds
 * exactly what the earlier write made of the record, the change is sent again
 * against the server's version (whatever the merge policy); a record another
 * writer changed since is a conflict as ever. Conflicts go
 * as the merge policy says; a policy that writes again does so at most
 * twice, then reports.
 *
 * `opts` may be NULL (defaults). *out (may be NULL) is the task, as for
 * tether_fetch_start: valid until its callback returns, cancelled with
 * tether_task_cancel (changes already sent may still be applied by the
 * server; the next save finds out, and answers that arrive are still
 * recorded). With nothing to save the callback comes with TETHER_OK. */
TETHER_API int tether_save_start(tether_context *ctx, const tether_save_options *opts,
                                 tether_save_cb callback, void *userdata, tether_task **out);

/* Changes the save got the server to confirm, and changes it dropped for the
 * server's record (TETHER_MERGE_SERVER_WINS). Either out may be NULL. */
TETHER_API int tether_save_report_counts(tether_save_report *report, size_t *out_saved, size_t *out_discarded);

/* Changes not saved (still pending). */
TETHER_API int tether_save_report_failure_count(tether_save_report *report, size_t *out);

/* The failure at `index`: its object (borrowed for the callback), status and
 * message (borrowed). Each out may be NULL. */
TETHER_API int tether_save_report_failure_at(tether_save_report *report, size_t index, tether_object **out_obj,
                                             int *out_status, const char **out_message);

/* For a failure that is a conflict (status TETHER_E_CONFLICT): the version the
 * local change was made against (-1 for an insert), the server's version
 * (-1 if the server has no record: deleted there), and how many keys differ
 * between the local object and the server's record. TETHER_E_NOT_FOUND if
 * the failure is not a conflict. Each out may be NULL. */
TETHER_API int tether_save_report_conflict_at(tether_save_report *report, size_t index, int64_t *out_local_version,
                                              int64_t *out_server_version, size_t *out_key_count);

/* The name of the `key_index`th differing key of the conflict at `index`
 * (borrowed: valid until the context closes). */
TETHER_API int tether_save_report_conflict_key_at(tether_save_report *report, size_t index, size_t key_index,
                                                  const char **out);

/* The server's value of `key` in the conflict at `index` (the local one is
 * the object's peek). TETHER_E_NOT_FOUND if the server has no record.
 * Free *out with tether_value_free. */
TETHER_API int tether_save_report_server_value(tether_save_report *report, size_t index, const char *key,
                                               tether_value *out);

/* ---------------------------------------------------------------- results */

/* What `results` answers: the fetch's result type. */
TETHER_API int tether_results_type(tether_results *results, tether_result_type *out);

/* The number of rows in `results`; for TETHER_RESULT_COUNT, the count. */
TETHER_API int tether_results_count(tether_results *results, size_t *out);

/* Borrowed pointers from the functions below stay valid while `results`
 * does; with a batch size, only until a row of another batch is read
 * (tether_object_retain an object, or copy an id, to keep it longer).
 * Each gives TETHER_E_NOT_FOUND past the end, TETHER_E_MISUSE for a
 * TETHER_RESULT_COUNT answer (it has no rows). */

/* The object of the row at `index` (0 ≤ index < count), in result order,
 * for every result type but COUNT: made now for IDS and VALUES answers and
 * batches (the context still keeps one object per record). Borrowed. */
TETHER_API int tether_results_object_at(tether_results *results, size_t index, tether_object **out);

/* Up to `capacity` objects of the rows from `start` on, in result order,
 * into out[0..*out_count): each with its own reference, which the caller
 * frees with tether_object_free (they outlive `results`). For reading
 * a large answer in few calls. *out_count is less than `capacity` only at
 * the end (0 for start == count); TETHER_E_NOT_FOUND for start > count,
 * TETHER_E_MISUSE for a COUNT answer. On an error nothing is written and no
 * reference is taken. */
TETHER_API int tether_results_objects(tether_results *results, size_t start, tether_object **out, size_t capacity,
                                      size_t *out_count);

/* The id of the row at `index`: borrowed, NUL-terminated (an id holding
 * U+0000 reads cut short here; its object's tether_object_id does too). */
TETHER_API int tether_results_id_at(tether_results *results, size_t index, const char **out);

/* The value of attribute `key` (its name) in the row at `index` of
 * a TETHER_RESULT_VALUES answer, as fetched; owned by the caller: free it
 * with tether_value_free. TETHER_E_NOT_FOUND for an attribute the fetch did
 * not ask for; TETHER_E_MISUSE for other result types (read an object's
 * values with tether_object_peek). */
TETHER_API int tether_results_value_at(tether_results *results, size_t index, const char *key, tether_value *out);

/* How a live fetch's answer moved since its previous one (none for its
 * first answer or other phases), as NSFetchedResultsController tells it. */
typedef enum tether_change {
    TETHER_CHANGE_DELETE = 1,  /* a row of the previous answer left: old index */
    TETHER_CHANGE_INSERT = 2,  /* a row came: new index */
    TETHER_CHANGE_MOVE = 3,    /* a row moved: old and new index */
    TETHER_CHANGE_UPDATE = 4   /* a row's values changed, not its place among
                                  the rows that stayed: old and new index */
} tether_change;

/* How many changes of `kind` `results` carries. */
TETHER_API int tether_results_change_count(tether_results *results, tether_change kind, size_t *out);

/* The `i`th change of `kind` (0 ≤ i < its count), in index order: the row's
 * index in the previous answer (*out_old; SIZE_MAX for INSERT) and in this
 * one (*out_new; SIZE_MAX for DELETE). Either out may be NULL. Applying the
 * deletions (descending), then the insertions (ascending), with moves as a
 * deletion plus an insertion, turns the previous answer into this one. */
TETHER_API int tether_results_change_at(tether_results *results, tether_change kind, size_t i,
                                        size_t *out_old, size_t *out_new);

/* Frees `results` and its references to its objects. NULL is a no-op
 * (TETHER_OK); a dead handle gives TETHER_E_HANDLE. */
TETHER_API int tether_results_free(tether_results *results);

/* ---------------------------------------------------------------- host connections */

/* A context can talk to any server through a connection the host writes: the
 * library asks, the host answers. Each question is a tether_request handle
 * handed to tether_connection.request; the host reads it (tether_request_*
 * getters), builds the answer (tether_request_set_* and _add_*), and ends it
 * with tether_request_complete, exactly once, from any thread, at once or
 * later. Everything above the connection — the store, uniquing, peek and get,
 * coalescing, observers, the outbox, save and conflicts — is the library's,
 * as with Kinto.
 *
 * Threads: request and cancel are called on a thread of the connection's own,
 * one at a time, a request always before its cancel; they must not block (hand
 * the request to your own thread, or answer it at once if the answer is at
 * hand) and must not close the context.
 *
 * Every request ends exactly once for the library: with the host's answer, or
 * cancelled when the library no longer wants it (a task cancelled, a refresh
 * given up) or the context closes. The host is told of a cancel through
 * `cancel`; it still completes the request to release it (the call then returns
 * TETHER_E_CANCELLED and the answer is dropped). A request never completed
 * holds nothing up but itself: a task waiting on it can be cancelled, and
 * closing the context ends it (`cancel` is called for it, and its handle dies).
 * A request not completed within the context's timeout_ms ends as if the
 * server could not be reached (TETHER_E_NETWORK, "did not answer ... within
 * N ms"): `cancel` is called for it, and completing it later returns
 * TETHER_E_CANCELLED.
 * A request handle is dead (TETHER_E_HANDLE) once completed, and once its
 * context has closed; completing it twice gives TETHER_E_HANDLE. Strings a
 * request lends (entity, cursor, ids, fields) are valid until it is completed
 * or dead. */
typedef struct tether_request tether_request;

/* What a request asks. */
typedef enum tether_request_kind_t {
    TETHER_REQUEST_SERVER_INFO = 0, /* who the server is: answer with
                                       tether_request_set_server_info (at open) */
    TETHER_REQUEST_SPECS = 1,       /* every record type: tether_request_add_spec, one
                                       each (at open; a context whose server cannot be
                                       reached opens offline from its store when the
                                       request completes with TETHER_E_NETWORK) */
    TETHER_REQUEST_PAGE = 2,        /* a page of an entity's records, in the order its
                                       sort keys say, after its cursor, at most its
                                       limit in all: tether_request_add_record each,
                                       then tether_request_set_page. The library
                                       filters and sorts what a host lists itself: it
                                       asks for the id field alone, ascending, which
                                       the host must give as Tether orders ids (by
                                       their UTF-8 bytes) where a limit cuts the
                                       listing, for its cut to be the cache's (a
                                       server query's keys are the fetch's). A listing
                                       must move on: a next cursor given before in it,
                                       or a page that names a next cursor but brings
                                       no record or deletion the page before did not,
                                       ends its fetch with TETHER_E_PROTOCOL naming
                                       the cursor */
    TETHER_REQUEST_COUNT = 3,       /* how many records the entity has:
                                       tether_request_set_count */
    TETHER_REQUEST_RECORDS = 4,     /* the records of these ids (absent: the server has
                                       none): tether_request_add_record each, and
                                       tether_request_set_page for a next cursor */
    TETHER_REQUEST_WRITE = 5        /* writes to apply, each conditional:
                                       tether_request_set_outcome for each */
} tether_request_kind_t;

/* A write's kind (TETHER_REQUEST_WRITE). Every write is conditional, so that
 * one sent twice (a retry, a save again after a crash) is never applied twice. */
typedef enum tether_write_kind {
    TETHER_WRITE_CREATE = 0,  /* only if no record has the id: else a CONFLICT */
    TETHER_WRITE_PATCH = 1,   /* these fields only (null: removed), only if the
                                 record's version is if_version */
    TETHER_WRITE_REPLACE = 2, /* every field, only if the version is if_version */
    TETHER_WRITE_DELETE = 3   /* only if the version is if_version (none: any) */
} tether_write_kind;

/* What became of a write. */
typedef enum tether_write_outcome {
    TETHER_OUTCOME_WRITTEN = 0,  /* applied: record_json is the record as it now is */
    TETHER_OUTCOME_DELETED = 1,  /* applied, or the record was gone already */
    TETHER_OUTCOME_CONFLICT = 2, /* not applied: the record is another version, or
                                    exists (create); record_json is the record the
                                    host has, NULL if it has none */
    TETHER_OUTCOME_FAILED = 3    /* not known to be applied: status and message say why */
} tether_write_outcome;

#define TETHER_CONNECTION_VERSION 1

typedef struct tether_connection {
    unsigned int version;  /* TETHER_CONNECTION_VERSION */
    /* Names the server and the data set (required, copied at open): a store
     * is tied to it, and opening it with another identity gives
     * TETHER_E_STORE. Never put credentials in it. */
    const char *identity;
    /* A new request (required). */
    void (*request)(tether_request *request, void *userdata);
    /* The library no longer wants the request's answer (may be NULL). */
    void (*cancel)(tether_request *request, void *userdata);
    /* Called once, when the context has closed and every request has ended
     * (or when the open fails): free userdata here (may be NULL). */
    void (*release)(void *userdata);
    void *userdata;
} tether_connection;

/* Fills `connection` with defaults (all NULL) for the given struct version.
 * TETHER_E_MISUSE if `connection` is NULL or the version is unknown. */
TETHER_API int tether_connection_init(tether_connection *connection, unsigned int version);

/* Opens a context on a host-written connection, as tether_context_open_kinto
 * does on Kinto: asks the server info and the specs (each a request to the
 * host, so answer them from another thread than the one calling this, or at
 * once), builds the model, opens the store and any local stores.
 * opts->timeout_ms bounds each request (the context option, not one of the
 * connection's: it means what it means for Kinto, how long one answer may
 * take). A server info or specs
 * request not completed in time fails the open with TETHER_E_NETWORK, or
 * opens offline from a store holding a model, as an unreachable Kinto does.
 * There is no context to close before this returns: to give up an open, the
 * host completes the request it waits on with an error (TETHER_E_CANCELLED:
 * this then returns TETHER_E_CANCELLED), from any thread; a host that does
 * nothing is given up after timeout_ms. The connection's release is called
 * once in every case: after the context closes, or before this returns an
 * error. *out is owned by the caller: close it with tether_context_close. */
TETHER_API int tether_context_open_host(const tether_context_options *opts, const tether_connection *connection,
                                        tether_context **out);

/* The request's kind. */
TETHER_API int tether_request_kind(tether_request *request, tether_request_kind_t *out);

/* PAGE, COUNT, RECORDS: the entity's name and its route (the name, unless the
 * spec gave another). Borrowed. Each out may be NULL. TETHER_E_MISUSE for
 * another kind. */
TETHER_API int tether_request_entity(tether_request *request, const char **out_name, const char **out_route);

/* PAGE, RECORDS: where the listing goes on (a cursor the host gave with
 * tether_request_set_page), NULL for its first page. Borrowed. */
TETHER_API int tether_request_cursor(tether_request *request, const char **out);

/* PAGE: at most this many records in all (0: no limit). A host may send
 * fewer per page, with a next cursor. */
TETHER_API int tether_request_limit(tether_request *request, int64_t *out);

/* PAGE: only what changed after this version of the data set (a version the
 * host gave with tether_request_set_page), deletions included
 * (tether_request_add_deleted); *out_has 0: the records as they stand. It
 * must name every record changed after it, one put back with an older
 * version included: the library checks a host's sync by a count only. A host
 * that no longer has that history completes with TETHER_E_EXPIRED; one that
 * never gives versions is never asked. Either out may be NULL. */
TETHER_API int tether_request_since(tether_request *request, int64_t *out, int *out_has);

/* PAGE, COUNT: the fetch's raw server query (tether_fetch_options.server_query),
 * in the host's own language, or NULL. Borrowed. The library reads no limit
 * in it: a host whose query language has one ends its listing there (no
 * next cursor), and counts no more. */
TETHER_API int tether_request_query(tether_request *request, const char **out);

/* PAGE: the order, field by field: how many keys, and each one's field name
 * (borrowed) and direction. */
TETHER_API int tether_request_sort_count(tether_request *request, size_t *out);
TETHER_API int tether_request_sort_at(tether_request *request, size_t index, const char **out_field,
                                      int *out_descending);

/* RECORDS: the ids asked for (borrowed). */
TETHER_API int tether_request_id_count(tether_request *request, size_t *out);
TETHER_API int tether_request_id_at(tether_request *request, size_t index, const char **out);

/* WRITE: the writes, in order: each one's kind, entity (borrowed), record id
 * (borrowed), fields as a JSON object (borrowed; without the id and version
 * fields; "{}" for a delete) and the version it is conditional on (*out_has_version
 * 0: none). Each out may be NULL. */
TETHER_API int tether_request_write_count(tether_request *request, size_t *out);
TETHER_API int tether_request_write_at(tether_request *request, size_t index, tether_write_kind *out_kind,
                                       const char **out_entity, const char **out_id, const char **out_fields_json,
                                       int64_t *out_if_version, int *out_has_version);

/* The answers. Each returns TETHER_E_MISUSE for a request of another kind,
 * TETHER_E_INVALID for text that is not what it should be (a record that is
 * not a JSON object...), TETHER_E_CANCELLED once the library no longer wants
 * the answer (stop, and complete the request), TETHER_E_HANDLE once it is
 * completed. Strings are copied. */

/* SERVER_INFO: the server's name and version. */
TETHER_API int tether_request_set_server_info(tether_request *request, const char *name, const char *version);

/* SPECS: one record type: its name (an entity of the model), the field that
 * identifies a record, the field holding its version (an integer the host
 * bumps on each change; updates and deletes are conditional on it), its
 * fields as a JSON schema (as a Kinto collection's: "properties" with types,
 * "required", "enum", "x-tether-code", "x-tether-to"...) and the operations it
 * allows (TETHER_OP_* bits). */
TETHER_API int tether_request_add_spec(tether_request *request, const char *name, const char *id_field,
                                       const char *version_field, const char *schema_json, unsigned int operations);

/* PAGE, RECORDS: a record, as a JSON object with the spec's id and version
 * fields. Records that do not fit the spec are kept as the library keeps
 * Kinto's (nothing lost); one without a usable id (none, not text, empty) is
 * left out of the page with a diagnostic (see tether_context_diagnostic_count),
 * the rest of the page taken. */
TETHER_API int tether_request_add_record(tether_request *request, const char *record_json);

/* PAGE, RECORDS: a record given field by field: `count` names and values
 * (TEXT and JSON by their length; JSON's text parsed), as
 * tether_request_add_record takes one JSON object. */
TETHER_API int tether_request_add_record_values(tether_request *request, const char *const *names,
                                                const tether_value *values, size_t count);

/* PAGE with a since version: a record deleted since. */
TETHER_API int tether_request_add_deleted(tether_request *request, const char *id);

/* PAGE, RECORDS: the cursor of the next page (NULL: this is the last), the
 * data set's version when answered (-1: none; give one and later fetches ask
 * only for what changed since), and how many records the listing holds in
 * all (-1: not known). */
TETHER_API int tether_request_set_page(tether_request *request, const char *next_cursor, int64_t version,
                                       int64_t total);

/* COUNT: how many. */
TETHER_API int tether_request_set_count(tether_request *request, int64_t count);

/* WRITE: what became of the write at `index` (see tether_write_outcome;
 * record_json as it says, status and message for FAILED: a negative
 * TETHER_E_* code). A write left without an outcome fails with
 * TETHER_E_PROTOCOL, and stays pending. */
TETHER_API int tether_request_set_outcome(tether_request *request, size_t index, tether_write_outcome outcome,
                                          const char *record_json, int status, const char *message);

/* Ends the request: status TETHER_OK delivers the answer built, a negative
 * TETHER_E_* code fails it with `message` (may be NULL). Any other status
 * (positive, or a code this version does not know) fails it too, as
 * TETHER_E_PROTOCOL with a message naming the status (logged at WARNING), and
 * returns TETHER_E_INVALID to say the status was bad. The handle is dead
 * afterwards, whatever this returns: TETHER_E_CANCELLED if the library had
 * cancelled it or it timed out (nothing delivered), TETHER_E_HANDLE if it was
 * dead already. */
TETHER_API int tether_request_complete(tether_request *request, int status, const char *message);

/* ---------------------------------------------------------------- Perforce */

/* Perforce's own words: its spec definitions ("specdef" strings), read
 * without a server, and a host connection's spec given as one. */

typedef struct tether_specdef tether_specdef;     /* a parsed Perforce spec definition */

/* One field of a Perforce spec definition, in Perforce's own words, as
 * tether_specdef_field_at fills it. Every string is borrowed from the
 * tether_specdef: valid until tether_specdef_free. Strings are NULL when
 * the field has none; numbers are always given. */
typedef struct tether_specdef_field {
    const char *tag;     /* the field's name, e.g. "Client" */
    int code;            /* Perforce's code, e.g. 301; the field's index
                            (0, 1, ...) when the specdef gives none; 0 for
                            `code:NNN`, Perforce's AutoId (a code the server
                            gives when the spec is saved), which several
                            fields may share */
    const char *type;    /* word, wlist, select, line, llist, date, text or
                            bulk ("word" when the specdef gives none) */
    const char *opt;     /* optional, default, required, once, always, empty
                            or key: `z` makes it empty; without an opt the
                            old flags decide (rq: required, ro: always,
                            rq;ro: key); opt:required with ro is key */
    int key;             /* 1 for the field that names a record, else 0: the
                            opt key field; in specs without one (job, protect,
                            triggers, typemap, spec, license, hotfiles, ldap)
                            the first required field (a job's 101 Job, the
                            spec of specs' Fields, ldap's Name), else the
                            first field (the one-record tables: protect's
                            SubPath, Triggers, TypeMap, License, HotFiles) */
    int len;             /* 0 unless given */
    int words;           /* 1 unless given; at most 10 */
    int maxwords;        /* 0 unless given */
    int seq;             /* 0 unless given */
    const char *fmt;     /* L, R, I or C; NULL for Perforce's normal (none
                            given, or one Perforce does not know) */
    const char *open;    /* "isolate" or "propagate" (streams); NULL: none */
    const char *pre;     /* the preset, e.g. "$user" */
    const char *val;     /* the values, joined by "/" as in the specdef */
    size_t val_count;    /* how many values `val` holds (0 when NULL) */
} tether_specdef_field;

/* Parses `text`, a Perforce spec definition ("specdef") such as the
 * `specdef` field of `p4 -ztag client -o`, as Perforce's own decoder
 * (SpecElem::Decode, support/specdef.cc) reads it: fields of a tag and
 * ";"-separated attributes, each ending at ";;" (the last may end with one
 * ";" or nothing); attributes in any order, numbers read as C's atoi,
 * unknown attributes and an unknown fmt ignored; codes not checked (fields
 * may share one). Needs no server and no context. On success *out is a new
 * handle owned by the caller: free it with tether_specdef_free.
 * TETHER_E_INVALID, with a message naming the field, for an unknown type,
 * opt or open (as Perforce refuses them), and, beyond Perforce, for what no
 * form could address: an empty definition, a field with attributes but no
 * tag, a tag holding a space, a control character or ':', a tag given
 * twice. Given to tether_request_add_specdef, fields whose code the model
 * cannot keep (0, or one given twice) get codes of their own, each with a
 * diagnostic (tether_context_diagnostic_at); the others keep Perforce's.
 * Any thread. */
TETHER_API int tether_specdef_parse(const char *text, tether_specdef **out);

/* The spec of specs: `form_json`, a JSON object of the form `p4 spec -o
 * TYPE` or `p4 jobspec -o` shows, as tagged output gives it (`p4 -ztag -Mj
 * jobspec -o`: "Fields0", "Fields1", ...) or with each list whole
 * ("Fields": [...] as P4Python's fetch_jobspec gives, or one text a line
 * each), into the definition it describes: Fields lines `code name type
 * length opt` (`NNN` is code 0), Words and Maxwords `name count`, Formats
 * `name order format`, Values `name a/b/c`, Presets `name value` (in double
 * quotes if it has spaces), Openable `name isolate|propagate`; Comments and
 * other keys ignored. *out is a new handle, as tether_specdef_parse gives:
 * tether_specdef_text is the specdef to give tether_request_add_specdef.
 * TETHER_E_INVALID, naming the line: not a JSON object, no Fields, a line
 * of the wrong length, an unknown type, opt or open, a line naming a field
 * Fields lacks, a ';' (a specdef cannot carry one). Any thread. */
TETHER_API int tether_specdef_from_form(const char *form_json, tether_specdef **out);

/* The definition as a specdef string, written as Perforce's Spec::Encode
 * writes one (a code left out where it is the field's index; opt empty as
 * "opt:default;z"); tether_specdef_parse reads it into the same fields.
 * Borrowed: valid until tether_specdef_free. Any thread. */
TETHER_API int tether_specdef_text(tether_specdef *specdef, const char **out);

/* How many fields `specdef` has, in the definition's order. Any thread. */
TETHER_API int tether_specdef_field_count(tether_specdef *specdef, size_t *out);

/* The field at `index` (0 ≤ index < count) into *out. Its strings are
 * borrowed: valid until tether_specdef_free. TETHER_E_NOT_FOUND past the
 * end. Any thread. */
TETHER_API int tether_specdef_field_at(tether_specdef *specdef, size_t index, tether_specdef_field *out);

/* Frees `specdef` and the strings its fields lent out. NULL is a no-op
 * (TETHER_OK); a handle already freed gives TETHER_E_HANDLE. Any thread,
 * but not while another thread reads the same handle's strings. */
TETHER_API int tether_specdef_free(tether_specdef *specdef);

/* A host connection's answer (see tether_request above).
 * SPECS: a record type as a Perforce server describes it: a specdef string
 * (the `specdef` field of `p4 -ztag client -o`; see tether_specdef_parse),
 * each field keeping Perforce's code, list fields (wlist, llist) one list
 * value, a select's values the allowed ones. Its records are then taken as
 * Perforce's tagged output gives them: a list field's items as View0,
 * View1, ... are folded into one list, View. Perforce has no version field:
 * give each record a "tether_version" (an integer that changes when the
 * record does). TETHER_E_INVALID for a malformed specdef, naming the field. */
TETHER_API int tether_request_add_specdef(tether_request *request, const char *name, const char *specdef,
                                          unsigned int operations);

/* ---------------------------------------------------------------- logging */

/* How much a log message matters. A hook asks for every message up to its
 * level: TETHER_LOG_INFO gives errors, warnings and INFO messages. */
typedef enum tether_log_level {
    TETHER_LOG_OFF = 0,      /* no messages (as a maximum level only) */
    TETHER_LOG_ERROR = 1,    /* the library failed in a way no status reports */
    TETHER_LOG_WARNING = 2,  /* trouble: a request that failed (server unreachable,
                                5xx after its retries), a context opened offline,
                                going offline or back online, a refresh that failed, a spec left out of the
                                model, an SQL statement slower than 100 ms */
    TETHER_LOG_INFO = 3,     /* what changed: a store opened, a model built and
                                tables migrated, a context opened, a save's
                                counts, a request retried (and its delay), the
                                server's Backoff */
    TETHER_LOG_DEBUG = 4     /* each HTTP request (method, path and query,
                                status, bytes, time), each page fetched, each
                                fetch's end, each failed save's record */
} tether_log_level;

/* A log hook. `level` is the message's (never above the hook's maximum);
 * `category` one of "http", "sync", "store", "save", "migration", "context"
 * (more may come); `message` one line of UTF-8 without a trailing newline.
 * Both strings are borrowed for the call only: copy what you keep.
 *
 * What messages say: never credentials (no Authorization header, no password,
 * no user info of a URL: requests are named by path and query, without scheme
 * or host), and no record values above TETHER_LOG_DEBUG. At DEBUG a request's
 * query (filter values, record ids) and a failed save's record id and server
 * message (which may quote a value) appear.
 *
 * Threads: called on whichever thread logs: the library's own threads (the
 * network thread, a context's worker) or a host thread inside a tether_* call.
 * Calls are serialized process-wide: never two at the same time, so the hook
 * needs no lock of its own. It runs while the library may hold its internal
 * locks: keep it short, and do not call any tether_* function from it
 * (tether_log_set fails there with TETHER_E_BUSY; a message the hook's own
 * thread would log meanwhile is dropped). */
typedef void (*tether_log_callback)(tether_log_level level, const char *category,
                                    const char *message, void *userdata);

/* Installs the process-wide log hook: `callback` gets every message up to
 * `max_level`, with `userdata`. It replaces the hook installed before, if
 * any. TETHER_LOG_OFF or a NULL callback removes the hook.
 *
 * Off by default, and free when off: the library checks one atomic level
 * before building a message, so a message above the level (or any, without a
 * hook) costs one load: no formatting, no allocation, no clock read.
 *
 * Replacing: when tether_log_set returns, the hook it replaced (or removed) is
 * not running on any thread and will never be called again, so the host may
 * free its userdata then. It waits for a call of that hook in progress to
 * return: do not call tether_log_set while holding a lock the hook takes.
 * Messages logged while the hook changes go to the old hook or the new one.
 *
 * Any thread, at any time (contexts open or not), except from inside the log
 * hook itself: TETHER_E_BUSY there. TETHER_E_INVALID for a level outside
 * TETHER_LOG_OFF..TETHER_LOG_DEBUG (the hook is then left as it was). */
TETHER_API int tether_log_set(tether_log_level max_level, tether_log_callback callback,
                              void *userdata);

/* ---------------------------------------------------------------- debug counters */

/* What tether_debug_count counts, process-wide: counters for leak checks
 * (what exists now), not live fetches. */
typedef enum tether_debug_counter {
    TETHER_DEBUG_CONTEXTS = 1,       /* contexts open or still closing */
    TETHER_DEBUG_OBJECTS = 2,        /* objects in memory, in every context */
    TETHER_DEBUG_OBJECT_HANDLES = 3, /* object handles the host holds */
    TETHER_DEBUG_RESULTS = 4,        /* results handles not yet freed */
    TETHER_DEBUG_TASKS = 5,          /* fetch tasks not yet freed */
    TETHER_DEBUG_OBSERVERS = 6,      /* observers not yet freed */
    TETHER_DEBUG_THREADS = 7,        /* threads the library runs */
    TETHER_DEBUG_PREPARED_STATEMENTS = 8, /* not a count of what exists but a running
                                       total: SQL statements prepared so far,
                                       in every store. Each store prepares a
                                       statement once and keeps it, so
                                       repeating the same work leaves it put */
    TETHER_DEBUG_REQUESTS = 9        /* host connection requests handed to the
                                       host and not yet completed */
} tether_debug_counter;

/* How many of `what` exist right now in this process, for leak checks in
 * tests and long-running hosts. TETHER_E_INVALID for an unknown `what`. */
TETHER_API int tether_debug_count(tether_debug_counter what, int64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TETHER_H */
