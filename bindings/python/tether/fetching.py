"""Fetching: Context.fetch (a Task), fetch_wait (blocks), fetch_async
(awaits) and fetch_live (an asyncio iterator), as ContextFetching, a part of
tether.Context.

Live fetches (live=True) answer until cancelled; a LiveFetch (fetch_live)
is one as an asyncio iterator, cancelled when its loop lets go of it."""

from __future__ import annotations

import asyncio
from ctypes import byref, c_void_p
from typing import TYPE_CHECKING, Any, Callable, List, Literal, Optional, Sequence, Tuple, Union, overload

from . import _lib
from ._types import Policy, ResultType
from .callbacks import _call_in_loop, _fetch_trampoline, _progress_trampoline, _resolve
from .errors import NetworkError
from .model import Entity
from .objects import Object
from .answers import Answer
from .results import Count, LiveAnswer, ObjectsAnswer, Results, Row, _marked, _Shape
from .tasks import FetchCallback, LiveCallback, LiveFetch, Task
from .values import (INT64_MAX, INT64_MIN, POLICIES, SIZE_MAX, Argument, Progress, Sort, _arguments,
                     _cstr, _cstr_opt, _pystr, _refuse_live, _result_options)


# related=(obj, name): the records of obj's to-many relationship `name`.
Related = Tuple[Object, str]


def _related(related: Optional[Related], entity: object) -> Tuple[Optional[Object], Optional[str]]:
    """`related` checked: (owner, name) or (None, None)."""
    if related is None:
        return None, None
    if not isinstance(related, tuple) or len(related) != 2 or not isinstance(related[0], Object) \
            or not isinstance(related[1], str):
        raise TypeError("related must be (tether.Object, the to-many relationship's name), not %r" % (related,))
    return related


class ContextFetching:
    """The fetching part of tether.Context."""

    if TYPE_CHECKING:
        # Context's (declared here for the methods below).
        _h: Optional[int]
        _delivery: int

        def _loop_acquire(self, loop: asyncio.AbstractEventLoop) -> None: ...
        def _loop_release(self) -> None: ...
        def entity(self, name: str) -> Entity: ...
        @property
        def online(self) -> bool: ...

    # -- fetch

    def fetch(self, entity: Union[None, str, Entity], *, sort: Sort = None, limit: int = 0,
              policy: Policy = "cache_then_server",
              callback: Union[None, FetchCallback, LiveCallback] = None,
              where: Optional[str] = None, args: Optional[Sequence[Argument]] = (), offset: int = 0,
              server_query: Union[None, str, bytes] = None, related: Optional[Related] = None,
              result: ResultType = "objects",
              properties: Optional[Sequence[str]] = None, batch: int = 0,
              progress: Optional[Progress] = None, live: bool = False,
              _on_done: Optional[Callable[[Task], None]] = None,
              _on_answer: Optional[Callable[[LiveAnswer], None]] = None) -> Task:
        """Starts a fetch; returns a Task (a concurrent.futures.Future of the
        final answer, and an awaitable). callback(phase, error, answer) runs
        once per phase: phase "cached" then "final" for the default policy;
        `error` is None, or the phase's TetherError (the final one is the
        task's exception()). `sort` is "A,-B" or a list of names ("-" descending).

        `live=True` keeps the fetch live: after the cached answer its policy
        gives, it answers with phase "live" (what a "final" would answer,
        error and all: on a server error, the cache's answer), then again,
        "live" with no error, each time the records it matches change in the
        context (a sync, another fetch, a get's refresh), until cancelled or
        its context closes: then one "final", cancelled (TaskCancelledError).
        A live fetch's callback takes a fourth argument, `changes`: for a
        live answer after the first, a Changes from the answer before;
        otherwise None (replace what you show with the answer). The changes
        come with the answer they belong to, as `task.answer` and
        `task.changes` hold the latest. Changes wait one at a time in the
        library, which folds later ones into the waiting answer. See
        fetch_live() for asyncio.

        `result` says what each phase answers, as an Answer (a lazy list:
        each Object, id or dict is made when its row is first read):
          "objects" (default): a list of Objects, in result order;
          "ids": a list of record ids (str); no values are read;
          "count": an int, how many match (after `offset`, at most `limit`);
            the server counts without sending records where it can filter
            the whole predicate;
          "values": a list of dicts {name: value}, one per record, with the
            attributes named in `properties` (a list of names, in that
            order; None: every attribute, in the entity's order); no Objects
            are made.
        `properties` is for "values" only: with another result type the
        library refuses it (InvalidError), as it does an unknown name.

        `batch` (0: off) makes an "objects" fetch answer with a Results per
        phase instead of a list: a lazy sequence that owns the library's
        results handle and makes objects `batch` at a time as rows are read,
        so iterating a huge answer holds about one batch. Close it (or use
        ``with``) to release the handle at once; otherwise garbage collection
        does. With other result types `batch` changes nothing visible.

        `progress(received, total)` is called as records arrive from the
        server, at most every 100 ms, on the thread that gets the fetch's
        callbacks: `received` counts every record the server sent in this
        fetch (matching or not, deletions included), `total` is the
        listing's size if the server said, else None. Never after the final
        callback; cancelling the task from inside it works as from the
        callback. Exceptions it raises are logged, as a callback's are.

        `where` is a predicate (see "Predicates" in tether.h), e.g.
        ``"Status == $1 AND User BEGINSWITH[c] $2"``, and `args` the values of
        $1, $2...: str (TEXT; may hold NUL), int (INTEGER, 64 bits), float
        (REAL), bool (BOOLEAN) or None (NULL). Arguments never need quoting.
        The cache and the server answer it alike, and exactly.

        `offset` skips that many results, in sort order, before `limit`
        counts: on the cache and the server alike (0 to 2**31-1).

        `server_query` (str or bytes) is a query in the server's own language,
        Kinto's query parameters, e.g. ``"in_Status=1,2&_since=42"``: used as
        given for the server phase instead of the predicate's filters. It must
        be percent-encoded printable ASCII without space or '#' (at most 8000
        bytes). The FINAL answer is then the server's, in `sort` and with
        `offset` and `limit`; `where` still selects from the cache, for the
        CACHED phase and the "cache_only" policy. Nothing else leaves the
        cache.

        `related=(obj, name)` fetches a to-many relationship: the records
        whose reference points at `obj` through its entity's relationship
        `name` (see Entity.relationships); `entity` may then be None (if
        given, it must be the relationship's), and `where` narrows them
        further. Every other option applies as to any fetch.

        Validation errors raise here, and then no callback runs: unknown
        entity (NotFoundError), bad sort, a bad predicate (InvalidError: its
        syntax, an unknown key, a value of the wrong type, an argument count
        that does not match; the message says what and the column), an offset
        out of range or a bad server query (InvalidError). An argument, offset
        or server query of another Python type raises TypeError, and an
        argument or offset out of 64-bit range OverflowError, before anything
        reaches the library; so do `result` (TypeError if not a str,
        ValueError if not one of the four), `properties` (TypeError if not a
        list of str; ValueError if empty or a name holds ',', which the
        library reads as a separator), `batch` (TypeError if not an int,
        ValueError if negative), `progress` (TypeError if not callable) and
        `live` (TypeError if not a bool)."""
        if isinstance(entity, Entity):
            entity = entity.name
        owner, relationship = _related(related, entity)
        if entity is None and owner is not None and relationship is not None:
            entity = owner.entity.relationship(relationship).entity
        if entity is None:
            raise TypeError("entity is required (None only with related=(obj, name))")
        if policy in POLICIES:
            pol = POLICIES[policy]
        elif isinstance(policy, int) and not isinstance(policy, bool) and policy in POLICIES.values():
            pol = policy
        else:
            raise ValueError("policy must be one of %s, not %r" % (", ".join(POLICIES), policy))
        if sort is not None and not isinstance(sort, (str, bytes)):
            sort = ",".join(sort)
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError("limit must be an int")
        if not INT64_MIN <= limit <= INT64_MAX:
            # ctypes would wrap it silently (2**64 becoming 0: no limit).
            raise OverflowError("limit %d does not fit in 64 bits" % limit)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError("offset must be an int, not %s" % type(offset).__name__)
        if not INT64_MIN <= offset <= INT64_MAX:
            # ctypes would wrap it silently; the library judges the rest.
            raise OverflowError("offset %d does not fit in 64 bits" % offset)
        if server_query is not None and not isinstance(server_query, (str, bytes)):
            raise TypeError("server_query must be str, bytes or None, not %s"
                            % type(server_query).__name__)
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable")
        rtype, props, names = _result_options(result, properties)
        if isinstance(batch, bool) or not isinstance(batch, int):
            raise TypeError("batch must be an int, not %s" % type(batch).__name__)
        if batch < 0:   # size_t would wrap it into a huge batch
            raise ValueError("batch must not be negative")
        if batch > SIZE_MAX:
            raise OverflowError("batch %d does not fit in a size_t" % batch)
        if progress is not None and not callable(progress):
            raise TypeError("progress must be callable or None, not %s" % type(progress).__name__)
        if not isinstance(live, bool):
            raise TypeError("live must be a bool, not %s" % type(live).__name__)
        if rtype == _lib.RESULT_VALUES and names is None:
            # Every attribute, in the entity's order (what NULL asks of the library).
            names = [a.name for a in self.entity(entity).attributes]
        shape = _Shape(rtype, names or (), lazy=rtype == _lib.RESULT_OBJECTS and batch > 0)
        predicate = _cstr_opt(where, "where")
        query = _cstr_opt(server_query, "server_query")
        arguments, count, buffers = _arguments(args)
        opts = _lib.tether_fetch_options()
        _lib.tether_fetch_options_init(byref(opts), _lib.FETCH_OPTIONS_VERSION)
        # What opts points into, alive until tether_fetch_start returns.
        keep = (_cstr(entity, "entity"), _cstr_opt(sort, "sort"), predicate, arguments, buffers,
                query, _cstr_opt(relationship, "related name"))
        opts.entity, opts.sort = keep[0], keep[1]
        if owner is not None:
            opts.related_owner, opts.related_name = owner._h, keep[6]
        opts.limit = limit
        opts.policy = pol
        opts.predicate = predicate
        opts.arguments = arguments   # None: a NULL pointer
        opts.argument_count = count
        opts.offset = offset
        opts.server_query = query    # None: a NULL pointer
        opts.result_type = rtype
        opts.properties = props      # None: a NULL pointer (bytes kept alive by `props`)
        opts.batch_size = batch
        if progress is not None:
            opts.progress = _progress_trampoline   # module-level: never freed
        opts.live = int(live)
        task = Task(self, entity if isinstance(entity, str) else _pystr(entity), callback, _on_done,  # type: ignore[arg-type]  # self: a Context
                    shape=shape, progress=progress, live=live, on_answer=_on_answer)
        task._register()   # before the call: in thread mode callbacks may come first
        out = c_void_p()
        try:
            _lib.tether_fetch_start(self._h, byref(opts), _fetch_trampoline, task._token, byref(out))
        except BaseException:
            task._unregister()
            raise
        if task._h is None:
            task._h = out.value
        return task

    # What fetch_wait answers follows `result` (and `batch` for objects).
    @overload
    def fetch_wait(self, entity: Union[None, str, Entity], *, sort: Sort = ..., limit: int = ...,
                   policy: Policy = ..., timeout: Optional[float] = ..., callback: Optional[FetchCallback] = ...,
                   where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                   server_query: Union[None, str, bytes] = ..., related: Optional[Related] = ...,
                   result: Literal["objects"] = ...,
                   properties: None = ..., batch: Literal[0] = ..., progress: Optional[Progress] = ...,
                   live: Literal[False] = ...) -> Tuple[Optional[Answer[Object]], Answer[Object]]: ...
    @overload
    def fetch_wait(self, entity: Union[None, str, Entity], *, sort: Sort = ..., limit: int = ...,
                   policy: Policy = ..., timeout: Optional[float] = ..., callback: Optional[FetchCallback] = ...,
                   where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                   server_query: Union[None, str, bytes] = ..., related: Optional[Related] = ...,
                   result: Literal["objects"] = ...,
                   properties: None = ..., batch: int, progress: Optional[Progress] = ...,
                   live: Literal[False] = ...) -> Tuple[Optional[ObjectsAnswer], ObjectsAnswer]: ...
    @overload
    def fetch_wait(self, entity: Union[None, str, Entity], *, sort: Sort = ..., limit: int = ...,
                   policy: Policy = ..., timeout: Optional[float] = ..., callback: Optional[FetchCallback] = ...,
                   where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                   server_query: Union[None, str, bytes] = ..., related: Optional[Related] = ...,
                   result: Literal["ids"],
                   properties: None = ..., batch: int = ..., progress: Optional[Progress] = ...,
                   live: Literal[False] = ...) -> Tuple[Optional[Answer[str]], Answer[str]]: ...
    @overload
    def fetch_wait(self, entity: Union[None, str, Entity], *, sort: Sort = ..., limit: int = ...,
                   policy: Policy = ..., timeout: Optional[float] = ..., callback: Optional[FetchCallback] = ...,
                   where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                   server_query: Union[None, str, bytes] = ..., related: Optional[Related] = ...,
                   result: Literal["count"],
                   properties: None = ..., batch: int = ..., progress: Optional[Progress] = ...,
                   live: Literal[False] = ...) -> Tuple[Optional[int], Count]: ...
    @overload
    def fetch_wait(self, entity: Union[None, str, Entity], *, sort: Sort = ..., limit: int = ...,
                   policy: Policy = ..., timeout: Optional[float] = ..., callback: Optional[FetchCallback] = ...,
                   where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                   server_query: Union[None, str, bytes] = ..., related: Optional[Related] = ...,
                   result: Literal["values"],
                   properties: Optional[Sequence[str]] = ..., batch: int = ..., progress: Optional[Progress] = ...,
                   live: Literal[False] = ...) -> Tuple[Optional[Answer[Row]], Answer[Row]]: ...
    def fetch_wait(self, entity: Union[None, str, Entity], *, sort: Sort = None, limit: int = 0,
                   policy: Policy = "cache_then_server", timeout: Optional[float] = 30,
                   callback: Optional[FetchCallback] = None, where: Optional[str] = None,
                   args: Optional[Sequence[Argument]] = (), offset: int = 0,
                   server_query: Union[None, str, bytes] = None, related: Optional[Related] = None,
                   result: ResultType = "objects",
                   properties: Optional[Sequence[str]] = None, batch: int = 0,
                   progress: Optional[Progress] = None, live: bool = False) -> Tuple[Any, Any]:
        """Fetches and waits: returns (cached answer or None, final answer),
        or raises the final error. The final answer is an Answer (a lazy list),
        a Count or a Results, whose ``offline`` is True when the server
        could not be reached: it is then the cache's answer, and the context
        is offline (``online`` False); only policy="server_only" raises
        NetworkError then. Works in both delivery modes (in poll mode
        it polls). On timeout the fetch is cancelled and TimeoutError raised.
        `where` and `args` (a predicate and its arguments), `offset`,
        `server_query`, `result`, `properties`, `batch` and `progress`: as in
        fetch(). With `batch`, both answers are Results: close them.
        `live=True` is refused (ValueError) before anything starts: a live
        fetch never ends by itself (use fetch(live=True) or fetch_live())."""
        _refuse_live(live, "fetch_wait", "fetch(..., live=True, callback=...) or fetch_live()")
        task = self.fetch(entity, sort=sort, limit=limit, policy=policy, callback=callback,
                          where=where, args=args, offset=offset, server_query=server_query, related=related,
                          result=result, properties=properties, batch=batch, progress=progress)
        task._wait_or_cancel(timeout, "fetch of %r" % (entity,))
        if task.error is not None:
            # Unreachable (the context is offline since): the cache's answer,
            # marked, unless the caller asked for the server's only.
            if isinstance(task.error, NetworkError) and policy != "server_only" and not self.online:
                return task.cached, _marked(task.objects, True)
            raise task.error
        return task.cached, _marked(task.result(), False)


    # What fetch_async answers follows `result` (and `batch` for objects).
    @overload
    async def fetch_async(self, entity: Union[None, str, Entity], *, sort: Sort = ..., limit: int = ...,
                          policy: Policy = ..., callback: Optional[FetchCallback] = ...,
                          where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                          server_query: Union[None, str, bytes] = ..., related: Optional[Related] = ...,
                          result: Literal["objects"] = ...,
                          properties: None = ..., batch: Literal[0] = ..., progress: Optional[Progress] = ...,
                          live: Literal[False] = ...) -> Answer[Object]: ...
    @overload
    async def fetch_async(self, entity: Union[None, str, Entity], *, sort: Sort = ..., limit: int = ...,
                          policy: Policy = ..., callback: Optional[FetchCallback] = ...,
                          where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                          server_query: Union[None, str, bytes] = ..., related: Optional[Related] = ...,
                          result: Literal["objects"] = ...,
                          properties: None = ..., batch: int, progress: Optional[Progress] = ...,
                          live: Literal[False] = ...) -> ObjectsAnswer: ...
    @overload
    async def fetch_async(self, entity: Union[None, str, Entity], *, sort: Sort = ..., limit: int = ...,
                          policy: Policy = ..., callback: Optional[FetchCallback] = ...,
                          where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                          server_query: Union[None, str, bytes] = ..., related: Optional[Related] = ...,
                          result: Literal["ids"],
                          properties: None = ..., batch: int = ..., progress: Optional[Progress] = ...,
                          live: Literal[False] = ...) -> Answer[str]: ...
    @overload
    async def fetch_async(self, entity: Union[None, str, Entity], *, sort: Sort = ..., limit: int = ...,
                          policy: Policy = ..., callback: Optional[FetchCallback] = ...,
                          where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                          server_query: Union[None, str, bytes] = ..., related: Optional[Related] = ...,
                          result: Literal["count"],
                          properties: None = ..., batch: int = ..., progress: Optional[Progress] = ...,
                          live: Literal[False] = ...) -> int: ...
    @overload
    async def fetch_async(self, entity: Union[None, str, Entity], *, sort: Sort = ..., limit: int = ...,
                          policy: Policy = ..., callback: Optional[FetchCallback] = ...,
                          where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                          server_query: Union[None, str, bytes] = ..., related: Optional[Related] = ...,
                          result: Literal["values"],
                          properties: Optional[Sequence[str]] = ..., batch: int = ...,
                          progress: Optional[Progress] = ..., live: Literal[False] = ...) -> Answer[Row]: ...
    async def fetch_async(self, entity: Union[None, str, Entity], *, sort: Sort = None, limit: int = 0,
                          policy: Policy = "cache_then_server", callback: Optional[FetchCallback] = None,
                          where: Optional[str] = None, args: Optional[Sequence[Argument]] = (), offset: int = 0,
                          server_query: Union[None, str, bytes] = None, related: Optional[Related] = None,
                          result: ResultType = "objects",
                          properties: Optional[Sequence[str]] = None, batch: int = 0,
                          progress: Optional[Progress] = None, live: bool = False) -> Any:
        """Fetches and returns the final answer; raises the final error (a
        tether.TaskCancelledError if the fetch was cancelled, e.g. by close()).
        `where` and `args` (a predicate and its arguments), `offset`,
        `server_query`, `result`, `properties`, `batch` and `progress`: as in
        fetch() (`progress` runs where the callbacks do).
        If the awaiting asyncio task is cancelled, the fetch is cancelled too
        and asyncio.CancelledError propagates.

        POLL mode: the context's descriptor is watched with loop.add_reader
        while the fetch runs. THREAD mode: the result comes back through
        loop.call_soon_threadsafe. `live=True` is refused (ValueError): a
        live fetch has no final answer to return; use fetch_live()."""
        _refuse_live(live, "fetch_async", "fetch_live()")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        poll_mode = self._delivery == _lib.DELIVER_POLL

        def done(task: Task) -> None:
            if poll_mode:
                self._loop_release()
            if task.error is not None:
                _call_in_loop(loop, _resolve, fut, None, task.error)
            else:
                _call_in_loop(loop, _resolve, fut, task.objects)

        if poll_mode:
            self._loop_acquire(loop)
        try:
            task = self.fetch(entity, sort=sort, limit=limit, policy=policy, callback=callback,
                              where=where, args=args, offset=offset, server_query=server_query, related=related,
                              result=result, properties=properties, batch=batch,
                              progress=progress, _on_done=done)
        except BaseException:
            if poll_mode:
                self._loop_release()
            raise
        try:
            return await fut
        except asyncio.CancelledError:
            if not fut.done() or fut.cancelled():
                task.cancel()
            raise

    def fetch_live(self, entity: Union[None, str, Entity], *, sort: Sort = None, limit: int = 0,
                   policy: Policy = "cache_then_server", where: Optional[str] = None,
                   args: Optional[Sequence[Argument]] = (), offset: int = 0,
                   server_query: Union[None, str, bytes] = None, related: Optional[Related] = None,
                   result: ResultType = "objects",
                   properties: Optional[Sequence[str]] = None, batch: int = 0,
                   progress: Optional[Progress] = None) -> LiveFetch:
        """Starts a live fetch (see fetch(live=True)) and returns it as an
        asyncio iterator, a LiveFetch: ``async for a in ctx.fetch_live(...)``
        gets a LiveAnswer (`phase`, `answer`, `changes`, `status`, `message`,
        `error`) per answer: the cached one its policy gives, the first live
        one (changes None: replace), then one per change (a Changes). The
        options are fetch()'s, and raise here as there. Call it with the loop
        running (it is a plain method, not a coroutine, so that it can be
        the target of ``async for`` directly).

        Leaving the loop cancels the fetch and waits for its FINAL; so do
        ``await it.aclose()`` and ``async with``. When the context closes the
        iteration ends after the answers already received.

        An iterator of its own rather than fetch_async(live=True): that is a
        coroutine, awaited once for one answer; a live fetch has many and no
        last, and an ``async for`` needs an iterator it can start at once.

        Both delivery modes, as fetch_async: POLL mode watches the context's
        descriptor with loop.add_reader until the FINAL; THREAD mode brings
        each answer in with loop.call_soon_threadsafe."""
        return LiveFetch(self, asyncio.get_running_loop(), dict(
            entity=entity, sort=sort, limit=limit, policy=policy, where=where, args=args,
            offset=offset, server_query=server_query, related=related, result=result, properties=properties,
            batch=batch, progress=progress))
