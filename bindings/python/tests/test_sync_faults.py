"""Sync of fetches on the wire, and fetches that break or are cancelled on
the way, through scripts/faultproxy.py in front of the real Kinto.

What tether.h promises ("Sync" at tether_fetch_start): the first whole
listing of an entity lists every page without `_since`; after it, every
fetch of the entity asks `_since=<version>` with `If-None-Match: "<version>"`
(304 when nothing changed) and the store, brought up to date, answers; a
server that lost that history (400 about `_since`, or an ETag older than the
version) makes the fetch list everything again. A listing cut short leaves
the pages already stored and the entity unsynced. A cancelled fetch ends in
exactly one FINAL (cancelled) and leaves a cache the next fetch settles.

The proxy logs each request with the status it answered and the request's
If-None-Match ("entries"). Each test seeds its own collection (paginate_by
is 50: 200 records are 4 pages), so tests do not see each other's changes.
"""

import asyncio
import threading
import time
import uuid

import pytest

import tether
from conftest import wait_until, finished

SCHEMA = {"type": "object", "properties": {"Name": {"type": "string"},
                                           "Rank": {"type": "integer"}}}
PAGE = 50


def rid(i):
    return "r%03d" % i


def seed_data(i):
    return {"Name": "n%d" % i, "Rank": i}


@pytest.fixture
def seed(kinto, bucket):
    """seed(n) -> the name of a new collection of n records r000.. (Rank i)."""
    def make(n):
        name = "s" + uuid.uuid4().hex[:12]
        kinto.create_collection(bucket, name, SCHEMA)
        kinto.put_records(bucket, name, [(rid(i), seed_data(i)) for i in range(n)])
        return name
    return make


def listing(proxy, name):
    """The proxy's log entries of record listings of collection `name`, but
    for the id+version check (`_fields=`) that ends each sync and whole listing."""
    route = "/collections/%s/records" % name
    return [e for e in proxy.state()["entries"]
            if e["method"] == "GET" and route in e["target"] and "_fields=" not in e["target"]]


def without_catch_up(entries):
    """A listing's entries without its catch-up: a listing of several pages
    asks at its end what changed since its first page (304: nothing)."""
    assert "_since=" in entries[-1]["target"] and entries[-1]["status"] == 304, entries[-1]
    return entries[:-1]


def first_pages(entries):
    return [e for e in entries if "_token=" not in e["target"]]


def assert_whole_listing(entries, pages):
    """A listing of everything: one first page, `pages` pages in all, and
    nothing conditional about it, then (several pages are no snapshot) one
    catch-up: what changed since the first page, 304 here."""
    if pages > 1:
        entries = without_catch_up(entries)
    assert len(first_pages(entries)) == 1, [e["target"] for e in entries]
    assert len(entries) == pages, [e["target"] for e in entries]
    for e in entries:
        assert "_since=" not in e["target"] and e["if_none_match"] is None, e
        assert e["status"] == 200, e


def assert_conditional(entry, version):
    assert "_since=%d" % version in entry["target"], entry
    assert entry["if_none_match"] == '"%d"' % version, entry


def state(objs):
    return [(o.id, o.peek("Name"), o.peek("Rank")) for o in objs]


def expected(n, changed=(), deleted=()):
    """What the cache must hold, sorted by Rank: seed rows, some renamed."""
    changed = dict(changed)
    return [(rid(i), changed.get(rid(i), "n%d" % i), i) for i in range(n) if rid(i) not in deleted]


def cache_state(ctx, name):
    objs = ctx.query(name, policy="cache_only", sort="Rank").all()
    return state(objs)


def finals(calls):
    return [c for c in calls if c[0] == "final"]


def assert_settles(ctx, proxy, name, want):
    """After whatever happened, a plain fetch brings the server's state, and
    the cache then holds exactly it."""
    proxy.set("pass")
    objs = ctx.query(name, sort="Rank").all()
    assert state(objs) == want
    assert cache_state(ctx, name) == want


class Holder:
    """Hands a Task to its own callbacks: in thread delivery they may run
    before fetch() has returned it."""

    def __init__(self):
        self.task = None
        self.ready = threading.Event()

    def set(self, task):
        self.task = task
        self.ready.set()
        return task

    def cancel(self):
        assert self.ready.wait(10), "fetch() never returned its task"
        return self.task.cancel()


# ------------------------------------------------------------------ 1. sync on the wire

def test_sync_on_the_wire(kinto, bucket, seed, tmp_path, open_ctx, faultproxy):
    n = 120                                          # 3 pages
    name = seed(n)
    store = tmp_path / "s.db"
    ctx = open_ctx(faultproxy.url, bucket, store)

    faultproxy.reset()
    cached = []
    objs = ctx.query(name, sort="Rank", on_cached=cached.append).all()
    assert cached == [[]] and state(objs) == expected(n)
    reqs = listing(faultproxy, name)
    assert_whole_listing(reqs, pages=3)
    assert [e["items"] for e in reqs[:3]] == [50, 50, 20]
    # The listing's ETag: the collection's timestamp, the newest record's.
    version = max(o.version for o in objs)

    # Nothing changed: one conditional request, answered 304; same answers.
    faultproxy.reset()
    cached = []
    ids = ctx.query(name, sort="Rank", on_cached=cached.append).ids()
    reqs = listing(faultproxy, name)
    assert len(reqs) == 1, reqs
    assert_conditional(reqs[0], version)
    assert reqs[0]["status"] == 304, reqs[0]
    assert cached == [ids] and ids == [rid(i) for i in range(n)]
    assert cache_state(ctx, name) == expected(n)

    # A change outside the predicate below and a delete inside it.
    kinto.patch_record(bucket, name, rid(100), {"Name": "changed"})
    tomb = kinto.delete_record(bucket, name, rid(7))["data"]
    gone = objs[7]
    assert gone.id == rid(7)
    faultproxy.reset()
    seen = []

    def on_cached(results):
        # Read here: the query closes a batched cached answer once the final
        # is in. Row 7 is left unread: the server phase may delete it while
        # this runs (a Results read after its row went raises NotFoundError,
        # tether.h batch_size; the query API closes it before that can be seen).
        seen.append(len(results))
        seen.append([results[i].id for i in range(10) if i != 7])

    final = [o.id for o in ctx.query(name, where="Rank < $1", args=[10], sort="Rank", batch=4,
                                     on_cached=on_cached)]
    # The cache's answer, before: its count and order as at the fetch.
    assert seen == [10, [rid(i) for i in range(10) if i != 7]]
    assert final == [rid(i) for i in range(10) if i != 7]
    reqs = listing(faultproxy, name)
    assert len(reqs) == 1, reqs                      # one page, no Next-Page
    assert_conditional(reqs[0], version)
    assert (reqs[0]["status"], reqs[0]["items"]) == (200, 2), reqs[0]   # the change, the tombstone
    # Only what changed, whatever the predicate: a filter here would miss r100.
    assert "Rank" not in reqs[0]["target"], reqs[0]
    with pytest.raises(tether.NotFoundError):
        gone.peek("Name")
    assert cache_state(ctx, name) == expected(n, changed={rid(100): "changed"},
                                              deleted={rid(7)})

    # Synced at the delete's timestamp, and that outlives the context.
    ctx.close()
    ctx = open_ctx(faultproxy.url, bucket, store)
    faultproxy.reset()
    count = ctx.query(name).count()
    assert count == n - 1
    reqs = listing(faultproxy, name)
    assert len(reqs) == 1, reqs
    assert_conditional(reqs[0], tomb["last_modified"])
    assert reqs[0]["status"] == 304, reqs[0]


def test_progress_tells_the_last_page_of_every_sync(kinto, bucket, seed, tmp_path, open_ctx,
                                                    faultproxy):
    """tether.h: progress comes "always for the listing's last page". A sync
    of one change is a one-page listing: each must tell received == 1."""
    name = seed(10)
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db")
    ctx.query(name).all()
    told = []
    for k in range(30):
        kinto.patch_record(bucket, name, rid(1), {"Name": "v%d" % k})
        progress = []
        faultproxy.reset()
        objs = ctx.query(name, sort="Rank", progress=lambda r, t: progress.append(r)).all()
        assert objs[1].peek("Name") == "v%d" % k
        assert [(e["status"], e["items"]) for e in listing(faultproxy, name)] == [(200, 1)]
        told.append(progress)
    missed = [k for k, p in enumerate(told) if p != [1]]
    assert not missed, "no progress for the last page in syncs %s of 30: %s" % (
        missed, [told[k] for k in missed])


# ------------------------------------------------------------------ 2. a page fails mid-listing

# (mode, skip: how many later pages pass first, extra settings, error class)
BROKEN_PAGES = {
    "reset-page-2": ("reset", 0, {}, tether.NetworkError),
    "garbage-page-3": ("malformed", 1, {}, tether.ProtocolError),
    "500-page-4": ("status", 2, {"status": 500}, tether.ServerError),
}


@pytest.mark.parametrize("case", sorted(BROKEN_PAGES))
def test_page_failing_mid_listing(seed, bucket, tmp_path, open_ctx, recorder, faultproxy, case):
    mode, skip, extra, error = BROKEN_PAGES[case]
    n = 200                                          # 4 pages
    name = seed(n)
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db", timeout_ms=5000)
    # Every page from the (skip+2)th on fails, retries included.
    faultproxy.set(mode, match="_token=", skip=skip, reset_log=True, **extra)
    rec = recorder()
    task = ctx.query(name, sort="Rank").start(rec)
    assert finished(task, 30)
    assert [c[:2] for c in rec.calls] == [("cached", 0), ("final", error.status)], rec.calls
    assert isinstance(task.error, error) and task.exception() is task.error
    assert faultproxy.state()["faulted"] >= 1

    # The pages before the broken one stayed, nothing after it came.
    stored = (skip + 1) * PAGE
    assert cache_state(ctx, name) == expected(stored)

    # Not synced: the next fetch lists everything again.
    faultproxy.set("pass", reset_log=True)
    objs = ctx.query(name, sort="Rank").all()
    assert state(objs) == expected(n)
    reqs = without_catch_up(listing(faultproxy, name))
    # (a page the failed fetch asked for ahead may land in this log too)
    assert len(first_pages(reqs)) == 1, [e["target"] for e in reqs]
    assert all("_since=" not in e["target"] and e["if_none_match"] is None for e in reqs), reqs
    assert cache_state(ctx, name) == expected(n)


# ------------------------------------------------------------------ 3. lost history

def lose_history(proxy, how, version):
    """Make the answer to the next `_since` request say the history is gone."""
    if how == "400":
        # Kinto's wording for a `_since` it refuses.
        proxy.set("status", status=400, match="_since=", count=1, reset_log=True,
                  message="_since in querystring: Invalid value for _since")
    else:
        # A collection flushed or restored: its timestamp went back.
        proxy.set("headers", headers={"ETag": '"%d"' % (version - 1000)}, match="_since=",
                  count=1, reset_log=True)


@pytest.mark.parametrize("how", ["400", "older-etag"])
def test_lost_history_lists_everything_again(kinto, bucket, seed, tmp_path, open_ctx, faultproxy,
                                             how):
    n = 120
    name = seed(n)
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db", delivery="poll")
    objs = ctx.query(name, sort="Rank").all()
    version = max(o.version for o in objs)
    kinto.patch_record(bucket, name, rid(3), {"Name": "changed"})
    tomb = kinto.delete_record(bucket, name, rid(4))["data"]
    gone = objs[4]

    lose_history(faultproxy, how, version)
    async def main():
        return await tether.AsyncContext(ctx).query(name, where="Rank < $1", args=[10], sort="Rank").all()
    final = asyncio.run(main())
    assert [(o.id, o.peek("Name")) for o in final] == [
        (rid(i), "changed" if i == 3 else "n%d" % i) for i in range(10) if i != 4]
    reqs = listing(faultproxy, name)
    assert_conditional(reqs[0], version)
    assert reqs[0]["status"] == (400 if how == "400" else 200), reqs[0]
    assert faultproxy.state()["faulted"] == 1
    # Then the whole listing again (119 records: 3 pages), nothing conditional.
    assert_whole_listing(reqs[1:], pages=3)
    with pytest.raises(tether.NotFoundError):
        gone.peek("Name")
    want = expected(n, changed={rid(3): "changed"}, deleted={rid(4)})
    assert cache_state(ctx, name) == want

    # Synced again, at the new listing's version.
    faultproxy.reset()
    objs = ctx.query(name, sort="Rank").all()
    assert state(objs) == want
    reqs = listing(faultproxy, name)
    assert len(reqs) == 1, reqs
    assert_conditional(reqs[0], tomb["last_modified"])
    assert reqs[0]["status"] == 304, reqs[0]


# ------------------------------------------------------------------ 4. cancels

N_CANCEL = 200


def answered_all(proxy):
    """Every request the proxy took has been answered upstream."""
    st = proxy.state()
    return st["forwarded"] >= st["requests"]


def nothing_more(ctx, rec, seconds=0.3):
    """No callback after the FINAL (poll mode: nothing waits to be polled)."""
    before = len(rec.calls)
    if ctx.delivery == "poll":
        assert ctx.poll(int(seconds * 1000)) == 0
    else:
        time.sleep(seconds)
    assert len(rec.calls) == before, rec.calls[before:]


@pytest.mark.parametrize("delivery", ["poll", "thread"])
def test_cancel_right_after_start(kinto, bucket, seed, tmp_path, open_ctx, recorder, faultproxy,
                                  delivery):
    name = seed(N_CANCEL)
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db", delivery=delivery)
    ctx.query(name).all()
    kinto.patch_record(bucket, name, rid(1), {"Name": "changed"})
    rec = recorder()
    task = ctx.query(name, sort="Rank").start(rec)
    assert task.cancel() is True
    assert finished(task, 10)
    calls = [c[:2] for c in rec.calls]
    if delivery == "poll":
        # Nothing is delivered outside poll(): not even the CACHED phase.
        assert calls == [("final", tether.E_CANCELLED)], calls
    else:
        assert calls[-1] == ("final", tether.E_CANCELLED) and len(finals(rec.calls)) == 1, calls
        assert all(c == ("cached", 0) for c in calls[:-1]), calls
    assert rec.calls[-1][3] == []                    # a cancel answers nothing
    assert task.cancel() is False and ctx.pending == 0
    nothing_more(ctx, rec)
    # Before or after the change, whole either way; then settled.
    assert cache_state(ctx, name) in (expected(N_CANCEL),
                                      expected(N_CANCEL, changed={rid(1): "changed"}))
    assert_settles(ctx, faultproxy, name, expected(N_CANCEL, changed={rid(1): "changed"}))


@pytest.mark.parametrize("delivery", ["poll", "thread"])
def test_cancel_between_phases(kinto, bucket, seed, tmp_path, open_ctx, recorder, faultproxy,
                               delivery):
    name = seed(N_CANCEL)
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db", delivery=delivery)
    ctx.query(name).all()
    kinto.patch_record(bucket, name, rid(1), {"Name": "changed"})
    # The sync request is slow: the server phase is surely under way.
    faultproxy.set("delay", delay=1.5, match="/collections/%s/records" % name, reset_log=True)
    rec, holder, outcome = recorder(), Holder(), {}

    def callback(*args):
        rec(*args)
        if args[0] == "cached":
            outcome["cancel"] = holder.cancel()

    task = holder.set(ctx.query(name, sort="Rank").start(callback))
    assert finished(task, 10)
    assert outcome == {"cancel": True}
    assert [c[:2] for c in rec.calls] == [("cached", 0), ("final", tether.E_CANCELLED)], rec.calls
    assert state(rec.calls[0][3]) == expected(N_CANCEL)
    # The slow answer (if the request had left) comes back to nobody.
    assert wait_until(lambda: answered_all(faultproxy), timeout=10), faultproxy.state()["entries"]
    nothing_more(ctx, rec)
    assert cache_state(ctx, name) in (expected(N_CANCEL),
                                      expected(N_CANCEL, changed={rid(1): "changed"}))
    assert_settles(ctx, faultproxy, name, expected(N_CANCEL, changed={rid(1): "changed"}))


def assert_listing_prefix(ctx, name):
    """A cancelled first listing leaves whole pages, the first ones."""
    got = cache_state(ctx, name)
    assert len(got) % PAGE == 0 and got == expected(len(got)), [r[0] for r in got]
    return got


def assert_relists(ctx, proxy, name, n):
    """Never synced: the next fetch lists everything, unconditionally."""
    proxy.set("pass", reset_log=True)
    objs = ctx.query(name, sort="Rank").all()
    assert state(objs) == expected(n)
    reqs = without_catch_up(listing(proxy, name))
    assert len(first_pages(reqs)) == 1, [e["target"] for e in reqs]
    assert all("_since=" not in e["target"] and e["if_none_match"] is None for e in reqs), reqs
    assert cache_state(ctx, name) == expected(n)


def test_cancel_during_pagination(bucket, seed, tmp_path, open_ctx, recorder, faultproxy):
    name = seed(N_CANCEL)
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db")
    slow = 2.0
    faultproxy.set("delay", delay=slow, match="_token=", reset_log=True)
    rec = recorder()
    task = ctx.query(name, sort="Rank").start(rec)
    # Page 2 is on the wire (it leaves once page 1's headers are in).
    assert wait_until(lambda: any("_token=" in e["target"] for e in listing(faultproxy, name)),
                      timeout=10), listing(faultproxy, name)
    t0 = time.monotonic()
    assert task.cancel() is True
    assert finished(task, 10)
    # The slow page is abandoned, not waited for.
    assert time.monotonic() - t0 < slow * 0.75
    assert [c[:2] for c in rec.calls] == [("cached", 0), ("final", tether.E_CANCELLED)], rec.calls
    before = assert_listing_prefix(ctx, name)
    assert len(before) <= PAGE
    # The abandoned page reaches the proxy's upstream and comes back: ignored.
    assert wait_until(lambda: answered_all(faultproxy), timeout=10), faultproxy.state()["entries"]
    nothing_more(ctx, rec)
    assert cache_state(ctx, name) == before
    assert_relists(ctx, faultproxy, name, N_CANCEL)


@pytest.mark.parametrize("delivery", ["poll", "thread"])
def test_cancel_from_progress(bucket, seed, tmp_path, open_ctx, faultproxy, delivery):
    name = seed(N_CANCEL)
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db", delivery=delivery)
    # Later pages are slow, so the fetch cannot end before the cancel.
    faultproxy.set("delay", delay=1.0, match="_token=", reset_log=True)
    events, holder, outcome = [], Holder(), {}

    def progress(received, total):
        events.append(("progress", received))
        if "cancel" not in outcome:
            outcome["cancel"] = holder.cancel()
            events.append(("cancelled",))

    def callback(phase, error, answer):
        events.append((phase, error.status if error else 0))

    task = holder.set(ctx.query(name, sort="Rank", progress=progress).start(callback))
    assert finished(task, 10)
    assert outcome == {"cancel": True}
    at = events.index(("cancelled",))
    assert 0 < events[at - 1][1] <= N_CANCEL, events
    # Exactly one FINAL after the cancel, and no progress after it.
    assert events[at + 1:] == [("final", tether.E_CANCELLED)], events
    assert len([e for e in events if e[0] == "final"]) == 1, events
    assert_listing_prefix(ctx, name)
    assert_relists(ctx, faultproxy, name, N_CANCEL)


def test_cancel_live_fetch(kinto, bucket, seed, tmp_path, open_ctx, recorder, faultproxy):
    n = 20
    name = seed(n)
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db")
    ctx.query(name).all()
    rec = recorder()
    task = ctx.query(name, sort="Rank").live(rec)

    def live_answers(calls):
        return [c for c in calls if c[0].phase == "live"]

    assert rec.wait(lambda calls: live_answers(calls), timeout=10), rec.calls
    # A change another fetch brings in: the live fetch answers again.
    kinto.patch_record(bucket, name, rid(2), {"Name": "changed"})
    seen = len(live_answers(rec.calls))
    ctx.query(name, policy="server_only").all()
    assert rec.wait(lambda calls: len(live_answers(calls)) > seen, timeout=10), rec.calls
    assert not task.done()
    answers = len(rec.calls)
    assert task.cancel() is True
    assert finished(task, 10)
    # Its end is the task's: cancelled, and no answer after (live() hands
    # the callback answers only, not the final).
    assert isinstance(task.exception(), tether.TaskCancelledError)
    assert len(rec.calls) == answers, rec.calls[answers:]
    # A change after the cancel tells it nothing.
    kinto.patch_record(bucket, name, rid(3), {"Name": "changed"})
    calls = len(rec.calls)
    ctx.query(name, policy="server_only").all()
    nothing_more(ctx, rec)
    assert len(rec.calls) == calls
    assert_settles(ctx, faultproxy, name,
                   expected(n, changed={rid(2): "changed", rid(3): "changed"}))


# ------------------------------------------------------------------ 5. permissions at open

def test_open_asks_permissions_once_in_a_big_bucket(kinto, tmp_path, open_ctx, faultproxy):
    n = 300
    b = kinto.create_bucket()
    try:
        kinto.create_collection(b, "big", SCHEMA)
        kinto.put_records(b, "big", [(rid(i), seed_data(i)) for i in range(n)])
        faultproxy.reset()
        ctx = open_ctx(faultproxy.url, b, tmp_path / "s.db")

        def permission_requests():
            return [e for e in faultproxy.state()["entries"]
                    if e["target"].split("?")[0].endswith("/permissions")]

        perms = permission_requests()
        # Unfiltered, Kinto lists an entry per record (the creator owns
        # each): 300 records would be 7 pages.
        assert len(perms) == 1, perms
        assert "bucket_id=%s" % b in perms[0]["target"] and perms[0]["status"] == 200, perms
        # The one answer was read: the creator may write.
        assert ctx.entity("big").operations == {"fetch", "insert", "update", "delete"}
        objs = ctx.query("big").all()
        assert len(objs) == n
        assert len(permission_requests()) == 1
    finally:
        kinto.delete_bucket(b)
