"""Row 13: a fleet of live clients on one Kinto (issue 40).

N clients (contexts, each with a store of its own, spread over a few
processes) hold a live query of the small "fleet" collection while a writer
(another client, urllib) changes one record a second. Measured: the time
from each write to the last client's live answer holding it (median and
maximum over the writes), and what the fleet cost Kinto meanwhile: requests
per second, and the share answered 304 or with an empty change list (from
Kinto's own log). The peer is the writer's own round trip.

    BENCH_FLEET_CLIENTS (default 20; 200 on request), BENCH_FLEET_SECONDS
    (default 60; 6 with BENCH_QUICK), BENCH_FLEET_INTERVAL (seconds, default 5; 1 with BENCH_QUICK).

Run as a script, it is one client process (see `client_main`).
"""
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import BUCKET, USER, PASSWORD  # noqa: E402

FLEET = "fleet"
FLEET_RECORDS = 50
PROCESSES = 4


def _seed(url):
    common.http("PUT", url + "/buckets/%s/collections/%s" % (BUCKET, FLEET),
             {"data": {"schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}})
    reqs = [{"method": "PUT", "path": "/buckets/%s/collections/%s/records/w%02d" % (BUCKET, FLEET, i),
             "body": {"data": {"n": 0}}} for i in range(FLEET_RECORDS)]
    for i in range(0, len(reqs), 25):
        common.http("POST", url + "/batch", {"requests": reqs[i:i + 25]})


def client_main(url, tmp, first, count, interval, seconds):
    """One process: `count` contexts, each a live query of the fleet; prints
    one JSON line per live answer that shows a write: [client, n, time]."""
    import tether
    contexts, tasks, seen = [], [], {}

    def watcher(index):
        def on_answer(answer):
            if answer.phase != "live" or answer.error is not None:
                return
            top = max((o.peek("n") or 0 for o in answer.answer), default=0)
            if top > seen.get(index, 0):
                seen[index] = top
                print(json.dumps([index, top, time.time()]), flush=True)
        return on_answer

    for index in range(first, first + count):
        ctx = tether.Context(url, BUCKET, os.path.join(tmp, "fleet-%d.db" % index), username=USER,
                             password=PASSWORD, sync_interval=interval)
        ctx.query(FLEET).all()           # synced whole: each round then asks what changed
        contexts.append(ctx)
        tasks.append(ctx.query(FLEET).live(watcher(index)))
    print(json.dumps(["ready", first, count]), flush=True)
    time.sleep(seconds)
    for ctx in contexts:
        ctx.close()


def m13_fleet(table, url, tmp, quick):
    clients = int(os.environ.get("BENCH_FLEET_CLIENTS") or 20)
    seconds = float(os.environ.get("BENCH_FLEET_SECONDS") or (6 if quick else 60))
    interval = float(os.environ.get("BENCH_FLEET_INTERVAL") or (1 if quick else 5))
    _seed(url)
    procs = []
    per = -(-clients // PROCESSES)
    lead = 3 * interval + 10             # every client ready, then the writes, then their last rounds
    for first in range(0, clients, per):
        count = min(per, clients - first)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), url, tmp, str(first), str(count), str(interval),
             str(seconds + lead + 30)], stdout=subprocess.PIPE, text=True))
    for p in procs:
        line = p.stdout.readline()
        if not line.startswith('["ready"'):
            raise RuntimeError("a fleet process did not start: %r" % line)
    logpath = common.kinto_log_path()
    offset = common.log_offset(logpath) if logpath else None
    writes, trips = {}, []
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        n += 1
        t0 = time.time()
        common.http("PATCH", url + "/buckets/%s/collections/%s/records/w%02d" % (BUCKET, FLEET, n % FLEET_RECORDS),
                    {"data": {"n": n}})
        trips.append(time.time() - t0)
        writes[n] = t0
        time.sleep(max(0.0, start + n - time.monotonic()))
    window = time.monotonic() - start
    entries = common.request_codes_since(logpath, offset) if logpath else None
    time.sleep(interval * 1.2 + 1)       # the last write's rounds
    # Then idle: every round of every client finds nothing new.
    idle_offset = common.log_offset(logpath) if logpath else None
    time.sleep(2 * interval)
    idle = common.request_codes_since(logpath, idle_offset) if logpath else None
    for p in procs:
        p.terminate()
    seen = {}
    for p in procs:
        out, _ = p.communicate(timeout=60)
        for line in out.splitlines():
            index, top, when = json.loads(line)
            for k in range(1, top + 1):
                seen.setdefault((index, k), when)
    lags, each = [], []
    for k, written in writes.items():
        times = [seen.get((c, k)) for c in range(clients)]
        each += [t - written for t in times if t is not None]
        if all(t is not None for t in times):
            lags.append(max(times) - written)
    missing = len(writes) - len(lags)
    name = "13. fleet: %d live clients, sync_interval %g s, a write a second for %g s" % (clients, interval, seconds)
    if lags:
        table.add(name + ", write to last client (median / max)",
                  "%.2f / %.2f s" % (statistics.median(lags), max(lags)),
                  "%.0f ms" % (statistics.median(trips) * 1000), "")
        table.add(name + ", write to a client (median)", "%.2f s" % statistics.median(each),
                  "%.2f s" % (interval / 2), "")
        table.notes.append("13: the peers are the writer's round trip, and half the interval (a client's "
                           "expected wait for its next round)")
    if missing:
        table.notes.append("13: %d of %d writes did not reach every client" % (missing, len(writes)))
    for label, got, span in (("writing", entries, window), ("idle", idle, 2 * interval)):
        if got is None:
            continue
        fleet = [e for e in got if "/collections/%s/" % FLEET in (e[1] or "") and e[0] == "GET"]
        quiet = sum(1 for e in fleet if e[3] == 304)
        table.add("%s, %s: requests/s (304 share)" % (name, label),
                  "%.1f/s (%.0f%% 304)" % (len(fleet) / span, 100.0 * quiet / max(1, len(fleet))),
                  "%.1f/s" % (clients / interval), "")
        table.notes.append("13 (%s): %d fleet GETs to Kinto in %.1f s, %d answered 304 (the peer column: one "
                           "request per client and interval); goal at 200 clients and 5 s: <= 45/s, >= 95%% "
                           "304 or empty while idle" % (label, len(fleet), span, quiet))


if __name__ == "__main__":
    url, tmp, first, count, interval, seconds = sys.argv[1:7]
    common.setup_paths()
    client_main(url, tmp, int(first), int(count), float(interval), float(seconds))
