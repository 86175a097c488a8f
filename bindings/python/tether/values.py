"""Values between Python and C: strings, tether_value, predicate arguments
and a fetch's options; the option names (POLICIES, RESULT_TYPES...).

peek/get and a values fetch read many values; their fast path is here too
(see "reading values fast")."""

from __future__ import annotations

import ctypes
import json
import struct
import sys
from ctypes import c_size_t
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _lib
from ._types import Phase, Value
from .errors import TetherError

# What a fetch takes, by the types its options accept.
Argument = Union[None, bool, int, float, str]        # a predicate's $n
Progress = Callable[[int, Optional[int]], object]     # progress(received, total or None)


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


def _value(value: Value) -> Tuple[_lib.tether_value, Optional[ctypes.Array[ctypes.c_char]]]:
    """A Python value as a tether_value, and what keeps its text alive:
    None, bool, int, float, str, or a list/dict (as JSON)."""
    v = _lib.tether_value()
    keep = None
    if value is None:
        v.type = _lib.TYPE_NULL
    elif isinstance(value, bool):
        v.type, v.integer = _lib.TYPE_BOOLEAN, int(value)
    elif isinstance(value, int):
        if not -2 ** 63 <= value < 2 ** 63:
            raise OverflowError("tether: %d does not fit a 64-bit integer" % value)
        v.type, v.integer = _lib.TYPE_INTEGER, value
    elif isinstance(value, float):
        v.type, v.real = _lib.TYPE_REAL, value
    elif isinstance(value, (str, list, dict, tuple)):
        text = value if isinstance(value, str) else json.dumps(value, allow_nan=False)
        keep = ctypes.create_string_buffer(text.encode("utf-8"))
        v.type = _lib.TYPE_TEXT if isinstance(value, str) else _lib.TYPE_JSON
        v.text, v.length = ctypes.addressof(keep), len(keep) - 1
    else:
        raise TypeError("tether: cannot set a %s: give None, bool, int, float, str, list or dict"
                        % type(value).__name__)
    return v, keep


def _key(key: Any) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TypeError("key must be an attribute name (str) or code (int), not %s" % type(key).__name__)
