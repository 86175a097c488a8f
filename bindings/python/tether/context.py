"""Context: a connection, a store and an object graph (tether_context); it
ties the other modules together (fetching, saving, the object graph).

Threading: in "thread" delivery the library calls back on a thread of its
own; in "poll" delivery callbacks run inside Context.poll() on the caller's
thread (or from an asyncio loop, see Context.attach / tether.AsyncContext). See
tether.callbacks for how a callback finds its request.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import threading
import warnings
import weakref
from ctypes import byref, c_char_p, c_int, c_size_t, c_void_p
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _lib
from ._types import Delivery, MergePolicy, Policy
from .callbacks import _call_in_loop, _on_loop_thread, _open_contexts, log
from .errors import OfflineWarning, TetherError, UnsavedChangesWarning
from .fetching import ContextFetching
from .host import Connection, _HostBridge
from .model import Diagnostic, Entity, LocalStore, _local_stores
from .objects import Object
from .online import OnlineCallback, OnlineObserver
from .postgres import open_postgres
from .results import ObjectGraph
from .saving import ContextSaving
from .values import DELIVERIES, Argument, Progress, _cstr, _cstr_opt, _pystr
from .query import KEEP, OnCached, Query, QueryResult, QUERY_KEYWORDS, _refuse_keyword, make_query, \
    says_unknown_keywords

_C = TypeVar("_C", bound="Context")


# ------------------------------------------------------------------ context

class Context(ContextFetching, ContextSaving, ObjectGraph):
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
                 local_stores: Iterable[LocalStore] = (), sync_interval: Optional[float] = None,
                 full_check_interval: Optional[float] = None, exclusive: bool = False) -> None:
        self._setup(url, bucket, store_path, delivery)
        opts, keep = self._options(staleness_ms, object_cache_size, merge, local_stores,
                                   sync_interval, full_check_interval, exclusive)
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
                        local_stores: Iterable[LocalStore] = (), sync_interval: Optional[float] = None,
                        full_check_interval: Optional[float] = None, exclusive: bool = False) -> Context:
        """A context on a connection written in Python (a tether.Connection
        subclass) instead of Kinto: the library asks it for the server info,
        the specs, pages, counts, records and writes; everything else (the
        store, objects, peek and get, observers, saving) is as with Kinto.
        A request not answered within timeout_ms fails with NetworkError."""
        self = cls.__new__(cls)
        self._setup(None, None, store_path, delivery)
        opts, keep = self._options(staleness_ms, object_cache_size, merge, local_stores,
                                   sync_interval, full_check_interval, exclusive)
        opts.timeout_ms = int(timeout_ms)
        bridge = _HostBridge(connection)
        out = c_void_p()
        _lib.tether_context_open_host(byref(opts), byref(bridge.struct), byref(out))
        del keep
        self.connection = connection
        self._opened(out.value)
        return self

    @classmethod
    def open_postgres(cls, conninfo: str, store_path: Union[str, os.PathLike[str]], *,
                      schema: Optional[str] = None, delivery: Delivery = "thread", staleness_ms: int = 0,
                      timeout_ms: int = 30000, object_cache_size: Optional[int] = None,
                      merge: Optional[MergePolicy] = None, local_stores: Iterable[LocalStore] = (),
                      sync_interval: Optional[float] = None, full_check_interval: Optional[float] = None, exclusive: bool = False) -> Context:
        """A context on a PostgreSQL schema (None: "public"): each table with
        a one-column primary key an entity, as tether.h's PostgreSQL section
        says. `conninfo` is libpq's ("host=... dbname=... user=..." or a
        postgresql:// URI); its password is never stored or logged. The
        other keywords are Context's. See install_postgres for incremental
        sync and changes pushed to live fetches."""
        self = cls.__new__(cls)
        self._setup(None, None, store_path, delivery)
        opts, keep = self._options(staleness_ms, object_cache_size, merge, local_stores,
                                   sync_interval, full_check_interval, exclusive)
        opts.timeout_ms = int(timeout_ms)
        handle = open_postgres(opts, conninfo, schema)
        del keep
        self._opened(handle)
        return self

    def _options(self, staleness_ms: int, object_cache_size: Optional[int], merge: Optional[str],
                 local_stores: Optional[Iterable[LocalStore]], sync_interval: Optional[float] = None,
                 full_check_interval: Optional[float] = None,
                 exclusive: bool = False) -> Tuple[_lib.tether_context_options, List[Any]]:
        """The options every context takes, and the buffers they point into."""
        intervals = {"sync_interval": sync_interval, "full_check_interval": full_check_interval}
        for name, seconds in intervals.items():
            if seconds is not None:
                if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                    raise TypeError("%s must be a number of seconds or None" % name)
                if not 0 <= seconds <= 7 * 24 * 3600:   # NaN fails too
                    raise ValueError("%s must be 0 to 604800 seconds (a week), not %r" % (name, seconds))
        if not isinstance(exclusive, bool):
            raise TypeError("exclusive must be True or False")
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
        if sync_interval is not None:   # a positive interval stays positive: 0 means never
            opts.sync_interval_ms = max(1, round(sync_interval * 1000)) if sync_interval > 0 else 0
        if full_check_interval is not None:
            opts.full_check_interval_ms = round(full_check_interval * 1000)
        opts.exclusive = int(exclusive)
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
        self._answers = weakref.WeakValueDictionary()   # Answers with a handle, kept readable at close
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
            self._keep_answers()
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

    def changed(self, entity: Optional[str] = None) -> None:
        """Says that `entity` (None: every entity) changed on the server,
        as the program learned by a channel of its own (a WebSocket, a
        push): the context syncs it now, whatever sync_interval is, and its
        live queries and observers answer what changed. Returns at once;
        safe from any thread. NotFoundError for an entity the model lacks."""
        _lib.tether_context_changed(self._h, _cstr_opt(entity, "entity"))

    def observe_online(self, callback: OnlineCallback) -> OnlineObserver:
        """Calls callback(online) each time `online` changes, once per
        change, in order, as the context delivers callbacks. Returns an
        OnlineObserver: remove() it (or use it as a context manager);
        closing the context removes it."""
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


    # -- query (issue 25; the code is tether/query.py) ---------------------
    @says_unknown_keywords
    def query(self, query: Union[str, Query], *, where: Optional[str] = KEEP,
              args: Sequence[Argument] = KEEP, sort: Union[str, Sequence[str]] = KEEP,
              limit: Optional[int] = KEEP, offset: int = KEEP, batch: int = KEEP,
              properties: Optional[Sequence[str]] = KEEP, policy: Policy = KEEP,
              server_query: Optional[str] = KEEP, on_cached: Optional[OnCached] = None,
              progress: Optional[Progress] = None, timeout: Optional[float] = 30.0) -> QueryResult:
        """A QueryResult for `query` (a Query, or an entity's name) with these
        keywords (Query's) set: iterate it, or ask all(), first(), count(),
        ids(), values(...) or live(callback). `on_cached(answer)` gets the
        cache's first answer (policy "cache_then_server"); `progress(received,
        total)` is called as records arrive from the server (at most every
        100 ms, where callbacks run; total None when the server does not
        say); `timeout` bounds each call (past it the fetch is cancelled and
        TimeoutError raised). There is no result= keyword: each method
        asks for its own kind of answer. See tether.query."""
        return QueryResult(self, make_query(query, dict(
            where=where, args=args, sort=sort, limit=limit, offset=offset, batch=batch,
            properties=properties, policy=policy, server_query=server_query)),
            on_cached=on_cached, progress=progress, timeout=timeout)

    def _query_related(self, owner: Object, name: str, options: Dict[str, Any]) -> QueryResult:
        """Object.related_query: a QueryResult of owner's to-many `name`."""
        if not set(options) <= set(QUERY_KEYWORDS):
            _refuse_keyword({k: v for k, v in options.items() if k not in QUERY_KEYWORDS})
        query_options = {k: v for k, v in options.items() if k in Query._FIELDS}
        run_options = {k: v for k, v in options.items() if k not in Query._FIELDS}
        query = make_query(owner.entity.relationship(name).entity, query_options)
        return QueryResult(self, query, related=(owner, name), **run_options)
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


    def open_sibling(self, name: str, *, delivery: Optional[Delivery] = None) -> Context:
        """Another Context on this store, model and connection, with its own
        objects and unsaved changes (kept in the store under `name`): a
        background context beside a main one. A save in either updates the
        objects of the other. Close it as any context."""
        return Context._sibling(self, name, delivery or self.delivery)
