"""Perforce spec definitions ("specdef" strings), parsed with no server.

    from tether import perforce
    fields = perforce.parse_specdef(specdef)    # e.g. the `specdef` field of
    [f.tag for f in fields if f.key]            # `p4 -ztag client -o`: ['Client']

Each field keeps Perforce's own words, so a definition can be checked
offline against what `p4 spec -o` shows. A malformed definition raises
tether.InvalidError, its message naming the field.
"""

from ctypes import byref, c_size_t, c_void_p
from dataclasses import dataclass
from typing import Optional, Tuple

from . import _lib
from .errors import InvalidError

__all__ = ["SpecDefField", "parse_specdef"]


@dataclass(frozen=True)
class SpecDefField:
    """One field of a spec definition. ``opt`` reads the old flags as
    Perforce does (rq: required, ro: always, rq;ro: key); ``key`` is True for
    the field that names a record; absent numbers and strings are None."""

    tag: str
    code: int
    type: str
    opt: str
    key: bool
    len: Optional[int] = None
    words: Optional[int] = None
    maxwords: Optional[int] = None
    fmt: Optional[str] = None
    seq: Optional[int] = None
    open: Optional[str] = None
    pre: Optional[str] = None
    val: Tuple[str, ...] = ()


def _text(b):
    return None if b is None else b.decode("utf-8")


def _number(n):
    return None if n < 0 else n


def parse_specdef(text):
    """The fields of the spec definition ``text`` (str or UTF-8 bytes), in
    its order, as a list of SpecDefField."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if b"\0" in data:
        raise InvalidError("specdef: the specdef holds U+0000")
    handle = c_void_p()
    _lib.tether_specdef_parse(data, byref(handle))
    try:
        count = c_size_t()
        _lib.tether_specdef_field_count(handle, byref(count))
        fields = []
        for i in range(count.value):
            f = _lib.tether_specdef_field()
            _lib.tether_specdef_field_at(handle, i, byref(f))
            # Copied out before the free below: the strings are borrowed.
            fields.append(SpecDefField(
                tag=_text(f.tag), code=f.code, type=_text(f.type), opt=_text(f.opt), key=bool(f.key),
                len=_number(f.len), words=_number(f.words), maxwords=_number(f.maxwords), fmt=_text(f.fmt),
                seq=_number(f.seq), open=_text(f.open), pre=_text(f.pre),
                val=tuple(_text(f.val).split("/")) if f.val is not None else ()))
        return fields
    finally:
        _lib.tether_specdef_free(handle)
