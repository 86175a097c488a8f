"""The editing half of tether.Object: set, delete, rollback, pending,
committed values, relationships."""

from __future__ import annotations

import ctypes
import difflib
from ctypes import byref, c_char_p, c_int, c_size_t
from typing import Any, List, Optional, TypeVar, overload

from . import _lib
from ._types import Key, Pending, Value
from .errors import NotCachedError
from .model import Entity
from .values import _convert, _key, _value

_T = TypeVar("_T")

def _no_key(obj: Any, name: str) -> str:
    """The AttributeError message for a name the entity does not have, with
    the nearest key ("did you mean ...?") when one is near."""
    ent = obj.__dict__.get("entity")
    ident = obj.__dict__.get("id")
    if ident is None:
        try:
            ident = obj.id
        except Exception:
            ident = "?"
    keys = [a.name for a in ent.attributes] + list(ent._peek_forms)
    near = difflib.get_close_matches(name, keys, n=1)
    hint = " (did you mean %s?)" % near[0] if near else ""
    return "%s object %r has no attribute %r%s" % (ent.name, ident, name, hint)


class ObjectEditing:
    """The editing half of tether.Object."""

    # Set by Object (declared here for the methods below).
    _h: Optional[int]
    _ctx: Any   # its Context
    entity: Entity

    def set(self, key: Key, value: Value) -> None:
        """Sets `key` (a name or code) to `value`, checked against the
        model's type and the spec's allowed values; in the store at once.
        Assigning an attribute (``obj.Title = "x"``) does the same."""
        v, keep = _value(value)
        if isinstance(key, int) and not isinstance(key, bool):
            _lib.tether_object_set_code(self._h, key, byref(v))
        else:
            _lib.tether_object_set(self._h, _key(key), byref(v))
        del keep

    def __setattr__(self, name: str, value: Value) -> None:
        # Attributes of the model are set through the library; the Object's
        # own (underscored, its entity, its properties) are plain. Any other
        # name is a mistake: kept on the Python object, it would read back
        # and never be saved.
        d = self.__dict__
        ent = d.get("entity")
        if ent is None or name[0] == "_" or name == "entity":
            object.__setattr__(self, name, value)
        elif name in ent._names:
            self.set(name, value)
        elif hasattr(type(self), name):
            object.__setattr__(self, name, value)   # a property says itself what it allows
        else:
            raise AttributeError(_no_key(self, name))

    def __setitem__(self, key: Key, value: Value) -> None:
        """``obj["Name"] = v`` is ``obj.set("Name", v)``: for keys an
        attribute cannot spell, or that the Object's own names hide."""
        self.set(key, value)

    def delete(self) -> None:
        """Deletes the record: at once here (delete rules apply to records
        referring to it), on the server at the next save."""
        _lib.tether_object_delete(self._h)

    def rollback(self) -> None:
        """Forgets the object's unsaved change (and its last conflict)."""
        _lib.tether_object_rollback(self._h)

    @property
    def pending(self) -> Optional[Pending]:
        """The unsaved change: None, "insert", "update" or "delete"."""
        out = c_int()
        _lib.tether_object_pending(self._h, byref(out))
        return _lib.PENDING_NAMES.get(out.value)

    @property
    def has_changes(self) -> bool:
        """True while the object has an unsaved change (pending is not None)."""
        return self.pending is not None

    @property
    def changed_keys(self) -> List[str]:
        """The attributes an unsaved insert or update sets, in model order."""
        count = c_size_t()
        _lib.tether_object_changed_key_count(self._h, byref(count))
        name = c_char_p()
        keys: List[str] = []
        for i in range(count.value):
            _lib.tether_object_changed_key_at(self._h, i, byref(name))
            keys.append(name.value.decode("utf-8"))  # type: ignore[union-attr]  # never NULL on success
        return keys

    @overload
    def committed(self, key: Key) -> Value: ...
    @overload
    def committed(self, key: Key, default: _T) -> Value | _T: ...
    def committed(self, key: Key, default: Any = None) -> Any:
        """The value of `key` as the server last confirmed it, whatever is
        pending; `default` when there is none (an insert, or not cached)."""
        v = _lib.tether_value()
        try:
            _lib.tether_object_committed(self._h, _key(key), byref(v))
        except NotCachedError:
            return default
        try:
            return _convert(v)
        finally:
            _lib.tether_value_free(byref(v))

    @property
    def uri(self) -> str:
        """The object's name across stores: tether://<store>/<entity>/<id>."""
        value = _lib.tether_value()
        _lib.tether_object_uri(self._h, byref(value))
        try:
            return ctypes.string_at(value.text, value.length).decode("utf-8")
        finally:
            _lib.tether_value_free(byref(value))
