"""Shorthands the operator tests share: a tensor type, an op's relation and its reference."""
from __future__ import annotations

from typing import Any

from relay_ir.op import get_opdef
from relay_ir.ty import TensorType, Type


def T(*shape: Any, dtype: str = "float32") -> TensorType:
    """``Tensor[shape, dtype]``."""
    return TensorType(tuple(shape), dtype)


def rel(name: str, *args: Type, **attrs: Any) -> Any:
    """The result type that op ``name``'s relation gives for ``args`` and ``attrs``."""
    od = get_opdef(name)
    return od.type_rel(list(args), od.make_attrs(attrs))


def run(name: str, *args: Any, **attrs: Any) -> Any:
    """Op ``name``'s numpy reference applied to ``args``."""
    od = get_opdef(name)
    return od.impl(list(args), od.make_attrs(attrs))


def assert_relation_error(name: str, args: Any, attrs: dict, exc: type, msg: str) -> None:
    """The type relation of ``name`` refuses these argument types / attributes with a
    ``DiagnosticError`` of class ``exc`` whose message contains ``msg``."""
    import pytest

    from relay_ir.errors import DiagnosticError
    with pytest.raises(exc) as info:
        rel(name, *args, **attrs)
    assert msg in info.value.message
    assert isinstance(info.value, DiagnosticError)
