"""A dataflow pattern language and a fixpoint rewriter for pass authors.

Build patterns from small helpers and combine them::

    x = wildcard("x")
    one = is_constant(1.0)
    p = is_op("multiply")(x, one)            # multiply(x, 1.0)
    p.match(expr)                            # -> bool
    p.match_env(expr)                        # -> {"x": <Expr>, x: <Expr>, ...} or None

    new = rewrite([(p, lambda pre, post, b: b["x"])], mod)   # x * 1 -> x, to a fixpoint

Pattern forms:

* ``wildcard(name=None)`` matches anything; ``is_var(name=None)`` a local variable;
  ``is_constant(value=None)`` a constant (optionally equal to ``value``, broadcast-compared);
  ``is_op("add")`` the operator node; ``is_expr(e)`` exactly the node ``e``.
* ``p(a, b)`` (with ``p`` an op / function pattern) a call with those argument patterns;
  ``p(...)`` with a literal ``...`` (Ellipsis) a call with any arguments.
* ``is_tuple([p1, p2])``, ``is_tuple_get_item(p, index=None)``, ``is_if(c, t, f)``,
  ``is_ref_read(p)``, ``is_ref_write(r, v)``, ``is_ref_create(v)``.
* ``p1 | p2`` (alternatives, tried left to right), ``p.optional(f)`` = ``p | f(p)`` (TVM's
  ``optional``: ``is_op("nn.conv2d")(x, w).optional(lambda c: is_op("nn.relu")(c))``).
* Constraints: ``p.has_attr({"axis": 1})`` (call or function attributes), ``p.has_type(t)``,
  ``p.has_shape((2, 3))``, ``p.has_dtype("float32")`` (these read the inferred type or a var's
  annotation; a node without a known type does not match), ``p.where(pred)`` (any predicate).
* Names: every helper takes ``name=``; ``p.named("n")`` names any pattern. A name used twice
  must bind the very same node both times (identity: run CSE first for value equality).

``match_env`` returns a :class:`Bindings` dict keyed both by name and by pattern object.

**Looking through let bindings.** The project's canonical form is A-normal form, where the
dataflow ``add(multiply(x, 1), y)`` is spread over ``let`` bindings. :func:`rewrite` (and
``match``/``match_env`` given ``env``) therefore see through let-bound variables: when a
pattern other than ``wildcard``/``is_var``/``is_expr`` meets a variable bound by an enclosing
``let``, it is matched against the bound value. Wildcards bind the variable itself, so a
replacement that refers to bindings stays in scope and no computation is duplicated; the
now-dead bindings are left for DCE.

:func:`rewrite` works bottom-up (children first), tries the rules at every node in order until
none applies, and repeats whole sweeps until the program stops changing (at most
``max_iterations`` sweeps). Bodies of primitive (``Primitive=1``, fused) functions are not
entered, so a fusion rule that wraps its match in a primitive function does not fire again
inside it. It is iterative over let spines and dataflow chains (100,000
bindings under the default recursion limit). A callback ``fn(pre, post, bindings) -> Expr``
gets the node before this sweep (``pre``), the node with rewritten children (``post``, the one
that matched) and the bindings; returning ``None`` or ``post`` means "no change".
"""
from __future__ import annotations

from types import GeneratorType
from typing import Any, Callable, Generator, Iterable, Mapping, Sequence

import numpy as np

from relay_ir.attrs import _attr_eq, normalize_attr_value
from relay_ir.expr import (Call, Constant, Expr, Function, If, Let, Op, RefCreate, RefRead,
                           RefWrite, Tuple, TupleGetItem, Var, type_of)
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.ty import TensorType, Type

Callback = Callable[[Expr, Expr, "Bindings"], "Expr | None"]


class Bindings(dict):
    """Bindings of a match: pattern name -> Expr and pattern object -> Expr."""


class DFPattern:
    """Base of dataflow patterns. Patterns are small trees; compare and hash by identity."""

    name: str | None = None

    # -- building --------------------------------------------------------------------------
    def __call__(self, *args: Any, name: str | None = None) -> CallPattern:
        if len(args) == 1 and args[0] is Ellipsis:
            return CallPattern(self, None, name=name)
        return CallPattern(self, tuple(_as_pattern(a) for a in args), name=name)

    def __or__(self, other: DFPattern) -> AltPattern:
        return AltPattern(self, _as_pattern(other))

    def optional(self, option: Callable[[DFPattern], DFPattern]) -> AltPattern:
        """``self | option(self)``: match ``self`` alone or wrapped by ``option``."""
        return AltPattern(option(self), self)

    def has_attr(self, attrs: Mapping[str, Any]) -> ConstraintPattern:
        """Also require these attribute values on the matched call or function."""
        want = {k: normalize_attr_value(v) for k, v in attrs.items()}
        return ConstraintPattern(self, lambda e: _has_attrs(e, want), f"has_attr({want})")

    def has_type(self, ty: Type) -> ConstraintPattern:
        """Also require the matched node's type to equal ``ty``."""
        return ConstraintPattern(self, lambda e: type_of(e) == ty, f"has_type({ty})")

    def has_shape(self, shape: Sequence[Any]) -> ConstraintPattern:
        """Also require a tensor type with this shape."""
        want = tuple(shape)

        def pred(e: Expr) -> bool:
            t = type_of(e)
            return isinstance(t, TensorType) and tuple(t.shape) == want
        return ConstraintPattern(self, pred, f"has_shape({want})")

    def has_dtype(self, dtype: str) -> ConstraintPattern:
        """Also require a tensor type with this dtype."""
        def pred(e: Expr) -> bool:
            t = type_of(e)
            return isinstance(t, TensorType) and t.dtype == dtype
        return ConstraintPattern(self, pred, f"has_dtype({dtype})")

    def where(self, pred: Callable[[Expr], bool]) -> ConstraintPattern:
        """Also require ``pred(node)`` to be true."""
        return ConstraintPattern(self, pred, "where(...)")

    def named(self, name: str) -> DFPattern:
        """This pattern, recording the matched node under ``name``."""
        return ConstraintPattern(self, lambda e: True, "", name=name)

    # -- matching --------------------------------------------------------------------------
    def match(self, expr: Expr, env: Mapping[Var, Expr] | None = None) -> bool:
        """Does the pattern match ``expr``? ``env`` maps let-bound vars to their values."""
        return self.match_env(expr, env) is not None

    def match_env(self, expr: Expr, env: Mapping[Var, Expr] | None = None) -> Bindings | None:
        """The bindings of a match of ``expr`` (named patterns and pattern objects), or None."""
        b = _match(self, expr, Bindings(), env or {})
        return b

    # subclasses
    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        raise NotImplementedError(f"{type(self).__name__} must define _match_node")

    sees_vars = False  # True: matched against a Var itself (no looking through lets)


def _as_pattern(p: Any) -> DFPattern:
    if isinstance(p, DFPattern):
        return p
    if isinstance(p, Expr):
        return ExprPattern(p)
    raise TypeError(f"not a pattern: {p!r}")


def _has_attrs(e: Expr, want: Mapping[str, Any]) -> bool:
    if isinstance(e, (Call, Function)):
        attrs = e.attrs
    else:
        return False
    for k, v in want.items():
        if k not in attrs or not _attr_eq(attrs[k], v):
            return False
    return True


def _match(p: DFPattern, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
    # NOTE: recursion here follows the *pattern*, which is small; the expression is only
    # explored as deep as the pattern goes.
    if not p.sees_vars:
        seen = 0
        while isinstance(e, Var) and e in env:
            e = env[e]
            seen += 1
            if seen > 10_000:  # pragma: no cover - an env with a cycle is a caller bug
                break
    out = p._match_node(e, b, env)
    if out is None:
        return None
    if p.name is not None:
        prev = out.get(p.name)
        if prev is not None and prev is not e:
            return None
        out[p.name] = e
    out[p] = e
    return out


class WildcardPattern(DFPattern):
    """Matches any expression."""

    sees_vars = True

    def __init__(self, name: str | None = None):
        self.name = name

    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        return b

    def __repr__(self) -> str:
        return f"wildcard({self.name!r})" if self.name else "wildcard()"


class VarPattern(DFPattern):
    """Matches a local variable (optionally with a given name hint)."""

    sees_vars = True

    def __init__(self, name_hint: str | None = None, name: str | None = None):
        self.name_hint = name_hint
        self.name = name

    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        if isinstance(e, Var) and (self.name_hint is None or e.name_hint == self.name_hint):
            return b
        return None


class ExprPattern(DFPattern):
    """Matches exactly one node (by identity)."""

    sees_vars = True

    def __init__(self, expr: Expr, name: str | None = None):
        self.expr = expr
        self.name = name

    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        return b if e is self.expr else None


class ConstantPattern(DFPattern):
    """Matches a constant; with ``value``, only one whose every element equals it."""

    def __init__(self, value: Any = None, name: str | None = None):
        self.value = None if value is None else np.asarray(value)
        self.name = name

    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        if not isinstance(e, Constant):
            return None
        if self.value is not None:
            try:
                if not bool(np.all(e.data == self.value)):
                    return None
            except (ValueError, TypeError):
                return None
        return b


class OperatorPattern(DFPattern):
    """Matches the operator node named ``op_name``."""

    def __init__(self, op_name: str, name: str | None = None):
        self.op_name = op_name
        self.name = name

    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        return b if isinstance(e, Op) and e.name == self.op_name else None

    def __repr__(self) -> str:
        return f"is_op({self.op_name!r})"


def _match_all(pats: Sequence[DFPattern], exprs: Sequence[Expr], b: Bindings,
               env: Mapping[Var, Expr]) -> Bindings | None:
    """Match patterns and expressions pairwise, threading the bindings; None at a failure."""
    out: Bindings | None = b
    for p, e in zip(pats, exprs):
        out = _match(p, e, out, env)  # type: ignore[arg-type]
        if out is None:
            return None
    return out


class CallPattern(DFPattern):
    """Matches a call whose callee and arguments match (``args=None``: any arguments)."""

    def __init__(self, op: DFPattern, args: tuple[DFPattern, ...] | None,
                 name: str | None = None):
        self.op = op
        self.args = args
        self.name = name

    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        if not isinstance(e, Call):
            return None
        if self.args is not None and len(self.args) != len(e.args):
            return None
        out = _match(self.op, e.op, Bindings(b), env)
        if out is None or self.args is None:
            return out
        return _match_all(self.args, e.args, out, env)


class TuplePattern(DFPattern):
    """Matches a tuple with as many fields, each matching (``fields=None``: any tuple)."""

    def __init__(self, fields: Sequence[DFPattern] | None, name: str | None = None):
        self.fields = None if fields is None else tuple(_as_pattern(f) for f in fields)
        self.name = name

    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        if not isinstance(e, Tuple):
            return None
        if self.fields is None:
            return b
        if len(self.fields) != len(e.fields):
            return None
        return _match_all(self.fields, e.fields, Bindings(b), env)


class TupleGetItemPattern(DFPattern):
    """Matches ``t.i`` (``index=None``: any index)."""

    def __init__(self, tuple_value: DFPattern, index: int | None = None,
                 name: str | None = None):
        self.tuple_value, self.index, self.name = tuple_value, index, name

    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        if not isinstance(e, TupleGetItem) or self.index not in (None, e.index):
            return None
        return _match(self.tuple_value, e.tuple_value, Bindings(b), env)


class NodePattern(DFPattern):
    """Matches a node of one class whose listed fields match sub-patterns."""

    def __init__(self, cls: type, fields: Mapping[str, DFPattern], name: str | None = None):
        self.cls = cls
        self.fields = {k: _as_pattern(v) for k, v in fields.items()}
        self.name = name

    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        if not isinstance(e, self.cls):
            return None
        out: Bindings | None = Bindings(b)
        for k, p in self.fields.items():
            out = _match(p, getattr(e, k), out, env)  # type: ignore[arg-type]
            if out is None:
                return None
        return out


class AltPattern(DFPattern):
    """``left | right``: the first alternative that matches."""

    sees_vars = True  # NOTE: each alternative decides for itself

    def __init__(self, left: DFPattern, right: DFPattern, name: str | None = None):
        self.left = left
        self.right = right
        self.name = name

    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        out = _match(self.left, e, Bindings(b), env)
        if out is not None:
            return out
        return _match(self.right, e, Bindings(b), env)


class ConstraintPattern(DFPattern):
    """``inner`` plus a predicate on the matched node."""

    def __init__(self, inner: DFPattern, pred: Callable[[Expr], bool], what: str,
                 name: str | None = None):
        self.inner = inner
        self.pred = pred
        self.what = what
        self.name = name
        self.sees_vars = inner.sees_vars

    def _match_node(self, e: Expr, b: Bindings, env: Mapping[Var, Expr]) -> Bindings | None:
        # NOTE: the predicate is checked on the node the inner pattern matched (a let-bound
        # var is looked through exactly as the inner pattern would, in _match).
        out = _match(self.inner, e, Bindings(b), env)
        if out is None:
            return None
        node = out[self.inner]
        try:
            ok = bool(self.pred(node))
        except Exception:
            ok = False
        return out if ok else None


# ----------------------------------------------------------------------------- helpers
def wildcard(name: str | None = None) -> WildcardPattern:
    """Matches any expression (binds it under ``name`` when given)."""
    return WildcardPattern(name)


def is_var(name_hint: str | None = None, *, name: str | None = None) -> VarPattern:
    """Matches a local variable, optionally only one whose name hint is ``name_hint``."""
    return VarPattern(name_hint, name)


def is_constant(value: Any = None, *, name: str | None = None) -> ConstantPattern:
    """Matches a constant; with ``value``, only one whose every element equals ``value``."""
    return ConstantPattern(value, name)


def is_op(op_name: str, *, name: str | None = None) -> OperatorPattern:
    """Matches the operator ``op_name``; call it to match a call: ``is_op("add")(x, y)``."""
    return OperatorPattern(op_name, name)


def is_expr(expr: Expr, *, name: str | None = None) -> ExprPattern:
    """Matches exactly the node ``expr``."""
    return ExprPattern(expr, name)


def is_tuple(fields: Sequence[Any] | None = None, *, name: str | None = None) -> TuplePattern:
    """Matches a tuple whose fields match ``fields`` (None: any tuple)."""
    return TuplePattern(fields, name)


def is_tuple_get_item(tuple_value: Any, index: int | None = None, *,
                      name: str | None = None) -> TupleGetItemPattern:
    """Matches ``t.index`` where ``t`` matches ``tuple_value`` (index None: any)."""
    return TupleGetItemPattern(_as_pattern(tuple_value), index, name)


def is_if(cond: Any, true_branch: Any, false_branch: Any, *,
          name: str | None = None) -> NodePattern:
    """Matches ``if (cond) {t} else {f}``."""
    return NodePattern(If, {"cond": cond, "true_branch": true_branch,
                            "false_branch": false_branch}, name)


def is_ref_create(value: Any, *, name: str | None = None) -> NodePattern:
    """Matches ``ref(value)``."""
    return NodePattern(RefCreate, {"value": value}, name)


def is_ref_read(ref: Any, *, name: str | None = None) -> NodePattern:
    """Matches ``ref_read(ref)``."""
    return NodePattern(RefRead, {"ref": ref}, name)


def is_ref_write(ref: Any, value: Any, *, name: str | None = None) -> NodePattern:
    """Matches ``ref_write(ref, value)``."""
    return NodePattern(RefWrite, {"ref": ref, "value": value}, name)


def optional(base: DFPattern, option: Callable[[DFPattern], DFPattern]) -> AltPattern:
    """``option(base) | base``: ``base`` optionally wrapped (same as ``base.optional``)."""
    return base.optional(option)


# ----------------------------------------------------------------------------- rewriting
class _Rewriter(ExprMutator):
    def __init__(self, rules: Sequence[tuple[DFPattern, Callback]], env: dict[Var, Expr],
                 max_local: int):
        super().__init__()
        self.rules = rules
        self.env = env
        self.max_local = max_local
        self.changed = False

    def visit_binding(self, var: Var, value: Expr) -> Generator[Expr, Any, tuple[Var, Expr]]:
        new_var = yield var
        new_value = yield value
        self.env[new_var] = new_value  # type: ignore[index]
        return new_var, new_value  # type: ignore[return-value]

    def visit_function(self, f: Function) -> Expr:
        if f.is_primitive:  # NOTE: fused (Primitive=1) functions are finished units
            return f
        return super().visit_function(f)

    def _handle(self, expr: Expr) -> Any:
        post = super()._handle(expr)
        if isinstance(expr, (Let, Var)):
            return post
        if type(post) is GeneratorType:
            return self._rewrite_after(expr, post)
        return self._rewrite(expr, post)

    def _rewrite_after(self, expr: Expr, gen: Generator[Expr, Any, Expr]
                       ) -> Generator[Expr, Any, Expr]:
        post = yield from gen
        return self._rewrite(expr, post)

    def _rewrite(self, expr: Expr, post: Expr) -> Expr:
        for _ in range(self.max_local):
            for pat, fn in self.rules:
                b = _match(pat, post, Bindings(), self.env)
                if b is None:
                    continue
                new = fn(expr, post, b)
                if new is not None and new is not post:
                    if not isinstance(new, Expr):
                        raise TypeError(f"rewrite callback returned {type(new).__name__}, "
                                        "expected an Expr or None")
                    post = new
                    self.changed = True
                    break
            else:
                return post
        return post


def rewrite(rules: Iterable[tuple[DFPattern, Callback]] | Mapping[DFPattern, Callback],
            expr_or_mod: Any, *, max_iterations: int = 100) -> Any:
    """Rewrite with ``(pattern, callback)`` rules bottom-up until nothing changes.

    ``expr_or_mod`` is an Expr (returns an Expr) or an IRModule (returns a new module with
    every function rewritten). The input is never mutated; spans of untouched nodes are kept.
    """
    rule_list = list(rules.items()) if isinstance(rules, Mapping) else list(rules)
    for pat, fn in rule_list:
        if not isinstance(pat, DFPattern) or not callable(fn):
            raise TypeError("rewrite rules are (pattern, callback) pairs")
    if isinstance(expr_or_mod, IRModule):
        return expr_or_mod.map_functions(
            lambda fn: _rewrite_expr(rule_list, fn, max_iterations))
    if not isinstance(expr_or_mod, Expr):
        raise TypeError(f"rewrite expects an Expr or IRModule, got {type(expr_or_mod).__name__}")
    return _rewrite_expr(rule_list, expr_or_mod, max_iterations)


def _rewrite_expr(rules: list[tuple[DFPattern, Callback]], expr: Expr, max_iterations: int
                  ) -> Expr:
    for _ in range(max_iterations):
        rw = _Rewriter(rules, {}, max_local=100)
        new = rw.visit(expr)
        if not rw.changed or new is expr:
            return new
        expr = new
    return expr


def rewrite_post_order(expr: Any, rules: Iterable[tuple[DFPattern, Callback]]) -> Any:
    """Alias of :func:`rewrite` with the arguments the other way round (STYLE.md)."""
    return rewrite(rules, expr)


__all__ = ["DFPattern", "Bindings", "wildcard", "is_var", "is_constant", "is_op", "is_expr",
           "is_tuple", "is_tuple_get_item", "is_if", "is_ref_create", "is_ref_read",
           "is_ref_write", "optional", "rewrite", "rewrite_post_order"]
