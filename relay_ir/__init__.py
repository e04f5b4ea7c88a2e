"""relay_ir: a statically typed functional IR for ML programs (Relay text format v0.0.5).

Public API (stable)::

    import relay_ir as rly
    mod = rly.parse(text, source_name="model.rly")   # IRModule as written
    expr = rly.parse_expr(text)                       # one expression
    text = rly.astext(mod_or_expr_or_type)            # canonical text
    rly.structural_equal(a, b, map_free_vars=False); rly.assert_structural_equal(a, b)
"""
from __future__ import annotations

from typing import Any

from relay_ir.attrs import Attrs
from relay_ir.errors import (DiagnosticError, InternalError, InterpreterError, LoweringError,
                             ParseError, PassError, RelayIRError, ShapeMismatchError,
                             TypeInferenceError, UnboundVarError, UnificationError,
                             WellFormednessError)
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, Pattern, PatternConstructor, PatternTuple, PatternVar,
                           PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem,
                           Var, const, with_fields)
from relay_ir.functor import (ExprFunctor, ExprMutator, ExprVisitor, TypeFunctor, TypeMutator,
                              TypeVisitor)
from relay_ir.module import IRModule
from relay_ir.op import OpDef, OpPattern, get_op, list_ops, register_op
from relay_ir.span import SourceFile, Span
from relay_ir.structural import assert_structural_equal, structural_equal, structural_hash
from relay_ir.ty import (ANY, AnyDim, DimExpr, FuncType, GlobalTypeVar, IncompleteType, Kind,
                         RefType, ShapeVar, TensorType, TupleType, Type, TypeCall, TypeData,
                         TypeVar, scalar_type)

__version__ = "0.1.0"


def parse(text: str, source_name: str = "<string>", **kwargs: Any) -> IRModule:
    """Parse a module in Relay text format v0.0.5 (header required); no type inference."""
    from relay_ir.parser import parse as _parse
    return _parse(text, source_name, **kwargs)


def parse_expr(text: str, source_name: str = "<string>", **kwargs: Any) -> Expr:
    """Parse one expression (the version header is optional)."""
    from relay_ir.parser import parse_expr as _parse_expr
    return _parse_expr(text, source_name, **kwargs)


def parse_type(text: str, source_name: str = "<string>", **kwargs: Any) -> Type:
    """Parse one type."""
    from relay_ir.parser import parse_type as _parse_type
    return _parse_type(text, source_name, **kwargs)


def astext(node: Any, **kwargs: Any) -> str:
    """Canonical Relay text for a module, expression or type."""
    from relay_ir.printer import astext as _astext
    return _astext(node, **kwargs)
