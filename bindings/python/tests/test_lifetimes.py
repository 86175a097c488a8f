"""Lifetimes: what the library holds follows what Python holds.

Objects release their handles when Python drops them, a fetch's results
handle never outlives its callback, tasks and observers are freed after their
final callback, open/close cycles leave no context, thread or descriptor
behind, and touching many objects one at a time holds none of them.

The counts are process-wide (tether.debug_counts()), so each test compares
against a baseline it takes itself, and waits for the counts to settle: a task
is freed just after its final callback returns, a thread exits just after it
says so, and garbage needs collecting.
"""

import gc
import logging
import os
import subprocess
import sys
import threading
import time
import weakref

import pytest

import tether
from conftest import finished

SCHEMA = {"type": "object", "properties": {"N": {"type": "integer"}}}
N = 60    # more than one page (paginate_by is 50)
TOUCHES = 20000
TOUCH_CACHE = 64   # object_cache_size while touching
TOUCH_SLACK = 16   # objects beyond the cache that may be alive at a time


def rid(i):
    return "r%02d" % i


@pytest.fixture(scope="module")
def items(kinto, bucket):
    kinto.create_collection(bucket, "items", SCHEMA)
    kinto.put_records(bucket, "items", [(rid(i), {"N": i}) for i in range(N)])
    return bucket


def snapshot():
    """The library's live counts, plus the process's open descriptors and
    threads."""
    counts = tether.debug_counts()
    counts["fds"] = len(os.listdir("/proc/self/fd"))
    counts["process_threads"] = len(os.listdir("/proc/self/task"))
    return counts


def quiet(timeout=10.0):
    """A snapshot once the counts stop moving."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        gc.collect()
        now = snapshot()
        if now == last or time.monotonic() >= deadline:
            return now
        last = now
        time.sleep(0.05)


def assert_back(base, *names, timeout=10.0):
    """Waits until each of `names` is back at its count in `base`, then
    asserts it (the assertion shows any that are not)."""
    want = {n: base[n] for n in names}
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        now = snapshot()
        got = {n: now[n] for n in names}
        if got == want or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    assert got == want


def test_debug_counts_names():
    counts = tether.debug_counts()
    assert set(counts) == {"contexts", "objects", "object_handles", "results", "tasks",
                           "observers", "threads", "requests"}
    assert all(isinstance(v, int) and v >= 0 for v in counts.values())


def test_object_cache_size_option(kinto_url, items, tmp_path, open_ctx):
    open_ctx(kinto_url, items, tmp_path / "a.db", object_cache_size=0)
    open_ctx(kinto_url, items, tmp_path / "b.db", object_cache_size=1048576)
    with pytest.raises(tether.InvalidError):
        tether.Context(kinto_url, items, str(tmp_path / "c.db"), username="test",
                       password="test", object_cache_size=1048577)
    with pytest.raises(ValueError):
        tether.Context(kinto_url, items, str(tmp_path / "c.db"), object_cache_size=-1)
    with pytest.raises(TypeError):
        tether.Context(kinto_url, items, str(tmp_path / "c.db"), object_cache_size="64")


def test_objects_released_when_dropped(kinto_url, items, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, items, tmp_path / "s.db")
    ctx.query("items", policy="server_only").all()       # fills the cache
    base = quiet()

    objs = [ctx.object("items", rid(i)) for i in range(N)]
    assert snapshot()["object_handles"] == base["object_handles"] + N
    # The same record while its Object lives: the same Object, and the
    # reference tether_context_object handed over again is given back.
    again = ctx.object("items", rid(0))
    assert again is objs[0]
    assert snapshot()["object_handles"] == base["object_handles"] + N
    # A fetch answers with the live Objects and takes no further references.
    fetched = ctx.query("items", policy="cache_only", sort="N").all()
    assert len(fetched) == N and all(o is p for o, p in zip(fetched, objs))
    assert snapshot()["object_handles"] == base["object_handles"] + N
    assert snapshot()["results"] == base["results"] + 1   # the Answer's, until it goes

    del objs, again, fetched
    assert_back(base, "object_handles", "results")

    # Objects of a fetch outlive its results handle, and go when dropped.
    fetched = ctx.query("items", policy="cache_only", sort="N").all()
    assert snapshot()["object_handles"] == base["object_handles"]   # none made yet
    assert [o.peek("N") for o in fetched] == list(range(N))
    assert snapshot()["object_handles"] == base["object_handles"] + N
    first, last = fetched[0], fetched[-1]
    fetched.close()
    assert_back(base, "results")
    assert fetched[0] is first and fetched[-1] is last and len(fetched) == N   # read rows stay
    assert [o.peek("N") for o in fetched] == list(range(N))
    del fetched, first, last
    assert_back(base, "object_handles")

    # A record whose Object went gets a new one that works.
    o = ctx.object("items", rid(3))
    assert o.peek("N") == 3 and o.id == rid(3)
    del o
    assert_back(base, "object_handles")


class MessagesOnly(logging.Handler):
    """Keeps the messages of log records, not the records: a record of a
    logged exception holds its traceback, and with it the frames' Objects."""

    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("delivery", ["thread", "poll"])
def test_results_never_leak(kinto_url, items, tmp_path, open_ctx, monkeypatch, delivery):
    logged = MessagesOnly()
    monkeypatch.setattr(logging.getLogger("tether"), "propagate", False)
    monkeypatch.setattr(logging.getLogger("tether"), "handlers", [logged])
    ctx = open_ctx(kinto_url, items, tmp_path / "s.db", delivery=delivery)
    ctx.query("items").all()
    base = quiet()
    kept = []
    calls = []

    def callback(phase, error, objs):
        calls.append(phase)
        if objs:
            kept.append(objs[0])           # an Object kept past its results handle
        if len(calls) % 10 == 0:
            raise RuntimeError("a failing callback still has its results released")

    policies = ["cache_only"] * 4 + ["cache_then_server", "cache_else_server"]
    tasks = []
    for i in range(300):
        tasks.append(ctx.query("items", policy=policies[i % len(policies)], sort="N",
                               limit=1 + i % N).start(callback))
        if i % 7 == 0:
            tasks[-1].cancel()             # cancelled, or already done
        if delivery == "poll":
            ctx.poll(0)
    for t in tasks:
        assert finished(t, 30), t
    assert {t.status for t in tasks} <= {0, tether.E_CANCELLED}
    assert sum(1 for p in calls if p == "final") == len(tasks)   # one final each
    assert all(o.peek("N") == 0 for o in kept)
    failed = [m for m in logged.messages if "exception in a tether fetch callback" in m]
    assert len(failed) == len(calls) // 10
    assert_back(base, "tasks")   # the answers the Tasks hold keep their results handles
    del kept, tasks, t
    assert_back(base, "results", "tasks", "object_handles")
    assert ctx.pending == 0


def test_tasks_and_observers_freed_after_final(kinto, items, tmp_path, open_ctx, recorder,
                                               faultproxy):
    ctx = open_ctx(faultproxy.url, items, tmp_path / "s.db")
    ctx.query("items").all()
    base = quiet()

    # A fetch held in flight by the proxy: one live task until its final.
    faultproxy.set("delay", delay=1.0, match="/records")
    frec = recorder()
    task = ctx.query("items", policy="server_only").start(frec)
    assert snapshot()["tasks"] == base["tasks"] + 1
    assert finished(task, 15) and task.status == 0
    faultproxy.set("pass")
    assert_back(base, "tasks")
    # The Task's answer (an Answer, read as rows are asked for) holds its
    # results handle until it goes or is closed.
    assert snapshot()["results"] == base["results"] + 1
    # ...and the binding has let go of the callback too, though the Task lives.
    gone = weakref.ref(frec)
    del frec
    gc.collect()
    assert gone() is None and task.done()
    task.objects.close()
    assert_back(base, "results")

    # An observer: live until its final (cancelled) callback.
    obj = ctx.object("items", rid(55))
    orec = recorder()
    ob = obj.observe("N", orec)
    assert snapshot()["observers"] == base["observers"] + 1
    kinto.patch_record(items, "items", rid(55), {"N": 5500})
    obj.get("N")
    assert orec.wait(lambda c: len(c) >= 1)
    assert orec.calls[0] == (obj, "N", 0)
    assert ob.remove() is True
    assert orec.wait(lambda c: c[-1][2] == tether.E_CANCELLED)
    assert_back(base, "observers")
    gone = weakref.ref(orec)
    del orec
    gc.collect()
    assert gone() is None and ob.removed
    kinto.patch_record(items, "items", rid(55), {"N": 55})

    # Close with a fetch in flight and an observer live: both end, both freed.
    ob2 = obj.observe("N", lambda *a: None)
    faultproxy.set("delay", delay=2.0, match="/records")
    task2 = ctx.query("items", policy="server_only").start()
    time.sleep(0.2)
    ctx.close()
    assert task2.done() and task2.status == tether.E_CANCELLED and ob2.removed
    del obj, ob, ob2, task, task2
    assert_back(base, "tasks", "observers", "results", "object_handles")


def test_open_close_cycles_leave_nothing(kinto_url, items, tmp_path):
    store = str(tmp_path / "s.db")

    def cycle(i):
        ctx = tether.Context(kinto_url, items, store, username="test", password="test",
                             delivery="poll" if i % 2 else "thread", timeout_ms=10000)
        try:
            obj = ctx.object("items", rid(i % N))
            ob = obj.observe("N", lambda *a: None)
            # Mostly answered by the cache; every tenth still on the wire at close.
            task = ctx.query("items", policy="cache_then_server" if i % 10 == 0 else "cache_only").start()
        finally:
            ctx.close()
        assert task.done() and ob.removed

    # A first cycle fills the store and lets process-wide set-up happen once.
    with tether.Context(kinto_url, items, store, username="test", password="test") as ctx:
        ctx.query("items").all()
    cycle(0)
    base = quiet()
    for i in range(1, 201):
        cycle(i)
    assert_back(base, "contexts", "threads", "process_threads", "fds", "tasks", "observers",
                "results", "object_handles")


def test_touching_many_objects_holds_none(kinto_url, items, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, items, tmp_path / "s.db", object_cache_size=TOUCH_CACHE)
    base = quiet()
    most_handles = most_objects = 0
    for i in range(TOUCHES):
        obj = ctx.object("items", "touch-%05d" % i)
        if obj.is_cached("N"):
            pytest.fail("record %s is not on the server, yet peek found it" % obj.id)
        del obj
        if i % 500 == 0:
            counts = tether.debug_counts()
            most_handles = max(most_handles, counts["object_handles"] - base["object_handles"])
            most_objects = max(most_objects, counts["objects"] - base["objects"])
    # Each Object went, with its handle, before the next came.
    assert most_handles == 0
    # What the context keeps anyway is bounded by its object cache.
    assert most_objects <= TOUCH_CACHE + TOUCH_SLACK
    assert_back(base, "object_handles")
    assert snapshot()["objects"] - base["objects"] <= TOUCH_CACHE + TOUCH_SLACK


def test_drops_racing_lookups_and_deliveries(kinto_url, items, tmp_path, open_ctx):
    """Threads drop and look up the same records while fetch callbacks wrap
    them: every Object found works (none is handed out after its handle was
    released), and the handles go back to the baseline."""
    ctx = open_ctx(kinto_url, items, tmp_path / "s.db")
    ctx.query("items").all()
    base = quiet()
    errors = []
    stop = threading.Event()

    def churn(k):
        try:
            for j in range(3000):
                i = (j + k) % 8
                obj = ctx.object("items", rid(i))
                assert obj.peek("N") == i
                del obj
        except BaseException as e:
            errors.append(e)

    def fetch_loop():
        try:
            while not stop.is_set():
                objs = ctx.query("items", policy="cache_only", sort="N", limit=8).all()
                assert [o.peek("N") for o in objs] == list(range(8))
        except BaseException as e:
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)   # interleave the threads as finely as possible
    try:
        fetcher = threading.Thread(target=fetch_loop)
        fetcher.start()
        churners = [threading.Thread(target=churn, args=(k,)) for k in range(4)]
        for t in churners:
            t.start()
        for t in churners:
            t.join(120)
        stop.set()
        fetcher.join(30)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert_back(base, "object_handles", "results", "tasks")


def test_dropping_objects_racing_close_is_quiet(kinto_url, items, tmp_path, open_ctx,
                                                monkeypatch):
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    ctx = open_ctx(kinto_url, items, tmp_path / "s.db")
    held = ctx.query("items").all()
    unexpected = []

    def churn(k):
        for j in range(100000):
            try:
                obj = ctx.object("items", rid((j + k) % N))
                obj.peek("N")
                del obj
            except tether.HandleError:
                return                       # the context closed: expected
            except BaseException as e:
                unexpected.append(e)
                return

    threads = [threading.Thread(target=churn, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    ctx.close()
    for t in threads:
        t.join(30)
    del held                                 # released after close: HandleError, ignored
    gc.collect()
    assert unexpected == [] and not any(t.is_alive() for t in threads)
    assert [u.exc_value for u in unraisable] == []


SHUTDOWN_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import tether
url, bucket, store, how = sys.argv[2:6]
ctx = tether.Context(url, bucket, store, username="test", password="test")
objs = ctx.query("items").all()
keep = ctx.object("items", "r01")

def told(obj, key, error):
    if isinstance(error, tether.TaskCancelledError):
        print("final", flush=True)

ob = keep.observe("N", told)
if how == "close":
    ctx.close()
print("ok", flush=True)
# Exits holding Objects; without close, with the context and its observer open.
"""


@pytest.mark.parametrize("how", ["close", "open"])
def test_interpreter_shutdown_with_live_objects(kinto_url, items, tmp_path, how):
    """Exiting with live Objects, and with a context left open, is quiet and
    ends: the open context is closed at exit, its observer told. Run many
    times at once, as an exit that hangs does not hang every time."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = [subprocess.Popen([sys.executable, "-c", SHUTDOWN_SCRIPT, pkg, kinto_url, items,
                               str(tmp_path / ("s%d.db" % i)), how],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(16)]
    expect = "final\nok" if how == "close" else "ok\nfinal"
    for p in procs:
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a process did not exit within 60 s (hung at exit)")
        assert (p.returncode, out.strip()) == (0, expect), err
        assert "Exception ignored" not in err and "Traceback" not in err, err
