"""Live data over a Kinto with the history plugin (issue 40): a round reads the
bucket's one list of writes, conditionally, for every watched collection; a
record put back with an older version (a restore, which no listing of changes
shows) arrives at once, without waiting for the full check.

A Kinto of its own with the history plugin (conftest's history_kinto),
with the fault proxy in front to count and refuse requests. Writes come from
another client (urllib, straight to that Kinto).
"""

import logging
import time

import pytest

import tether
from conftest import FaultProxy, wait_until
from test_live import SCHEMA, WHERE, Items, ids_of, items, live_calls  # noqa: F401 (items: the fixture)

INTERVAL = 0.2
WEEK = 7 * 24 * 3600.0


@pytest.fixture
def feed_items(history_kinto):
    bucket = history_kinto.create_bucket()
    yield Items(history_kinto, bucket)
    history_kinto.delete_bucket(bucket)


@pytest.fixture
def proxy(history_kinto):
    p = FaultProxy(history_kinto.url).start()
    yield p
    p.stop()


def feed_requests(entries):
    return [e for e in entries if "/history" in e["target"]]


def restore(items, id, version):
    """`id` deleted, and put back as it was at `version` (older), by another client."""
    data = dict(items.state[id])
    items.delete(id)
    items.put(id, dict(data, last_modified=version))
    del items.state[id]["last_modified"]
    assert items.kinto.get_record(items.bucket, "items", id)["last_modified"] == version


def test_idle_rounds_read_one_feed_for_every_collection(feed_items, tmp_path, open_ctx, recorder, proxy):
    feed_items.kinto.create_collection(feed_items.bucket, "others", SCHEMA)
    feed_items.kinto.put_record(feed_items.bucket, "others", "o1", {"N": 1})
    ctx = open_ctx(proxy.url, feed_items.bucket, tmp_path / "s.db", sync_interval=INTERVAL)
    rec, told = recorder(), recorder()
    task = ctx.query("items", sort="N", where=WHERE).live(rec)
    assert rec.wait(lambda c: live_calls(rec))
    other = ctx.object("others", "o1")        # observed, never fetched
    other.observe("N", told)
    assert wait_until(lambda: other.peek("N") == 1, timeout=5)
    # The first round reads where the feed ends, and syncs each entity once.
    assert wait_until(lambda: any(e["status"] == 304 for e in feed_requests(proxy.state()["entries"])), timeout=10)
    proxy.set("pass", reset_log=True)
    time.sleep(2.0)
    entries = proxy.state()["entries"]
    # 2 s at 0.2 s +- 10%: about 10 rounds, each one conditional read of the feed for both.
    assert 5 <= len(entries) <= 14, [e["target"] for e in entries]
    assert feed_requests(entries) == entries, "\n".join("%s %s" % (e["target"], e["status"]) for e in entries)
    answered = [e for e in entries if e["status"] is not None]   # (the last may be on the wire)
    assert all(e["method"] == "GET" and e["if_none_match"] and e["status"] == 304 for e in answered), entries
    told_before = told.calls.count((other, "N", 0))
    # Another client writes to both: the feed names them, and each is synced.
    feed_items.mix()
    feed_items.kinto.patch_record(feed_items.bucket, "others", "o1", {"N": 2})
    assert wait_until(lambda: ids_of(live_calls(rec)[-1].answer) == feed_items.expected(), timeout=10), \
        [ids_of(a.answer) for a in live_calls(rec)]
    assert wait_until(lambda: other.peek("N") == 2, timeout=10)
    assert wait_until(lambda: told.calls.count((other, "N", 0)) == told_before + 1, timeout=5), told.calls
    task.cancel()


@pytest.mark.parametrize("plugin", [True, False], ids=["history", "no-history"])
def test_a_restore_arrives_at_once_by_the_feed(plugin, feed_items, items, tmp_path, open_ctx, recorder):
    """A record put back at an older version: the feed shows it at once; without
    the plugin only the full check finds it (here a week away), so the round
    that follows the restore leaves the deleted record out."""
    where = feed_items if plugin else items
    ctx = open_ctx(where.kinto.url, where.bucket, tmp_path / "s.db", sync_interval=INTERVAL,
                   full_check_interval=WEEK)
    ctx.query("items").all()                   # synced whole, its full checks done
    rec, told = recorder(), recorder()
    ctx.query("items", sort="N", where=WHERE).live(rec)
    assert rec.wait(lambda c: live_calls(rec))
    r03 = ctx.object("items", "r03")
    r03.observe("X", told)
    first = where.kinto.get_record(where.bucket, "items", "r03")["last_modified"]
    where.patch("r03", {"X": 5})
    assert wait_until(lambda: r03.peek("X") == 5, timeout=5)
    where.state["r03"].pop("X")
    restore(where, "r03", first)               # as it was before X
    where.patch("r05", {"N": 50})              # a later change, which hides the restore from listings
    if plugin:
        assert wait_until(lambda: r03.peek("X") is None, timeout=5)
        assert wait_until(lambda: told.calls.count((r03, "X", 0)) == 2, timeout=5)
    else:
        time.sleep(3.0)                        # rounds find r05's change, not the restore
        assert r03.peek("X") == 5 and ctx.object("items", "r05").peek("N") == 50
        ctx.query("items", policy="server_only").all()   # a fetch the program asks for runs its full checks
        assert r03.peek("X") is None
    assert wait_until(lambda: ids_of(live_calls(rec)[-1].answer) == where.expected(), timeout=10)


def test_a_feed_the_user_cannot_read_gives_rounds_of_each_collection(feed_items, tmp_path, open_ctx, recorder,
                                                                      proxy, caplog):
    ctx = open_ctx(proxy.url, feed_items.bucket, tmp_path / "s.db", sync_interval=INTERVAL)
    rec = recorder()
    caplog.set_level(logging.INFO, logger="tether")
    tether.log_to_python()
    try:
        proxy.set("status", status=403, match="/history", reset_log=True)
        ctx.query("items", sort="N", where=WHERE).live(rec)
        assert rec.wait(lambda c: live_calls(rec))
        assert wait_until(lambda: any("_since=" in e["target"] and "/collections/items/" in e["target"]
                                      for e in proxy.state()["entries"]), timeout=5)
        feed_items.mix()
        assert wait_until(lambda: ids_of(live_calls(rec)[-1].answer) == feed_items.expected(), timeout=10)
    finally:
        caplog.set_level(logging.WARNING, logger="tether")
        tether.log_to_python()
    refused = feed_requests(proxy.state()["entries"])
    assert len(refused) == 1 and refused[0]["status"] == 403, refused   # asked once, then never again
    assert sum("change feed cannot be read" in r.getMessage() for r in caplog.records) == 1
