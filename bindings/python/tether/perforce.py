"""Perforce spec definitions ("specdef" strings), parsed with no server
as Perforce's own decoder reads them, and a Perforce-style port: a
connection whose entities are spec types.

    from tether import perforce
    fields = perforce.parse_specdef(specdef)    # e.g. the `specdef` field of
    [f.tag for f in fields if f.key]            # `p4 -ztag client -o`: ['Client']
    specdef = perforce.specdef_from_form(p4.fetch_jobspec())   # a custom jobspec

Each field keeps Perforce's own words, so a definition can be checked
offline against what `p4 spec -o` shows. What Perforce refuses (an unknown
type, opt or open) raises tether.InvalidError, its message naming the field.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import zlib
from ctypes import byref, c_char_p, c_size_t, c_void_p
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

from . import _lib
from .errors import InvalidError, NetworkError, ProtocolError
from .host import Connection, Operation, Page, PageRequest, Spec

__all__ = ["SpecDefField", "parse_specdef", "specdef_from_form", "Port", "FileSource", "CommandSource"]


@dataclass(frozen=True)
class SpecDefField:
    """One field of a spec definition, as Perforce's decoder reads it.
    ``code`` is the field's index when the specdef gives none, 0 for
    ``code:NNN`` (Perforce's AutoId); ``opt`` is ``empty`` with ``z``, else
    the old flags decide without one (rq: required, ro: always, rq;ro: key);
    ``key`` is True for the field that names a record. ``words`` is 1 unless
    given, other numbers 0; ``fmt`` (L, R, I, C) and ``open`` (isolate,
    propagate) None for Perforce's normal and none; ``pre`` None if none."""

    tag: str
    code: int
    type: str
    opt: str
    key: bool
    len: int = 0
    words: int = 1
    maxwords: int = 0
    fmt: Optional[str] = None
    seq: int = 0
    open: Optional[str] = None
    pre: Optional[str] = None
    val: Tuple[str, ...] = ()


def _text(b: Optional[bytes]) -> Any:   # str, or None for NULL (typed where it lands)
    return None if b is None else b.decode("utf-8")


def parse_specdef(text: Union[str, bytes]) -> List[SpecDefField]:
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
        fields: List[SpecDefField] = []
        for i in range(count.value):
            f = _lib.tether_specdef_field()
            _lib.tether_specdef_field_at(handle, i, byref(f))
            # Copied out before the free below: the strings are borrowed.
            fields.append(SpecDefField(
                tag=_text(f.tag), code=f.code, type=_text(f.type), opt=_text(f.opt), key=bool(f.key),
                len=f.len, words=f.words, maxwords=f.maxwords, fmt=_text(f.fmt),
                seq=f.seq, open=_text(f.open), pre=_text(f.pre),
                val=tuple(_text(f.val).split("/")) if f.val is not None else ()))
        return fields
    finally:
        _lib.tether_specdef_free(handle)


def specdef_from_form(form: Mapping[str, Any]) -> str:
    """The specdef a spec-of-specs form describes: ``p4 jobspec -o`` or
    ``p4 spec -o TYPE``, as P4Python's ``fetch_jobspec()`` gives it
    ("Fields" a list of ``code name type length opt`` lines; Words, Formats,
    Values, Presets, Openable, Maxwords likewise; Comments ignored) or as
    tagged output does (Fields0, Fields1, ...). Give the result to
    ``parse_specdef`` or ``Spec.from_specdef``. A malformed form raises
    tether.InvalidError naming the line."""
    data = json.dumps(dict(form), ensure_ascii=False).encode("utf-8")
    handle = c_void_p()
    _lib.tether_specdef_from_form(data, byref(handle))
    try:
        text = c_char_p()
        _lib.tether_specdef_text(handle, byref(text))
        specdef: str = _text(text.value)   # never NULL on success
        return specdef
    finally:
        _lib.tether_specdef_free(handle)


# ------------------------------------------------------------------ a Perforce-style port

class FileSource:
    """Spec types and records kept in files, as a Perforce server would send
    them: ``<type>.specdef`` (the `specdef` string) and ``<type>.jsonl``, one
    record a line in the shape of ``p4 -ztag -Mj <type> -o`` (the spec's tags,
    a list field's items as View0, View1, ...)."""

    def __init__(self, directory: Union[str, os.PathLike[str]]) -> None:
        self.directory = os.fspath(directory)
        self.name = self.directory

    def types(self) -> List[str]:
        return sorted(name[:-len(".specdef")] for name in os.listdir(self.directory) if name.endswith(".specdef"))

    def specdef(self, spec_type: str) -> str:
        with open(os.path.join(self.directory, spec_type + ".specdef"), encoding="utf-8") as f:
            return f.read().strip()

    def records(self, spec_type: str) -> List[Dict[str, Any]]:
        path = os.path.join(self.directory, spec_type + ".jsonl")
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


class CommandSource:
    """Spec types and records from a `p4` command line (``["p4", "-p",
    "ssl:perforce:1666", "-u", "alice"]``): ``p4 -ztag -Mj spec -o <type>``
    for a type's specdef (its ``specdef`` field), and ``p4 -ztag -Mj
    <listing>`` for its records, one JSON object a line. `listings` names
    the command listing each type (``{"client": ["clients"], "change":
    ["changes", "-l", "-m", "500"]}``)."""

    def __init__(self, command: Sequence[str], listings: Mapping[str, Sequence[str]],
                 timeout: Optional[float] = 60) -> None:
        self.command = list(command)
        self.listings = dict(listings)
        self.timeout = timeout
        # What names the server in the store's identity: never a password (-P).
        words = [w for i, w in enumerate(self.command) if w != "-P" and (i == 0 or self.command[i - 1] != "-P")]
        self.name = " ".join(words)

    def _run(self, args: Sequence[str]) -> List[Dict[str, str]]:   # tagged output: all text
        done = subprocess.run(self.command + ["-ztag", "-Mj"] + list(args), capture_output=True,
                              timeout=self.timeout, check=False)
        if done.returncode != 0:
            raise NetworkError("%s: %s" % (" ".join(args), done.stderr.decode("utf-8", "replace").strip()
                                           or "exit status %d" % done.returncode))
        return [json.loads(line) for line in done.stdout.decode("utf-8").splitlines() if line.strip()]

    def types(self) -> List[str]:
        return sorted(self.listings)

    def specdef(self, spec_type: str) -> str:
        for record in self._run(["spec", "-o", spec_type]):
            if "specdef" in record:
                return record["specdef"]
        raise ProtocolError("p4 spec -o %s gave no specdef" % spec_type)

    def records(self, spec_type: str) -> List[Dict[str, str]]:
        return self._run(self.listings[spec_type])


# Keys of Perforce's listings (`p4 changes -l`, `p4 clients`) that name spec tags otherwise.
_LISTING_KEYS = {"desc": "Description", "time": "Date"}


class Source(Protocol):
    """What a Port reads (FileSource and CommandSource are two): a `name` for
    the store's identity, the spec types, each one's specdef and records."""

    name: str

    def types(self) -> List[str]: ...
    def specdef(self, spec_type: str) -> str: ...
    def records(self, spec_type: str) -> List[Dict[str, Any]]: ...


class Port(Connection):
    """A Perforce-style connection: each spec type a server describes with a
    specdef is an entity (fields addressed by Perforce's codes: a client's
    Owner is 304), its records read from `source` (a FileSource or a
    CommandSource). Read-only (edits may be allowed locally with
    `operations`, but nothing is written back: Perforce's own forms,
    `p4 client -i`, would carry writes). Perforce records have no version: each gets one that
    grows when the record changes (see _version)."""

    def __init__(self, source: Source, identity: Optional[str] = None,
                 operations: Sequence[Operation] = ("fetch",)) -> None:
        self.source = source
        self.operations = tuple(operations)
        self.identity = identity or "perforce-style port over %s" % source.name
        self._specs: Dict[str, List[SpecDefField]] = {}
        self._versions: Dict[Tuple[str, str], Tuple[int, int]] = {}   # (type, id) -> (checksum, version)
        self._lock = threading.Lock()

    def server_info(self) -> Tuple[str, str]:
        return ("perforce-style port", "1")

    def specs(self) -> List[Spec]:
        specs = []
        for spec_type in self.source.types():
            specdef = self.source.specdef(spec_type)
            try:
                fields = parse_specdef(specdef)
            except InvalidError as error:
                raise InvalidError("%s: %s" % (spec_type, error.message)) from None
            with self._lock:
                self._specs[spec_type] = fields
            specs.append(Spec.from_specdef(spec_type, specdef, operations=self.operations))
        return specs

    def _record(self, spec_type: str, raw: Mapping[str, Any]) -> Dict[str, Any]:
        """A record as tagged output gives it, its keys in the spec's words."""
        with self._lock:
            fields = self._specs.get(spec_type, ())
        tags = {f.tag.lower(): f.tag for f in fields}
        record: Dict[str, Any] = {}
        for key, value in raw.items():
            name = _LISTING_KEYS.get(key, key)
            record[tags.get(name.lower(), name)] = value
        record["tether_version"] = self._version(spec_type, record)
        return record

    def _version(self, spec_type: str, record: Mapping[str, Any]) -> int:
        """A version that grows when the record changes, as the library needs
        (an older version than the one it holds is not taken): the time in
        µs when this port first saw the record as it is."""
        key = (spec_type, json.dumps(record.get(self._id_tag(spec_type)), sort_keys=True))  # type: ignore[arg-type]  # tag None: no key field
        digest = zlib.crc32(json.dumps(record, sort_keys=True).encode("utf-8"))
        with self._lock:
            seen = self._versions.get(key)
            if seen is None or seen[0] != digest:
                version = max(time.time_ns() // 1000, (seen[1] + 1) if seen else 0)
                self._versions[key] = seen = (digest, version)
            return seen[1]

    def _id_tag(self, spec_type: str) -> Optional[str]:
        with self._lock:
            fields = self._specs.get(spec_type, ())
        return next((f.tag for f in fields if f.key), None)

    def page(self, request: PageRequest) -> Page:
        records = [self._record(request.entity, raw) for raw in self.source.records(request.entity)]
        return Page(records=records, total=len(records))

    def count(self, request: PageRequest) -> int:
        return len(self.source.records(request.entity))

    def records(self, entity: str, ids: List[str], cursor: Optional[str]) -> List[Dict[str, Any]]:
        wanted = set(ids)
        key = self._id_tag(entity)
        return [r for r in (self._record(entity, raw) for raw in self.source.records(entity)) if r.get(key) in wanted]  # type: ignore[arg-type, operator]  # key None: no key field, nothing matches
