"""Connections written in Python (tether.Connection): a server kept in a
dict, answered by plain methods (on the binding's pool) or async ones (on
its event loop); a method that raises, hangs, or answers nonsense. The
library's side (cache, objects, peek and get, saving, conflicts) is the same
as with Kinto."""

import asyncio
import threading
import time

import pytest

import tether
from tether import host

SCHEMA = {"properties": {"Title": {"type": "string", "x-tether-code": 501}, "Rank": {"type": "integer"}}}


class DictServer(tether.Connection):
    """Records in a dict; each write checked against the record's version."""

    def __init__(self, n=5, identity="dict server"):
        self.identity = identity
        self.version = 100
        self.rows = {"r%d" % i: {"id": "r%d" % i, "rev": i + 1, "Title": "row %d" % i, "Rank": i} for i in range(n)}
        self.asked = []
        self.cancels = []
        self.closes = 0
        self.lock = threading.Lock()

    def specs(self):
        return [tether.Spec("rows", "id", "rev", SCHEMA)]

    def page(self, request):
        self.asked.append(request)
        rows = sorted(self.rows.values(), key=lambda r: tuple(
            (-r[f] if d else r[f]) if isinstance(r.get(f), int) else r.get(f, "") for f, d in request.sort) or r["id"])
        return tether.Page(records=rows[:request.limit or None], total=len(self.rows))

    def count(self, request):
        return len(self.rows)

    def records(self, entity, ids, cursor):
        return [self.rows[i] for i in ids if i in self.rows]

    def write(self, writes):
        outcomes = []
        with self.lock:
            for w in writes:
                current = self.rows.get(w.id)
                if w.kind == "create" and current is not None:
                    outcomes.append(host.Conflict(current))
                elif w.kind != "create" and current is None:
                    outcomes.append(tether.Deleted() if w.kind == "delete" else host.Conflict(None))
                elif w.if_version is not None and current["rev"] != w.if_version:
                    outcomes.append(host.Conflict(current))
                elif w.kind == "delete":
                    del self.rows[w.id]
                    outcomes.append(tether.Deleted())
                else:
                    self.version += 1
                    record = dict(current if w.kind == "patch" else {}, **w.fields, id=w.id, rev=self.version)
                    self.rows[w.id] = {k: v for k, v in record.items() if v is not None}
                    outcomes.append(tether.Written(self.rows[w.id]))
        return outcomes

    def cancelled(self, kind):
        self.cancels.append(kind)

    def closed(self):
        self.closes += 1


def test_a_dict_server_end_to_end(tmp_path):
    server = DictServer()
    with tether.Context.with_connection(server, tmp_path / "dict.db") as ctx:
        assert [e.name for e in ctx.entities] == ["rows"]
        final = ctx.query("rows", sort="-Rank", limit=3).all()
        assert [r.id for r in final] == ["r4", "r3", "r2"]
        # With sort keys the library reads every record, in id order, and
        # makes the cut itself (a server orders nulls and other types its own way).
        assert server.asked[0].sort == (("id", False),) and server.asked[0].limit == 0
        final = ctx.query("rows", limit=2, policy="server_only").all()
        assert [r.id for r in final] == ["r0", "r1"]
        assert server.asked[-1].sort == (("id", False),) and server.asked[-1].limit == 2
        row = ctx.object("rows", "r3")
        assert row.peek(501) == "row 3"                    # by Tether's code
        server.rows["r3"]["Title"] = "changed there"
        server.rows["r3"]["rev"] = 50
        assert row.Title == "row 3"                        # get: cached now...
        deadline = time.time() + 10
        while row.peek("Title") != "changed there" and time.time() < deadline:
            time.sleep(0.01)
        assert row.peek("Title") == "changed there"        # ...refreshed in the background

        row.Title = "mine"
        made = ctx.insert("rows", {"Title": "new", "Rank": 9})
        report = ctx.save()
        assert report.saved == 2
        assert server.rows["r3"]["Title"] == "mine" and server.rows[made.id]["Rank"] == 9

        row.Title = "again"
        server.rows["r3"]["rev"] += 1                      # another writer
        with pytest.raises(tether.ConflictError):
            ctx.save()
        ctx.save(merge="client_wins")
        assert server.rows["r3"]["Title"] == "again"
    assert server.closes == 1


class AsyncServer(DictServer):
    """The same, answered by coroutines; `hold` makes pages wait until set."""

    def __init__(self):
        super().__init__()
        self.hold = None

    async def page(self, request):
        if self.hold is not None:
            await asyncio.sleep(3600)
        return DictServer.page(self, request)

    async def records(self, entity, ids, cursor):
        await asyncio.sleep(0)
        return DictServer.records(self, entity, ids, cursor)


def test_async_methods_and_cancel(tmp_path):
    server = AsyncServer()
    with tether.Context.with_connection(server, tmp_path / "async.db") as ctx:
        final = ctx.query("rows").all()
        assert len(final) == 5
        server.hold = True
        done = threading.Event()
        seen = []
        task = ctx.query("rows", policy="server_only").start(
            lambda phase, error, answer: (seen.append(error.status), done.set()) if phase == "final" else None)
        time.sleep(0.2)
        task.cancel()
        assert done.wait(10)
        assert seen == [tether.E_CANCELLED]
        deadline = time.time() + 5
        while not server.cancels and time.time() < deadline:
            time.sleep(0.01)
        assert server.cancels == [tether._lib.REQUEST_PAGE], "the connection hears of the cancel"
        # One more that never ends: close ends it.
        ctx.query("rows", policy="server_only").start()
        time.sleep(0.1)
    assert tether.debug_counts()["requests"] == 0
    assert server.closes == 1


class Broken(DictServer):
    def page(self, request):
        raise ValueError("disk on fire")

    def records(self, entity, ids, cursor):
        raise tether.AuthError("no entry")


def test_what_a_method_raises_fails_its_request(tmp_path):
    server = Broken()
    with tether.Context.with_connection(server, tmp_path / "broken.db") as ctx:
        with pytest.raises(tether.TetherError, match="ValueError: disk on fire"):
            ctx.query("rows", policy="server_only").all()
        row = ctx.object("rows", "r1")
        errors = []
        row.observe("Title", lambda obj, key, error: errors.append(error and error.status))
        assert row.Title is None        # not cached: the get starts a refresh
        deadline = time.time() + 5
        while tether.E_AUTH not in errors and time.time() < deadline:
            time.sleep(0.01)
        assert tether.E_AUTH in errors, "a failed refresh reaches the observer with its status"


class Nonsense(DictServer):
    def specs(self):
        return [tether.Spec("rows", "id", "rev", SCHEMA), tether.Spec("bad", "id", "rev", "not a schema")]


def test_bad_answers_are_errors(tmp_path):
    with pytest.raises(tether.InvalidError):
        tether.Context.with_connection(Nonsense(), tmp_path / "nonsense.db")
    with pytest.raises(ValueError):
        tether.Context.with_connection(DictServer(identity=""), tmp_path / "noid.db")
    with pytest.raises(TypeError):
        tether.Context.with_connection(object(), tmp_path / "x.db")
    assert not (tmp_path / "nonsense.db").exists()
