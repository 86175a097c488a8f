"""The public surface used as a program would, for `mypy --strict` (see
bindings/python/pyproject.toml, [tool.mypy]; `scripts/run-tests types`).

Nothing here runs in the tests: mypy reads it. Each assert_type says what a
call gives a type checker; mypy fails the suite where the hints say
otherwise. misuse.py beside it holds what the hints must refuse.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple, Union

import tether
from tether import perforce

if TYPE_CHECKING:
    # typing.assert_type is 3.11+; mypy knows typing_extensions' at any version.
    from typing_extensions import assert_type
else:
    def assert_type(value: object, typ: object) -> object:
        return value


def model_and_objects(ctx: tether.Context) -> None:
    assert_type(ctx.entities, List[tether.Entity])
    changes = ctx.entity("changes")
    attribute = changes.attribute("Change")
    assert_type(attribute.code, int)
    assert_type(changes.attribute(304), tether.Attribute)
    assert_type(changes.id_attribute, Optional[tether.Attribute])
    assert_type(ctx.diagnostics, List[tether.Diagnostic])
    assert_type(ctx.online, bool)

    c = ctx.object("clients", "alice-ws")
    assert_type(c, tether.Object)
    assert_type(c.id, str)
    assert_type(c.peek("Owner"), tether.Value)
    assert_type(c.peek(304), tether.Value)
    assert_type(c.get("Owner"), tether.Value)
    assert_type(c.peek("Root", default="?"), Union[tether.Value, str])
    assert_type(c.peek("Root", 0), Union[tether.Value, int])
    assert_type(c.Owner, tether.Value)          # a get
    assert_type(c.OwnerPeek, tether.Value)      # a peek
    assert_type(c.is_cached("Owner"), bool)
    assert_type(c.version, Optional[int])
    assert_type(c.to_dict(), Dict[str, tether.Value])
    view: tether.ContextView = ctx   # a Context is one: mypy checks the protocol against it
    assert_type(c.context, tether.ContextView)
    assert_type(c.context.query("changes", where="Change > $1", args=[1]).all(), Sequence[tether.Object])
    assert_type(c.context.query("changes").count(), int)
    assert_type(c.context.object("changes", "1"), tether.Object)
    assert view is not None
    owner = c.peek("Owner")
    if isinstance(owner, str):      # a Value is narrowed as any union
        print(owner.upper())

    def changed(obj: tether.Object, key: str, error: Optional[tether.TetherError]) -> None:
        print(obj.id, key, isinstance(error, tether.TaskCancelledError))

    with c.observe("Owner", changed) as ob:
        assert_type(ob, tether.Observer)
    assert_type(ob.remove(), bool)
    c.observe(304, lambda obj, key, error: None).remove()


class Job:
    """A shape for typed(): the keys a program uses, with their types."""
    Title: str
    Severity: float


def typed_objects(ctx: tether.Context) -> None:
    job = ctx.object("jobs", "j1").typed(Job)
    assert_type(job, Job)
    job.Severity = 4.0
    assert_type(job.Title, str)


def editing(ctx: tether.Context) -> None:
    note = ctx.insert("notes", {"Title": "x", "Tags": ["a", "b"], "Size": 3}, id="n1")
    note.Title = "y"
    note["Title"] = "z"
    assert_type(note["id"], tether.Value)
    note.set("Title", None)
    note.set(305, {"json": [1, 2.5, None]})
    assert_type(note.pending, Optional[tether.Pending])
    assert_type(note.changed_keys, List[str])
    assert_type(note.committed("Title"), tether.Value)
    assert_type(note.uri, str)
    target = note.related("Owner")
    assert_type(target, Optional[tether.Object])
    note.set_related("Owner", target)
    note.set_related("Owner", None)
    assert_type(ctx.object_for_uri(note.uri), tether.Object)
    note.delete()
    note.rollback()
    assert_type(ctx.change_count, int)
    assert_type(ctx.changed_objects, List[tether.Object])
    ctx.rollback()


def fetching(ctx: tether.Context) -> None:
    cached: List[Any] = []
    final = ctx.query("clients", sort="Client", limit=5, on_cached=cached.append).all()
    assert_type(final, tether.Answer[tether.Object])
    assert_type(final.offline, bool)
    ids = ctx.query("changes", sort=["-Change"], limit=100).ids()
    assert_type(ids, tether.Answer[str])
    n = ctx.query("changes", where="Description CONTAINS[c] $1", args=("fix",)).count()
    assert_type(n, tether.Count)
    assert_type(n.offline, bool)
    rows = ctx.query("changes", where="Status == $1 AND Change > $2", args=("pending", 10)).values("Change", "User")
    assert_type(rows, tether.Answer[Dict[str, tether.Value]])
    for change in ctx.query("changes", batch=500, policy="cache_only", timeout=None):
        assert_type(change, tether.Object)

    def on_phase(phase: str, error: Optional[BaseException], answer: Any) -> None:
        print(phase, error, answer)

    def on_progress(received: int, total: Optional[int]) -> None:
        print(received, total)

    task = ctx.query("changes", progress=on_progress, policy="server_only", offset=20,
                     server_query="_since=42").start(on_phase)
    assert_type(task, tether.Task)
    assert_type(task.cancel(), bool)
    assert_type(task.error, Optional[tether.TetherError])
    assert_type(task.done(), bool)
    assert_type(task.exception(5.0), Optional[BaseException])
    print(task.result(5.0))
    assert_type(concurrent.futures.wait([task], 5.0).done, Set[concurrent.futures.Future[Any]])
    for finished in concurrent.futures.as_completed([task], 5.0):
        print(finished.result())

    def on_live(answer: tether.LiveAnswer) -> None:
        if answer.changes:
            assert_type(answer.changes.moved, List[Tuple[int, int]])

    ctx.query("changes").live(on_live).cancel()
    pets = ctx.object("owners", "ann").related_query("pets", sort="Age")
    assert_type(pets.count(), int)
    assert_type(ctx.object("owners", "ann").related_many("pets"), Sequence[tether.Object])


async def asyncio_use(ctx: tether.Context) -> None:
    actx = tether.AsyncContext(ctx)
    objects = await actx.query("changes", where="Status == 'pending'").all()
    assert_type(objects, tether.Answer[tether.Object])
    assert_type(await actx.query("changes").count(), tether.Count)
    assert_type(await actx.query("changes").ids(), tether.Answer[str])
    async for a in actx.query("changes", sort="-Change").live():
        assert_type(a, tether.LiveAnswer)
        assert_type(a.changes, Optional[tether.Changes])
        assert_type(a.error, Optional[tether.TetherError])
        break
    async with actx.query("changes").live() as it:
        async for a in it:
            print(a.answer)
    task = ctx.query("changes").start()
    assert_type(task, tether.Task)
    print(await task)
    report = await ctx.save_async(merge="server_wins")
    assert_type(await ctx.start_save(), tether.SaveReport)
    assert_type(report, tether.SaveReport)
    ctx.attach(asyncio.get_running_loop())
    ctx.detach()


def saving(ctx: tether.Context) -> None:
    try:
        report = ctx.save(timeout=10.0)
        assert_type(report.saved, int)
    except tether.ConflictError as e:
        for conflict in e.conflicts:
            assert_type(conflict, tether.Conflict)
            assert_type(conflict.server, Optional[Dict[str, tether.Value]])
            assert_type(conflict.local_version, Optional[int])
        ctx.save(merge="merge_properties")

    def done(error: Optional[tether.TetherError], report: tether.SaveReport) -> None:
        print(error, report.discarded)

    task = ctx.start_save(merge="report", callback=done, progress=lambda got, total: None)
    assert_type(task, tether.SaveTask)
    assert_type(task.result(), tether.SaveReport)
    assert_type(task.report, Optional[tether.SaveReport])

    background = ctx.open_sibling("import", delivery="poll")
    assert_type(background, tether.Context)
    assert_type(background.poll(100), int)
    assert_type(background.fileno(), int)
    mine = background.local(ctx.object("changes", "c1"))
    assert_type(mine, tether.Object)
    background.close()


class Files(tether.Connection):
    identity = "files in /srv/data"

    def server_info(self) -> Tuple[str, str]:
        return ("files", "1")

    def specs(self) -> List[tether.Spec]:
        return [tether.Spec("notes", "id", "rev", {"properties": {"Title": {"type": "string"}}}),
                tether.Spec.from_specdef("client", "Client;code:301;type:word;opt:key;;")]

    def page(self, request: tether.PageRequest) -> tether.Page:
        assert_type(request.sort, Tuple[Tuple[str, bool], ...])
        return tether.Page(records=[{"id": "a", "rev": 1}], next=None, version=1, total=1)

    def count(self, request: tether.PageRequest) -> int:
        return 1

    def records(self, entity: str, ids: List[str], cursor: Optional[str]) -> List[Dict[str, Any]]:
        return [{"id": i, "rev": 1} for i in ids]

    def write(self, writes: List[tether.Write]) -> Sequence[tether.host.Outcome]:
        outcomes: List[tether.host.Outcome] = []
        for w in writes:
            if w.kind == "delete":
                outcomes.append(tether.Deleted())
            elif w.if_version is not None and w.if_version < 0:
                outcomes.append(tether.host.Conflict(None))
            elif w.entity == "readonly":
                outcomes.append(tether.Failed(tether.NotAllowedError("read only")))
            else:
                outcomes.append(tether.Written(dict(w.fields, id=w.id, rev=1)))
        return outcomes


class Remote(tether.Connection):
    """async def methods, run on the connection's own event loop thread."""
    identity = "an async server"

    async def specs(self) -> List[tether.Spec]:
        await asyncio.sleep(0)
        return [tether.Spec("notes", "id", "rev")]

    async def page(self, request: tether.PageRequest) -> List[Dict[str, Any]]:
        return [{"id": "a", "rev": 1}]


def opening() -> None:
    with tether.Context("http://127.0.0.1:8888/v1", "demo", "demo.db", username="demo",
                        password="demo", delivery="thread", object_cache_size=None,
                        merge="client_wins",
                        local_stores=[tether.LocalStore("private", "private.db", {"notes": {}})]) as ctx:
        assert_type(ctx, tether.Context)
        assert_type(ctx.closed, bool)
    hosted = tether.Context.with_connection(Files(), "cache.sqlite", staleness_ms=1000)
    hosted.close()
    tether.Context.with_connection(Remote(), "remote.sqlite", delivery="poll").close()
    port = perforce.Port(perforce.FileSource("p4data"), operations=("fetch", "update"))
    assert_type(port.specs(), List[tether.Spec])
    fields = perforce.parse_specdef("Client;code:301;type:word;len:32;opt:key;;")
    assert_type(fields[0], perforce.SpecDefField)
    assert_type(fields[0].len, int)
    assert_type(fields[0].fmt, Optional[str])
    assert_type(perforce.specdef_from_form({"Fields": ["101 Job word 32 required"]}), str)
    assert_type(tether.debug_counts(), Dict[str, int])
    assert_type(tether.library_version(), str)
    assert_type(tether.error_class(tether.E_CONFLICT), type[tether.TetherError])
    error = tether.error_class(-7)("down")
    assert_type(error.status, int)
    value: tether.Value = {"nested": [1, "two", None]}
    print(value)
    assert_type(tether.set_log_level(logging.DEBUG), int)
    assert_type(tether.log_to_python(), int)
    tether.stop_logging()


def query_use(ctx: tether.Context) -> None:
    q = tether.Query("changes").where("Status == $1", "pending").sort("-Change").limit(10)
    assert_type(q, tether.Query)
    assert_type(tether.Query("changes", where="User == $1", args=["alice"], policy="cache_only"), tether.Query)
    r = ctx.query(q, offset=10)
    assert_type(r, tether.QueryResult)
    assert_type(r.all(), tether.Answer[tether.Object])
    assert_type(r.first(), Optional[tether.Object])
    assert_type(r.count(), tether.Count)
    assert_type(r.ids(), tether.Answer[str])
    assert_type(r.values("Change", "User"), tether.Answer[Dict[str, tether.Value]])
    for obj in ctx.query("changes", on_cached=print):
        assert_type(obj, tether.Object)
    task = r.live(lambda answer: print(answer.phase, answer.changes))
    assert_type(task, tether.Task)


async def async_context_use() -> None:
    async with tether.AsyncContext.open("http://127.0.0.1:8888/v1", "demo", "demo.db") as actx:
        assert_type(actx, tether.AsyncContext)
        r = actx.query("changes", where="Status == $1", args=["pending"])
        assert_type(r, tether.AsyncQueryResult)
        assert_type(await r.all(), tether.Answer[tether.Object])
        assert_type(await r.first(), Optional[tether.Object])
        assert_type(await r.count(), tether.Count)
        assert_type(await r.ids(), tether.Answer[str])
        assert_type(await r.values(), tether.Answer[Dict[str, tether.Value]])
        async for obj in r:
            assert_type(obj, tether.Object)
        async for answer in r.live():
            assert_type(answer, tether.LiveAnswer)
        assert_type(await actx.save(), tether.SaveReport)
    actx2 = await tether.AsyncContext.open("http://127.0.0.1:8888/v1", "demo", "demo.db")
    assert_type(actx2, tether.AsyncContext)
    await actx2.aclose()
