"""Request: what a fetch (Task) and a save (SaveTask) share. Each is a
concurrent.futures.Future (result(timeout), exception(), done(), cancel(),
add_done_callback; concurrent.futures.wait and as_completed take it) and an
awaitable (``await task``), resolved by its one final callback."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any, Generator, Optional, TypeVar

from . import _lib
from .callbacks import _registry
from .errors import E_BUSY, BusyError, HandleError, TetherError
from .objects import Owner

_R = TypeVar("_R")


class Request(concurrent.futures.Future[_R]):
    """A running request of a context, as a concurrent.futures.Future: its
    result is the final answer, its exception() the final TetherError.

    cancel() asks the library to cancel and returns True if it was still
    running; the request then ends, as every request does, with its final
    callback, whose error is a TaskCancelledError: that is its
    exception() (cancelled() stays False: the library, not this object,
    says when it has ended, and a request may finish before the cancel
    lands).

    In poll delivery, result() and exception() poll the context while they
    wait (from one thread at a time, as Context.poll); concurrent.futures.wait
    and add_done_callback need something else to poll it (a thread, or an
    asyncio loop: ``await task`` attaches the running loop while it waits).
    From inside one of its context's callbacks, waiting for a request that
    has not finished raises BusyError (callbacks run one at a time: it would
    wait for itself)."""

    _kind = "request"
    _ctx: Owner
    _h: Optional[int]
    _token: int

    def _register(self) -> None:
        _registry[self._token] = self
        self._ctx._pending[self._token] = self

    def _unregister(self) -> None:
        _registry.pop(self._token, None)
        self._ctx._pending.pop(self._token, None)

    def _settle(self, result: Any, error: Optional[TetherError]) -> None:
        """The final callback's end: out of the registry, then resolved
        (which runs the done callbacks, here, on the delivering thread)."""
        self._unregister()
        if error is not None:
            self.set_exception(error)
        else:
            self.set_result(result)

    def cancel(self) -> bool:
        """Asks the library to cancel: the final callback comes with a
        TaskCancelledError. True if the request was still running, False
        if it had finished."""
        if self.done() or self._h is None:
            return False
        try:
            _lib.tether_task_cancel(self._h)
        except HandleError:
            return False
        return True

    def running(self) -> bool:
        """True until the final callback (a request runs once started)."""
        return not self.done()

    def _ready(self, timeout: Optional[float]) -> None:
        if self.done():
            return
        ctx = self._ctx
        if ctx._cb_thread == threading.get_ident():
            raise BusyError("cannot wait for a %s from inside a callback of its context" % self._kind,
                            status=E_BUSY)
        if ctx._delivery != _lib.DELIVER_POLL:
            return   # the library's thread resolves it: Future's own wait
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done():
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise concurrent.futures.TimeoutError()
            ctx.poll(max(1, min(1000, int(left * 1000))))

    def _wait_or_cancel(self, timeout: Optional[float], what: str) -> None:
        """Waits for the final callback; past `timeout`, cancels, gives the
        cancel 5 s to land and raises TimeoutError."""
        try:
            self.exception(timeout)
        except concurrent.futures.TimeoutError:
            self.cancel()
            try:
                self.exception(5)
            except concurrent.futures.TimeoutError:
                pass
            raise TimeoutError("tether: %s did not finish in %s s" % (what, timeout)) from None

    def result(self, timeout: Optional[float] = None) -> _R:
        """The final answer, waiting up to `timeout` seconds (None: no
        limit) for it; raises the final error, or TimeoutError."""
        self._ready(timeout)
        return super().result(timeout)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The final error (None on success), waiting as result() does."""
        self._ready(timeout)
        return super().exception(timeout)

    def __await__(self) -> Generator[Any, None, _R]:
        return self._awaited().__await__()

    async def _awaited(self) -> _R:
        # Poll delivery: the loop watches the context's descriptor until
        # the final callback. Cancelling the awaiting asyncio task cancels
        # the request (wrap_future passes the cancel on).
        loop = asyncio.get_running_loop()
        ctx: Any = self._ctx
        poll = ctx._delivery == _lib.DELIVER_POLL and not self.done()
        if poll:
            ctx._loop_acquire(loop)
        try:
            return await asyncio.wrap_future(self, loop=loop)
        finally:
            if poll:
                ctx._loop_release()
