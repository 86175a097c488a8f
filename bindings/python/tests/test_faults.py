"""Faults beyond test_errors.py, injected by scripts/faultproxy.py in front of
the real Kinto: a connection reset mid-body, huge pages, a trickling answer,
a server that caps its connections, and Kinto's Backoff header.
(429/503 with Retry-After are in test_errors.py.)"""

import gc
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

import tether

SCHEMA = {"type": "object", "properties": {"Name": {"type": "string"},
                                           "Size": {"type": "integer"}}}
N = 60            # two pages (Kinto's paginate_by is 50)
PAGE = 50
PAD = 420_000     # huge mode: 50 records x 420 KB = a 21 MB page
MANY = 300        # objects in the connection-cap burst
PER_HOST = 6      # the library's documented cap on connections to one server


def name(i):
    return "file%d" % i


@pytest.fixture(scope="module")
def files(kinto, bucket):
    kinto.create_collection(bucket, "files", SCHEMA)
    kinto.put_records(bucket, "files", [("f%02d" % i, {"Name": name(i), "Size": i})
                                        for i in range(N)])
    return bucket


def long_id(i):
    # ~100-byte ids: the library puts up to 4000 bytes of ids in one in_id
    # listing, so without batches (NO_BATCHES) a burst of MANY gets needs
    # more requests than PER_HOST.
    return "m%03d-%s" % (i, "x" * 95)


def seeded(kinto, bucket, coll, id_of, count):
    """Collection `coll` of `count` records id_of(i), Name "old<i>", Size i."""
    kinto.create_collection(bucket, coll, SCHEMA)
    kinto.put_records(bucket, coll, [(id_of(i), {"Name": "old%d" % i, "Size": i}) for i in range(count)])
    return bucket


@pytest.fixture(scope="module")
def many(kinto, bucket):
    return seeded(kinto, bucket, "many", long_id, MANY)


def fill(open_ctx, url, bucket, store):
    ctx = open_ctx(url, bucket, store)
    objs = ctx.query("files").all()
    assert len(objs) == N
    ctx.close()


def assert_cache_is(ctx, names):
    objs = ctx.query("files", policy="cache_only", sort="Size").all()
    assert [o.peek("Name") for o in objs] == names


def first_page_requests(log):
    """A listing's first pages: not its later pages (_token), nor the catch-up
    on what changed while it was read (_since), which follows every listing
    of several pages, nor the check of ids and versions (_fields) that ends it."""
    return [line for line in log if "/records" in line and "_token=" not in line and "_since=" not in line
            and "_fields=" not in line]


def version_check_requests(log):
    """The pages of the ids-and-versions listing that ends every sync and
    whole listing but one into an empty table (Kinto's restores are in no
    _since listing)."""
    return [line for line in log if "/records" in line and "_fields=" in line]


# ------------------------------------------------------------------ reset mid-body

def test_reset_mid_body_once_is_retried(files, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, files, tmp_path / "s.db", timeout_ms=5000)
    faultproxy.set("reset", match="/records", count=1, reset_log=True)
    objs = ctx.query("files", policy="server_only", sort="Size").all()
    assert [o.peek("Name") for o in objs] == [name(i) for i in range(N)]
    assert [o.peek("Size") for o in objs] == list(range(N))
    st = faultproxy.state()
    assert st["faulted"] == 1
    assert len(first_page_requests(st["log"])) == 2, "the reset page was asked again"


def test_reset_every_time_fails_clearly_and_keeps_the_store(kinto, files, tmp_path, open_ctx,
                                                           faultproxy):
    store = tmp_path / "s.db"
    fill(open_ctx, faultproxy.url, files, store)
    ctx = open_ctx(faultproxy.url, files, store, timeout_ms=5000)
    kinto.patch_record(files, "files", "f03", {"Name": "CHANGED"})
    try:
        faultproxy.set("reset", match="/records", reset_log=True)
        with pytest.raises(tether.NetworkError) as raised:
            ctx.query("files", policy="server_only").all()
        err = raised.value
        assert err.status == tether.E_NETWORK and err.name == "TETHER_E_NETWORK"
        # Says what happened, not only that something did.
        assert "reset" in err.message.lower(), err.message
        assert faultproxy.state()["faulted"] == 4, "the request and its three retries"
        assert ctx.object("files", "f03").peek("Name") == "file3"
        ctx.close()
        faultproxy.stop()   # same URL, nobody listening: opens offline from the store
        offline = open_ctx(faultproxy.url, files, store, timeout_ms=3000)
        assert offline.online is False
        assert_cache_is(offline, [name(i) for i in range(N)])
    finally:
        kinto.patch_record(files, "files", "f03", {"Name": "file3"})


# ------------------------------------------------------------------ huge pages

def _status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no %s in /proc/self/status" % field)


class PeakRSS:
    """The process's peak RSS during a block: VmHWM after resetting it
    (clear_refs 5), or, where that is refused, a 2 ms sampler."""

    def __enter__(self):
        self.base = _status_bytes("VmRSS")
        self.peak = self.base
        self._stop = threading.Event()
        self._sampler = None
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _status_bytes("VmRSS"))

    def __exit__(self, *exc):
        if self._sampler is None:
            self.peak = _status_bytes("VmHWM")
        else:
            self._stop.set()
            self._sampler.join()
        self.growth = self.peak - self.base


def test_huge_pages(files, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, files, tmp_path / "s.db", timeout_ms=30000)
    faultproxy.set("huge", pad=PAD, match="/records", reset_log=True)
    page = PAGE * PAD                           # the first page's pad alone: 21 MB
    with PeakRSS() as rss:
        objs = ctx.query("files", policy="server_only", sort="Size", timeout=60).all()
    # Both pages and the catch-up after them (what changed while they were
    # read); no ids-and-versions check: the store held none of these rows.
    st = faultproxy.state()
    checks = version_check_requests(st["log"])
    assert len(checks) == 0, st["log"]
    assert st["faulted"] == 3, "both pages and the catch-up came inflated"
    assert [o.peek("Name") for o in objs] == [name(i) for i in range(N)]
    assert [o.peek("Size") for o in objs] == list(range(N))
    # While a page is absorbed it may be in memory a few times at once (the
    # body as received, with its buffer's growth; the decoded JSON; the rows
    # SQLite writes), and the objects the results hold may keep their extra
    # fields: the whole listing, 1.2 pages. 6 pages covers that with room for
    # the allocator (this build: under 3); a copy per record, a page kept per
    # page, or quadratic buffering goes well past it.
    assert rss.growth < 6 * page, "RSS grew by %.0f MB for a %.0f MB page" % (
        rss.growth / 1e6, page / 1e6)


# ------------------------------------------------------------------ trickle

def trickle_rate(seconds_per_page):
    """Bytes per second so that a page of `files` takes about this long."""
    return max(100, int(PAGE * 90 / seconds_per_page))   # a record is ~90 bytes of JSON


def test_trickle_within_the_timeout_succeeds(files, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, files, tmp_path / "s.db", timeout_ms=8000)
    faultproxy.set("trickle", rate=trickle_rate(1.0), match="/records", reset_log=True)
    objs = ctx.query("files", policy="server_only", sort="Size").all()
    assert [o.peek("Name") for o in objs] == [name(i) for i in range(N)]
    st = faultproxy.state()
    # Both pages and the catch-up after them, each asked once (a whole listing
    # into a new store ends with no ids-and-versions check).
    assert len(version_check_requests(st["log"])) == 0, st["log"]
    assert st["faulted"] == 3, "each page asked once, none given up on: %r" % st["log"]


def test_trickle_past_the_timeout_fails_and_loses_nothing(kinto, files, tmp_path, open_ctx,
                                                          faultproxy):
    store = tmp_path / "s.db"
    fill(open_ctx, faultproxy.url, files, store)
    ctx = open_ctx(faultproxy.url, files, store, timeout_ms=1000)
    kinto.patch_record(files, "files", "f03", {"Name": "CHANGED"})
    try:
        # A page takes ~10 s, each attempt gives up after 1 s.
        faultproxy.set("trickle", rate=trickle_rate(10.0), match="/records", reset_log=True)
        with pytest.raises(tether.NetworkError) as raised:
            ctx.query("files", policy="server_only").all()
        err = raised.value
        assert err.status == tether.E_NETWORK
        assert "timed out" in err.message.lower(), err.message
        assert_cache_is(ctx, [name(i) for i in range(N)])
        # Nothing lost: once the server is quick again the change comes in.
        faultproxy.set("pass")
        objs = ctx.query("files", policy="server_only", sort="Size").all()
        assert objs[3].peek("Name") == "CHANGED"
        assert [o.peek("Name") for o in objs if o.id != "f03"] == [
            name(i) for i in range(N) if i != 3]
    finally:
        kinto.patch_record(files, "files", "f03", {"Name": "file3"})


# ------------------------------------------------------------------ connection cap

def told(calls):
    """Object id -> statuses its observer heard (final cancellations aside)."""
    out = {}
    for obj, _key, status in calls:
        if status != tether.E_CANCELLED:
            out.setdefault(obj.id, []).append(status)
    return out


# A server that takes no batches of several requests: one in_id listing a request.
NO_BATCHES = [['"batch_max_requests":25', '"batch_max_requests":1']]


@pytest.mark.parametrize("cap", [4, None])
def test_burst_of_gets_against_a_connection_cap(kinto, many, tmp_path, open_ctx, recorder,
                                                faultproxy, cap):
    faultproxy.set("pass", rewrite=NO_BATCHES)
    ctx = open_ctx(faultproxy.url, many, tmp_path / "s.db", timeout_ms=10000)
    assert faultproxy.state()["rewritten"] == 1
    objs = ctx.query("many").all()
    assert len(objs) == MANY
    old = {o.id: o.peek("Name") for o in objs}
    run = uuid.uuid4().hex[:8]
    new = {o.id: "new-%s-%s" % (run, o.id[:4]) for o in objs}
    kinto.patch_records(many, "many", [(rid, {"Name": v}) for rid, v in new.items()])

    faultproxy.set("pass", max_connections=cap, reset_log=True, rewrite=NO_BATCHES)
    rec = recorder()
    for o in objs:
        o.observe("Name", rec)
    for o in objs:
        assert o.get("Name") == old[o.id]      # the cached value, and a refresh
    # Every refresh either changes the value (status 0) or fails (an error
    # status): every observer must hear one or the other.
    assert rec.wait(lambda calls: len(told(calls)) == MANY, timeout=30), (
        "observers never told: %d of %d" % (MANY - len(told(rec.calls)), MANY))
    st = faultproxy.state()
    heard = told(rec.calls)
    failed = [rid for rid, statuses in heard.items() if 0 not in statuses]
    for o in objs:
        statuses = heard[o.id]
        # A refused connection is a server that did not answer: a network error.
        assert all(s in (0, tether.E_NETWORK) for s in statuses), (o.id, statuses)
        assert o.peek("Name") == (old[o.id] if o.id in failed else new[o.id]), (o.id, statuses)

    # Refused connections never got to send a request the proxy logged.
    requests = len([line for line in st["log"] if "/records" in line]) + st["refused"]
    assert requests > PER_HOST, "the burst must need more requests than the library's " \
                                "cap (it took %d); lengthen the ids" % requests
    assert st["peak_connections"] <= PER_HOST, st["peak_connections"]
    if cap is None:
        assert st["refused"] == 0 and failed == []
    else:
        assert not failed or st["refused"], "refreshes failed, yet none was refused"
        # Nothing lost: without the cap, the failed ones come in on the next get.
        faultproxy.set("pass", rewrite=NO_BATCHES)
        before = len(rec.calls)
        for rid in failed:
            ctx.object("many", rid).get("Name")
        assert rec.wait(lambda calls: {c[0].id for c in calls[before:] if c[2] == 0}
                        >= set(failed), timeout=30)
        assert all(o.peek("Name") == new[o.id] for o in objs)


# ------------------------------------------------------------------ Backoff

def test_backoff_does_not_hold_back_what_the_program_asks_for(kinto, files, tmp_path, open_ctx, recorder,
                                                             faultproxy):
    """Kinto's `Backoff: N` pauses the context's periodic rounds (test_live_sync);
    what the program asks for (a fetch, a get's refresh) still goes at once, as
    Kinto's own clients' user-started requests do, and completes."""
    ctx = open_ctx(faultproxy.url, files, tmp_path / "s.db", timeout_ms=10000, sync_interval=0)
    rec = recorder()
    try:
        # Every answer carries Backoff: 30.
        faultproxy.set("pass", backoff=30, reset_log=True)
        began = time.monotonic()
        objs = ctx.query("files", policy="server_only", sort="Size").all()
        assert [x.peek("Name") for x in objs] == [name(i) for i in range(N)]
        o = objs[5]
        o.observe("Name", rec)
        kinto.patch_record(files, "files", "f05", {"Name": "CHANGED"})
        o.get("Name")
        assert rec.wait(lambda calls: (o, "Name", 0) in calls, timeout=15)
        assert o.peek("Name") == "CHANGED"
        assert time.monotonic() - began < 10, "a request the program made waited for the Backoff"
    finally:
        faultproxy.set("pass")
        kinto.patch_record(files, "files", "f05", {"Name": name(5)})
    log = faultproxy.state()["log"]
    # Page 1, page 2, the catch-up after them, the refresh (no check after a
    # whole listing into a new store).
    assert len(version_check_requests(log)) == 0, log
    assert len(log) == 4, log


@pytest.mark.parametrize("busy", [0, 2])
def test_burst_of_gets_takes_one_batch(kinto, many, tmp_path, open_ctx, recorder, faultproxy, busy):
    """A burst of gets whose ids fill many listings goes as one POST /v1/batch
    of them (the server allows 25), and every object is refreshed: nothing
    leaves before the burst's last get, not even the first get's refresh.
    busy=2: the scheduler keeps the burst waiting for a CPU for many
    milliseconds between gets (a loaded machine, on demand; see run_burst):
    waits for a CPU are not pauses of the burst."""
    log = refresh_all(kinto, many, "many", MANY, tmp_path / "s.db", open_ctx, recorder, faultproxy,
                      busy=busy)["log"]
    batches = [line for line in log if "/batch" in line]
    assert len(batches) == 1 and log == batches, log


def run_burst(calls, busy):
    """Runs `calls()` as a burst: a thread running nothing but the library's
    calls. Python's garbage collection is held meanwhile (a collection of
    this process's heap can take more than the 5 ms of the thread's own time
    that end a burst, by tether.h). busy > 0: the thread runs at nice 10 on
    one CPU shared with `busy` processes spinning at the usual priority, so
    the scheduler keeps it waiting for that CPU for many milliseconds at a
    time, as on a loaded machine (the library's threads run where they did)."""
    failed = []
    cpu = min(os.sched_getaffinity(0))

    def burst():
        try:
            if busy:
                os.sched_setaffinity(0, {cpu})
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
            calls()
        except BaseException as e:  # noqa: BLE001 - raised again below
            failed.append(e)

    collecting = gc.isenabled()
    gc.disable()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        for hog in hogs:
            os.sched_setaffinity(hog.pid, {cpu})
        thread = threading.Thread(target=burst)
        thread.start()
        thread.join()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        if collecting:
            gc.enable()
    if failed:
        raise failed[0]


BATCH_NAMED = 80   # long ids: 3 in_id listings, so more than one request's worth


@pytest.fixture(scope="module")
def batch_named(kinto, bucket):
    # Kinto refuses a batch in which any path holds "/batch" (so it is
    # seeded record by record): a collection named like this one must be
    # read by plain listings.
    kinto.create_collection(bucket, "batch_jobs", SCHEMA)
    for i in range(BATCH_NAMED):
        kinto.put_record(bucket, "batch_jobs", long_id(i), {"Name": "old%d" % i, "Size": i})
    return bucket


def refresh_all(kinto, bucket, coll, count, store, open_ctx, recorder, faultproxy, busy=0, **proxy):
    """Fetches `coll` through the proxy, changes every Name on the server,
    then gets every object at once (the proxy set as `proxy` says, its log
    reset; the gets as run_burst(busy) runs them): every observer must hear
    of its change and every value arrive. Returns the proxy's state."""
    faultproxy.set("pass")
    ctx = open_ctx(faultproxy.url, bucket, store)
    objs = ctx.query(coll).all()
    assert len(objs) == count
    run = uuid.uuid4().hex[:8]
    new = {o.id: "%s-%s-%s" % (coll, run, o.id[:4]) for o in objs}
    changes = [(rid, {"Name": v}) for rid, v in new.items()]
    if "batch" in coll:   # Kinto refuses such paths inside POST /batch
        for rid, data in changes:
            kinto.patch_record(bucket, coll, rid, data)
    else:
        kinto.patch_records(bucket, coll, changes)
    faultproxy.set("pass", reset_log=True, **proxy)
    rec = recorder()

    def gets():
        for o in objs:
            o.observe("Name", rec)
            o.get("Name")
    run_burst(gets, busy)
    assert rec.wait(lambda calls: len(told(calls)) == count, timeout=30)
    assert all(s == 0 for statuses in told(rec.calls).values() for s in statuses)
    assert all(o.peek("Name") == new[o.id] for o in objs)
    return faultproxy.state()


def test_burst_of_gets_on_a_collection_named_batch(kinto, batch_named, tmp_path, open_ctx, recorder,
                                                   faultproxy):
    log = refresh_all(kinto, batch_named, "batch_jobs", BATCH_NAMED, tmp_path / "s.db", open_ctx, recorder,
                      faultproxy)["log"]
    listings = [line for line in log if "/records?in_id=" in line]
    assert len(listings) >= 3 and not [line for line in log if line.startswith("POST ")], log


def mid_id(i):
    # ~30-byte ids: about 130 fit one in_id listing, more than a page (50),
    # so each listing of a batch has a Next-Page.
    return "p%03d-%s" % (i, "y" * 25)


@pytest.fixture(scope="module")
def paged(kinto, bucket):
    return seeded(kinto, bucket, "paged", mid_id, MANY)


def test_batch_next_pages_with_another_scheme_still_go_to_the_server(kinto, paged, tmp_path, open_ctx,
                                                                     recorder, faultproxy):
    """Behind a TLS proxy Kinto may write http:// into a subrequest's
    Next-Page: the library takes its path under the server's root, and sends
    it to the server it knows, never elsewhere."""
    st = refresh_all(kinto, paged, "paged", MANY, tmp_path / "s.db", open_ctx, recorder, faultproxy,
                     rewrite=[['"Next-Page":"http://', '"Next-Page":"https://elsewhere.invalid:1']])
    assert st["rewritten"] > 0, "no batch answer had a Next-Page: the test proves nothing"
    posts = [line for line in st["log"] if line.startswith("POST ")]
    assert len(posts) >= 2, st["log"]   # the first batch, then its next pages
