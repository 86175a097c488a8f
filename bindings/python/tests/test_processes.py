"""Several processes on one store (issue 41): each process's unsaved changes
are its own while it lives; a process's changes left behind (killed, or
closed) are taken over by the next context of their name, once; `exclusive`
refuses other processes, naming one.

The other processes are real: store_process.py run with this interpreter,
driven a JSON line at a time. Writes and checks go to the real Kinto; the fault
proxy in front of it counts what each context sends.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import tether
from conftest import wait_until
from test_live import ids_of, live_calls

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = {"type": "object", "properties": {"Title": {"type": "string"}, "N": {"type": "integer"}}}


class StoreProcess:
    """A store_process.py child."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "store_process.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=dict(os.environ))
        self.pid = self.proc.pid

    def ask(self, op, **fields):
        self.proc.stdin.write(json.dumps(dict(fields, op=op)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the child process ended (%s)" % self.proc.poll()
        return json.loads(line)

    def ok(self, op, **fields):
        answer = self.ask(op, **fields)
        assert answer.get("ok"), answer
        return answer

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stdin.close()
        self.proc.stdout.close()

    def end(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(30)
            self.proc.stdout.close()


@pytest.fixture
def processes():
    made = []

    def start():
        made.append(StoreProcess())
        return made[-1]
    yield start
    for p in made:
        if p.proc.poll() is None:
            p.kill()


@pytest.fixture
def notes(kinto):
    bucket = make_notes(kinto)
    yield bucket
    kinto.delete_bucket(bucket)


def titles(kinto, bucket):
    rows = kinto.list_all("/buckets/%s/collections/notes/records" % bucket)
    return {row["id"]: row.get("Title") for row in rows}


def writes_by_id(kinto, bucket, since):
    """How many writes each record of "notes" got after history timestamp `since`
    (the history plugin lists every write, a batch's one by one)."""
    entries = kinto.list_all("/buckets/%s/history?resource_name=record&collection_id=notes&_since=%d" % (bucket, since))
    counts = {}
    for entry in entries:
        counts[entry["record_id"]] = counts.get(entry["record_id"], 0) + 1
    return counts


def history_now(kinto, bucket):
    entries = kinto.request("GET", "/buckets/%s/history?_limit=1" % bucket)["data"]
    return entries[0]["last_modified"] if entries else 0


def make_notes(kinto):
    bucket = kinto.create_bucket()
    kinto.create_collection(bucket, "notes", SCHEMA)
    kinto.put_records(bucket, "notes", [("r%02d" % i, {"Title": "t%d" % i, "N": i}) for i in range(80)])
    return bucket


def open_shared(open_ctx, url, bucket, store, **kw):
    ctx = open_ctx(url, bucket, store, sync_interval=0, **kw)
    ctx.query("notes").all()
    return ctx


def test_a_second_process_never_sends_the_firsts_changes(kinto, notes, kinto_url, tmp_path, open_ctx, processes):
    """The issue's case: A edits r01 and keeps it unsaved; B opens the same store
    and saves its own edit, not A's; A edits r01 again and saves its latest
    value, with no conflict."""
    store = str(tmp_path / "shared.db")
    a = processes()
    a.ok("open", url=kinto_url, bucket=notes, store=store)
    a.ok("set", entity="notes", id="r01", values={"Title": "A1"})
    b = open_shared(open_ctx, kinto_url, notes, store)
    assert b.change_count == 0, "A's change is A's"
    b.object("notes", "r02")["Title"] = "B1"
    assert b.save().saved == 1
    assert titles(kinto, notes)["r01"] == "t1", "B sent A's unsaved change"
    a.ok("set", entity="notes", id="r01", values={"Title": "A2"})
    assert a.ok("save") == {"ok": True, "saved": 1, "conflicts": 0}
    server = titles(kinto, notes)
    assert (server["r01"], server["r02"]) == ("A2", "B1")
    assert a.ok("changes")["count"] == 0 and b.change_count == 0


@pytest.mark.parametrize("first", ["killed", "survivor"])
def test_a_killed_processs_changes_are_sent_once_after_its_death(first, history_kinto, tmp_path, open_ctx, processes):
    """A holds 70 unsaved changes while B is open: B's saves leave them alone
    while A lives; A killed, B's next save sends each exactly once (counted in
    the server's history). `first`: which opened the store first (A's changes
    are then the name's own, or a guest's)."""
    kinto = history_kinto
    notes = make_notes(kinto)
    store = str(tmp_path / "shared.db")
    a = processes()
    b = None
    if first == "survivor":
        b = open_shared(open_ctx, kinto.url, notes, store)
    a.ok("open", url=kinto.url, bucket=notes, store=store)
    if b is None:
        b = open_shared(open_ctx, kinto.url, notes, store)
    for i in range(70):
        a.ok("set", entity="notes", id="r%02d" % i, values={"Title": "from A %d" % i})
    assert a.ok("changes")["count"] == 70
    b.object("notes", "r75")["Title"] = "from B"
    before = history_now(kinto, notes)
    assert b.save().saved == 1
    assert b.save().saved == 0
    assert writes_by_id(kinto, notes, before) == {"r75": 1}, "B sent A's changes while A lives"
    a.kill()
    before = history_now(kinto, notes)
    assert b.save().saved == 70
    assert b.change_count == 0
    assert b.save().saved == 0
    assert writes_by_id(kinto, notes, before) == {"r%02d" % i: 1 for i in range(70)}
    server = titles(kinto, notes)
    assert all(server["r%02d" % i] == "from A %d" % i for i in range(70))
    # A third process finds nothing left to send.
    b.close()
    c = processes()
    c.ok("open", url=kinto.url, bucket=notes, store=store)
    assert c.ok("changes")["count"] == 0
    kinto.delete_bucket(notes)


def test_a_closed_processs_changes_go_with_the_next_save_of_its_name(kinto, notes, kinto_url, tmp_path, open_ctx,
                                                                     processes):
    store = str(tmp_path / "shared.db")
    b = open_shared(open_ctx, kinto_url, notes, store)
    a = processes()
    a.ok("open", url=kinto_url, bucket=notes, store=store)
    a.ok("set", entity="notes", id="r03", values={"Title": "left by A"})
    b.object("notes", "r03")["Title"] = "B's own"      # B's own change of the object comes first
    a.ok("close")
    a.end()
    # B saves its own change of r03; A's waits for it, and follows in the next save.
    assert b.save().saved == 1
    assert titles(kinto, notes)["r03"] == "B's own"
    with pytest.raises(tether.ConflictError):       # A's edit was made against the version before B's
        b.save()
    assert b.object("notes", "r03").pending == "update"


def test_exclusive_refuses_other_processes_naming_one(kinto, notes, kinto_url, tmp_path, open_ctx, processes):
    store = str(tmp_path / "shared.db")
    a = processes()
    pid = a.ok("open", url=kinto_url, bucket=notes, store=store, exclusive=True)["pid"]
    with pytest.raises(tether.BusyError, match="open exclusively in process %d" % pid):
        open_ctx(kinto_url, notes, store)
    with pytest.raises(tether.BusyError, match="process %d" % pid):
        open_ctx(kinto_url, notes, store, exclusive=True)
    a.ok("close")
    mine = open_shared(open_ctx, kinto_url, notes, store)   # shared by default
    other = a.ask("open", url=kinto_url, bucket=notes, store=store, exclusive=True)
    assert other["error"] == "BusyError" and "process %d" % os.getpid() in other["message"], other
    a.ok("open", url=kinto_url, bucket=notes, store=store)
    mine.close()
    with pytest.raises(TypeError):
        open_ctx(kinto_url, notes, str(tmp_path / "other.db"), exclusive="yes")


def test_four_processes_edit_insert_and_save_in_rounds(kinto, notes, kinto_url, tmp_path, processes):
    """Each process edits its own records and inserts new ones, saving in rounds,
    all at once: every value on the server is its process's last, nothing is
    duplicated, no conflict is met, every outbox ends empty and every process's
    objects equal the server."""
    store = str(tmp_path / "shared.db")
    workers = [processes() for _ in range(4)]
    for w in workers:
        w.ok("open", url=kinto_url, bucket=notes, store=store)
    expected = titles(kinto, notes)
    failures = []

    def work(index, w):
        try:
            for round in range(5):
                for k in range(4):
                    rid = "r%02d" % (index * 20 + k)
                    title = "p%d round %d" % (index, round)
                    w.ok("set", entity="notes", id=rid, values={"Title": title})
                    expected[rid] = title
                new = "n%d-%d" % (index, round)
                w.ok("insert", entity="notes", id=new, values={"Title": "new " + new, "N": round})
                expected[new] = "new " + new
                answer = w.ok("save")
                if answer != {"ok": True, "saved": 5, "conflicts": 0}:
                    failures.append((index, round, answer))
        except AssertionError as error:
            failures.append((index, str(error)))

    threads = [threading.Thread(target=work, args=(i, w)) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures
    server = titles(kinto, notes)
    assert server == expected
    time.sleep(0.5)                                  # each hears the others' last saves (200 ms)
    for w in workers:
        assert w.ok("changes")["count"] == 0
        cached = w.ok("cached", entity="notes", key="Title")["values"]
        assert {rid: cached.get(rid) for rid in server} == server


def test_a_live_query_hears_another_processs_fetch_and_save_without_asking(kinto, notes, kinto_url, tmp_path, open_ctx,
                                                                           processes, recorder, caplog):
    """P's live query and observer hear what A stores, its save and its fetch,
    within half a second (the watch looks every 200 ms), and P asks the server
    nothing for it (P's requests counted in its log: each is a DEBUG line)."""
    store = str(tmp_path / "shared.db")
    p = open_shared(open_ctx, kinto_url, notes, store)
    rec, told = recorder(), recorder()
    p.query("notes", where="N < 10", sort="N").live(rec)
    assert rec.wait(lambda c: live_calls(rec))
    r05 = p.object("notes", "r05")
    r05.observe("Title", told)
    a = processes()
    a.ok("open", url=kinto_url, bucket=notes, store=store)
    caplog.set_level(logging.DEBUG, logger="tether.http")
    tether.log_to_python()
    a.ok("set", entity="notes", id="r05", values={"Title": "saved by A"})
    assert a.ok("save")["saved"] == 1
    assert wait_until(lambda: r05.peek("Title") == "saved by A", timeout=1.0), "P did not hear A's save"
    assert wait_until(lambda: (r05, "Title", 0) in told.calls, timeout=1.0)
    kinto.patch_record(notes, "notes", "r06", {"N": 100})    # out of the live query's answer...
    time.sleep(0.5)
    assert "r06" in ids_of(live_calls(rec)[-1].answer), "nothing told P yet"
    assert a.ok("fetch", entity="notes")["count"] == 80       # ...once A's fetch stores it
    assert wait_until(lambda: "r06" not in ids_of(live_calls(rec)[-1].answer), timeout=1.0)
    assert ids_of(live_calls(rec)[-1].answer) == ["r%02d" % i for i in range(10) if i != 6]
    asked = [r.getMessage() for r in caplog.records if r.name == "tether.http"]
    p.query("notes", policy="server_only").all()              # (a request of P's is seen)
    seen = [r.getMessage() for r in caplog.records if r.name == "tether.http"]
    caplog.set_level(logging.WARNING, logger="tether.http")
    tether.log_to_python()
    assert asked == [], "P asked the server"
    assert len(seen) > len(asked)


def test_a_store_another_process_holds_gives_busy_not_a_broken_store(kinto, notes, kinto_url, tmp_path, open_ctx):
    """Another process holds the store's write lock (migrating it, say) past
    the 5 s SQLite waits: the open fails with BusyError, and works once it is let go."""
    import sqlite3
    store = str(tmp_path / "shared.db")
    open_shared(open_ctx, kinto_url, notes, store).close()
    holder = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys\n"
                               "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                               "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); sys.stdin.read()", store],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(tether.BusyError, match="write lock"):
            open_ctx(kinto_url, notes, store)
    finally:
        holder.stdin.close()
        holder.wait(10)
        holder.stdout.close()
    assert sqlite3.connect(store).execute("SELECT count(*) FROM tether_claims WHERE open = 1").fetchone() == (0,)
    open_shared(open_ctx, kinto_url, notes, store)


def test_a_model_another_process_migrated_to_refuses_writes_here(kinto, notes, kinto_url, tmp_path, open_ctx, processes):
    """A opened the store for the model of its day; the server's collection then
    gained a field and B opened the store, migrating it. A writes no row for the
    model it has (the new field would read as null in B): its fetch fails
    with StoreError saying why, and its reopen works."""
    store = str(tmp_path / "shared.db")
    a = processes()
    a.ok("open", url=kinto_url, bucket=notes, store=store)
    schema = dict(SCHEMA, properties=dict(SCHEMA["properties"], Extra={"type": "string"}))
    kinto.create_collection(notes, "notes", schema)
    kinto.patch_record(notes, "notes", "r01", {"Extra": "new field"})
    b = open_shared(open_ctx, kinto_url, notes, store)
    assert b.object("notes", "r01").peek("Extra") == "new field"
    kinto.patch_record(notes, "notes", "r02", {"Title": "for A to write"})
    refused = a.ask("fetch", entity="notes")
    assert refused.get("error") == "StoreError" and "another process migrated the store" in refused["message"], refused
    a.ok("close")
    a.ok("open", url=kinto_url, bucket=notes, store=store)
    assert a.ok("fetch", entity="notes")["count"] == 80
    assert b.object("notes", "r01").peek("Extra") == "new field"


def test_a_live_process_that_cannot_be_read_keeps_its_changes(kinto, notes, kinto_url, tmp_path, open_ctx, processes):
    """B has no file descriptor left when its save looks whether A still runs:
    /proc cannot be read, which is no proof A ended. A's unsaved edit stays A's."""
    import resource
    store = str(tmp_path / "shared.db")
    a = processes()
    a.ok("open", url=kinto_url, bucket=notes, store=store)
    a.ok("set", entity="notes", id="r01", values={"Title": "A's, unsaved"})
    b = open_shared(open_ctx, kinto_url, notes, store)
    b.object("notes", "r02")["Title"] = "B's"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    try:
        while True:
            held.append(open(os.devnull))
    except OSError:
        pass
    try:
        try:
            b.save()
        except tether.TetherError:
            pass                                        # (its requests may need descriptors too)
    finally:
        for f in held:
            f.close()
    b.save()
    assert titles(kinto, notes)["r01"] == "t1", "B took over the change of a live process"
    assert a.ok("save") == {"ok": True, "saved": 1, "conflicts": 0}
    assert titles(kinto, notes)["r01"] == "A's, unsaved"
    assert (soft, hard) == resource.getrlimit(resource.RLIMIT_NOFILE)


def test_a_child_of_fork_is_another_process(kinto, notes, kinto_url, tmp_path, open_ctx):
    """A child forked while the parent has the store open opens it too (as
    another process, its changes its own), where it was refused as a second
    open in the same process."""
    store = str(tmp_path / "shared.db")
    parent = open_shared(open_ctx, kinto_url, notes, store)
    parent.object("notes", "r01")["Title"] = "the parent's, unsaved"
    pid = os.fork()
    if pid == 0:                                          # the child: exits with what it found
        code = 1
        try:
            signal.alarm(30)
            with tether.Context(kinto_url, notes, store, username="test", password="test", sync_interval=0) as child:
                code = 0 if child.change_count == 0 else 2
                child.object("notes", "r02")["Title"] = "the child's"
                code = code or (0 if child.save().saved == 1 else 3)
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    server = titles(kinto, notes)
    assert (server["r01"], server["r02"]) == ("t1", "the child's")
    assert parent.save().saved == 1
