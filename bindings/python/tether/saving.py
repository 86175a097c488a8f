"""Saving: saves that push the changes to the server (tether.h, "save"),
inserting objects, and the Context's side of editing (ContextSaving).

Every edit is in the store when the call returns; nothing reaches the server
before a save. ``ctx.save()`` waits and raises on failure (ConflictError with
``conflicts``: both sides of each); ``ctx.start_save()`` gives a SaveTask;
``await ctx.save_async()`` suits asyncio.
"""

from __future__ import annotations

import asyncio
import threading
from ctypes import byref, c_char_p, c_int, c_int64, c_size_t, c_void_p
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from . import _lib
from ._types import Delivery, Key, MergePolicy, Value
from .callbacks import _call_in_loop, _progress_trampoline, _report, _resolve, _save_trampoline, _tokens
from .errors import Conflict, TetherError, make_error
from .model import Entity
from .objects import Object, Owner
from .futures import Request
from .values import _convert, _key, _value

# save callback(error, report): error None, or the save's TetherError; and
# progress(answered, total).
SaveCallback = Callable[[Optional[TetherError], "SaveReport"], None]
SaveProgress = Callable[[int, int], None]


class SaveReport:
    """What a save settled: ``saved`` (confirmed by the server),
    ``discarded`` (dropped for the server's record, by ``server_wins``),
    ``failures`` (each (object, exception), still pending) and
    ``conflicts`` (the failures that are conflicts, as Conflicts)."""

    def __init__(self, saved: int = 0, discarded: int = 0,
                 failures: Iterable[Tuple[Object, TetherError]] = (),
                 conflicts: Iterable[Conflict] = ()) -> None:
        self.saved = saved
        self.discarded = discarded
        self.failures = list(failures)
        self.conflicts = list(conflicts)

    def __repr__(self) -> str:
        return "<tether.SaveReport saved=%d discarded=%d failures=%d>" % (
            self.saved, self.discarded, len(self.failures))


def _read_report(ctx: Owner, report: Optional[int]) -> SaveReport:
    """The borrowed report copied into a SaveReport, during the callback."""
    saved, discarded, count = c_size_t(), c_size_t(), c_size_t()
    _lib.tether_save_report_counts(report, byref(saved), byref(discarded))
    _lib.tether_save_report_failure_count(report, byref(count))
    failures: List[Tuple[Object, TetherError]] = []
    conflicts: List[Conflict] = []
    obj_h, status, message = c_void_p(), c_int(), c_char_p()
    local, server_version, nkeys = c_int64(), c_int64(), c_size_t()
    for i in range(count.value):
        _lib.tether_save_report_failure_at(report, i, byref(obj_h), byref(status), byref(message))
        obj = ctx._wrap(obj_h.value, owned=False)
        error = make_error(status.value, (message.value or b"").decode("utf-8", "replace"), _lib.errstr(status.value))
        failures.append((obj, error))
        try:
            _lib.tether_save_report_conflict_at(report, i, byref(local), byref(server_version), byref(nkeys))
        except Exception:
            continue   # not a conflict
        name = c_char_p()
        keys: List[str] = []
        for k in range(nkeys.value):
            _lib.tether_save_report_conflict_key_at(report, i, k, byref(name))
            keys.append(name.value.decode("utf-8"))  # type: ignore[union-attr]  # never NULL on success
        server: Optional[Dict[str, Value]] = None
        if server_version.value >= 0:
            server = {}
            v = _lib.tether_value()
            for attribute in obj.entity.attributes:
                _lib.tether_save_report_server_value(report, i, attribute.name.encode("utf-8"), byref(v))
                try:
                    server[attribute.name] = _convert(v)
                finally:
                    _lib.tether_value_free(byref(v))
        conflicts.append(Conflict(obj, local.value if local.value >= 0 else None,
                                  server_version.value if server_version.value >= 0 else None, keys, server))
    return SaveReport(saved.value, discarded.value, failures, conflicts)


class SaveTask(Request[SaveReport]):
    """An asynchronous save: a concurrent.futures.Future of its SaveReport
    (see Request), and an awaitable. ``status``, ``message``, ``report`` (a
    SaveReport, also when it failed) and ``error`` (the exception a failed
    save raises, exception(), carrying the report's ``saved``,
    ``discarded``, ``failures`` and ``conflicts``) are filled by its one
    final callback."""

    _kind = "save"

    callback: Optional[SaveCallback]
    status: Optional[int]
    message: Optional[str]
    report: Optional[SaveReport]
    error: Optional[TetherError]

    def __init__(self, ctx: Owner, callback: Optional[SaveCallback] = None,
                 progress: Optional[SaveProgress] = None,
                 on_done: Optional[Callable[[SaveTask], None]] = None) -> None:
        super().__init__()
        self._ctx = ctx
        self.callback = callback
        self._progress_cb = progress
        self._on_done = on_done
        self._h = None
        self.status = None
        self.message = None
        self.report = None
        self.error = None
        self._token = next(_tokens)

    def _deliver(self, task_h: Optional[int], status: int, message: Optional[bytes],
                 report: Optional[int]) -> None:
        prev, self._ctx._cb_thread = self._ctx._cb_thread, threading.get_ident()
        try:
            if self._h is None and task_h:
                self._h = task_h
            msg = (message or b"").decode("utf-8", "replace")
            try:
                self.report = _read_report(self._ctx, report)
            except BaseException:
                _report("save (reading the report)", self.callback)
                self.report = SaveReport()
            self.status, self.message = status, msg
            if status != 0:
                error = make_error(status, msg, _lib.errstr(status))
                error.saved, error.discarded = self.report.saved, self.report.discarded
                error.failures, error.conflicts = self.report.failures, self.report.conflicts
                self.error = error
            if self.callback is not None:
                try:
                    self.callback(self.error, self.report)
                except BaseException:
                    _report("save", self.callback)
        finally:
            self._ctx._cb_thread = prev
            self._settle(self.report, self.error)
            if self._on_done is not None:
                try:
                    self._on_done(self)
                except BaseException:
                    _report("save (internal done hook)", self._on_done)
            self.callback = self._on_done = self._progress_cb = None

    def _progress(self, task_h: Optional[int], answered: int, total: int) -> None:
        if self._h is None and task_h:
            self._h = task_h
        progress = self._progress_cb
        if progress is None or self.done():
            return
        try:
            progress(answered, total)
        except BaseException:
            _report("save progress", progress)

    def __repr__(self) -> str:
        return "<tether.SaveTask %s>" % ("done status=%s" % self.status if self.done() else "running")


def _merge(merge: Optional[str]) -> int:
    if merge is None:
        return -1
    try:
        return _lib.MERGE_POLICIES[merge]
    except KeyError:
        raise ValueError("merge must be one of %s, not %r" % (", ".join(sorted(_lib.MERGE_POLICIES)), merge)) from None


class ContextSaving:
    """The editing and saving half of tether.Context."""

    if TYPE_CHECKING:
        # Context's (declared here for the methods below).
        _h: Optional[int]
        _delivery: int
        delivery: Delivery

        def _wrap(self, addr: Optional[int], owned: bool, entity: Optional[Entity] = None) -> Object: ...
        def _loop_acquire(self, loop: asyncio.AbstractEventLoop) -> None: ...
        def _loop_release(self) -> None: ...
        def _objects_of(self, results: Optional[int], count: int) -> List[Object]: ...
        def entity(self, name: str) -> Entity: ...

    def insert(self, entity: str, values: Optional[Mapping[Key, Value]] = None,
               id: Optional[str] = None) -> Object:
        """A new Object of `entity`, with `values` (a dict by name or code)
        set: a pending insert. All or nothing: a key the entity does not
        have (NotFoundError), a value of the wrong type (TypeMismatchError)
        or outside the allowed values (InvalidError) raises and inserts
        nothing. `id` None: a UUID made here, so a retried insert can never
        make two records."""
        items = list((values or {}).items())
        names: List[bytes] = []
        for key, _ in items:
            if isinstance(key, int) and not isinstance(key, bool):
                names.append(self.entity(entity).attribute(key).name.encode("utf-8"))
            else:
                names.append(_key(key))
        keys = (c_char_p * max(1, len(items)))(*names)
        array = (_lib.tether_value * max(1, len(items)))()
        keep = []
        for i, (_, value) in enumerate(items):
            array[i], text = _value(value)
            keep.append(text)
        out = c_void_p()
        _lib.tether_context_insert_values(self._h, _key(entity), None if id is None else _key(id),
                                          keys, array, len(items), byref(out))
        del keep
        return self._wrap(out.value, owned=True)

    def rollback(self) -> None:
        """Forgets every unsaved change of this context."""
        _lib.tether_context_rollback(self._h)

    @property
    def change_count(self) -> int:
        """How many objects of this context have an unsaved change."""
        out = c_size_t()
        _lib.tether_context_change_count(self._h, byref(out))
        return out.value

    @property
    def has_changes(self) -> bool:
        """True while the context has unsaved changes (change_count > 0)."""
        return self.change_count > 0

    @property
    def changed_objects(self) -> List[Object]:
        """The Objects with an unsaved change (insert, update or delete), in
        the order they were first changed; each one's ``pending`` says which,
        ``changed_keys`` and ``committed()`` what."""
        out = c_void_p()
        _lib.tether_context_changes(self._h, byref(out))
        try:
            count = c_size_t()
            _lib.tether_results_count(out, byref(count))
            return self._objects_of(out.value, count.value)
        finally:
            _lib.tether_results_free(out)

    def start_save(self, *, merge: Optional[MergePolicy] = None, callback: Optional[SaveCallback] = None,
                   progress: Optional[SaveProgress] = None,
                   _on_done: Optional[Callable[[SaveTask], None]] = None) -> SaveTask:
        """Starts saving every unsaved change; returns a SaveTask.
        callback(error, report) runs once, at the end (error None, or the
        save's TetherError, as the task's exception()); progress
        (answered, total) as the server answers. merge: "report" (the
        default: conflicts are reported, changes kept), "server_wins",
        "client_wins" or "properties" ("merge_properties" too); None: the context's."""
        options = _lib.tether_save_options()
        _lib.tether_save_options_init(byref(options), _lib.SAVE_OPTIONS_VERSION)
        options.merge_policy = _merge(merge)
        if progress is not None:
            options.progress = _progress_trampoline
        task = SaveTask(self, callback, progress, _on_done)  # type: ignore[arg-type]  # self: a Context
        task._register()
        out = c_void_p()
        try:
            _lib.tether_save_start(self._h, byref(options), _save_trampoline, task._token, byref(out))
        except BaseException:
            task._unregister()
            raise
        if task._h is None:
            task._h = out.value
        return task

    def save(self, *, merge: Optional[MergePolicy] = None, progress: Optional[SaveProgress] = None,
             timeout: Optional[float] = None) -> SaveReport:
        """Saves every unsaved change and waits: returns a SaveReport, or
        raises the save's error (ConflictError with ``conflicts``, ...) with
        the report's counts on it. Changes not saved stay pending."""
        task = self.start_save(merge=merge, progress=progress)
        task._wait_or_cancel(timeout, "the save")
        return task.result()

    async def save_async(self, *, merge: Optional[MergePolicy] = None,
                         progress: Optional[SaveProgress] = None) -> SaveReport:
        """As save(), for asyncio: the context's callbacks are delivered into
        the running loop (in poll mode, its descriptor watched by the loop)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[SaveReport] = loop.create_future()

        def done(task: SaveTask) -> None:
            _call_in_loop(loop, _resolve, future, task.report, task.error)

        attached = self._delivery == _lib.DELIVER_POLL
        if attached:
            self._loop_acquire(loop)
        try:
            task = self.start_save(merge=merge, progress=progress, _on_done=done)
            try:
                return await future
            except asyncio.CancelledError:
                task.cancel()
                raise
        finally:
            if attached:
                self._loop_release()


    def local(self, obj: Object) -> Object:
        """This context's Object for the record `obj` (of a sibling) stands for."""
        out = c_void_p()
        _lib.tether_context_local_object(self._h, obj._h, byref(out))
        return self._wrap(out.value, owned=True)
