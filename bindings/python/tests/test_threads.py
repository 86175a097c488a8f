"""The binding under threads: concurrent use, the GIL released in calls,
waiting from inside a callback, and how the library is found."""

import os
import subprocess
import sys
import threading
import time

import pytest

import tether
from conftest import finished

SCHEMA = {"type": "object", "properties": {"P": {"type": "integer"}}}
N = 40


@pytest.fixture(scope="module")
def pts(kinto, bucket):
    kinto.create_collection(bucket, "pts", SCHEMA)
    kinto.put_records(bucket, "pts", [("p%02d" % i, {"P": i}) for i in range(N)])
    return bucket


def test_concurrent_fetches_from_threads(pts, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, pts, tmp_path / "s.db")
    errors, results = [], []

    def worker(k):
        try:
            for j in range(5):
                objs = ctx.query("pts", sort="P" if j % 2 else "-P", limit=10 + k).all()
                results.append(len(objs))
                for o in objs[:5]:
                    o.get("P")
                    o.peek(o.entity.attributes[0].name)
        except BaseException as e:   # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(results) == sorted([10 + k for k in range(8) for _ in range(5)])
    # one Object per record, whichever thread first saw it (held, so that no
    # two of them can share an id() one after the other)
    held = [ctx.object("pts", "p%02d" % i) for i in range(N)]
    assert len({id(o) for o in held}) == N
    assert all(ctx.object("pts", "p%02d" % i) is held[i] for i in range(N))
    ctx.query("pts", policy="cache_only").all()
    assert ctx.pending == 0


def test_blocking_poll_releases_the_gil(pts, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, pts, tmp_path / "s.db", delivery="poll")
    t = threading.Thread(target=ctx.poll, args=(1000,))
    ticks = 0
    t0 = time.monotonic()
    t.start()
    while t.is_alive():
        ticks += 1
        time.sleep(0.001)
    assert time.monotonic() - t0 > 0.5
    assert ticks > 50          # the main thread ran while poll() blocked in C


def test_waiting_inside_a_callback_is_refused(pts, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, pts, tmp_path / "s.db")
    seen = []

    def cb(phase, error, objs):
        if phase == "final":
            try:
                ctx.query("pts", policy="cache_only", timeout=2).all()
            except tether.BusyError as e:
                seen.append(e)
    t = ctx.query("pts", policy="cache_only").start(cb)
    assert finished(t, 10)
    assert len(seen) == 1
    # the inner fetch was started, then its wait refused; it still finishes
    time.sleep(0.2)
    assert ctx.pending == 0


def test_library_lookup_message():
    env = dict(os.environ, TETHER_LIBRARY="/nonexistent/libtether.so")
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", "import tether"], cwd=pkg, env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "TETHER_LIBRARY" in r.stderr
    assert "/nonexistent/libtether.so" in r.stderr
    assert os.path.exists(tether.library_path)
