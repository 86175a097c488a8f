/* kill_server.h — where test_kill's records live: a Kinto bucket (the
 * default), or a PostgreSQL schema (TETHER_KILL_SERVER=postgres, with
 * TETHER_PG_CONNINFO, as scripts/with-postgres sets it). The test makes the
 * same changes and kills over either; these calls are what differs: how a
 * context opens, how records are seeded, and how the server is read back
 * (never through the library under test). Each record has an integer N and
 * a text Tag. */
#ifndef KILL_SERVER_H
#define KILL_SERVER_H

#include "testutil.h"

/* Picks the server and makes the bucket or schema; 0 (after a failed check) on failure. */
int ks_init(void);
/* "Kinto" or "PostgreSQL". */
const char *ks_name(void);
/* 1 for PostgreSQL: a save there is one transaction per batch and much quicker. */
int ks_is_postgres(void);
/* A context on the bucket or schema (thread delivery), or NULL. */
tether_context *ks_open(const char *store);
/* Makes `collection` (a collection, or a table keyed by text id) holding
 * records ids[i] with N = i and Tag "seed"; 0 on failure. */
int ks_make(const char *collection, const char *const *ids, int count);
/* Reads every record of `collection` once: ks_record then answers from
 * that copy, until the next call (over PostgreSQL one psql run, not one a
 * record; over Kinto it does nothing, and ks_record asks the server). 0 on failure. */
int ks_read_all(const char *collection);
/* Record `id`: 200 with *body (free()) a JSON text holding its fields,
 * a field that is null left out; 404 if there is none; else a failure. */
long ks_record(const char *collection, const char *id, char **body);
/* Every id of `collection`, into ids (at most `capacity` kept); the count, or -1. */
int ks_ids(const char *collection, char (*ids)[48], int capacity);
/* The N of every record whose Tag is `tag`, into ns (at most `capacity`); the count, or -1. */
int ks_tagged_ns(const char *collection, const char *tag, int *ns, int capacity);
/* Drops the bucket or schema. */
void ks_finish(void);

#endif
