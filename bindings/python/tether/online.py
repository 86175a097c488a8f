"""Whether a context's server answers, and being told when that changes.

``Context.online`` is True while the server answers and False while it
cannot be reached (refused, closed before a byte, unknown name, timed out
with nothing back); any answer, whatever its status, makes it True again, so
a context opened offline comes back online by itself at the first request
that reaches the server. Siblings share it: one server, one state.
``Context.observe_online(callback)`` returns an :class:`OnlineObserver`.
"""

from __future__ import annotations

import threading
from ctypes import byref, c_void_p
from typing import Callable, Optional

from . import _lib
from .callbacks import _registry, _report, _tokens, log
from .errors import E_CANCELLED, HandleError
from .objects import Owner


OnlineCallback = Callable[[bool], object]


@_lib.ONLINE_CB
def _online_trampoline(ctx: Optional[int], online: int, status: int, userdata: Optional[int]) -> None:
    try:
        entry = _registry.get(userdata)
        if entry is None:
            log.warning("tether: online callback for unknown or removed observer %r (status %d)", userdata, status)
            return
        entry._deliver(bool(online), status)
    except BaseException:
        _report("online observer", None)


class OnlineObserver:
    """Calls callback(online) each time the context goes offline (False) or
    back online (True), in order, once per change, on the context's delivery
    (the library's thread, or poll() in poll mode). remove() it when done;
    closing the context does too. ``removed`` is True once it has ended."""

    callback: Optional[OnlineCallback]

    def __init__(self, ctx: Owner, callback: OnlineCallback) -> None:
        self.context = ctx
        self.callback = callback
        self.removed = False
        self._final = threading.Event()
        self._h: Optional[int] = None
        self._token = next(_tokens)
        _registry[self._token] = self
        ctx._pending[self._token] = self
        out = c_void_p()
        try:
            _lib.tether_context_observe_online(ctx._h, _online_trampoline, self._token, byref(out))
        except BaseException:
            self._unregister()
            raise
        self._h = out.value

    def _unregister(self) -> None:
        _registry.pop(self._token, None)
        self.context._pending.pop(self._token, None)

    def _deliver(self, online: bool, status: int) -> None:
        ctx = self.context
        prev, ctx._cb_thread = ctx._cb_thread, threading.get_ident()
        try:
            if status != E_CANCELLED and self.callback is not None:
                self.callback(online)
        except BaseException:
            _report("online observer", self.callback)
        finally:
            ctx._cb_thread = prev
            if status == E_CANCELLED:
                self.removed = True
                self.callback = None   # as the library drops userdata
                self._unregister()
                self._final.set()

    def remove(self) -> bool:
        """Stops the calls. True if removed now, False if it was already."""
        if self.removed or self._h is None:
            return False
        try:
            _lib.tether_observer_cancel(self._h)
        except HandleError:
            return False
        return True

    def __enter__(self) -> OnlineObserver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return "<tether.OnlineObserver%s>" % (" removed" if self.removed else "")
