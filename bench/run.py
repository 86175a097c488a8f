#!/usr/bin/env python3
"""Tether benchmark: speed and memory as ratios against peers run side by side.

    scripts/with-kinto .venv/bin/python bench/run.py      (what `make bench` runs)

Needs TETHER_TEST_URL (a fresh Kinto, as scripts/with-kinto starts) and, for
request counts, TETHER_KINTO_DIR (its run folder holding kinto.log).
TETHER_LIBRARY defaults to build/libtether.so. Seeds bucket `bench` with
BENCH_RECORDS (default 2000) deterministic records, then prints one table row
per measurement: tether, peer, ratio tether/peer. See bench/README.md.

Exit status: 0 if every measurement ran, 1 if any failed (the table shows
ERROR and the errors are listed below it).
"""
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import BUCKET, COLLECTION, USER, PASSWORD  # noqa: E402

RECORDS = int(os.environ.get("BENCH_RECORDS") or 2000)
RUNS = int(os.environ.get("BENCH_RUNS") or 5)          # timed runs (after one warm-up)
PEEKS = 20000
REFRESH_GETS = 500
MEM_RUNS = 3
FETCH_TIMEOUT = 60
# Rows 7 and 8: caches multiplied in SQLite by build/big_cache (see its header).
PREDICATE_ROWS = int(os.environ.get("BENCH_PREDICATE_ROWS") or 100000)
ITERATE_ROWS = int(os.environ.get("BENCH_ITERATE_ROWS") or 1000000)
BATCH_SIZE = 1000
ITERATE_RUNS = 3        # each run is its own process, so VmHWM is that run's alone
MEMORY_LIMIT_KB = 4 * 1024 * 1024   # a run over this is stopped and reported, not waited for


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


# ------------------------------------------------------------------ helpers

def open_context(tether, url, path):
    return tether.Context(url, BUCKET, path, username=USER, password=PASSWORD)


def tether_listing(tether, url, path):
    """Opens a context on a new store (untimed), times one server_only fetch
    of the whole collection. Returns (seconds, record count)."""
    ctx = open_context(tether, url, path)
    try:
        t0 = now()
        _, objs = ctx.fetch_wait(COLLECTION, policy="server_only", timeout=FETCH_TIMEOUT)
        dt = now() - t0
        return dt, len(objs)
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
    if len(recs) != RECORDS:
        raise RuntimeError("curl listing gave %d records, expected %d" % (len(recs), RECORDS))
    t_tether, t_curl, t_kinto = [], [], []
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
        t0 = now()
        common.curl_listing(first)
        dt = now() - t0
        if run:
            t_curl.append(dt)
        t0 = now()
        got = common.kinto_http_listing(kclient)
        dt = now() - t0
        if len(got) != RECORDS:
            raise RuntimeError("kinto-http gave %d records, expected %d" % (len(got), RECORDS))
        if run:
            t_kinto.append(dt)
    name = "1. full listing, %d rec / %d pages" % (RECORDS, pages)
    if tether_err is not None:
        table.rows.append((name + " vs curl", "ERROR", ms(median(t_curl)), ""))
        table.rows.append((name + " vs kinto-http", "ERROR", ms(median(t_kinto)), ""))
        table.errors.append((name, "%s: %s" % (type(tether_err).__name__, tether_err), tether_tb))
        return
    tt = median(t_tether)
    table.add(name + " vs curl", ms(tt), ms(median(t_curl)), ratio(tt, median(t_curl)))
    table.add(name + " vs kinto-http", ms(tt), ms(median(t_kinto)), ratio(tt, median(t_kinto)))


def m2_peek(table, ctx, con):
    """N peeks over cached objects vs sqlite3 SELECT of the same value by id."""
    keys = common.SCALAR_FIELDS
    order = [((i * 7) % RECORDS, keys[i % len(keys)]) for i in range(PEEKS)]
    objs = [ctx.object(COLLECTION, common.record_id(i)) for i in range(RECORDS)]
    sql = {k: 'SELECT "%s" FROM items WHERE id = ?' % k for k in keys}
    t_pairs = [(objs[i], k) for i, k in order]
    s_pairs = [((common.record_id(i),), sql[k]) for i, k in order]
    cur = con.cursor()
    # Check both sides read the same values (and warm up).
    for (o, k), (args, q) in zip(t_pairs[:RECORDS], s_pairs[:RECORDS]):
        a, b = o.peek(k), cur.execute(q, args).fetchone()[0]
        if a != b:
            raise RuntimeError("peek(%r) of %s gave %r, sqlite3 has %r" % (k, o.id, a, b))
    tt, ts, tx = [], [], []
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
    name = "2. peek, per read (%d reads)" % PEEKS
    table.add(name + " vs sqlite3", us(median(tt)), us(median(ts)), ratio(median(tt), median(ts)))
    table.add(name + " vs sqlite3 1 txn", us(median(tt)), us(median(tx)),
              ratio(median(tt), median(tx)))


def m3_cache_fetch(table, ctx, con):
    """cache_only fetch of everything vs sqlite3 SELECT * into tuples."""
    tt, ts = [], []
    for run in range(RUNS + 1):
        t0 = now()
        _, objs = ctx.fetch_wait(COLLECTION, policy="cache_only", timeout=FETCH_TIMEOUT)
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
        _, objs = ctx.fetch_wait(COLLECTION, policy="cache_only", where=where, args=args, sort="-Count",
                                 timeout=FETCH_TIMEOUT)
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


def m4_refresh(table, tether, url, tmp, main_ctx):
    """get on 500 distinct objects, wait until every refresh landed; count the
    requests Kinto saw; compare with one curl listing with in_id= of those ids."""
    logpath = common.kinto_log_path()
    step = max(1, RECORDS // REFRESH_GETS)
    ids = [common.record_id(i) for i in range(0, RECORDS, step)][:REFRESH_GETS]
    n = len(ids)
    curl_url = "%s%s?%s" % (url, common.records_route(),
                            urllib.parse.urlencode({"in_id": ",".join(ids)}, safe=","))
    pages, recs = common.curl_listing(curl_url, parse=True)
    if len(recs) != n:
        raise RuntimeError("curl in_id listing gave %d records, expected %d" % (len(recs), n))

    tt, tc, counts = [], [], []
    for run in range(3):
        ctx = open_context(tether, url, os.path.join(tmp, "refresh-%d.db" % run))
        try:
            objs = [ctx.object(COLLECTION, i) for i in ids]
            off = common.log_offset(logpath) if logpath else None
            t0 = now()
            for o in objs:
                try:
                    o.get("Name")
                except tether.NotCachedError:
                    pass
            pending = set(range(n))
            deadline = time.monotonic() + 30
            while pending:
                for k in list(pending):
                    try:
                        objs[k].peek("Name")
                        pending.discard(k)
                    except tether.NotCachedError:
                        pass
                if not pending:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("refreshes did not land: %d of %d objects still not "
                                       "cached 30 s after get" % (len(pending), n))
                time.sleep(0.002)
            tt.append(now() - t0)
            if logpath:
                counts.append(wait_quiet(logpath, off))
        finally:
            ctx.close()
        t0 = now()
        common.curl_listing(curl_url)
        tc.append(now() - t0)

    name = "4. %d gets on uncached objects" % n
    table.add(name + ", time", ms(median(tt)), ms(median(tc)), ratio(median(tt), median(tc)))
    if counts:
        c = [len(r) for r in counts]
        firsts = [sum(1 for _, _, q in r if "_token" not in q) for r in counts]
        table.add(name + ", requests", "%d (%d-%d)" % (median(c), min(c), max(c)), "%d" % pages,
                  ratio(median(c), pages))
        table.notes.append("4: requests per run %s, of which in_id listings (first pages) %s; "
                           "curl: 1 listing of %d pages" % (c, firsts, pages))
    else:
        table.add(name + ", requests", "n/a (no kinto.log)", "%d" % pages, "")

    # The same gets on objects already cached (every get refreshes: staleness 0).
    if logpath:
        objs = [main_ctx.object(COLLECTION, i) for i in ids]
        off = common.log_offset(logpath)
        for o in objs:
            o.get("Name")
        reqs = wait_quiet(logpath, off)
        table.add("4b. %d gets on cached objects, requests" % n, "%d" % len(reqs),
                  "%d" % pages, ratio(len(reqs), pages))


def m5_memory(table, url, tmp):
    """Peak RSS growth of one full listing: tether context vs kinto-http dicts."""
    probe = os.path.join(common.HERE, "memprobe.py")
    res = {"tether": [], "kinto-http": []}
    import json
    for run in range(MEM_RUNS):
        for mode in ("tether", "kinto-http"):
            d = tempfile.mkdtemp(prefix="mem-", dir=tmp)
            proc = subprocess.run([sys.executable, probe, mode, url, d], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=120)
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


# ------------------------------------------------------------------ main

def m6_first_peek(table, url, tmp):
    """First read of an object whose row is in the store, not in memory (C)."""
    program = os.path.join(ROOT, "build", "first_peek")
    store = os.path.join(tmp, "first-peek.db")
    out = subprocess.run([program, url, BUCKET, COLLECTION, "Name", store, USER, PASSWORD], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, check=True,
                         env=dict(os.environ, LD_LIBRARY_PATH=os.path.join(ROOT, "build")))
    result = json.loads(out.stdout)
    name = "6. first peek from C (row in store, not in memory; %d reads)" % result["reads"]
    table.add(name, "%.2f us" % (result["tether_ns"] / 1000), "%.2f us (prepared SELECT)" % (result["sqlite_ns"] / 1000),
              ratio(result["tether_ns"], result["sqlite_ns"]))
    table.notes.append("6: object + peek + release per read, object cache 0; %d objects in memory afterwards"
                       % result["objects_in_memory"])


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


def m7_big_predicate(table, url, tmp):
    """Predicate + sort over a large cache from C vs the same prepared SELECT."""
    store = os.path.join(tmp, "big-%d.db" % PREDICATE_ROWS)
    made = big_cache(url, store, "make", PREDICATE_ROWS)
    r = big_cache(url, store, "predicate", RUNS)
    table.add("7. predicate + sort from C, cache only, %d of %d rows" % (r["matches"], r["rows"]),
              ms(r["tether_s"]), ms(r["sqlite_s"]) + " (prepared SELECT)", ratio(r["tether_s"], r["sqlite_s"]))
    table.notes.append("7: store of %d rows (%d fetched, multiplied in SQLite in %.1f s); ids equal in order"
                       % (made["rows"], made["fetched"], made["seconds"]))
    return store


def m8_big_iterate(table, url, tmp, small_store):
    """Every row's Name over a very large cache: tether with batch_size (and
    without) vs sqlite3 stepping the same SELECT; time and peak RSS growth."""
    store = os.path.join(tmp, "big-%d.db" % ITERATE_ROWS)
    made = big_cache(url, store, "make", ITERATE_ROWS)
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
    note = ("8: store of %d rows (%d fetched, multiplied in SQLite in %.1f s). With batch_size, %s of the %s "
            "peak is reached when the answer arrives, before any row is read; %d objects in memory at the end"
            % (made["rows"], made["fetched"], made["seconds"], mb(fetch_kb), mb(tg),
               runs["tether"][0]["objects_in_memory"]))
    if small_store:   # the same pass over row 7's smaller store: does the growth follow the row count?
        small = big_cache(url, small_store, "iterate", "tether", BATCH_SIZE)
        per_row = (tg - small["growth_kb"]) * 1024.0 / (ITERATE_ROWS - small["rows"])
        note += ". At %d rows the growth is %s: about %.0f bytes per further row" % (
            small["rows"], mb(small["growth_kb"]), per_row)
    table.notes.append(note)

    # Once each, stopped past MEMORY_LIMIT_KB: results that hold every object,
    # and a values answer (batch_size given, but values are held, not batched).
    for label, side, batch in (("8b. the same without batch_size", "tether", 0),
                               ("8c. RESULT_VALUES of Name, batch_size %d" % BATCH_SIZE, "values", BATCH_SIZE)):
        r = big_cache(url, store, "iterate", side, batch, limit_kb=MEMORY_LIMIT_KB)
        if r is None:
            table.add(label + ", peak RSS growth", "> %s (stopped)" % mb(MEMORY_LIMIT_KB), mb(sg), "n/a")
            continue
        if r["rows"] != ITERATE_ROWS or r["checksum"] != runs["sqlite"][0]["checksum"]:
            raise RuntimeError("%s: read %d rows (checksum %d)" % (label, r["rows"], r["checksum"]))
        table.add(label + ", peak RSS growth", mb(r["growth_kb"]), mb(sg), ratio(r["growth_kb"], sg))
        table.notes.append("%s: %.2f s (%.1fx sqlite3's step); %s of it when the answer arrived"
                           % (label.split(".")[0], r["seconds"], r["seconds"] / s, mb(r["fetch_growth_kb"])))


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

    print("Tether bench: server %s, library %s" % (url, libinfo))
    print("peers: curl %s, %s, sqlite3 %s (Python %s)" % (
        curl_v, kinfo, sqlite3.sqlite_version, sys.version.split()[0]))
    t0 = now()
    common.seed(url, RECORDS)
    print("seeded %s/%s with %d records in %.1f s; medians of %d runs after a warm-up" % (
        BUCKET, COLLECTION, RECORDS, now() - t0, RUNS))
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
                m1_listing(table, tether, url, tmp, kclient)
            except Exception as e:  # noqa: BLE001
                table.error("1. full listing", e)

            main_ctx = None
            try:
                main_ctx = open_context(tether, url, os.path.join(tmp, "main.db"))
                main_ctx.fetch_wait(COLLECTION, policy="server_only", timeout=FETCH_TIMEOUT)
            except Exception as e:  # noqa: BLE001
                table.error("2./3. (populating the main store)", e)
                main_ctx = None
            if main_ctx is not None:
                for name, fn in (("2. peek", m2_peek), ("3. cache_only fetch", m3_cache_fetch),
                                 ("3b. predicate fetch", m3b_predicate_fetch)):
                    try:
                        fn(table, main_ctx, con)
                    except Exception as e:  # noqa: BLE001
                        table.error(name, e)
                try:
                    m4_refresh(table, tether, url, tmp, main_ctx)
                except Exception as e:  # noqa: BLE001
                    table.error("4. batched refresh", e)
                main_ctx.close()
            try:
                m5_memory(table, url, tmp)
            except Exception as e:  # noqa: BLE001
                table.error("5. peak RSS growth", e)
            try:
                m6_first_peek(table, url, tmp)
            except Exception as e:  # noqa: BLE001
                table.error("6. first peek from C", e)
            small_store = None
            try:
                small_store = m7_big_predicate(table, url, tmp)
            except Exception as e:  # noqa: BLE001
                table.error("7. predicate + sort from C", e)
            try:
                m8_big_iterate(table, url, tmp, small_store)
            except Exception as e:  # noqa: BLE001
                table.error("8. iterate from C", e)
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
