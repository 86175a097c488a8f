"""What a fetch answers: Results (a batched answer, read on demand), Count
(a count, marked offline), Changes and LiveAnswer (a live fetch's), and
ObjectGraph, the part of a Context that turns results handles into them
(Answer, a lazy list, is in answers.py).

Ownership: a fetch callback's results handle is the binding's: a count's is
read and released at once; one with rows goes to an Answer (which reads its
rows as the host asks), or for a batched objects fetch (batch > 0) to a
Results; either owns it and releases it on close() or when
garbage-collected. An empty one is released at once, whatever happens."""

from __future__ import annotations

import collections.abc
import itertools
import operator
import threading
import weakref
from ctypes import byref, c_int, c_size_t, c_void_p
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Type,
                    TypeVar, Union, overload)

from . import _lib
from ._types import Value
from .callbacks import _CHUNK, _release_object, _release_results, log
from .errors import E_HANDLE, HandleError, TetherError
from .answers import Answer, _ResultsReference
from .model import Entity
from .objects import Object, Owner, _adopted, _ObjectReference

_T = TypeVar("_T")
_answer_keys = itertools.count()

Row = Dict[str, Value]                                 # a "values" answer's row
# An "objects" answer with `batch` set: a Results, or an empty Answer when
# there was nothing to read (an error's, a cancel's).
ObjectsAnswer = Union[Answer[Object], "Results"]


class Count(int):
    """A query's count(); ``offline`` as for Answer."""

    offline: bool = False


def _marked(answer: Any, offline: bool) -> Any:
    """`answer` as a query gives it: it says whether it is offline."""
    if isinstance(answer, Results):
        answer.offline = offline
        return answer
    if isinstance(answer, int):
        count = Count(answer)
        count.offline = offline
        return count
    if not isinstance(answer, Answer):
        answer = Answer(answer)
    answer.offline = offline   # in place: the task's answer is the same Answer
    return answer


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
        return 0 if self.type == _lib.RESULT_COUNT else Answer()


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
    Readable from any thread. ``offline``: as a query's Answer.
    """

    offline: bool = False

    def __init__(self, ctx: Owner, handle: Optional[int]) -> None:
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
    """One answer of a live fetch, as QueryResult.live's callback gets it
    and AsyncQueryResult.live() yields it.

    `phase`: "cached" (the cache's answer its policy gives first) or "live".
    `answer`: what the fetch's `result` type gives (objects: a list, or with a batch a Results).
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


# ------------------------------------------------------------------ the object graph

class ObjectGraph:
    """The part of tether.Context that makes Objects from handles, unique
    per context, and reads one phase's answer."""

    # Context's (set by Context._setup).
    _objects: weakref.WeakValueDictionary[Optional[int], Object]
    _objects_lock: Any
    _answers: weakref.WeakValueDictionary[int, Answer[Any]]   # those with a handle, for close()
    _ids_now: bool
    _closed: bool
    _cb_thread: Optional[int]
    _delivery: int
    _pending: Dict[int, Any]
    _h: Optional[int]

    def _entity_for(self, addr: Optional[int]) -> Entity:
        raise NotImplementedError   # Context's

    def _keep_answers(self) -> None:
        """Before close() kills the handles: each live Answer with rows not
        read yet reads what they need to stay readable (Answer._keep)."""
        with self._objects_lock:
            answers = list(self._answers.values())
        for answer in answers:
            try:
                answer._keep()
            except Exception:   # its unread rows then raise HandleError: no reason not to close
                log.exception("tether: keeping an answer's rows at close failed")

    def poll(self, timeout_ms: int = 0) -> int:
        raise NotImplementedError   # Context's

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
        """One phase's answer, as `shape` asks: a count, an Answer of
        Objects, ids or values (dicts) read lazily, or a Results; the
        Answer or Results owns the handle then. Otherwise the handle is
        released here, also when this fails."""
        if shape.lazy:   # a Results even with no handle (an empty one), as documented
            return Results(self, results)  # owns the handle, also if this raises
        if not results:
            return shape.empty()
        kept = False
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
            if not n.value:
                return Answer()
            # Nothing read now: the Answer reads each row when it is asked for.
            kept = True
            answer = Answer._over(self, results, shape, n.value)  # owns the handle, also if this raises
            with self._objects_lock:
                self._answers[next(_answer_keys)] = answer   # an Answer is unhashable, as a list
                closing = self._ids_now
            if closing:
                answer._keep()   # close() is under way: read what it needs while the handle lives
            return answer
        finally:
            if not kept:
                _release_results(results)
