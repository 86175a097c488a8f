#!/usr/bin/env python3
"""Tether benchmark: speed and memory as ratios against peers run side by side.

    KINTO_BACKEND=postgresql KINTO_PAGINATE_BY=10000 \
        scripts/with-kinto .venv/bin/python bench/run.py   (`make bench`)
    BENCH_QUICK=1 scripts/with-kinto .venv/bin/python bench/run.py
                                                           (`make bench-quick`)

Needs TETHER_TEST_URL (a fresh Kinto, as scripts/with-kinto starts) and, for
request counts, TETHER_KINTO_DIR (its run folder holding kinto.log).
TETHER_LIBRARY defaults to build/libtether.so. Seeds bucket `bench` with
BENCH_RECORDS deterministic records (default 100000 when KINTO_BACKEND is
postgresql, seeded by SQL with KINTO_STORAGE_URL; 300 with BENCH_QUICK=1;
else 2000 through /batch), then prints one table row per measurement:
tether, peer, ratio tether/peer. See bench/README.md.

BENCH_QUICK=1 only checks that every row runs: few records, one timed run
per row, small caches for rows 7 and 8 (under 2 minutes).

Exit status: 0 if every measurement ran, 1 if any failed (the table shows
ERROR and the errors are listed below it).
"""
import ctypes
import json
import logging
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import BUCKET, COLLECTION, USER, PASSWORD  # noqa: E402

BACKEND = os.environ.get("KINTO_BACKEND") or "memory"   # as scripts/with-kinto
PG = BACKEND == "postgresql"
QUICK = os.environ.get("BENCH_QUICK", "0") not in ("", "0")


def env_int(name, default):
    return int(os.environ.get(name) or default)


RECORDS = env_int("BENCH_RECORDS", 300 if QUICK else 100000 if PG else 2000)
RUNS = env_int("BENCH_RUNS", 1 if QUICK else 5)          # timed runs (after one warm-up)
PEEKS = 20000
CALLS = 100000          # row 2b: peeks of one object, and trivial ctypes calls
REFRESH_GETS = 500
REFRESH_RUNS = 1 if QUICK else 3
MANY_GETS = 10000       # row 4c, fetched by the peer in MANY_GETS_LISTINGS in_id listings
# The peer's URL must fit in one argument of curl's (Linux: 128 KB): 5000 short ids do,
# 5000 UUIDs (37 bytes each with the comma) do not, so those go in listings of 2000.
MANY_GETS_LISTINGS = 2 if common.ID_SHAPE == "short" else 5
MANY_GETS_LIMIT = 120   # s for every refresh of row 4c to land (the row is bounded by this)
RANGES = 4              # row 1c: concurrent curl processes, one _since/_before range each
MEM_RUNS = 1 if QUICK else 3
FETCH_TIMEOUT = max(60, RECORDS * 3 // 1000)   # s; 300 s for 100,000 records
# Rows 7 and 8: caches multiplied in SQLite by build/big_cache (see its header).
PREDICATE_ROWS = env_int("BENCH_PREDICATE_ROWS", 3000 if QUICK else 100000)
ITERATE_ROWS = env_int("BENCH_ITERATE_ROWS", 10000 if QUICK else 1000000)
SAVE_CHANGES = env_int("BENCH_SAVE_CHANGES", 100 if QUICK else 10000)
BATCH_SIZE = 1000
ITERATE_RUNS = 1 if QUICK else 3   # each run is its own process, so VmHWM is that run's alone
MEMORY_LIMIT_KB = 4 * 1024 * 1024   # a run over this is stopped and reported, not waited for
# Rows 9 and 10: the goals for the library's load time and size.
LOAD_RUNS = 5 if QUICK else 21
DLOPEN_GOAL_S = 0.005
# Row 2c (build/peek): calls a timed loop on a loaded row, and issue 9's goal for one.
# BENCH_ROWS: a comma-separated list of row groups to run (1 2 3 4 5 6 7 8
# 9 10 11 12 13; "1" is rows 1, 1c and 1d, "5" rows 5 and 5c...); empty: all.
ROWS = {r.strip() for r in (os.environ.get("BENCH_ROWS") or "").split(",") if r.strip()}


def wanted(*groups):
    return not ROWS or any(g in ROWS for g in groups)


PEEK_C_CALLS = env_int("BENCH_PEEK_CALLS", 100000 if QUICK else 2000000)
PEEK_GOAL_NS = 100
# tether_debug_count's TETHER_DEBUG_PREPARED_STATEMENTS: a running total of the
# SQL statements the library prepared in the process (include/tether.h).
DEBUG_PREPARED_STATEMENTS = 8
STRIPPED_GOAL = 6 * 1000 * 1000     # bytes ("6 MB")


def now():
    return time.perf_counter()


def median(xs):
    return statistics.median(xs)


# ------------------------------------------------------------------ table

class Table:
    def __init__(self):
        self.rows = []
        self.errors = []
        self.notes = []

    def add(self, name, tether, peer, ratio):
        self.rows.append((name, tether, peer, ratio))

    def error(self, name, exc):
        msg = "%s: %s" % (type(exc).__name__, exc)
        self.rows.append((name, "ERROR", "", ""))
        self.errors.append((name, msg, traceback.format_exc()))

    def print(self):
        head = ("measurement", "tether", "peer", "ratio")
        widths = [max(len(str(r[i])) for r in self.rows + [head]) for i in range(4)]
        fmt = "  ".join("%%-%ds" % w if i == 0 else "%%%ds" % w for i, w in enumerate(widths))
        print(fmt % head)
        print("  ".join("-" * w for w in widths))
        for r in self.rows:
            print(fmt % tuple(r))


def ms(seconds):
    return "%.1f ms" % (seconds * 1000)


def us(seconds):
    return "%.2f us" % (seconds * 1e6)


def ratio(a, b):
    return "%.2fx" % (a / b) if b else "n/a"


def prepared_statements():
    """The library's running total of prepared SQL statements in this
    process. The binding's debug_counts() does not name that kind, so the C
    function is called straight through ctypes (a function object of our
    own, the binding's declarations untouched)."""
    from tether import _lib
    f = _lib.lib["tether_debug_count"]
    f.restype, f.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    n = ctypes.c_int64(-1)
    status = f(DEBUG_PREPARED_STATEMENTS, ctypes.byref(n))
    if status != 0:
        raise RuntimeError("tether_debug_count(PREPARED_STATEMENTS) gave status %d" % status)
    return n.value


def prepared_note(counts, cause=None):
    """The notes' words for the statements prepared during a timed part
    (one count, or one per run): 0 is what a warmed-up store should give;
    anything else is said plainly."""
    counts = list(counts) if isinstance(counts, (list, tuple)) else [counts]
    text = "statements prepared during the timed part: %s" % (
        counts[0] if len(set(counts)) == 1 else "%s in its runs" % ", ".join(map(str, counts)))
    if any(counts):
        text += " (NOT 0: %s)" % (cause or "statements were prepared again after the warm-up")
    return text


def prepared_delta(result):
    """From a C program's counts: after the timed part minus after the warm-up."""
    return result["prepared_after_timed"] - result["prepared_after_warmup"]


# ------------------------------------------------------------------ helpers

def open_context(tether, url, path):
    return tether.Context(url, BUCKET, path, username=USER, password=PASSWORD)


def tether_listing(tether, url, path):
    """Opens a context on a new store (untimed), times one server_only fetch
    of the whole collection. Returns (seconds, record count)."""
    ctx = open_context(tether, url, path)
    try:
        t0 = now()
        objs = ctx.query(COLLECTION, policy="server_only", timeout=FETCH_TIMEOUT).all()
        dt = now() - t0
        n = len(objs)
        del objs   # gone before close(), which would keep its unread rows' ids
        return dt, n
    finally:
        ctx.close()


def make_copy_table(path, records):
    """The peer's SQLite table: the same rows (from the server's listing), id
    as primary key, one column per field (Tags as JSON text)."""
    import json
    con = sqlite3.connect(path)
    cols = ", ".join('"%s"' % f for f in common.FIELDS)
    con.execute('CREATE TABLE items (id TEXT PRIMARY KEY, last_modified INTEGER, %s)' % cols)
    rows = []
    for r in records:
        row = [r["id"], r["last_modified"]]
        for f in common.FIELDS:
            v = r.get(f)
            row.append(json.dumps(v) if isinstance(v, list) else v)
        rows.append(row)
    con.executemany("INSERT INTO items VALUES (%s)" % ", ".join("?" * (2 + len(common.FIELDS))),
                    rows)
    con.commit()
    return con


# ------------------------------------------------------------------ measurements

def m1_listing(table, tether, url, tmp, kclient):
    """Full listing from the server: tether server_only vs curl vs kinto-http."""
    first = url + common.records_route()
    pages, recs = common.curl_listing(first, parse=True)   # check the peer once
    if len(recs) != RECORDS or len({r["id"] for r in recs}) != RECORDS:
        raise RuntimeError("curl listing gave %d records (%d distinct ids), expected %d"
                           % (len(recs), len({r["id"] for r in recs}), RECORDS))
    # Row 1c's ranges: the collection's last_modified span, cut in RANGES
    # (found here, untimed); checked once: together they give every id once.
    stamps = [r["last_modified"] for r in recs]
    range_urls = common.since_before_ranges(first, min(stamps), max(stamps), RANGES)
    range_pages, range_recs = common.curl_parallel(range_urls, parse=True)
    if len(range_recs) != RECORDS or {r["id"] for r in range_recs} != {r["id"] for r in recs}:
        raise RuntimeError("%d curl ranges gave %d records (%d distinct), expected the %d ids"
                           % (RANGES, len(range_recs), len({r["id"] for r in range_recs}), RECORDS))
    t_tether, t_curl, t_kinto, t_ranges, t_c = [], [], [], [], []
    tether_err = None
    for run in range(RUNS + 1):           # run 0 is a warm-up
        if tether_err is None:
            try:
                dt, n = tether_listing(tether, url, os.path.join(tmp, "list-%d.db" % run))
                if n != RECORDS:
                    raise RuntimeError("tether fetch gave %d objects, expected %d" % (n, RECORDS))
                if run:
                    t_tether.append(dt)
            except Exception as e:          # noqa: BLE001 - reported in the table
                tether_err = e
                tether_tb = traceback.format_exc()
        c = c_fetch(url, os.path.join(tmp, "list-c-%d.db" % run))
        if run:
            t_c.append(c["seconds"])
            C_FETCH_PEAKS.append(c["peak_growth_kb"])
        t0 = now()
        common.curl_listing(first)
        dt = now() - t0
        if run:
            t_curl.append(dt)
        t0 = now()
        common.curl_parallel(range_urls)
        dt = now() - t0
        if run:
            t_ranges.append(dt)
        t0 = now()
        got = common.kinto_http_listing(kclient)
        dt = now() - t0
        if len(got) != RECORDS:
            raise RuntimeError("kinto-http gave %d records, expected %d" % (len(got), RECORDS))
        if run:
            t_kinto.append(dt)
    name = "1. full listing, %d rec / %d pages" % (RECORDS, pages)
    name_c = "1c. full listing vs curl, %d parallel _since/_before ranges (%d pages)" % (RANGES, range_pages)
    table.notes.append("1c: %d curl processes at a time, one per last_modified range, each following "
                       "Next-Page; the ranges were cut from one listing's timestamps, untimed" % RANGES)
    if tether_err is not None:
        table.rows.append((name + " vs curl", "ERROR", ms(median(t_curl)), ""))
        table.rows.append((name + " vs kinto-http", "ERROR", ms(median(t_kinto)), ""))
        table.rows.append((name_c, "ERROR", ms(median(t_ranges)), ""))
        table.errors.append((name, "%s: %s" % (type(tether_err).__name__, tether_err), tether_tb))
        return
    tt = median(t_tether)
    table.add(name + " vs curl", ms(tt), ms(median(t_curl)), ratio(tt, median(t_curl)))
    table.add(name + " vs kinto-http", ms(tt), ms(median(t_kinto)), ratio(tt, median(t_kinto)))
    table.add(name_c, ms(tt), ms(median(t_ranges)), ratio(tt, median(t_ranges)))
    tc = median(t_c)
    table.add("1d. full listing from C (build/fetch) vs curl", ms(tc), ms(median(t_curl)), ratio(tc, median(t_curl)))


C_FETCH_PEAKS = []   # row 1d's peak RSS growths (KiB), for row 5c


def c_fetch(url, store):
    """build/fetch: one server-only fetch of the collection into a new store,
    in its own process. Returns its JSON line (seconds, count, peak_growth_kb)."""
    program = os.path.join(ROOT, "build", "fetch")
    out = subprocess.run([program, url, BUCKET, COLLECTION, store, USER, PASSWORD], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=FETCH_TIMEOUT + 60,
                         env=dict(os.environ, LD_LIBRARY_PATH=os.path.join(ROOT, "build")))
    if out.returncode != 0:
        raise RuntimeError("fetch failed (%d): %s" % (out.returncode, out.stderr.decode(errors="replace").strip()[-800:]))
    result = json.loads(out.stdout)
    if result["count"] != RECORDS:
        raise RuntimeError("build/fetch gave %d objects, expected %d" % (result["count"], RECORDS))
    return result


def m2_peek(table, ctx, con):
    """N peeks over cached objects vs sqlite3 SELECT of the same value by id."""
    keys = common.SCALAR_FIELDS
    order = [((i * 7) % RECORDS, keys[i % len(keys)]) for i in range(PEEKS)]
    objs = {i: ctx.object(COLLECTION, common.record_id(i)) for i in sorted({i for i, _ in order})}
    sql = {k: 'SELECT "%s" FROM items WHERE id = ?' % k for k in keys}
    t_pairs = [(objs[i], k) for i, k in order]
    s_pairs = [((common.record_id(i),), sql[k]) for i, k in order]
    cur = con.cursor()
    # Check both sides read the same values (and warm up).
    for (o, k), (args, q) in zip(t_pairs[:len(objs)], s_pairs[:len(objs)]):   # each object once
        a, b = o.peek(k), cur.execute(q, args).fetchone()[0]
        if a != b:
            raise RuntimeError("peek(%r) of %s gave %r, sqlite3 has %r" % (k, o.id, a, b))
    tt, ts, tx = [], [], []
    prepared = prepared_statements()
    for _ in range(3):
        t0 = now()
        for o, k in t_pairs:
            o.peek(k)
        tt.append((now() - t0) / PEEKS)
        # Autocommit: each SELECT takes and drops SQLite's shared file lock.
        t0 = now()
        for args, q in s_pairs:
            cur.execute(q, args).fetchone()[0]
        ts.append((now() - t0) / PEEKS)
        # The stricter peer: every SELECT inside one read transaction.
        t0 = now()
        cur.execute("BEGIN")
        for args, q in s_pairs:
            cur.execute(q, args).fetchone()[0]
        cur.execute("COMMIT")
        tx.append((now() - t0) / PEEKS)
    name = "2. peek, per read (%d reads of %d objects)" % (PEEKS, len(objs))
    table.add(name + " vs sqlite3", us(median(tt)), us(median(ts)), ratio(median(tt), median(ts)))
    table.add(name + " vs sqlite3 1 txn", us(median(tt)), us(median(tx)),
              ratio(median(tt), median(tx)))
    table.notes.append("2: " + prepared_note(prepared_statements() - prepared))


def m2b_ctypes(table, tether, ctx):
    """One cached object's peek from Python vs the most trivial ctypes call
    into the library (tether_version_number: no argument, an int back)."""
    from tether import _lib
    obj = ctx.object(COLLECTION, common.record_id(RECORDS // 2))
    if obj.peek("Count") != common.make_record(RECORDS // 2)["Count"]:
        raise RuntimeError("peek(Count) of %s gave %r" % (obj.id, obj.peek("Count")))
    trivial = _lib.tether_version_number
    raw_peek, clear = _lib.tether_object_peek, _lib.tether_value_free
    handle, key, value = obj._h, b"Count", _lib.tether_value()
    ref = ctypes.byref(value)
    rng = range(CALLS)
    tp, tc, tr = [], [], []
    for _ in range(3):
        t0 = now()
        for _ in rng:
            obj.peek("Count")
        tp.append((now() - t0) / CALLS)
        t0 = now()
        for _ in rng:
            trivial()
        tc.append((now() - t0) / CALLS)
        # In between: the same C call as peek, straight through ctypes (no
        # argument checks, no conversion of the value to a Python int).
        t0 = now()
        for _ in rng:
            raw_peek(handle, key, ref)
            clear(ref)
        tr.append((now() - t0) / CALLS)
    table.add("2b. peek from Python vs a trivial ctypes call (tether_version_number), per call",
              us(median(tp)), us(median(tc)), ratio(median(tp), median(tc)))
    table.notes.append("2b: %d calls, median of 3 passes; tether_object_peek + tether_value_free through "
                       "ctypes without the binding's checks and conversion: %s per read"
                       % (CALLS, us(median(tr))))


def m2c_peek_c(table, url):
    """Row 2c, from C (build/peek): tether_object_peek on one object whose
    row is loaded, held across the loop, ns per call, against issue 9's goal;
    the notes give the floor of a call on the handle, peek by code, the same
    loop on 2 threads at once, and the prepare counter. build/peek fills its
    own store (in /tmp) with a server-only fetch of `items` first."""
    program = os.path.join(ROOT, "build", "peek")
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(ROOT, "build"), PEEK_CALLS=str(PEEK_C_CALLS),
               PEEK_PASSES="1")
    env.pop("PEEK_ONLY", None)
    out = subprocess.run([program, url, USER, PASSWORD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         timeout=FETCH_TIMEOUT + 300, env=env)
    if out.returncode != 0:
        raise RuntimeError("peek failed (%d): %s" % (out.returncode, out.stderr.decode(errors="replace").strip()[-800:]))
    r = {}
    for line in out.stdout.decode().splitlines():     # "name value [value]"
        name, *values = line.split()
        r[name] = [float(v) for v in values]
    if r.get("records") != [RECORDS]:
        raise RuntimeError("peek synced %s records, expected %d" % (r.get("records"), RECORDS))
    name_ns, count_ns = r["a_loaded_peek_Name_ns"][0], r["a_loaded_peek_Count_ns"][0]
    threads = r["c_2threads_peek_Name_ns"]
    prepared = int(r["prepared_after_timed"][0] - r["prepared_after_warmup"][0])
    table.add("2c. peek from C, row loaded (Name / Count)", "%.1f / %.1f ns" % (name_ns, count_ns),
              "<= %d ns (goal)" % PEEK_GOAL_NS,
              "%s / %s" % (ratio(name_ns, PEEK_GOAL_NS), ratio(count_ns, PEEK_GOAL_NS)))
    table.notes.append("2c: %d calls a loop on one object held across it; floor (tether_object_id on the handle) "
                       "%.1f ns; peek by code Name / Count %.1f / %.1f ns; 2 threads at once, each peeking Name on "
                       "its own object: %s ns per call; %s"
                       % (PEEK_C_CALLS, r["a_loaded_floor_object_id_ns"][0], r["a_loaded_peek_code_Name_ns"][0],
                          r["a_loaded_peek_code_Count_ns"][0], " / ".join("%.1f" % t for t in threads),
                          prepared_note(prepared)))


def m3_cache_fetch(table, ctx, con):
    """cache_only fetch of everything vs sqlite3 SELECT * into tuples."""
    tt, ts = [], []
    prepared = None
    for run in range(RUNS + 1):
        if run == 1:                      # after the warm-up run
            prepared = prepared_statements()
        t0 = now()
        objs = list(ctx.query(COLLECTION, policy="cache_only", timeout=FETCH_TIMEOUT).all())   # the Objects made, as the peer makes its tuples (an Answer is lazy)
        dt = now() - t0
        if len(objs) != RECORDS:
            raise RuntimeError("cache_only fetch gave %d objects, expected %d" % (len(objs), RECORDS))
        if run:
            tt.append(dt)
        t0 = now()
        rows = con.execute("SELECT * FROM items").fetchall()
        dt = now() - t0
        if len(rows) != RECORDS:
            raise RuntimeError("SELECT * gave %d rows" % len(rows))
        if run:
            ts.append(dt)
    table.add("3. cache_only fetch, %d rec" % RECORDS, ms(median(tt)), ms(median(ts)),
              ratio(median(tt), median(ts)))
    table.notes.append("3: " + prepared_note(prepared_statements() - prepared))


def m3b_predicate_fetch(table, ctx, con):
    """cache_only fetch with a predicate and a sort vs the same SELECT on
    sqlite3 (no index on either side: both scan)."""
    where = "Status == $1 AND Count >= $2 AND Owner BEGINSWITH[c] $3"
    args = ["open", 500, "A"]
    sql = ('SELECT * FROM items WHERE Status = ? AND Count >= ? AND lower(Owner) LIKE ? '
           'ORDER BY Count DESC, id')
    tt, ts = [], []
    for run in range(RUNS + 1):
        t0 = now()
        objs = list(ctx.query(COLLECTION, policy="cache_only", where=where, args=args, sort="-Count",
                              timeout=FETCH_TIMEOUT).all())   # as in row 3
        dt = now() - t0
        if run:
            tt.append(dt)
        t0 = now()
        rows = con.execute(sql, ("open", 500, "a%")).fetchall()
        dt = now() - t0
        if run:
            ts.append(dt)
        if len(objs) != len(rows) or [o.id for o in objs] != [r[0] for r in rows]:
            raise RuntimeError("predicate fetch gave %d objects, sqlite3 %d rows" % (len(objs), len(rows)))
    table.add("3b. predicate + sort, cache_only, %d of %d rec" % (len(rows), RECORDS), ms(median(tt)),
              ms(median(ts)), ratio(median(tt), median(ts)))


def wait_quiet(logpath, offset, quiet=0.5, limit=15.0):
    """Waits until the Kinto log has had no new request for `quiet` s."""
    deadline = time.monotonic() + limit
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        n = len(common.requests_since(logpath, offset))
        if n != seen:
            seen, since = n, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
        time.sleep(0.05)
    return common.requests_since(logpath, offset)


def gets_until_peek(tether, url, path, ids, limit, quiet_limit):
    """On a new store: get("Name") on each of `ids` (uncached objects), then
    waits until each one's Name is cached (is_cached: a value not cached
    yet reads as None), walking them in order (a pending one is polled every
    millisecond; the walk goes on once it lands).
    Returns (seconds, the request.summary entries Kinto logged or None, the
    number of requests inside /batch or None)."""
    logpath = common.kinto_log_path()
    n = len(ids)
    ctx = open_context(tether, url, path)
    try:
        objs = [ctx.object(COLLECTION, i) for i in ids]
        off = common.log_offset(logpath) if logpath else None
        t0 = now()
        for o in objs:
            o.get("Name")
        deadline = time.monotonic() + limit
        k = 0
        while k < n:
            if objs[k].is_cached("Name"):
                k += 1
                continue
            if time.monotonic() > deadline:
                left = sum(1 for o in objs[k:] if not o.is_cached("Name"))
                raise RuntimeError("refreshes did not land: %d of %d objects still not cached %d s "
                                   "after get" % (left, n, limit))
            time.sleep(0.001)
        dt = now() - t0
        reqs = wait_quiet(logpath, off, limit=quiet_limit) if logpath else None
        subs = common.subrequests_since(logpath, off) if logpath else None
    finally:
        ctx.close()
    return dt, reqs, subs


def in_id_urls(url, ids, listings):
    """`listings` curl URLs ?in_id= that split `ids` in equal parts."""
    size = -(-len(ids) // listings)
    return ["%s%s?%s" % (url, common.records_route(),
                         urllib.parse.urlencode({"in_id": ",".join(ids[k:k + size])}, safe=","))
            for k in range(0, len(ids), size)]


def curl_in_id(urls):
    """The peer of rows 4 and 4c: the in_id listings one after the other
    (curl_listing each). Returns the page count."""
    return sum(common.curl_listing(u)[0] for u in urls)


def gets_rows(table, tether, url, tmp, label, ids, listings, runs, limit, quiet_limit):
    """Rows 4 and 4c: time until all of `ids` peek after get on a new store,
    and the requests Kinto saw, vs curl listing them with in_id=."""
    n = len(ids)
    urls = in_id_urls(url, ids, listings)
    pages, got = 0, []
    for u in urls:                      # the peer, checked once (untimed)
        p, recs = common.curl_listing(u, parse=True)
        pages += p
        got += recs
    if sorted(r["id"] for r in got) != sorted(ids):
        raise RuntimeError("curl in_id listings gave %d records, expected the %d ids" % (len(got), n))

    tt, tc, counts, subs = [], [], [], []
    for run in range(runs):
        dt, reqs, sub = gets_until_peek(tether, url, os.path.join(tmp, "%s-%d.db" % (label.split(".")[0], run)),
                                        ids, limit, quiet_limit)
        tt.append(dt)
        if reqs is not None:
            counts.append(reqs)
            subs.append(sub)
        t0 = now()
        curl_in_id(urls)
        tc.append(now() - t0)

    name = "%s %d gets on uncached objects" % (label, n)
    peer = "%d listing%s" % (len(urls), "s" if len(urls) > 1 else "")
    table.add(name + ", time", ms(median(tt)), ms(median(tc)), ratio(median(tt), median(tc)))
    if counts:
        c = [len(r) for r in counts]
        firsts = [sum(1 for _, _, q in r if "_token" not in q) for r in counts]
        cell = "%d (%d-%d)" % (median(c), min(c), max(c))
        if any(subs):
            cell += ", %d in /batch" % median(subs)
        table.add(name + ", requests", cell, "%d" % pages, ratio(median(c), pages))
        batches = [sum(1 for _, p, _ in r if p and p.endswith("/batch")) for r in counts]
        listings = [k - b + sub for k, b, sub in zip(c, batches, subs)]
        table.notes.append("%s requests per run %s, of which in_id listings (first pages) or /batch %s, "
                           "/batch %s carrying %s requests, so %s listings in all; curl: %s of %d ids, %d pages"
                           % (label.split(".")[0] + ":", c, firsts, batches, subs, listings, peer,
                              -(-n // len(urls)), pages))
    else:
        table.add(name + ", requests", "n/a (no kinto.log)", "%d" % pages, "")
    return urls, pages


def m4_refresh(table, tether, url, tmp, main_ctx):
    """get on 500 distinct objects, wait until every refresh landed; count the
    requests Kinto saw; compare with one curl listing with in_id= of those ids."""
    logpath = common.kinto_log_path()
    step = max(1, RECORDS // REFRESH_GETS)
    ids = [common.record_id(i) for i in range(0, RECORDS, step)][:REFRESH_GETS]
    n = len(ids)
    _, pages = gets_rows(table, tether, url, tmp, "4.", ids, 1, REFRESH_RUNS, 30, 15.0)

    # The same gets on objects already cached (every get refreshes: staleness 0).
    if logpath:
        objs = [main_ctx.object(COLLECTION, i) for i in ids]
        off = common.log_offset(logpath)
        for o in objs:
            o.get("Name")
        reqs = wait_quiet(logpath, off)
        table.add("4b. %d gets on cached objects, requests" % n, "%d" % len(reqs),
                  "%d" % pages, ratio(len(reqs), pages))


def m4c_many_gets(table, tether, url, tmp):
    """Row 4 with 10,000 distinct ids (every RECORDS/10,000th), against curl
    fetching them in MANY_GETS_LISTINGS in_id listings. Bounded: every
    refresh must land within MANY_GETS_LIMIT s."""
    step = max(1, RECORDS // MANY_GETS)
    ids = [common.record_id(i) for i in range(0, RECORDS, step)][:MANY_GETS]
    gets_rows(table, tether, url, tmp, "4c.", ids, MANY_GETS_LISTINGS, REFRESH_RUNS, MANY_GETS_LIMIT, 60.0)


def m5_memory(table, url, tmp):
    """Peak RSS growth of one full listing: tether context vs kinto-http dicts."""
    probe = os.path.join(common.HERE, "memprobe.py")
    res = {"tether": [], "kinto-http": []}
    import json
    for run in range(MEM_RUNS):
        for mode in ("tether", "kinto-http"):
            d = tempfile.mkdtemp(prefix="mem-", dir=tmp)
            proc = subprocess.run([sys.executable, probe, mode, url, d], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=FETCH_TIMEOUT + 60)
            if proc.returncode != 0:
                raise RuntimeError("memprobe %s failed (%d): %s" % (
                    mode, proc.returncode, proc.stderr.decode(errors="replace").strip()[-800:]))
            out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
            if out["records"] != RECORDS:
                raise RuntimeError("memprobe %s listed %d records" % (mode, out["records"]))
            res[mode].append(out["growth_kb"])
    a, b = median(res["tether"]), median(res["kinto-http"])
    table.add("5. peak RSS growth, listing %d rec" % RECORDS, "%.1f MB" % (a / 1024),
              "%.1f MB" % (b / 1024), ratio(a, b))
    if C_FETCH_PEAKS:
        c = median(C_FETCH_PEAKS)
        table.add("5c. the same from C (row 1d's runs)", "%.1f MB" % (c / 1024), "%.1f MB" % (b / 1024), ratio(c, b))


# ------------------------------------------------------------------ main

def m6_first_peek(table, url, tmp):
    """First read of an object whose row is in the store, not in memory (C)."""
    program = os.path.join(ROOT, "build", "first_peek")
    store = os.path.join(tmp, "first-peek.db")
    out = subprocess.run([program, url, BUCKET, COLLECTION, "Name", store, USER, PASSWORD], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=FETCH_TIMEOUT + 300,
                         env=dict(os.environ, LD_LIBRARY_PATH=os.path.join(ROOT, "build")))
    if out.returncode != 0:
        raise RuntimeError("first_peek failed (%d): %s" % (out.returncode,
                                                          out.stderr.decode(errors="replace").strip()[-800:]))
    result = json.loads(out.stdout)
    name = "6. first peek from C (row in store, not in memory; %d reads)" % result["reads"]
    table.add(name, "%.2f us" % (result["tether_ns"] / 1000), "%.2f us (prepared SELECT)" % (result["sqlite_ns"] / 1000),
              ratio(result["tether_ns"], result["sqlite_ns"]))
    table.notes.append("6: object + peek + release per read, object cache 0; %d objects in memory afterwards; %s"
                       % (result["objects_in_memory"], prepared_note(prepared_delta(result))))
    table.add("6b. first peek from C while a fetch rewrites every row, slowest read",
              "%.2f ms" % (result["during_max_ns"] / 1e6), "%.2f us (6's median)" % (result["tether_ns"] / 1000),
              ratio(result["during_max_ns"], result["tether_ns"]))
    table.notes.append("6b: the same reads while a server-only fetch of every record (sync state cleared, so each "
                       "page is rewritten in one transaction) runs in the same context: %d reads in its %d ms; "
                       "median %.2f us, 99th percentile %.2f us, slowest %.2f ms"
                       % (result["during_reads"], result["during_fetch_ms"], result["during_median_ns"] / 1000,
                          result["during_p99_ns"] / 1000, result["during_max_ns"] / 1e6))


def m11_save(table, url, tmp, kclient):
    """Saving SAVE_CHANGES edits of cached records (C) beside kinto-http
    sending the same changes to as many other records in one batch."""
    n = min(SAVE_CHANGES, RECORDS // 2)
    program = os.path.join(ROOT, "build", "save")
    out = subprocess.run([program, url, BUCKET, COLLECTION, os.path.join(tmp, "save.db"), USER, PASSWORD, "0", str(n)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=FETCH_TIMEOUT + 600,
                         env=dict(os.environ, LD_LIBRARY_PATH=os.path.join(ROOT, "build")))
    if out.returncode != 0:
        raise RuntimeError("save failed (%d): %s" % (out.returncode, out.stderr.decode(errors="replace").strip()[-800:]))
    result = json.loads(out.stdout)
    if result["saved"] != n:
        raise RuntimeError("save: %d of %d changes saved" % (result["saved"], n))
    # The peer: the same change to records n .. 2n-1, each conditional on
    # its version (read before the clock starts), in kinto-http's batch,
    # which splits it by the server's batch_max_requests as Tether does.
    listing = {r["id"]: r for r in common.kinto_http_listing(kclient)}
    logging.getLogger("kinto_http").setLevel(logging.ERROR)  # it logs each subrequest answered, as a warning
    t0 = now()
    with kclient.batch(bucket=BUCKET, collection=COLLECTION) as batch:
        for i in range(n, 2 * n):
            record = listing[common.record_id(i)]
            batch.patch_record(id=record["id"], data={"Count": record.get("Count", 0) + 1, "Status": "review"},
                               if_match=record["last_modified"])
    peer = now() - t0
    answers = batch.results()
    if len(answers) != n:
        raise RuntimeError("kinto-http: %d answers for %d changes" % (len(answers), n))
    table.add("11. save %d changes to cached records (conditional PATCH, /batch)" % n, "%.0f ms" % result["save_ms"],
              "%.0f ms (kinto-http batch)" % (peer * 1000), ratio(result["save_ms"] / 1000.0, peer))
    table.notes.append("11: from C; before the save, %d edits (2 keys each) were made durable in the store's outbox "
                       "at %.1f us each (untimed by the peer, which keeps its batch in memory); RSS %.1f MB after "
                       "the sync of the collection, %.1f MB after the edits and the save (peak %.1f MB)"
                       % (n, result["edit_ns"] / 1000, result["synced_rss_kb"] / 1024.0,
                          result["saved_rss_kb"] / 1024.0, result["peak_rss_kb"] / 1024.0))


PG_SCHEMA = "bench_direct"
LIVE_COMMITS = 5 if QUICK else 20


def m12_postgres(table, tether, tmp):
    """Tether straight on PostgreSQL (no Kinto): RECORDS rows of a table in
    the bench's own database fetched into a new store (server_only, from
    Python, objects made) beside psql's COPY and psycopg2's fetchall of the
    same rows; then the time from another client's commit to a live query's
    answer (changes pushed by LISTEN/NOTIFY, tracking installed)."""
    import psycopg2
    conninfo = os.environ["KINTO_STORAGE_URL"]
    con = psycopg2.connect(conninfo)
    con.autocommit = True
    cur = con.cursor()
    cur.execute("DROP SCHEMA IF EXISTS %s CASCADE" % PG_SCHEMA)
    cur.execute("CREATE SCHEMA %s" % PG_SCHEMA)
    cur.execute('CREATE TABLE %s.items (id text PRIMARY KEY, "Name" text, "Count" int8, "Status" text, "Owner" text)'
                % PG_SCHEMA)
    cur.execute("INSERT INTO %s.items SELECT 'r' || g, 'name ' || g, g, "
                "(ARRAY['open','pending','closed'])[1 + mod(g, 3)], 'owner' || mod(g, 97) "
                "FROM generate_series(1, %%s) g" % PG_SCHEMA, (RECORDS,))
    try:
        mine, copy, fetchall = [], [], []
        for run in range(RUNS + 1):          # the first is a warm-up
            ctx = tether.Context.open_postgres(conninfo, os.path.join(tmp, "pg-%d.db" % run), schema=PG_SCHEMA)
            try:
                t0 = now()
                n = len(ctx.query("items", policy="server_only", timeout=FETCH_TIMEOUT).all())
                t_mine = now() - t0
            finally:
                ctx.close()
            if n != RECORDS:
                raise RuntimeError("PostgreSQL fetch gave %d of %d rows" % (n, RECORDS))
            t0 = now()
            subprocess.run(["psql", "-X", "-q", "-d", conninfo, "-c", "COPY %s.items TO STDOUT" % PG_SCHEMA],
                           stdout=subprocess.DEVNULL, check=True)
            t_copy = now() - t0
            t0 = now()
            cur.execute("SELECT * FROM %s.items" % PG_SCHEMA)
            rows = cur.fetchall()
            t_fetchall = now() - t0
            del rows
            if run:
                mine.append(t_mine), copy.append(t_copy), fetchall.append(t_fetchall)
        name = "12. PostgreSQL direct: %d rows into a new store (server_only, Python)" % RECORDS
        table.add(name, ms(median(mine)), "%s (psql COPY)" % ms(median(copy)), ratio(median(mine), median(copy)))
        table.add("12. the same", ms(median(mine)), "%s (psycopg2 fetchall)" % ms(median(fetchall)),
                  ratio(median(mine), median(fetchall)))

        tether.install_postgres(conninfo, PG_SCHEMA)
        answers, cond = [], threading.Condition()

        def on_answer(answer):
            with cond:
                answers.append(answer)
                cond.notify_all()

        ctx = tether.Context.open_postgres(conninfo, os.path.join(tmp, "pg-live.db"), schema=PG_SCHEMA)
        delays = []
        try:
            task = ctx.query("items", where="Status == 'live'", sort="id").live(on_answer)
            with cond:
                cond.wait_for(lambda: any(a.phase == "live" for a in answers), timeout=60)
            for k in range(LIVE_COMMITS):
                key = "live%d" % k
                t0 = now()
                cur.execute("INSERT INTO %s.items (id, \"Status\") VALUES (%%s, 'live')" % PG_SCHEMA, (key,))
                with cond:
                    if not cond.wait_for(lambda: any(key in [o.id for o in a.answer] for a in answers[-1:]),
                                         timeout=30):
                        raise RuntimeError("a commit did not reach the live query within 30 s")
                delays.append(now() - t0)
            task.cancel()
        finally:
            ctx.close()
        table.add("12b. PostgreSQL: commit to a live query's answer (LISTEN/NOTIFY; median of %d)" % LIVE_COMMITS,
                  ms(median(delays)), "(no peer)", "")
        table.notes.append("12b: each of %d commits inserts a matching row; the live query lists the table's changes "
                           "since its last listing (tracking installed); min %s, max %s"
                           % (LIVE_COMMITS, ms(min(delays)), ms(max(delays))))
    finally:
        cur.execute("DROP SCHEMA IF EXISTS %s CASCADE" % PG_SCHEMA)
        cur.execute("DROP SCHEMA IF EXISTS tether CASCADE")
        con.close()


def big_cache(url, store, *args, limit_kb=None, timeout=600):
    """Runs build/big_cache on `store` and returns its JSON line. With
    limit_kb, stops it (and returns None) once its RSS passes that."""
    program = os.path.join(ROOT, "build", "big_cache")
    cmd = [program, url, BUCKET, COLLECTION, store, USER, PASSWORD] + [str(a) for a in args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, LD_LIBRARY_PATH=os.path.join(ROOT, "build")))
    deadline = time.monotonic() + timeout
    while limit_kb and proc.poll() is None:
        rss = 0
        try:
            with open("/proc/%d/status" % proc.pid) as f:
                rss = next((int(l.split()[1]) for l in f if l.startswith("VmRSS:")), 0)
        except OSError:
            pass
        if rss > limit_kb or time.monotonic() > deadline:
            proc.kill()
            proc.communicate()
            if rss > limit_kb:
                return None
            raise RuntimeError("big_cache %s took over %d s" % (" ".join(map(str, args)), timeout))
        time.sleep(0.05)
    out, err = proc.communicate(timeout=max(1, deadline - time.monotonic()))
    if proc.returncode != 0:
        raise RuntimeError("big_cache %s failed (%d): %s" % (" ".join(map(str, args)), proc.returncode,
                                                             err.decode(errors="replace").strip()[-800:]))
    return json.loads(out.decode().strip().splitlines()[-1])


def mb(kb):
    return "%.1f MB" % (kb / 1024)


def make_big_store(tether, url, store, rows):
    """A store of `rows` rows for rows 7 and 8: `big_cache make` (one fetch,
    multiplied in SQLite) when the collection has fewer records; when it has
    as many or more (100,000 on PostgreSQL), the store of one server_only fetch
    of all of them (big_cache make wants N above the fetched count). Returns
    a description for the notes."""
    if rows > RECORDS:
        made = big_cache(url, store, "make", rows, timeout=FETCH_TIMEOUT + 600)
        return "store of %d rows (%d fetched, multiplied in SQLite in %.1f s)" % (
            made["rows"], made["fetched"], made["seconds"])
    t0 = now()
    ctx = open_context(tether, url, store)
    try:
        objs = ctx.query(COLLECTION, policy="server_only", timeout=FETCH_TIMEOUT).ids()
        n = len(objs)
    finally:
        ctx.close()
    return "store of %d rows, all fetched from Kinto (server_only, %.1f s), none multiplied" % (n, now() - t0)


def m7_big_predicate(table, tether, url, tmp):
    """Predicate + sort over a large cache from C vs the same prepared SELECT."""
    store = os.path.join(tmp, "big-%d.db" % PREDICATE_ROWS)
    made = make_big_store(tether, url, store, PREDICATE_ROWS)
    r = big_cache(url, store, "predicate", RUNS)
    table.add("7. predicate + sort from C, cache only, %d of %d rows" % (r["matches"], r["rows"]),
              ms(r["tether_s"]), ms(r["sqlite_s"]) + " (prepared SELECT)", ratio(r["tether_s"], r["sqlite_s"]))
    table.notes.append("7: %s; ids equal in order; %s" % (made, prepared_note(prepared_delta(r))))
    return store


def m8_big_iterate(table, tether, url, tmp, small_store):
    """Every row's Name over a very large cache: tether with batch_size (and
    without) vs sqlite3 stepping the same SELECT; time and peak RSS growth."""
    store = os.path.join(tmp, "big-%d.db" % ITERATE_ROWS)
    made = make_big_store(tether, url, store, ITERATE_ROWS)
    runs = {"tether": [], "sqlite": []}
    for _ in range(ITERATE_RUNS):
        for side in ("tether", "sqlite"):
            r = big_cache(url, store, "iterate", side, BATCH_SIZE if side == "tether" else 0,
                          limit_kb=MEMORY_LIMIT_KB)
            if r is None:
                raise RuntimeError("iterate %s passed %s of RSS; stopped" % (side, mb(MEMORY_LIMIT_KB)))
            runs[side].append(r)
    for r in runs["tether"] + runs["sqlite"]:
        if r["rows"] != ITERATE_ROWS or r["checksum"] != runs["sqlite"][0]["checksum"]:
            raise RuntimeError("iterate %s read %d rows (checksum %d), sqlite3 %d rows (checksum %d)" % (
                r["side"], r["rows"], r["checksum"], ITERATE_ROWS, runs["sqlite"][0]["checksum"]))
    t = median([r["seconds"] for r in runs["tether"]])
    s = median([r["seconds"] for r in runs["sqlite"]])
    tg = median([r["growth_kb"] for r in runs["tether"]])
    sg = median([r["growth_kb"] for r in runs["sqlite"]])
    name = "8. iterate %d rows from C, batch_size %d, peek Name" % (ITERATE_ROWS, BATCH_SIZE)
    table.add(name + ", time", "%.2f s" % t, "%.2f s (step)" % s, ratio(t, s))
    table.add(name + ", peak RSS growth", mb(tg), mb(sg), ratio(tg, sg))
    fetch_kb = median([r["fetch_growth_kb"] for r in runs["tether"]])
    note = ("8: %s. With batch_size, %s of the %s "
            "peak is reached when the answer arrives, before any row is read; %d objects in memory at the end"
            % (made, mb(fetch_kb), mb(tg), runs["tether"][0]["objects_in_memory"]))
    if small_store:   # the same pass over row 7's smaller store: does the growth follow the row count?
        small = big_cache(url, small_store, "iterate", "tether", BATCH_SIZE)
        if small["rows"] < ITERATE_ROWS:   # with BENCH_RECORDS=1000000 row 7's store holds as many
            per_row = (tg - small["growth_kb"]) * 1024.0 / (ITERATE_ROWS - small["rows"])
            note += ". At %d rows the growth is %s: about %.0f bytes per further row" % (
                small["rows"], mb(small["growth_kb"]), per_row)
    # No warm-up in these runs: it would set the peak RSS they measure.
    note += "; " + prepared_note([prepared_delta(r) for r in runs["tether"]],
                                 "each run is a new process without a warm-up, counted from the open context on: "
                                 "its one fetch prepares the statements it uses")
    table.notes.append(note)

    # Once each, stopped past MEMORY_LIMIT_KB: results that hold every object,
    # and a values answer of the one column, read a batch at a time.
    for label, side, batch in (("8b. the same without batch_size", "tether", 0),
                               ("8c. RESULT_VALUES of Name, batch_size %d" % BATCH_SIZE, "values", BATCH_SIZE)):
        r = big_cache(url, store, "iterate", side, batch, limit_kb=MEMORY_LIMIT_KB)
        if r is None:
            table.add(label + ", peak RSS growth", "> %s (stopped)" % mb(MEMORY_LIMIT_KB), mb(sg), "n/a")
            continue
        if r["rows"] != ITERATE_ROWS or r["checksum"] != runs["sqlite"][0]["checksum"]:
            raise RuntimeError("%s: read %d rows (checksum %d)" % (label, r["rows"], r["checksum"]))
        if side == "values":   # the way to read a column of every row: timed against the same step
            table.add(label + ", time", "%.2f s" % r["seconds"], "%.2f s (step)" % s, ratio(r["seconds"], s))
        table.add(label + ", peak RSS growth", mb(r["growth_kb"]), mb(sg), ratio(r["growth_kb"], sg))
        table.notes.append("%s: %.2f s (%.1fx sqlite3's step); %s of it when the answer arrived"
                           % (label.split(".")[0], r["seconds"], r["seconds"] / s, mb(r["fetch_growth_kb"])))


DLOPEN_PROBE = r"""
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
/* dlopen_probe [LIBRARY]: dlopens LIBRARY (RTLD_NOW | RTLD_LOCAL, as ctypes
 * does) if given; prints the nanoseconds dlopen took (0 without LIBRARY). */
int main(int argc, char **argv) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (argc > 1 && !dlopen(argv[1], RTLD_NOW | RTLD_LOCAL)) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.0f\n", (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec));
    return 0;
}
"""


def library_path():
    return os.environ.get("TETHER_LIBRARY") or os.path.join(ROOT, "build", "libtether.so")


def m9_load_time(table, tmp):
    """A fresh process that dlopens the library vs the same process without:
    the difference of their wall times (fork, exec, exit included on both
    sides), medians of LOAD_RUNS runs each, alternating."""
    lib = library_path()
    src, exe = os.path.join(tmp, "dlopen_probe.c"), os.path.join(tmp, "dlopen_probe")
    with open(src, "w") as f:
        f.write(DLOPEN_PROBE)
    subprocess.run([os.environ.get("CC") or "cc", "-O2", "-o", exe, src, "-ldl"], check=True,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with_lib, without, inside = [], [], []
    for run in range(LOAD_RUNS + 1):      # run 0 warms the page cache
        for args, out in (([exe, lib], with_lib), ([exe], without)):
            t0 = now()
            proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            dt = now() - t0
            if proc.returncode != 0:
                raise RuntimeError("dlopen_probe %s failed: %s" % (" ".join(args[1:]), proc.stderr.decode()))
            if run:
                out.append(dt)
                if len(args) > 1:
                    inside.append(int(proc.stdout) / 1e9)
    load = median(with_lib) - median(without)
    table.add("9. load time: dlopen of libtether.so in a fresh process", ms(load),
              "<= %s (goal)" % ms(DLOPEN_GOAL_S), ratio(load, DLOPEN_GOAL_S))
    table.notes.append("9: process with dlopen %s, without %s (medians of %d); dlopen() itself, timed inside "
                       "the process: %s" % (ms(median(with_lib)), ms(median(without)), LOAD_RUNS,
                                            ms(median(inside))))


def m10_size(table, tmp):
    """The size of a stripped copy of the library (strip -o)."""
    lib = library_path()
    out = os.path.join(tmp, "libtether.stripped.so")
    subprocess.run(["strip", "-o", out, lib], check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    size = os.path.getsize(out)
    table.add("10. size of libtether.so, stripped", "%.2f MB" % (size / 1e6),
              "<= %.0f MB (goal)" % (STRIPPED_GOAL / 1e6), ratio(size, STRIPPED_GOAL))
    table.notes.append("10: %s unstripped; MB = 10^6 bytes" % ("%.2f MB" % (os.path.getsize(lib) / 1e6)))


def main():
    started = time.monotonic()
    common.setup_paths()
    url = common.server_url()
    table = Table()

    try:
        import tether
        libinfo = "%s (%s)" % (tether.library_path, tether.library_version())
    except Exception as e:  # noqa: BLE001
        tether = None
        libinfo = "NOT LOADED: %s" % e
    try:
        import importlib.metadata
        import kinto_http  # noqa: F401
        kinfo = "kinto-http %s" % importlib.metadata.version("kinto-http")
    except ImportError:
        raise SystemExit("bench: kinto-http is missing: .venv/bin/pip install -q kinto-http")
    curl_v = subprocess.run(["curl", "--version"], stdout=subprocess.PIPE).stdout.decode().split()[1]

    print("Tether bench: server %s (%s backend), library %s%s" % (
        url, BACKEND, libinfo, "; QUICK mode: checks the rows run, numbers mean little" if QUICK else ""))
    print("peers: curl %s, %s, sqlite3 %s (Python %s)" % (
        curl_v, kinfo, sqlite3.sqlite_version, sys.version.split()[0]))
    t0 = now()
    if PG:
        import seed_pg
        storage = os.environ.get("KINTO_STORAGE_URL")
        if not storage:
            raise SystemExit("bench: KINTO_BACKEND=postgresql but KINTO_STORAGE_URL is not set "
                             "(scripts/with-kinto sets it)")
        done = seed_pg.seed_sql(url, storage, RECORDS)
        head = seed_pg.check_listing_head(url, RECORDS, done["last"])
        how = "by SQL (COPY + INSERT in %.1f s; HEAD says Total-Records %d, ETag %s)" % (
            done["seconds"], RECORDS, head.get("etag"))
    else:
        common.seed(url, RECORDS)
        how = "through /batch"
    print("seeded %s/%s with %d records %s in %.1f s, ids %s (BENCH_IDS); medians of %d runs after a warm-up" % (
        BUCKET, COLLECTION, RECORDS, how, now() - t0,
        "like " + common.record_id(0) if common.ID_SHAPE == "uuid" else "r00000...", RUNS))
    print()

    tmp = tempfile.mkdtemp(prefix="tether-bench-")
    try:
        kclient = common.kinto_http_client(url)
        server_records = common.kinto_http_listing(kclient)
        con = make_copy_table(os.path.join(tmp, "copy.db"), server_records)

        if tether is None:
            raise_lib = RuntimeError("libtether / binding not loaded: " + libinfo)
            for name in ("1. full listing", "2. peek", "3. cache_only fetch", "4. batched refresh",
                         "5. peak RSS growth"):
                table.rows.append((name, "ERROR", "", ""))
            table.errors.append(("all", str(raise_lib), ""))
        else:
            try:
                if wanted("1"):
                    m1_listing(table, tether, url, tmp, kclient)
            except Exception as e:  # noqa: BLE001
                table.error("1. full listing", e)

            main_ctx = None
            try:
                if not wanted("2", "2b", "2c", "3", "3b", "4", "4b"):
                    raise StopIteration
                main_ctx = open_context(tether, url, os.path.join(tmp, "main.db"))
                main_ctx.query(COLLECTION, policy="server_only", timeout=FETCH_TIMEOUT).all()
            except StopIteration:
                main_ctx = None
            except Exception as e:  # noqa: BLE001
                table.error("2./3. (populating the main store)", e)
                main_ctx = None
            if main_ctx is not None:
                for name, fn in (("2. peek", m2_peek),
                                 ("2b. peek vs a trivial ctypes call",
                                  lambda table, ctx, con: m2b_ctypes(table, tether, ctx)),
                                 ("2c. peek from C", lambda table, ctx, con: m2c_peek_c(table, url)),
                                 ("3. cache_only fetch", m3_cache_fetch),
                                 ("3b. predicate fetch", m3b_predicate_fetch)):
                    try:
                        if wanted(name.split(".")[0]):
                            fn(table, main_ctx, con)
                    except Exception as e:  # noqa: BLE001
                        table.error(name, e)
                try:
                    if wanted("4", "4b"):
                        m4_refresh(table, tether, url, tmp, main_ctx)
                except Exception as e:  # noqa: BLE001
                    table.error("4. batched refresh", e)
                main_ctx.close()
            try:
                if wanted("4c"):
                    m4c_many_gets(table, tether, url, tmp)
            except Exception as e:  # noqa: BLE001
                table.error("4c. %d gets on uncached objects" % MANY_GETS, e)
            try:
                if wanted("5"):
                    m5_memory(table, url, tmp)
            except Exception as e:  # noqa: BLE001
                table.error("5. peak RSS growth", e)
            try:
                if wanted("6"):
                    m6_first_peek(table, url, tmp)
            except Exception as e:  # noqa: BLE001
                table.error("6. first peek from C", e)
            small_store = None
            try:
                if wanted("7", "8"):
                    small_store = m7_big_predicate(table, tether, url, tmp)
            except Exception as e:  # noqa: BLE001
                table.error("7. predicate + sort from C", e)
            try:
                if wanted("8"):
                    m8_big_iterate(table, tether, url, tmp, small_store)
            except Exception as e:  # noqa: BLE001
                table.error("8. iterate from C", e)
            try:
                if wanted("11"):
                    m11_save(table, url, tmp, kclient)
            except Exception as e:  # noqa: BLE001
                table.error("11. save", e)
            try:
                if wanted("13"):
                    import fleet
                    fleet.m13_fleet(table, url, tmp, QUICK)
            except Exception as e:  # noqa: BLE001
                table.error("13. fleet", e)
            try:
                if PG and wanted("12"):
                    m12_postgres(table, tether, tmp)
            except Exception as e:  # noqa: BLE001
                table.error("12. PostgreSQL direct", e)
        for name, fn in (("9. load time", m9_load_time), ("10. stripped size", m10_size)):
            try:
                if wanted(name.split(".")[0]):
                    fn(table, tmp)
            except Exception as e:  # noqa: BLE001
                table.error(name, e)
        con.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    table.print()
    print()
    for note in table.notes:
        print(note)
    print("ratio = tether / peer: below 1.00x tether is faster, smaller or needs fewer requests.")
    print("total %.1f s" % (time.monotonic() - started))
    if table.errors:
        print()
        for name, msg, tb in table.errors:
            print("ERROR in %s: %s" % (name, msg))
            if os.environ.get("BENCH_TRACEBACK"):
                print(tb)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
