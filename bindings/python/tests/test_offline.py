"""Offline, visible and useful (issue 22, case 11): the default query
answers from the cache when the server cannot be reached and says so;
ctx.online follows the server, and observe_online tells each change. The
server is made unreachable by scripts/faultproxy.py: "drop" closes each
connection before a byte of answer, stop() leaves nobody listening."""

import threading

import pytest

import tether

N = 5


@pytest.fixture(scope="module")
def tasks(kinto, bucket):
    kinto.create_collection(bucket, "tasks", {"type": "object", "properties": {
        "n": {"type": "integer"}, "title": {"type": "string"}}})
    kinto.put_records(bucket, "tasks", [("t%d" % i, {"n": i, "title": "task %d" % i}) for i in range(N)])
    return bucket


def titles(answer):
    return [o.peek("title") for o in answer]


def test_default_fetch_answers_from_the_cache_when_the_server_cannot_be_reached(tasks, tmp_path, open_ctx,
                                                                                faultproxy):
    ctx = open_ctx(faultproxy.url, tasks, tmp_path / "s.db", timeout_ms=3000)
    final = ctx.query("tasks", sort="n").all()
    assert titles(final) == ["task %d" % i for i in range(N)]
    assert final.offline is False and ctx.online is True

    faultproxy.set("drop")
    firsts = []
    final = ctx.query("tasks", sort="n", on_cached=firsts.append).all()
    assert titles(final) == ["task %d" % i for i in range(N)]
    assert len(firsts) == 1 and titles(firsts[0]) == titles(final)
    assert final.offline is True
    assert ctx.online is False
    n = ctx.query("tasks").count()
    assert n == N and n.offline is True
    ids = ctx.query("tasks", sort="n", policy="cache_else_server", where="n > 100").ids()
    assert ids == [] and ids.offline is True
    with pytest.raises(tether.NetworkError):
        ctx.query("tasks", policy="server_only").all()

    faultproxy.set("pass")
    final = ctx.query("tasks", sort="n").all()
    assert final.offline is False
    assert ctx.online is True


def test_a_server_that_answers_badly_is_not_offline(tasks, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, tasks, tmp_path / "s.db", timeout_ms=3000)
    ctx.query("tasks").all()
    faultproxy.set("status", status=500, match="/records")
    with pytest.raises(tether.ServerError):
        ctx.query("tasks").all()
    assert ctx.online is True


def test_observe_online_tells_each_change_once(tasks, tmp_path, open_ctx, faultproxy, recorder, wait_for):
    ctx = open_ctx(faultproxy.url, tasks, tmp_path / "s.db", timeout_ms=3000)
    told = recorder()
    sibling = ctx.open_sibling("background")
    sibling_told = recorder()
    observer = ctx.observe_online(told)
    sibling.observe_online(sibling_told)
    ctx.query("tasks").all()
    faultproxy.set("drop")
    for _ in range(3):
        ctx.query("tasks").all()
    assert told.wait(lambda calls: len(calls) >= 1)
    faultproxy.set("pass")
    ctx.query("tasks").all()
    assert told.wait(lambda calls: len(calls) >= 2)
    # Siblings share the connection, so the state: one server.
    assert sibling_told.wait(lambda calls: len(calls) >= 2)
    threading.Event().wait(0.2)
    assert told.calls == [(False,), (True,)]
    assert sibling_told.calls == [(False,), (True,)]
    assert observer.remove() is True
    assert wait_for(lambda: observer.removed)
    assert observer.remove() is False
    with pytest.raises(TypeError):
        ctx.observe_online(None)


def test_a_context_opened_offline_warns_and_comes_back_online(tasks, tmp_path, open_ctx, faultproxy):
    store = tmp_path / "s.db"
    with open_ctx(faultproxy.url, tasks, store, timeout_ms=3000) as ctx:
        ctx.query("tasks").all()
    faultproxy.stop()   # same URL, nobody listening
    with pytest.warns(tether.OfflineWarning, match="opened offline"):
        ctx = open_ctx(faultproxy.url, tasks, store, timeout_ms=3000)
    assert ctx.online is False
    told = []
    ctx.observe_online(told.append)
    final = ctx.query("tasks", sort="n").all()
    assert final.offline is True and titles(final) == ["task %d" % i for i in range(N)]
    faultproxy.start()
    final = ctx.query("tasks", sort="n").all()
    assert final.offline is False
    assert ctx.online is True
    ctx.close()
    assert told == [True]
