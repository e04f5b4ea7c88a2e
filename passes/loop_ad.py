"""The loop rule of reverse-mode AD: a first-order tape for self-tail-recursive globals.

``passes.gradient`` differentiates every global by the reference-based transform: each
operator call pushes a backward closure and every value gets an adjoint cell. For a loop
(a global whose only calls are tail calls of itself) whose trip count is dynamic, that chain of
closures and cells survives ``passes.optimize``: W6 paid ~58 VM calls a step for it. This
rule replaces the twin ``@f_grad`` of such a loop by a first-order tape::

    def @f(%p1: T1, .., %pn: Tn) -> R { step body: ops, tuples, `if`s; leaves are either
                                        @f(args..) (tail calls) or a result }
 => type f_rec { f_rec_0(S..), .., f_rec_k(S..) }                  # one record per leaf
    type f_tape { f_tape_nil, f_tape_node(f_rec, f_tape) }
    def @f_fwd(%p1, .., %pn, %tape: f_tape, %out: ref(f_tape)) -> R {
      the step body; at leaf j: @f_fwd(args.., f_tape_node(f_rec_j(saved..), %tape), %out)
                             or ref_write(%out, f_tape_node(f_rec_j(saved..), %tape)); result
    }
    def @f_bwd(%cell: ref(f_tape), %dr: R, %d1.., %dm, invariant..) -> (T_1.., T_m) {
      match (ref_read(%cell)) {                                     # m float parameters
        f_tape_node(%rec, %rest) => { ref_write(%cell, %rest); match (%rec) {
          f_rec_j(%saved..) => { the reverse sweep of leaf j's straight-line path, seeded
                                 with (%d1..%dm) on the tail call's arguments (or %dr on the
                                 result); @f_bwd(%cell, %dr, %e1..%em, invariant..) } } }
        f_tape_nil => (%d1, .., %dm)
      }
    }
    def @f_grad(%p1': T1', .., %bp) -> R' {        # the usual AD calling convention
      let %y = @f_fwd(primals.., f_tape_nil, %cell);
      (one backward closure for the whole loop: @f_bwd(%cell, adjoint of %y, zeros..) added
       into the parameters' cells); (%y, a fresh adjoint cell)
    }

The adjoints of the loop-carried values are ``@f_bwd``'s parameters (no cells), and a step
pushes one constructor holding only the values its backward sweep reads (``saved``: the free
variables of the sweep, less the parameters every step passes on unchanged and the values of
elementwise operators, which the sweep recomputes), so a step of the forward loop is the body
plus one record and a step of the backward loop a pop plus the sweep. Both are self tail
calls: constant stack on every backend. The tape is popped from its cell as the backward loop
runs, so it is freed record by record (freed from its head in one go, a chain of 10^6
records would recurse in the runtime's destructors); ``@f_bwd`` is ``NoInline`` for the same
reason (a caller running its first step would hold the head record); it is also
``TapeLoop``, which lets partial evaluation unroll it whole where the tape is known to its end
(a static trip count: ``passes.optimize`` then leaves first-order code, no tape, no cell).

A body is a tree of ``if``s whose paths are straight lines of operator calls, tuples and
projections; a ``let`` bound to an ``if`` (not in tail position) is split by copying the rest of
the body into both branches, up to ``MAX_PATHS`` paths. A global qualifies when it has no type
parameters, its parameters are tensors, its result is a tensor tree, it makes at least one self
tail call and no call of another global except taped loops (whose forward loop runs in the step,
its tape saved in the record, and whose backward loop runs in the backward step), and it uses
no reference, closure, ``match`` or ADT. Local loops (``let %f = fn (..) { .. %f(..) }``, as the
Python front end writes ``for``/``while``) are lifted to globals first (``lift_local_loops``;
their captured tensors become parameters every step passes on). Anything else
keeps the reference-based twin: the rule only ever replaces a global's twin with one of the
same type, so the rest of the program (callers, closures that call the loop, gradients of
gradients) is unchanged.

The switch: ``passes.gradient(mod, loop_rule=False)`` (or the environment variable
``RELAY_IR_LOOP_AD=0``) keeps the reference-based twin for every global.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from relay_ir.attrs import Attrs
from relay_ir.builder import ScopeBuilder
from relay_ir.errors import DiagnosticError, InternalError
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, PatternConstructor, PatternVar, RefCreate, RefRead,
                           RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule, fresh_name
from relay_ir.op import get_opdef
from relay_ir.passes._ad_common import (_call, _fresh_name, _tensor_tree, _type_of,
                                        _typed_const, has_float_leaf, is_float)
from relay_ir.passes._analysis import op_is_effectful
from relay_ir.traversal import free_vars, post_order
from relay_ir.ty import (UNIT, FuncType, GlobalTypeVar, RefType, TensorType, TupleType, Type,
                         TypeCall, TypeData)

__all__ = ["MAX_PATHS", "loop_rule_enabled", "eligible_loops", "apply_loop_rule",
           "lift_local_loops"]

#: At most this many straight-line paths (leaves of the ``if`` tree) per loop body.
MAX_PATHS = 16
ENV_SWITCH = "RELAY_IR_LOOP_AD"


def loop_rule_enabled(flag: bool | None) -> bool:
    """``flag`` if given, else the environment switch (on unless ``RELAY_IR_LOOP_AD=0``)."""
    if flag is not None:
        return bool(flag)
    from relay_ir.errors import env_switch
    return env_switch(ENV_SWITCH)


class _NotALoop(Exception):
    """The global does not qualify (the reference-based twin stays)."""


# ----------------------------------------------------------------------------- analysis
@dataclass
class _Leaf:
    binds: list[tuple[Var, Expr]]            # this segment's bindings
    call: tuple[Expr, ...] | None            # the tail call's arguments, or None
    result: Expr | None                      # the returned atom (when not a call)


@dataclass
class _Fork:
    binds: list[tuple[Var, Expr]]
    cond: Expr
    then: Any                                # _Leaf | _Fork
    other: Any


@dataclass
class _Loop:
    name: str
    fn: Function
    param_types: list[Type]
    ret: Type
    tree: Any
    leaves: list[_Leaf] = field(default_factory=list)
    paths: list[list[tuple[Var, Expr]]] = field(default_factory=list)  # per leaf, root first
    invariant: list[int] = field(default_factory=list)  # parameters every tail call passes on
    # path bindings `%v = @g(..)` of taped loops @g -> a variable for @g's tape (set by
    # build_loop: @g's forward loop runs in the step, its tape is saved, @g's backward loop
    # runs in the backward step)
    subtapes: dict[Var, Var] = field(default_factory=dict)


@dataclass
class _Built:
    """A taped loop: what a loop calling it needs."""
    loop: _Loop
    fwd_gv: GlobalVar
    bwd_gv: GlobalVar
    nil: Constructor
    tape_t: Type
    float_idx: list[int]
    res_t: Type


def _value_ok(e: Expr, callees: frozenset = frozenset()) -> bool:
    if isinstance(e, (Var, Constant)):
        return True
    if isinstance(e, Call):
        if isinstance(e.op, GlobalVar) and e.op.name_hint in callees:
            return all(isinstance(a, (Var, Constant)) for a in e.args)
        if not isinstance(e.op, Op) or op_is_effectful(e.op):
            return False
        return all(isinstance(a, (Var, Constant)) for a in e.args)
    if isinstance(e, Tuple):
        return all(isinstance(f, (Var, Constant)) for f in e.fields)
    if isinstance(e, TupleGetItem):
        return isinstance(e.tuple_value, Var)
    return False


def _is_self_call(e: Expr, gv_name: str) -> bool:
    return isinstance(e, Call) and isinstance(e.op, GlobalVar) and e.op.name_hint == gv_name


def _analyze(name: str, fn: Function, callees: frozenset = frozenset()) -> Any:
    """The body as a tree of forks and leaves (module docstring); raises :class:`_NotALoop`.

    The recursion follows ``if`` nesting only, bounded by ``MAX_PATHS``."""
    count = [0, 0]   # leaves, forks

    def walk(e: Expr, conts: tuple[tuple[Var, Expr], ...]) -> Any:
        binds: list[tuple[Var, Expr]] = []
        while True:
            if isinstance(e, Let):
                v, val, body = e.var, e.value, e.body
                if isinstance(val, If):
                    rest = conts if (body is v) else ((v, body),) + conts
                    return _fork(binds, val, rest)
                if isinstance(val, Let):
                    conts = ((v, body),) + conts
                    e = val
                    continue
                if _is_self_call(val, name):
                    if body is v and not conts:
                        return _leaf(binds, val)
                    raise _NotALoop("a call of itself not in tail position")
                if not _value_ok(val, callees):
                    raise _NotALoop(f"unsupported binding {type(val).__name__}")
                binds.append((v, val))
                e = body
                continue
            if isinstance(e, If):
                return _fork(binds, e, conts)
            if _is_self_call(e, name):
                if conts:
                    raise _NotALoop("a call of itself not in tail position")
                return _leaf(binds, e)
            if not _value_ok(e, callees):
                raise _NotALoop(f"unsupported expression {type(e).__name__}")
            if conts:
                (v, body), conts = conts[0], conts[1:]
                binds.append((v, e))
                e = body
                continue
            if not isinstance(e, (Var, Constant)):
                t = _type_of(e)
                v = Var("r", t, checked_type_=t)
                binds.append((v, e))
                e = v
            count[0] += 1
            if count[0] > MAX_PATHS:
                raise _NotALoop("too many paths")
            return _Leaf(binds, None, e)

    def _leaf(binds: list, call: Call) -> _Leaf:
        count[0] += 1
        if count[0] > MAX_PATHS:
            raise _NotALoop("too many paths")
        if not all(isinstance(a, (Var, Constant)) for a in call.args):
            raise _NotALoop("non-atomic call argument")
        return _Leaf(binds, tuple(call.args), None)

    def _fork(binds: list, e: If, conts: tuple) -> _Fork:
        # NOTE: a tree of at most MAX_PATHS leaves has fewer forks: this bounds the recursion
        # (10,000 nested `if`s are given up at once, not walked)
        count[1] += 1
        if count[1] >= MAX_PATHS:
            raise _NotALoop("too many paths")
        if not isinstance(e.cond, (Var, Constant)):
            raise _NotALoop("non-atomic condition")
        then = walk(e.true_branch, conts)
        other = walk(e.false_branch, conts)
        return _Fork(binds, e.cond, then, other)

    return walk(fn.body, ())


def _loop_of(name: str, fn: Function, callees: frozenset = frozenset()) -> _Loop | None:
    """The analysed loop if global ``name`` (function ``fn``) qualifies, else None; it may
    call the loops named in ``callees`` (not in tail position)."""
    if not isinstance(fn, Function) or fn.type_params:
        return None
    ts = [p.type_annotation if p.type_annotation is not None else p.checked_type_
          for p in fn.params]
    ret = fn.ret_type
    if ret is None and isinstance(fn.checked_type_, FuncType):
        ret = fn.checked_type_.ret_type
    if ret is None or any(not isinstance(t, TensorType) for t in ts) \
            or not _tensor_tree(ret) or not has_float_leaf(ret):
        return None
    if not any(type(n) is Call and type(n.op) is GlobalVar and n.op.name_hint == name
               for n in post_order(fn.body)):
        return None          # NOTE: not a loop (a cheap iterative scan before the analysis)
    try:
        tree = _analyze(name, fn, callees)
    except _NotALoop:
        return None
    loop = _Loop(name, fn, ts, ret, tree)
    stack: list[tuple[Any, list]] = [(tree, [])]
    while stack:
        node, prefix = stack.pop()
        path = prefix + node.binds
        if isinstance(node, _Leaf):
            loop.leaves.append(node)
            loop.paths.append(path)
        else:
            stack.append((node.other, path))
            stack.append((node.then, path))
    if not any(leaf.call is not None for leaf in loop.leaves) \
            or not any(leaf.call is None for leaf in loop.leaves):
        return None
    if any(v.checked_type_ is None and v.type_annotation is None
           for path in loop.paths for v, _ in path):
        return None
    loop.invariant = _invariant_params(loop)
    return loop


def eligible_loops(mod: IRModule, names: list[str] | None = None) -> dict[str, _Loop]:
    """The globals (of ``names``, default all) that the loop rule applies to."""
    out: dict[str, _Loop] = {}
    todo = list(names if names is not None else mod.functions)
    # NOTE: callees first: a loop that calls loops qualifies once they do (a fixed point)
    while True:
        grew = False
        for name in todo:
            if name in out:
                continue
            loop = _loop_of(name, mod[name], frozenset(out))
            if loop is not None:
                out[name] = loop
                grew = True
        if not grew:
            return out


# ----------------------------------------------------------------------------- local loops
class _SelfCalls(ExprMutator):
    """A loop body with its parameters and captured variables renamed and its self calls
    ``%f(a..)`` made calls of the global ``@g(a.., env..)`` (``%f`` used otherwise stays)."""

    def __init__(self, self_var: Var, gv: GlobalVar, subst: dict[Var, Var], env: tuple) -> None:
        super().__init__()
        self.self_var, self.gv, self.subst, self.env = self_var, gv, subst, env

    def visit_var(self, v: Var) -> Expr:
        return self.subst.get(v, v)   # NOTE: %f left anywhere but as a callee: not a loop

    def visit_call(self, c: Call) -> Expr:
        if c.op is self.self_var:
            return Call(self.gv, self._visit_all(c.args) + self.env, span=c.span,
                        checked_type_=c.checked_type_)
        return super().visit_call(c)


class _LoopLifter(ExprMutator):
    """``let %f = fn (%p..) { ... %f(a..) ... }`` (a local self-tail-recursive loop, as the
    Python front end writes ``for``/``while``) whose captured variables are tensors becomes
    the global ``@owner_f(%p.., captured..)`` and the binding a closure calling it, so the
    loop rule applies (the captured variables are parameters every step passes on)."""

    def __init__(self, owner: str, taken: set[str], lifted: dict[str, Function]) -> None:
        super().__init__()
        self.owner, self.taken, self.lifted = owner, taken, lifted

    def visit_binding(self, var: Var, value: Expr) -> Any:
        if type(value) is Function and not value.is_primitive and not value.type_params \
                and _tail_calls(value.body, var):   # NOTE: so %var is free in it
            body = yield value.body
            f2 = value if body is value.body else Function(
                value.params, body, value.ret_type, value.type_params, value.attrs,
                span=value.span, checked_type_=value.checked_type_)
            new = self._lift(var, f2)
            out = new if new is not None else f2
            self.memo[value] = out
            return var, out
        return ((yield var), (yield value))

    def _lift(self, var: Var, f: Function) -> Function | None:
        fvs = [v for v in free_vars(f) if v is not var]
        ptypes = [p.type_annotation if p.type_annotation is not None else p.checked_type_
                  for p in f.params]
        etypes = [v.type_annotation if v.type_annotation is not None else v.checked_type_
                  for v in fvs]
        ret = f.ret_type
        if ret is None and isinstance(f.checked_type_, FuncType):
            ret = f.checked_type_.ret_type
        if ret is None or not all(isinstance(t, TensorType) for t in ptypes + etypes):
            return None
        name = fresh_name(f"{self.owner}_{var.name_hint}", self.taken)
        gv = GlobalVar(name)
        params = tuple(Var(p.name_hint, t, span=p.span, checked_type_=t)
                       for p, t in zip(f.params, ptypes))
        env = tuple(Var(v.name_hint, t, span=v.span, checked_type_=t)
                    for v, t in zip(fvs, etypes))
        subst = dict(zip(f.params, params)) | dict(zip(fvs, env))
        body = _SelfCalls(var, gv, subst, env).visit(f.body)
        if var in free_vars(body):
            return None
        glob = Function(params + env, body, ret, span=f.span)
        if _loop_of(name, glob) is None:
            return None
        self.taken.add(name)
        self.lifted[name] = glob
        wparams = tuple(Var(p.name_hint, t, span=p.span, checked_type_=t)
                        for p, t in zip(f.params, ptypes))
        call = Call(gv, wparams + tuple(fvs), span=f.span, checked_type_=ret)
        return Function(wparams, call, ret, span=f.span)


def _tail_calls(body: Expr, f: Var) -> bool:
    """Whether ``body`` calls ``f`` on its spine: in a tail position or as the value of a
    ``let`` on it (A-normal form's ``let %r = %f(..); %r``), through lets, ifs and matches --
    a superset of the tail calls :func:`_analyze` accepts.

    NOTE: the cheap test first: it walks only the spine, never a call's arguments or a nested
    function, so testing every function of a program costs linear time (free_vars of each
    nested function would cost quadratic time on 10,000 nested closures)."""
    todo = [body]
    while todo:
        e = todo.pop()
        t = type(e)
        if t is Let:
            todo += (e.value, e.body)                  # type: ignore[attr-defined]
        elif t is If:
            todo += (e.true_branch, e.false_branch)    # type: ignore[attr-defined]
        elif t is Match:
            todo += (c.rhs for c in e.clauses)         # type: ignore[attr-defined]
        elif t is Call and e.op is f:                  # type: ignore[attr-defined]
            return True
    return False


def lift_local_loops(mod: IRModule) -> IRModule:
    """Every local self-tail-recursive loop that qualifies becomes a global (see
    :class:`_LoopLifter`); ``mod`` itself when there is none."""
    taken = set(mod.functions) | set(mod.type_definitions) | set(mod.constructors)
    lifted: dict[str, Function] = {}
    changed: dict[str, Function] = {}
    for gname, fn in mod.functions.items():
        if not isinstance(fn, Function) or fn.is_primitive \
                or not any(type(n) is Function for n in post_order(fn.body)):
            continue
        new = _LoopLifter(gname, taken, lifted).visit(fn)
        if new is not fn:
            changed[gname] = new  # type: ignore[assignment]
    if not lifted:
        return mod
    return mod.with_functions({**changed, **lifted})


def _invariant_params(loop: _Loop) -> list[int]:
    """Positions of the parameters that every tail call passes on unchanged (``%x`` in W6):
    the backward loop takes them as parameters instead of reading them from every record."""
    out = []
    for j, p in enumerate(loop.fn.params):
        ok = True
        for leaf, path in zip(loop.leaves, loop.paths):
            if leaf.call is None:
                continue
            alias = {v: val for v, val in path if isinstance(val, (Var, Constant))}
            a = leaf.call[j]
            while isinstance(a, Var) and a in alias:
                a = alias[a]
            if a is not p:
                ok = False
                break
        if ok:
            out.append(j)
    return out


# ----------------------------------------------------------------------------- emission
def _var_type(v: Var) -> Type:
    t = v.checked_type_ if v.checked_type_ is not None else v.type_annotation
    if t is None:
        raise InternalError(f"loop rule: no type on %{v.name_hint}")
    return t


def _zeros(t: Type, like: Expr | None, sb: ScopeBuilder, symbolic: bool = False) -> Expr:
    """A zero tensor of type ``t`` (static shape) or ``zeros_like(like)``."""
    if isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape):
        od = get_opdef("zeros")
        return sb.let_(Call(od.op, (), od.make_attrs({"shape": list(t.shape), "dtype": t.dtype,
                                                      "symbolic": symbolic}),
                            checked_type_=t), "z", t)
    if like is None:
        raise _NotALoop("a zero of a symbolic shape without a value")
    return sb.let_(_call("zeros_like", like, checked_type_=t), "z", t)


#: Operators whose results the backward loop recomputes instead of saving (at most this
#: fusion pattern: elementwise, broadcast, injective).
RECOMPUTE_PATTERN = 2


def _recomputable(call: Call) -> bool:
    if not isinstance(call.op, Op) or op_is_effectful(call.op):
        return False
    od = get_opdef(call.op.name)
    return int(od.pattern) <= RECOMPUTE_PATTERN and all(
        isinstance(a, (Var, Constant)) for a in call.args)


class _Sweep:
    """The reverse sweep of one leaf's path, emitted in the backward loop's match arm."""

    def __init__(self, loop: _Loop, leaf_i: int, sb: ScopeBuilder, d_params: list[Var],
                 dr: Var, inv: dict[Var, Var], built: dict[str, _Built]) -> None:
        from relay_ir.passes.gradient import _Adj  # NOTE: the first-order sweep's adjoints
        self.loop, self.sb = loop, sb
        self.twins: dict[Var, Var] = {}       # original var -> its value in the backward arm
        self.alias: dict[Var, Expr] = {}
        self.adj = _Adj(sb)
        self.leaf = loop.leaves[leaf_i]
        self.path = loop.paths[leaf_i]
        self.d_params, self.dr = d_params, dr
        self.inv = inv                        # invariant parameter -> the backward loop's
        self.defs: dict[Var, Expr] = dict(self.path)
        self.built = built

    def twin(self, a: Expr) -> Expr:
        if isinstance(a, Constant):
            return _typed_const(a)
        a = self.resolve(a)
        if isinstance(a, Constant):
            return _typed_const(a)
        if a in self.inv:
            return self.inv[a]  # type: ignore[index]
        tw = self.twins.get(a)  # type: ignore[arg-type]
        if tw is not None:
            return tw
        # NOTE: a value computed by an elementwise, broadcast or injective operator from
        # other values of the step is recomputed here rather than saved on the tape (JAX's
        # `dots_saveable` policy: only products, reductions and opaque results are saved);
        # iterative over the chain of such operators
        stack: list[tuple[Var, bool]] = [(a, False)]  # type: ignore[list-item]
        while stack:
            v, ready = stack.pop()
            if v in self.twins or v in self.inv:
                continue
            val = self.defs.get(v)
            if not (isinstance(val, Call) and _recomputable(val)):
                t = _var_type(v)
                self.twins[v] = Var(v.name_hint, t, checked_type_=t)
                continue
            args = [self.resolve(x) for x in val.args]
            if not ready:
                stack.append((v, True))
                stack.extend((x, False) for x in args  # type: ignore[misc]
                             if isinstance(x, Var) and x not in self.twins and x not in self.inv)
                continue
            t = _var_type(v)
            new = Call(val.op, tuple(self.inv.get(x) or self.twins.get(x)  # type: ignore
                                     or _typed_const(x) for x in args),
                       val.attrs, val.type_args, span=val.span, checked_type_=t)
            self.twins[v] = self.sb.let_(new, v.name_hint, t, bind_atoms=True)  # type: ignore
        return self.twins[a]  # type: ignore[index]

    def resolve(self, a: Expr) -> Expr:
        while isinstance(a, Var) and a in self.alias:
            a = self.alias[a]
        return a

    def inner_loop(self, y: Var, call: Call, g: object, t: Type, arg_ts: list[Type],
                   push: Any) -> None:
        """``%y = @inner(a..)`` of a taped loop: its backward loop, on the tape its forward
        loop left in this step's record, gives the adjoints of ``a..``."""
        b: _Built = self.built[call.op.name_hint]  # type: ignore[union-attr]
        sb = self.sb
        dy = self.adj.materialize(g, self.twin(y), t)
        zs = [_zeros(b.loop.param_types[j], self.twin(call.args[j]), sb) for j in b.float_idx]
        invs = [self.twin(call.args[j]) for j in b.loop.invariant]
        tape = self.twin(self.loop.subtapes[y])
        d = sb.let_(Call(b.bwd_gv, (tape, dy) + tuple(zs) + tuple(invs),
                         checked_type_=b.res_t), "d", b.res_t)
        for k, j in enumerate(b.float_idx):
            at = arg_ts[j]
            gj = sb.let_(TupleGetItem(d, k, checked_type_=at), "g", at)
            push(call.args[j], gj, at)

    def run(self) -> list[Expr]:
        """Emit the sweep; returns the adjoints of the float parameters (in order)."""
        fn, sb, adj = self.loop.fn, self.sb, self.adj
        params = list(fn.params)
        float_params = [p for p, t in zip(params, self.loop.param_types) if is_float(t)]
        live: set[Var] = set(float_params)
        types: dict[Var, Type] = {p: t for p, t in zip(params, self.loop.param_types)}
        forward: list[tuple[Var, Expr]] = []
        for v, val in self.path:
            if isinstance(val, (Var, Constant)):
                self.alias[v] = val
                continue
            t = _var_type(v)
            types[v] = t
            forward.append((v, val))
            kids = val.args if isinstance(val, Call) else val.fields if isinstance(val, Tuple) \
                else (val.tuple_value,)  # type: ignore[union-attr]
            if any(isinstance(self.resolve(k), Var) and self.resolve(k) in live for k in kids):
                live.add(v)

        def push(a: Expr, g: object, t: Type) -> None:
            a = self.resolve(a)
            if isinstance(a, Var) and a in live and has_float_leaf(t):
                adj.add(a, g, t)

        if self.leaf.call is None:
            # the last step: the adjoints start from the carried ones (zeros), the result's
            # adjoint is %dr
            for p, d in zip(float_params, self.d_params):
                adj.add(p, d, types[p])
            push(self.leaf.result, adj.tree(self.dr, self.loop.ret), self.loop.ret)
        else:
            for a, p, t in zip(self.leaf.call, params, self.loop.param_types):
                if is_float(t):
                    push(a, self.d_params[float_params.index(p)], t)
        for y, nv in reversed(forward):
            g = adj.get(y)
            if g is None:
                continue
            t = types[y]
            if isinstance(nv, Tuple):
                for f, ft, gf in zip(nv.fields, t.fields, g):  # type: ignore
                    push(f, gf, ft)
                continue
            if isinstance(nv, TupleGetItem):
                src = self.resolve(nv.tuple_value)
                if isinstance(src, Var) and src in live:
                    st = types[src]
                    tree = [g if i == nv.index else None for i in range(len(st.fields))]
                    adj.add(src, tree, st)
                continue
            call: Call = nv  # type: ignore[assignment]
            arg_ts = [types[self.resolve(a)] if isinstance(self.resolve(a), Var)
                      else _type_of(_typed_const(self.resolve(a))) for a in call.args]
            if isinstance(call.op, GlobalVar):
                self.inner_loop(y, call, g, t, arg_ts, push)
                continue
            opdef = get_opdef(call.op.name)  # type: ignore[union-attr]
            if opdef.non_differentiable or not has_float_leaf(t) or not any(
                    isinstance(self.resolve(a), Var) and self.resolve(a) in live
                    and has_float_leaf(at) for a, at in zip(call.args, arg_ts)):
                continue
            if opdef.grad is None:
                raise _NotALoop(f"no gradient rule for {opdef.name}")
            ty = self.twin(y)
            dy = adj.materialize(g, ty, t)
            tcall = Call(call.op, tuple(self.twin(a) for a in call.args), call.attrs,
                         call.type_args, span=call.span, checked_type_=t)
            try:
                grads = opdef.grad(tcall, ty, dy)
            except DiagnosticError as err:
                raise _NotALoop(str(err)) from err
            for a, ga, at in zip(call.args, grads, arg_ts):
                if ga is None:
                    continue
                a = self.resolve(a)
                if isinstance(a, Var) and a in live and has_float_leaf(at):
                    adj.add(a, adj.tree(ga, at), at)
        out = []
        for p in float_params:
            g = adj.get(p)
            if g is None:
                g = _zeros(types[p], self.twin(p), sb)
            out.append(g)
        return out


def _prune(bindings: list[tuple[Var, Expr]], result: Expr) -> None:
    """Drop (in place) the bindings of a straight-line, effect-free scope that ``result`` does
    not use (values the sweep prepared for a rule that did not read them)."""
    used = set(free_vars(result))
    keep = []
    for v, val in reversed(bindings):
        if v in used:
            keep.append((v, val))
            used.update(free_vars(val))
    bindings[:] = keep[::-1]


def _emit_forward(loop: _Loop, fwd_gv: GlobalVar, ctors: list[Constructor | None],
                  node_ctor: Constructor, saved: list[list[Var]], tape: Var, out: Var,
                  fparams: list[Var],
                  out_t: Type, built: dict[str, _Built]) -> Expr:
    """The forward loop's body: the step body with a constructor pushed at every leaf; the
    last step writes the tape into the cell ``out``."""
    leaf_index = {id(leaf): i for i, leaf in enumerate(loop.leaves)}
    vmap0: dict[Var, Expr] = dict(zip(loop.fn.params, fparams))

    def atom(a: Expr, vmap: dict) -> Expr:
        if isinstance(a, Constant):
            return _typed_const(a)
        return vmap[a]

    def emit(node: Any, vmap: dict) -> Expr:
        sb = ScopeBuilder()
        for v, val in node.binds:
            if isinstance(val, (Var, Constant)):
                vmap[v] = atom(val, vmap)
                continue
            t = _var_type(v)
            if isinstance(val, Call) and isinstance(val.op, GlobalVar):
                # a taped loop: its forward loop, from an empty tape of its own
                b = built[val.op.name_hint]
                nil = sb.let_(Call(b.nil, (), checked_type_=b.tape_t), "nil", b.tape_t)
                cell_t = RefType(b.tape_t)
                cell = sb.let_(RefCreate(nil, checked_type_=cell_t), "cell", cell_t)
                vmap[v] = sb.let_(Call(b.fwd_gv, tuple(atom(a, vmap) for a in val.args)
                                       + (nil, cell), checked_type_=t), v.name_hint, t)
                vmap[loop.subtapes[v]] = cell
                continue
            if isinstance(val, Call):
                nv: Expr = Call(val.op, tuple(atom(a, vmap) for a in val.args), val.attrs,
                                val.type_args, span=val.span, checked_type_=t)
            elif isinstance(val, Tuple):
                nv = Tuple(tuple(atom(f, vmap) for f in val.fields), span=val.span,
                           checked_type_=t)
            else:
                nv = TupleGetItem(atom(val.tuple_value, vmap), val.index, span=val.span,
                                  checked_type_=t)
            vmap[v] = sb.let_(nv, v.name_hint, t, bind_atoms=True)
        if isinstance(node, _Fork):
            then = emit(node.then, dict(vmap))
            other = emit(node.other, dict(vmap))
            return sb.build(If(atom(node.cond, vmap), then, other, checked_type_=out_t))
        i = leaf_index[id(node)]
        if ctors[i] is None:        # NOTE: a step whose backward is the identity: no record
            rec: Expr = tape
        else:
            rec_t = TypeCall(ctors[i].belong_to, ())  # type: ignore[union-attr]
            tape_t = TypeCall(node_ctor.belong_to, ())
            r0 = sb.let_(Call(ctors[i], tuple(vmap[s] for s in saved[i]),  # type: ignore
                              checked_type_=rec_t), "rec", rec_t, bind_atoms=True)
            rec = sb.let_(Call(node_ctor, (r0, tape), checked_type_=tape_t), "tape", tape_t)
        if node.call is not None:
            r = sb.let_(Call(fwd_gv, tuple(atom(a, vmap) for a in node.call) + (rec, out),
                             checked_type_=out_t), "r", out_t)
        else:
            sb.let_(RefWrite(out, rec, checked_type_=UNIT), "_", UNIT)
            r = atom(node.result, vmap)
        return sb.build(r)

    return emit(loop.tree, vmap0)


def build_loop(loop: _Loop, taken: set[str], built: dict[str, _Built] | None = None
               ) -> tuple[list[TypeData], dict[str, Function], _Built]:
    """The tape type, ``@f_fwd`` and ``@f_bwd`` of one loop (raises :class:`_NotALoop`);
    ``built``: the loops it calls, already built."""
    built = built if built is not None else {}
    name, fn = loop.name, loop.fn
    loop.subtapes = {}
    for path in loop.paths:
        for v, val in path:
            if isinstance(val, Call) and isinstance(val.op, GlobalVar) and v not in loop.subtapes:
                b = built.get(val.op.name_hint)
                if b is None:
                    raise _NotALoop(f"@{val.op.name_hint} has no tape")
                loop.subtapes[v] = Var(f"{val.op.name_hint}_tape", RefType(b.tape_t),
                                       checked_type_=RefType(b.tape_t))
    float_idx = [i for i, t in enumerate(loop.param_types) if is_float(t)]
    float_ts = [loop.param_types[i] for i in float_idx]
    tape_gtv = GlobalTypeVar(_fresh_name(f"{name}_tape", taken))
    tape_t = TypeCall(tape_gtv, ())
    rec_gtv = GlobalTypeVar(_fresh_name(f"{name}_rec", taken))
    rec_t = TypeCall(rec_gtv, ())
    fwd_gv = GlobalVar(_fresh_name(f"{name}_fwd", taken))
    bwd_gv = GlobalVar(_fresh_name(f"{name}_bwd", taken))
    res_t = TupleType(tuple(float_ts))

    # the backward arms first: what each reads decides its constructor's fields
    cell_v = Var("cell", RefType(tape_t), checked_type_=RefType(tape_t))
    dr = Var("dr", loop.ret, checked_type_=loop.ret)
    d_params = [Var(f"d_{fn.params[i].name_hint}", t, checked_type_=t)
                for i, t in zip(float_idx, float_ts)]
    inv = {fn.params[j]: Var(fn.params[j].name_hint, loop.param_types[j],
                             checked_type_=loop.param_types[j]) for j in loop.invariant}
    inv_vars = tuple(inv.values())
    arms: list[tuple[list[Var], list[Var], Expr]] = []  # saved (original), twins, body
    skip: list[bool] = []
    for i in range(len(loop.leaves)):
        sb = ScopeBuilder()
        sweep = _Sweep(loop, i, sb, d_params, dr, inv, built)
        with sb.scope():
            outs = sweep.run()
            r = sb.let_(Call(bwd_gv, (cell_v, dr) + tuple(outs) + inv_vars,
                             checked_type_=res_t), "d", res_t)
            _prune(sb.bindings, r)
            body = sb.build(r)
        identity = isinstance(body, Let) and body.body is body.var  # only the loop call
        fv = set(free_vars(body))
        saved = [o for o, tw in sweep.twins.items() if tw in fv]
        arms.append((saved, [sweep.twins[o] for o in saved], body))
        # a tail call whose backward step is the identity (`continue` in a loop over an int
        # counter: each float argument is the parameter itself, nothing else contributes)
        # pushes no record
        skip.append(loop.leaves[i].call is not None and not saved and identity
                    and list(outs) == list(d_params))

    # The tape is a list of records: `node(record, rest)`, one record constructor per path.
    # NOTE: two levels, so that the rest of the tape is bound by one pattern (one register of
    # the backward loop, overwritten every step) whatever the path: a record's own clause
    # binding the rest would keep the tape below it alive in that clause's register
    nil = Constructor(_fresh_name(f"{name}_tape_nil", taken), (), tape_gtv, 0)
    node = Constructor(_fresh_name(f"{name}_tape_node", taken), (rec_t, tape_t), tape_gtv, 1)
    ctors: list[Constructor | None] = []
    for i, (saved, _, _) in enumerate(arms):
        ctors.append(None if skip[i] else Constructor(
            _fresh_name(f"{name}_rec_{i}", taken), tuple(_var_type(s) for s in saved),
            rec_gtv, sum(c is not None for c in ctors)))
    if all(c is None for c in ctors):
        raise _NotALoop("no step records anything")
    tds = [TypeData(rec_gtv, (), tuple(c for c in ctors if c is not None)),
           TypeData(tape_gtv, (), (nil, node))]

    # NOTE: the records of tail calls first: a match tests its clauses in order, and most
    # records are those of the loop's steps
    clauses = []
    order = sorted(range(len(arms)), key=lambda i: loop.leaves[i].call is None)
    for i in order:
        c, (_, twins, body) = ctors[i], arms[i]
        if c is None:
            continue
        clauses.append(Clause(PatternConstructor(c, tuple(PatternVar(tw) for tw in twins)),
                              body))
    rec_v = Var("rec", rec_t, checked_type_=rec_t)
    rest = Var("rest", tape_t, checked_type_=tape_t)
    # NOTE: the cell moves on to the rest of the tape first: the record just read is then held
    # by this step only, so the tape is freed record by record as the loop runs (a chain of
    # 10^6 records freed from its head at the end would recurse in the runtime's destructors
    # and overflow the C stack)
    step = Let(Var("_", UNIT, checked_type_=UNIT), RefWrite(cell_v, rest, checked_type_=UNIT),
               Match(rec_v, tuple(clauses), checked_type_=res_t), checked_type_=res_t)
    tape_v = Var("tape", tape_t, checked_type_=tape_t)
    outer = (Clause(PatternConstructor(node, (PatternVar(rec_v), PatternVar(rest))), step),
             Clause(PatternConstructor(nil, ()), Tuple(tuple(d_params), checked_type_=res_t)))
    # NOTE: NoInline: partial evaluation would otherwise run the first steps of the backward
    # loop in the caller, whose frame would then hold the head record (and through it every
    # record) until the loop returns. TapeLoop: it may still unroll the whole loop where it
    # knows the tape to its end (a static trip count), leaving no tape at run time
    bwd = Function((cell_v, dr) + tuple(d_params) + inv_vars,
                   Let(tape_v, RefRead(cell_v, checked_type_=tape_t),
                       Match(tape_v, outer, checked_type_=res_t), checked_type_=res_t),
                   res_t, attrs=Attrs({"NoInline": 1, "TapeLoop": 1}))

    fparams = [Var(p.name_hint, t, checked_type_=t) for p, t in zip(fn.params, loop.param_types)]
    ftape = Var("tape", tape_t, checked_type_=tape_t)
    fout = Var("out", RefType(tape_t), checked_type_=RefType(tape_t))
    out_t = loop.ret
    fbody = _emit_forward(loop, fwd_gv, ctors, node, [a[0] for a in arms], ftape, fout,
                          fparams, out_t, built)
    fwd = Function(tuple(fparams) + (ftape, fout), fbody, out_t, span=fn.span)
    return tds, {fwd_gv.name_hint: fwd, bwd_gv.name_hint: bwd}, \
        _Built(loop, fwd_gv, bwd_gv, nil, tape_t, float_idx, res_t)


def _twin_wrapper(ad: Any, loop: _Loop, fwd_gv: GlobalVar, bwd_gv: GlobalVar,
                  nil: Constructor) -> Function:
    """``@f_grad`` with the AD calling convention: run the forward loop, push one backward
    step that runs the backward loop and adds its adjoints into the parameters' cells."""
    from relay_ir.passes.gradient import BP_TYPE, ONCE
    sb = ad.sb
    fn = loop.fn
    params = [Var(p.name_hint, ad.types.map(t), checked_type_=ad.types.map(t))
              for p, t in zip(fn.params, loop.param_types)]
    bp = Var("bp", BP_TYPE, checked_type_=BP_TYPE)
    tape_t = TypeCall(nil.belong_to, ())
    float_idx = [i for i, t in enumerate(loop.param_types) if is_float(t)]
    res_t = TupleType(tuple(loop.param_types[i] for i in float_idx))
    with sb.scope():
        prims = [ad.primal(p, t) for p, t in zip(params, loop.param_types)]
        empty = sb.let_(Call(nil, (), checked_type_=tape_t), "nil", tape_t)
        tape = sb.let_(RefCreate(empty, checked_type_=RefType(tape_t)), "tape", RefType(tape_t))
        y = sb.let_(Call(fwd_gv, tuple(prims) + (empty, tape), checked_type_=loop.ret), "y",
                    loop.ret, bind_atoms=True)
        result = ad.lift_new(y, loop.ret)
        k = sb.let_(RefRead(bp), "k", FuncType((), UNIT))
        with sb.scope():
            dy = ad.read_adjoint(result, y, loop.ret)
            zs = [_zeros(loop.param_types[i], prims[i], sb, symbolic=True) for i in float_idx]
            invs = tuple(prims[j] for j in loop.invariant)
            d = sb.let_(Call(bwd_gv, (tape, dy) + tuple(zs) + invs, checked_type_=res_t), "d",
                        res_t)
            for j, i in enumerate(float_idx):
                t = loop.param_types[i]
                g = sb.let_(TupleGetItem(d, j, checked_type_=t), "g", t)
                ad.accumulate(params[i], g, t)
            back_body = sb.build(Call(k, (), checked_type_=UNIT))
        back = sb.let_(Function((), back_body, UNIT, attrs=ONCE), "back", FuncType((), UNIT))
        sb.let_(RefWrite(bp, back), "_", UNIT)
        body = sb.build(result)
    return Function(tuple(params) + (bp,), body, ad.types.map(loop.ret), span=fn.span)


def apply_loop_rule(ad: Any, twins: dict[str, Function], taken: set[str]) -> list[str]:
    """Replace the twin of every qualifying loop the transform reached (in ``twins``, by twin
    name) by the tape version; adds the tape types to ``ad.types.new_types`` and the forward
    and backward loops to ``twins``. Returns the names of the loops rewritten."""
    names = [n for n, gv in ad.gmap.items() if gv.name_hint in twins]
    done = []
    built: dict[str, _Built] = {}
    for name, loop in eligible_loops(ad.mod, names).items():   # NOTE: callees first
        try:
            tds, fns, b = build_loop(loop, taken, built)
        except _NotALoop:
            continue
        built[name] = b
        wrapper = _twin_wrapper(ad, loop, b.fwd_gv, b.bwd_gv, b.nil)
        ad.types.new_types.extend(tds)
        twins.update(fns)
        twins[ad.gmap[name].name_hint] = wrapper
        done.append(name)
    return done
