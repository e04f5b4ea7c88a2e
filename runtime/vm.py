"""What outlives the old Python VM: module-file errors, type JSON, result layouts.

The compiled executor is ``runtime.relax_vm`` (TVM's Relax VM); its module files are standard
TVM shared libraries with relay_ir's trailer (``runtime.relax_export``). Module files of the
old Python VM (magic :data:`MAGIC`, ``RLYMOD``) are recognized by their magic bytes and refused
with a :class:`ModuleFileError` ("made by an older relay_ir; rebuild it").
"""
from __future__ import annotations

from typing import Any

from relay_ir.errors import DiagnosticError
from relay_ir.ty import (ANY, DimExpr, FuncType, GlobalTypeVar, RefType, ShapeVar, TensorType,
                         TupleType, Type, TypeCall, dim_add, dim_mul)

# the magic bytes of the old Python VM's module files (format versions 1-3)
MAGIC = b"RLYMOD\0\0"


class ModuleFileError(DiagnosticError):
    """A module file that cannot be loaded (missing, truncated, corrupt, wrong version/target)."""

    kind = "module file error"


def _result_struct(t: Type) -> Any:
    counter = [0]

    def build(x: Type) -> Any:
        if isinstance(x, TupleType):
            return [build(f) for f in x.fields]
        counter[0] += 1
        return counter[0] - 1
    return build(t)


def _is_static(t: Type | None) -> bool:
    if isinstance(t, TensorType):
        return all(isinstance(d, int) for d in t.shape)
    if isinstance(t, TupleType):
        return all(_is_static(f) for f in t.fields)
    return False


# ============================================================================ JSON of types
def _type_to_json(t: Type | None) -> Any:
    if isinstance(t, TensorType):
        dims: list[Any] = []
        for d in t.shape:
            if isinstance(d, int):
                dims.append(d)
            elif isinstance(d, ShapeVar):
                dims.append(d.name)
            elif isinstance(d, DimExpr):
                # n*m + 2*n: [[["m", "n"], 1], [["n"], 2]] (a variable repeated for a power)
                dims.append({"poly": [[[v.name for v in mono], int(c)] for mono, c in d.terms]})
            else:
                dims.append(None)       # ?: any size
        return {"t": "tensor", "shape": dims, "dtype": t.dtype}
    if isinstance(t, TupleType):
        return {"t": "tuple", "fields": [_type_to_json(f) for f in t.fields]}
    if isinstance(t, (TypeCall, GlobalTypeVar)):
        head = t.func if isinstance(t, TypeCall) else t
        if isinstance(head, GlobalTypeVar):
            return {"t": "adt", "name": head.name_hint}
        return None
    if isinstance(t, RefType):
        return {"t": "ref"}
    if isinstance(t, FuncType):
        return {"t": "fn"}
    return None


def _type_from_json(d: Any, shape_vars: dict[str, ShapeVar]) -> Type | None:
    # NOTE: recursion over the nesting of one parameter type only
    if d is None:
        return None
    k = d["t"]
    if k == "tensor":
        dims: list[Any] = []
        for x in d["shape"]:
            if isinstance(x, int):
                dims.append(x)
            elif isinstance(x, str):
                dims.append(shape_vars.setdefault(x, ShapeVar(x)))
            elif isinstance(x, dict):
                total: Any = 0
                for names, coef in x["poly"]:
                    term: Any = int(coef)
                    for n in names:
                        term = dim_mul(term, shape_vars.setdefault(str(n), ShapeVar(str(n))))
                    total = dim_add(total, term)
                dims.append(total)
            else:
                dims.append(ANY)
        return TensorType(tuple(dims), str(d["dtype"]))
    if k == "tuple":
        return TupleType(tuple(_type_from_json(f, shape_vars) for f in d["fields"]))
    if k == "adt":
        return GlobalTypeVar(str(d["name"]))
    if k == "ref":
        return RefType(TupleType(()))
    if k == "fn":
        return FuncType((), TupleType(()))
    return None
