"""Tasks: a fetch (Task), what it shares with a save (Request), and a live
fetch as an asyncio iterator (LiveFetch)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import sys
import threading
import weakref
from typing import Any, Callable, Dict, Optional

from . import _lib
from ._types import Phase
from .callbacks import _call_in_loop, _on_loop_thread, _report, _resolve, _tokens
from .errors import E_CANCELLED, TetherError, make_error
from .futures import Request
from .objects import Owner
from .results import Changes, LiveAnswer, Results, _read_changes, _Shape
from .values import PHASES, Progress, _pystr

# callback(phase, error, answer): error None, or the phase's TetherError; a
# live fetch's takes `changes` too.
FetchCallback = Callable[[Phase, Optional[TetherError], Any], object]
LiveCallback = Callable[[Phase, Optional[TetherError], Any, Optional[Changes]], object]


def _close_answer(answer: object) -> None:
    if isinstance(answer, Results):
        answer.close()


def _live_push(ref: weakref.ref[LiveFetch], item: LiveAnswer) -> None:
    # On the loop thread: the LiveFetch is dereferenced here, so that its
    # last reference never goes away on a library thread.
    live = ref()
    if live is None:
        _close_answer(item.answer)
    else:
        live._push(item)


def _live_finish(ref: weakref.ref[LiveFetch], task: Task) -> None:
    live = ref()
    if live is not None:
        live._finish(task)


class LiveFetch:
    """A live fetch as an asyncio iterator: ``async for a in
    actx.query(...).live()`` gets a LiveAnswer for each answer, until the loop
    is left or the context closes.

    Leaving the loop (break, return, an exception) drops the iterator, and
    that cancels the fetch at once and waits for its FINAL callback where it
    can without blocking the loop for long (see __del__); ``await
    it.aclose()``, or ``async with actx.query(...).live() as it``, does the same
    explicitly, for an iterator still referenced elsewhere. When the context
    closes, the answers already received are yielded, then the iteration
    ends (StopAsyncIteration).

    Answers are queued as they come, so none is lost while the loop body
    awaits something else; the library coalesces changes while one answer
    waits for delivery, and the queue only grows while the body is slower
    than the changes. A batched answer's Results (batch > 0) belongs to the
    iterator: it is closed when the next answer is taken or the iteration
    ends (Objects read from it stay valid). One consumer at a time.
    `task` is the fetch's Task.
    """

    task: Optional[Task]

    def __init__(self, ctx: Any, loop: asyncio.AbstractEventLoop, options: Dict[str, Any]) -> None:
        # ctx: a Context (its fetch, _loop_acquire and _loop_release too)
        self._ctx = ctx
        self._loop = loop
        self._queue: collections.deque[LiveAnswer] = collections.deque()
        self._waiter: Optional[asyncio.Future[None]] = None     # the future __anext__ awaits, while it does
        self._current: Optional[Results] = None    # the Results last yielded, closed at the next
        self._ended = False     # the FINAL callback came
        self._closing = False   # aclose() or __del__: no more answers
        self._failure: Optional[TetherError] = None    # a FINAL error other than cancelled, raised once
        self._final: asyncio.Future[None] = loop.create_future()
        self.task = None
        poll_mode = ctx._delivery == _lib.DELIVER_POLL
        # The hooks hold the iterator weakly: the task stays in the registry
        # until its FINAL, and a strong reference would keep a dropped
        # iterator (and its fetch) alive for ever.
        ref = weakref.ref(self)

        def on_answer(item: LiveAnswer) -> None:
            _call_in_loop(loop, _live_push, ref, item)

        def on_done(task: Task) -> None:
            if poll_mode:
                ctx._loop_release()
            _call_in_loop(loop, _live_finish, ref, task)

        if poll_mode:
            ctx._loop_acquire(loop)
        try:
            self.task = ctx._fetch(on_answer=on_answer, on_done=on_done, live=True, **options)
        except BaseException:
            if poll_mode:
                ctx._loop_release()
            raise

    # -- from the hooks, on the loop thread

    def _push(self, item: LiveAnswer) -> None:
        if self._closing:
            _close_answer(item.answer)
            return
        self._queue.append(item)
        self._wake()

    def _finish(self, task: Task) -> None:
        self._ended = True
        if task.status not in (0, E_CANCELLED):
            self._failure = task.error
        _resolve(self._final)
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _release(self) -> None:
        """Closes the Results yielded last and those still queued."""
        current, self._current = self._current, None
        if current is not None:
            current.close()
        while self._queue:
            _close_answer(self._queue.popleft().answer)

    # -- iteration

    def __aiter__(self) -> LiveFetch:
        return self

    async def __anext__(self) -> LiveAnswer:
        if self._waiter is not None:
            raise RuntimeError("tether: another coroutine is already waiting for this live fetch")
        while not self._queue:
            if self._ended or self._closing:
                self._release()
                failure, self._failure = self._failure, None
                if failure is not None:
                    raise failure
                raise StopAsyncIteration
            # Cancelling this await (wait_for, a timeout) loses nothing: the
            # answers stay queued and the fetch goes on.
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._queue.popleft()
        current, self._current = self._current, None
        if current is not None:
            current.close()
        if isinstance(item.answer, Results):
            self._current = item.answer
        return item

    async def aclose(self) -> None:
        """Cancels the fetch and waits for its FINAL callback; releases
        every answer's Results still held. Idempotent."""
        self._closing = True
        self._release()
        self._wake()
        if self.task is not None:
            self.task.cancel()
            if not self._ended:
                # Shielded: cancelling this await must not cancel the future
                # the FINAL resolves.
                await asyncio.shield(self._final)
        self._release()

    async def __aenter__(self) -> LiveFetch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # `async for` drops its iterator when the loop is left: cancel there
        # and then, so that no answer comes after the loop.
        try:
            task = self.__dict__.get("task")
            if _finalizing() or task is None or task.done():
                return
            self._closing = True
            task.cancel()
            ctx = self._ctx
            if ctx._closed or ctx._cb_thread == threading.get_ident():
                return  # closed: FINAL delivered; inside a callback: it cannot come yet
            try:
                if ctx._delivery == _lib.DELIVER_POLL:
                    # The FINAL is queued already: one poll delivers it. Only
                    # on the loop's thread (poll from one thread at a time).
                    if _on_loop_thread(self._loop):
                        task.exception(5)
                else:
                    concurrent.futures.wait([task], 5)
            except (TetherError, concurrent.futures.TimeoutError):
                pass  # BusyError: inside a callback after all; the FINAL comes later
        except BaseException:
            if not _finalizing():
                _report("live fetch (cancelling at exit of its loop)", None)
        finally:
            try:
                self._release()
            except BaseException:
                pass

    def __repr__(self) -> str:
        state = "ended" if self._ended else "closing" if self._closing else "live"
        return "<tether.LiveFetch %s %s, %d queued>" % (
            self.task.entity if self.task else "?", state, len(self._queue))


# ------------------------------------------------------------------ tasks

class Task(Request[Any]):
    """An asynchronous fetch: a concurrent.futures.Future of its final
    answer (``task.result(timeout)``, ``task.exception()``, ``task.done()``,
    ``task.cancel()``, ``add_done_callback``; see Request) and an awaitable
    (``await task``).

    Attributes, filled as the callbacks arrive: ``cached`` (the cached
    phase's answer, or None if there was none), ``status`` (final status, 0
    ok: the C code), ``message``, ``error`` (the final error as a
    TetherError, else None: what exception() gives) and ``objects`` (the
    final callback's answer, also on error: what the cache held). An answer is what the fetch's ``result``
    type gives (all(), ids(), count(), values()): an Answer (a lazy list) of
    Objects, ids or dicts, an int, or a Results for a batched objects fetch.

    A live fetch (``live`` True) also has ``answer``, its latest answer (of
    the "cached" or "live" phase), and ``changes``, that answer's Changes
    (None when it is not told as changes); it ends only when cancelled or
    when its context closes, so its ``error`` is then a TaskCancelledError.
    """

    _kind = "fetch"

    callback: Optional[Callable[..., object]]
    cached: Any
    answer: Any
    changes: Optional[Changes]
    objects: Any

    def __init__(self, ctx: Owner, entity: str, callback: Optional[Callable[..., object]],
                 on_done: Optional[Callable[[Task], object]] = None, shape: Optional[_Shape] = None,
                 progress: Optional[Progress] = None, live: bool = False,
                 on_answer: Optional[Callable[[LiveAnswer], object]] = None) -> None:
        super().__init__()
        self._ctx = ctx
        self.entity = entity
        self.callback = callback
        self._on_done = on_done
        self._on_answer = on_answer   # internal: each non-final answer, as a LiveAnswer
        self._shape = shape if shape is not None else _Shape(_lib.RESULT_OBJECTS)
        self._progress_cb = progress
        self._h = None
        self.live = live
        self._live_answers = 0
        self.cached = None
        self.answer = None
        self.changes = None
        self.status: Optional[int] = None
        self.message: Optional[str] = None
        self.error: Optional[TetherError] = None
        self.objects = None
        self._token = next(_tokens)

    def _deliver(self, task_h: Optional[int], phase: int, status: int, message: Optional[bytes],
                 results: Optional[int]) -> None:
        # Marks the whole delivery (hooks included) as inside a callback of
        # the context, for anything that must not wait for one from here.
        prev, self._ctx._cb_thread = self._ctx._cb_thread, threading.get_ident()
        try:
            self._deliver_marked(task_h, phase, status, message, results)
        finally:
            self._ctx._cb_thread = prev

    def _deliver_marked(self, task_h: Optional[int], phase: int, status: int, message: Optional[bytes],
                        results: Optional[int]) -> None:
        live = phase == _lib.PHASE_LIVE
        changes: Optional[Changes] = None
        error: Optional[BaseException] = None
        # A live answer after the first is told as changes from the one
        # before; read them before _take lets the handle go.
        if live and self._live_answers > 0 and results:
            try:
                changes = _read_changes(results)
            except BaseException as e:
                _report("fetch (reading changes)", self.callback)
                error = e
        # Then at once, so that nothing below can keep the results from being released.
        try:
            objs = self._ctx._take(results, self._shape, status)
        except BaseException as e:
            # Could not read the results (should not happen): report, go on.
            _report("fetch (reading results)", self.callback)
            objs, error = self._shape.empty(), e
        if live:
            self._live_answers += 1
        if self._h is None and task_h:
            self._h = task_h
        final = phase == _lib.PHASE_FINAL
        msg = _pystr(message) or ""
        if error is not None and status == 0:
            status = getattr(error, "status", -1)
            msg = str(error)
        name = PHASES.get(phase, str(phase))
        err = make_error(status, msg, _lib.errstr(status)) if status else None
        try:
            if final:
                self.status = status
                self.message = msg
                self.objects = objs
                self.error = err
            else:
                if live:
                    self.answer, self.changes = objs, changes
                else:
                    self.cached = objs
                    if self.live:
                        self.answer, self.changes = objs, None
            if self.callback is not None:
                try:
                    if self.live:
                        # A live fetch's callback takes the answer's changes too:
                        # passed with it, they cannot be mixed up with another's.
                        self.callback(name, err, objs, changes)
                    else:
                        self.callback(name, err, objs)
                except BaseException:
                    _report("fetch", self.callback)
            if not final and self._on_answer is not None:
                try:
                    self._on_answer(LiveAnswer(name, objs, changes, status, msg, err))
                except BaseException:
                    _report("fetch (internal answer hook)", self._on_answer)
        finally:
            if final:
                self._settle(objs, err)   # done() from here; add_done_callback's run
                if self._on_done is not None:
                    try:
                        self._on_done(self)
                    except BaseException:
                        _report("fetch (internal done hook)", self._on_done)
                # As the library drops userdata: a callback that refers to its
                # own task forms no cycle past the end.
                self.callback = self._on_done = self._on_answer = self._progress_cb = None

    def _progress(self, task_h: Optional[int], received: int, total: int) -> None:
        if self._h is None and task_h:
            self._h = task_h   # so that cancel() works from the first progress call on
        progress = self._progress_cb
        if progress is None or self.done():
            return
        prev, self._ctx._cb_thread = self._ctx._cb_thread, threading.get_ident()
        try:
            progress(received, None if total < 0 else total)
        except BaseException:
            _report("progress", progress)
        finally:
            self._ctx._cb_thread = prev

    def __repr__(self) -> str:
        state = "done status=%s" % self.status if self.done() else "running"
        return "<tether.Task fetch %s %s>" % (self.entity, state)
