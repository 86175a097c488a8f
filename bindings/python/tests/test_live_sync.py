"""Live everywhere (issue 40): another client's changes reach live queries and
observers by the context's periodic sync (sync_interval), at the cost of one
conditional request per watched collection and round while nothing changes;
Kinto's Backoff pauses the rounds; ctx.changed() syncs at once.

Writes come from another client (urllib, straight to Kinto); the requests the
context sends are read from the fault proxy's log in front of Kinto.
"""

import time

import pytest

import tether
from conftest import wait_until
from test_live import WHERE, ids_of, items, live_calls  # noqa: F401 (items: the fixture)

INTERVAL = 0.2


def since_requests(entries):
    """The proxy's log entries of incremental syncs of "items"."""
    return [e for e in entries if "/collections/items/records" in e["target"] and "_since=" in e["target"]]


def test_another_clients_changes_reach_live_query_and_observer(items, kinto_url, tmp_path, open_ctx, recorder):
    ctx = open_ctx(kinto_url, items.bucket, tmp_path / "s.db", sync_interval=INTERVAL)
    rec, told = recorder(), recorder()
    task = ctx.query("items", sort="N", where=WHERE).live(rec)
    assert rec.wait(lambda c: live_calls(rec))
    r09 = ctx.object("items", "r09")
    r09.observe("X", told)
    items.mix()                        # insert, update, delete, move, and one outside
    items.patch("r09", {"X": 9})
    assert wait_until(lambda: live_calls(rec) and ids_of(live_calls(rec)[-1].answer) == items.expected(),
                      timeout=10), [ids_of(a.answer) for a in live_calls(rec)]
    assert wait_until(lambda: (r09, "X", 0) in told.calls, timeout=10), told.calls
    assert r09.peek("X") == 9
    assert ctx.object("items", "r07").peek("X") == 1
    task.cancel()


def test_idle_live_query_sends_only_conditional_requests(items, tmp_path, open_ctx, recorder, faultproxy):
    ctx = open_ctx(faultproxy.url, items.bucket, tmp_path / "s.db", sync_interval=INTERVAL)
    ctx.query("items").all()           # synced whole, its checks done
    rec = recorder()
    task = ctx.query("items", sort="N", where=WHERE).live(rec)
    assert rec.wait(lambda c: live_calls(rec))
    time.sleep(0.5)
    faultproxy.set("pass", reset_log=True)
    time.sleep(2.0)
    entries = faultproxy.state()["entries"]
    rounds = since_requests(entries)
    # 2 s at 0.2 s +- 10%: about 10 rounds; each a GET with If-None-Match, answered 304.
    assert 5 <= len(rounds) <= 14, [e["target"] for e in entries]
    assert rounds == entries, "an idle round asks what changed, nothing else: %s" % [e["target"] for e in entries]
    assert all(e["method"] == "GET" and e["if_none_match"] and e["status"] == 304 for e in rounds), rounds
    assert len(live_calls(rec)) == 1, "nothing changed: no answer"
    # The last live query gone, the rounds stop.
    task.cancel()
    time.sleep(0.5)
    faultproxy.set("pass", reset_log=True)
    time.sleep(1.0)
    assert faultproxy.state()["entries"] == []


def test_backoff_pauses_the_rounds(items, tmp_path, open_ctx, recorder, faultproxy):
    ctx = open_ctx(faultproxy.url, items.bucket, tmp_path / "s.db", sync_interval=INTERVAL)
    ctx.query("items").all()
    rec = recorder()
    ctx.query("items", sort="N", where=WHERE).live(rec)
    assert rec.wait(lambda c: live_calls(rec))
    # The next answer says Backoff: 2; then none does.
    faultproxy.set("pass", backoff=2, reset_log=True)
    assert wait_until(lambda: since_requests(faultproxy.state()["entries"]), timeout=5)
    faultproxy.set("pass", reset_log=True)
    time.sleep(1.5)
    assert since_requests(faultproxy.state()["entries"]) == [], "backing off: no round"
    assert wait_until(lambda: since_requests(faultproxy.state()["entries"]), timeout=5), "the rounds resume"
    items.patch("r01", {"N": 50})      # and they still bring changes
    assert wait_until(lambda: ids_of(live_calls(rec)[-1].answer) == items.expected(), timeout=10)


def test_a_busy_servers_retry_after_pauses_the_rounds(items, tmp_path, open_ctx, recorder, faultproxy):
    """A round answered 503 with Retry-After: 1, four times (the request and its
    three retries): the round fails, and no other round asks for that second."""
    ctx = open_ctx(faultproxy.url, items.bucket, tmp_path / "s.db", sync_interval=INTERVAL)
    ctx.query("items").all()
    rec = recorder()
    ctx.query("items", sort="N", where=WHERE).live(rec)
    assert rec.wait(lambda c: live_calls(rec))
    faultproxy.set("status", status=503, retry_after=1, count=4, reset_log=True)
    answered = lambda: [e for e in faultproxy.state()["entries"] if e["status"] is not None]  # noqa: E731
    assert wait_until(lambda: len(answered()) >= 5, timeout=15)
    state = faultproxy.state()
    entries, times = state["entries"], state["times"]
    assert [e["status"] for e in entries[:5]] == [503] * 4 + [304], [(e["target"], e["status"]) for e in entries]
    gap = times[4] - times[3]
    assert gap >= 0.8, "a round %.2f s after a 503 asking for 1 s" % gap
    items.patch("r01", {"N": 70})      # the rounds resume and bring changes
    assert wait_until(lambda: ids_of(live_calls(rec)[-1].answer) == items.expected(), timeout=10)


def test_interval_off_sends_nothing_until_changed(items, tmp_path, open_ctx, recorder, faultproxy):
    ctx = open_ctx(faultproxy.url, items.bucket, tmp_path / "s.db", sync_interval=0)
    ctx.query("items").all()
    rec = recorder()
    ctx.query("items", sort="N", where=WHERE).live(rec)
    assert rec.wait(lambda c: live_calls(rec))
    faultproxy.set("pass", reset_log=True)
    items.put("r21", {"N": 0, "G": "a"})
    time.sleep(1.0)
    assert faultproxy.state()["entries"] == [] and len(live_calls(rec)) == 1
    ctx.changed("items")               # the program heard of it by a channel of its own
    assert wait_until(lambda: ids_of(live_calls(rec)[-1].answer) == items.expected(), timeout=10)
    assert ids_of(live_calls(rec)[-1].answer)[0] == "r21"
    ctx.changed()                      # every entity: coalesced, harmless
    with pytest.raises(tether.NotFoundError):
        ctx.changed("nope")
    with pytest.raises(TypeError):
        ctx.changed(5)                 # type: ignore[arg-type]


def test_offline_asks_one_entity_then_resumes_at_once(items, tmp_path, open_ctx, recorder, faultproxy, kinto):
    ctx = open_ctx(faultproxy.url, items.bucket, tmp_path / "s.db", sync_interval=1.0, timeout_ms=2000)
    ctx.query("items").all()
    rec = recorder()
    ctx.query("items", sort="N", where=WHERE).live(rec)
    assert rec.wait(lambda c: live_calls(rec))
    faultproxy.set("drop", reset_log=True)   # no answer at all: unreachable
    assert wait_until(lambda: not ctx.online, timeout=10)
    time.sleep(2.5)
    dropped = faultproxy.state()["entries"]
    assert 1 <= len(dropped) <= 4, [e["target"] for e in dropped]   # a probe a round, no more
    items.patch("r01", {"N": 60})
    faultproxy.set("pass", reset_log=True)
    assert wait_until(lambda: ctx.online, timeout=10)
    assert wait_until(lambda: ids_of(live_calls(rec)[-1].answer) == items.expected(), timeout=10)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), 1e10, "10", True])
def test_bad_intervals_are_refused(kinto_url, items, tmp_path, open_ctx, bad):
    with pytest.raises((ValueError, TypeError)):
        open_ctx(kinto_url, items.bucket, tmp_path / "s.db", sync_interval=bad)
