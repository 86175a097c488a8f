"""peek never touches the network; get refreshes in the background, tells
observers, and many gets coalesce into few requests."""

import pytest

import tether

SCHEMA = {
    "type": "object",
    "properties": {
        "Key": {"type": "string", "x-tether-code": 10},
        "Num": {"type": "integer", "x-tether-code": 11},
    },
    "required": ["Key"],
}
COUNT = 50


def tid(i):
    return "t%03d" % i


@pytest.fixture(scope="module")
def things(kinto, bucket):
    kinto.create_collection(bucket, "things", SCHEMA)
    kinto.put_records(bucket, "things", [(tid(i), {"Key": "v%d" % i, "Num": i})
                                         for i in range(COUNT)])
    return bucket


def record_requests(proxy):
    """Requests the library sent for records (the proxy's log)."""
    return [l for l in proxy.log() if "/records" in l]


def test_peek_get_and_observers(kinto, kinto_url, things, tmp_path, open_ctx, recorder,
                                faultproxy):
    ctx = open_ctx(faultproxy.url, things, tmp_path / "s.db")
    ctx.query("things").all()
    o = ctx.object("things", tid(1))
    assert o.peek("Key") == "v1"

    key_rec, peek_rec = recorder(), recorder()
    ob1 = o.observe("Key", key_rec)
    ob2 = o.observe("KeyPeek", peek_rec)
    assert ctx.pending == 2

    kinto.patch_record(things, "things", tid(1), {"Key": "changed"})
    faultproxy.reset()
    assert o.peek("Key") == "v1"           # still the cached value...
    assert o.peek(10) == "v1"
    assert record_requests(faultproxy) == []   # ...and no request was made
    assert key_rec.calls == [] and peek_rec.calls == []

    assert o.get("Key") == "v1"            # get answers from the cache at once
    assert key_rec.wait(lambda c: len(c) >= 1)
    assert peek_rec.wait(lambda c: len(c) >= 1)
    assert key_rec.calls[0] == (o, "Key", 0)
    assert peek_rec.calls[0] == (o, "KeyPeek", 0)
    assert o.peek("Key") == "changed"
    assert record_requests(faultproxy) != []

    # attribute access is get; the "Peek" suffix is peek
    assert o.Key == "changed" and o.KeyPeek == "changed" and o.Num == 1
    with pytest.raises(AttributeError) as ei:
        o.NoSuchKey
    assert isinstance(ei.value.__cause__, tether.NotFoundError)

    # removing: exactly one more call, cancelled; removing twice is False
    assert ob1.remove() is True
    assert key_rec.wait(lambda c: c[-1][2] == tether.E_CANCELLED)
    assert ob1.removed and ob1.remove() is False
    n = len(key_rec.calls)
    kinto.patch_record(things, "things", tid(1), {"Key": "again"})
    o.get("Key")
    assert peek_rec.wait(lambda c: len(c) >= 2)   # the other observer still hears
    assert peek_rec.calls[1] == (o, "KeyPeek", 0)
    assert len(key_rec.calls) == n                # the removed one does not
    assert ob2.remove() is True
    assert peek_rec.wait(lambda c: c[-1][2] == tether.E_CANCELLED)
    assert ctx.pending == 0


def test_observe_by_code(kinto, kinto_url, things, tmp_path, open_ctx, recorder):
    ctx = open_ctx(kinto_url, things, tmp_path / "s.db")
    ctx.query("things").all()
    o = ctx.object("things", tid(2))
    rec = recorder()
    with o.observe(11, rec) as ob:                 # code 11 = Num
        assert ob.key == "Num"
        kinto.patch_record(things, "things", tid(2), {"Num": 1002})
        assert o.get(11) == 2
        assert rec.wait(lambda c: len(c) >= 1)
        assert rec.calls[0] == (o, "Num", 0)
        assert o.peek("Num") == 1002
    assert rec.wait(lambda c: c[-1][2] == tether.E_CANCELLED)


def test_many_gets_coalesce(kinto, things, tmp_path, open_ctx, recorder, faultproxy):
    ctx = open_ctx(faultproxy.url, things, tmp_path / "s.db")
    objs = ctx.query("things").all()
    assert len(objs) == COUNT
    rec = recorder()
    observers = [o.observe("Num", rec) for o in objs]
    kinto.patch_records(things, "things", [(tid(i), {"Num": 5000 + i}) for i in range(COUNT)])
    faultproxy.reset()
    for o in objs:
        o.get("Num")
    assert rec.wait(lambda c: len(c) >= COUNT, timeout=30), "got %d" % len(rec.calls)
    assert sorted(o.peek("Num") for o in objs) == [5000 + i for i in range(COUNT)]
    reqs = record_requests(faultproxy)
    assert 1 <= len(reqs) <= 5, "expected a few batched requests, got %d: %r" % (
        len(reqs), reqs[:10])
    for ob in observers:
        ob.remove()


def test_staleness_window_skips_refresh(kinto, things, tmp_path, open_ctx, faultproxy,
                                        wait_for):
    ctx = open_ctx(faultproxy.url, things, tmp_path / "s.db", staleness_ms=600000)
    ctx.query("things").all()
    faultproxy.reset()
    o = ctx.object("things", tid(3))
    for _ in range(5):
        assert o.get("Key") == "v3"
    wait_for(lambda: False, timeout=0.5)
    assert record_requests(faultproxy) == []


def test_get_uncached_starts_refresh(kinto, kinto_url, things, tmp_path, open_ctx, wait_for):
    ctx = open_ctx(kinto_url, things, tmp_path / "s.db")
    o = ctx.object("things", tid(4))
    # Not cached yet: None (or the default asked for), never an exception.
    assert o.peek("Key") is None and o.peek("Key", "?") == "?"
    assert not o.is_cached() and not o.is_cached("Key")
    assert o.version is None
    assert o.get("Key", default="later") == "later"     # ...and starts the refresh
    assert wait_for(o.is_cached, timeout=10)
    assert o.peek("Key") == "v4" and o.is_cached("Key") and o.version > 0


def test_attribute_of_uncached_record_is_none_then_value(kinto_url, things, tmp_path, open_ctx, wait_for):
    """The README's first read: obj.Name on a fresh store is None, and the
    get it made brings the value a moment later."""
    ctx = open_ctx(kinto_url, things, tmp_path / "s.db")
    o = ctx.object("things", tid(5))
    assert o.Key is None
    assert wait_for(lambda: o.KeyPeek == "v5", timeout=10)


def test_is_cached_tells_null_from_not_cached(kinto, kinto_url, things, tmp_path, open_ctx):
    kinto.create_collection(things, "sparse", SCHEMA)
    kinto.put_record(things, "sparse", "no-num", {"Key": "k"})
    ctx = open_ctx(kinto_url, things, tmp_path / "s.db")
    ctx.query("sparse").all()
    o = ctx.object("sparse", "no-num")
    assert o.peek("Num", "absent") is None and o.is_cached("Num")
    assert ctx.object("sparse", "elsewhere").peek("Num", "absent") == "absent"
    with pytest.raises(tether.NotFoundError):
        o.is_cached("NoSuchKey")            # a bad key is still an error
    with pytest.raises(tether.NotFoundError):
        o.peek("NoSuchKey", default=0)


def test_record_deleted_on_server(kinto, kinto_url, things, tmp_path, open_ctx, recorder):
    ctx = open_ctx(kinto_url, things, tmp_path / "s.db")
    ctx.query("things").all()
    kinto.put_record(things, "things", "doomed", {"Key": "d", "Num": 0})
    o = ctx.object("things", "doomed")
    rec = recorder()
    o.observe("Key", rec)
    assert o.get("Key") is None
    # the refresh brings it in, and that is a change observers hear of
    assert rec.wait(lambda c: len(c) >= 1)
    assert rec.calls[0] == (o, "Key", 0) and o.peek("Key") == "d"
    kinto.delete_record(things, "things", "doomed")
    n = len(rec.calls)
    o.get("Key")
    assert rec.wait(lambda c: len(c) > n), "deletion not reported to the observer"
    with pytest.raises(tether.NotFoundError):
        o.peek("Key")


def test_key_misuse(kinto_url, things, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, things, tmp_path / "s.db")
    ctx.query("things", limit=1, sort="Num").all()
    o = ctx.object("things", tid(0))
    with pytest.raises(tether.NotFoundError):
        o.peek("Nope")
    with pytest.raises(tether.NotFoundError):
        o.get(99999)
    with pytest.raises(TypeError):
        o.peek(1.5)
    with pytest.raises(TypeError):
        o.peek(None)
    with pytest.raises(TypeError):
        o.get(True)
    with pytest.raises(ValueError):
        o.peek("Ke\x00y")
    with pytest.raises(tether.InvalidError):
        o.peek(b"\xff\xfe")              # invalid UTF-8 reaches the library
    with pytest.raises(tether.NotFoundError):
        o.observe("Nope", lambda *a: None)
    with pytest.raises(TypeError):
        o.observe("Key", "not callable")
    assert ctx.pending == 0


def test_get_of_a_record_the_server_lacks(kinto_url, things, tmp_path, open_ctx, recorder):
    """A wrong id: the get's observer hears, once, that no value will come,
    and peek then says so."""
    ctx = open_ctx(kinto_url, things, tmp_path / "s.db")
    o = ctx.object("things", "no-such-thing")
    rec = recorder()
    o.observe("Key", rec)
    assert o.get("Key") is None                       # not cached: the refresh starts
    assert rec.wait(lambda c: len(c) >= 1)
    assert rec.calls == [(o, "Key", tether.E_NOT_FOUND)]
    with pytest.raises(tether.NotFoundError):
        o.peek("Key")
