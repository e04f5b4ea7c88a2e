"""FuseOps: group primitive operator calls into fused ``Primitive=1`` functions.

Works on the A-normal form of every function (each let spine separately: function bodies, if
branches and match arms are fused on their own, never across them). Rules, by the operators'
:class:`~relay_ir.op.OpPattern` (TVM's OpPatternKind)::

    let %a = exp(%x); let %b = add(%a, %y); ...  =>  let %f = fn (%p0, %p1, Primitive=1) {
                                                        add(exp(%p0), %p1) };
                                                      let %b = %f(%x, %y); ...
        elementwise / broadcast / injective producers fuse into any such consumer, and into
        the input of a reduction (comm-reduce);
    dense / matmul / batch_matmul / conv2d / pooling (out-elemwise-fusable) and reductions
        take an epilogue of elementwise / broadcast consumers of the same output shape
        (``relu(add(dense(x, w), b))`` is one group); a group holds at most one such anchor;
    opaque operators (softmax, batch_norm, ...) form a group of their own;
    a producer joins a group only when every use of its value is inside that group (a value
    used by two groups is materialized once and never recomputed);
    effectful operators, tuple projections, closures, calls of non-primitive functions, ifs,
    matches and references stay in the host program; effectful operators, calls of
    non-primitive functions, ifs and matches are barriers: no group takes a producer from
    before such a binding and a consumer after it. Reference operations are not barriers
    (no kernel reads or writes a reference cell, so a pure group may move across them).

``max_depth`` bounds the number of operator calls per group. Disabled below ``opt_level`` 1
(the pass itself is level 0 so that a pipeline always names it; it is the identity there).
Every operator call ends up inside a primitive function, so the lowering sees only kernels.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Generator

from relay_ir.attrs import Attrs
from relay_ir.expr import (Call, Constant, Expr, Function, If, Let, Match, Op, RefCreate,
                           RefRead, RefWrite, Tuple, TupleGetItem, Var, with_fields)
from relay_ir.module import IRModule
from relay_ir.op import OpPattern
from relay_ir.passes.pass_manager import Pass, PassContext
from relay_ir.traversal import (children, flatten_lets, function_free_vars,
                                run_generators)
from relay_ir.ty import FuncType, TensorType, Type

_PRIMITIVE = Attrs({"Primitive": 1})


def _pattern_of(value: Expr) -> OpPattern | None:
    """The fusion pattern of a binding's value, or None when it never joins a group."""
    if isinstance(value, Call) and isinstance(value.op, Op):
        od = value.op.opdef
        if od.effectful:
            return None
        return od.pattern
    if isinstance(value, Tuple):
        return OpPattern.TUPLE
    return None


def _is_barrier(value: Expr) -> bool:
    """Whether a binding's value may have an effect (its position must be kept)."""
    if isinstance(value, Call):
        if isinstance(value.op, Op):
            return value.op.opdef.effectful
        return True                      # functions, closures, globals, constructors: unknown
    # NOTE: reference operations touch only reference cells, which no kernel reads or
    # writes, so a pure group may be computed across them (a backward pass interleaves its
    # kernels with adjoint reads and writes)
    return not isinstance(value, (Tuple, TupleGetItem, Var, Constant, Function, Op,
                                  RefCreate, RefRead, RefWrite))


@dataclass
class _Group:
    """Members (binding indices) and facts used by the merge rules."""

    members: list[int]
    anchor: int | None          # index of the reduction / out-elemwise-fusable member
    opaque: bool
    ops: int                    # operator calls in the group
    max_pattern: int            # max pattern of non-anchor members (TUPLE counted as INJECTIVE)
    mset: set[int] = field(default_factory=set)
    # producer binding index -> the members that consume it (candidates to absorb)
    frontier: dict[int, list[int]] = field(default_factory=dict)
    has_tuple: bool = False
    parent: _Group | None = None  # set when merged into another group (union-find)


def _find(g: _Group) -> _Group:
    root = g
    while root.parent is not None:
        root = root.parent
    while g.parent is not None:  # path compression
        g.parent, g = root, g.parent
    return root


def _shape(t: Type | None) -> tuple | None:
    return tuple(t.shape) if isinstance(t, TensorType) else None


def _var_type(v: Var) -> Type | None:
    return v.checked_type_ if v.checked_type_ is not None else v.type_annotation


class _SpineFuser:
    """Fuses one let spine (bindings in order plus the final body)."""

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.epoch: list[int] = []
        self.fv_cache: dict[Function, list[Var]] = {}

    def _vars_used(self, e: Expr) -> list[Var]:
        """Variables occurring in ``e``; a nested function contributes its free variables
        (cached per function, so deeply nested closures cost linear time)."""
        if type(e) is Function:
            return function_free_vars(e, self.fv_cache)
        out: list[Var] = []
        seen: set[int] = set()
        stack = [e]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            t = type(node)
            if t is Var:
                out.append(node)
            elif t is Function:
                out.extend(function_free_vars(node, self.fv_cache))
            else:
                stack.extend(children(node))
        return out

    def fuse(self, bindings: list[tuple[Var, Expr]], body: Expr) -> list[tuple[Var, Expr]]:
        n = len(bindings)
        index = {id(v): i for i, (v, _) in enumerate(bindings)}
        patterns = [_pattern_of(val) for _, val in bindings]
        # users[i]: indices of the bindings that use bindings[i]'s variable (-1: used elsewhere)
        users: list[set[int]] = [set() for _ in range(n)]
        for j, (_, val) in enumerate(bindings):
            direct = self._direct_args(val) if patterns[j] is not None else None
            if direct is not None:
                for a in direct:
                    i = index.get(id(a))
                    if i is not None:
                        users[i].add(j)
            else:
                for v in self._vars_used(val):
                    i = index.get(id(v))
                    if i is not None:
                        users[i].add(-1)
        for v in self._vars_used(body):
            i = index.get(id(v))
            if i is not None:
                users[i].add(-1)

        # NOTE: effects are barriers: an effectful binding (calls of functions or closures,
        # if/match, effectful operators; not reference ops, see _is_barrier) starts a new epoch, and no group spans
        # two epochs, so fused code never moves across an effect.
        self.epoch = []
        e = 0
        for _, val in bindings:
            if _is_barrier(val):
                e += 1
            self.epoch.append(e)
        group_of: list[_Group | None] = [None] * n
        for j in range(n):
            p = patterns[j]
            if p is None:
                continue
            is_anchor = p in (OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE)
            is_call = p != OpPattern.TUPLE
            g = _Group([j], j if is_anchor else None, p == OpPattern.OPAQUE, int(is_call),
                       -1 if is_anchor else int(min(p, OpPattern.INJECTIVE)), {j},
                       has_tuple=p == OpPattern.TUPLE)
            for a in self._direct_args(bindings[j][1]) or ():
                i = index.get(id(a)) if isinstance(a, Var) else None
                if i is not None:
                    g.frontier.setdefault(i, []).append(j)
            group_of[j] = g
            if p == OpPattern.TUPLE or g.opaque:
                continue  # tuples are absorbed only by their consumer; opaque ops stay alone
            self._absorb_producers(j, g, bindings, index, patterns, users, group_of)
        for k in range(n):
            gk = group_of[k]
            if gk is not None:
                group_of[k] = _find(gk)
        for g in {id(g): g for g in group_of if g is not None}.values():
            g.members.sort()
        # Tuples that no operator absorbed stay host bindings.
        out: list[tuple[Var, Expr]] = []
        emitted: set[int] = set()
        for j in range(n):
            g = group_of[j]
            if g is None or (patterns[j] == OpPattern.TUPLE and g.members == [j]):
                out.append(bindings[j])
                continue
            if id(g) in emitted or j != g.members[-1]:
                continue
            emitted.add(id(g))
            out.extend(self._make_group(g, bindings, index))
        return out

    @staticmethod
    def _direct_args(val: Expr) -> tuple[Expr, ...] | None:
        if isinstance(val, Call):
            return val.args
        if isinstance(val, Tuple):
            return val.fields
        return None

    def _absorb_producers(self, root: int, g: _Group, bindings: list[tuple[Var, Expr]],
                          index: dict[int, int], patterns: list[OpPattern | None],
                          users: list[set[int]], group_of: list[_Group | None]) -> None:
        # NOTE: only the frontier (producers outside the group) is scanned, and the smaller
        # group's containers move into the larger one (union by size), so a long chain costs
        # O(1) per binding, not O(group size).
        progress = True
        while progress:
            progress = False
            g = _find(g)
            for i, consumers in list(g.frontier.items()):
                if i in g.mset:
                    del g.frontier[i]
                    continue
                gi = group_of[i]
                gp = _find(gi) if gi is not None else None
                if gp is None or gp is g or not users[i] <= g.mset:
                    continue
                if not all(self._can_merge(gp, g, c, i, root, bindings, patterns)
                           for c in consumers):
                    continue
                big, small = (g, gp) if len(g.members) >= len(gp.members) else (gp, g)
                big.members.extend(small.members)
                big.mset |= small.mset
                for pi, cs in small.frontier.items():
                    big.frontier.setdefault(pi, []).extend(cs)
                for k in small.members:
                    big.frontier.pop(k, None)
                for k in list(big.frontier):
                    if k in small.mset:
                        big.frontier.pop(k, None)
                big.ops = g.ops + gp.ops
                big.has_tuple = g.has_tuple or gp.has_tuple
                big.anchor = g.anchor if g.anchor is not None else gp.anchor
                big.max_pattern = max(g.max_pattern, gp.max_pattern)
                big.opaque = g.opaque or gp.opaque
                small.parent = big
                g = big
                progress = True
                break

    def _can_merge(self, gp: _Group, g: _Group, consumer: int, producer: int, root: int,
                   bindings: list[tuple[Var, Expr]], patterns: list[OpPattern | None]) -> bool:
        if gp.opaque or g.opaque or gp.ops + g.ops > self.max_depth:
            return False
        if self.epoch[producer] != self.epoch[root]:
            return False
        pc = patterns[consumer]
        assert pc is not None
        if patterns[producer] == OpPattern.TUPLE:
            # a tuple joins only an injective consumer (concatenate, stack), never a reduction
            return pc <= OpPattern.INJECTIVE and len(gp.members) == 1
        if gp.anchor is not None:
            # epilogue: the group so far is elementwise/broadcast only, of the anchor's shape
            if g.anchor is not None or g.max_pattern > OpPattern.BROADCAST:
                return False
            if g.has_tuple:
                return False
            anchor_shape = _shape(_var_type(bindings[gp.anchor][0]))
            root_shape = _shape(_var_type(bindings[root][0]))
            return anchor_shape is not None and anchor_shape == root_shape
        # an injective producer chain
        if pc <= OpPattern.INJECTIVE or pc == OpPattern.TUPLE:
            return True
        if pc == OpPattern.COMM_REDUCE:
            return consumer == g.anchor
        return False

    def _make_group(self, g: _Group, bindings: list[tuple[Var, Expr]],
                    index: dict[int, int]) -> list[tuple[Var, Expr]]:
        members = set(g.members)
        root = g.members[-1]
        params: list[Var] = []
        outer_args: list[Expr] = []
        param_of: dict[int, Var] = {}
        new_of: dict[int, Expr] = {}
        for k in g.members:
            var, val = bindings[k]
            args = self._direct_args(val)
            assert args is not None
            new_args = []
            for a in args:
                i = index.get(id(a)) if isinstance(a, Var) else None
                if i is not None and i in members:
                    new_args.append(new_of[i])
                elif isinstance(a, (Constant, Op)):
                    new_args.append(a)
                else:
                    p = param_of.get(id(a))
                    if p is None:
                        ty = _var_type(a) if isinstance(a, Var) else a.checked_type_
                        name = f"p{len(params)}"
                        p = Var(name, ty, checked_type_=ty)
                        param_of[id(a)] = p
                        params.append(p)
                        outer_args.append(a)
                    new_args.append(p)
            ty = _var_type(var)
            if isinstance(val, Call):
                new = Call(val.op, tuple(new_args), val.attrs, val.type_args, span=val.span,
                           checked_type_=ty)
            else:
                new = Tuple(tuple(new_args), span=val.span, checked_type_=ty)
            new_of[k] = new
        root_var, root_val = bindings[root]
        ret = _var_type(root_var)
        ptypes = [p.type_annotation for p in params]
        fty = (FuncType(tuple(ptypes), ret) if ret is not None and
               all(t is not None for t in ptypes) else None)  # type: ignore[arg-type]
        fn = Function(tuple(params), new_of[root], ret, attrs=_PRIMITIVE, span=root_val.span,
                      checked_type_=fty)
        fvar = Var(f"f{root_var.name_hint}", fty, checked_type_=fty)
        call = Call(fvar, tuple(outer_args), span=root_val.span, checked_type_=ret)
        return [(fvar, fn), (root_var, call)]


@dataclass(frozen=True)
class FuseOps(Pass):
    """Group operator calls into ``Primitive=1`` functions by fusion pattern (see module doc).

    ``let %a = op1(%x); let %b = op2(%a); %b  =>  let %f = fn (%p0, Primitive=1) {
    op2(op1(%p0)) }; let %b = %f(%x); %b``   when op1 may fuse into op2 and %a has no other use.
    """

    max_depth: int = 256
    fuse_opt_level: int = 1
    name: ClassVar[str] = "fuse-ops"
    opt_level: ClassVar[int] = 0
    required: ClassVar[tuple[str, ...]] = ("to-anf", "infer-type")

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        if ctx.opt_level < self.fuse_opt_level:
            return mod
        depth = ctx.config_int("fuse-ops.max_depth", self.max_depth, minimum=1)
        fuser = _SpineFuser(depth)
        changed = {}
        for name, fn in mod.functions.items():
            new = _fuse_function(fn, fuser)
            if new is not fn:
                changed[name] = new
        return mod.with_functions(changed) if changed else mod


def _fuse_function(fn: Function, fuser: _SpineFuser) -> Function:
    if fn.is_primitive:
        return fn
    return with_fields(fn, body=run_generators(_fuse_scope(fn.body, fuser)))


# NOTE: _fuse_nested and _fuse_scope are generators: a nested scope is yielded, so function,
# if and match nesting costs no Python recursion.
def _fuse_nested(value: Expr, fuser: _SpineFuser) -> Generator[Any, Any, Expr]:
    """Fuse the scopes nested in a binding's value (functions, branches, arms)."""
    if isinstance(value, Function):
        if value.is_primitive:
            return value
        return with_fields(value, body=(yield _fuse_scope(value.body, fuser)))
    if isinstance(value, If):
        tb = yield _fuse_scope(value.true_branch, fuser)
        fb = yield _fuse_scope(value.false_branch, fuser)
        return with_fields(value, true_branch=tb, false_branch=fb)
    if isinstance(value, Match):
        arms = []
        for c in value.clauses:
            arms.append(with_fields(c, rhs=(yield _fuse_scope(c.rhs, fuser))))
        clauses = tuple(arms)
        if all(a is b for a, b in zip(clauses, value.clauses)):
            return value
        return with_fields(value, clauses=clauses)
    return value


def _fuse_scope(e: Expr, fuser: _SpineFuser) -> Generator[Any, Any, Expr]:
    """Fuse one let spine (the scope starting at ``e``) and the scopes nested in it."""
    lets, body = flatten_lets(e)
    bindings = []
    for let in lets:
        bindings.append((let.var, (yield _fuse_nested(let.value, fuser))))
    body = yield _fuse_nested(body, fuser)
    tail: Var | None = None
    if _pattern_of(body) is not None and not isinstance(body, Tuple):
        # NOTE: an operator call in tail position is bound so that it becomes a kernel call.
        ty = body.checked_type_
        tail = Var("x", ty, checked_type_=ty)
        bindings.append((tail, body))
        body = tail
    if not any(_pattern_of(v) is not None for _, v in bindings):
        if tail is None and all(b[1] is let.value for b, let in zip(bindings, lets)) \
                and body is flatten_lets(e)[1]:
            return e
        return _rebuild(bindings, body, e)
    new_bindings = fuser.fuse(bindings, body)
    return _rebuild(new_bindings, body, e)


def _rebuild(bindings: list[tuple[Var, Expr]], body: Expr, like: Expr) -> Expr:
    ty = like.checked_type_
    for var, value in reversed(bindings):
        body = Let(var, value, body, checked_type_=ty)
    return body


def fuse_ops(mod: IRModule, max_depth: int = 256) -> IRModule:
    """Run :class:`FuseOps` at opt level 2 (fusion on) regardless of the current context."""
    outer = PassContext.current()
    with PassContext(opt_level=max(outer.opt_level, 1), instruments=outer.instruments,
                     config=outer.config) as ctx:
        return FuseOps(max_depth=max_depth)(mod, ctx)

