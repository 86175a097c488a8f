"""AsyncContext: the asyncio twin of Context, as httpx pairs AsyncClient
with Client. The same names, awaited:

    async with tether.AsyncContext.open(url, bucket, "my.db") as actx:
        changes = await actx.query("changes", where="Status == $1", args=["open"]).all()
        n = await actx.query(q).count()
        async for obj in actx.query(q):
            ...
        await actx.save()

It wraps a Context opened with delivery="poll" (by default) and attached to
the running loop, so every callback (fetches, observers, saves) runs on the
loop's thread. It is built on the context's asyncio integration
(Context.attach, the fetch primitive with a done hook, LiveFetch,
save_async), and answers as Context.query does: the final answer, the cache's marked
``offline`` when the server cannot be reached (unless "server_only").
"""

from __future__ import annotations

import asyncio
import os
from typing import (TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, Generator, Iterable, List, NoReturn, Optional,
                    Sequence, Union)

from . import _lib
from ._types import Delivery, MergePolicy, Policy
from .callbacks import _call_in_loop
from .context import Context
from .model import Diagnostic, Entity, LocalStore
from .objects import Object
from .answers import Answer
from .results import Count, Row
from .tasks import LiveFetch, Task
from .values import Argument, Progress
from .host import Connection
from .query import KEEP, OnCached, Query, _close, _final, _names, _no_method, make_query, says_unknown_keywords
from .saving import SaveProgress, SaveReport


def _settle(fut: asyncio.Future[Any], ctx: Context, task: Task, policy: str) -> None:
    """On the loop: the final answer as Context.query gives it."""
    if fut.done():   # the awaiting task was cancelled
        _close(task.cached)
        _close(task.objects)
        return
    try:
        fut.set_result(_final(ctx, task, policy))
    except BaseException as error:
        fut.set_exception(error)


class AsyncQueryResult:
    """What AsyncContext.query gives: QueryResult's methods, awaited
    (``await r.all()``, ``first()``, ``count()``, ``ids()``,
    ``values(...)``), ``async for obj in r``, and ``r.live()``, a live fetch
    as an async iterator of tether.LiveAnswer (a tether.LiveFetch).
    Nothing runs until asked; each call asks again. Cancelling the awaiting
    task cancels the fetch."""

    __slots__ = ("context", "query", "_on_cached", "_progress")

    def __init__(self, context: AsyncContext, query: Query, on_cached: Optional[OnCached] = None,
                 progress: Optional[Progress] = None) -> None:
        if on_cached is not None and not callable(on_cached):
            raise TypeError("on_cached must be callable or None, not %s" % type(on_cached).__name__)
        self.context = context
        self.query = query
        self._on_cached = on_cached
        self._progress = progress

    def __repr__(self) -> str:
        return "<tether.AsyncQueryResult %r>" % (self.query,)

    if not TYPE_CHECKING:   # a type checker refuses a misspelled method itself
        def __getattr__(self, name: str) -> NoReturn:
            # Only for names it lacks: a misspelled method says the nearest one.
            raise _no_method(self, name, ("all", "first", "count", "ids", "values", "live", "query"))

    async def _run(self, query: Query, **options: Any) -> Any:
        ctx = self.context.sync
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        poll_mode = ctx._delivery == _lib.DELIVER_POLL
        policy = query._policy
        on_cached = self._on_cached
        callback = None
        if on_cached is not None:
            def callback(phase: str, error: Optional[BaseException], answer: Any) -> None:
                if phase == "cached":
                    on_cached(answer)

        def done(task: Task) -> None:
            if poll_mode:
                ctx._loop_release()
            _call_in_loop(loop, _settle, fut, ctx, task, policy)

        if poll_mode:
            ctx._loop_acquire(loop)
        try:
            task = ctx._fetch(query.entity, callback=callback, progress=self._progress, on_done=done,
                              **query._fetch_options(), **options)
        except BaseException:
            if poll_mode:
                ctx._loop_release()
            raise
        try:
            return await fut
        except asyncio.CancelledError:
            task.cancel()
            raise

    def __aiter__(self) -> AsyncIterator[Object]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Object]:
        answer = await self._run(self.query, batch=self.query._batch)
        try:
            for obj in answer:
                yield obj
        finally:
            _close(answer)

    async def all(self) -> Answer[Object]:
        """Every Object of the answer, in order (a tether.Answer: a lazy list with ``offline``)."""
        answer: Answer[Object] = await self._run(self.query)
        return answer

    async def first(self) -> Optional[Object]:
        """The first Object of the answer, or None when there is none."""
        answer = await self._run(self.query.limit(1))
        return answer[0] if answer else None

    async def count(self) -> Count:
        """How many records match (after offset, at most limit): a tether.Count."""
        n: Count = await self._run(self.query, result="count")
        return n

    async def ids(self) -> Answer[str]:
        """The ids of the records that match, in order."""
        ids: Answer[str] = await self._run(self.query, result="ids")
        return ids

    async def values(self, *properties: str) -> Answer[Row]:
        """A dict {name: value} per record, with `properties` (none: the
        Query's, else every attribute) in that order; no Objects made."""
        names = _names("properties", properties, allow_sign=False) if properties else self.query._properties
        rows: Answer[Row] = await self._run(self.query, result="values",
                                          properties=None if names is None else list(names))
        return rows

    def live(self) -> LiveFetch:
        """A live fetch of the Objects as an async iterator: ``async for a in
        actx.query(q).live()`` gets a tether.LiveAnswer per answer (`phase`,
        `answer`, `changes`, `error`); leaving the loop cancels it. Call it
        with the loop running. With the Query's batch, each answer is a
        tether.Results, closed when the next is taken or the loop ends."""
        q = self.query
        return LiveFetch(self.context.sync, asyncio.get_running_loop(),
                         dict(entity=q.entity, progress=self._progress, batch=q._batch, **q._fetch_options()))


class _Opening:
    """AsyncContext.open's answer: ``await`` it for an AsyncContext, or
    ``async with`` it to have it closed at the end."""

    def __init__(self, make: Callable[[], Context]) -> None:
        self._make = make
        self._actx: Optional[AsyncContext] = None

    async def _open(self) -> AsyncContext:
        # Opening reads the model (from the server when it answers): not on the loop.
        ctx = await asyncio.get_running_loop().run_in_executor(None, self._make)
        try:
            return AsyncContext(ctx)
        except BaseException:
            ctx.close()
            raise

    def __await__(self) -> Generator[Any, None, AsyncContext]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncContext:
        self._actx = await self._open()
        return self._actx

    async def __aexit__(self, *exc: object) -> None:
        if self._actx is not None:
            await self._actx.__aexit__(*exc)


class AsyncContext:
    """A Context for asyncio code: open with ``async with
    AsyncContext.open(...)`` (or ``await AsyncContext.open(...)``, then
    ``await actx.aclose()``), or wrap an open Context: AsyncContext(ctx)
    attaches it to the running loop when its delivery is "poll".

    Awaitable: query(...)'s methods, save(). Plain (they never wait for the
    server): object, object_for_uri, insert, entity, entities, rollback,
    online, diagnostics, change_count, has_changes, changed_objects.
    ``sync`` is the Context underneath, for the rest."""

    def __init__(self, context: Context) -> None:
        if not isinstance(context, Context):
            raise TypeError("AsyncContext wraps a tether.Context, not %s" % type(context).__name__)
        self.sync = context
        if context._delivery == _lib.DELIVER_POLL:
            context.attach(asyncio.get_running_loop())

    @classmethod
    def open(cls, url: str, bucket: str, store_path: Union[str, os.PathLike[str]], *,
             username: Optional[str] = None, password: Optional[str] = None,
             delivery: Delivery = "poll", staleness_ms: int = 0, timeout_ms: int = 30000,
             object_cache_size: Optional[int] = None, merge: Optional[MergePolicy] = None,
             local_stores: Iterable[LocalStore] = (),
                      sync_interval: Optional[float] = None, full_check_interval: Optional[float] = None,
                      exclusive: bool = False) -> _Opening:
        """Opens a Context (Context's arguments; delivery "poll" by default,
        attached to the running loop) in a worker thread."""
        def make() -> Context:
            return Context(url, bucket, store_path, username=username, password=password,
                           delivery=delivery, staleness_ms=staleness_ms, timeout_ms=timeout_ms,
                           object_cache_size=object_cache_size, merge=merge, local_stores=local_stores,
                           sync_interval=sync_interval, full_check_interval=full_check_interval, exclusive=exclusive)
        return _Opening(make)

    @classmethod
    def open_postgres(cls, conninfo: str, store_path: Union[str, os.PathLike[str]], *,
                      schema: Optional[str] = None, delivery: Delivery = "poll", staleness_ms: int = 0,
                      timeout_ms: int = 30000, object_cache_size: Optional[int] = None,
                      merge: Optional[MergePolicy] = None, local_stores: Iterable[LocalStore] = (),
                      sync_interval: Optional[float] = None, full_check_interval: Optional[float] = None,
                      exclusive: bool = False) -> _Opening:
        """As open(), on a PostgreSQL schema (see Context.open_postgres)."""
        def make() -> Context:
            return Context.open_postgres(conninfo, store_path, schema=schema, delivery=delivery,
                                         staleness_ms=staleness_ms, timeout_ms=timeout_ms,
                                         object_cache_size=object_cache_size, merge=merge,
                                         local_stores=local_stores, sync_interval=sync_interval,
                                         full_check_interval=full_check_interval, exclusive=exclusive)
        return _Opening(make)

    @classmethod
    def with_connection(cls, connection: Connection, store_path: Union[str, os.PathLike[str]], *,
                        delivery: Delivery = "poll", staleness_ms: int = 0, timeout_ms: int = 30000,
                        object_cache_size: Optional[int] = None, merge: Optional[MergePolicy] = None,
                        local_stores: Iterable[LocalStore] = (),
                      sync_interval: Optional[float] = None, full_check_interval: Optional[float] = None,
                      exclusive: bool = False) -> _Opening:
        """As open(), on a connection written in Python (see Context.with_connection)."""
        def make() -> Context:
            return Context.with_connection(connection, store_path, delivery=delivery, staleness_ms=staleness_ms,
                                           timeout_ms=timeout_ms, object_cache_size=object_cache_size,
                                           merge=merge, local_stores=local_stores, sync_interval=sync_interval,
                                           full_check_interval=full_check_interval, exclusive=exclusive)
        return _Opening(make)

    async def aclose(self) -> None:
        """Closes the context (see Context.close). Idempotent."""
        self.sync.close()

    async def __aenter__(self) -> AsyncContext:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.sync.__exit__(*exc)   # warns of unsaved changes, as Context's `with` does

    def __repr__(self) -> str:
        return "<tether.AsyncContext %r>" % (self.sync,)

    @says_unknown_keywords
    def query(self, query: Union[str, Query], *, where: Optional[str] = KEEP,
              args: Sequence[Argument] = KEEP, sort: Union[str, Sequence[str]] = KEEP,
              limit: Optional[int] = KEEP, offset: int = KEEP, batch: int = KEEP,
              properties: Optional[Sequence[str]] = KEEP, policy: Policy = KEEP,
              server_query: Optional[str] = KEEP, on_cached: Optional[OnCached] = None,
              progress: Optional[Progress] = None) -> AsyncQueryResult:
        """As Context.query, awaited (no timeout: use asyncio.wait_for)."""
        return AsyncQueryResult(self, make_query(query, dict(
            where=where, args=args, sort=sort, limit=limit, offset=offset, batch=batch,
            properties=properties, policy=policy, server_query=server_query)),
            on_cached=on_cached, progress=progress)

    async def save(self, *, merge: Optional[MergePolicy] = None,
                   progress: Optional[SaveProgress] = None) -> SaveReport:
        """Saves every unsaved change (see Context.save)."""
        return await self.sync.save_async(merge=merge, progress=progress)

    # -- what never waits for the server, as Context's

    def object(self, entity: Union[str, Entity], id: str) -> Object:
        return self.sync.object(entity, id)

    def object_for_uri(self, uri: str) -> Object:
        return self.sync.object_for_uri(uri)

    def insert(self, entity: str, values: Optional[Dict[Any, Any]] = None, id: Optional[str] = None) -> Object:
        return self.sync.insert(entity, values, id)

    def entity(self, name: str) -> Entity:
        return self.sync.entity(name)

    @property
    def entities(self) -> List[Entity]:
        return self.sync.entities

    def rollback(self) -> None:
        self.sync.rollback()

    @property
    def online(self) -> bool:
        return self.sync.online

    def changed(self, entity: Optional[str] = None) -> None:
        """See Context.changed: returns at once."""
        self.sync.changed(entity)

    @property
    def closed(self) -> bool:
        return self.sync.closed

    @property
    def diagnostics(self) -> List[Diagnostic]:
        return self.sync.diagnostics

    @property
    def change_count(self) -> int:
        return self.sync.change_count

    @property
    def has_changes(self) -> bool:
        return self.sync.has_changes

    @property
    def changed_objects(self) -> List[Object]:
        return self.sync.changed_objects
