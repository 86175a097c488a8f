"""Connections written in Python: a server other than Kinto (a Perforce
server, a REST API, files) behind a class.

    class Files(tether.Connection):
        identity = "files in /srv/data"
        def server_info(self): return ("files", "1")
        def specs(self): return [tether.Spec("notes", "id", "rev", {"properties": {...}})]
        def page(self, request): return tether.Page(records=[...])
        def records(self, entity, ids, cursor): return tether.Page(records=[...])
        def write(self, writes): return [tether.Written(record) for w in writes]

    ctx = tether.Context.with_connection(Files(), "cache.sqlite")

Each method may be a plain function, run on a thread of a small pool (so
it may block: a subprocess, a socket), or ``async def``, run on an event
loop thread of the connection's own. What it raises fails that request: a
TetherError with its status, anything else as TETHER_E_ERROR. The library
decides everything else: what is cached, when to ask, coalescing, saving.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import json
import logging
import threading
from ctypes import byref, c_char_p, c_int, c_int64, c_size_t, c_void_p
from typing import (Any, Awaitable, Callable, ClassVar, Dict, List, Literal, Mapping, Optional,
                    Sequence, Set, Tuple, Union)

from . import _lib
from .errors import E_CANCELLED, E_ERROR, E_HANDLE, NotAllowedError, TetherError

log = logging.getLogger("tether")

# What a spec allows and what a write is.
Operation = Literal["fetch", "insert", "update", "delete"]
WriteKind = Literal["create", "patch", "replace", "delete"]
# A record as a connection gives it: a dict, or its JSON text (str or bytes).
Record = Union[Mapping[str, Any], str, bytes]
# What Connection.write answers for each Write.
Outcome = Union["Written", "Deleted", "Conflict", "Failed"]
# What page and records answer: a Page, or the records alone.
PageAnswer = Union["Page", Sequence[Record]]

OPERATIONS: Dict[str, int] = {"fetch": _lib.OP_FETCH, "insert": _lib.OP_INSERT, "update": _lib.OP_UPDATE, "delete": _lib.OP_DELETE}
WRITE_KINDS: Dict[int, WriteKind] = {0: "create", 1: "patch", 2: "replace", 3: "delete"}


@dataclasses.dataclass(frozen=True)
class Spec:
    """A record type: its name, the field that identifies a record, the field
    holding its version (an integer the server bumps on each change), its
    fields as a JSON schema (a dict, as a Kinto collection's), and the
    operations it allows. Or, from a Perforce server, its ``specdef``
    string (see Spec.from_specdef)."""
    name: str
    id_field: Optional[str] = None      # required unless specdef is given
    version_field: Optional[str] = None  # required unless specdef is given
    schema: Union[Mapping[str, Any], str, bytes] = dataclasses.field(default_factory=dict)
    operations: Tuple[Operation, ...] = ("fetch", "insert", "update", "delete")
    specdef: Optional[str] = None

    @classmethod
    def from_specdef(cls, name: str, specdef: str, operations: Sequence[Operation] = ("fetch",)) -> Spec:
        """A record type as Perforce describes it: fields keep Perforce's
        codes, list fields are one list (tagged output's View0, View1...
        folded), the id is the key field; each record needs a
        "tether_version" integer, which Perforce lacks."""
        return cls(name, operations=tuple(operations), specdef=specdef)


@dataclasses.dataclass(frozen=True)
class PageRequest:
    """What a page asks: `entity`'s records in `sort` order ((field,
    descending) pairs), after `cursor` (None: the first page), at most `limit`
    in all (0: no limit); `since`: only what changed after that version
    (deletions too); `query`: a fetch's raw server query."""
    entity: str
    cursor: Optional[str] = None
    limit: int = 0
    since: Optional[int] = None
    query: Optional[str] = None
    sort: Tuple[Tuple[str, bool], ...] = ()


@dataclasses.dataclass
class Page:
    """An answer: records (dicts, with the spec's id and version fields), the
    cursor of the next page (None: the last), the data set's version (give
    one and later fetches ask only for changes since), the listing's total,
    and ids deleted since the request's `since`."""
    records: Sequence[Record] = dataclasses.field(default_factory=list)
    next: Optional[object] = None      # sent as str(next)
    version: Optional[int] = None
    total: Optional[int] = None
    deleted: Sequence[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Write:
    """A conditional write: kind "create" (only if no record has the id),
    "patch" (these fields; None removes one), "replace" or "delete" (only if
    the record's version is `if_version`, when given)."""
    kind: WriteKind
    entity: str
    id: str
    fields: Dict[str, Any]
    if_version: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Written:
    """The write was applied: the record as it now is."""
    record: Record


@dataclasses.dataclass(frozen=True)
class Deleted:
    """The delete was applied, or the record was gone already."""


@dataclasses.dataclass(frozen=True)
class Conflict:
    """Not applied: the record is another version, or exists (a create);
    `record` is the server's, None if it has none."""
    record: Optional[Record] = None


@dataclasses.dataclass(frozen=True)
class Failed:
    """Not known to be applied."""
    error: BaseException


class Connection:
    """Subclass this and implement the methods (see the module's doc).

    Each of server_info, specs, page, count, records and write may be a
    plain method or an ``async def`` (hence the Awaitable in their hints);
    cancelled and closed are plain."""

    # A str naming the server and data set (the store keeps it): required.
    identity: Optional[str] = None

    def server_info(self) -> Union[Tuple[str, str], Awaitable[Tuple[str, str]]]:
        """(server name, server version)."""
        return (type(self).__name__, "1")

    def specs(self) -> Union[Sequence[Spec], Awaitable[Sequence[Spec]]]:
        raise NotImplementedError

    def page(self, request: PageRequest) -> Union[PageAnswer, Awaitable[PageAnswer]]:
        raise NotImplementedError

    def count(self, request: PageRequest) -> Union[int, Awaitable[int]]:
        raise NotImplementedError

    def records(self, entity: str, ids: List[str], cursor: Optional[str]
                ) -> Union[PageAnswer, Awaitable[PageAnswer]]:
        raise NotImplementedError

    def write(self, writes: List[Write]) -> Union[Sequence[Outcome], Awaitable[Sequence[Outcome]]]:
        raise NotAllowedError("this connection does not write")

    def cancelled(self, request_kind: int) -> None:
        """A request was cancelled (its answer will be dropped). Optional."""

    def closed(self) -> None:
        """The context has closed and every request has ended. Optional."""


def _text(p: Optional[bytes]) -> Any:   # str, or None for NULL (typed where it lands)
    return p.decode("utf-8") if p is not None else None


def _dump(record: Record) -> bytes:
    if isinstance(record, (str, bytes)):
        return record if isinstance(record, bytes) else record.encode("utf-8")
    return json.dumps(record).encode("utf-8")


class _Request:
    """One tether_request, read into Python values on the connection's thread."""

    def __init__(self, handle: Optional[int]) -> None:
        self.h = handle
        kind = c_int()
        _lib.tether_request_kind(handle, byref(kind))
        self.kind = kind.value
        self.cancelled = False
        self.future: Optional[concurrent.futures.Future[Any]] = None


class _HostBridge:
    """The ctypes side of one Connection: the callbacks the library calls,
    kept referenced until its release, and the dispatch of each request to
    the pool or the event loop."""

    _pool: ClassVar[Optional[concurrent.futures.ThreadPoolExecutor]] = None
    _pool_lock = threading.Lock()

    def __init__(self, connection: Connection) -> None:
        if not isinstance(connection, Connection):
            raise TypeError("connection must be a tether.Connection, not %s" % type(connection).__name__)
        if not connection.identity:
            raise ValueError("a connection needs an identity: a str naming its server and data set")
        self.connection = connection
        self._identity = connection.identity.encode("utf-8")
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._open: Dict[Optional[int], _Request] = {}   # handle -> _Request
        self.struct = _lib.tether_connection()
        _lib.tether_connection_init(byref(self.struct), _lib.CONNECTION_VERSION)
        self.struct.identity = self._identity
        # Referenced by self, which the release callback's closure keeps
        # alive (_alive) until the library calls it, once.
        self._request_cb = _lib.REQUEST_CB(self._on_request)
        self._cancel_cb = _lib.REQUEST_CB(self._on_cancel)
        self._release_cb = _lib.RELEASE_CB(self._on_release)
        self.struct.request = self._request_cb
        self.struct.cancel = self._cancel_cb
        self.struct.release = self._release_cb
        _alive.add(self)

    @classmethod
    def _executor(cls) -> concurrent.futures.ThreadPoolExecutor:
        with cls._pool_lock:
            if cls._pool is None:
                cls._pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="tether-host")
            return cls._pool

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._loop_thread = threading.Thread(target=self._loop.run_forever, name="tether-host-loop", daemon=True)
                self._loop_thread.start()
            return self._loop

    # -- the library's calls (on the connection's thread: quick, never raising)

    def _on_request(self, handle: Optional[int], userdata: Optional[int]) -> None:
        try:
            request = _Request(handle)
            with self._lock:
                self._open[handle] = request
            method, args = self._call_for(request)
            if inspect.iscoroutinefunction(method):
                request.future = asyncio.run_coroutine_threadsafe(method(*args), self._event_loop())
            else:
                request.future = self._executor().submit(method, *args)
            request.future.add_done_callback(lambda f, request=request: self._answer(request, f))  # type: ignore[misc]  # a lambda with a default
        except BaseException as error:   # never into C
            self._complete(handle, error)

    def _on_cancel(self, handle: Optional[int], userdata: Optional[int]) -> None:
        try:
            with self._lock:
                request = self._open.get(handle)
            if request is None:
                return
            request.cancelled = True
            if request.future is not None:
                request.future.cancel()   # an async method stops; a running thread finishes, unheard
            self.connection.cancelled(request.kind)
        except BaseException:
            log.exception("tether: %r.cancelled raised", self.connection)

    def _on_release(self, userdata: Optional[int]) -> None:
        try:
            self.connection.closed()
        except BaseException:
            log.exception("tether: %r.closed raised", self.connection)
        finally:
            with self._lock:
                loop, self._loop = self._loop, None
            if loop is not None:
                loop.call_soon_threadsafe(loop.stop)
            _alive.discard(self)

    # -- reading a request

    def _call_for(self, request: _Request) -> Tuple[Callable[..., Any], Tuple[Any, ...]]:
        c = self.connection
        h = request.h
        kind = request.kind
        if kind == _lib.REQUEST_SERVER_INFO:
            return c.server_info, ()
        if kind == _lib.REQUEST_SPECS:
            return c.specs, ()
        if kind == _lib.REQUEST_WRITE:
            return c.write, (self._writes(h),)
        name = c_char_p()
        _lib.tether_request_entity(h, byref(name), None)
        entity = _text(name.value)
        cursor = c_char_p()
        if kind == _lib.REQUEST_RECORDS:
            _lib.tether_request_cursor(h, byref(cursor))
            n = c_size_t()
            _lib.tether_request_id_count(h, byref(n))
            ids: List[str] = []
            for i in range(n.value):
                _lib.tether_request_id_at(h, i, byref(name))
                ids.append(_text(name.value))
            return c.records, (entity, ids, _text(cursor.value))
        query = c_char_p()
        _lib.tether_request_query(h, byref(query))
        if kind == _lib.REQUEST_COUNT:
            return c.count, (PageRequest(entity, query=_text(query.value)),)
        limit, since, has = c_int64(), c_int64(), c_int()
        _lib.tether_request_cursor(h, byref(cursor))
        _lib.tether_request_limit(h, byref(limit))
        _lib.tether_request_since(h, byref(since), byref(has))
        n = c_size_t()
        _lib.tether_request_sort_count(h, byref(n))
        sort: List[Tuple[str, bool]] = []
        for i in range(n.value):
            descending = c_int()
            _lib.tether_request_sort_at(h, i, byref(name), byref(descending))
            sort.append((_text(name.value), bool(descending.value)))
        return c.page, (PageRequest(entity, _text(cursor.value), limit.value, since.value if has.value else None,
                                    _text(query.value), tuple(sort)),)

    def _writes(self, h: Optional[int]) -> List[Write]:
        n = c_size_t()
        _lib.tether_request_write_count(h, byref(n))
        writes: List[Write] = []
        for i in range(n.value):
            kind, version, has = c_int(), c_int64(), c_int()
            entity, rid, fields = c_char_p(), c_char_p(), c_char_p()
            _lib.tether_request_write_at(h, i, byref(kind), byref(entity), byref(rid), byref(fields),
                                         byref(version), byref(has))
            writes.append(Write(WRITE_KINDS[kind.value], _text(entity.value), _text(rid.value),
                                json.loads(fields.value), version.value if has.value else None))  # type: ignore[arg-type]  # fields: never NULL
        return writes

    # -- answering

    def _answer(self, request: _Request, future: concurrent.futures.Future[Any]) -> None:
        h = request.h
        if request.cancelled or future.cancelled():
            return self._complete(h, None, cancelled=True)
        try:
            result = future.result()
            kind = request.kind
            if kind == _lib.REQUEST_SERVER_INFO:
                name, version = result
                _lib.tether_request_set_server_info(h, str(name).encode(), str(version).encode())
            elif kind == _lib.REQUEST_SPECS:
                for spec in result:
                    ops = 0
                    for op in spec.operations:
                        ops |= OPERATIONS[op]
                    if spec.specdef is not None:
                        _lib.tether_request_add_specdef(h, spec.name.encode(), spec.specdef.encode(), ops)
                    else:
                        _lib.tether_request_add_spec(h, spec.name.encode(), spec.id_field.encode(),
                                                     spec.version_field.encode(), _dump(spec.schema), ops)
            elif kind == _lib.REQUEST_COUNT:
                _lib.tether_request_set_count(h, int(result))
            elif kind == _lib.REQUEST_WRITE:
                for i, outcome in enumerate(result):
                    self._outcome(h, i, outcome)
            else:
                page = result if isinstance(result, Page) else Page(records=list(result))
                for record in page.records:
                    _lib.tether_request_add_record(h, _dump(record))
                for rid in page.deleted:
                    _lib.tether_request_add_deleted(h, rid.encode())
                _lib.tether_request_set_page(h, None if page.next is None else str(page.next).encode(),
                                             -1 if page.version is None else int(page.version),
                                             -1 if page.total is None else int(page.total))
            self._complete(h, None)
        except BaseException as error:
            self._complete(h, error)

    def _outcome(self, h: Optional[int], index: int, outcome: object) -> None:
        if isinstance(outcome, Written):
            _lib.tether_request_set_outcome(h, index, _lib.OUTCOME_WRITTEN, _dump(outcome.record), 0, None)
        elif isinstance(outcome, Deleted):
            _lib.tether_request_set_outcome(h, index, _lib.OUTCOME_DELETED, None, 0, None)
        elif isinstance(outcome, Conflict):
            _lib.tether_request_set_outcome(h, index, _lib.OUTCOME_CONFLICT,
                                            None if outcome.record is None else _dump(outcome.record), 0, None)
        elif isinstance(outcome, Failed):
            status, message = _status_of(outcome.error)
            _lib.tether_request_set_outcome(h, index, _lib.OUTCOME_FAILED, None, status, message)
        else:
            raise TypeError("write %d: an outcome must be Written, Deleted, Conflict or Failed, not %s"
                            % (index, type(outcome).__name__))

    def _complete(self, h: Optional[int], error: Optional[BaseException], cancelled: bool = False) -> None:
        with self._lock:
            self._open.pop(h, None)
        status, message = (0, None) if error is None else _status_of(error)
        result = _lib.tether_request_complete_raw(h, status, message)
        if result not in (0, E_CANCELLED, E_HANDLE) and not cancelled:
            log.error("tether: completing a request of %r gave status %d", self.connection, result)


def _status_of(error: BaseException) -> Tuple[int, bytes]:
    if isinstance(error, TetherError):
        return error.status, (error.message or str(error)).encode("utf-8", "replace")
    return E_ERROR, ("%s: %s" % (type(error).__name__, error)).encode("utf-8", "replace")


# Bridges whose connection the library may still call: kept until released.
_alive: Set[_HostBridge] = set()
