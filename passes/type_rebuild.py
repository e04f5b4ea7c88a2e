"""The rebuild step of type inference: the typed module from the solved constraints.

:class:`TypedRebuild` walks each function once more (let spines as lists, dataflow with an
explicit stack), resolving every recorded type: binders get fresh typed ``Var``s, functions
their ``ret_type``, nodes ``checked_type_``, polymorphic calls their ``type_args``. A type
that is still unknown here is an :class:`~relay_ir.errors.IncompleteTypeError` ("unable to
infer a type") at the expression.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Generator

from relay_ir.errors import IncompleteTypeError, TypeInferenceError, UnboundVarError
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If, Let,
                           Match, Op, Pattern, PatternConstructor, PatternTuple, PatternVar,
                           RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.traversal import (dataflow_children, dataflow_post_order, flatten_lets,
                                run_generators)
from relay_ir.ty import FuncType, IncompleteType, ShapeVar, TensorType, Type, dim_vars

from relay_ir.passes.type_unify import describe_node, fmt_type

__all__ = ["TypedRebuild"]

_DATAFLOW = (Call, Tuple, TupleGetItem, RefCreate, RefRead, RefWrite)


class TypedRebuild:
    """Rebuild typed functions from the solved types (a mixin of the Inferencer)."""

    types: dict[Expr, Type]
    var_map: dict[Var, Var]
    fn_ret: dict[Function, Type]
    inst: dict[Call, list[Any]]
    op_call_args: dict[Call, list[Type]]

    def final(self, t: Type, node: Any, what: str | None = None) -> Type:
        """The resolved type of ``node``; an unknown part is "unable to infer a type"."""
        if type(t) is IncompleteType:
            t = self.find(t)
        if type(t) is TensorType and not self.dim_subst and not self.flex:
            return t
        r = self.resolve(t)
        if type(r) is TensorType and (not self.flex or all(type(d) is int for d in r.shape)):
            return r
        if self.unknown_part(r):
            desc = what or describe_node(node)
            raise IncompleteTypeError(
                f"unable to infer a type for {desc}: it is only known to be `{fmt_type(r)}` "
                f"(add a type annotation)", node.span)
        return r

    def new_var(self, v: Var) -> Var:
        nv = self.var_map.get(v)
        if nv is None:
            t = self.types.get(v)
            if t is None:
                raise UnboundVarError(f"variable `%{v.name_hint}` is not bound here", v.span)
            t = self.final(t, v, f"`%{v.name_hint}`")
            nv = Var(v.name_hint, t, span=v.span, checked_type_=t)
            self.var_map[v] = nv
        return nv

    def rebuild(self, f: Function, memo: dict) -> Function:
        """The typed copy of function ``f`` (sharing kept; no Python recursion)."""
        run_generators(self._walk(f, memo))
        return memo[f]

    def _walk(self, e: Expr, memo: dict) -> Generator[Any, Any, None]:
        """Rebuild ``e`` and everything below it into ``memo`` (children first).

        Let spines are walked as lists and dataflow with an explicit stack; nesting (function,
        if, match) is a generator sub-walk driven by :func:`run_generators`.
        """
        if e in memo:
            return
        te = type(e)
        if te is Let:
            lets, body = flatten_lets(e)
            for let in lets:
                if let.var not in memo:
                    memo[let.var] = self.new_var(let.var)
                if let.value not in memo:
                    yield self._walk(let.value, memo)
            if body not in memo:
                yield self._walk(body, memo)
            for let in reversed(lets):
                if let not in memo:
                    memo[let] = self.build(let, memo)
            return
        if te in _DATAFLOW:
            for node in dataflow_post_order(e, memo):
                for c in dataflow_children(node):
                    if c not in memo and type(c) not in _DATAFLOW:
                        yield self._walk(c, memo)
                memo[node] = self.build(node, memo)
            return
        if te is Function:
            for p in e.params:
                if p not in memo:
                    memo[p] = self.new_var(p)
            yield self._walk(e.body, memo)
        elif te is If:
            yield self._walk(e.cond, memo)
            yield self._walk(e.true_branch, memo)
            yield self._walk(e.false_branch, memo)
        elif te is Match:
            yield self._walk(e.data, memo)
            for c in e.clauses:
                yield self._walk(c.rhs, memo)
        memo[e] = self.build(e, memo)

    def build(self, node: Expr, memo: dict) -> Expr:
        """The typed copy of ``node``, whose children are already in ``memo``."""
        types = self.types
        tn = type(node)
        if tn is Var:
            return self.new_var(node)
        if tn is Op or tn is Constructor:
            return node
        if tn is Let:
            bt = memo[node.body].checked_type_
            if bt is None:
                bt = self.final(types[node], node)
            return Let(memo[node.var], memo[node.value], memo[node.body], span=node.span,
                       checked_type_=bt)
        if tn is Function:
            params = tuple(memo[p] for p in node.params)
            ret = self.final(self.fn_ret[node], node, "the function's return value")
            ft = FuncType(tuple(p.type_annotation for p in params), ret,  # type: ignore
                          node.type_params)
            return Function(params, memo[node.body], ret, node.type_params, node.attrs,
                            span=node.span, checked_type_=ft)
        if tn is GlobalVar:
            return GlobalVar(node.name_hint, span=node.span,
                             checked_type_=self.final(self.gen_global_var(node), node))
        if tn is Call:
            inst = self.inst.get(node)
            if inst is not None:
                targs = tuple(self.final_arg(a, node) for a in inst)
            t = self.final(types[node], node)
            args = tuple(memo[a] for a in node.args)
            if inst is None and node in self.op_call_args:
                targs = tuple(a.checked_type_ if a.checked_type_ is not None
                              else self.final(at, node)
                              for a, at in zip(args, self.op_call_args[node]))
            elif inst is None:
                targs = node.type_args
            return Call(memo[node.op], args, node.attrs, targs, span=node.span, checked_type_=t)
        t = self.final(types[node], node)
        if tn is Tuple:
            return Tuple(tuple(memo[x] for x in node.fields), span=node.span, checked_type_=t)
        if tn is TupleGetItem:
            return TupleGetItem(memo[node.tuple_value], node.index, span=node.span,
                                checked_type_=t)
        if tn is If:
            return If(memo[node.cond], memo[node.true_branch], memo[node.false_branch],
                      span=node.span, checked_type_=t)
        if tn is Match:
            clauses = tuple(Clause(self.rebuild_pattern(c.lhs), memo[c.rhs], span=c.span)
                            for c in node.clauses)
            return Match(memo[node.data], clauses, node.complete, span=node.span,
                         checked_type_=t)
        if tn is RefCreate:
            return RefCreate(memo[node.value], span=node.span, checked_type_=t)
        if tn is RefRead:
            return RefRead(memo[node.ref], span=node.span, checked_type_=t)
        if tn is RefWrite:
            return RefWrite(memo[node.ref], memo[node.value], span=node.span, checked_type_=t)
        if tn is Constant:
            return dataclasses.replace(node, checked_type_=t)
        raise TypeInferenceError(f"unknown node {tn.__name__}", node.span)  # pragma: no cover

    def final_arg(self, a: Any, node: Any) -> Any:
        """The resolved instantiation ``a`` of a type parameter at call ``node``."""
        if type(a) is ShapeVar:
            d = self.rdim(a)
            if any(v in self.flex for v in dim_vars(d)):
                raise IncompleteTypeError(
                    f"unable to infer a type for {describe_node(node)}: its shape parameter "
                    f"`{a.name}` is never determined", node.span)
            return d
        r = self.resolve(a)
        if self.unknown_part(r):
            p = self.param_of.get(a)
            name = p[0].name_hint if p else "?"
            raise IncompleteTypeError(
                f"unable to infer a type for {describe_node(node)}: its type parameter `{name}` is "
                f"only known to be `{fmt_type(r)}` (add a type annotation)", node.span)
        return r

    def rebuild_pattern(self, p: Pattern) -> Pattern:
        tp = type(p)
        if tp is PatternVar:
            return PatternVar(self.new_var(p.var), span=p.span)
        if tp is PatternConstructor:
            return PatternConstructor(p.constructor,
                                      tuple(self.rebuild_pattern(q) for q in p.patterns),
                                      span=p.span)
        if tp is PatternTuple:
            return PatternTuple(tuple(self.rebuild_pattern(q) for q in p.patterns), span=p.span)
        return p
