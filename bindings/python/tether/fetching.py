"""Fetching: ContextFetching._fetch, the one call that starts a fetch
(tether_fetch_start), a part of tether.Context. It is private: programs read
through Context.query / AsyncContext.query (tether.query, tether.aio), whose
QueryResult runs on it, as do LiveFetch (a live query as an asyncio
iterator) and Object.related_query."""

from __future__ import annotations

import asyncio
from ctypes import byref, c_void_p
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Tuple, Union

from . import _lib
from ._types import Policy, ResultType
from .callbacks import _fetch_trampoline, _progress_trampoline
from .model import Entity
from .objects import Object
from .results import LiveAnswer, _Shape
from .tasks import FetchCallback, LiveCallback, Task
from .values import (INT64_MAX, INT64_MIN, POLICIES, SIZE_MAX, Argument, Progress, _arguments, _cstr,
                     _cstr_opt, _result_options)


# related=(obj, name): the records of obj's to-many relationship `name`.
Related = Tuple[Object, str]


def _related(related: Optional[Related]) -> Tuple[Optional[Object], Optional[str]]:
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

    # -- the one primitive (Context.query, AsyncContext.query, LiveFetch and
    # Object.related_many run on it)

    def _fetch(self, entity: str, *, sort: Optional[str] = None, limit: int = 0,
               policy: Policy = "cache_then_server",
               callback: Union[None, FetchCallback, LiveCallback] = None,
               where: Optional[str] = None, args: Sequence[Argument] = (), offset: int = 0,
               server_query: Optional[str] = None, related: Optional[Related] = None,
               result: ResultType = "objects",
               properties: Optional[Sequence[str]] = None, batch: int = 0,
               progress: Optional[Progress] = None, live: bool = False,
               on_done: Optional[Callable[[Task], None]] = None,
               on_answer: Optional[Callable[[LiveAnswer], None]] = None) -> Task:
        """Starts a fetch (tether_fetch_start) and returns its Task at once.
        The options have been judged by Query where Python can (types,
        ranges); the library judges the rest and raises here (an unknown
        entity or key, a bad predicate or server query), and then no
        callback runs.

        callback(phase, error, answer) runs once per phase, a live fetch's
        with a fourth argument, the answer's Changes. `result` is what each
        phase answers: "objects" (a list, or with `batch` a Results that
        makes objects `batch` at a time), "ids", "count" or "values" (dicts
        of `properties`, in that order; None: every attribute). `related`
        (owner, name) fetches a to-many relationship's records. `live` keeps
        the fetch answering ("live" phases) until cancelled. `on_done(task)`
        runs after the final callback, `on_answer(LiveAnswer)` after each
        other one (both where the callbacks run)."""
        owner, relationship = _related(related)
        if policy not in POLICIES:
            raise ValueError("policy must be one of %s, not %r" % (", ".join(POLICIES), policy))
        if isinstance(limit, bool) or not isinstance(limit, int) or not INT64_MIN <= limit <= INT64_MAX:
            raise TypeError("limit must be an int of 64 bits")
        rtype, props, names = _result_options(result, properties)
        if isinstance(batch, bool) or not isinstance(batch, int):
            raise TypeError("batch must be an int, not %s" % type(batch).__name__)
        if batch < 0:   # size_t would wrap it into a huge batch
            raise ValueError("batch must not be negative")
        if batch > SIZE_MAX:
            raise OverflowError("batch must be at most %d" % SIZE_MAX)
        if progress is not None and not callable(progress):
            raise TypeError("progress must be callable or None, not %s" % type(progress).__name__)
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
        opts.policy = POLICIES[policy]
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
        task = Task(self, entity, callback, on_done,  # type: ignore[arg-type]  # self: a Context
                    shape=shape, progress=progress, live=live, on_answer=on_answer)
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
