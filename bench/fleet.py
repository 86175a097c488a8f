"""Rows 13 and 13b: a fleet of live clients (issue 40).

13, over Kinto: N clients (contexts, each with a store of its own, spread
over a few processes) hold a live query of the small "fleet" collection
while a writer (another client, urllib) changes one record a second.
Measured: the time from each write (once its PATCH has answered: Kinto
commits as it answers) to the last client's live answer holding it (median
and maximum over the writes), the writer's round trip (a fleet that crowds
the server delays other clients' requests), and what the fleet cost Kinto
(from Kinto's own log): requests per second and the share answered 304,
in the writing window and, separately, in a quiet window after it (no
writes: every round should then be a 304). A round is a listing of the
collection, or of the bucket's history where Kinto has its history plugin
(KINTO_INCLUDES=kinto.plugins.history). The notes say when Kinto's server
(waitress) stopped accepting connections at its connection limit.

13b, over PostgreSQL with pushed changes: N contexts opened with
Context.open_postgres on the schema bench_fleet, whose table fleet is
tracked (tether.install_postgres), each with a live query of it, while a
writer (psycopg2, autocommit) commits one UPDATE a second. Measured: the
time from each commit (once it has answered) to the last client's live
answer holding it, and the connections the fleet holds at the server,
sampled from pg_stat_activity once a second: application_name 'tether
listen' (by design one per process and database, whatever the number of
contexts) and 'tether' (each context's own session). Runs where the bench has a PostgreSQL: KINTO_STORAGE_URL
(make bench) or TETHER_PG_CONNINFO (scripts/with-postgres); skipped (a note
says so) otherwise, as in quick mode on the memory backend. When that
server's max_connections leaves no room for the fleet (N = 200 on
scripts/pg-start's 50), 13b runs on a cluster of its own (scripts/pg-start,
then stopped, given a larger max_connections and started again).

    BENCH_FLEET_CLIENTS (default 20; 200 on request), BENCH_FLEET_PROCESSES
    (default: at least 4, at most 25 contexts each), BENCH_FLEET_SECONDS
    (writing, default 60; 6 with BENCH_QUICK), BENCH_FLEET_IDLE (the quiet
    window over Kinto, default 15; 2 with BENCH_QUICK), BENCH_FLEET_INTERVAL
    (sync_interval in seconds, default 5; 1 with BENCH_QUICK).

Run as a script, it is one client process (see `client_main`).
"""
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import BUCKET, USER, PASSWORD  # noqa: E402

FLEET = "fleet"
FLEET_RECORDS = 50
MIN_PROCESSES = 4
CONTEXTS_PER_PROCESS = 25
PG_SCHEMA = "bench_fleet"
LISTEN_NAME = "tether listen"       # PostgresListener.applicationName
SESSION_NAME = "tether"             # PostgresSession's default
READY_TIMEOUT = 600                 # s for every client to open and answer live once


# ------------------------------------------------------------------ a client process

def client_main(kind, target, tmp, first, count, interval):
    """One process: `count` contexts (over Kinto, target its URL, or over
    PostgreSQL, target a conninfo), each a live query of the fleet. Prints
    ["ready", first, count, live] once every live query has answered live
    (or after READY_TIMEOUT), then one JSON line per live answer whose
    values moved: [client, time, {record number: n}] (the records that
    moved). Closes its contexts at EOF on stdin."""
    import tether
    contexts, tasks, seen = [], [], {}
    live = set()
    cond = threading.Condition()
    out = threading.Lock()

    def say(item):
        # One write a line, under a lock: print() from callbacks on several
        # threads can interleave two lines into one that does not parse.
        with out:
            sys.stdout.write(json.dumps(item) + "\n")
            sys.stdout.flush()

    def watcher(index):
        def on_answer(answer):
            if answer.phase != "live":
                return
            if answer.error is not None:
                print("fleet client %d: %s" % (index, answer.error), file=sys.stderr, flush=True)
            else:
                now = time.time()
                known = seen.setdefault(index, {})
                moved = {}
                for o in answer.answer:
                    record, n = int(o.id[1:]), o.peek("n") or 0
                    if n > known.get(record, 0):
                        known[record] = moved[record] = n
                if moved:
                    say([index, now, moved])
            with cond:
                live.add(index)
                cond.notify_all()
        return on_answer

    for index in range(first, first + count):
        store = os.path.join(tmp, "fleet-%s-%d.db" % (kind, index))
        if kind == "kinto":
            ctx = tether.Context(target, BUCKET, store, username=USER, password=PASSWORD, sync_interval=interval)
        else:
            ctx = tether.Context.open_postgres(target, store, schema=PG_SCHEMA, sync_interval=interval)
        ctx.query(FLEET).all()           # synced whole: each round (or push) then asks what changed
        contexts.append(ctx)
        tasks.append(ctx.query(FLEET).live(watcher(index)))
    with cond:
        cond.wait_for(lambda: len(live) == count, timeout=READY_TIMEOUT)
        answered = len(live)
    say(["ready", first, count, answered])
    sys.stdin.read()                     # the bench closes our stdin when it is done
    t0 = time.monotonic()
    for ctx in contexts:
        ctx.close()
    say(["closed", time.monotonic() - t0])


# ------------------------------------------------------------------ the bench's side

def _cpu_seconds(pids):
    """utime + stime of these processes (those still there), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


def processes_for(clients):
    given = os.environ.get("BENCH_FLEET_PROCESSES")
    if given:
        return max(1, min(clients, int(given)))
    return max(min(MIN_PROCESSES, clients), -(-clients // CONTEXTS_PER_PROCESS))


class Fleet:
    """The client processes: started, read continuously (so that a full pipe
    never holds a callback back), stopped by closing their stdin."""

    def __init__(self, kind, target, tmp, clients, processes, interval):
        self.clients = clients
        self.procs, self.readers = [], []
        self.lines, self.ready, self.closing = [], [], []
        self.garbled = 0
        self.lock = threading.Condition()
        per = -(-clients // processes)
        for first in range(0, clients, per):
            count = min(per, clients - first)
            p = subprocess.Popen([sys.executable, os.path.abspath(__file__), kind, target, tmp, str(first),
                                  str(count), str(interval)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
            self.procs.append(p)
            t = threading.Thread(target=self._read, args=(p,), daemon=True)
            t.start()
            self.readers.append(t)

    def _read(self, p):
        for line in p.stdout:
            try:
                item = json.loads(line)
            except ValueError:
                self.garbled += 1
                continue
            with self.lock:
                if item[0] == "ready":
                    self.ready.append(item)
                elif item[0] == "closed":
                    self.closing.append(item[1])
                else:
                    self.lines.append(item)
                self.lock.notify_all()
        with self.lock:
            self.lock.notify_all()

    def pids(self):
        return [p.pid for p in self.procs]

    def wait_ready(self):
        """Waits until every process has every live query answering; returns
        how many of the clients did (all of them unless one timed out)."""
        deadline = time.monotonic() + READY_TIMEOUT + 60
        with self.lock:
            while len(self.ready) < len(self.procs):
                dead = [p for p in self.procs if p.poll() is not None]
                if dead:
                    raise RuntimeError("a fleet process ended before it was ready (status %d)" % dead[0].returncode)
                if time.monotonic() > deadline:
                    raise RuntimeError("the fleet was not ready within %d s" % (READY_TIMEOUT + 60))
                self.lock.wait(1.0)
            return sum(r[3] for r in self.ready)

    def seen(self, writes):
        """(client, write) -> the time the client's live answer first held
        that write: write k sets record k % FLEET_RECORDS to k, so an answer
        holds it once that record's n is k or more (exact also when writes
        overlap and commit out of order)."""
        out = {}
        with self.lock:
            lines = list(self.lines)
        for index, when, moved in lines:
            for record, n in moved.items():
                for k in range(int(record), n + 1, FLEET_RECORDS):
                    if k in writes:
                        out.setdefault((index, k), when)
        return out

    def wait_seen(self, k, timeout):
        """Waits until every client's answer holds write k (or timeout)."""
        record = str(k % FLEET_RECORDS)
        deadline = time.monotonic() + timeout
        with self.lock:
            while time.monotonic() < deadline:
                holding = {index for index, _, moved in self.lines if moved.get(record, 0) >= k}
                if len(holding) == self.clients:
                    return True
                self.lock.wait(0.2)
        return False

    def stop(self):
        """Closes every context (EOF on stdin); returns the longest close of a process's contexts."""
        for p in self.procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for t in self.readers:
            t.join(timeout=10)
        return max(self.closing, default=None)


def _lags(writes, seen, clients):
    """Per write reached by every client: the last client's delay; and every
    client's delay for every write it saw; and how many writes missed one."""
    lags, each = [], []
    for k, written in writes.items():
        times = [seen.get((c, k)) for c in range(clients)]
        each += [t - written for t in times if t is not None]
        if all(t is not None for t in times):
            lags.append(max(times) - written)
    return lags, each, len(writes) - len(lags)


def _settings(quick):
    clients = int(os.environ.get("BENCH_FLEET_CLIENTS") or 20)
    return dict(clients=clients, processes=processes_for(clients),
                seconds=float(os.environ.get("BENCH_FLEET_SECONDS") or (6 if quick else 60)),
                idle=float(os.environ.get("BENCH_FLEET_IDLE") or (2 if quick else 15)),
                interval=float(os.environ.get("BENCH_FLEET_INTERVAL") or (1 if quick else 5)))


def m13_fleet(table, url, tmp, quick):
    """Row 13 over Kinto, then row 13b over PostgreSQL where there is one."""
    s = _settings(quick)
    error = None
    try:
        m13_kinto(table, url, tmp, **s)
    except Exception as e:  # noqa: BLE001 - the PostgreSQL half runs all the same
        error = e
    conninfo = os.environ.get("KINTO_STORAGE_URL") or os.environ.get("TETHER_PG_CONNINFO")
    if conninfo:
        try:
            m13b_postgres(table, conninfo, tmp, **s)
        except Exception as e:  # noqa: BLE001
            table.error("13b. fleet on PostgreSQL", e)
    else:
        table.notes.append("13b: not run: no PostgreSQL (make bench's backend, or TETHER_PG_CONNINFO)")
    if error is not None:
        raise error


# ------------------------------------------------------------------ 13: Kinto

def _seed(url):
    common.http("PUT", url + "/buckets/%s/collections/%s" % (BUCKET, FLEET),
                {"data": {"schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}})
    reqs = [{"method": "PUT", "path": "/buckets/%s/collections/%s/records/w%02d" % (BUCKET, FLEET, i),
             "body": {"data": {"n": 0}}} for i in range(FLEET_RECORDS)]
    for i in range(0, len(reqs), 25):
        common.http("POST", url + "/batch", {"requests": reqs[i:i + 25]})


def _kinto_pid():
    d = os.environ.get("TETHER_KINTO_DIR")
    try:
        with open(os.path.join(d, "kinto.pid")) as f:
            return int(f.read().strip())
    except (TypeError, OSError, ValueError):
        return None


def _is_round(path):
    """A fleet client's round: a listing of the collection, or of the
    bucket's history (where Kinto has kinto.plugins.history: KINTO_INCLUDES)."""
    path = path or ""
    return "/collections/%s/" % FLEET in path or path.endswith("/buckets/%s/history" % BUCKET)


def _connection_limit_warnings(path, offset):
    """How many times waitress logged, after `offset`, that it stopped accepting connections."""
    with open(path, "rb") as f:
        f.seek(offset)
        return sum(1 for line in f if b"reached the connection limit" in line)


def _median_t(entries):
    ts = [e[4] for e in entries if isinstance(e[4], (int, float))]
    return "%.0f" % statistics.median(ts) if ts else "?"


def _times(entries):
    ts = [e[4] for e in entries if isinstance(e[4], (int, float))]
    if not ts:
        return "?"
    return "median %.0f ms, 90th percentile %.0f ms, max %.0f ms" % (statistics.median(ts), _percentile(ts, 0.9),
                                                                    max(ts))


def m13_kinto(table, url, tmp, clients, processes, seconds, idle, interval):
    _seed(url)
    load = os.getloadavg()[0]
    t_open = time.monotonic()
    fleet = Fleet("kinto", url, tmp, clients, processes, interval)
    try:
        answered = fleet.wait_ready()
        opened = time.monotonic() - t_open
        pids = fleet.pids()
        kinto = [p for p in [_kinto_pid()] if p]
        logpath = common.kinto_log_path()
        offset = common.log_offset(logpath) if logpath else None
        writes, trips, failed = {}, [], []
        lock = threading.Lock()

        def write(k):
            # A thread each, on the second: a slow answer does not delay the next write.
            try:
                t0 = time.time()
                common.http("PATCH", url + "/buckets/%s/collections/%s/records/w%02d"
                            % (BUCKET, FLEET, k % FLEET_RECORDS), {"data": {"n": k}}, timeout=120)
                done = time.time()
                with lock:
                    trips.append(done - t0)
                    writes[k] = done     # committed by now (Kinto commits as it answers)
            except Exception as e:  # noqa: BLE001 - raised below
                failed.append(e)

        cpu0 = (_cpu_seconds(pids), _cpu_seconds(kinto))
        writers = []
        start = time.monotonic()
        n = 0
        while time.monotonic() - start < seconds:
            n += 1
            writers.append(threading.Thread(target=write, args=(n,), daemon=True))
            writers[-1].start()
            time.sleep(max(0.0, start + n - time.monotonic()))
        for t in writers:
            t.join(timeout=150)
        if failed:
            raise failed[0]
        window = time.monotonic() - start
        cpu1 = (_cpu_seconds(pids), _cpu_seconds(kinto))
        entries = common.request_timings_since(logpath, offset) if logpath else None
        # The last write's rounds, then the quiet window: every round finds nothing new.
        fleet.wait_seen(n, interval * 3 + 10)
        time.sleep(0.2 * interval)
        idle_offset = common.log_offset(logpath) if logpath else None
        cpu2 = (_cpu_seconds(pids), _cpu_seconds(kinto))
        time.sleep(idle)
        cpu3 = (_cpu_seconds(pids), _cpu_seconds(kinto))
        quiet_entries = common.request_timings_since(logpath, idle_offset) if logpath else None
        limited = _connection_limit_warnings(logpath, offset) if logpath else 0
    finally:
        closing = fleet.stop()
    if fleet.garbled:
        raise RuntimeError("%d lines of the fleet's output did not parse" % fleet.garbled)
    lags, each, missing = _lags(writes, fleet.seen(writes), clients)
    name = "13. fleet on Kinto: %d clients in %d processes, sync_interval %g s" % (clients, processes, interval)
    if lags:
        table.add(name + ", write to last client (median / max)",
                  "%.2f / %.2f s" % (statistics.median(lags), max(lags)), "<= %.2f s (goal)" % (interval + 1), "")
        gets = [e[4] for e in entries or [] if e[0] == "GET" and _is_round(e[1]) and isinstance(e[4], (int, float))]
        trip = statistics.median(gets) / 1000 if gets else statistics.median(trips)
        table.add(name + ", write to a client (median)", "%.2f s" % statistics.median(each),
                  "<= %.2f s (goal)" % (interval / 2 + trip), "")
    if trips:
        table.add(name + ", the writer's PATCH round trip (median / max)",
                  "%.0f / %.0f ms" % (statistics.median(trips) * 1000, max(trips) * 1000),
                  "%s ms (Kinto's own, median)" % _median_t([e for e in entries or [] if e[0] == "PATCH"]), "")
    if limited:
        table.notes.append("13: Kinto's server (waitress) said %d times meanwhile that its open connections reached "
                           "its connection limit and it stopped accepting new ones (waitress' connection_limit, "
                           "100 by default): clients beyond it wait in the listen queue" % limited)
    table.notes.append("13: %d writes in %.0f s (the writer's PATCH: %.0f ms median); goals: the last client within "
                       "the interval + 1 s, the median client within half the interval + a round trip (a fleet "
                       "GET's median time in Kinto's log); %d clients opened, synced and answering live in %.1f s; "
                       "closing a process's contexts took at most %s; the machine's load average before: %.1f"
                       % (len(writes), window, statistics.median(trips) * 1000, answered, opened,
                          "%.2f s" % closing if closing is not None else "?", load))
    if missing:
        table.notes.append("13: %d of %d writes did not reach every client" % (missing, len(writes)))
    expected = clients / interval
    for label, got, span, cpu in (("writing %.0f s" % window, entries, window, (cpu0, cpu1)),
                                  ("idle %.0f s" % idle, quiet_entries, idle, (cpu2, cpu3))):
        if got is None:
            continue
        fleet_gets = [e for e in got if e[0] == "GET" and _is_round(e[1])]
        patches = [e for e in got if e[0] == "PATCH"]
        quiet = sum(1 for e in fleet_gets if e[3] == 304)
        rate = len(fleet_gets) / span
        table.add("%s, %s: requests/s (304 share)" % (name, label),
                  "%.1f/s (%.0f%% 304)" % (rate, 100.0 * quiet / max(1, len(fleet_gets))),
                  "%.1f/s" % expected, "%.2fx" % (rate / expected))
        others = len(got) - len(fleet_gets)
        (f0, k0), (f1, k1) = cpu
        table.notes.append("13 (%s): %d fleet GETs to Kinto, %d answered 304, %d other requests (the writer's "
                           "included); Kinto's own time a request (its log's t): fleet GETs %s%s; CPU: the fleet's "
                           "processes %.0f%% of a core, Kinto %s"
                           % (label, len(fleet_gets), quiet, others, _times(fleet_gets),
                              ", PATCHes %s" % _times(patches) if patches else "", 100 * (f1 - f0) / span,
                              "%.0f%%" % (100 * (k1 - k0) / span) if _kinto_pid() else "?"))
    table.notes.append("13: the peer column of requests/s is one request per client and interval; the goal at "
                       "200 clients and 5 s: <= 45/s and >= 95% 304 (or empty) while idle; while every interval "
                       "holds a write, every round finds it (no 304 to expect)")


# ------------------------------------------------------------------ 13b: PostgreSQL

def _pg_room(conninfo):
    import psycopg2
    con = psycopg2.connect(conninfo)
    try:
        cur = con.cursor()
        cur.execute("SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int"
                    " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')")
        return cur.fetchone()[0]
    finally:
        con.close()


def _own_cluster(max_connections):
    """A PostgreSQL cluster of the bench's own (scripts/pg-start) allowing
    max_connections. Returns (conninfo, stop)."""
    scripts = os.path.join(common.ROOT, "scripts")
    os.makedirs(os.path.join(common.ROOT, ".run"), exist_ok=True)
    top = tempfile.mkdtemp(prefix="fleet-pg.", dir=os.path.join(common.ROOT, ".run"))
    os.chmod(top, 0o711)   # PostgreSQL runs as `postgres` when we are root: it must pass through
    d = os.path.join(top, "pg")

    def stop():
        subprocess.run([os.path.join(scripts, "pg-stop"), d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(top, ignore_errors=True)

    try:
        subprocess.run([os.path.join(scripts, "pg-start"), d], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
        subprocess.run([os.path.join(scripts, "pg-stop"), d], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
        with open(os.path.join(d, "data", "postgresql.conf"), "a") as f:
            f.write("\n# bench/fleet.py: room for the fleet\nmax_connections = %d\n" % max_connections)
        url = subprocess.run([os.path.join(scripts, "pg-start"), d], check=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True).stdout.strip()
    except subprocess.CalledProcessError as e:
        stop()
        raise RuntimeError("could not start a PostgreSQL for the fleet: %s" % (e.stderr or "").strip()[-500:]) from None
    return url, stop


def _connections(cur):
    cur.execute("SELECT count(*) FILTER (WHERE application_name = %s), count(*) FILTER (WHERE application_name = %s), "
                "array_agg(pid) FILTER (WHERE application_name IN (%s, %s)) "
                "FROM pg_stat_activity WHERE datname = current_database()",
                (LISTEN_NAME, SESSION_NAME, LISTEN_NAME, SESSION_NAME))
    listen, sessions, pids = cur.fetchone()
    return listen, sessions, pids or []


def m13b_postgres(table, conninfo, tmp, clients, processes, seconds, idle, interval):
    import psycopg2
    import tether
    need = clients + processes + 10       # sessions, listeners, the writer and some slack
    room = _pg_room(conninfo)
    stop_cluster, where = None, "the bench's server"
    if room < need:
        conninfo, stop_cluster = _own_cluster(max(100, need + 50))
        where = ("a cluster of its own (the bench's server had room for %d connections, the fleet needs about %d)"
                 % (room, need))
    con = None
    try:
        con = psycopg2.connect(conninfo)
        con.autocommit = True
        cur = con.cursor()
        cur.execute("DROP SCHEMA IF EXISTS %s CASCADE" % PG_SCHEMA)
        cur.execute("CREATE SCHEMA %s" % PG_SCHEMA)
        cur.execute("CREATE TABLE %s.%s (id text PRIMARY KEY, n int8 NOT NULL DEFAULT 0)" % (PG_SCHEMA, FLEET))
        cur.execute("INSERT INTO %s.%s SELECT 'w' || lpad(g::text, 2, '0'), 0 FROM generate_series(0, %d) g"
                    % (PG_SCHEMA, FLEET, FLEET_RECORDS - 1))
        tracked = tether.install_postgres(conninfo, PG_SCHEMA)
        if tracked != 1:
            raise RuntimeError("install_postgres tracked %d tables of %s, expected 1" % (tracked, PG_SCHEMA))
        _run_13b(table, cur, conninfo, tmp, clients, processes, seconds, interval, where)
    finally:
        if con is not None:
            cur = con.cursor()
            cur.execute("DROP SCHEMA IF EXISTS %s CASCADE" % PG_SCHEMA)
            cur.execute("DROP SCHEMA IF EXISTS tether CASCADE")
            con.close()
        if stop_cluster is not None:
            stop_cluster()


def _run_13b(table, cur, conninfo, tmp, clients, processes, seconds, interval, where):
    load = os.getloadavg()[0]
    t_open = time.monotonic()
    fleet = Fleet("pg", conninfo, tmp, clients, processes, interval)
    samples = []
    try:
        answered = fleet.wait_ready()
        opened = time.monotonic() - t_open
        # The listeners LISTEN on threads of their own: let them connect before the first commit.
        deadline = time.monotonic() + 10
        while _connections(cur)[0] < processes and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = fleet.pids()
        backends = _connections(cur)[2]
        cpu0 = (_cpu_seconds(pids), _cpu_seconds(backends))
        writes, trips = {}, []
        start = time.monotonic()
        n = 0
        while time.monotonic() - start < seconds:
            n += 1
            t0 = time.time()
            cur.execute("UPDATE %s.%s SET n = %%s WHERE id = %%s" % (PG_SCHEMA, FLEET), (n, "w%02d" % (n % FLEET_RECORDS)))
            done = time.time()
            trips.append(done - t0)
            writes[n] = done             # committed by now
            time.sleep(max(0.0, start + n - 0.5 - time.monotonic()))
            samples.append(_connections(cur)[:2])
            time.sleep(max(0.0, start + n - time.monotonic()))
        window = time.monotonic() - start
        cpu1 = (_cpu_seconds(pids), _cpu_seconds(backends))
        fleet.wait_seen(n, interval * 3 + 10)
    finally:
        closing = fleet.stop()
    if fleet.garbled:
        raise RuntimeError("%d lines of the fleet's output did not parse" % fleet.garbled)
    lags, each, missing = _lags(writes, fleet.seen(writes), clients)
    name = "13b. fleet on PostgreSQL: %d clients in %d processes, pushed changes" % (clients, processes)
    if lags:
        table.add(name + ", commit to last client (median / max)",
                  "%.0f / %.0f ms" % (statistics.median(lags) * 1000, max(lags) * 1000), "<= 100 ms (goal)", "")
        table.add(name + ", commit to a client (median)", "%.0f ms" % (statistics.median(each) * 1000), "", "")
    listen = [s[0] for s in samples]
    sessions = [s[1] for s in samples]
    if samples:
        table.add(name + ", listening connections (min-max of %d samples)" % len(samples),
                  "%d-%d" % (min(listen), max(listen)), "%d (1 per process)" % processes,
                  "%.2fx" % (max(listen) / processes))
        table.add(name + ", the fleet's connections in all (max)", "%d" % max(l + s for l, s in samples),
                  "%d (1 per context + 1 per process)" % (clients + processes), "")
    (f0, b0), (f1, b1) = cpu0, cpu1
    table.notes.append("13b: on %s; %d commits in %.0f s (the writer's UPDATE: %.1f ms median), each followed half a "
                       "second later by a sample of pg_stat_activity (application_name '%s' and '%s'); %d clients "
                       "opened, synced and answering live in %.1f s; CPU while writing: the fleet's processes %.0f%% "
                       "of a core, their backends at the server %.0f%%; closing a process's contexts took at most %s; the "
                       "machine's load average before: %.1f"
                       % (where, len(writes), window, statistics.median(trips) * 1000 if trips else 0, LISTEN_NAME,
                          SESSION_NAME, answered, opened, 100 * (f1 - f0) / window, 100 * (b1 - b0) / window,
                          "%.2f s" % closing if closing is not None else "?", load))
    if missing:
        table.notes.append("13b: %d of %d commits did not reach every client" % (missing, len(writes)))
    if lags:
        table.notes.append("13b: commit to last client, min %.0f ms; commit to a client, 90th percentile %.0f ms, "
                           "%d of %d deliveries over 1 s" % (min(lags) * 1000, _percentile(each, 0.9) * 1000,
                                                             sum(1 for d in each if d > 1), len(each)))


def _percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(q * len(xs))) - 1)] if xs else float("nan")


if __name__ == "__main__":
    kind, target, tmp, first, count, interval = sys.argv[1:7]
    common.setup_paths()
    client_main(kind, target, tmp, int(first), int(count), float(interval))
