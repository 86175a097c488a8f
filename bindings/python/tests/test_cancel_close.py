"""Cancellation and close: exactly one final callback, nothing after."""

import time

import pytest

import tether
from conftest import finished

SCHEMA = {"type": "object", "properties": {"V": {"type": "integer"}}}


@pytest.fixture(scope="module")
def vals(kinto, bucket):
    kinto.create_collection(bucket, "vals", SCHEMA)
    kinto.put_records(bucket, "vals", [("v%02d" % i, {"V": i}) for i in range(10)])
    return bucket


def slow_records(proxy, seconds=2.0):
    proxy.set("delay", delay=seconds, match="/records")


@pytest.mark.parametrize("policy", ["server_only", "cache_then_server"])
def test_cancel_in_flight(vals, tmp_path, open_ctx, recorder, faultproxy, policy):
    ctx = open_ctx(faultproxy.url, vals, tmp_path / "s.db")
    slow_records(faultproxy, 1.5)
    rec = recorder()
    task = ctx.query("vals", policy=policy).start(rec)
    time.sleep(0.2)                       # the request is in the proxy now
    before = len(rec.calls)
    assert task.cancel() is True
    assert finished(task, 10)
    after = rec.calls[before:]
    assert len(after) == 1, after
    phase, status, message, objs = after[0]
    assert (phase, status) == ("final", tether.E_CANCELLED)
    assert isinstance(task.error, tether.TaskCancelledError) and task.exception() is task.error
    assert all(c[0] == "cached" for c in rec.calls[:before])
    time.sleep(2.0)                       # the delayed answer arrives: ignored
    assert len(rec.calls) == before + 1
    assert task.cancel() is False
    assert ctx.pending == 0


def test_cancel_after_done(vals, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, vals, tmp_path / "s.db")
    task = ctx.query("vals").start()
    assert finished(task, 10) and task.status == 0
    assert task.cancel() is False


def test_query_timeout_cancels(vals, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, vals, tmp_path / "s.db")
    slow_records(faultproxy, 3.0)
    with pytest.raises(TimeoutError):
        ctx.query("vals", policy="server_only", timeout=0.3).all()
    assert ctx.pending == 0


def test_close_cancels_pending(vals, tmp_path, open_ctx, recorder, faultproxy):
    ctx = open_ctx(faultproxy.url, vals, tmp_path / "s.db")
    ctx.query("vals").all()
    obj = ctx.object("vals", "v01")
    orec, frec = recorder(), recorder()
    ob = obj.observe("V", orec)
    slow_records(faultproxy, 2.0)
    task = ctx.query("vals", policy="server_only").start(frec)
    time.sleep(0.2)
    ctx.close()
    # delivered before close returned
    assert frec.calls and frec.calls[-1][:2] == ("final", tether.E_CANCELLED)
    assert orec.calls == [(obj, "V", tether.E_CANCELLED)]
    assert task.done() and ob.removed and ctx.pending == 0
    n_f, n_o = len(frec.calls), len(orec.calls)
    time.sleep(2.2)
    assert (len(frec.calls), len(orec.calls)) == (n_f, n_o)
    assert ob.remove() is False and task.cancel() is False


def test_handles_after_close(vals, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, vals, tmp_path / "s.db")
    objs = ctx.query("vals").all()
    o = objs[0]
    ctx.close()
    ctx.close()                          # idempotent
    assert ctx.closed
    assert o.id.startswith("v")          # Python copies survive
    for call in (lambda: o.peek("V"), lambda: o.get("V"), lambda: o.version,
                 lambda: ctx.online, lambda: ctx.entities, lambda: ctx.entity("vals"),
                 lambda: ctx.object("vals", "v01"), lambda: ctx.query("vals").start(),
                 lambda: o.observe("V", lambda *a: None)):
        with pytest.raises(tether.HandleError):
            call()
    assert ctx.pending == 0


def test_context_manager_and_busy(vals, kinto_url, tmp_path):
    errors = []
    with tether.Context(kinto_url, vals, str(tmp_path / "s.db"), username="test",
                        password="test") as ctx:
        def cb(phase, error, objs):
            if phase == "final":
                try:
                    ctx.close()
                except tether.TetherError as e:
                    errors.append(e)
        t = ctx.query("vals", policy="cache_only").start(cb)
        assert finished(t, 10)
        assert not ctx.closed
    assert ctx.closed
    assert len(errors) == 1 and isinstance(errors[0], tether.BusyError)


def test_thread_mode_misuse(vals, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, vals, tmp_path / "s.db")
    with pytest.raises(tether.MisuseError):
        ctx.poll(0)
    with pytest.raises(tether.MisuseError):
        ctx.fileno()
    with pytest.raises(ValueError):
        tether.Context(kinto_url, vals, str(tmp_path / "x.db"), delivery="sometimes")
