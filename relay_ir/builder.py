"""ScopeBuilder: build let-spines in Python without writing nested ``Let`` by hand.

Passes that emit code (A-normal form, partial evaluation, AD) all need the same thing: a
list of ``(var, value)`` bindings per scope, fresh variables, and a way to close a scope
around a body. ::

    sb = ScopeBuilder()
    x = sb.let_(make_call("exp", a), "x", ty=TensorType((3,), "float32"))
    with sb.scope():                       # a nested scope, e.g. a function body
        y = sb.let_(make_call("add", x, x))
        body = sb.build(y)                 # let %y = add(%x, %x); %y
    expr = sb.build(Function((a,), body))  # let %x = exp(%a); fn (...) { ... }

``build`` closes the innermost open scope; the outermost one is closed by the final
``build``. Bindings are kept in a list and the spine is built from the inside out, so a
100,000-binding scope costs no Python recursion.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from relay_ir.expr import Constant, Expr, GlobalVar, Let, Op, Var
from relay_ir.traversal import build_lets
from relay_ir.ty import Type

# Expressions that are already atoms: binding them to a variable only adds a name.
_ATOMS = (Var, GlobalVar, Constant, Op)


class ScopeBuilder:
    """Collects let bindings in nested scopes; see the module docstring."""

    __slots__ = ("_scopes", "_counter")

    def __init__(self) -> None:
        self._scopes: list[list[tuple[Var, Expr]]] = [[]]
        self._counter = 0

    # ------------------------------------------------------------------ variables
    def fresh(self, name_hint: str = "v", ty: Type | None = None, *,
              annotate: bool = False) -> Var:
        """A new variable; ``ty`` becomes its checked type (and annotation if ``annotate``)."""
        return Var(name_hint, ty if annotate else None, checked_type_=ty)

    # ------------------------------------------------------------------ bindings
    def let_(self, value: Expr, name_hint: str = "v", ty: Type | None = None, *,
             annotate: bool = False, bind_atoms: bool = False) -> Expr:
        """Bind ``value`` in the current scope and return its variable.

        An atom (variable, global, constant, operator) is returned unbound unless
        ``bind_atoms``. ``ty`` defaults to ``value.checked_type_``.
        """
        if not bind_atoms and isinstance(value, _ATOMS):
            return value
        if ty is None:
            ty = value.checked_type_
        var = self.fresh(name_hint, ty, annotate=annotate)
        self._scopes[-1].append((var, value))
        return var

    def bind(self, var: Var, value: Expr) -> Var:
        """Bind an existing variable ``var`` to ``value`` in the current scope."""
        self._scopes[-1].append((var, value))
        return var

    def extend(self, bindings: list[tuple[Var, Expr]]) -> None:
        """Append already-made bindings (e.g. a flattened let-spine) to the current scope."""
        self._scopes[-1].extend(bindings)

    @property
    def bindings(self) -> list[tuple[Var, Expr]]:
        """The bindings of the current (innermost) scope so far."""
        return self._scopes[-1]

    # ------------------------------------------------------------------ scopes
    @contextmanager
    def scope(self) -> Iterator[ScopeBuilder]:
        """Open a nested scope; call :meth:`build` inside it to close it with a body."""
        depth = len(self._scopes)
        self._scopes.append([])
        try:
            yield self
        except BaseException:
            del self._scopes[depth:]  # NOTE: an error raised inside the scope propagates as is
            raise
        finally:
            if len(self._scopes) > depth:
                if self._scopes[-1]:
                    raise RuntimeError("a ScopeBuilder scope was left with bindings that were "
                                       "never built; call build(body) before leaving it")
                del self._scopes[depth:]

    def build(self, body: Expr) -> Expr:
        """Close the innermost scope: its bindings around ``body`` (the same node if none).

        Inside a ``with scope()`` block this pops that scope; at the top level it empties the
        outermost scope, so the builder can be reused.
        """
        bindings = self._scopes[-1]
        if len(self._scopes) > 1:
            self._scopes.pop()
        else:
            self._scopes[-1] = []
        if not bindings:
            return body
        ty = body.checked_type_
        if ty is None:
            return build_lets(bindings, body)
        # NOTE: every Let of the spine has the body's type; keep it on the rebuilt nodes.
        for var, value in reversed(bindings):
            body = Let(var, value, body, checked_type_=ty)
        return body
