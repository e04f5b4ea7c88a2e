"""ToGraphNormalForm: let-bound pure values become dataflow sharing (a graph)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generator

from relay_ir.expr import Expr, Function, Var
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.passes._analysis import Effects, occurrences_in_function, to_fixpoint
from relay_ir.passes.pass_manager import Pass, PassContext


class _GNF(ExprMutator):
    def __init__(self, effects: Effects) -> None:
        super().__init__()
        self.effects = effects
        self.fv_cache: dict[Function, list[Var]] = {}

    def visit_binding(self, var: Var, value: Expr
                      ) -> Generator[Expr, Any, tuple[Var, Expr] | None]:
        if type(value) is Function:
            self.effects.add_local_function(var, value)
        new = yield value
        # NOTE: recursion is judged on the rewritten closure (its body may have lost the call)
        if self.effects.is_pure(value) and not (
                type(new) is Function and occurrences_in_function(var, new, self.fv_cache) > 0):
            self.memo[var] = new
            return None
        return (yield var), new


@dataclass(frozen=True)
class ToGraphNormalForm(Pass):
    """Replace lets of pure values by sharing: the value node is used wherever its var was.

    Rule: ``let x = e; b  =>  b[x := e]   if e is pure and x is not free in e`` (the one node
    ``e`` is shared by every use; unused pure lets disappear).

    Lets that must stay are kept: values with effects (reference operations, calls of unknown
    or recursive functions, effectful ops) -- their order matters -- and recursive closures
    (``let f = fn ... f(...) ...``). ToANormalForm is the inverse (up to where bindings land).
    """

    name: ClassVar[str] = "to-gnf"
    opt_level: ClassVar[int] = 0

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return to_fixpoint(mod, lambda m, effects: m.map_functions(
            lambda f: _GNF(effects).visit(f)))  # type: ignore[arg-type, return-value]
