"""Context, Entity, Attribute, Object, Observer and Task: the Python surface.

Threading: in "thread" delivery the library calls back on a thread of its
own; in "poll" delivery callbacks run inside Context.poll() on the caller's
thread (or from an asyncio loop, see Context.attach / fetch_async).

Callbacks from C go through two module-level trampolines (one CFUNCTYPE per
callback signature, alive for the life of the process). Each request gets an
integer token, passed to C as its userdata; the token maps to the Python
object that handles it, in a process-wide registry and in the owning
context's ``_pending`` dict. The entry is removed in the request's final
callback (FINAL phase for a fetch, TETHER_E_CANCELLED for an observer), so
the Python callable stays referenced exactly as long as C may call it, and no
CFUNCTYPE thunk is ever freed while C could still jump into it.

Ownership: an Object owns one reference to its object handle and releases it
when Python drops the Object; the context keeps its Objects only weakly, for
uniquing. A fetch callback's results handle is the binding's: it is turned
into Objects, ids, a count or values (each Object taking its own reference)
and released at once, whatever happens. The one exception is a batched
objects fetch (batch > 0): its handle goes to a Results, which owns it and
releases it on close() or when garbage-collected (a LiveFetch closes each
answer's Results itself, at the next answer or its end).

Live fetches (live=True) answer until cancelled; a LiveFetch (fetch_live)
is one as an asyncio iterator, cancelled when its loop lets go of it.
"""

from __future__ import annotations

import asyncio
import atexit
import collections.abc
import ctypes
import itertools
import json
import logging
import operator
import os
import struct
import sys
import threading
import time
import warnings
import weakref
from ctypes import byref, c_char_p, c_int, c_int64, c_size_t, c_uint, c_void_p
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Literal, Mapping,
                    Optional, Sequence, Tuple, Type, TypeVar, Union, cast, overload)

from . import _lib
from ._types import Delivery, Key, MergePolicy, Phase, Policy, ResultType, Value
from .saving import ContextSaving, ObjectEditing, Request, _no_key
from .query import KEEP, OnCached, Query, QueryResult, make_query   # issue 25: Context.query
from .errors import (BusyError, UnsavedChangesWarning, OfflineWarning, HandleError, NetworkError, NotCachedError,
                     NotFoundError, TetherError, make_error,
                     E_BUSY, E_CANCELLED, E_HANDLE, E_NOT_CACHED)

if TYPE_CHECKING:
    from .host import Connection
    from .online import OnlineCallback, OnlineObserver

log = logging.getLogger("tether")

_T = TypeVar("_T")
_C = TypeVar("_C", bound="Context")

# What a fetch takes and gives, by the types its options accept.
Sort = Union[None, str, Sequence[str]]
Argument = Union[None, bool, int, float, str]        # a predicate's $n
Progress = Callable[[int, Optional[int]], object]     # progress(received, total or None)
# callback(phase, status, message, answer); a live fetch's takes `changes` too.
FetchCallback = Callable[[Phase, int, str, Any], object]
LiveCallback = Callable[[Phase, int, str, Any, Optional["Changes"]], object]
ObserverCallback = Callable[["Object", str, int], object]   # (obj, key, status)
Row = Dict[str, Value]                                 # a "values" answer's row
# An "objects" answer with `batch` set: a Results, or a list when there was
# nothing to read (an empty answer, an error's, a cancel's).
ObjectsAnswer = Union[List["Object"], "Results"]



class Answer(List[_T]):
    """fetch_wait's final answer as a list (objects, ids or rows). ``offline``
    is True when the server could not be reached and this is the cache's
    answer instead (with any policy but "server_only", which raises)."""

    offline: bool = False


class Count(int):
    """fetch_wait's final count; ``offline`` as for Answer."""

    offline: bool = False


def _marked(answer: Any, offline: bool) -> Any:
    """`answer` as fetch_wait gives it: it says whether it is offline."""
    if isinstance(answer, Results):
        answer.offline = offline
        return answer
    marked: Any = Count(answer) if isinstance(answer, int) else Answer(answer)
    marked.offline = offline
    return marked


PHASES: Dict[int, Phase] = {_lib.PHASE_CACHED: "cached", _lib.PHASE_FINAL: "final", _lib.PHASE_LIVE: "live"}

POLICIES: Dict[str, int] = {
    "cache_then_server": _lib.POLICY_CACHE_THEN_SERVER,
    "cache_only": _lib.POLICY_CACHE_ONLY,
    "server_only": _lib.POLICY_SERVER_ONLY,
    "cache_else_server": _lib.POLICY_CACHE_ELSE_SERVER,
}

DELIVERIES: Dict[str, int] = {"thread": _lib.DELIVER_THREAD, "poll": _lib.DELIVER_POLL}

RESULT_TYPES: Dict[str, int] = {
    "objects": _lib.RESULT_OBJECTS,
    "ids": _lib.RESULT_IDS,
    "count": _lib.RESULT_COUNT,
    "values": _lib.RESULT_VALUES,
}

SIZE_MAX = (1 << (8 * ctypes.sizeof(c_size_t))) - 1

OPERATIONS = (("fetch", _lib.OP_FETCH), ("insert", _lib.OP_INSERT),
              ("update", _lib.OP_UPDATE), ("delete", _lib.OP_DELETE))


# ------------------------------------------------------------------ helpers

def _cstr(value: object, what: str) -> bytes:
    """str -> UTF-8 bytes for C; bytes pass through unchanged (so a caller can
    hand the library arbitrary bytes, e.g. to see it reject bad UTF-8)."""
    if isinstance(value, bytes):
        b = value
    elif isinstance(value, str):
        b = value.encode("utf-8")
    else:
        raise TypeError("%s must be str, not %s" % (what, type(value).__name__))
    if b"\x00" in b:
        raise ValueError("%s must not contain NUL characters" % what)
    return b


def _cstr_opt(value: object, what: str) -> Optional[bytes]:
    return None if value is None else _cstr(value, what)


# Any: most are C strings the header promises are never NULL (names, ids),
# typed str where they land; the others are Optional[str] there.
def _pystr(b: Optional[bytes]) -> Any:
    return None if b is None else b.decode("utf-8", "replace")


def _convert(v: _lib.tether_value) -> Any:
    """A tether_value -> a Python value. Does not clear it."""
    t = v.type
    if t == _lib.TYPE_NULL:
        return None
    if t == _lib.TYPE_TEXT:
        return ctypes.string_at(v.text, v.length).decode("utf-8") if v.text else ""
    if t == _lib.TYPE_INTEGER:
        return int(v.integer)
    if t == _lib.TYPE_REAL:
        return float(v.real)
    if t == _lib.TYPE_BOOLEAN:
        return bool(v.integer)
    if t == _lib.TYPE_JSON:
        return json.loads(ctypes.string_at(v.text, v.length).decode("utf-8")) if v.text else None
    raise TetherError("value of unknown type %d" % t)


# ------------------------------------------------------------------ reading values fast
#
# peek/get and a values fetch read many values; ctypes' per-call costs
# dominate them, so their path avoids what the general one pays for: the key's
# bytes are cached, the status is tested inline (no errcheck), the value
# struct is reused and passed by address (no byref, no POINTER conversion),
# its fields are read in one unpack, and tether_value_free is called only
# when the value holds a text (TEXT and JSON: the only buffer a value owns;
# clearing any other is free(NULL) and zeroing).

# Value buffers, each a tether_value's bytes as (address, memoryview). A read
# takes one from this pool and gives it back after (list pop/append are
# atomic), so a buffer has one user at a time, whatever the threads, and a
# read that runs inside another on the same thread (a finalizer, a signal
# handler) takes one of its own. Between reads a buffer owns no text.
_VALUES: List[Tuple[int, memoryview]] = []
_VALUE_SIZE = ctypes.sizeof(_lib.tether_value)
# type, integer, real, text (an address), length, in one call.
_VALUE_LAYOUT = struct.Struct("@iqdPN")
_unpack_value = _VALUE_LAYOUT.unpack_from
assert _VALUE_LAYOUT.size == _VALUE_SIZE and all(
    struct.calcsize("@" + "iqdPN"[:i]) <= getattr(_lib.tether_value, f).offset
    < struct.calcsize("@" + "iqdPN"[:i + 1])
    for i, f in enumerate(("type", "integer", "real", "text", "length"))), \
    "tether_value's layout is not the one _VALUE_LAYOUT reads"


def _new_value() -> Tuple[int, memoryview]:
    buf = ctypes.create_string_buffer(_VALUE_SIZE)
    return ctypes.addressof(buf), memoryview(buf)   # the view keeps buf alive


# A text's bytes by address: a view of "all memory" from there, sliced to the
# text's length (one slice, where string_at is a foreign call of its own).
_TEXT_MAX = sys.maxsize // 2
# (Typed Any: a c_char array's slice is bytes, where typeshed says a list.)
_text_at: Callable[[int], Any] = (ctypes.c_char * _TEXT_MAX).from_address


def _bytes_at(p: int, n: int) -> bytes:
    return _text_at(p)[:n] if n <= _TEXT_MAX else ctypes.string_at(p, n)


def _converted(addr: int, view: memoryview) -> Any:
    """The value filled in at `addr` -> a Python value, as _convert; clears
    it (frees its text) when it holds one, also if converting fails."""
    t, i, r, p, n = _unpack_value(view)
    if t == _lib.TYPE_INTEGER:
        return i
    if t == _lib.TYPE_NULL:
        return None
    if t == _lib.TYPE_REAL:
        return r
    if t == _lib.TYPE_BOOLEAN:
        return bool(i)
    try:
        if t == _lib.TYPE_TEXT:
            return _bytes_at(p, n).decode("utf-8") if p else ""
        if t == _lib.TYPE_JSON:
            return json.loads(_bytes_at(p, n).decode("utf-8")) if p else None
        raise TetherError("value of unknown type %d" % t)
    finally:
        _lib.raw_value_free(addr)


# peek/get keys (str) -> their UTF-8 bytes. Keys are attribute names, so few;
# past _KEYS_MAX (some host reading arbitrary names) a key is encoded at each
# read instead. Only valid keys are kept: a bad one fails each time.
_KEYS: Dict[str, bytes] = {}
_KEYS_MAX = 4096


def _key_bytes(key: str) -> bytes:
    b = _cstr(key, "key")
    if len(_KEYS) < _KEYS_MAX:
        _KEYS[key] = b
    return b


def _other_key(key: object, by_name: Any, by_code: Any) -> Tuple[Any, Any]:
    """A key that is not a str: (the function to call, its argument), or the
    TypeError/ValueError it always gave."""
    if isinstance(key, bool):
        raise TypeError("key must be an attribute name (str) or code (int), not bool")
    if isinstance(key, int):
        return by_code, key
    if isinstance(key, (str, bytes)):
        return by_name, _cstr(key, "key")
    raise TypeError("key must be an attribute name (str) or code (int), not %s"
                    % type(key).__name__)


_NOT_CACHED = object()   # is_cached's default: no value can be it


def _reader(name: str, by_name: Any, by_code: Any, doc: str) -> Callable[..., Any]:
    """Object.peek or Object.get: `by_name`/`by_code` the raw (unchecked)
    functions. Everything it uses is bound here, to spare global lookups."""
    keys_get = _KEYS.get
    take, give = _VALUES.pop, _VALUES.append
    unpack = _unpack_value
    clear = _lib.raw_value_free
    error = _lib.status_error
    text_at, text_max = _text_at, _TEXT_MAX
    NULL, TEXT, INTEGER = _lib.TYPE_NULL, _lib.TYPE_TEXT, _lib.TYPE_INTEGER
    REAL, BOOLEAN = _lib.TYPE_REAL, _lib.TYPE_BOOLEAN
    NOT_CACHED = E_NOT_CACHED

    def read(self: Object, key: Key, default: Any = None) -> Any:
        if type(key) is str:
            arg: Any = keys_get(key)
            if arg is None:
                arg = _key_bytes(key)
            call = by_name
        elif type(key) is int:   # not a bool: its type is bool
            call, arg = by_code, key
        else:
            call, arg = _other_key(key, by_name, by_code)
        try:
            value = take()
        except IndexError:
            value = _new_value()
        try:
            addr, view = value
            status = call(self._h, arg, addr)
            if status < 0:
                # Not cached yet is an answer, not a failure: a get has
                # started the refresh, and observers hear when it lands.
                if status == NOT_CACHED:
                    return default
                raise error(status)   # nothing was written: nothing to clear
            # As _converted, with the commonest types first and inline.
            t, i, r, p, n = unpack(view)
            if t == INTEGER:
                return i
            if t == TEXT and n <= text_max:
                try:
                    return text_at(p)[:n].decode("utf-8") if p else ""
                finally:
                    clear(addr)
            if t == BOOLEAN:
                return i != 0
            if t == NULL:
                return None
            if t == REAL:
                return r
            return _converted(addr, view)   # JSON (cleared there), or unknown
        finally:
            give(value)

    read.__name__ = name
    read.__qualname__ = "Object." + name
    read.__doc__ = doc
    return read


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _arguments(args: Optional[Iterable[Argument]]) -> Tuple[Any, int, Tuple[Any, ...]]:
    """A fetch's predicate arguments -> (ctypes array of tether_value or None,
    count, the buffers the array points into). The caller keeps the array and
    the buffers alive until tether_fetch_start returns (the library borrows
    them for the call only). Everything is checked here, before anything is
    sent: TypeError for a value of another type (naming its $n), OverflowError
    for an int beyond 64 bits."""
    if args is None:
        return None, 0, ()
    if isinstance(args, (str, bytes, bytearray, memoryview, dict, set, frozenset)):
        raise TypeError("args must be a sequence of values for $1, $2..., not %s"
                        % type(args).__name__)
    try:
        values = tuple(args)
    except TypeError:
        raise TypeError("args must be a sequence of values for $1, $2..., not %s"
                        % type(args).__name__) from None
    if not values:
        return None, 0, ()
    array = (_lib.tether_value * len(values))()
    buffers: List[Any] = []
    for i, value in enumerate(values):
        v, n = array[i], i + 1
        if value is None:
            v.type = _lib.TYPE_NULL
        elif isinstance(value, bool):         # before int: bool is an int
            v.type, v.integer = _lib.TYPE_BOOLEAN, int(value)
        elif isinstance(value, int):
            if not INT64_MIN <= value <= INT64_MAX:
                raise OverflowError("predicate argument $%d: %d does not fit in 64 bits" % (n, value))
            v.type, v.integer = _lib.TYPE_INTEGER, int(value)
        elif isinstance(value, float):
            v.type, v.real = _lib.TYPE_REAL, float(value)
        elif isinstance(value, str):
            try:
                b = value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError("predicate argument $%d is not encodable as UTF-8: %s" % (n, e)) from e
            # By length, so NUL is just another character; NUL-terminated too.
            buf = ctypes.create_string_buffer(b, len(b) + 1)
            buffers.append(buf)
            v.type, v.text, v.length = _lib.TYPE_TEXT, ctypes.addressof(buf), len(b)
        else:
            raise TypeError("predicate argument $%d must be str, int, float, bool or None, not %s"
                            % (n, type(value).__name__))
    return array, len(values), tuple(buffers)


def _result_options(result: str, properties: Optional[Iterable[str]]
                    ) -> Tuple[int, Optional[bytes], Optional[List[str]]]:
    """`result` and `properties` of a fetch -> (RESULT_* code, the properties
    as the library reads them (bytes or None), their names (list or None)).
    Only Python types and what the library cannot express are judged here;
    the library judges the rest (an unknown name, properties for another
    result type: InvalidError)."""
    if not isinstance(result, str):
        raise TypeError("result must be a str (%s), not %s"
                        % (", ".join(RESULT_TYPES), type(result).__name__))
    if result not in RESULT_TYPES:
        raise ValueError("result must be one of %s, not %r" % (", ".join(RESULT_TYPES), result))
    if properties is None:
        return RESULT_TYPES[result], None, None
    # A str would iterate as characters: refuse it rather than ask for "R", "a"...
    if isinstance(properties, (str, bytes, bytearray, memoryview, dict)):
        raise TypeError("properties must be a list of attribute names, not %s"
                        % type(properties).__name__)
    try:
        names = list(properties)
    except TypeError:
        raise TypeError("properties must be a list of attribute names, not %s"
                        % type(properties).__name__) from None
    if not names:
        # The library has no way to ask for none: NULL means every attribute.
        raise ValueError("properties must name at least one attribute (None: every attribute)")
    for name in names:
        if not isinstance(name, str):
            raise TypeError("properties must be attribute names (str), not %s"
                            % type(name).__name__)
        if "," in name:
            raise ValueError("property %r: the library reads ',' as a separator" % name)
    return RESULT_TYPES[result], _cstr(",".join(names), "properties"), names


def _refuse_live(live: bool, where: str, instead: str) -> None:
    if live is False:
        return
    if not isinstance(live, bool):
        raise TypeError("live must be a bool, not %s" % type(live).__name__)
    raise ValueError("tether: %s cannot take live=True: a live fetch never ends by itself, "
                     "so there is no final answer to wait for; use %s" % (where, instead))


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

_open_contexts: weakref.WeakSet[Context] = weakref.WeakSet()


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


# ------------------------------------------------------------------ model

@dataclass(frozen=True)
class Diagnostic:
    """Something the model left out or changed, and why."""
    entity: str
    attribute: Optional[str]
    message: str


@dataclass(frozen=True)
class Attribute:
    """One attribute of an entity."""
    name: str
    code: int
    type: str          # "null", "text", "integer", "real", "boolean" or "json"
    is_id: bool
    is_version: bool
    required: bool
    index: int


@dataclass(frozen=True)
class LocalStore:
    """A local-only store to attach beside the server's (Context's
    ``local_stores``): a SQLite file at ``path`` holding the entities that
    ``specs`` defines (a dict, or JSON text, of entity name to JSON schema,
    as a Kinto collection's), saved there and never sent to the server.
    ``configuration`` names it in object URIs (letters, digits, - and _)."""
    configuration: str
    path: Union[str, os.PathLike[str]]
    specs: Union[str, Mapping[str, Any]]

    def drop(self, entity: str, field: Optional[str] = None) -> None:
        """Drops from the file the records of `entity`, or only its `field`'s
        values, so that an open whose specs leave them out is taken (an open
        never drops what the file holds: it raises StoreError naming it).
        Not while a context has the file open (BusyError); NotFoundError if
        the file, entity or field is not there."""
        raw = _lib.tether_local_store()
        _lib.tether_local_store_init(byref(raw), _lib.LOCAL_STORE_VERSION)
        configuration, path = _cstr(self.configuration, "configuration"), _cstr(os.fspath(self.path), "path")
        raw.configuration, raw.path = configuration, path
        _lib.tether_local_store_drop(byref(raw), _cstr(entity, "entity"), None if field is None else _cstr(field, "field"))


def _local_stores(stores: Optional[Iterable[LocalStore]], keep: List[Any]) -> Tuple[Any, int]:
    """Local stores -> (ctypes array or None, count); the strings the array
    points to are appended to `keep`, which the caller holds across the open."""
    stores = list(stores or ())
    if not stores:
        return None, 0
    array = (_lib.tether_local_store * len(stores))()
    for i, store in enumerate(stores):
        if not isinstance(store, LocalStore):
            raise TypeError("local_stores must hold tether.LocalStore, not %s" % type(store).__name__)
        specs = store.specs if isinstance(store.specs, str) else json.dumps(store.specs)
        _lib.tether_local_store_init(byref(array[i]), _lib.LOCAL_STORE_VERSION)
        fields = [_cstr(store.configuration, "configuration"), _cstr(os.fspath(store.path), "path"),
                  _cstr(specs, "specs")]
        keep.extend(fields)
        array[i].configuration, array[i].path, array[i].specs_json = fields
    return array, len(stores)


class Entity:
    """A record type of the model (a Kinto collection, or a local store's
    entity). Read once, at first use; its data stays readable after the
    context closes."""

    name: str
    route: str
    configuration: str
    code: int
    operations: frozenset[str]
    attributes: List[Attribute]

    def __init__(self, ctx: Context, handle: Optional[int]) -> None:
        self._ctx = ctx
        self._h = handle
        out = c_char_p()
        _lib.tether_entity_name(handle, byref(out))
        self.name = _pystr(out.value)
        _lib.tether_entity_route(handle, byref(out))
        self.route = _pystr(out.value)
        _lib.tether_entity_configuration(handle, byref(out))
        # "" for the server's entities; a local store's configuration otherwise.
        self.configuration = _pystr(out.value)
        code = c_int()
        _lib.tether_entity_code(handle, byref(code))
        self.code = code.value
        ops = c_uint()
        _lib.tether_entity_operations(handle, byref(ops))
        self.operations = frozenset(n for n, bit in OPERATIONS if ops.value & bit)
        n = c_size_t()
        _lib.tether_entity_attribute_count(handle, byref(n))
        attrs = []
        for i in range(n.value):
            name, code, typ, flags = c_char_p(), c_int(), c_int(), c_uint()
            _lib.tether_entity_attribute_at(handle, i, byref(name), byref(code), byref(typ),
                                            byref(flags))
            attrs.append(Attribute(
                name=_pystr(name.value), code=code.value,
                type=_lib.TYPE_NAMES.get(typ.value, "unknown(%d)" % typ.value),
                is_id=bool(flags.value & _lib.ATTR_ID),
                is_version=bool(flags.value & _lib.ATTR_VERSION),
                required=bool(flags.value & _lib.ATTR_REQUIRED),
                index=i))
        self.attributes = attrs
        self._names = {a.name: a for a in attrs}
        # obj.NamePeek -> "Name", unless the entity has an attribute "NamePeek".
        self._peek_forms = {a.name + "Peek": a.name for a in attrs
                            if a.name + "Peek" not in self._names}

    def attribute(self, key: Key) -> Attribute:
        """The Attribute named `key` (str) or with code `key` (int), asking the
        library. NotFoundError if there is none."""
        idx = c_size_t()
        if isinstance(key, bool):
            raise TypeError("attribute key must be str or int, not bool")
        if isinstance(key, int):
            _lib.tether_entity_attribute_index_by_code(self._h, key, byref(idx))
        else:
            _lib.tether_entity_attribute_index(self._h, _cstr(key, "attribute name"), byref(idx))
        return self.attributes[idx.value]

    @property
    def id_attribute(self) -> Optional[Attribute]:
        """The attribute holding the record id (None if the model has none)."""
        return next((a for a in self.attributes if a.is_id), None)

    @property
    def version_attribute(self) -> Optional[Attribute]:
        """The attribute holding the record's server version, if any."""
        return next((a for a in self.attributes if a.is_version), None)

    def __repr__(self) -> str:
        return "<tether.Entity %s (%d attributes)>" % (self.name, len(self.attributes))


# ------------------------------------------------------------------ objects

class _LazyId:
    """Object.id: calls `fget` at the first read, which keeps the value in
    the Object's __dict__; a non-data descriptor, so later reads find it
    there as a plain attribute."""

    def __init__(self, fget: Callable[[Object], str], doc: str) -> None:
        self.fget = fget
        self.__doc__ = doc

    @overload
    def __get__(self, obj: None, owner: Optional[type] = None) -> _LazyId: ...
    @overload
    def __get__(self, obj: Object, owner: Optional[type] = None) -> str: ...
    def __get__(self, obj: Optional[Object], owner: Optional[type] = None) -> Union[_LazyId, str]:
        if obj is None:
            return self
        return self.fget(obj)


class _ObjectReference:
    """One reference to an object handle, released when this goes away.

    It lives apart from the Object that owns it so that the release runs only
    after the Object's weak references are cleared: once the handle may be
    dead, nothing can find the Object in its context's map and use it. (A
    __del__ on the Object itself runs while the map still hands it out, and
    another thread could take it then.)
    """

    __slots__ = ("handle",)

    handle: Optional[int]

    def __init__(self, handle: Optional[int]) -> None:
        self.handle = handle

    # The defaults keep what __del__ needs through interpreter shutdown, when
    # module globals may already be gone.
    def __del__(self, _release: Any = _lib.tether_object_free, _HandleError: Type[HandleError] = HandleError,
                _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        handle, self.handle = self.handle, None
        if not handle:
            return
        try:
            _release(handle)
        except _HandleError:
            pass  # its context has closed, and the handle died with it
        except Exception:
            # At shutdown the call's error check may find its module torn
            # down; otherwise it is a library failure worth a log line.
            if not _finalizing():
                try:
                    log.exception("tether: releasing object handle %#x failed", handle)
                except Exception:
                    pass


class Object(ObjectEditing):
    """One record, uniqued per context: the same Object for the same record
    for as long as Python holds one.

    An Object owns one reference to its record's handle and releases it when
    it goes away; a later ``ctx.object()`` for the record then makes a new
    Object. ``obj.peek(key)`` reads the cache; ``obj.get(key)`` reads the
    cache and starts a background refresh; ``obj.Name`` is
    ``obj.get("Name")`` and ``obj.NamePeek`` is ``obj.peek("Name")``. Keys are
    attribute names (str) or codes (int).

    A value not cached yet reads as None (or the ``default`` passed to peek
    or get), as does a cached null: ``obj.is_cached(key)`` tells them apart.
    """

    _ref: _ObjectReference
    _h: Optional[int]

    def __init__(self, ctx: Context, handle: Optional[int], entity: Optional[Entity] = None) -> None:
        """Takes over one reference to `handle` (use Context._wrap, which
        keeps Objects unique). `entity`: its Entity, if the caller knows it
        (else asked of the library). The id is read at first use."""
        self._ref = _ObjectReference(handle)  # first: released even if the rest fails
        self._ctx = ctx
        self._h = handle
        if entity is None:
            eh = c_void_p()
            _lib.tether_object_entity(handle, byref(eh))
            entity = ctx._entity_for(eh.value)
        self.entity = entity

    def _read_id(self) -> Any:   # str (an id is never NULL), as Object.id says
        d = self.__dict__
        # Under the objects lock: close() takes it to read the ids left
        # before the handles die, so the handle is alive here or the id kept.
        with self._ctx._objects_lock:
            try:
                return d["id"]
            except KeyError:
                pass
            out = c_char_p()
            _lib.tether_object_id(self._h, byref(out))
            d["id"] = ident = _pystr(out.value)
            return ident

    id = _LazyId(_read_id, """The record id (str). Read from the library at first use and kept
        in the Object, where later reads find it (a Context reads every id
        not yet read before its handles die at close).""")

    @property
    def context(self) -> Context:
        """The Context this Object belongs to."""
        return self._ctx

    @property
    def version(self) -> Optional[int]:
        """The cached server version (Kinto last_modified, ms), or None if
        the record is not cached."""
        out = c_int64()
        try:
            _lib.tether_object_version(self._h, byref(out))
        except NotCachedError:
            return None
        return out.value

    if TYPE_CHECKING:
        # What _reader makes, as a type checker sees it: `default`'s type
        # joins Value's where a value is not cached yet.
        @overload
        def peek(self, key: Key) -> Value: ...
        @overload
        def peek(self, key: Key, default: _T) -> Value | _T: ...
        def peek(self, key: Key, default: Any = None) -> Any: ...
        @overload
        def get(self, key: Key) -> Value: ...
        @overload
        def get(self, key: Key, default: _T) -> Value | _T: ...
        def get(self, key: Key, default: Any = None) -> Any: ...
    else:
        peek = _reader("peek", _lib.raw_object_peek, _lib.raw_object_peek_code,
                       """peek(key, default=None): the cached value of `key`; never touches
            the network. `default` if it is not cached (the record, or on a key
            path the record it leads to). NotFoundError for a key the entity does
            not have, or a record the server no longer has.""")

        get = _reader("get", _lib.raw_object_get, _lib.raw_object_get_code,
                      """get(key, default=None): the cached value of `key`, and a background
            refresh of the object (observers of `key` hear when the value changes,
            including when a record not cached yet arrives). `default` if it is not
            cached yet.""")

    def is_cached(self, key: Optional[Key] = None) -> bool:
        """Whether the record (key None) or the value of `key` is cached,
        so peek gives a stored value (None then means a null). On a key path
        ("Client.Owner") every record along it must be. Never touches the
        network."""
        if key is None:   # a pending insert is in the store, unconfirmed
            return self.version is not None or self.pending == "insert"
        if self.peek(key, _NOT_CACHED) is _NOT_CACHED:
            return False
        return True

    def to_dict(self, peek: bool = True) -> Dict[str, Value]:
        """Every attribute's value, by name (peek by default)."""
        read = self.peek if peek else self.get
        return {a.name: read(a.name) for a in self.entity.attributes}

    def observe(self, key: Key, callback: ObserverCallback) -> Observer:
        """Calls callback(obj, key, status) when the value of `key` changes
        (status 0), with an error status when a refresh fails (E_NOT_FOUND,
        once, when the server has no such record and none was ever cached),
        and once more, last, with status TETHER_E_CANCELLED (-12)
        when the observer is removed or the context closes. `key` is a name,
        a name + "Peek", or a code. Returns an Observer."""
        if isinstance(key, bool) or not isinstance(key, (str, bytes, int)):
            raise TypeError("key must be an attribute name (str) or code (int), not %s"
                            % type(key).__name__)
        if isinstance(key, int):
            key = self.entity.attribute(key).name
        if not callable(callback):
            raise TypeError("callback must be callable")
        return Observer(self, key, callback)

    # obj.Name: a value (a get), as a type checker sees it too.
    def __getattr__(self, name: str, _peek: Callable[..., Value] = peek,
                    _get: Callable[..., Value] = get) -> Value:
        if name.startswith("_"):
            raise AttributeError(name)
        ent = self.__dict__.get("entity")
        if ent is not None:
            # "NamePeek" for an attribute "Name" (and none named "NamePeek").
            base = ent._peek_forms.get(name)
            if base is not None:
                return _peek(self, base)
        try:
            return _get(self, name)
        except NotFoundError as e:
            if ent is not None and name in ent._names:
                raise   # the key is there; the record is not (it says which)
            raise AttributeError(_no_key(self, name)) from e

    def __getitem__(self, key: Key) -> Value:
        """``obj["Name"]`` is ``obj.get("Name")``: for keys an attribute
        cannot spell, or that the Object's own names hide (``obj["id"]``,
        ``obj["version"]``, a key named "delete")."""
        return self.get(key)

    def typed(self, shape: Type[_T]) -> _T:
        """This Object as `shape` says, for a type checker: a class whose
        annotations name model keys and their types (``class Job: Severity:
        float``), so mypy flags ``job.Sevrity = 4.0``. At run time it is this
        same Object; each annotated name is checked against the entity here
        (AttributeError, with the nearest key, for one it lacks)."""
        names = self.entity._names
        for klass in reversed(shape.__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if name not in names and name not in self.entity._peek_forms:
                    raise AttributeError(_no_key(self, name))
        return cast(_T, self)

    def __dir__(self) -> List[str]:
        names = list(super().__dir__())
        ent = self.__dict__.get("entity")
        if ent is not None:
            names.extend(a.name for a in ent.attributes)
        return names

    def __repr__(self) -> str:
        d = self.__dict__
        ent = d.get("entity")
        ident = d.get("id")
        if ident is None and "_h" in d and "_ctx" in d:
            try:
                ident = self.id
            except Exception:
                pass
        return "<tether.Object %s/%s>" % (ent.name if ent else "?", ident)


def _adopted(ctx: Context, ref: _ObjectReference, entity: Entity, _new: Any = object.__new__) -> Object:
    """An Object of `entity` taking over `ref`, an _ObjectReference: what
    Object(ctx, ref.handle, entity) makes, for the thousands of a fetch."""
    obj: Object = _new(Object)
    # Straight into the dict: Object.__setattr__ (which sets model
    # attributes through the library) is not paid for thousands of objects.
    obj.__dict__.update(_ref=ref, _ctx=ctx, _h=ref.handle, entity=entity)
    return obj


class Observer:
    """A key observation; remove() it when done (closing the context does too)."""

    callback: Optional[ObserverCallback]
    _h: Optional[int]

    def __init__(self, obj: Object, key: Union[str, bytes], callback: ObserverCallback) -> None:
        self.object = obj
        self.key = key if isinstance(key, str) else key.decode("utf-8", "replace")
        self.callback = callback
        self.removed = False        # True once the final (cancelled) callback has run
        self._final = threading.Event()
        self._h = None
        ctx = obj._ctx
        self._ctx = ctx
        self._token = next(_tokens)
        _registry[self._token] = self
        ctx._pending[self._token] = self
        out = c_void_p()
        try:
            _lib.tether_object_observe(obj._h, _cstr(key, "key"), _observer_trampoline,
                                       self._token, byref(out))
        except BaseException:
            self._unregister()
            raise
        self._h = out.value

    def _unregister(self) -> None:
        _registry.pop(self._token, None)
        self._ctx._pending.pop(self._token, None)

    def _deliver(self, obj_h: Optional[int], key: Optional[bytes], status: int) -> None:
        final = status == E_CANCELLED
        prev, self._ctx._cb_thread = self._ctx._cb_thread, threading.get_ident()
        try:
            obj = self.object
            if obj_h and obj_h != obj._h:
                # Borrowed for the call; _wrap retains it if no wrapper is alive.
                try:
                    obj = self._ctx._wrap(obj_h, owned=False)
                except TetherError:
                    _report("observer (wrapping the object)", self.callback)
            self.callback(obj, _pystr(key) if key is not None else self.key, status)  # type: ignore[misc]  # None only after the final call
        except BaseException:
            _report("observer", self.callback)
        finally:
            self._ctx._cb_thread = prev
            if final:
                self.removed = True
                self.callback = None  # as the library drops userdata: nothing outlives the end
                self._unregister()
                self._final.set()

    def remove(self) -> bool:
        """Removes the observer: its callback runs once more, with
        TETHER_E_CANCELLED. True if removed now, False if it was already."""
        if self.removed or self._h is None:
            return False
        try:
            _lib.tether_observer_cancel(self._h)
        except HandleError:
            return False
        return True

    def __enter__(self) -> Observer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return "<tether.Observer %r on %r%s>" % (self.key, self.object,
                                                 " removed" if self.removed else "")


# ------------------------------------------------------------------ results

class _Shape:
    """What a fetch asked for, to read each phase's results handle by:
    `type` (a RESULT_* code), `names` (a values fetch's attribute names, in
    the order asked), `lazy` (a batched objects fetch: rows read on demand)."""

    __slots__ = ("type", "names", "keys", "lazy")

    def __init__(self, type: int, names: Iterable[str] = (), lazy: bool = False) -> None:
        self.type = type
        self.names = tuple(names)
        self.keys = tuple(n.encode("utf-8") for n in self.names)
        self.lazy = lazy

    def empty(self) -> Any:
        return 0 if self.type == _lib.RESULT_COUNT else []


class _ResultsReference:
    """The results handle a Results owns, released at close() or when this
    goes away. Apart from the Results, as _ObjectReference is: made first, it
    releases the handle even if the rest of Results.__init__ fails, and its
    __del__ keeps what it needs through interpreter shutdown."""

    __slots__ = ("handle", "ctx")

    handle: Optional[int]

    def __init__(self, ctx: Context, handle: Optional[int]) -> None:
        self.ctx = ctx
        self.handle = handle

    def release(self, _release: Any = _lib.tether_results_free,
                _HandleError: Type[HandleError] = HandleError) -> None:
        handle, self.handle = self.handle, None
        if not handle or self.ctx._closed:
            return  # closing the context released it with every other handle
        try:
            _release(handle)
        except _HandleError:
            pass  # the context closed meanwhile

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        handle = self.handle
        try:
            self.release()
        except Exception:
            # As _ObjectReference: at shutdown the module may be torn down.
            if not _finalizing():
                try:
                    log.exception("tether: releasing results handle %#x failed", handle or 0)
                except Exception:
                    pass


class Results(collections.abc.Sequence[Object]):
    """The objects of one phase of a batched fetch (``batch > 0``), read on
    demand: a read-only sequence (``len``, ``results[i]`` with negative
    indexes, slices, iteration) over the library's results handle.

    Ownership: a Results owns the phase's results handle (tether_results) and
    releases it at ``close()``, at the end of a ``with`` block, or when it is
    garbage-collected, whichever comes first. Reading a row asks the library
    for its object (tether_results_object_at); the library makes objects a
    batch at a time and holds only the batch of the last row read, so
    iterating a large answer holds about one batch of objects, plus the
    Objects you keep. Each Object it gives owns its own reference and
    outlives the Results.

    After ``close()``, or once the context has closed (which releases every
    handle of the context), reading a row raises HandleError and nothing is
    asked of the library with the dead handle; ``len()`` still answers.
    Readable from any thread. ``offline``: as fetch_wait's Answer.
    """

    offline: bool = False

    def __init__(self, ctx: Context, handle: Optional[int]) -> None:
        """Takes over `handle`: it is released even if this fails."""
        self._ref = _ResultsReference(ctx, handle)  # first: owns the handle from here
        self._ctx = ctx
        # Serializes row reads against close(): a row's object handle is
        # borrowed from the results until _wrap has retained it.
        self._lock = threading.Lock()
        self._entity: Optional[Entity] = None   # its rows' Entity, once a row has been read
        n = c_size_t()
        if handle:    # none: a phase that answered no rows
            _lib.tether_results_count(handle, byref(n))
        self._len = n.value

    @property
    def closed(self) -> bool:
        """True once released (close(), or the context has closed)."""
        return self._ref.handle is None or self._ctx._closed

    def close(self) -> None:
        """Releases the results handle (idempotent). Objects already read
        stay valid."""
        with self._lock:
            self._ref.release()

    def __enter__(self) -> Results:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._len

    def _object(self, i: int) -> Object:
        with self._lock:
            handle = self._ref.handle
            if handle is None:
                raise HandleError("tether: these results are closed", status=E_HANDLE)
            if self._ctx._closed:
                raise HandleError("tether: the context of these results is closed", status=E_HANDLE)
            oh = c_void_p()
            _lib.tether_results_object_at(handle, i, byref(oh))
            obj = self._ctx._wrap(oh.value, owned=False, entity=self._entity)
            self._entity = obj.entity
            return obj

    @overload
    def __getitem__(self, index: int) -> Object: ...
    @overload
    def __getitem__(self, index: slice) -> List[Object]: ...
    def __getitem__(self, index: Union[int, slice]) -> Union[Object, List[Object]]:
        if isinstance(index, slice):
            return [self._object(i) for i in range(*index.indices(self._len))]
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError("results indices must be integers or slices, not %s"
                            % type(index).__name__) from None
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("results index out of range")
        return self._object(i)

    def __iter__(self) -> Iterator[Object]:
        # Reads row by row: nothing but the current row's Object is kept here.
        for i in range(self._len):
            yield self._object(i)

    def __repr__(self) -> str:
        return "<tether.Results %d rows%s>" % (self._len, " closed" if self.closed else "")


# ------------------------------------------------------------------ live fetches

@dataclass(frozen=True)
class Changes:
    """How a live fetch's answer moved since its previous answer (as
    NSFetchedResultsController tells it): `deleted`, old indexes of rows that
    left; `inserted`, new indexes of rows that came; `moved`, (old, new)
    pairs of rows that changed place; `updated`, (old, new) pairs of rows
    whose values changed in place. Each list is in index order. Deleting the
    deleted and moved rows (old indexes, descending), then inserting the
    inserted and moved rows (new indexes, ascending) turns the previous
    answer into this one. A "count" answer has no rows: it comes when the
    count moves, its changes always empty. False when there are none."""
    deleted: List[int]
    inserted: List[int]
    moved: List[Tuple[int, int]]
    updated: List[Tuple[int, int]]

    def __bool__(self) -> bool:
        return bool(self.deleted or self.inserted or self.moved or self.updated)


def _read_changes(results: Optional[int]) -> Changes:
    """A results handle's changes (tether_results_change_*) as a Changes."""
    n, old, new = c_size_t(), c_size_t(), c_size_t()
    found: Dict[int, List[Tuple[int, int]]] = {}
    for kind in (_lib.CHANGE_DELETE, _lib.CHANGE_INSERT, _lib.CHANGE_MOVE, _lib.CHANGE_UPDATE):
        _lib.tether_results_change_count(results, kind, byref(n))
        pairs = []
        for i in range(n.value):
            _lib.tether_results_change_at(results, kind, i, byref(old), byref(new))
            pairs.append((old.value, new.value))
        found[kind] = pairs
    return Changes(deleted=[o for o, _ in found[_lib.CHANGE_DELETE]],
                   inserted=[n for _, n in found[_lib.CHANGE_INSERT]],
                   moved=found[_lib.CHANGE_MOVE],
                   updated=found[_lib.CHANGE_UPDATE])


@dataclass(frozen=True)
class LiveAnswer:
    """One answer of a live fetch, as Context.fetch_live yields it.

    `phase`: "cached" (the cache's answer its policy gives first) or "live".
    `answer`: what the fetch's `result` type gives (see Context.fetch).
    `changes`: a Changes from the previous answer, or None when this answer
    is not told as changes (the cached one, the first live one): replace
    what you show with it. `status`/`message`/`error`: 0, "" and None, or the
    first live answer's error when the server could not be asked (its answer
    is then the cache's, and the fetch goes on watching the cache)."""
    phase: str   # Phase: "cached" or "live" (an unknown phase's number as text)
    answer: Any
    changes: Optional[Changes]
    status: int
    message: str
    error: Optional[TetherError]


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
    ctx.fetch_live(...)`` gets a LiveAnswer for each answer, until the loop
    is left or the context closes.

    Leaving the loop (break, return, an exception) drops the iterator, and
    that cancels the fetch at once and waits for its FINAL callback where it
    can without blocking the loop for long (see __del__); ``await
    it.aclose()``, or ``async with ctx.fetch_live(...) as it``, does the same
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

    def __init__(self, ctx: Context, loop: asyncio.AbstractEventLoop, options: Dict[str, Any]) -> None:
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
            self.task = ctx.fetch(_on_answer=on_answer, _on_done=on_done, live=True, **options)
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
            if _finalizing() or task is None or task.done:
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
                        task.wait(5)
                else:
                    task._event.wait(5)
            except TetherError:
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

class Task(Request):
    """An asynchronous fetch.

    Attributes, filled as the callbacks arrive: ``cached`` (the cached
    phase's answer, or None if there was none), ``done`` (True after the final
    callback), ``status`` (final status, 0 ok), ``message``, ``result`` (the
    final answer when it succeeded, else None), ``error`` (the final error as a
    TetherError, else None) and ``objects`` (the final callback's answer, also
    on error: what the cache held). An answer is what the fetch's ``result``
    type gives (see Context.fetch): a list of Objects, a list of ids, an int,
    a list of dicts, or a Results for a batched objects fetch.

    A live fetch (``live`` True) also has ``answer``, its latest answer (of
    the "cached" or "live" phase), and ``changes``, that answer's Changes
    (None when it is not told as changes); it ends only when cancelled or
    when its context closes, so its ``error`` is then a CancelledError.
    """

    _kind = "fetch"

    callback: Optional[Callable[..., object]]
    cached: Any
    answer: Any
    changes: Optional[Changes]
    result: Any
    objects: Any

    def __init__(self, ctx: Context, entity: str, callback: Optional[Callable[..., object]],
                 on_done: Optional[Callable[[Task], object]] = None, shape: Optional[_Shape] = None,
                 progress: Optional[Progress] = None, live: bool = False,
                 on_answer: Optional[Callable[[LiveAnswer], object]] = None) -> None:
        self._ctx = ctx
        self.entity = entity
        self.callback = callback
        self._on_done = on_done
        self._on_answer = on_answer   # internal: each non-final answer, as a LiveAnswer
        self._shape = shape if shape is not None else _Shape(_lib.RESULT_OBJECTS)
        self._progress_cb = progress
        self._h = None
        self._event = threading.Event()
        self.live = live
        self._live_answers = 0
        self.cached = None
        self.answer = None
        self.changes = None
        self.done = False
        self.status: Optional[int] = None
        self.message: Optional[str] = None
        self.result = None
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
        try:
            if final:
                self.status = status
                self.message = msg
                self.objects = objs
                if status == 0:
                    self.result = objs
                else:
                    self.error = make_error(status, msg, _lib.errstr(status))
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
                        self.callback(name, status, msg, objs, changes)
                    else:
                        self.callback(name, status, msg, objs)
                except BaseException:
                    _report("fetch", self.callback)
            if not final and self._on_answer is not None:
                try:
                    err = make_error(status, msg, _lib.errstr(status)) if status else None
                    self._on_answer(LiveAnswer(name, objs, changes, status, msg, err))
                except BaseException:
                    _report("fetch (internal answer hook)", self._on_answer)
        finally:
            if final:
                self.done = True
                self._unregister()
                self._event.set()
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
        if progress is None or self.done:
            return
        prev, self._ctx._cb_thread = self._ctx._cb_thread, threading.get_ident()
        try:
            progress(received, None if total < 0 else total)
        except BaseException:
            _report("progress", progress)
        finally:
            self._ctx._cb_thread = prev

    def __repr__(self) -> str:
        state = "done status=%s" % self.status if self.done else "running"
        return "<tether.Task fetch %s %s>" % (self.entity, state)


# ------------------------------------------------------------------ context

class Context(ContextSaving):
    """A connection + store + object graph (tether_context)."""

    name: str
    url: Optional[str]
    bucket: Optional[str]
    store_path: str
    delivery: Delivery
    # A context opened with with_connection() only: the Connection it asks.
    connection: Connection

    def __init__(self, url: str, bucket: str, store_path: Union[str, os.PathLike[str]], *,
                 username: Optional[str] = None, password: Optional[str] = None,
                 delivery: Delivery = "thread", staleness_ms: int = 0, timeout_ms: int = 30000,
                 object_cache_size: Optional[int] = None, merge: Optional[MergePolicy] = None,
                 local_stores: Iterable[LocalStore] = ()) -> None:
        self._setup(url, bucket, store_path, delivery)
        opts, keep = self._options(staleness_ms, object_cache_size, merge, local_stores)
        # Keep the bytes alive across the open call (the struct holds pointers).
        keep += [_cstr(url, "url"), _cstr(bucket, "bucket"), _cstr_opt(username, "username"),
                 _cstr_opt(password, "password")]
        kinto = _lib.tether_kinto_options()
        _lib.tether_kinto_options_init(byref(kinto), _lib.KINTO_OPTIONS_VERSION)
        kinto.server_url, kinto.bucket, kinto.username, kinto.password = keep[-4:]
        opts.timeout_ms = int(timeout_ms)
        out = c_void_p()
        _lib.tether_context_open_kinto(byref(opts), byref(kinto), byref(out))
        del keep
        self._opened(out.value)

    @classmethod
    def with_connection(cls, connection: Connection, store_path: Union[str, os.PathLike[str]], *,
                        delivery: Delivery = "thread", staleness_ms: int = 0, timeout_ms: int = 30000,
                        object_cache_size: Optional[int] = None, merge: Optional[MergePolicy] = None,
                        local_stores: Iterable[LocalStore] = ()) -> Context:
        """A context on a connection written in Python (a tether.Connection
        subclass) instead of Kinto: the library asks it for the server info,
        the specs, pages, counts, records and writes; everything else (the
        store, objects, peek and get, observers, saving) is as with Kinto.
        A request not answered within timeout_ms fails with NetworkError."""
        from .host import _HostBridge
        self = cls.__new__(cls)
        self._setup(None, None, store_path, delivery)
        opts, keep = self._options(staleness_ms, object_cache_size, merge, local_stores)
        opts.timeout_ms = int(timeout_ms)
        bridge = _HostBridge(connection)
        out = c_void_p()
        _lib.tether_context_open_host(byref(opts), byref(bridge.struct), byref(out))
        del keep
        self.connection = connection
        self._opened(out.value)
        return self

    def _options(self, staleness_ms: int, object_cache_size: Optional[int], merge: Optional[str],
                 local_stores: Optional[Iterable[LocalStore]]) -> Tuple[_lib.tether_context_options, List[Any]]:
        """The options every context takes, and the buffers they point into."""
        if object_cache_size is not None:
            if isinstance(object_cache_size, bool) or not isinstance(object_cache_size, int):
                raise TypeError("object_cache_size must be an int or None")
            if object_cache_size < 0:   # size_t would wrap it into a huge size
                raise ValueError("object_cache_size must not be negative")
        if merge is not None and merge not in _lib.MERGE_POLICIES:
            raise ValueError("merge must be one of %s, not %r" % (", ".join(sorted(_lib.MERGE_POLICIES)), merge))
        opts = _lib.tether_context_options()
        _lib.tether_context_options_init(byref(opts), _lib.CONTEXT_OPTIONS_VERSION)
        keep: List[Any] = [_cstr(self.store_path, "store_path")]
        opts.store_path = keep[0]
        opts.delivery = self._delivery
        opts.staleness_ms = int(staleness_ms)
        if object_cache_size is not None:
            opts.object_cache_size = object_cache_size
        if merge is not None:
            opts.merge_policy = _lib.MERGE_POLICIES[merge]
        stores, opts.local_store_count = _local_stores(local_stores, keep)
        if stores is not None:
            opts.local_stores = stores
            keep.append(stores)
        return opts, keep

    def _opened(self, handle: Optional[int]) -> None:
        self._h = handle
        self._closed = False
        _open_contexts.add(self)
        if not self.online:
            # Said where a program sees it: the log's WARNING reaches no
            # handler unless logging is configured.
            warnings.warn(OfflineWarning(
                "tether: the server cannot be reached: the context opened offline, from its store %r; "
                "reads answer from the cache, changes wait in the outbox, and it comes back online "
                "at the first request that reaches the server" % (self.store_path,)), stacklevel=3)

    @classmethod
    def _sibling(cls, parent: Context, name: str, delivery: Delivery) -> Context:
        """A sibling of `parent` (see open_sibling)."""
        self = cls.__new__(cls)
        self._setup(parent.url, parent.bucket, parent.store_path, delivery)
        out = c_void_p()
        _lib.tether_context_open_sibling(parent._h, _cstr(name, "name"), self._delivery, byref(out))
        self._h = out.value
        self._closed = False
        self.name = name
        _open_contexts.add(self)
        return self

    def _setup(self, url: Optional[str], bucket: Optional[str], store_path: Union[str, os.PathLike[str]],
               delivery: Delivery) -> None:
        if delivery not in DELIVERIES:
            raise ValueError("delivery must be 'thread' or 'poll', not %r" % (delivery,))
        self.name = ""
        self._h = None
        self._closed = True
        self._delivery = DELIVERIES[delivery]
        self.delivery = delivery
        # handle address -> the live Object holding it. Weak: the host's
        # references decide how long an Object (and its handle) lives.
        self._objects: weakref.WeakValueDictionary[Optional[int], Object] = weakref.WeakValueDictionary()
        # Guards _objects (and the reading of Object ids, see close); never
        # held across a call that waits for a callback (a callback thread
        # may need it to wrap objects). Reentrant: a finalizer that runs
        # while a batch of Objects is made under it may wrap one too.
        self._objects_lock = threading.RLock()
        # Set by close() before the handles die: Objects made from then on
        # read their id at once (it is otherwise read at first use).
        self._ids_now = False
        self._entities: Dict[Optional[int], Entity] = {}   # handle address -> Entity
        self._pending: Dict[int, Any] = {}    # token -> Task | Observer, until its final callback
        self._lock = threading.RLock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None          # asyncio loop watching our fd (poll mode)
        self._loop_users = 0
        self._attached = False
        self._cb_thread: Optional[int] = None     # thread running one of our callbacks, if any
        self.url = url
        self.bucket = bucket
        self.store_path = os.fspath(store_path)

    # -- lifetime

    def close(self) -> None:
        """Closes the context: pending fetches and observers get their final
        TETHER_E_CANCELLED callback before this returns. Idempotent. Raises
        BusyError if called from inside one of this context's callbacks."""
        with self._lock:
            if self._closed:
                return
            loop, self._loop = self._loop, None
            if loop is not None and self._fd_cache is not None:
                try:
                    if _on_loop_thread(loop):
                        loop.remove_reader(self._fd_cache)
                    else:
                        loop.call_soon_threadsafe(loop.remove_reader, self._fd_cache)
                except (RuntimeError, ValueError):
                    pass
            self._keep_ids()
            try:
                _lib.tether_context_close(self._h)
            except BaseException:
                self._loop = loop
                self._ids_now = False
                raise
            self._closed = True
            _open_contexts.discard(self)
            self._loop_users = 0
            self._attached = False

    _fd_cache: Optional[int] = None

    def _keep_ids(self) -> None:
        """Reads the id of each live Object that has not read it yet, while
        the handles live (Object.id is read at first use, and close() kills
        them), and has Objects made from now on read theirs at once."""
        out = c_char_p()
        where = ctypes.addressof(out)
        id_of = _lib.raw_object_id
        with self._objects_lock:
            self._ids_now = True
            live = [r() for r in self._objects.valuerefs()]
            for obj in live:
                if obj is None:
                    continue
                d = obj.__dict__
                if "id" not in d and id_of(obj._h, where) == 0:   # else as _read_id would
                    d["id"] = _pystr(out.value)
        del live   # outside the lock: may drop the last reference to some

    @property
    def closed(self) -> bool:
        """True once close() has run (or the context never opened)."""
        return self._closed

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        # Left in the outbox, not lost: said, so that a program that meant
        # to save hears it did not (and a program that did not, where they wait).
        count = 0
        if not self._closed:
            try:
                count = self.change_count
            except TetherError:
                pass
        self.close()
        if count:
            warnings.warn(UnsavedChangesWarning(
                "tether: the context %r closed with %d unsaved change%s: kept in its store's outbox under "
                "its name, for the next context opened on the store to save"
                % (self.name, count, "" if count == 1 else "s")), stacklevel=2)

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # Not while the interpreter finalizes: the library's thread could not
        # deliver the final callbacks close waits for (see _close_open_contexts).
        try:
            if not self._closed and not _finalizing():
                self.close()
        except BaseException:
            pass

    def __repr__(self) -> str:
        return "<tether.Context %s bucket=%s %s>" % (
            self.url, self.bucket, "closed" if self._closed else self.delivery)

    # -- state

    @property
    def diagnostics(self) -> List[Diagnostic]:
        """What the model left out or changed when the context opened, and
        why: a list of Diagnostic(entity, attribute, message), attribute None
        when the whole entity is concerned."""
        n = c_size_t()
        _lib.tether_context_diagnostic_count(self._h, byref(n))
        found = []
        for i in range(n.value):
            entity, attribute, message = c_char_p(), c_char_p(), c_char_p()
            _lib.tether_context_diagnostic_at(self._h, i, byref(entity), byref(attribute), byref(message))
            found.append(Diagnostic(_pystr(entity.value), _pystr(attribute.value), _pystr(message.value)))
        return found

    @property
    def online(self) -> bool:
        """True while the server answers: False from an offline open or a
        request that could not reach it (refused, closed before a byte,
        unknown name, timed out with nothing back), True again from any
        answer. Siblings share it. See observe_online."""
        out = c_int()
        _lib.tether_context_is_online(self._h, byref(out))
        return bool(out.value)

    def observe_online(self, callback: OnlineCallback) -> OnlineObserver:
        """Calls callback(online) each time `online` changes, once per
        change, in order, as the context delivers callbacks. Returns an
        OnlineObserver: remove() it (or use it as a context manager);
        closing the context removes it."""
        from .online import OnlineObserver
        if not callable(callback):
            raise TypeError("callback must be callable")
        return OnlineObserver(self, callback)

    @property
    def pending(self) -> int:
        """How many fetches and observers still await their final callback."""
        return len(self._pending)

    # -- model

    def _entity_for(self, addr: Optional[int]) -> Entity:
        ent = self._entities.get(addr)
        if ent is None:
            ent = self._entities.setdefault(addr, Entity(self, addr))
        return ent

    @property
    def entities(self) -> List[Entity]:
        """Every entity of the model, sorted by name."""
        n = c_size_t()
        _lib.tether_context_entity_count(self._h, byref(n))
        out = []
        for i in range(n.value):
            eh = c_void_p()
            _lib.tether_context_entity_at(self._h, i, byref(eh))
            out.append(self._entity_for(eh.value))
        return out

    def entity(self, name: str) -> Entity:
        """The entity named `name`; NotFoundError if the model has none."""
        eh = c_void_p()
        _lib.tether_context_entity(self._h, _cstr(name, "entity name"), byref(eh))
        return self._entity_for(eh.value)

    # -- objects

    def _wrap(self, addr: Optional[int], owned: bool, entity: Optional[Entity] = None) -> Object:
        """The live Object for handle `addr`, made if there is none. `owned`:
        the caller hands over a reference (from tether_context_object).
        Otherwise the handle is borrowed (from a results handle or an
        observer callback) and a new Object retains its own. `entity`: the
        handle's Entity if the caller knows it."""
        with self._objects_lock:
            obj = self._objects.get(addr)
        if obj is not None:
            if owned:
                _lib.tether_object_free(addr)  # the live Object holds one already
            return obj
        if not owned:
            _lib.tether_object_retain(addr)
        made = Object(self, addr, entity)  # holds the reference from here on
        with self._objects_lock:
            # Another thread may have wrapped the same handle meanwhile: keep
            # its Object; dropping ours releases our reference.
            obj = self._objects.setdefault(addr, made)
            if self._ids_now:
                obj._read_id()   # close() is under way: read it while the handle lives
            return obj

    def _adopt(self, handles: Sequence[Optional[int]], entity: Optional[Entity], into: List[Object]) -> Entity:
        """Appends to `into` the live Object of each of `handles` (object
        handles of one entity, each with a reference handed over, from
        tether_results_objects). Each reference is taken over exactly once:
        by a new Object (dropped again, releasing it, where an Object holds
        the handle already), or released here if this fails before it got
        to it. The Objects are made outside the objects lock, so a garbage
        collection they set off (finalizers may wait for callbacks that need
        the lock) does not run under it. `entity`: theirs, or None to ask
        the library. Returns it."""
        taken = 0
        try:
            if entity is None:
                eh = c_void_p()
                _lib.tether_object_entity(handles[0], byref(eh))
                entity = self._entity_for(eh.value)
            made: List[Object] = []
            for h in handles:
                ref = _ObjectReference(h)
                taken += 1   # `ref` releases it from here, whatever follows
                made.append(_adopted(self, ref, entity))
            with self._objects_lock:
                objects = self._objects
                get = objects.get
                ids_now = self._ids_now
                for obj in made:
                    live = get(obj._h)
                    if live is None:
                        objects[obj._h] = live = obj
                        if ids_now:
                            obj._read_id()
                    into.append(live)
        finally:
            for h in handles[taken:]:
                _release_object(h)
        return entity

    def _objects_of(self, results: Optional[int], count: int) -> List[Object]:
        """The Objects of the `count` rows of an objects answer, in order,
        read _CHUNK handles per call (tether_results_objects)."""
        objs: List[Object] = []
        chunk = min(count, _CHUNK)
        handles = (c_void_p * chunk)()
        got = c_size_t()
        entity: Optional[Entity] = None   # one results handle answers one entity: read once
        start = 0
        while start < count:
            _lib.tether_results_objects(results, start, handles, chunk, byref(got))
            k = got.value
            if not k:
                break
            start += k
            entity = self._adopt(handles[:k], entity, objs)
        return objs

    def _take(self, results: Optional[int], shape: _Shape, status: int) -> Any:
        """One phase's answer, as `shape` asks: Objects, ids, a count, values
        (dicts), or a Results (which then owns the handle). Otherwise the
        handle is released here, also when reading fails."""
        if shape.lazy:   # a Results even with no handle (an empty one), as documented
            return Results(self, results)  # owns the handle, also if this raises
        if not results:
            return shape.empty()
        try:
            if status == 0:
                # The library tells what it answered: a different type would
                # be read wrongly below, so say so rather than guess. An
                # error's or cancel's results have no rows: read as asked.
                got = c_int()
                _lib.tether_results_type(results, byref(got))
                if got.value != shape.type:
                    raise TetherError("tether: asked for %s, the library answered %s"
                                      % (_lib.RESULT_NAMES.get(shape.type),
                                         _lib.RESULT_NAMES.get(got.value, got.value)))
            n = c_size_t()
            _lib.tether_results_count(results, byref(n))
            if shape.type == _lib.RESULT_COUNT:
                return n.value
            if shape.type == _lib.RESULT_OBJECTS:
                return self._objects_of(results, n.value)
            error = _lib.status_error
            if shape.type == _lib.RESULT_IDS:
                out = c_char_p()
                where = ctypes.addressof(out)
                id_at = _lib.raw_results_id_at
                ids: List[Optional[str]] = []
                add = ids.append
                for i in range(n.value):
                    status = id_at(results, i, where)
                    if status < 0:
                        raise error(status)
                    b = out.value
                    add(None if b is None else b.decode("utf-8", "replace"))
                return ids
            rows: List[Dict[str, Value]] = []
            columns = tuple(zip(shape.names, shape.keys))
            value_at = _lib.raw_results_value_at
            try:
                value = _VALUES.pop()
            except IndexError:
                value = _new_value()
            try:
                addr, view = value
                for i in range(n.value):
                    row: Dict[str, Value] = {}
                    for name, key in columns:
                        status = value_at(results, i, key, addr)
                        if status < 0:
                            raise error(status)
                        row[name] = _converted(addr, view)   # clears it
                    rows.append(row)
            finally:
                _VALUES.append(value)
            return rows
        finally:
            _release_results(results)

    def object(self, entity: Union[str, Entity], id: str) -> Object:
        """The Object for record `id` of `entity` (a name or an Entity): the
        same Object for as long as one is alive. The record need not be
        cached yet."""
        if isinstance(entity, Entity):
            entity = entity.name
        oh = c_void_p()
        _lib.tether_context_object(self._h, _cstr(entity, "entity"), _cstr(id, "id"), byref(oh))
        return self._wrap(oh.value, owned=True)

    def object_for_uri(self, uri: str) -> Object:
        """The Object an object URI (Object.uri) names. NotFoundError if its
        store is not attached to this context."""
        oh = c_void_p()
        _lib.tether_context_object_for_uri(self._h, _cstr(uri, "uri"), byref(oh))
        return self._wrap(oh.value, owned=True)

    # -- fetch

    def fetch(self, entity: Union[str, Entity], *, sort: Sort = None, limit: int = 0,
              policy: Policy = "cache_then_server",
              callback: Union[None, FetchCallback, LiveCallback] = None,
              where: Optional[str] = None, args: Optional[Sequence[Argument]] = (), offset: int = 0,
              server_query: Union[None, str, bytes] = None, result: ResultType = "objects",
              properties: Optional[Sequence[str]] = None, batch: int = 0,
              progress: Optional[Progress] = None, live: bool = False,
              _on_done: Optional[Callable[[Task], None]] = None,
              _on_answer: Optional[Callable[[LiveAnswer], None]] = None) -> Task:
        """Starts a fetch; returns a Task. callback(phase, status, message,
        answer) runs once per phase: phase "cached" then "final" for the
        default policy. `sort` is "A,-B" or a list of names ("-" descending).

        `live=True` keeps the fetch live: after the cached answer its policy
        gives, it answers with phase "live" (what a "final" would answer,
        status and all: on a server error, the cache's answer), then again,
        "live" and status 0, each time the records it matches change in the
        context (a sync, another fetch, a get's refresh), until cancelled or
        its context closes: then one "final", cancelled (CancelledError).
        A live fetch's callback takes a fifth argument, `changes`: for a
        live answer after the first, a Changes from the answer before;
        otherwise None (replace what you show with the answer). The changes
        come with the answer they belong to, as `task.answer` and
        `task.changes` hold the latest. Changes wait one at a time in the
        library, which folds later ones into the waiting answer. See
        fetch_live() for asyncio.

        `result` says what each phase answers:
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
                query)
        opts.entity, opts.sort = keep[0], keep[1]
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
        task = Task(self, entity if isinstance(entity, str) else _pystr(entity), callback, _on_done,
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
    def fetch_wait(self, entity: Union[str, Entity], *, sort: Sort = ..., limit: int = ...,
                   policy: Policy = ..., timeout: Optional[float] = ..., callback: Optional[FetchCallback] = ...,
                   where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                   server_query: Union[None, str, bytes] = ..., result: Literal["objects"] = ...,
                   properties: None = ..., batch: Literal[0] = ..., progress: Optional[Progress] = ...,
                   live: Literal[False] = ...) -> Tuple[Optional[List[Object]], Answer[Object]]: ...
    @overload
    def fetch_wait(self, entity: Union[str, Entity], *, sort: Sort = ..., limit: int = ...,
                   policy: Policy = ..., timeout: Optional[float] = ..., callback: Optional[FetchCallback] = ...,
                   where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                   server_query: Union[None, str, bytes] = ..., result: Literal["objects"] = ...,
                   properties: None = ..., batch: int, progress: Optional[Progress] = ...,
                   live: Literal[False] = ...) -> Tuple[Optional[ObjectsAnswer], ObjectsAnswer]: ...
    @overload
    def fetch_wait(self, entity: Union[str, Entity], *, sort: Sort = ..., limit: int = ...,
                   policy: Policy = ..., timeout: Optional[float] = ..., callback: Optional[FetchCallback] = ...,
                   where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                   server_query: Union[None, str, bytes] = ..., result: Literal["ids"],
                   properties: None = ..., batch: int = ..., progress: Optional[Progress] = ...,
                   live: Literal[False] = ...) -> Tuple[Optional[List[str]], Answer[str]]: ...
    @overload
    def fetch_wait(self, entity: Union[str, Entity], *, sort: Sort = ..., limit: int = ...,
                   policy: Policy = ..., timeout: Optional[float] = ..., callback: Optional[FetchCallback] = ...,
                   where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                   server_query: Union[None, str, bytes] = ..., result: Literal["count"],
                   properties: None = ..., batch: int = ..., progress: Optional[Progress] = ...,
                   live: Literal[False] = ...) -> Tuple[Optional[int], Count]: ...
    @overload
    def fetch_wait(self, entity: Union[str, Entity], *, sort: Sort = ..., limit: int = ...,
                   policy: Policy = ..., timeout: Optional[float] = ..., callback: Optional[FetchCallback] = ...,
                   where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                   server_query: Union[None, str, bytes] = ..., result: Literal["values"],
                   properties: Optional[Sequence[str]] = ..., batch: int = ..., progress: Optional[Progress] = ...,
                   live: Literal[False] = ...) -> Tuple[Optional[List[Row]], Answer[Row]]: ...
    def fetch_wait(self, entity: Union[str, Entity], *, sort: Sort = None, limit: int = 0,
                   policy: Policy = "cache_then_server", timeout: Optional[float] = 30,
                   callback: Optional[FetchCallback] = None, where: Optional[str] = None,
                   args: Optional[Sequence[Argument]] = (), offset: int = 0,
                   server_query: Union[None, str, bytes] = None, result: ResultType = "objects",
                   properties: Optional[Sequence[str]] = None, batch: int = 0,
                   progress: Optional[Progress] = None, live: bool = False) -> Tuple[Any, Any]:
        """Fetches and waits: returns (cached answer or None, final answer),
        or raises the final error. The final answer is an Answer (a list),
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
                          where=where, args=args, offset=offset, server_query=server_query,
                          result=result, properties=properties, batch=batch, progress=progress)
        if not task.wait(timeout):
            task.cancel()
            task.wait(5)
            raise TimeoutError("tether: fetch of %r did not finish in %s s" % (entity, timeout))
        if task.error is not None:
            # Unreachable (the context is offline since): the cache's answer,
            # marked, unless the caller asked for the server's only.
            if isinstance(task.error, NetworkError) and policy != "server_only" and not self.online:
                return task.cached, _marked(task.objects, True)
            raise task.error
        return task.cached, _marked(task.result, False)

    # -- query (issue 25; the code is tether/query.py) ---------------------
    def query(self, query: Union[str, Query], *, where: Optional[str] = KEEP,
              args: Sequence[Argument] = KEEP, sort: Union[str, Sequence[str]] = KEEP,
              limit: Optional[int] = KEEP, offset: int = KEEP, batch: int = KEEP,
              properties: Optional[Sequence[str]] = KEEP, policy: Policy = KEEP,
              server_query: Optional[str] = KEEP, on_cached: Optional[OnCached] = None,
              progress: Optional[Progress] = None, timeout: Optional[float] = 30.0) -> QueryResult:
        """A QueryResult for `query` (a Query, or an entity's name) with these
        keywords (Query's) set: iterate it, or ask all(), first(), count(),
        ids(), values(...) or live(callback). `on_cached(answer)` gets the
        cache's first answer (policy "cache_then_server"); `timeout` bounds
        each call, as fetch_wait's. See tether.query."""
        return QueryResult(self, make_query(query, dict(
            where=where, args=args, sort=sort, limit=limit, offset=offset, batch=batch,
            properties=properties, policy=policy, server_query=server_query)),
            on_cached=on_cached, progress=progress, timeout=timeout)
    # -- end of query (issue 25) ------------------------------------------

    # -- poll mode

    def fileno(self) -> int:
        """POLL mode: a descriptor readable while callbacks wait; call poll()
        when it is. MisuseError in thread mode."""
        out = c_int()
        _lib.tether_context_fd(self._h, byref(out))
        self._fd_cache = out.value
        return out.value

    def poll(self, timeout_ms: int = 0) -> int:
        """POLL mode: waits up to timeout_ms (0: no wait, -1: no limit), runs
        the waiting callbacks on this thread, returns how many ran."""
        n = c_size_t()
        _lib.tether_context_poll(self._h, int(timeout_ms), byref(n))
        return n.value

    # -- asyncio

    def _on_readable(self) -> None:
        try:
            if not self._closed:
                self.poll(0)
        except TetherError:
            log.exception("tether: poll from the event loop failed")

    def _loop_acquire(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            if self._loop is None:
                fd = self.fileno()
                loop.add_reader(fd, self._on_readable)
                self._loop = loop
            elif self._loop is not loop:
                raise RuntimeError("tether: this context is attached to another event loop")
            self._loop_users += 1

    def _loop_release(self) -> None:
        with self._lock:
            if self._loop_users > 0:
                self._loop_users -= 1
            if self._loop_users == 0 and not self._attached and self._loop is not None:
                loop, self._loop = self._loop, None
                if self._fd_cache is not None:
                    _call_in_loop(loop, loop.remove_reader, self._fd_cache)

    def attach(self, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        """POLL mode: lets an asyncio loop deliver every callback of this
        context (fetches and observers) by adding the context's descriptor to
        it with add_reader. Defaults to the running loop."""
        if self._delivery != _lib.DELIVER_POLL:
            raise RuntimeError("tether: attach() is for contexts opened with delivery='poll'")
        loop = loop or asyncio.get_running_loop()
        with self._lock:
            if not self._attached:
                self._loop_acquire(loop)
                self._attached = True

    def detach(self) -> None:
        """Undoes attach()."""
        with self._lock:
            if self._attached:
                self._attached = False
                self._loop_release()

    # What fetch_async answers follows `result` (and `batch` for objects).
    @overload
    async def fetch_async(self, entity: Union[str, Entity], *, sort: Sort = ..., limit: int = ...,
                          policy: Policy = ..., callback: Optional[FetchCallback] = ...,
                          where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                          server_query: Union[None, str, bytes] = ..., result: Literal["objects"] = ...,
                          properties: None = ..., batch: Literal[0] = ..., progress: Optional[Progress] = ...,
                          live: Literal[False] = ...) -> List[Object]: ...
    @overload
    async def fetch_async(self, entity: Union[str, Entity], *, sort: Sort = ..., limit: int = ...,
                          policy: Policy = ..., callback: Optional[FetchCallback] = ...,
                          where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                          server_query: Union[None, str, bytes] = ..., result: Literal["objects"] = ...,
                          properties: None = ..., batch: int, progress: Optional[Progress] = ...,
                          live: Literal[False] = ...) -> ObjectsAnswer: ...
    @overload
    async def fetch_async(self, entity: Union[str, Entity], *, sort: Sort = ..., limit: int = ...,
                          policy: Policy = ..., callback: Optional[FetchCallback] = ...,
                          where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                          server_query: Union[None, str, bytes] = ..., result: Literal["ids"],
                          properties: None = ..., batch: int = ..., progress: Optional[Progress] = ...,
                          live: Literal[False] = ...) -> List[str]: ...
    @overload
    async def fetch_async(self, entity: Union[str, Entity], *, sort: Sort = ..., limit: int = ...,
                          policy: Policy = ..., callback: Optional[FetchCallback] = ...,
                          where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                          server_query: Union[None, str, bytes] = ..., result: Literal["count"],
                          properties: None = ..., batch: int = ..., progress: Optional[Progress] = ...,
                          live: Literal[False] = ...) -> int: ...
    @overload
    async def fetch_async(self, entity: Union[str, Entity], *, sort: Sort = ..., limit: int = ...,
                          policy: Policy = ..., callback: Optional[FetchCallback] = ...,
                          where: Optional[str] = ..., args: Optional[Sequence[Argument]] = ..., offset: int = ...,
                          server_query: Union[None, str, bytes] = ..., result: Literal["values"],
                          properties: Optional[Sequence[str]] = ..., batch: int = ...,
                          progress: Optional[Progress] = ..., live: Literal[False] = ...) -> List[Row]: ...
    async def fetch_async(self, entity: Union[str, Entity], *, sort: Sort = None, limit: int = 0,
                          policy: Policy = "cache_then_server", callback: Optional[FetchCallback] = None,
                          where: Optional[str] = None, args: Optional[Sequence[Argument]] = (), offset: int = 0,
                          server_query: Union[None, str, bytes] = None, result: ResultType = "objects",
                          properties: Optional[Sequence[str]] = None, batch: int = 0,
                          progress: Optional[Progress] = None, live: bool = False) -> Any:
        """Fetches and returns the final answer; raises the final error (a
        tether CancelledError if the fetch was cancelled, e.g. by close()).
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
                _call_in_loop(loop, _resolve, fut, task.result)

        if poll_mode:
            self._loop_acquire(loop)
        try:
            task = self.fetch(entity, sort=sort, limit=limit, policy=policy, callback=callback,
                              where=where, args=args, offset=offset, server_query=server_query,
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

    def fetch_live(self, entity: Union[str, Entity], *, sort: Sort = None, limit: int = 0,
                   policy: Policy = "cache_then_server", where: Optional[str] = None,
                   args: Optional[Sequence[Argument]] = (), offset: int = 0,
                   server_query: Union[None, str, bytes] = None, result: ResultType = "objects",
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
            offset=offset, server_query=server_query, result=result, properties=properties,
            batch=batch, progress=progress))
