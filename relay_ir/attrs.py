"""Attributes of calls and functions: immutable, hashable name -> value mappings.

Values are ``int``, ``float``, ``bool``, ``str``, ``None``, :class:`~relay_ir.ty.Type` or
(nested) tuples of those; lists are normalized to tuples. ``attrs.axis`` and ``attrs["axis"]``
both read a field.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping


def normalize_attr_value(v: Any) -> Any:
    """Lists become tuples (recursively); numpy scalars become Python scalars."""
    if isinstance(v, (list, tuple)):
        return tuple(normalize_attr_value(x) for x in v)
    if hasattr(v, "item") and hasattr(v, "dtype") and getattr(v, "ndim", 1) == 0:
        return v.item()
    return v


class Attrs(Mapping[str, Any]):
    """An immutable attribute record. ``type_key`` names the schema (e.g. ``"ReduceAttrs"``)."""

    __slots__ = ("_data", "_hash", "type_key")

    def __init__(self, data: Mapping[str, Any] | None = None, type_key: str = ""):
        object.__setattr__(self, "_data",
                           {k: normalize_attr_value(v) for k, v in (data or {}).items()})
        object.__setattr__(self, "_hash", None)
        object.__setattr__(self, "type_key", type_key)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, key: str) -> Any:
        try:
            return self._data[key]
        except KeyError:
            raise AttributeError(f"attrs have no field {key!r}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Attrs are immutable; use .with_changes()")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Attrs):
            return NotImplemented
        return self.type_key == other.type_key and _attr_eq(self._data, other._data)

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash((self.type_key, tuple(sorted(
                (k, _attr_hashable(v)) for k, v in self._data.items())))))
        return self._hash

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._data.items())
        return f"Attrs({inner})"

    def with_changes(self, **changes: Any) -> Attrs:
        """A copy with some fields replaced."""
        d = dict(self._data)
        d.update(changes)
        return Attrs(d, self.type_key)


def _attr_hashable(v: Any) -> Any:
    if isinstance(v, float):
        return ("f", v)
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, tuple):
        return tuple(_attr_hashable(x) for x in v)
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


def _attr_eq(a: Any, b: Any) -> bool:
    # NOTE: bool is an int subclass; True must not equal 1 here, nor 1 equal 1.0.
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_attr_eq(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_attr_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    if hasattr(a, "__dataclass_fields__") and not hasattr(a, "__eq__"):
        return a is b
    from relay_ir.ty import Type
    if isinstance(a, Type):
        from relay_ir.structural import structural_equal
        return structural_equal(a, b, map_free_vars=True)
    return a == b


EMPTY_ATTRS = Attrs()
