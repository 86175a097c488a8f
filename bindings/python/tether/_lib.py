"""Loading libtether.so and declaring its functions.

Every C function is declared exactly once here, with argtypes, restype and
(for the ones that return a status) an errcheck that turns a negative status
into an exception from :mod:`tether.errors`. The message is read with
tether_errmsg() inside the errcheck: on the same thread, right after the
failing call, before any other tether_* call can overwrite it.

The library is loaded with ctypes.CDLL, which releases the GIL for the
duration of each call (the library's own threads call back into Python).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, List, Optional, Tuple
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_int,
                    c_int64, c_size_t, c_uint, c_void_p)

from ._types import Pending
from .errors import TetherError, make_error

# ------------------------------------------------------------------ loading

_HERE = os.path.dirname(os.path.abspath(__file__))
# bindings/python/tether/_lib.py -> repository root is three levels up.
_REPO = os.path.abspath(os.path.join(_HERE, "..", "..", ".."))
_LIBNAME = "libtether.so"


def candidate_paths() -> List[Tuple[str, str]]:
    """The places searched for the library, in order."""
    paths = []
    env = os.environ.get("TETHER_LIBRARY")
    if env:
        paths.append(("$TETHER_LIBRARY", env))
    paths.append(("package copy", os.path.join(_HERE, _LIBNAME)))
    paths.append(("build folder", os.path.join(_REPO, "build", _LIBNAME)))
    paths.append(("swift build", os.path.join(_REPO, ".build", "release", _LIBNAME)))
    return paths


def _load() -> Tuple[ctypes.CDLL, str]:
    tried = []
    for label, path in candidate_paths():
        if label == "$TETHER_LIBRARY":
            # An explicit choice: fail on it rather than silently use another.
            try:
                return ctypes.CDLL(path), path
            except OSError as e:
                raise ImportError(
                    "tether: cannot load the library named by TETHER_LIBRARY=%r: %s" % (path, e)
                ) from e
        if not os.path.exists(path):
            tried.append("  %s: %s (not found)" % (label, path))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("  %s: %s (%s)" % (label, path, e))
    raise ImportError(
        "tether: cannot find libtether.so. Build it (`make build` in the repository, "
        "or `swift build -c release`) or set TETHER_LIBRARY to its path. Tried:\n"
        + "\n".join(tried))


lib, path = _load()

# ------------------------------------------------------------------ types

TYPE_NULL, TYPE_TEXT, TYPE_INTEGER, TYPE_REAL, TYPE_BOOLEAN, TYPE_JSON = range(6)
TYPE_NAMES = {TYPE_NULL: "null", TYPE_TEXT: "text", TYPE_INTEGER: "integer",
              TYPE_REAL: "real", TYPE_BOOLEAN: "boolean", TYPE_JSON: "json"}

DELIVER_THREAD, DELIVER_POLL = 0, 1

OP_FETCH, OP_INSERT, OP_UPDATE, OP_DELETE = 1, 2, 4, 8
ATTR_ID, ATTR_VERSION, ATTR_REQUIRED = 1, 2, 4
DELETE_NULLIFY, DELETE_CASCADE, DELETE_DENY = 0, 1, 2

PHASE_CACHED, PHASE_FINAL, PHASE_LIVE = 1, 2, 3

# How a live fetch's answer moved since its previous one (tether_change).
CHANGE_DELETE = 1   # old index
CHANGE_INSERT = 2   # new index
CHANGE_MOVE = 3     # old and new index
CHANGE_UPDATE = 4   # old and new index

POLICY_CACHE_THEN_SERVER, POLICY_CACHE_ONLY, POLICY_SERVER_ONLY, POLICY_CACHE_ELSE_SERVER = 0, 1, 2, 3

CONTEXT_OPTIONS_VERSION = 7
KINTO_OPTIONS_VERSION = 1
POSTGRES_OPTIONS_VERSION = 1
LOCAL_STORE_VERSION = 1
SAVE_OPTIONS_VERSION = 1

# What a save does with a conflict (tether_merge_policy), by the header's names (as the
# shell and LuaJIT say them); "merge_properties", the name 0.2 used, stays a synonym.
MERGE_POLICIES: Dict[str, int] = {"report": 0, "server_wins": 1, "client_wins": 2, "properties": 3, "merge_properties": 3}
# An object's unsaved change (tether_pending).
PENDING_NAMES: Dict[int, Optional[Pending]] = {0: None, 1: "insert", 2: "update", 3: "delete"}
# 2 added predicate, arguments, argument_count; 3 offset, server_query;
# 4 result_type, properties, batch_size, progress; 5 live.
FETCH_OPTIONS_VERSION = 6

# What a fetch answers (tether_result_type).
RESULT_OBJECTS = 0
RESULT_IDS = 1
RESULT_COUNT = 2
RESULT_VALUES = 3
RESULT_NAMES = {RESULT_OBJECTS: "objects", RESULT_IDS: "ids", RESULT_COUNT: "count",
                RESULT_VALUES: "values"}

# What tether_debug_count counts, process-wide (debug counters, for leak checks),
# by the names debug_counts() uses.
DEBUG_CONTEXTS = 1
DEBUG_OBJECTS = 2
DEBUG_OBJECT_HANDLES = 3
DEBUG_RESULTS = 4
DEBUG_TASKS = 5
DEBUG_OBSERVERS = 6
DEBUG_THREADS = 7
DEBUG_REQUESTS = 9
DEBUG_NAMES = {
    DEBUG_CONTEXTS: "contexts",
    DEBUG_OBJECTS: "objects",
    DEBUG_OBJECT_HANDLES: "object_handles",
    DEBUG_RESULTS: "results",
    DEBUG_TASKS: "tasks",
    DEBUG_OBSERVERS: "observers",
    DEBUG_THREADS: "threads",
    DEBUG_REQUESTS: "requests",
}


class tether_value(Structure):
    _fields_ = [
        ("type", c_int),
        ("integer", c_int64),
        ("real", c_double),
        ("text", c_void_p),      # char *, owned by the value: read with string_at
        ("length", c_size_t),
    ]


class tether_local_store(Structure):
    _fields_ = [
        ("version", c_uint),
        ("configuration", c_char_p),
        ("path", c_char_p),
        ("specs_json", c_char_p),
    ]


class tether_context_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("store_path", c_char_p),
        ("delivery", c_int),
        ("staleness_ms", c_int64),
        ("timeout_ms", c_int64),
        ("object_cache_size", c_size_t),
        ("merge_policy", c_int),
        ("local_stores", POINTER(tether_local_store)),  # borrowed for the open call
        ("local_store_count", c_size_t),
        ("sync_interval_ms", c_int64),
        ("full_check_interval_ms", c_int64),
        ("exclusive", c_int),
    ]


class tether_kinto_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("server_url", c_char_p),
        ("bucket", c_char_p),
        ("username", c_char_p),
        ("password", c_char_p),
    ]


class tether_postgres_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("conninfo", c_char_p),
        ("schema", c_char_p),
    ]


# void (*)(tether_task *, int64_t received, int64_t total, void *userdata): total
# is -1 when the server did not say. Declared before the options that hold one.
PROGRESS_CB = CFUNCTYPE(None, c_void_p, c_int64, c_int64, c_void_p)


class tether_fetch_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("entity", c_char_p),
        ("sort", c_char_p),
        ("limit", c_int64),
        ("policy", c_int),
        # since version 2
        ("predicate", c_char_p),
        ("arguments", POINTER(tether_value)),   # borrowed for the call
        ("argument_count", c_size_t),
        # since version 3
        ("offset", c_int64),                    # 0 to 2**31-1
        ("server_query", c_char_p),             # NULL: the predicate's filters
        # since version 4
        ("result_type", c_int),                 # RESULT_*
        ("properties", c_char_p),               # RESULT_VALUES: names, comma-separated
        ("batch_size", c_size_t),               # 0: the results hold their objects
        ("progress", PROGRESS_CB),              # NULL: none
        # since version 5
        ("live", c_int),                        # nonzero: answer again on each change
        # since version 6
        ("related_owner", c_void_p),            # with related_name: a to-many's owner (borrowed)
        ("related_name", c_char_p),             # the to-many's name on the owner's entity
    ]


class tether_save_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("merge_policy", c_int),                # -1: the context's
        ("progress", PROGRESS_CB),              # NULL: none
    ]


class tether_specdef_field(Structure):
    # Strings borrowed from the tether_specdef until tether_specdef_free;
    # strings NULL when the field has none; numbers always given.
    _fields_ = [
        ("tag", c_char_p),
        ("code", c_int),
        ("type", c_char_p),
        ("opt", c_char_p),
        ("key", c_int),
        ("len", c_int),
        ("words", c_int),
        ("maxwords", c_int),
        ("seq", c_int),
        ("fmt", c_char_p),
        ("open", c_char_p),
        ("pre", c_char_p),
        ("val", c_char_p),        # the values joined by "/"
        ("val_count", c_size_t),
    ]


# Handles are opaque pointers, passed around as c_void_p (ints in Python).
handle = c_void_p

# void (*)(tether_object *, const char *key, int status, void *userdata)
OBSERVER_CB = CFUNCTYPE(None, c_void_p, c_char_p, c_int, c_void_p)
# void (*)(tether_context *, int online, int status, void *userdata)
ONLINE_CB = CFUNCTYPE(None, c_void_p, c_int, c_int, c_void_p)
# void (*)(tether_task *, tether_phase, int status, const char *message,
#          tether_results *results, void *userdata)
# `results` is owned by the callee: whoever receives it must release it.
FETCH_CB = CFUNCTYPE(None, c_void_p, c_int, c_int, c_char_p, c_void_p, c_void_p)
# void (*)(tether_task *, int status, const char *message,
#          tether_save_report *report, void *userdata): report borrowed for the call.
SAVE_CB = CFUNCTYPE(None, c_void_p, c_int, c_char_p, c_void_p, c_void_p)

# void (*)(tether_request *, void *userdata): a host connection's request and cancel.
REQUEST_CB = CFUNCTYPE(None, c_void_p, c_void_p)
# void (*)(void *userdata)
RELEASE_CB = CFUNCTYPE(None, c_void_p)

CONNECTION_VERSION = 1
(REQUEST_SERVER_INFO, REQUEST_SPECS, REQUEST_PAGE, REQUEST_COUNT, REQUEST_RECORDS,
 REQUEST_WRITE) = range(6)
OUTCOME_WRITTEN, OUTCOME_DELETED, OUTCOME_CONFLICT, OUTCOME_FAILED = range(4)


class tether_connection(Structure):
    _fields_ = [
        ("version", c_uint),
        ("identity", c_char_p),
        ("request", REQUEST_CB),
        ("cancel", REQUEST_CB),
        ("release", RELEASE_CB),
        ("userdata", c_void_p),
    ]


# ------------------------------------------------------------------ declarations


def status_error(status: int) -> TetherError:
    """The exception for a negative status, with the library's message. Call
    it at once after the failing call, on the same thread (the message is
    the thread's last): what the errcheck raises, for the hot paths that
    check the status themselves."""
    # Read the message at once, on this thread, before anything else.
    msg = lib.tether_errmsg()
    return make_error(status, msg.decode("utf-8", "replace") if msg else "", _errstr(status))


def _status_check(result: int, func: Any, args: Any) -> int:
    if result < 0:
        raise status_error(result)
    return result


# The declared functions are typed Any: ctypes checks their arguments at
# run time by argtypes, which a type checker does not read.
def _declare(name: str, restype: Any, argtypes: List[Any], status: bool = True) -> Any:
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = argtypes
    if status:
        f.errcheck = _status_check
    return f


def _declare_raw(name: str, restype: Any, argtypes: List[Any], dll: Optional[ctypes.CDLL] = None) -> Any:
    """A second function object for `name`, with no errcheck: for the hot
    paths (peek, get, reading results), which test the status inline and
    raise status_error(status), exactly what the errcheck would. Pointers
    are passed as addresses (c_void_p from an int converts several times
    faster than a POINTER argument)."""
    f = (dll if dll is not None else lib)[name]   # lib[name]: a new object
    f.restype = restype
    f.argtypes = argtypes
    return f


# Not status-returning.
tether_version = _declare("tether_version", c_char_p, [], status=False)
tether_version_number = _declare("tether_version_number", c_int, [], status=False)
tether_errmsg = _declare("tether_errmsg", c_char_p, [], status=False)
tether_errstr = _declare("tether_errstr", c_char_p, [c_int], status=False)
tether_value_free = _declare("tether_value_free", None, [POINTER(tether_value)], status=False)


def _errstr(status: int) -> str:
    s = tether_errstr(status)
    return s.decode("ascii", "replace") if s else "TETHER_E_UNKNOWN"


# Context.
tether_context_options_init = _declare(
    "tether_context_options_init", c_int, [POINTER(tether_context_options), c_uint])
tether_kinto_options_init = _declare(
    "tether_kinto_options_init", c_int, [POINTER(tether_kinto_options), c_uint])
tether_context_open_kinto = _declare(
    "tether_context_open_kinto", c_int,
    [POINTER(tether_context_options), POINTER(tether_kinto_options), POINTER(c_void_p)])
tether_postgres_options_init = _declare(
    "tether_postgres_options_init", c_int, [POINTER(tether_postgres_options), c_uint])
tether_context_open_postgres = _declare(
    "tether_context_open_postgres", c_int,
    [POINTER(tether_context_options), POINTER(tether_postgres_options), POINTER(c_void_p)])
tether_postgres_install = _declare(
    "tether_postgres_install", c_int, [POINTER(tether_postgres_options), POINTER(c_int)])
tether_context_close = _declare("tether_context_close", c_int, [c_void_p])
tether_context_is_online = _declare("tether_context_is_online", c_int, [c_void_p, POINTER(c_int)])
tether_context_changed = _declare("tether_context_changed", c_int, [c_void_p, c_char_p])
tether_context_fd = _declare("tether_context_fd", c_int, [c_void_p, POINTER(c_int)])
tether_context_poll = _declare(
    "tether_context_poll", c_int, [c_void_p, c_int, POINTER(c_size_t)])

# Model.
tether_context_entity_count = _declare(
    "tether_context_entity_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_context_entity_at = _declare(
    "tether_context_entity_at", c_int, [c_void_p, c_size_t, POINTER(c_void_p)])
tether_context_entity = _declare(
    "tether_context_entity", c_int, [c_void_p, c_char_p, POINTER(c_void_p)])
tether_entity_name = _declare("tether_entity_name", c_int, [c_void_p, POINTER(c_char_p)])
tether_entity_route = _declare("tether_entity_route", c_int, [c_void_p, POINTER(c_char_p)])
tether_entity_configuration = _declare("tether_entity_configuration", c_int, [c_void_p, POINTER(c_char_p)])
tether_local_store_init = _declare("tether_local_store_init", c_int, [POINTER(tether_local_store), c_uint])
tether_local_store_drop = _declare("tether_local_store_drop", c_int, [POINTER(tether_local_store), c_char_p, c_char_p])
tether_entity_operations = _declare("tether_entity_operations", c_int, [c_void_p, POINTER(c_uint)])
tether_entity_code = _declare("tether_entity_code", c_int, [c_void_p, POINTER(c_int)])
tether_context_diagnostic_count = _declare("tether_context_diagnostic_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_context_diagnostic_at = _declare("tether_context_diagnostic_at", c_int,
                                        [c_void_p, c_size_t, POINTER(c_char_p), POINTER(c_char_p), POINTER(c_char_p)])
tether_entity_attribute_count = _declare(
    "tether_entity_attribute_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_entity_attribute_at = _declare(
    "tether_entity_attribute_at", c_int,
    [c_void_p, c_size_t, POINTER(c_char_p), POINTER(c_int), POINTER(c_int), POINTER(c_uint)])
tether_entity_attribute_index = _declare(
    "tether_entity_attribute_index", c_int, [c_void_p, c_char_p, POINTER(c_size_t)])
tether_entity_attribute_index_by_code = _declare(
    "tether_entity_attribute_index_by_code", c_int, [c_void_p, c_int, POINTER(c_size_t)])
tether_entity_attribute_target = _declare(
    "tether_entity_attribute_target", c_int, [c_void_p, c_size_t, POINTER(c_void_p), POINTER(c_int)])
tether_entity_attribute_allowed = _declare(
    "tether_entity_attribute_allowed", c_int, [c_void_p, c_size_t, POINTER(c_char_p)])
tether_entity_relationship_count = _declare(
    "tether_entity_relationship_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_entity_relationship_at = _declare(
    "tether_entity_relationship_at", c_int,
    [c_void_p, c_size_t, POINTER(c_char_p), POINTER(c_void_p), POINTER(c_size_t)])

# Objects.
tether_context_object = _declare(
    "tether_context_object", c_int, [c_void_p, c_char_p, c_char_p, POINTER(c_void_p)])
tether_object_retain = _declare("tether_object_retain", c_int, [c_void_p])
tether_object_free = _declare("tether_object_free", c_int, [c_void_p])
tether_object_entity = _declare("tether_object_entity", c_int, [c_void_p, POINTER(c_void_p)])
tether_object_id = _declare("tether_object_id", c_int, [c_void_p, POINTER(c_char_p)])
tether_object_version = _declare("tether_object_version", c_int, [c_void_p, POINTER(c_int64)])
tether_object_peek = _declare(
    "tether_object_peek", c_int, [c_void_p, c_char_p, POINTER(tether_value)])
tether_object_get = _declare(
    "tether_object_get", c_int, [c_void_p, c_char_p, POINTER(tether_value)])
tether_object_peek_code = _declare(
    "tether_object_peek_code", c_int, [c_void_p, c_int, POINTER(tether_value)])
tether_object_get_code = _declare(
    "tether_object_get_code", c_int, [c_void_p, c_int, POINTER(tether_value)])

# Observers.
tether_object_observe = _declare(
    "tether_object_observe", c_int,
    [c_void_p, c_char_p, OBSERVER_CB, c_void_p, POINTER(c_void_p)])
tether_observer_cancel = _declare("tether_observer_cancel", c_int, [c_void_p])
tether_context_observe_online = _declare(
    "tether_context_observe_online", c_int, [c_void_p, ONLINE_CB, c_void_p, POINTER(c_void_p)])

# Fetch.
tether_fetch_options_init = _declare(
    "tether_fetch_options_init", c_int, [POINTER(tether_fetch_options), c_uint])
tether_fetch_start = _declare(
    "tether_fetch_start", c_int,
    [c_void_p, POINTER(tether_fetch_options), FETCH_CB, c_void_p, POINTER(c_void_p)])
tether_task_cancel = _declare("tether_task_cancel", c_int, [c_void_p])

# Results.
tether_results_type = _declare("tether_results_type", c_int, [c_void_p, POINTER(c_int)])
tether_results_count = _declare("tether_results_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_results_object_at = _declare(
    "tether_results_object_at", c_int, [c_void_p, c_size_t, POINTER(c_void_p)])
tether_results_objects = _declare(
    "tether_results_objects", c_int,
    [c_void_p, c_size_t, c_void_p, c_size_t, POINTER(c_size_t)])   # out: tether_object *[]
tether_results_id_at = _declare(
    "tether_results_id_at", c_int, [c_void_p, c_size_t, POINTER(c_char_p)])
tether_results_value_at = _declare(
    "tether_results_value_at", c_int, [c_void_p, c_size_t, c_char_p, POINTER(tether_value)])
tether_results_change_count = _declare(
    "tether_results_change_count", c_int, [c_void_p, c_int, POINTER(c_size_t)])
tether_results_change_at = _declare(
    "tether_results_change_at", c_int,
    [c_void_p, c_int, c_size_t, POINTER(c_size_t), POINTER(c_size_t)])
tether_results_free = _declare("tether_results_free", c_int, [c_void_p])

# Editing and saving.
tether_object_set = _declare("tether_object_set", c_int, [c_void_p, c_char_p, POINTER(tether_value)])
tether_object_set_code = _declare("tether_object_set_code", c_int, [c_void_p, c_int, POINTER(tether_value)])
tether_context_insert = _declare(
    "tether_context_insert", c_int, [c_void_p, c_char_p, c_char_p, POINTER(c_void_p)])
tether_context_insert_values = _declare(
    "tether_context_insert_values", c_int,
    [c_void_p, c_char_p, c_char_p, POINTER(c_char_p), POINTER(tether_value), c_size_t, POINTER(c_void_p)])
tether_object_delete = _declare("tether_object_delete", c_int, [c_void_p])
tether_object_rollback = _declare("tether_object_rollback", c_int, [c_void_p])
tether_context_rollback = _declare("tether_context_rollback", c_int, [c_void_p])
tether_object_pending = _declare("tether_object_pending", c_int, [c_void_p, POINTER(c_int)])
tether_object_changed_key_count = _declare(
    "tether_object_changed_key_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_object_changed_key_at = _declare(
    "tether_object_changed_key_at", c_int, [c_void_p, c_size_t, POINTER(c_char_p)])
tether_object_committed = _declare(
    "tether_object_committed", c_int, [c_void_p, c_char_p, POINTER(tether_value)])
tether_context_change_count = _declare("tether_context_change_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_context_changes = _declare("tether_context_changes", c_int, [c_void_p, POINTER(c_void_p)])
tether_object_related = _declare("tether_object_related", c_int, [c_void_p, c_char_p, POINTER(c_void_p)])
tether_object_set_related = _declare("tether_object_set_related", c_int, [c_void_p, c_char_p, c_void_p])
tether_object_uri = _declare("tether_object_uri", c_int, [c_void_p, POINTER(tether_value)])
tether_context_object_for_uri = _declare(
    "tether_context_object_for_uri", c_int, [c_void_p, c_char_p, POINTER(c_void_p)])
tether_context_open_sibling = _declare(
    "tether_context_open_sibling", c_int, [c_void_p, c_char_p, c_int, POINTER(c_void_p)])
tether_context_local_object = _declare(
    "tether_context_local_object", c_int, [c_void_p, c_void_p, POINTER(c_void_p)])
tether_save_options_init = _declare("tether_save_options_init", c_int, [POINTER(tether_save_options), c_uint])
tether_save_start = _declare(
    "tether_save_start", c_int, [c_void_p, POINTER(tether_save_options), SAVE_CB, c_void_p, POINTER(c_void_p)])
tether_save_report_counts = _declare(
    "tether_save_report_counts", c_int, [c_void_p, POINTER(c_size_t), POINTER(c_size_t)])
tether_save_report_failure_count = _declare(
    "tether_save_report_failure_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_save_report_failure_at = _declare(
    "tether_save_report_failure_at", c_int,
    [c_void_p, c_size_t, POINTER(c_void_p), POINTER(c_int), POINTER(c_char_p)])
tether_save_report_conflict_at = _declare(
    "tether_save_report_conflict_at", c_int,
    [c_void_p, c_size_t, POINTER(c_int64), POINTER(c_int64), POINTER(c_size_t)])
tether_save_report_conflict_key_at = _declare(
    "tether_save_report_conflict_key_at", c_int, [c_void_p, c_size_t, c_size_t, POINTER(c_char_p)])
tether_save_report_server_value = _declare(
    "tether_save_report_server_value", c_int, [c_void_p, c_size_t, c_char_p, POINTER(tether_value)])

# Perforce spec definitions.
tether_specdef_parse = _declare("tether_specdef_parse", c_int, [c_char_p, POINTER(c_void_p)])
tether_specdef_field_count = _declare("tether_specdef_field_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_specdef_field_at = _declare("tether_specdef_field_at", c_int,
                                   [c_void_p, c_size_t, POINTER(tether_specdef_field)])
tether_specdef_free = _declare("tether_specdef_free", c_int, [c_void_p])
tether_specdef_from_form = _declare("tether_specdef_from_form", c_int, [c_char_p, POINTER(c_void_p)])
tether_specdef_text = _declare("tether_specdef_text", c_int, [c_void_p, POINTER(c_char_p)])

# Diagnostics.
tether_debug_count = _declare("tether_debug_count", c_int, [c_int, POINTER(c_int64)])

# Logging (tether.logs): the process-wide hook. The callback gets the level,
# the category and the message (both borrowed for the call), and userdata.
LOG_OFF, LOG_ERROR, LOG_WARNING, LOG_INFO, LOG_DEBUG = range(5)
LOG_CB = CFUNCTYPE(None, c_int, c_char_p, c_char_p, c_void_p)
tether_log_set = _declare("tether_log_set", c_int, [c_int, LOG_CB, c_void_p])

# The hot paths' versions (see _declare_raw): status tested by the caller;
# `out` (a tether_value * or const char **) passed as an address.
raw_object_peek = _declare_raw("tether_object_peek", c_int, [c_void_p, c_char_p, c_void_p])
raw_object_get = _declare_raw("tether_object_get", c_int, [c_void_p, c_char_p, c_void_p])
raw_object_peek_code = _declare_raw("tether_object_peek_code", c_int, [c_void_p, c_int, c_void_p])
raw_object_get_code = _declare_raw("tether_object_get_code", c_int, [c_void_p, c_int, c_void_p])
raw_object_id = _declare_raw("tether_object_id", c_int, [c_void_p, c_void_p])
raw_results_id_at = _declare_raw("tether_results_id_at", c_int, [c_void_p, c_size_t, c_void_p])
raw_results_value_at = _declare_raw(
    "tether_results_value_at", c_int, [c_void_p, c_size_t, c_char_p, c_void_p])
# tether_value_free only frees the value's text and zeroes it: it never
# blocks and never calls back, so it is called with the GIL held (PyDLL),
# which saves releasing and taking it again around so short a call.
raw_value_free = _declare_raw("tether_value_free", None, [c_void_p],
                               dll=ctypes.PyDLL(path))


def errstr(status: int) -> str:
    """The library's constant name for a status, e.g. "TETHER_E_NETWORK"."""
    return _errstr(status)


def version() -> str:
    """The version string of the loaded library."""
    return tether_version().decode("ascii")


def version_number() -> int:
    """The library's version as a number (MAJOR * 1000000 + MINOR * 1000 + PATCH)."""
    return tether_version_number()


def debug_counts() -> Dict[str, int]:
    """How many contexts, objects, object handles, results, tasks, observers
    and library threads exist right now in this process (tether_debug_count),
    by name: for leak checks in tests and long-running hosts."""
    out = c_int64()
    counts = {}
    for what, name in DEBUG_NAMES.items():
        tether_debug_count(what, ctypes.byref(out))
        counts[name] = out.value
    return counts


# ------------------------------------------------------------------ host connections

tether_connection_init = _declare("tether_connection_init", c_int, [POINTER(tether_connection), c_uint])
tether_context_open_host = _declare(
    "tether_context_open_host", c_int,
    [POINTER(tether_context_options), POINTER(tether_connection), POINTER(c_void_p)])
tether_request_kind = _declare("tether_request_kind", c_int, [c_void_p, POINTER(c_int)])
tether_request_entity = _declare("tether_request_entity", c_int, [c_void_p, POINTER(c_char_p), POINTER(c_char_p)])
tether_request_cursor = _declare("tether_request_cursor", c_int, [c_void_p, POINTER(c_char_p)])
tether_request_limit = _declare("tether_request_limit", c_int, [c_void_p, POINTER(c_int64)])
tether_request_since = _declare("tether_request_since", c_int, [c_void_p, POINTER(c_int64), POINTER(c_int)])
tether_request_query = _declare("tether_request_query", c_int, [c_void_p, POINTER(c_char_p)])
tether_request_sort_count = _declare("tether_request_sort_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_request_sort_at = _declare("tether_request_sort_at", c_int,
                                  [c_void_p, c_size_t, POINTER(c_char_p), POINTER(c_int)])
tether_request_id_count = _declare("tether_request_id_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_request_id_at = _declare("tether_request_id_at", c_int, [c_void_p, c_size_t, POINTER(c_char_p)])
tether_request_write_count = _declare("tether_request_write_count", c_int, [c_void_p, POINTER(c_size_t)])
tether_request_write_at = _declare(
    "tether_request_write_at", c_int,
    [c_void_p, c_size_t, POINTER(c_int), POINTER(c_char_p), POINTER(c_char_p), POINTER(c_char_p),
     POINTER(c_int64), POINTER(c_int)])
tether_request_set_server_info = _declare("tether_request_set_server_info", c_int, [c_void_p, c_char_p, c_char_p])
tether_request_add_spec = _declare("tether_request_add_spec", c_int,
                                   [c_void_p, c_char_p, c_char_p, c_char_p, c_char_p, c_uint])
tether_request_add_record = _declare("tether_request_add_record", c_int, [c_void_p, c_char_p])
tether_request_add_record_values = _declare(
    "tether_request_add_record_values", c_int, [c_void_p, POINTER(c_char_p), POINTER(tether_value), c_size_t])
tether_request_add_specdef = _declare("tether_request_add_specdef", c_int, [c_void_p, c_char_p, c_char_p, c_uint])
tether_request_add_deleted = _declare("tether_request_add_deleted", c_int, [c_void_p, c_char_p])
tether_request_set_page = _declare("tether_request_set_page", c_int, [c_void_p, c_char_p, c_int64, c_int64])
tether_request_set_count = _declare("tether_request_set_count", c_int, [c_void_p, c_int64])
tether_request_set_outcome = _declare("tether_request_set_outcome", c_int,
                                      [c_void_p, c_size_t, c_int, c_char_p, c_int, c_char_p])
# Completing reports its status itself (a cancelled request's is expected).
tether_request_complete_raw = _declare_raw("tether_request_complete", c_int, [c_void_p, c_int, c_char_p])
