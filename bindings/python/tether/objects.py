"""Object (one record, uniqued per context) and Observer.

Ownership: an Object owns one reference to its object handle and releases
it when Python drops the Object; the context keeps its Objects only weakly,
for uniquing.

``Owner`` is what these modules use of a Context, and ``ContextView`` what
Object.context is to a type checker: protocols, so that this module need not
import the one that defines Context (which imports it)."""

from __future__ import annotations

import sys
import threading
from ctypes import byref, c_char_p, c_int64, c_void_p
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Protocol, Sequence,
                    Type, TypeVar, Union, cast, overload)

from . import _lib
from ._types import Key, MergePolicy, Policy, Value
from .callbacks import _observer_trampoline, _registry, _report, _tokens, log
from .editing import ObjectEditing, _no_key
from .errors import E_CANCELLED, E_NOT_CACHED, HandleError, NotCachedError, NotFoundError, TetherError, \
    make_error
from .model import Entity
from .values import _KEYS, _TEXT_MAX, _VALUES, _converted, _cstr, _key_bytes, _new_value, _other_key, \
    _pystr, _text_at, _unpack_value

_T = TypeVar("_T")

# (obj, key, error): error None for a change, else a TetherError.
ObserverCallback = Callable[["Object", str, Optional[TetherError]], object]


class Owner(Protocol):
    """What Object, Observer, Results and the tasks use of their Context
    (tether.Context is one)."""

    _h: Optional[int]
    _closed: bool
    _delivery: int
    _cb_thread: Optional[int]
    _pending: Dict[int, Any]
    _objects_lock: Any

    def _entity_for(self, addr: Optional[int]) -> Entity: ...
    def _wrap(self, addr: Optional[int], owned: bool, entity: Optional[Entity] = None) -> Object: ...
    def _take(self, results: Optional[int], shape: Any, status: int) -> Any: ...
    def _adopt(self, handles: Any, entity: Optional[Entity], into: List[Any]) -> Entity: ...
    def poll(self, timeout_ms: int = 0) -> int: ...


class Rows(Protocol):
    """What Context.query gives (a tether.QueryResult), as a type checker
    sees it from an Object: its reading methods."""

    def __iter__(self) -> Iterator[Object]: ...
    def all(self) -> Sequence[Object]: ...
    def first(self) -> Optional[Object]: ...
    def count(self) -> int: ...
    def ids(self) -> Sequence[str]: ...
    def values(self, *properties: str) -> Sequence[Dict[str, Value]]: ...


class ContextView(Protocol):
    """Object.context's type: the tether.Context an Object belongs to, as a
    type checker sees it (a protocol of Context's public methods an Object's
    user reaches for; the object is the Context itself)."""

    @property
    def online(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def has_changes(self) -> bool: ...
    @property
    def change_count(self) -> int: ...
    def query(self, query: Any, *, where: Optional[str] = ..., args: Sequence[Any] = ...,
              sort: Union[str, Sequence[str]] = ..., limit: Optional[int] = ..., offset: int = ...,
              batch: int = ..., properties: Optional[Sequence[str]] = ..., policy: Policy = ...,
              server_query: Optional[str] = ..., on_cached: Optional[Callable[[Any], object]] = ...,
              progress: Optional[Callable[[int, Optional[int]], object]] = ...,
              timeout: Optional[float] = ...) -> Rows: ...
    def insert(self, entity: str, values: Optional[Dict[Any, Any]] = None, id: Optional[str] = None) -> Object: ...
    def entity(self, name: str) -> Entity: ...
    # A SaveReport (saving.py is above this module).
    def save(self, *, merge: Optional[MergePolicy] = None, progress: Optional[Callable[[int, int], None]] = None,
             timeout: Optional[float] = None) -> Any: ...
    def rollback(self) -> None: ...
    def object_for_uri(self, uri: str) -> Object: ...
    def object(self, entity: Union[str, Entity], id: str) -> Object: ...   # last: it shadows `object`


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

    def read(self: Any, key: Key, default: Any = None) -> Any:
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
    _ctx: Owner

    def __init__(self, ctx: Owner, handle: Optional[int], entity: Optional[Entity] = None) -> None:
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
    def context(self) -> ContextView:
        """The tether.Context this Object belongs to (typed as ContextView,
        its public methods: this module is below the one defining Context)."""
        return cast(ContextView, self._ctx)

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

    def related(self, key: str) -> Optional[Object]:
        """The Object the to-one relationship `key` refers to (a fault until
        read), or None when the reference is null. Raises NotFoundError when
        its target is known deleted (or its store is not attached), and
        InvalidError when `key` is not a relationship."""
        out = c_void_p()
        _lib.tether_object_related(self._h, _cstr(key, "key"), byref(out))
        return self._ctx._wrap(out.value, owned=True) if out.value else None


    def set_related(self, key: str, target: Optional[Object]) -> None:
        """Points the to-one relationship `key` at the Object `target` (None:
        at nothing): its id in the same store, its URI across stores."""
        _lib.tether_object_set_related(self._h, _cstr(key, "key"), None if target is None else target._h)

    def related_many(self, name: str, **options: Any) -> Sequence[Object]:
        """The Objects of this Object's to-many relationship `name` (see
        Entity.relationships): ``related_query(name, **options).all()``."""
        return self.related_query(name, **options).all()

    def related_query(self, name: str, **options: Any) -> Rows:
        """The records of this Object's to-many relationship `name` (the
        records whose reference points here) as a tether.QueryResult, with
        Context.query's keywords (where, args, sort, limit, policy...):
        ``all()``, ``count()``, ``ids()``, ``values(...)``, ``live(cb)``...
        NotFoundError for a name the entity has no relationship by."""
        ctx: Any = self._ctx   # a Context (Owner is what the lower modules use of it)
        rows: Rows = ctx._query_related(self, name, options)
        return rows

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
        """Calls callback(obj, key, error) when the value of `key` changes
        (error None), with the TetherError when a refresh fails
        (NotFoundError, once, when the server has no such record and none
        was ever cached), and once more, last, with a TaskCancelledError
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


def _adopted(ctx: Owner, ref: _ObjectReference, entity: Entity, _new: Any = object.__new__) -> Object:
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
            error = make_error(status, "", _lib.errstr(status)) if status else None
            self.callback(obj, _pystr(key) if key is not None else self.key, error)  # type: ignore[misc]  # None only after the final call
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
        """Removes the observer: its callback runs once more, with a
        TaskCancelledError. True if removed now, False if it was already."""
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
