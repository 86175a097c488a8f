"""Offline use and failures: network, auth, unknown bucket, bad answers,
server errors; the store is left intact by a failed request."""

import socket

import time

import pytest

import tether
from conftest import answers, finished

SCHEMA = {"type": "object", "properties": {"Name": {"type": "string"},
                                           "Size": {"type": "integer"}}}
N = 60


@pytest.fixture(scope="module")
def files(kinto, bucket):
    kinto.create_collection(bucket, "files", SCHEMA)
    kinto.put_records(bucket, "files", [("f%02d" % i, {"Name": "file%d" % i, "Size": i})
                                        for i in range(N)])
    return bucket


def dead_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d/v1" % port


def fill(open_ctx, url, bucket, store):
    ctx = open_ctx(url, bucket, store)
    objs = ctx.query("files").all()
    assert len(objs) == N
    ctx.close()


def check_cache_intact(open_ctx, url, bucket, store, **kw):
    ctx = open_ctx(url, bucket, store, **kw)
    objs = ctx.query("files", policy="cache_only", sort="Size").all()
    assert [o.peek("Name") for o in objs] == ["file%d" % i for i in range(N)]
    ctx.close()


@pytest.mark.parametrize("how", ["stopped", "drop"])
def test_offline_open_from_store(files, tmp_path, open_ctx, recorder, faultproxy, how):
    store = tmp_path / "s.db"
    fill(open_ctx, faultproxy.url, files, store)
    if how == "stopped":
        faultproxy.stop()                      # same URL, nobody listening
    else:
        faultproxy.set("drop")
    ctx = open_ctx(faultproxy.url, files, store, timeout_ms=3000)
    assert ctx.online is False
    assert [e.name for e in ctx.entities] == ["files"]
    o = ctx.object("files", "f07")
    assert o.peek("Name") == "file7" and o.peek("Size") == 7
    cached, final = answers(ctx.query, "files", policy="cache_only")
    assert cached is None and len(final) == N
    rec = recorder()
    t = ctx.query("files").start(rec)
    assert finished(t, 15)
    assert [c[0] for c in rec.calls] == ["cached", "final"]
    assert len(rec.calls[0][3]) == N
    assert rec.calls[1][1] == tether.E_NETWORK and rec.calls[1][2]
    assert isinstance(t.error, tether.NetworkError)
    with pytest.raises(tether.NetworkError):
        ctx.query("files", policy="server_only").all()


def test_unreachable_without_store(files, tmp_path):
    store = tmp_path / "none.db"
    with pytest.raises(tether.NetworkError) as ei:
        tether.Context(dead_url(), files, str(store), timeout_ms=3000)
    assert ei.value.status == tether.E_NETWORK and ei.value.message


def test_unknown_bucket(kinto_url, tmp_path):
    store = tmp_path / "s.db"
    for auth in (("test", "test"), (None, None)):
        with pytest.raises(tether.NotFoundError):
            tether.Context(kinto_url, "no-such-bucket-here", str(store),
                           username=auth[0], password=auth[1])


def test_refused_credentials_real(files, kinto_url, tmp_path, open_ctx):
    """A bucket created by test:test is private to that user: another password
    is another user (403), no credentials is 401. Both are AuthError, and the
    store is left as it was."""
    store = tmp_path / "s.db"
    fill(open_ctx, kinto_url, files, store)
    with pytest.raises(tether.AuthError):
        tether.Context(kinto_url, files, str(store), username="test", password="wrong")
    with pytest.raises(tether.AuthError):
        tether.Context(kinto_url, files, str(store))
    check_cache_intact(open_ctx, kinto_url, files, store)


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_injected(files, tmp_path, open_ctx, faultproxy, status):
    store = tmp_path / "s.db"
    fill(open_ctx, faultproxy.url, files, store)
    faultproxy.set("status", status=status)
    with pytest.raises(tether.AuthError):
        tether.Context(faultproxy.url, files, str(tmp_path / "fresh.db"),
                       username="test", password="test")
    # a fetch refused midway: the final reports it
    faultproxy.set("pass")
    ctx = open_ctx(faultproxy.url, files, store)
    faultproxy.set("status", status=status, match="/records")
    with pytest.raises(tether.AuthError):
        ctx.query("files", policy="server_only").all()
    faultproxy.set("pass")
    ctx.close()
    check_cache_intact(open_ctx, faultproxy.url, files, store)


@pytest.mark.parametrize("mode,errors", [
    ("malformed", (tether.ProtocolError,)),
    ("truncate", (tether.NetworkError, tether.ProtocolError)),
    ("status", (tether.ServerError,)),
])
def test_bad_answers_leave_store_intact(kinto, files, tmp_path, open_ctx, faultproxy, mode,
                                        errors):
    store = tmp_path / "s.db"
    fill(open_ctx, faultproxy.url, files, store)
    # open itself fails on a bad answer, store untouched
    faultproxy.set(mode, status=500)
    with pytest.raises(errors):
        tether.Context(faultproxy.url, files, str(store), timeout_ms=5000,
                       username="test", password="test")
    faultproxy.set("pass")
    check_cache_intact(open_ctx, faultproxy.url, files, store)
    # a fetch whose answer is bad: the cache keeps the old data
    ctx = open_ctx(faultproxy.url, files, store, timeout_ms=5000)
    kinto.patch_record(files, "files", "f03", {"Name": "CHANGED"})
    faultproxy.set(mode, status=500, match="/records")
    with pytest.raises(errors):
        ctx.query("files", policy="server_only").all()
    assert ctx.object("files", "f03").peek("Name") == "file3"
    faultproxy.set("pass")
    ctx.close()
    check_cache_intact(open_ctx, faultproxy.url, files, store)
    kinto.patch_record(files, "files", "f03", {"Name": "file3"})


def test_server_error_midway_through_pages(kinto, files, tmp_path, open_ctx, faultproxy):
    """A failure on the second page: the final reports it, and the first
    page (already written, one transaction per page) stays consistent."""
    ctx = open_ctx(faultproxy.url, files, tmp_path / "s.db", timeout_ms=5000)
    faultproxy.set("status", status=503, match="_token=")
    with pytest.raises(tether.ServerError):
        ctx.query("files", policy="server_only").all()
    faultproxy.set("pass")
    objs = ctx.query("files", policy="server_only").all()
    assert len(objs) == N


def test_store_errors(files, kinto_url, tmp_path, open_ctx):
    bad = tmp_path / "garbage.db"
    bad.write_bytes(b"this is not an SQLite database" * 100)
    with pytest.raises(tether.StoreError):
        tether.Context(kinto_url, files, str(bad), username="test", password="test")
    with pytest.raises(tether.StoreError):
        tether.Context(kinto_url, files, str(tmp_path / "no" / "such" / "dir" / "s.db"),
                       username="test", password="test")


def test_invalid_arguments(files, kinto_url, tmp_path):
    with pytest.raises(TypeError):
        tether.Context(kinto_url, 42, str(tmp_path / "s.db"))
    with pytest.raises(tether.InvalidError):
        tether.Context("not a url", files, str(tmp_path / "s.db"))
    with pytest.raises(tether.InvalidError):
        tether.Context(kinto_url, b"bad\xffbucket", str(tmp_path / "s.db"))


@pytest.mark.parametrize("status", [503, 429])
def test_idempotent_requests_retry_after_the_servers_retry_after(files, tmp_path, open_ctx, faultproxy, status):
    """Two answers of `status` with Retry-After: 1, then the real ones: the
    fetch succeeds, having asked three times and waited as told."""
    ctx = open_ctx(faultproxy.url, files, tmp_path / "s.db", timeout_ms=5000)
    faultproxy.set("status", status=status, match="/records", count=2, retry_after=1, reset_log=True)
    started = time.monotonic()
    objs = ctx.query("files", policy="server_only").all()
    waited = time.monotonic() - started
    assert len(objs) == N
    assert faultproxy.state()["faulted"] == 2
    # (Not the later page, nor the catch-up after a listing of several pages.)
    # (Nor the check of ids and versions, _fields, that ends the listing.)
    first_page = [line for line in faultproxy.log() if "/records" in line and "_token=" not in line
                  and "_since=" not in line and "_fields=" not in line]
    assert len(first_page) == 3, first_page
    assert waited >= 1.9, "Retry-After was honoured twice (%.2f s)" % waited


def test_errors_that_retrying_cannot_mend_are_not_retried(files, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, files, tmp_path / "s.db", timeout_ms=5000)
    faultproxy.set("status", status=500, match="/records", reset_log=True)
    with pytest.raises(tether.ServerError):
        ctx.query("files", policy="server_only").all()
    assert faultproxy.state()["faulted"] == 1


def test_retries_give_up_and_say_why(files, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, files, tmp_path / "s.db", timeout_ms=5000)
    faultproxy.set("status", status=503, match="/records", retry_after=0, reset_log=True)
    with pytest.raises(tether.ServerError) as raised:
        ctx.query("files", policy="server_only").all()
    assert "503" in str(raised.value)
    assert faultproxy.state()["faulted"] == 4, "the request and three retries"
