"""Editing and saving: setting values, inserting and deleting objects, and
saves that push the changes to the server (tether.h, "editing" and "save").

Every edit is in the store when the call returns; nothing reaches the server
before a save. ``ctx.save()`` waits and raises on failure (ConflictError with
``conflicts``: both sides of each); ``ctx.start_save()`` gives a SaveTask;
``await ctx.save_async()`` suits asyncio.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import threading
import time
from ctypes import byref, c_char_p, c_int, c_int64, c_size_t, c_void_p
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Tuple, overload)

from . import _lib
from ._types import Key, MergePolicy, Pending, Value
from .errors import E_BUSY, BusyError, HandleError, TetherError, make_error

if TYPE_CHECKING:
    from typing import TypeVar

    from ._types import Delivery
    from .context import Context, Entity, Object

    _T = TypeVar("_T")

# save callback(status, message, report) and progress(answered, total).
SaveCallback = Callable[[int, str, "SaveReport"], None]
SaveProgress = Callable[[int, int], None]


def _value(value: Value) -> Tuple[_lib.tether_value, Optional[ctypes.Array[ctypes.c_char]]]:
    """A Python value as a tether_value, and what keeps its text alive:
    None, bool, int, float, str, or a list/dict (as JSON)."""
    v = _lib.tether_value()
    keep = None
    if value is None:
        v.type = _lib.TYPE_NULL
    elif isinstance(value, bool):
        v.type, v.integer = _lib.TYPE_BOOLEAN, int(value)
    elif isinstance(value, int):
        if not -2 ** 63 <= value < 2 ** 63:
            raise OverflowError("tether: %d does not fit a 64-bit integer" % value)
        v.type, v.integer = _lib.TYPE_INTEGER, value
    elif isinstance(value, float):
        v.type, v.real = _lib.TYPE_REAL, value
    elif isinstance(value, (str, list, dict, tuple)):
        text = value if isinstance(value, str) else json.dumps(value, allow_nan=False)
        keep = ctypes.create_string_buffer(text.encode("utf-8"))
        v.type = _lib.TYPE_TEXT if isinstance(value, str) else _lib.TYPE_JSON
        v.text, v.length = ctypes.addressof(keep), len(keep) - 1
    else:
        raise TypeError("tether: cannot set a %s: give None, bool, int, float, str, list or dict"
                        % type(value).__name__)
    return v, keep


def _key(key: Any) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TypeError("key must be an attribute name (str) or code (int), not %s" % type(key).__name__)


def _no_key(obj: Any, name: str) -> str:
    """The AttributeError message for a name the entity does not have, with
    the nearest key ("did you mean ...?") when one is near."""
    import difflib
    ent = obj.__dict__.get("entity")
    ident = obj.__dict__.get("id")
    if ident is None:
        try:
            ident = obj.id
        except Exception:
            ident = "?"
    keys = [a.name for a in ent.attributes] + list(ent._peek_forms)
    near = difflib.get_close_matches(name, keys, n=1)
    hint = " (did you mean %s?)" % near[0] if near else ""
    return "%s object %r has no attribute %r%s" % (ent.name, ident, name, hint)


class ObjectEditing:
    """The editing half of tether.Object."""

    # Set by Object (declared here for the methods below).
    _h: Optional[int]
    _ctx: Context
    entity: Entity

    def set(self, key: Key, value: Value) -> None:
        """Sets `key` (a name or code) to `value`, checked against the
        model's type and the spec's allowed values; in the store at once.
        Assigning an attribute (``obj.Title = "x"``) does the same."""
        v, keep = _value(value)
        if isinstance(key, int) and not isinstance(key, bool):
            _lib.tether_object_set_code(self._h, key, byref(v))
        else:
            _lib.tether_object_set(self._h, _key(key), byref(v))
        del keep

    def __setattr__(self, name: str, value: Value) -> None:
        # Attributes of the model are set through the library; the Object's
        # own (underscored, its entity, its properties) are plain. Any other
        # name is a mistake: kept on the Python object, it would read back
        # and never be saved.
        d = self.__dict__
        ent = d.get("entity")
        if ent is None or name[0] == "_" or name == "entity":
            object.__setattr__(self, name, value)
        elif name in ent._names:
            self.set(name, value)
        elif hasattr(type(self), name):
            object.__setattr__(self, name, value)   # a property says itself what it allows
        else:
            raise AttributeError(_no_key(self, name))

    def __setitem__(self, key: Key, value: Value) -> None:
        """``obj["Name"] = v`` is ``obj.set("Name", v)``: for keys an
        attribute cannot spell, or that the Object's own names hide."""
        self.set(key, value)

    def delete(self) -> None:
        """Deletes the record: at once here (delete rules apply to records
        referring to it), on the server at the next save."""
        _lib.tether_object_delete(self._h)

    def rollback(self) -> None:
        """Forgets the object's unsaved change (and its last conflict)."""
        _lib.tether_object_rollback(self._h)

    @property
    def pending(self) -> Optional[Pending]:
        """The unsaved change: None, "insert", "update" or "delete"."""
        out = c_int()
        _lib.tether_object_pending(self._h, byref(out))
        return _lib.PENDING_NAMES.get(out.value)

    @property
    def has_changes(self) -> bool:
        """True while the object has an unsaved change (pending is not None)."""
        return self.pending is not None

    @property
    def changed_keys(self) -> List[str]:
        """The attributes an unsaved insert or update sets, in model order."""
        count = c_size_t()
        _lib.tether_object_changed_key_count(self._h, byref(count))
        name = c_char_p()
        keys: List[str] = []
        for i in range(count.value):
            _lib.tether_object_changed_key_at(self._h, i, byref(name))
            keys.append(name.value.decode("utf-8"))  # type: ignore[union-attr]  # never NULL on success
        return keys

    @overload
    def committed(self, key: Key) -> Value: ...
    @overload
    def committed(self, key: Key, default: _T) -> Value | _T: ...
    def committed(self, key: Key, default: Any = None) -> Any:
        """The value of `key` as the server last confirmed it, whatever is
        pending; `default` when there is none (an insert, or not cached)."""
        from .context import _convert
        from .errors import NotCachedError
        v = _lib.tether_value()
        try:
            _lib.tether_object_committed(self._h, _key(key), byref(v))
        except NotCachedError:
            return default
        try:
            return _convert(v)
        finally:
            _lib.tether_value_free(byref(v))

    def related(self, key: str) -> Optional[Object]:
        """The Object the to-one relationship `key` refers to (a fault until
        read), or None when the reference is null. Raises NotFoundError when
        its target is known deleted (or its store is not attached), and
        InvalidError when `key` is not a relationship."""
        out = c_void_p()
        _lib.tether_object_related(self._h, _key(key), byref(out))
        return self._ctx._wrap(out.value, owned=True) if out.value else None


    def set_related(self, key: str, target: Optional[Object]) -> None:
        """Points the to-one relationship `key` at the Object `target` (None:
        at nothing): its id in the same store, its URI across stores."""
        _lib.tether_object_set_related(self._h, _key(key), None if target is None else target._h)

    @property
    def uri(self) -> str:
        """The object's name across stores: tether://<store>/<entity>/<id>."""
        value = _lib.tether_value()
        _lib.tether_object_uri(self._h, byref(value))
        try:
            return ctypes.string_at(value.text, value.length).decode("utf-8")
        finally:
            _lib.tether_value_free(byref(value))


class Conflict:
    """A change the server refused because its record moved on: ``object``,
    ``local_version`` (None for an insert), ``server_version`` and
    ``server`` (the server's values by name; both None if it deleted the
    record), and ``keys``, those whose local and server values differ."""

    object: Object
    local_version: Optional[int]
    server_version: Optional[int]
    keys: List[str]
    server: Optional[Dict[str, Value]]

    def __init__(self, obj: Object, local_version: Optional[int], server_version: Optional[int],
                 keys: List[str], server: Optional[Dict[str, Value]]) -> None:
        self.object = obj
        self.local_version = local_version
        self.server_version = server_version
        self.keys = keys
        self.server = server

    def __repr__(self) -> str:
        return "<tether.Conflict %r keys=%r server_version=%r>" % (self.object, self.keys, self.server_version)


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


def _read_report(ctx: Context, report: Optional[int]) -> SaveReport:
    """The borrowed report copied into a SaveReport, during the callback."""
    from .context import _convert
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


@_lib.SAVE_CB
def _save_trampoline(task: Optional[int], status: int, message: Optional[bytes], report: Optional[int],
                     userdata: Optional[int]) -> None:
    from .context import _registry, _report
    try:
        entry = _registry.get(userdata)
        if entry is None:
            from .context import log
            log.warning("tether: save callback for unknown or finished save %r (status %d)", userdata, status)
            return
        entry._deliver(task, status, message, report)
    except BaseException:
        _report("save", None)


class Request:
    """What a fetch (Task) and a save (SaveTask) share: their place in the
    callback registry until the final callback, cancel and wait."""

    _kind = "request"
    _ctx: Context
    _h: Optional[int]
    _token: int
    _event: threading.Event
    done: bool

    def _register(self) -> None:
        from .context import _registry
        _registry[self._token] = self
        self._ctx._pending[self._token] = self

    def _unregister(self) -> None:
        from .context import _registry
        _registry.pop(self._token, None)
        self._ctx._pending.pop(self._token, None)

    def cancel(self) -> bool:
        """Cancels: the callback runs once more, final, with
        TETHER_E_CANCELLED. True if cancelled now, False if it had already
        finished."""
        if self.done or self._h is None:
            return False
        try:
            _lib.tether_task_cancel(self._h)
        except HandleError:
            return False
        return True

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits for the final callback; True if it came. In poll mode this
        calls Context.poll() while waiting (so do not call it from inside a
        callback of the same context)."""
        ctx = self._ctx
        if ctx._delivery == _lib.DELIVER_POLL:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self.done:
                left = 1.0 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    break
                ctx.poll(max(1, min(1000, int(left * 1000))))
            return self.done
        if ctx._cb_thread == threading.get_ident() and not self.done:
            # Callbacks of a context run one at a time: waiting here would
            # wait for ourselves.
            raise BusyError("cannot wait for a %s from inside a callback of its context" % self._kind, status=E_BUSY)
        return self._event.wait(timeout)


class SaveTask(Request):
    """An asynchronous save: ``done``, ``status``, ``message``, ``report``
    (a SaveReport) and ``error`` (the exception a failed save raises,
    carrying the report's ``saved``, ``discarded``, ``failures`` and
    ``conflicts``) are filled by its one final callback."""

    _kind = "save"

    callback: Optional[SaveCallback]
    status: Optional[int]
    message: Optional[str]
    report: Optional[SaveReport]
    error: Optional[TetherError]

    def __init__(self, ctx: Context, callback: Optional[SaveCallback] = None,
                 progress: Optional[SaveProgress] = None,
                 on_done: Optional[Callable[[SaveTask], None]] = None) -> None:
        from .context import _tokens
        self._ctx = ctx
        self.callback = callback
        self._progress_cb = progress
        self._on_done = on_done
        self._h = None
        self._event = threading.Event()
        self.done = False
        self.status = None
        self.message = None
        self.report = None
        self.error = None
        self._token = next(_tokens)

    def _deliver(self, task_h: Optional[int], status: int, message: Optional[bytes],
                 report: Optional[int]) -> None:
        from .context import _report
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
                    self.callback(status, msg, self.report)
                except BaseException:
                    _report("save", self.callback)
        finally:
            self._ctx._cb_thread = prev
            self.done = True
            self._unregister()
            self._event.set()
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
        if progress is None or self.done:
            return
        from .context import _report
        try:
            progress(answered, total)
        except BaseException:
            _report("save progress", progress)

    def __repr__(self) -> str:
        return "<tether.SaveTask %s>" % ("done status=%s" % self.status if self.done else "running")


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
        callback(status, message, report) runs once, at the end; progress
        (answered, total) as the server answers. merge: "report" (the
        default: conflicts are reported, changes kept), "server_wins",
        "client_wins" or "merge_properties"; None: the context's."""
        from .context import _progress_trampoline
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
        if not task.wait(timeout):
            task.cancel()
            task.wait(5)
            raise TimeoutError("tether: the save did not finish in %s s" % timeout)
        if task.error is not None:
            raise task.error
        return task.report  # type: ignore[return-value]  # set by the final callback, which came

    async def save_async(self, *, merge: Optional[MergePolicy] = None,
                         progress: Optional[SaveProgress] = None) -> SaveReport:
        """As save(), for asyncio: the context's callbacks are delivered into
        the running loop (in poll mode, its descriptor watched by the loop)."""
        from .context import _call_in_loop, _resolve
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

    def open_sibling(self, name: str, *, delivery: Optional[Delivery] = None) -> Context:
        """Another Context on this store, model and connection, with its own
        objects and unsaved changes (kept in the store under `name`): a
        background context beside a main one. A save in either updates the
        objects of the other. Close it as any context."""
        from .context import Context
        return Context._sibling(self, name, delivery or self.delivery)  # type: ignore[arg-type]  # self: a Context

    def local(self, obj: Object) -> Object:
        """This context's Object for the record `obj` (of a sibling) stands for."""
        out = c_void_p()
        _lib.tether_context_local_object(self._h, obj._h, byref(out))
        return self._wrap(out.value, owned=True)
