"""The model: Entity and Attribute, a Context's Diagnostics, LocalStore."""

from __future__ import annotations

import json
import os
from ctypes import byref, c_char_p, c_int, c_size_t, c_uint, c_void_p
from dataclasses import dataclass
from typing import Any, Iterable, List, Mapping, Optional, Tuple, Union

from . import _lib
from ._types import Key
from .errors import NotFoundError
from .values import OPERATIONS, _cstr, _pystr


# ------------------------------------------------------------------ model

@dataclass(frozen=True)
class Diagnostic:
    """Something the model left out or changed, and why."""
    entity: str
    attribute: Optional[str]
    message: str


@dataclass(frozen=True)
class Attribute:
    """One attribute of an entity."""
    name: str
    code: int
    type: str          # "null", "text", "integer", "real", "boolean" or "json"
    is_id: bool
    is_version: bool
    required: bool
    index: int
    # A reference (a to-one relationship): the entity it refers to, and what
    # deleting that record does to this one ("nullify", "cascade", "deny").
    target: Optional[str] = None
    delete_rule: Optional[str] = None
    # The values it may take (its schema's enum), or None when any of its type.
    allowed: Optional[Tuple[Any, ...]] = None


@dataclass(frozen=True)
class Relationship:
    """A to-many relationship of an entity: `name`, the records of
    `entity` whose attribute `attribute` refers to the owner. Fetch one
    object's with ``obj.related_many(name)`` (a list of Objects) or
    ``obj.related_query(name)`` (a QueryResult: count(), ids(), live()...)."""
    name: str
    entity: str
    attribute: str


@dataclass(frozen=True)
class LocalStore:
    """A local-only store to attach beside the server's (Context's
    ``local_stores``): a SQLite file at ``path`` holding the entities that
    ``specs`` defines (a dict, or JSON text, of entity name to JSON schema,
    as a Kinto collection's), saved there and never sent to the server.
    ``configuration`` names it in object URIs (letters, digits, - and _)."""
    configuration: str
    path: Union[str, os.PathLike[str]]
    specs: Union[str, Mapping[str, Any]]

    def drop(self, entity: str, field: Optional[str] = None) -> None:
        """Drops from the file the records of `entity`, or only its `field`'s
        values, so that an open whose specs leave them out is taken (an open
        never drops what the file holds: it raises StoreError naming it).
        Not while a context has the file open (BusyError); NotFoundError if
        the file, entity or field is not there."""
        raw = _lib.tether_local_store()
        _lib.tether_local_store_init(byref(raw), _lib.LOCAL_STORE_VERSION)
        configuration, path = _cstr(self.configuration, "configuration"), _cstr(os.fspath(self.path), "path")
        raw.configuration, raw.path = configuration, path
        _lib.tether_local_store_drop(byref(raw), _cstr(entity, "entity"), None if field is None else _cstr(field, "field"))


def _local_stores(stores: Optional[Iterable[LocalStore]], keep: List[Any]) -> Tuple[Any, int]:
    """Local stores -> (ctypes array or None, count); the strings the array
    points to are appended to `keep`, which the caller holds across the open."""
    stores = list(stores or ())
    if not stores:
        return None, 0
    array = (_lib.tether_local_store * len(stores))()
    for i, store in enumerate(stores):
        if not isinstance(store, LocalStore):
            raise TypeError("local_stores must hold tether.LocalStore, not %s" % type(store).__name__)
        specs = store.specs if isinstance(store.specs, str) else json.dumps(store.specs)
        _lib.tether_local_store_init(byref(array[i]), _lib.LOCAL_STORE_VERSION)
        fields = [_cstr(store.configuration, "configuration"), _cstr(os.fspath(store.path), "path"),
                  _cstr(specs, "specs")]
        keep.extend(fields)
        array[i].configuration, array[i].path, array[i].specs_json = fields
    return array, len(stores)


_DELETE_RULES = {_lib.DELETE_NULLIFY: "nullify", _lib.DELETE_CASCADE: "cascade", _lib.DELETE_DENY: "deny"}


def _entity_name(handle: Optional[int]) -> str:
    out = c_char_p()
    _lib.tether_entity_name(handle, byref(out))
    return str(_pystr(out.value))


class Entity:
    """A record type of the model (a Kinto collection, or a local store's
    entity). Read once, at first use; its data stays readable after the
    context closes."""

    name: str
    route: str
    configuration: str
    code: int
    operations: frozenset[str]
    attributes: List[Attribute]
    relationships: List[Relationship]

    def __init__(self, ctx: object, handle: Optional[int]) -> None:
        self._ctx = ctx   # its Context
        self._h = handle
        out = c_char_p()
        _lib.tether_entity_name(handle, byref(out))
        self.name = _pystr(out.value)
        _lib.tether_entity_route(handle, byref(out))
        self.route = _pystr(out.value)
        _lib.tether_entity_configuration(handle, byref(out))
        # "" for the server's entities; a local store's configuration otherwise.
        self.configuration = _pystr(out.value)
        code = c_int()
        _lib.tether_entity_code(handle, byref(code))
        self.code = code.value
        ops = c_uint()
        _lib.tether_entity_operations(handle, byref(ops))
        self.operations = frozenset(n for n, bit in OPERATIONS if ops.value & bit)
        n = c_size_t()
        _lib.tether_entity_attribute_count(handle, byref(n))
        attrs = []
        for i in range(n.value):
            name, code, typ, flags = c_char_p(), c_int(), c_int(), c_uint()
            _lib.tether_entity_attribute_at(handle, i, byref(name), byref(code), byref(typ),
                                            byref(flags))
            target, rule = c_void_p(), c_int()
            try:
                _lib.tether_entity_attribute_target(handle, i, byref(target), byref(rule))
                refers: Optional[str] = _entity_name(target.value)
            except NotFoundError:   # a plain attribute
                refers = None
            allowed = c_char_p()
            _lib.tether_entity_attribute_allowed(handle, i, byref(allowed))
            attrs.append(Attribute(
                name=_pystr(name.value), code=code.value,
                type=_lib.TYPE_NAMES.get(typ.value, "unknown(%d)" % typ.value),
                is_id=bool(flags.value & _lib.ATTR_ID),
                is_version=bool(flags.value & _lib.ATTR_VERSION),
                required=bool(flags.value & _lib.ATTR_REQUIRED),
                index=i, target=refers,
                delete_rule=_DELETE_RULES.get(rule.value) if refers is not None else None,
                allowed=tuple(json.loads(allowed.value)) if allowed.value else None))
        self.attributes = attrs
        _lib.tether_entity_relationship_count(handle, byref(n))
        self.relationships = []
        for i in range(n.value):
            source, index = c_void_p(), c_size_t()
            _lib.tether_entity_relationship_at(handle, i, byref(out), byref(source), byref(index))
            rname = _pystr(out.value)
            attribute = c_char_p()
            _lib.tether_entity_attribute_at(source.value, index.value, byref(attribute), None, None, None)
            self.relationships.append(Relationship(rname, _entity_name(source.value), _pystr(attribute.value)))
        self._names = {a.name: a for a in attrs}
        # obj.NamePeek -> "Name", unless the entity has an attribute "NamePeek".
        self._peek_forms = {a.name + "Peek": a.name for a in attrs
                            if a.name + "Peek" not in self._names}

    def attribute(self, key: Key) -> Attribute:
        """The Attribute named `key` (str) or with code `key` (int), asking the
        library. NotFoundError if there is none."""
        idx = c_size_t()
        if isinstance(key, bool):
            raise TypeError("attribute key must be str or int, not bool")
        if isinstance(key, int):
            _lib.tether_entity_attribute_index_by_code(self._h, key, byref(idx))
        else:
            _lib.tether_entity_attribute_index(self._h, _cstr(key, "attribute name"), byref(idx))
        return self.attributes[idx.value]

    @property
    def id_attribute(self) -> Optional[Attribute]:
        """The attribute holding the record id (None if the model has none)."""
        return next((a for a in self.attributes if a.is_id), None)

    @property
    def version_attribute(self) -> Optional[Attribute]:
        """The attribute holding the record's server version, if any."""
        return next((a for a in self.attributes if a.is_version), None)

    def relationship(self, name: str) -> Relationship:
        """The to-many relationship `name`; NotFoundError if there is none."""
        for r in self.relationships:
            if r.name == name:
                return r
        raise NotFoundError("entity %s has no to-many relationship %r (it has: %s)"
                            % (self.name, name, ", ".join(r.name for r in self.relationships) or "none"))

    def __repr__(self) -> str:
        return "<tether.Entity %s (%d attributes)>" % (self.name, len(self.attributes))
