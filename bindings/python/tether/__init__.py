"""Tether: an object-graph cache for Kinto servers (ctypes binding of libtether).

    import tether
    from tether import Query
    with tether.Context("http://127.0.0.1:8888/v1", "demo", "demo.db") as ctx:
        c = ctx.query("clients", sort="Client", limit=5).first()
        print(c.peek("Owner"), c.Owner)     # peek: cache only; attribute: get
        pending = Query("changes").where("Status == $1 AND User == $2", "pending", "alice")
        for change in ctx.query(pending):  # the server's answer, merged into the cache
            print(change.id)
        n = ctx.query(pending).count()

    async def main():          # the same names, awaited
        async with tether.AsyncContext.open("http://127.0.0.1:8888/v1", "demo", "a.db") as actx:
            print(await actx.query(pending).count())

    async def watch(actx):     # a live fetch: an answer per change, until break
        async for a in actx.query("changes", where="Status == 'pending'").live():
            print(a.answer, a.changes)

An Object holds one reference to its record's handle while Python holds the
Object; a Results (a batched fetch's answer, batch=n) holds its results
handle until closed or collected; tether.debug_counts() shows what the library
holds, for leak checks.

The library's log messages go to the logger "tether" (children by category:
"tether.http", "tether.save"...); after changing its level, call
tether.log_to_python() (or tether.set_log_level(level)): see tether.logs.

Set TETHER_LIBRARY to choose the libtether.so to load.

The package is typed (py.typed): tether.Value is what a value reads as and is
set to, and `mypy --strict` passes on the package.
"""

import warnings
from typing import TYPE_CHECKING, Any

from ._lib import path as library_path, errstr, debug_counts
from ._lib import version as library_version, version_number as library_version_number
from .errors import (TetherError, MisuseError, HandleError, NotFoundError, TypeMismatchError,
                     InvalidError, UsageError, RemoteError, NetworkError, AuthError, ServerError, ProtocolError,
                     StoreError, TaskCancelledError, NotCachedError, BusyError, ConflictError,
                     NotAllowedError, ExpiredError, UnsavedChangesWarning, OfflineWarning, error_class)
from .errors import (OK, E_ERROR, E_MISUSE, E_HANDLE, E_NOT_FOUND, E_TYPE, E_INVALID,
                     E_NETWORK, E_AUTH, E_SERVER, E_PROTOCOL, E_STORE, E_CANCELLED,
                     E_NOT_CACHED, E_BUSY, E_CONFLICT, E_NOT_ALLOWED, E_EXPIRED)
from .values import POLICIES, RESULT_TYPES
from .model import Attribute, Diagnostic, Entity, LocalStore, Relationship
from .objects import ContextView, Object, Observer
from .answers import Answer
from .results import Changes, Count, LiveAnswer, Results
from .tasks import LiveFetch, Task
from .errors import Conflict
from .saving import SaveReport, SaveTask
from .context import Context
from .postgres import install_postgres
from .online import OnlineObserver
from .query import Query, QueryResult
from .aio import AsyncContext, AsyncQueryResult
from . import host
from .host import Connection, Spec, PageRequest, Page, Write, Written, Deleted, Failed
from . import perforce
from ._lib import MERGE_POLICIES
from . import logs
from .logs import log_to_python, set_log_level, stop_logging
from ._types import Value, Key, Policy, ResultType, MergePolicy, Delivery, Phase, Pending

__version__ = "0.3.0"

# tether.CancelledError, the name before 0.3 (it read as asyncio's): a
# deprecated alias of TaskCancelledError, made on access so that using it
# warns. Never in __all__, so `from tether import *` leaves asyncio's
# CancelledError where it was.
if TYPE_CHECKING:
    CancelledError = TaskCancelledError
else:
    def __getattr__(name: str) -> Any:
        if name == "CancelledError":
            warnings.warn("tether.CancelledError is deprecated: it is tether.TaskCancelledError "
                          "(not asyncio.CancelledError)", DeprecationWarning, stacklevel=2)
            return TaskCancelledError
        raise AttributeError("module %r has no attribute %r" % (__name__, name))

__all__ = [
    "Context", "AsyncContext", "install_postgres", "Query", "QueryResult", "AsyncQueryResult", "LocalStore", "Entity", "Attribute", "Relationship", "Diagnostic", "Object", "ContextView", "Observer", "OnlineObserver", "Results",
    "Answer", "Count", "Task",
    "Changes", "LiveAnswer", "LiveFetch", "SaveTask", "SaveReport", "Conflict",
    "Connection", "Spec", "PageRequest", "Page", "Write", "Written", "Deleted", "Failed", "host",
    "POLICIES", "RESULT_TYPES", "MERGE_POLICIES",
    "Value", "Key", "Policy", "ResultType", "MergePolicy", "Delivery", "Phase", "Pending",
    "TetherError", "MisuseError", "HandleError", "NotFoundError", "TypeMismatchError",
    "InvalidError", "NetworkError", "AuthError", "ServerError", "ProtocolError", "StoreError",
    "TaskCancelledError", "UsageError", "RemoteError", "NotCachedError", "BusyError", "ConflictError", "NotAllowedError", "ExpiredError", "UnsavedChangesWarning", "OfflineWarning", "error_class",
    "OK", "E_ERROR", "E_MISUSE", "E_HANDLE", "E_NOT_FOUND", "E_TYPE", "E_INVALID", "E_NETWORK",
    "E_AUTH", "E_SERVER", "E_PROTOCOL", "E_STORE", "E_CANCELLED", "E_NOT_CACHED", "E_BUSY",
    "E_CONFLICT", "E_NOT_ALLOWED", "E_EXPIRED", "library_path", "library_version", "library_version_number", "errstr",
    "debug_counts", "perforce", "logs", "log_to_python", "set_log_level", "stop_logging", "__version__",
]
