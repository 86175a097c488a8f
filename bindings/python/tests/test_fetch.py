"""Fetch: cached then final, pagination, sort and limit, policies, uniquing."""

import gc

import pytest

import tether
from conftest import answers, finished

N = 120   # more than the server's paginate_by (50 in scripts/kinto-start)

SCHEMA = {
    "type": "object",
    "properties": {
        "N": {"type": "integer", "x-tether-code": 1},
        "Label": {"type": "string", "x-tether-code": 2},
        "Even": {"type": "boolean", "x-tether-code": 3},
        "Ratio": {"type": "number", "x-tether-code": 4},
        "Tags": {"type": "array", "items": {"type": "string"}, "x-tether-code": 5},
        "Extra": {"type": "object", "x-tether-code": 6},
        "Opt": {"type": "string", "x-tether-code": 7},
    },
    "required": ["N", "Label"],
}


def rid(i):
    return "r%03d" % i


def record(i):
    d = {"N": i, "Label": "row %d \u00e9" % i, "Even": i % 2 == 0, "Ratio": i / 4.0,
         "Tags": ["t%d" % (i % 3), "x"], "Extra": {"i": i, "nested": [1, None]}}
    if i % 10 == 0:
        d["Opt"] = "opt%d" % i
    return d


@pytest.fixture(scope="module")
def rows(kinto, bucket):
    kinto.create_collection(bucket, "rows", SCHEMA)
    kinto.create_collection(bucket, "empty", {"type": "object", "properties": {}})
    kinto.put_records(bucket, "rows", [(rid(i), record(i)) for i in range(N)])
    return bucket


def test_cached_then_final_with_pagination(kinto_url, rows, tmp_path, open_ctx, recorder):
    store = tmp_path / "s.db"
    ctx = open_ctx(kinto_url, rows, store)
    rec = recorder()
    task = ctx.query("rows").start(rec)
    assert finished(task, 30)
    phases = [c[0] for c in rec.calls]
    assert phases == ["cached", "final"]
    (ph1, st1, msg1, cached), (ph2, st2, msg2, final) = rec.calls
    assert (st1, msg1, cached) == (0, "", [])          # nothing cached yet
    assert (st2, msg2) == (0, "")
    assert len(final) == N                               # every page followed
    assert sorted(o.id for o in final) == [rid(i) for i in range(N)]
    assert task.done() and task.status == 0 and task.error is None
    assert task.result() == final and task.cached == []
    assert ctx.pending == 0

    # Second fetch: the cached phase already has everything.
    cached2, final2 = answers(ctx.query, "rows")
    assert len(cached2) == N and len(final2) == N
    assert set(cached2) == set(final)                    # same Python objects

    # Another context on the same store sees the cache without the network.
    ctx.close()
    ctx2 = open_ctx(kinto_url, rows, store)
    cached3, final3 = answers(ctx2.query, "rows", policy="cache_only")
    assert cached3 is None and len(final3) == N


def test_values_convert(kinto_url, rows, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, rows, tmp_path / "s.db")
    objs = ctx.query("rows").all()
    by = {o.id: o for o in objs}
    o = by[rid(10)]
    assert o.entity is ctx.entity("rows")
    assert o.peek("N") == 10 and type(o.peek("N")) is int
    assert o.peek("Label") == "row 10 \u00e9"
    assert o.peek("Even") is True and by[rid(11)].peek("Even") is False
    assert o.peek("Ratio") == 2.5 and type(o.peek("Ratio")) is float
    assert o.peek("Tags") == ["t1", "x"]
    assert o.peek("Extra") == {"i": 10, "nested": [1, None]}
    assert o.peek("Opt") == "opt10"
    assert by[rid(11)].peek("Opt") is None              # absent -> NULL -> None
    assert o.peek("id") == rid(10)
    assert isinstance(o.version, int) and o.version > 0
    assert o.peek("last_modified") == o.version
    # by code
    assert o.peek(1) == 10 and o.peek(2) == "row 10 \u00e9" and o.peek(5) == ["t1", "x"]
    assert o.to_dict()["N"] == 10


def test_sort_and_limit(kinto_url, rows, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, rows, tmp_path / "s.db")
    objs = ctx.query("rows", sort="-N", limit=7, policy="server_only").all()
    assert [o.peek("N") for o in objs] == list(range(N - 1, N - 8, -1))
    # once cached, the cached phase honours sort and limit too
    _ = ctx.query("rows").all()
    cached, final = answers(ctx.query, "rows", sort=["Even", "-N"], limit=5)
    expect = [i for i in sorted(range(N), key=lambda i: (i % 2 == 0, -i))][:5]
    assert [o.peek("N") for o in cached] == expect
    assert [o.peek("N") for o in final] == expect


def test_policies(kinto_url, rows, tmp_path, open_ctx, recorder):
    ctx = open_ctx(kinto_url, rows, tmp_path / "s.db")
    # cache_only on an empty store: one final callback, no objects
    rec = recorder()
    t = ctx.query("rows", policy="cache_only").start(rec)
    assert finished(t, 10)
    assert rec.calls == [("final", 0, "", [])]
    # server_only: one final callback with everything
    rec = recorder()
    t = ctx.query("rows", policy="server_only").start(rec)
    assert finished(t, 30)
    assert [c[0] for c in rec.calls] == ["final"] and len(rec.calls[0][3]) == N
    # cache_else_server with a filled cache: answered from the cache
    cached, final = answers(ctx.query, "rows", policy="cache_else_server")
    assert cached is None and len(final) == N
    # empty collection
    cached, final = answers(ctx.query, "empty")
    assert cached == [] and final == []


def test_uniquing(kinto_url, rows, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, rows, tmp_path / "s.db")
    a = ctx.query("rows", sort="N", limit=3).all()
    b = ctx.query("rows", sort="N", limit=3, policy="server_only").all()
    assert [x is y for x, y in zip(a, b)] == [True] * 3
    assert ctx.object("rows", rid(0)) is a[0]
    assert ctx.object(ctx.entity("rows"), rid(1)) is a[1]
    # an object for a record not cached yet
    u = ctx.object("rows", "not-there")
    assert u is ctx.object("rows", "not-there")
    assert u.id == "not-there"
    assert u.peek("N") is None and u.version is None and not u.is_cached()


def test_fetch_validation_errors(kinto_url, rows, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, rows, tmp_path / "s.db")
    with pytest.raises(tether.NotFoundError):
        ctx.query("nope").start(lambda *a: None)
    with pytest.raises(tether.InvalidError):
        ctx.query("rows", sort="NoSuchField").start()
    with pytest.raises(ValueError):
        ctx.query("rows", policy="sometimes").start()
    with pytest.raises(TypeError):
        ctx.query(42).start()
    assert ctx.pending == 0                     # nothing left registered


def test_callback_survives_gc_and_exceptions(kinto_url, rows, tmp_path, open_ctx, caplog):
    """The binding keeps the callback alive on its own; an exception in a
    user callback is logged and does not stop the final delivery."""
    ctx = open_ctx(kinto_url, rows, tmp_path / "s.db")
    seen = []

    def cb(phase, error, objects):
        seen.append(phase)
        raise RuntimeError("boom in %s" % phase)

    t = ctx.query("rows").start(cb)
    del cb
    gc.collect()
    with caplog.at_level("ERROR", logger="tether"):
        assert finished(t, 30)
    assert seen == ["cached", "final"]
    assert t.status == 0 and len(t.result()) == N
    assert any("boom in" in (r.exc_text or "") or r.exc_info for r in caplog.records)
