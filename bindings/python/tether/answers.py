"""Answer: a fetch's answer as a read-only list, read from the library's
results handle as the host reads it (no Object, id or row made before), and
_ResultsReference, the handle an Answer or a Results owns."""

from __future__ import annotations

import ctypes
import operator
import sys
import threading
from ctypes import byref, c_char_p, c_size_t, c_void_p
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Type, TypeVar,
                    Union, overload)

from . import _lib
from ._types import Value
from .callbacks import _CHUNK, log
from .errors import E_HANDLE, HandleError
from .model import Entity
from .objects import Owner, _adopted, _ObjectReference
from .values import _VALUES, _converted, _new_value

_T = TypeVar("_T")

_UNREAD: Any = object()   # a row not read from the handle yet


class _ResultsReference:
    """The results handle an Answer or a Results owns, released at close()
    or when this goes away. Apart from its owner, as _ObjectReference is:
    made first, it releases the handle even if the rest of the owner's
    __init__ fails, and its __del__ keeps what it needs through interpreter
    shutdown."""

    __slots__ = ("handle", "ctx")

    handle: Optional[int]

    def __init__(self, ctx: Owner, handle: Optional[int]) -> None:
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


class Answer(Sequence[_T]):
    """A fetch's answer (Objects, ids or rows) as a read-only list: ``len``,
    ``answer[i]`` (negative indexes too), slices (lists), iteration, ``in``,
    ``==`` with a list or another Answer, ``+`` (a list). ``offline`` is
    True when fetch_wait could not reach the server and this is the cache's
    answer instead (with any policy but "server_only", which raises).

    Lazy: it holds the library's results handle and makes an Object (or an
    id's str, or a row's dict) only when that row is first read, then keeps
    it, so ``answer[i] is answer[i]``; a fetch whose answer is never read
    makes none. Iteration and slices read the rows they cover in chunks.
    Readable from any thread.

    Ownership: the handle is released when the Answer is garbage-collected
    or at ``close()`` (or the end of a ``with`` block). The rows read before
    stay readable; reading a row not read yet then raises HandleError. An
    Answer still alive when its context closes reads, just before, what its
    unread rows need (ids and values rows; an Object's id): its rows read
    after the close are as they would have been, an Object then one of a
    closed context (its id, HandleError for the rest). ``Answer(items)``
    makes one of a list's items, handle-less."""

    offline: bool = False

    def __init__(self, items: Iterable[_T] = ()) -> None:
        self._items: Optional[List[Any]] = list(items)
        self._len = len(self._items)
        self._unread = 0
        self._ref: Optional[_ResultsReference] = None
        self._ctx: Optional[Owner] = None
        self._shape: Any = None
        self._entity: Optional[Entity] = None
        self._lock = threading.RLock()

    @classmethod
    def _over(cls, ctx: Owner, handle: Optional[int], shape: Any, count: int) -> Answer[Any]:
        """An Answer of the `count` rows of results `handle` (of `shape`, a
        _Shape), which it takes over: released even if this fails."""
        ref = _ResultsReference(ctx, handle)   # first: owns the handle from here
        self: Answer[Any] = cls.__new__(cls)
        self._ref = ref
        self._ctx = ctx
        self._shape = shape
        self._entity = None   # its rows' Entity, once one is read
        self._items = None    # a slot per row, made at the first read
        self._len = self._unread = count
        self._lock = threading.RLock()
        return self

    def _keep(self) -> None:
        """Called as its context closes, while the handle lives: makes the
        rows not read yet readable after the close. Ids and values rows are
        read now; for Objects, each unread row's id is kept, and the Object
        made for it later is one of a closed context (its id, entity and
        repr; HandleError for the rest), as a live one becomes at close."""
        with self._lock:
            if not self._unread or self.closed:
                return
            if self._shape.type != _lib.RESULT_OBJECTS:
                self._fill(0, self._len)
                return
            items = self._slots()
            unread = [i for i in range(self._len) if items[i] is _UNREAD]
            self._read(unread[0])   # a live Object: its entity, for the rest
            handle = self._handle()
            out = c_char_p()
            where = ctypes.addressof(out)
            id_at, error = _lib.raw_results_id_at, _lib.status_error
            kept: List[Optional[str]] = [None] * self._len
            for i in unread[1:]:
                status = id_at(handle, i, where)
                if status < 0:
                    raise error(status)
                b = out.value
                kept[i] = None if b is None else b.decode("utf-8", "replace")
            self._kept = kept

    _kept: Optional[List[Optional[str]]] = None   # unread rows' ids, kept at the context's close

    def _closed_object(self, ident: Optional[str]) -> Any:
        """An Object of the closed context for a row read after its close."""
        obj = _adopted(self._ctx, _ObjectReference(None), self._entity)   # type: ignore[arg-type]
        obj.__dict__["id"] = ident
        return obj

    # -- the handle

    @property
    def closed(self) -> bool:
        """True once the handle is released (close(), or the context has
        closed) or when it never had one; rows read before stay readable."""
        ref = self._ref
        return ref is None or ref.handle is None or ref.ctx._closed

    def close(self) -> None:
        """Releases the results handle (idempotent)."""
        with self._lock:
            if self._ref is not None:
                self._ref.release()

    def __enter__(self) -> Answer[_T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading rows

    def _handle(self) -> int:
        """The live handle (under the lock), else HandleError."""
        ref = self._ref
        handle = ref.handle if ref is not None else None
        if handle is None:
            raise HandleError("tether: this answer is closed (rows not read before are gone)",
                              status=E_HANDLE)
        if ref.ctx._closed:   # type: ignore[union-attr]  # a handle means a ref
            raise HandleError("tether: the context of this answer is closed", status=E_HANDLE)
        return handle

    def _slots(self) -> List[Any]:
        items = self._items
        if items is None:
            items = self._items = [_UNREAD] * self._len
        return items

    def _read(self, i: int) -> Any:
        """Row `i` (0 <= i < len), read now if it was not."""
        items = self._items
        if items is not None:
            got = items[i]
            if got is not _UNREAD:
                return got
        with self._lock:
            items = self._slots()
            got = items[i]
            if got is _UNREAD:
                got = self._read_rows(i, i + 1, single=True)[0]
                items[i] = got
                self._unread -= 1
            return got

    def _fill(self, start: int, stop: int) -> List[Any]:
        """Rows start..stop, reading in chunks those not read yet."""
        with self._lock:
            items = self._slots()
            i = start
            while i < stop:
                if items[i] is not _UNREAD:
                    i += 1
                    continue
                end = min(stop, i + _CHUNK)
                for j, got in enumerate(self._read_rows(i, end, single=False), i):
                    if items[j] is _UNREAD:
                        items[j] = got
                        self._unread -= 1
                i = end
            return items[start:stop]

    def _read_rows(self, start: int, stop: int, single: bool) -> List[Any]:
        kept = self._kept
        if kept is not None and self.closed:
            return [self._closed_object(kept[i]) for i in range(start, stop)]
        handle = self._handle()
        shape, ctx = self._shape, self._ctx
        assert ctx is not None
        kind = shape.type
        if kind == _lib.RESULT_OBJECTS:
            if single:   # a borrowed handle, retained by the Object _wrap makes
                oh = c_void_p()
                _lib.tether_results_object_at(handle, start, byref(oh))
                obj = ctx._wrap(oh.value, owned=False, entity=self._entity)
                self._entity = obj.entity
                return [obj]
            n = stop - start
            handles = (c_void_p * n)()
            got = c_size_t()
            _lib.tether_results_objects(handle, start, handles, n, byref(got))
            made: List[Any] = []
            if got.value:
                self._entity = ctx._adopt(handles[:got.value], self._entity, made)
            if len(made) != n:
                raise HandleError("tether: the answer's results gave %d rows of %d" % (len(made), n))
            return made
        error = _lib.status_error
        if kind == _lib.RESULT_IDS:
            out = c_char_p()
            where = ctypes.addressof(out)
            id_at = _lib.raw_results_id_at
            ids: List[Any] = []
            for i in range(start, stop):
                status = id_at(handle, i, where)
                if status < 0:
                    raise error(status)
                b = out.value
                ids.append(None if b is None else b.decode("utf-8", "replace"))
            return ids
        rows: List[Any] = []
        columns = tuple(zip(shape.names, shape.keys))
        value_at = _lib.raw_results_value_at
        try:
            value = _VALUES.pop()
        except IndexError:
            value = _new_value()
        try:
            addr, view = value
            for i in range(start, stop):
                row: Dict[str, Value] = {}
                for name, key in columns:
                    status = value_at(handle, i, key, addr)
                    if status < 0:
                        raise error(status)
                    row[name] = _converted(addr, view)   # clears it
                rows.append(row)
        finally:
            _VALUES.append(value)
        return rows

    # -- the list's face

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> _T: ...
    @overload
    def __getitem__(self, index: slice) -> List[_T]: ...
    def __getitem__(self, index: Union[int, slice]) -> Union[_T, List[_T]]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step == 1:
                return self._fill(start, stop) if self._unread and start < stop else self._slots()[start:stop]
            return [self._read(i) for i in range(start, stop, step)]
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError("answer indices must be integers or slices, not %s"
                            % type(index).__name__) from None
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("answer index out of range")
        return self._read(i)   # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[_T]:
        n = self._len
        if not self._unread:
            yield from (self._items or ())
            return
        for start in range(0, n, _CHUNK):
            yield from self._fill(start, min(n, start + _CHUNK))

    def __reversed__(self) -> Iterator[_T]:
        # In chunks from the end, as __iter__ (the default would read row by row).
        for stop in range(self._len, 0, -_CHUNK):
            yield from reversed(self._fill(max(0, stop - _CHUNK), stop))

    def _list(self) -> List[_T]:
        return self[0:self._len]

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True   # without reading a row
        if isinstance(other, Answer):
            return len(other) == self._len and (not self._len or self._list() == other._list())
        if isinstance(other, list):
            return len(other) == self._len and (not self._len or self._list() == other)
        return NotImplemented

    __hash__ = None   # type: ignore[assignment]  # as a list's

    def __add__(self, other: Iterable[Any]) -> List[Any]:
        if not isinstance(other, (list, Answer)):
            return NotImplemented
        return self._list() + list(other)

    def __radd__(self, other: Iterable[Any]) -> List[Any]:
        if not isinstance(other, list):
            return NotImplemented
        return other + self._list()

    def __reduce__(self) -> Tuple[Any, ...]:
        # copy and pickle: a handle-less Answer of every row (two Answers
        # sharing one handle would close each other's).
        return (Answer, (self._list(),), {"offline": self.offline})

    def __repr__(self) -> str:
        try:
            return repr(self._list())
        except HandleError:
            return "<tether.Answer %d rows, %d not read, closed>" % (self._len, self._unread)
