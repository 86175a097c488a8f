"""Calls from C into Python: the trampolines, the request registry and the
hand-off to an asyncio loop.

Callbacks from C go through module-level trampolines (one CFUNCTYPE per
callback signature, alive for the life of the process). Each request gets an
integer token, passed to C as its userdata; the token maps to the Python
object that handles it (its ``_deliver``), in a process-wide registry and in
the owning context's ``_pending`` dict. The entry is removed in the
request's final callback, so the Python callable stays referenced exactly as
long as C may call it, and no CFUNCTYPE thunk is ever freed while C could
still jump into it."""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import weakref
from typing import Any, Callable, Dict, Optional

from . import _lib
from .errors import HandleError

log = logging.getLogger("tether")


def _report(kind: str, callback: object) -> None:
    log.exception("exception in a tether %s callback %r (ignored)", kind, callback)


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _call_in_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: Any) -> None:
    """Run fn(*args) in `loop`: directly if we are on its thread, else
    thread-safely. Silently dropped if the loop is closed."""
    if _on_loop_thread(loop):
        fn(*args)
        return
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # loop closed
        pass


def _resolve(fut: asyncio.Future[Any], result: Any = None, error: Optional[BaseException] = None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


# How many object handles a fetch's answer is read by per call.
_CHUNK = 1024


def _release_object(handle: Optional[int]) -> None:
    """Gives back one reference to an object handle; a handle its closed
    context took with it is no error."""
    try:
        _lib.tether_object_free(handle)
    except HandleError:
        pass


# ------------------------------------------------------------------ callback registry

_tokens = itertools.count(1)
_registry: Dict[Optional[int], Any] = {}   # token -> Task | Observer (C's userdata: NULL is None)


def _release_results(results: Optional[int]) -> None:
    """Releases a fetch callback's results handle: the callee owns it, so
    every callback ends with this, whatever else happened."""
    if not results:
        return
    try:
        _lib.tether_results_free(results)
    except HandleError:
        pass  # its context closed meanwhile, and took the results with it


@_lib.FETCH_CB
def _fetch_trampoline(task: Optional[int], phase: int, status: int, message: Optional[bytes],
                      results: Optional[int], userdata: Optional[int]) -> None:
    entry = None
    try:
        entry = _registry.get(userdata)
        if entry is None:
            log.warning("tether: fetch callback for unknown or finished request %r "
                        "(phase %d, status %d)", userdata, phase, status)
            return
        entry._deliver(task, phase, status, message, results)  # releases results
    except BaseException:  # never let anything propagate into C
        _report("fetch", None)
    finally:
        if entry is None:
            try:
                _release_results(results)
            except BaseException:
                _report("fetch (releasing results)", None)


@_lib.OBSERVER_CB
def _observer_trampoline(obj: Optional[int], key: Optional[bytes], status: int,
                         userdata: Optional[int]) -> None:
    try:
        entry = _registry.get(userdata)
        if entry is None:
            log.warning("tether: observer callback for unknown or removed observer %r "
                        "(status %d)", userdata, status)
            return
        entry._deliver(obj, key, status)
    except BaseException:
        _report("observer", None)


@_lib.PROGRESS_CB
def _progress_trampoline(task: Optional[int], received: int, total: int, userdata: Optional[int]) -> None:
    try:
        entry = _registry.get(userdata)
        if entry is None:
            # The library promises none after the FINAL callback (which
            # unregisters the task): say so rather than drop it quietly.
            log.warning("tether: progress callback for unknown or finished request %r "
                        "(received %d)", userdata, received)
            return
        entry._progress(task, received, total)
    except BaseException:
        _report("progress", None)


# ------------------------------------------------------------------ exit

_open_contexts: weakref.WeakSet[Any] = weakref.WeakSet()   # every open Context


@atexit.register
def _close_open_contexts() -> None:
    """Closes the contexts still open at exit while the interpreter can still
    run their final callbacks. Once it is finalizing, a library thread that
    calls into Python never comes back, and a close waiting for that
    callback would wait for ever."""
    for ctx in list(_open_contexts):
        try:
            ctx.close()
        except BaseException:
            _report("exit (closing a context)", None)


@_lib.SAVE_CB
def _save_trampoline(task: Optional[int], status: int, message: Optional[bytes], report: Optional[int],
                     userdata: Optional[int]) -> None:
    try:
        entry = _registry.get(userdata)
        if entry is None:
            log.warning("tether: save callback for unknown or finished save %r (status %d)", userdata, status)
            return
        entry._deliver(task, status, message, report)
    except BaseException:
        _report("save", None)
