"""Fixtures for the tether binding tests.

The tests run against a real Kinto started by the harness:

    scripts/with-kinto python3 -m pytest bindings/python/tests

which exports TETHER_TEST_URL (http://127.0.0.1:PORT/v1). Without it every
test fails with a message saying so (they are never skipped silently).

Fixtures:
  kinto        a small stdlib client for the server (basic auth test:test)
  bucket       a fresh bucket (uuid name) per test module
  faultproxy   a scripts/faultproxy.py in front of Kinto, per test
  wait_for     polls a condition until true or a timeout
  open_ctx     opens contexts, closed after the test
  recorder     the Recorder class (a callback that records its calls)
  ctx, warm    a context on the module's seeded "items" collection (the
               module defines `items` and `items_total`); warm's cache
               holds every record

Helpers to import: wait_until, ranks, finished.
"""

import base64
import gc
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)                       # bindings/python
REPO = os.path.dirname(os.path.dirname(PKG_ROOT))      # repository root
if PKG_ROOT not in sys.path:
    sys.path.insert(0, PKG_ROOT)

FAULTPROXY = os.path.join(REPO, "scripts", "faultproxy.py")
AUTH = ("test", "test")


def _need_url():
    url = os.environ.get("TETHER_TEST_URL")
    if not url:
        pytest.fail(
            "TETHER_TEST_URL is not set: these tests need a running Kinto. Run them with "
            "`scripts/with-kinto python3 -m pytest bindings/python/tests` (it starts Kinto "
            "and exports TETHER_TEST_URL=http://127.0.0.1:PORT/v1).", pytrace=False)
    return url.rstrip("/")


class Kinto:
    """Minimal Kinto client on urllib (basic auth test:test by default)."""

    def __init__(self, url, auth=AUTH):
        self.url = url.rstrip("/")
        self.auth = auth
        self.batch_max = None

    def _headers(self):
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.auth:
            tok = base64.b64encode(("%s:%s" % self.auth).encode()).decode("ascii")
            h["Authorization"] = "Basic " + tok
        return h

    def request(self, method, path, body=None, expect_error=False):
        data = json.dumps(body).encode("utf-8") if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=self._headers())
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                raw = r.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")
            if expect_error:
                return {"status": e.code, "body": detail}
            raise AssertionError("kinto: %s %s -> %d %s" % (method, path, e.code, detail))

    def list_all(self, path):
        """Every item of a plural endpoint, its pages followed (Next-Page)."""
        items, url = [], self.url + path
        while url:
            with urllib.request.urlopen(urllib.request.Request(url, headers=self._headers()), timeout=60) as r:
                items += json.loads(r.read())["data"]
                url = r.headers.get("Next-Page")
        return items

    def server_info(self):
        return self.request("GET", "/")

    def create_bucket(self, name=None):
        name = name or "b" + uuid.uuid4().hex[:20]
        self.request("PUT", "/buckets/%s" % name, {"data": {}})
        return name

    def delete_bucket(self, name):
        self.request("DELETE", "/buckets/%s" % name, expect_error=True)

    def create_collection(self, bucket, name, schema=None):
        data = {"schema": schema} if schema is not None else {}
        return self.request("PUT", "/buckets/%s/collections/%s" % (bucket, name),
                            {"data": data})["data"]

    def _rec(self, bucket, coll, rid):
        return "/buckets/%s/collections/%s/records/%s" % (bucket, coll, rid)

    def put_record(self, bucket, coll, rid, data):
        return self.request("PUT", self._rec(bucket, coll, rid), {"data": data})["data"]

    def patch_record(self, bucket, coll, rid, data):
        return self.request("PATCH", self._rec(bucket, coll, rid), {"data": data})["data"]

    def delete_record(self, bucket, coll, rid):
        return self.request("DELETE", self._rec(bucket, coll, rid))

    def get_record(self, bucket, coll, rid):
        return self.request("GET", self._rec(bucket, coll, rid))["data"]

    def _batch_size(self):
        if self.batch_max is None:
            settings = (self.server_info() or {}).get("settings") or {}
            self.batch_max = max(1, min(25, int(settings.get("batch_max_requests") or 25)))
        return self.batch_max

    def batch(self, method, bucket, coll, records):
        """records: list of (id, data). Sent through POST /batch in chunks."""
        reqs = [{"method": method, "path": self._rec(bucket, coll, rid), "body": {"data": d}}
                for rid, d in records]
        n = self._batch_size()
        for i in range(0, len(reqs), n):
            res = self.request("POST", "/batch", {"requests": reqs[i:i + n]})
            bad = [r for r in res["responses"] if r["status"] >= 400]
            assert not bad, "batch failed: %r" % bad[:3]

    def put_records(self, bucket, coll, records):
        self.batch("PUT", bucket, coll, records)

    def patch_records(self, bucket, coll, records):
        self.batch("PATCH", bucket, coll, records)


@pytest.fixture(scope="session")
def kinto_url():
    return _need_url()


@pytest.fixture(scope="session")
def kinto(kinto_url):
    k = Kinto(kinto_url)
    try:
        k.server_info()
    except (urllib.error.URLError, OSError) as e:
        pytest.fail("Kinto at TETHER_TEST_URL=%s does not answer: %s" % (kinto_url, e),
                    pytrace=False)
    return k


@pytest.fixture(scope="session")
def history_kinto():
    """A Kinto of its own with kinto.plugins.history (every write of a bucket
    listed, with its own timestamp): for live data's change feed, and to count
    the writes a test made."""
    import shutil
    import tempfile
    os.makedirs(os.path.join(REPO, ".run"), exist_ok=True)
    folder = tempfile.mkdtemp(prefix="kinto-history.", dir=os.path.join(REPO, ".run"))
    started = subprocess.run([os.path.join(REPO, "scripts", "kinto-start"), folder], capture_output=True, text=True,
                             env=dict(os.environ, KINTO_INCLUDES="kinto.plugins.history", KINTO_PORT=""), timeout=60)
    assert started.returncode == 0, started.stderr
    k = Kinto(started.stdout.strip())
    assert "history" in k.server_info()["capabilities"]
    yield k
    subprocess.run([os.path.join(REPO, "scripts", "kinto-stop"), folder], capture_output=True, timeout=60)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def bucket(kinto):
    name = kinto.create_bucket()
    yield name
    kinto.delete_bucket(name)


def wait_until(cond, timeout=10.0, interval=0.02, poll=None):
    """Calls cond() until it returns true; `poll` (a Context in poll mode) is
    polled meanwhile. Returns the last value of cond()."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= deadline:
            return v
        if poll is not None:
            poll.poll(int(interval * 1000))
        else:
            time.sleep(interval)


def quiet_counts(timeout=5.0):
    """tether.debug_counts() once they stop moving, for a baseline: an earlier
    test's task is freed just after its FINAL callback has returned."""
    import tether
    deadline, last = time.monotonic() + timeout, None
    while True:
        gc.collect()
        now = tether.debug_counts()
        if now == last or time.monotonic() >= deadline:
            return now
        last = now
        time.sleep(0.05)


@pytest.fixture
def wait_for():
    return wait_until


# ------------------------------------------------------------------ fault proxy

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FaultProxy:
    """scripts/faultproxy.py in front of Kinto. `url` is the proxied /v1 root;
    it stays the same across stop()/start()."""

    def __init__(self, kinto_url):
        u = urllib.parse.urlsplit(kinto_url)
        self.upstream = "%s://%s" % (u.scheme, u.netloc)
        self.prefix = u.path.rstrip("/")            # "/v1"
        self.port = 0
        self.proc = None

    @property
    def url(self):
        return "http://127.0.0.1:%d%s" % (self.port, self.prefix)

    @property
    def base(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        if not os.path.exists(FAULTPROXY):
            pytest.fail("scripts/faultproxy.py is missing", pytrace=False)
        self.proc = subprocess.Popen(
            [sys.executable, FAULTPROXY, "--upstream", self.upstream, "--port", str(self.port)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.proc.kill()
            pytest.fail("faultproxy did not print its port (got %r)" % line, pytrace=False)
        self.port = int(line)
        # Wait until it answers.
        wait_until(lambda: self._ping(), timeout=10)
        return self

    def _ping(self):
        try:
            self.state()
            return True
        except OSError:
            return False

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.proc.stdout.close()
            self.proc = None

    def _control(self, method, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + "/__fault__", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def set(self, mode="pass", **kw):
        kw["mode"] = mode
        return self._control("POST", kw)

    def state(self):
        return self._control("GET")

    def reset(self):
        return self._control("DELETE")

    def log(self):
        return self.state()["log"]


@pytest.fixture
def faultproxy(kinto_url):
    p = FaultProxy(kinto_url).start()
    yield p
    p.stop()


# ------------------------------------------------------------------ contexts

@pytest.fixture
def open_ctx(request):
    """open_ctx(url, bucket, store, **kw) -> Context, closed after the test."""
    import tether
    made = []

    def _open(url, bucket, store, **kw):
        kw.setdefault("username", AUTH[0])
        kw.setdefault("password", AUTH[1])
        kw.setdefault("timeout_ms", 10000)
        ctx = tether.Context(url, bucket, str(store), **kw)
        made.append(ctx)
        return ctx

    yield _open
    for c in made:
        try:
            c.close()
        except Exception:
            pass


def _as_status(error):
    """A callback's error (None or a TetherError, never an int) as the
    (status, message) the tests compare."""
    import tether
    if error is None:
        return 0, ""
    assert isinstance(error, tether.TetherError), "a callback got %r, not an exception or None" % (error,)
    return error.status, error.message


class Recorder:
    """A fetch/observer/save callback that records its calls, thread-safely.
    Each call's error (an exception or None) is recorded as its status and
    message, so the tests compare plain tuples: a fetch's
    (phase, status, message, answer[, changes]), an observer's
    (obj, key, status), a save's (status, message, report); an online
    observer's (online,) as it is."""

    def __init__(self):
        self.calls = []
        self.errors = []   # the exceptions themselves, in order (None for none)
        self.cond = threading.Condition()

    def __call__(self, *args):
        import tether
        if len(args) == 1:                             # online: (online,)
            error = None
        elif isinstance(args[0], str):                 # fetch: phase, error, answer[, changes]
            status, message = _as_status(args[1])
            error, args = args[1], (args[0], status, message) + args[2:]
        elif isinstance(args[0], tether.Object):       # observer: obj, key, error
            error, args = args[2], (args[0], args[1], _as_status(args[2])[0])
        else:                                          # save: error, report
            error, args = args[0], _as_status(args[0]) + args[1:]
        with self.cond:
            self.errors.append(error)
            self.calls.append(args)
            self.cond.notify_all()

    def wait(self, pred, timeout=10.0, ctx=None):
        return wait_until(lambda: pred(self.calls), timeout=timeout, poll=ctx)


@pytest.fixture
def recorder():
    return Recorder


# ------------------------------------------------------------------ seeded "items"
# For modules whose tests fetch a seeded collection "items": each defines a
# module-scoped `items` (seeds it, returns the bucket) and `items_total` (how
# many records that leaves on the server), since their records differ.

@pytest.fixture
def ctx(kinto_url, items, tmp_path, open_ctx):
    return open_ctx(kinto_url, items, tmp_path / "s.db")


@pytest.fixture
def warm(ctx, items_total):
    """A context whose cache holds every record."""
    cached = []
    final = ctx.query("items", on_cached=cached.append).all()
    assert cached == [[]] and len(final) == items_total
    return ctx


def finished(task, timeout=10.0):
    """Whether `task` (a tether Task or SaveTask: a Future) ends within
    `timeout` seconds (polling its context in poll mode)."""
    import concurrent.futures
    try:
        task.exception(timeout)
    except concurrent.futures.TimeoutError:
        return False
    return True


def ranks(objs):
    return None if objs is None else [o.peek("Rank") for o in objs]


def answers(query_result_of, *args, **options):
    """(cached, final) of one query: what its on_cached callback got (None
    when the policy gives no cached phase) and all()'s answer. `query_result_of`
    is ctx.query (or anything taking query's arguments)."""
    cached = []
    final = query_result_of(*args, on_cached=cached.append, **options).all()
    assert len(cached) <= 1, "on_cached ran %d times" % len(cached)
    return (cached[0] if cached else None), final


# The library's result types and batched answers, option by option, through
# the binding's one fetch primitive (Context._fetch, under every public query
# method): test_result_types tests what the C fetch answers for each
# tether_result_type and batch_size, which the query API exposes as methods
# (count(), ids(), values(), iteration) rather than as options.

def fetch_wait(ctx, entity, timeout=30, **options):
    """(cached, final) of one C fetch with `options` (Context._fetch's);
    raises the final error."""
    from tether.results import _marked   # the final answer as a query's: Count, Answer, offline
    task = ctx._fetch(entity, **options)
    task._wait_or_cancel(timeout, "fetch of %r" % (entity,))
    if task.error is not None:
        if (isinstance(task.error, tether_network_error()) and options.get("policy") != "server_only"
                and not ctx.online):
            return task.cached, _marked(task.objects, True)
        raise task.error
    return task.cached, _marked(task.objects, False)


def tether_network_error():
    import tether
    return tether.NetworkError


async def fetch_async(ctx, entity, **options):
    """The final answer of one C fetch, awaited (a poll-mode context is
    attached to the running loop, as AsyncContext does)."""
    import tether
    tether.AsyncContext(ctx)
    return await ctx._fetch(entity, **options)
