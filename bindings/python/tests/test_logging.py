"""The library's log messages in Python's logging: the "tether" logger and
its children by category, the hook's level following the loggers', a
failing handler kept out of C, the hook removed on request and at exit, and
no password in any message."""

import logging
import os
import subprocess
import sys
import uuid

import pytest

import tether
from tether import _lib

SCHEMA = {"type": "object", "properties": {"Title": {"type": "string"}, "Rank": {"type": "integer"}}}


@pytest.fixture(autouse=True)
def restore_levels():
    """Each test leaves the loggers and the hook as it found them."""
    saved = {name: logging.getLogger(name).level
             for name in ["tether"] + ["tether." + c for c in tether.logs.CATEGORIES]}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)
    tether.log_to_python()


@pytest.fixture
def notes(kinto, bucket):
    # Open to any user: the tests sign in with a password of their own.
    kinto.request("PATCH", "/buckets/%s" % bucket,
                  {"permissions": {"read": ["system.Everyone"], "write": ["system.Everyone"]}})
    name = "notes" + uuid.uuid4().hex[:8]
    kinto.create_collection(bucket, name, SCHEMA)
    kinto.put_records(bucket, name, [("n%d" % i, {"Title": "note %d" % i, "Rank": i}) for i in range(60)])
    return name


def tether_records(caplog):
    return [r for r in caplog.records if r.name.startswith("tether")]


def test_installed_at_import_with_the_effective_level():
    # The test process's loggers are at their defaults: WARNING.
    assert tether.logs.installed_level() == tether.logs.wanted_level()
    assert logging.getLogger("tether").handlers, "a NullHandler, as libraries have"


def test_level_follows_the_loggers():
    assert tether.set_log_level(logging.DEBUG) == _lib.LOG_DEBUG
    assert tether.set_log_level("INFO") == _lib.LOG_INFO
    assert tether.set_log_level(logging.ERROR) == _lib.LOG_ERROR
    assert tether.set_log_level(logging.CRITICAL + 1) == _lib.LOG_OFF
    # A category's logger set lower asks the library for more.
    logging.getLogger("tether.http").setLevel(logging.DEBUG)
    assert tether.log_to_python() == _lib.LOG_DEBUG
    logging.getLogger("tether.http").setLevel(logging.NOTSET)
    assert tether.log_to_python() == _lib.LOG_OFF
    tether.stop_logging()
    assert tether.logs.installed_level() == _lib.LOG_OFF


def test_messages_by_category_and_no_password(caplog, kinto_url, bucket, notes, tmp_path):
    password = "pw-" + uuid.uuid4().hex
    caplog.set_level(logging.DEBUG, logger="tether")
    assert tether.log_to_python() == _lib.LOG_DEBUG
    with tether.Context(kinto_url, bucket, str(tmp_path / "a.db"), username="logpy", password=password) as ctx:
        final = ctx.query(notes, sort="Rank", policy="server_only").all()
        assert len(final) == 60
        ctx.query(notes, where="Rank < 5").all()
        note = ctx.object(notes, "n3")
        note.Title = "edited in a logged session"
        report = ctx.save()
        assert report.saved == 1
    # The password in the URL's user info this time.
    scheme, rest = kinto_url.split("://", 1)
    with tether.Context("%s://logpy:%s@%s" % (scheme, password, rest), bucket, str(tmp_path / "b.db")) as ctx:
        assert len(ctx.query(notes, policy="server_only").all()) == 60

    records = tether_records(caplog)
    assert records, "the library's messages reach logging"
    for r in records:
        text = r.getMessage()
        assert password not in text, text
        assert "logpy:" not in text and "authorization" not in text.lower(), text
    by = {}
    for r in records:
        by.setdefault(r.name, []).append(r)
    assert {"tether.http", "tether.store", "tether.context", "tether.save", "tether.sync",
            "tether.migration"} <= set(by), sorted(by)
    http = [r.getMessage() for r in by["tether.http"]]
    assert any(m.startswith("GET /v1/ -> 200") for m in http), http[:5]
    assert any(m.startswith("GET ") and "/collections/%s/records" % notes in m and "-> 200" in m for m in http)
    assert all(r.levelno == logging.DEBUG for r in by["tether.http"])
    saves = [r for r in by["tether.save"] if r.getMessage().startswith("save of 1 changes: 1 saved")]
    assert saves and saves[0].levelno == logging.INFO
    assert all(r.tether_category == r.name.split(".", 1)[1] for r in records)
    # Record values only at DEBUG.
    assert not [r for r in records if r.levelno > logging.DEBUG and "edited in a logged" in r.getMessage()]


def test_level_filters_in_the_library(caplog, kinto_url, bucket, notes, tmp_path):
    caplog.set_level(logging.INFO, logger="tether")
    assert tether.log_to_python() == _lib.LOG_INFO
    with tether.Context(kinto_url, bucket, str(tmp_path / "c.db"), username="test", password="test") as ctx:
        ctx.query(notes, policy="server_only").all()
    records = tether_records(caplog)
    assert any(r.name == "tether.context" and r.getMessage().startswith("context opened online") for r in records)
    assert all(r.levelno >= logging.INFO for r in records)


def test_unreachable_server_warns(caplog, tmp_path):
    caplog.set_level(logging.WARNING, logger="tether")
    tether.log_to_python()
    with socket_closed_port() as port:
        with pytest.raises(tether.NetworkError):
            tether.Context("http://127.0.0.1:%d/v1" % port, "nowhere", str(tmp_path / "d.db"), timeout_ms=3000)
    warnings = [r for r in tether_records(caplog) if r.levelno == logging.WARNING and r.name == "tether.http"]
    assert any("cannot reach the server" in r.getMessage() for r in warnings), tether_records(caplog)


def test_sql_style_like_warns_once_naming_the_wildcards(caplog, kinto_url, bucket, notes, tmp_path):
    """Issue 39: LIKE 'note%' matches nothing (the wildcards are * and ?),
    and says so at WARNING, once per predicate text, without the pattern."""
    caplog.set_level(logging.WARNING, logger="tether")
    tether.log_to_python()
    with tether.Context(kinto_url, bucket, str(tmp_path / "l.db"), username="test", password="test") as ctx:
        mark = uuid.uuid4().hex[:6]
        where = "Title LIKE 'n%s%%'" % mark   # a text of its own: each is warned of once a process
        assert ctx.query(notes, where=where, policy="cache_only").count() == 0
        assert ctx.query(notes, where=where, policy="cache_only").count() == 0
        assert ctx.query(notes, where="Title LIKE 'note 1*'", policy="server_only").count() == 11
    warnings = [r.getMessage() for r in tether_records(caplog) if r.levelno == logging.WARNING and "LIKE" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "* (any run) and ? (one character)" in warnings[0] and mark not in warnings[0], warnings


class socket_closed_port:
    """A port nothing listens on."""

    def __enter__(self):
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        return self.port

    def __exit__(self, *exc):
        return False


def test_a_failing_handler_stays_out_of_c(kinto_url, bucket, notes, tmp_path):
    class Exploding(logging.Handler):
        calls = 0

        def emit(self, record):
            Exploding.calls += 1
            raise RuntimeError("a handler that fails")  # out of logging, into the callback

    class Raising(logging.Filter):
        def filter(self, record):
            raise KeyError("a filter that fails")

    log = logging.getLogger("tether.sync")
    handler, flt = Exploding(), Raising()
    log.addHandler(handler)
    logging.getLogger("tether.http").addFilter(flt)
    try:
        tether.set_log_level(logging.DEBUG)
        with tether.Context(kinto_url, bucket, str(tmp_path / "e.db"), username="test", password="test") as ctx:
            assert len(ctx.query(notes, policy="server_only").all()) == 60
            assert len(ctx.query(notes, policy="cache_only").all()) == 60
    finally:
        log.removeHandler(handler)
        logging.getLogger("tether.http").removeFilter(flt)
    assert Exploding.calls >= 2


def test_changing_the_hook_from_a_handler_is_refused(kinto_url, bucket, notes, tmp_path):
    outcomes = []

    class Meddling(logging.Handler):
        def emit(self, record):
            if not outcomes:
                try:
                    tether.stop_logging()
                    outcomes.append("stopped")
                except tether.BusyError:
                    outcomes.append("busy")

    handler = Meddling()
    logging.getLogger("tether").addHandler(handler)
    try:
        tether.set_log_level(logging.INFO)
        with tether.Context(kinto_url, bucket, str(tmp_path / "f.db"), username="test", password="test"):
            pass
    finally:
        logging.getLogger("tether").removeHandler(handler)
    assert outcomes == ["busy"]
    assert tether.logs.installed_level() == _lib.LOG_INFO


def test_hook_removed_at_exit(kinto_url, bucket, notes, tmp_path):
    """A process that logs at DEBUG and exits with a context still open (its
    threads still running): it exits cleanly, without a message after the
    interpreter began to finalize."""
    code = r"""
import logging, sys, tether
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%%(name)s %%(message)s")
tether.log_to_python()
ctx = tether.Context(%r, %r, %r, username="test", password="test")
ctx.query(%r, policy="server_only").start()
print("exiting", flush=True)
""" % (kinto_url, bucket, str(tmp_path / "g.db"), notes)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(tether.__file__)))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "exiting" in done.stdout and "tether.context context opened online" in done.stdout
    assert "Fatal Python error" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
