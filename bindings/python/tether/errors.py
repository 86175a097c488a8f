"""Exceptions: one class per TETHER_E_* status, all under TetherError."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Type

from ._types import Value

OK = 0
E_ERROR = -1
E_MISUSE = -2
E_HANDLE = -3
E_NOT_FOUND = -4
E_TYPE = -5
E_INVALID = -6
E_NETWORK = -7
E_AUTH = -8
E_SERVER = -9
E_PROTOCOL = -10
E_STORE = -11
E_CANCELLED = -12
E_NOT_CACHED = -13
E_BUSY = -14
E_CONFLICT = -15
E_NOT_ALLOWED = -16
E_EXPIRED = -17


class TetherError(Exception):
    """A failure reported by libtether.

    ``status`` is the negative TETHER_E_* code, ``name`` its constant name
    (e.g. ``"TETHER_E_NETWORK"``) and ``message`` the library's message.
    """

    status: int = E_ERROR
    name: str
    message: str
    # Set on the error a save raises (Context.save, SaveTask.error), from its
    # SaveReport; an error raised by anything else has none of them.
    saved: int
    discarded: int
    failures: List[Tuple[Any, TetherError]]   # (tether.Object, its error)
    conflicts: List[Conflict]

    def __init__(self, message: str = "", status: Optional[int] = None, name: Optional[str] = None) -> None:
        if status is None:
            status = type(self).status
        self.status = status
        self.name = name if name is not None else _default_name(status)
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        if self.message:
            return "%s (%s)" % (self.message, self.name)
        return self.name

    def __repr__(self) -> str:
        return "%s(%r, status=%d)" % (type(self).__name__, self.message, self.status)


# The groups: what a program does about an error follows its group.

class UsageError(TetherError):
    """The program asked for something the library refuses (a mistake to
    fix in the calling code, or a name or value it was handed): nothing
    changed."""


class RemoteError(TetherError):
    """The server: unreachable, refused the credentials, failed, answered
    something else than its protocol, or refused the change (conflict, not
    allowed, history expired). Retrying later may succeed."""


class StoreError(TetherError):
    """The SQLite store failed or belongs elsewhere (TETHER_E_STORE); also
    the group of what the store cannot answer yet (NotCachedError)."""
    status = E_STORE


class MisuseError(UsageError):
    """A NULL argument, a bad option version, the wrong delivery mode."""
    status = E_MISUSE


class HandleError(UsageError):
    """A closed, freed or wrong kind of handle (an Object or Results of a
    closed context)."""
    status = E_HANDLE


class NotFoundError(UsageError, LookupError):
    """An unknown entity, key, code or record (a LookupError, as a dict's
    KeyError is)."""
    status = E_NOT_FOUND


class TypeMismatchError(UsageError, TypeError):
    """A value of the wrong type for its attribute (a TypeError)."""
    status = E_TYPE


class InvalidError(UsageError, ValueError):
    """An invalid argument: a bad predicate, sort key, URL, UTF-8, a value
    outside the allowed ones (a ValueError)."""
    status = E_INVALID


class BusyError(UsageError):
    """Not allowed from inside one of this context's callbacks (waiting
    there would wait for itself)."""
    status = E_BUSY


class NetworkError(RemoteError):
    """The server could not be reached, timed out, or cut its answer short."""
    status = E_NETWORK


class AuthError(RemoteError):
    """The server refused the credentials (401, 403)."""
    status = E_AUTH


class ServerError(RemoteError):
    """The server answered with an error status (5xx...)."""
    status = E_SERVER


class ProtocolError(RemoteError):
    """The server answered something that is not its protocol."""
    status = E_PROTOCOL


class NotCachedError(StoreError):
    """The record has no cached value yet (peek and get answer None or the
    default instead: only the explicit calls raise it)."""
    status = E_NOT_CACHED


class TaskCancelledError(TetherError):
    """A fetch, save or observer ended by a cancel (Task.cancel(), or its
    context closing): TETHER_E_CANCELLED. Not asyncio.CancelledError (a
    BaseException that cancels the awaiting asyncio task): this is an
    Exception, the request's answer; cancelling an asyncio task that awaits
    a fetch cancels the fetch and raises asyncio.CancelledError there."""
    status = E_CANCELLED


class ConflictError(RemoteError):
    """A save met records another writer changed. Raised by a save (with
    ``conflicts``: each a tether.Conflict with both sides)."""
    status = E_CONFLICT


class NotAllowedError(RemoteError):
    """The server's spec does not allow the operation (insert, update,
    delete), or a delete rule (deny) refuses a delete."""
    status = E_NOT_ALLOWED


class ExpiredError(RemoteError):
    """The server no longer has the history a request asked for (a host
    connection raises it for a page `since` a version it forgot)."""
    status = E_EXPIRED


_BY_STATUS: Dict[int, Type[TetherError]] = {
    E_ERROR: TetherError,
    E_MISUSE: MisuseError,
    E_HANDLE: HandleError,
    E_NOT_FOUND: NotFoundError,
    E_TYPE: TypeMismatchError,
    E_INVALID: InvalidError,
    E_NETWORK: NetworkError,
    E_AUTH: AuthError,
    E_SERVER: ServerError,
    E_PROTOCOL: ProtocolError,
    E_STORE: StoreError,
    E_CANCELLED: TaskCancelledError,
    E_NOT_CACHED: NotCachedError,
    E_BUSY: BusyError,
    E_CONFLICT: ConflictError,
    E_NOT_ALLOWED: NotAllowedError,
    E_EXPIRED: ExpiredError,
}

_NAMES: Dict[int, str] = {
    E_ERROR: "TETHER_E_ERROR",
    E_MISUSE: "TETHER_E_MISUSE",
    E_HANDLE: "TETHER_E_HANDLE",
    E_NOT_FOUND: "TETHER_E_NOT_FOUND",
    E_TYPE: "TETHER_E_TYPE",
    E_INVALID: "TETHER_E_INVALID",
    E_NETWORK: "TETHER_E_NETWORK",
    E_AUTH: "TETHER_E_AUTH",
    E_SERVER: "TETHER_E_SERVER",
    E_PROTOCOL: "TETHER_E_PROTOCOL",
    E_STORE: "TETHER_E_STORE",
    E_CANCELLED: "TETHER_E_CANCELLED",
    E_NOT_CACHED: "TETHER_E_NOT_CACHED",
    E_BUSY: "TETHER_E_BUSY",
    E_CONFLICT: "TETHER_E_CONFLICT",
    E_NOT_ALLOWED: "TETHER_E_NOT_ALLOWED",
    E_EXPIRED: "TETHER_E_EXPIRED",
}


def _default_name(status: int) -> str:
    return _NAMES.get(status, "TETHER_E_UNKNOWN")


def error_class(status: int) -> Type[TetherError]:
    """The exception class for a status (TetherError for an unknown one)."""
    return _BY_STATUS.get(status, TetherError)


def make_error(status: int, message: str = "", name: Optional[str] = None) -> TetherError:
    """An exception instance for a negative status."""
    return error_class(status)(message, status=status, name=name)


class Conflict:
    """A change the server refused because its record moved on: ``object``,
    ``local_version`` (None for an insert), ``server_version`` and
    ``server`` (the server's values by name; both None if it deleted the
    record), and ``keys``, those whose local and server values differ."""

    object: Any   # the tether.Object (typed Any: this module is below objects)
    local_version: Optional[int]
    server_version: Optional[int]
    keys: List[str]
    server: Optional[Dict[str, Value]]

    def __init__(self, obj: Any, local_version: Optional[int], server_version: Optional[int],
                 keys: List[str], server: Optional[Dict[str, Value]]) -> None:
        self.object = obj
        self.local_version = local_version
        self.server_version = server_version
        self.keys = keys
        self.server = server

    def __repr__(self) -> str:
        return "<tether.Conflict %r keys=%r server_version=%r>" % (self.object, self.keys, self.server_version)


class OfflineWarning(UserWarning):
    """Warned when a Context opens offline: the server could not be reached
    and the model came from the store. Reads answer from the cache, changes
    wait in the outbox, and the context comes back online by itself at the
    first request that reaches the server (see Context.online)."""


class UnsavedChangesWarning(UserWarning):
    """Warned when a ``with Context(...)`` block exits with unsaved changes.
    They are not lost: the store's outbox keeps them under the context's
    name, and the next context opened on the store under that name (or a
    sibling of that name) holds them and sends them at its save. A
    UserWarning, not a ResourceWarning: Python hides those by default, and
    nothing leaked."""
