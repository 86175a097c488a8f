"""PostgreSQL: a schema's tables as entities (tether_context_open_postgres).

Context.open_postgres and AsyncContext.open_postgres open a context on one;
install_postgres installs the change tracking that lets refreshes sync
incrementally (see the header's PostgreSQL section for what maps to what)."""

from __future__ import annotations

from ctypes import byref, c_int, c_void_p
from typing import Any, List, Optional

from . import _lib
from .values import _cstr, _cstr_opt


def postgres_options(conninfo: str, schema: Optional[str], keep: List[Any]) -> _lib.tether_postgres_options:
    """A tether_postgres_options for `conninfo` and `schema` (None: "public");
    the bytes it points into are appended to `keep`, which must outlive the
    call that reads it. The conninfo's password is never logged or stored."""
    pg = _lib.tether_postgres_options()
    _lib.tether_postgres_options_init(byref(pg), _lib.POSTGRES_OPTIONS_VERSION)
    keep += [_cstr(conninfo, "conninfo"), _cstr_opt(schema, "schema")]
    pg.conninfo, pg.schema = keep[-2:]
    return pg


def open_postgres(options: _lib.tether_context_options, conninfo: str, schema: Optional[str]) -> int:
    """Opens the context handle (errors raise as the header says: InvalidError
    for a conninfo libpq cannot parse, NotFoundError for an unknown schema or
    database, AuthError for a refused role, NetworkError when unreachable
    with no store to open offline)."""
    keep: List[Any] = []
    pg = postgres_options(conninfo, schema, keep)
    out = c_void_p()
    _lib.tether_context_open_postgres(byref(options), byref(pg), byref(out))
    del keep
    assert out.value is not None
    return out.value


def install_postgres(conninfo: str, schema: Optional[str] = None) -> int:
    """Installs Tether's change tracking in the database (the schema
    "tether" of sql/tether-postgres.sql, in one transaction) and tracks
    every table of `schema` (None: "public") with a one-column primary key,
    so that refreshes sync only what changed and live fetches hear commits.
    Returns how many tables it began to track (0 when they all were: it is
    safe to call again). Never done by opening a context."""
    keep: List[Any] = []
    pg = postgres_options(conninfo, schema, keep)
    tracked = c_int(0)
    _lib.tether_postgres_install(byref(pg), byref(tracked))
    return tracked.value
