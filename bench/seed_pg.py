"""Seeding bench/items straight into Kinto's PostgreSQL storage.

    seed_sql(url, storage_url, n)   (bench/run.py calls it when KINTO_BACKEND=postgresql)
    python bench/seed_pg.py N       (by hand: TETHER_TEST_URL and KINTO_STORAGE_URL set)

The bucket and the collection (with common.SCHEMA) are made through HTTP as
usual; records 0..n-1 (common.make_record, the same data the HTTP seeding
PUTs) go into Kinto's `objects` table in one COPY + INSERT ... SELECT, which
takes seconds where 100,000 PUTs through /batch would take many minutes.

What Kinto's own writes would have done is kept: `data` holds the record
without id and last_modified (as Kinto stores it), every record gets its own
last_modified, ascending with i (record i at base + i ms, base a little over
n ms in the past, so the series ends before the seeding and later writes
through Kinto come after it), and the collection's records timestamp (what
ETag and _since use) is the greatest of them: Kinto's `timestamps` row for
the empty collection, if one was made, is removed (before the insert too: the
trigger would bump a record whose last_modified equals it). The trigger that bumps
last_modified (bump_timestamp) would leave explicit values alone unless one
equals the collection's latest, which distinct ascending values never do, but
its per-row lookup can be slow: it is disabled for the insert, inside the
transaction, and the result is checked (n rows, n distinct timestamps,
base..base+n-1).

Needs psycopg2 (Kinto's `postgresql` extra: KINTO_POSTGRESQL=1 scripts/kinto-install).
"""
import io
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import BUCKET, COLLECTION  # noqa: E402

PARENT_ID = "/buckets/%s/collections/%s" % (BUCKET, COLLECTION)


def _copy_escape(text):
    # COPY's text format: backslash, tab, newline and carriage return escaped.
    return (text.replace("\\", "\\\\").replace("\t", "\\t")
            .replace("\n", "\\n").replace("\r", "\\r"))


def seed_sql(url, storage_url, n):
    """Returns a dict of what was done: records, first/last last_modified and seconds."""
    import psycopg2

    common.http("PUT", url + "/buckets/" + BUCKET, {"data": {}})
    common.http("PUT", "%s/buckets/%s/collections/%s" % (url, BUCKET, COLLECTION),
                {"data": {"schema": common.SCHEMA}})
    t0 = time.monotonic()
    buf = io.StringIO()
    for i in range(n):
        buf.write("%s\t%d\t%s\n" % (common.record_id(i), i,
                                    _copy_escape(json.dumps(common.make_record(i), separators=(",", ":")))))
    buf.seek(0)
    con = psycopg2.connect(storage_url)
    try:
        with con:                       # one transaction: all records or none
            cur = con.cursor()
            cur.execute("SELECT count(*) FROM objects WHERE parent_id = %s AND resource_name = 'record'",
                        (PARENT_ID,))
            if cur.fetchone()[0]:
                raise RuntimeError("seed_sql: %s already holds records" % PARENT_ID)
            # A `timestamps` row (the empty collection's timestamp, made when
            # something read it) would make the trigger bump the record whose
            # last_modified equals it: removed before, and again after.
            cur.execute("DELETE FROM timestamps WHERE parent_id = %s AND resource_name = 'record'",
                        (PARENT_ID,))
            cur.execute("SELECT as_epoch(clock_timestamp()::timestamp)")
            base = cur.fetchone()[0] - n - 1000
            cur.execute("CREATE TEMP TABLE seed (id TEXT COLLATE \"C\", i BIGINT, data JSONB) ON COMMIT DROP")
            cur.copy_expert("COPY seed (id, i, data) FROM STDIN", buf)
            # Off for this insert only (the ALTER is part of the transaction):
            # its per-row lookup of the collection's latest timestamp can
            # turn quadratic (it took minutes on a table with dead rows).
            cur.execute("ALTER TABLE objects DISABLE TRIGGER tgr_objects_last_modified")
            cur.execute("""
                INSERT INTO objects (id, parent_id, resource_name, last_modified, data, deleted)
                SELECT id, %s, 'record', from_epoch(%s + i), data, FALSE FROM seed ORDER BY i""",
                        (PARENT_ID, base))
            if cur.rowcount != n:
                raise RuntimeError("seed_sql: inserted %d rows, expected %d" % (cur.rowcount, n))
            cur.execute("ALTER TABLE objects ENABLE TRIGGER tgr_objects_last_modified")
            # The collection has records now: its timestamp is theirs.
            cur.execute("DELETE FROM timestamps WHERE parent_id = %s AND resource_name = 'record'",
                        (PARENT_ID,))
            cur.execute("""
                SELECT count(*), count(DISTINCT last_modified), min(as_epoch(last_modified)),
                       max(as_epoch(last_modified))
                  FROM objects WHERE parent_id = %s AND resource_name = 'record'""", (PARENT_ID,))
            count, distinct, first, last = cur.fetchone()
            if count != n or distinct != n or first != base or last != base + n - 1:
                raise RuntimeError("seed_sql: %d rows, %d distinct last_modified, %s..%s (expected %d..%d)"
                                   % (count, distinct, first, last, base, base + n - 1))
        con.autocommit = True
        con.cursor().execute("ANALYZE objects")
    finally:
        con.close()
    return {"records": n, "first": base, "last": base + n - 1, "seconds": time.monotonic() - t0}


def check_listing_head(url, n, last):
    """HEAD records?_limit=1 (Kinto 26 sends Total-Records on HEAD only, not on
    GET) must say n records, GET records?_limit=1 must have the last
    last_modified as ETag and record n-1 first. Returns the GET's headers."""
    route = "%s%s?_limit=1" % (url, common.records_route())
    req = urllib.request.Request(route, method="HEAD")
    req.add_header("Authorization", common._auth_header())
    with urllib.request.urlopen(req, timeout=60) as r:
        total = int(r.headers.get("Total-Records", -1))
    req = urllib.request.Request(route)
    req.add_header("Authorization", common._auth_header())
    with urllib.request.urlopen(req, timeout=60) as r:
        headers = {k.lower(): v for k, v in r.headers.items()}
        body = json.loads(r.read())
    etag = headers.get("etag", "").strip('"')
    if total != n:
        raise RuntimeError("after seeding, Total-Records is %d, expected %d" % (total, n))
    if etag != str(last):
        raise RuntimeError("after seeding, the records ETag is %s, expected %d" % (etag, last))
    top = body["data"][0]
    if top["last_modified"] != last or {k: top[k] for k in common.FIELDS} != common.make_record(n - 1):
        raise RuntimeError("after seeding, the newest record is %r" % (top,))
    return headers


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    url = common.server_url()
    storage = os.environ.get("KINTO_STORAGE_URL")
    if not storage:
        raise SystemExit("seed_pg: KINTO_STORAGE_URL is not set")
    done = seed_sql(url, storage, n)
    check_listing_head(url, n, done["last"])
    print(json.dumps(done))


if __name__ == "__main__":
    main()
