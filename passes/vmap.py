"""Automatic batching: ``vmap(mod, entry, in_axes)`` and ``vmap_function(fn, in_axes)``.

::

    def @main(%x: Tensor[(3,), float32], %w: Tensor[(4, 3), float32]) { nn.dense(%x, %w) }
        vmap(in_axes=(0, None)) =>
    def @main[batch](%x: Tensor[(batch, 3), float32], %w: Tensor[(4, 3), float32]) {
        nn.dense(%x, %w)        # (batch, 4): one GEMM for every instance
    }

``in_axes`` holds one entry per parameter of the entry: an int (the axis of that argument that
holds the instances; negative counts from the end of the batched argument) or ``None`` (one
value shared by every instance). A single int or None applies to every parameter. For a
tuple-typed parameter the int applies to every tensor leaf. Every output leaf of the new entry
is batched on axis 0. The batch size comes from the arguments: by default it is the symbolic
dimension ``batch`` (a type parameter of the new entry: any size at run time); ``batch_size=n``
fixes it (needed by the operators batched by unrolling, see :mod:`relay_ir.op._batch`, and when
no argument is batched).

The walk maps every expression of the (typed, A-normal form) entry to ``(expr, dims)``: the
batched expression and where its batch axis is (``None``: the same for every instance; a tuple
of those for a tuple value). Unbatched values stay unbatched (shared weights are never copied);
an operator call with a batched argument is rewritten by the operator's batching rule
(``OpDef.batch``). Scope:

* let, tuples, projections, constants, operator calls;
* calls of other globals: inlined (batched at their call site); a recursive call is an error;
* ``if`` on an unbatched condition stays an ``if`` (both branches' results brought to the same
  batch axes); ``if`` on a batched condition evaluates both branches and selects leafwise,
  ``where(cond, then, else)``. Gradient caveat: ``gradient(vmap(f))`` differentiates the
  select, whose adjoint for the untaken branch is zero -- but the untaken branch's own local
  derivatives still multiply that zero, so an ``inf`` or ``nan`` there (``sqrt`` at 0, ``log``
  of a negative) leaks ``nan`` into the gradient. ``vmap(gradient(f))`` (after
  ``passes.optimize``) selects between the per-branch *gradients*, so nothing leaks: prefer it;
* closures, references, ADTs and ``match``, recursion: not supported (a ``VmapError`` that
  points to ``exe.run_batch``). A gradient program must go through ``passes.optimize`` first,
  which turns it into first-order code.

The rest of the module is kept as it is (the batched entry inlines what it calls).
"""
from __future__ import annotations

from typing import Any, Generator, Sequence

from relay_ir.errors import PassError
from relay_ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let,
                           Match, Op, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.op import get_opdef
from relay_ir.op._batch import BatchContext, BatchError
from relay_ir.span import Span
from relay_ir.traversal import build_lets, run_generators
from relay_ir.ty import Dim, FuncType, ShapeVar, TensorType, TupleType, Type, fmt_type

Gen = Generator[Any, Any, Any]

__all__ = ["vmap", "vmap_function", "VmapError"]

_UNSUPPORTED = "not supported by vmap; use exe.run_batch for such programs"
_GRAD_HINT = (" (a gradient program must be first-order: passes.optimize makes the gradient of "
              "a dataflow function first-order; one whose control flow depends on data keeps "
              "its closures and references: vmap the function, then differentiate)")


class VmapError(PassError):
    """The program or the ``in_axes`` cannot be batched by ``vmap``."""

    kind = "vmap error"

    def __init__(self, message: str, span: Span | None = None, notes: Sequence[str] = ()):
        super().__init__(message, span, notes, pass_name="vmap")


def _batched(d: Any) -> bool:
    if isinstance(d, tuple):
        return any(_batched(x) for x in d)
    return d is not None


def _has_float(t: Type) -> bool:
    if isinstance(t, TupleType):
        return any(_has_float(f) for f in t.fields)
    return isinstance(t, TensorType) and t.dtype.startswith(("float", "bfloat"))


def _insert(t: TensorType, axis: int, size: Dim) -> TensorType:
    shape = list(t.shape)
    shape.insert(axis, size)
    return TensorType(tuple(shape), t.dtype)


class _Batcher:
    """One batching walk (a function body with its parameters' batch axes)."""

    def __init__(self, mod: IRModule | None, ctx: BatchContext, graph: bool = False,
                 guard_branches: bool = True) -> None:
        self.mod = mod
        self.guard_branches = guard_branches
        # graph: the body is a dataflow graph (a primitive function): no let bindings are
        # made, shared nodes stay shared (memo by identity)
        self.graph = graph
        self.memo: dict[Expr, tuple[Expr, Any]] = {}
        self.ctx = ctx
        self.env: dict[Var, tuple[Expr, Any]] = {}
        self.out: list[tuple[Var, Expr]] = []
        self.inlining: list[str] = []
        self.n = 0

    # ------------------------------------------------------------------ emitting
    def emit(self, e: Expr, hint: str = "v") -> Expr:
        if self.graph or isinstance(e, (Var, GlobalVar, Constant, Op)):
            return e
        self.n += 1
        v = Var(hint)
        self.out.append((v, e))
        return v

    def field(self, x: Expr, i: int) -> Expr:
        return x.fields[i] if isinstance(x, Tuple) else TupleGetItem(x, i)

    def convert(self, x: Expr, d: Any, t: Type, to: Any) -> Expr:
        """``x`` (batch axes ``d``, per-instance type ``t``) with batch axes ``to`` (0 or None
        leafwise; None only where ``d`` is None)."""
        if d == to:
            return x
        if isinstance(t, TupleType):
            ds = d if isinstance(d, tuple) else (d,) * len(t.fields)
            tos = to if isinstance(to, tuple) else (to,) * len(t.fields)
            return Tuple(tuple(self.convert(self.field(x, i), di, ti, oi)
                               for i, (di, ti, oi) in enumerate(zip(ds, t.fields, tos))))
        if not isinstance(t, TensorType):
            raise VmapError(f"a value of type {fmt_type(t)} cannot be batched ({_UNSUPPORTED})")
        assert to == 0
        return self.emit(self.ctx.front(x, d, t))

    # ------------------------------------------------------------------ walking
    def spine(self, e: Expr) -> Gen:
        """A let spine in the current scope; returns ``(expr, dims)``."""
        while isinstance(e, Let):
            x, d = yield self.value(e.value)
            self.env[e.var] = (self.emit(x, e.var.name_hint), d)
            e = e.body
        return (yield self.value(e))

    def value(self, e: Expr) -> Gen:
        if self.graph:
            r = self.memo.get(e)
            if r is None:
                r = self.memo[e] = yield self.value1(e)
            return r
        return (yield self.value1(e))

    def value1(self, e: Expr) -> Gen:
        t = type(e)
        if t is Var:
            try:
                return self.env[e]
            except KeyError:
                raise VmapError(f"free variable %{e.name_hint} in a batched function",
                                e.span) from None
        if t is Constant:
            return e, None
        if t is Let:
            return (yield self.spine(e))
        if t is Tuple:
            xs, ds = [], []
            for f in e.fields:
                x, d = yield self.value(f)
                xs.append(self.emit(x))
                ds.append(d)
            return Tuple(tuple(xs), span=e.span), tuple(ds)
        if t is TupleGetItem:
            x, d = yield self.value(e.tuple_value)
            if isinstance(d, tuple):
                return self.field(x, e.index), d[e.index]
            return TupleGetItem(self.emit(x), e.index, span=e.span), None
        if t is Call:
            return (yield self.call(e))
        if t is If:
            return (yield self.if_(e))
        if t in (Function, GlobalVar, Op):
            raise VmapError(f"functions as values (closures, higher-order calls) are "
                            f"{_UNSUPPORTED}{_GRAD_HINT}", e.span)
        if t in (Match, Constructor):
            raise VmapError(f"algebraic data types and match are {_UNSUPPORTED}", e.span)
        if t in (RefCreate, RefRead, RefWrite):
            raise VmapError(f"references are {_UNSUPPORTED}{_GRAD_HINT}", e.span)
        raise VmapError(f"{t.__name__} is {_UNSUPPORTED}", e.span)  # pragma: no cover

    def call(self, e: Call) -> Gen:
        f = e.op
        args, dims = [], []
        for a in e.args:
            x, d = yield self.value(a)
            args.append(self.emit(x))
            dims.append(d)
        if isinstance(f, Op):
            if not any(_batched(d) for d in dims):
                return Call(f, tuple(args), e.attrs, e.type_args, span=e.span), None
            od = get_opdef(f.name)
            if od.batch is None:
                raise VmapError(f"`{f.name}` has no batching rule", e.span)
            try:
                return od.batch(e, args, dims, self.ctx)
            except BatchError as err:
                raise VmapError(err.message, e.span or err.span) from None
        if isinstance(f, GlobalVar):
            if self.mod is None or f.name_hint not in self.mod:
                raise VmapError(f"call of an unknown global @{f.name_hint}", e.span)
            if f.name_hint in self.inlining:
                raise VmapError(f"recursion (@{f.name_hint} calls itself) is {_UNSUPPORTED}",
                                e.span)
            callee = self.mod[f.name_hint]
            for p, a, d in zip(callee.params, args, dims):
                self.env[p] = (a, d)
            self.inlining.append(f.name_hint)
            try:
                return (yield self.spine(callee.body))
            finally:
                self.inlining.pop()
        if isinstance(f, Constructor):
            raise VmapError(f"algebraic data types are {_UNSUPPORTED}", e.span)
        raise VmapError(f"calls of closures are {_UNSUPPORTED}", e.span)

    def branch(self, e: Expr) -> Gen:
        saved, self.out = self.out, []
        try:
            x, d = yield self.spine(e)
            return x, d, self.out
        finally:
            self.out = saved

    def if_(self, e: If) -> Gen:
        c, dc = yield self.value(e.cond)
        rt = e.checked_type_
        if rt is None:  # pragma: no cover - the input is typed
            raise VmapError("untyped if", e.span)
        if not _batched(dc):
            xt, dt, bt = yield self.branch(e.true_branch)
            xf, df, bf = yield self.branch(e.false_branch)
            to = self.join(dt, df, rt)
            saved = self.out
            self.out = bt
            xt = self.convert(xt, dt, rt, to)
            self.out = bf
            xf = self.convert(xf, df, rt, to)
            self.out = saved
            return If(self.emit(c), build_lets(bt, xt), build_lets(bf, xf), span=e.span), to
        # a batched condition: both branches run, a leafwise select
        cond = self.emit(self.ctx.to_front(c, dc, 0))
        saved = self.guard(e.true_branch, cond, True)
        try:
            xt, dt = yield self.spine(e.true_branch)
        finally:
            self.env.update(saved)
        xt = self.emit(xt)
        saved = self.guard(e.false_branch, cond, False)
        try:
            xf, df = yield self.spine(e.false_branch)
        finally:
            self.env.update(saved)
        xf = self.emit(xf)
        return self.select(cond, xt, dt, xf, df, rt), self.all0(rt)

    def guard(self, branch: Expr, cond: Expr, taken: bool) -> dict[Var, tuple[Expr, Any]]:
        """With ``guard_branches``: every float tensor the branch reads from outside enters it
        as ``where(cond, v, stop_gradient(v))`` (``taken`` False: the operands swapped) -- the
        same value, but an adjoint that is zero, exactly, for the instances that do not take
        the branch, so an inf or nan of the untaken branch's local derivatives never reaches
        the adjoints outside. Returns the environment entries to restore after the branch."""
        if not self.guard_branches:
            return {}
        from relay_ir.traversal import free_vars
        saved: dict[Var, tuple[Expr, Any]] = {}
        for v in free_vars(branch):
            if v not in self.env or not _has_float(v.checked_type):
                continue
            x, d = saved[v] = self.env[v]
            self.env[v] = (self.emit(self.guarded(x, d, v.checked_type, cond, taken),
                                     v.name_hint), self.all0(v.checked_type))
        return saved

    def guarded(self, x: Expr, d: Any, t: Type, cond: Expr, taken: bool) -> Expr:
        from relay_ir.op._rules import make_call
        if isinstance(t, TupleType):
            ds = d if isinstance(d, tuple) else (d,) * len(t.fields)
            return Tuple(tuple(self.emit(self.guarded(self.field(x, i), ds[i], f, cond, taken))
                               for i, f in enumerate(t.fields)))
        if not isinstance(t, TensorType):
            raise VmapError(f"a value of type {fmt_type(t)} used in an if on a batched "
                            f"condition is {_UNSUPPORTED}")
        v = self.emit(self.ctx.front(x, d, t))
        if not t.dtype.startswith(("float", "bfloat")):
            return v
        m = cond if not t.ndim else make_call("expand_dims", cond, axis=1, num_newaxis=t.ndim)
        sg = make_call("stop_gradient", v)
        return make_call("where", m, v, sg) if taken else make_call("where", m, sg, v)

    def join(self, a: Any, b: Any, t: Type) -> Any:
        if isinstance(t, TupleType):
            sa = a if isinstance(a, tuple) else (a,) * len(t.fields)
            sb = b if isinstance(b, tuple) else (b,) * len(t.fields)
            return tuple(self.join(x, y, f) for x, y, f in zip(sa, sb, t.fields))
        return a if a == b else 0

    def all0(self, t: Type) -> Any:
        if isinstance(t, TupleType):
            return tuple(self.all0(f) for f in t.fields)
        return 0

    def select(self, c: Expr, xt: Expr, dt: Any, xf: Expr, df: Any, t: Type) -> Expr:
        from relay_ir.op._rules import make_call
        if isinstance(t, TupleType):
            n = len(t.fields)
            st = dt if isinstance(dt, tuple) else (dt,) * n
            sf = df if isinstance(df, tuple) else (df,) * n
            return Tuple(tuple(self.emit(self.select(c, self.field(xt, i), st[i],
                                                     self.field(xf, i), sf[i], t.fields[i]))
                               for i in range(n)))
        if not isinstance(t, TensorType):
            raise VmapError(f"an if with a batched condition returning {fmt_type(t)} is "
                            f"{_UNSUPPORTED}")
        a = xt if dt is None else self.ctx.to_front(xt, dt, t.ndim)
        b = xf if df is None else self.ctx.to_front(xf, df, t.ndim)
        m = c if not t.ndim else make_call("expand_dims", c, axis=1, num_newaxis=t.ndim)
        return make_call("where", m, a, b)


# ============================================================================= entry points
def _norm_in_axes(params: Sequence[Var], in_axes: Any, where: str) -> list[Any]:
    if in_axes is None or (isinstance(in_axes, int) and not isinstance(in_axes, bool)):
        return [in_axes] * len(params)
    if not isinstance(in_axes, (tuple, list)):
        raise VmapError(f"in_axes must be a tuple of ints or None (one per parameter of "
                        f"{where}), found {in_axes!r}")
    if len(in_axes) != len(params):
        raise VmapError(f"in_axes has {len(in_axes)} entries but {where} has {len(params)} "
                        f"parameters ({', '.join('%' + p.name_hint for p in params)})")
    for a in in_axes:
        if a is not None and (isinstance(a, bool) or not isinstance(a, int)):
            raise VmapError(f"in_axes entries must be ints or None, found {a!r}")
    return list(in_axes)


def _param_dims(p: Var, t: Type, axis: int | None, size: Dim, where: str
                ) -> tuple[Type, Any]:
    """The batched type of parameter ``p`` and its dims."""
    if axis is None:
        return t, None
    if isinstance(t, TupleType):
        fs = [_param_dims(p, f, axis, size, where) for f in t.fields]
        return TupleType(tuple(f[0] for f in fs)), tuple(f[1] for f in fs)
    if not isinstance(t, TensorType):
        raise VmapError(f"parameter %{p.name_hint} of {where} has type {fmt_type(t)}, which vmap "
                        f"cannot batch (only tensors and tuples of tensors; give it None in "
                        f"in_axes)", p.span)
    n = t.ndim + 1
    if not -n <= axis < n:
        raise VmapError(f"in_axes entry {axis} for parameter %{p.name_hint} of {where} is out "
                        f"of range: the batched argument has rank {n} (axes {-n}..{n - 1})",
                        p.span)
    a = axis % n
    return _insert(t, a, size), a


def _first_ref(params: Sequence[Var], dims: Sequence[Any], orig: Sequence[Type]
               ) -> tuple[Expr, int, TensorType] | None:
    """The first batched tensor leaf of the parameters (expression, batch axis, per-instance
    type): what a batch-shaped mask is made from when the batch size is symbolic."""
    for p, d, t in zip(params, dims, orig):
        x: Expr = p
        while isinstance(d, tuple):
            i = next((k for k, dk in enumerate(d) if _batched(dk)), None)
            if i is None:
                break
            x, d, t = TupleGetItem(x, i), d[i], t.fields[i]  # type: ignore[attr-defined]
        if isinstance(d, int):
            return x, d, t  # type: ignore[return-value]
    return None


def _batch_function(fn: Function, in_axes: Any, batch_size: int | None,
                    mod: IRModule | None, where: str, graph: bool = False,
                    guard_branches: bool = True) -> Function:
    """The batched version of the typed, A-normal-form function ``fn`` (untyped result)."""
    axes = _norm_in_axes(fn.params, in_axes, where)
    if batch_size is not None and (isinstance(batch_size, bool) or
                                   not isinstance(batch_size, int) or batch_size < 1):
        raise VmapError(f"batch_size must be a positive int, found {batch_size!r}")
    tparams = tuple(fn.type_params)
    if batch_size is None:
        names = {getattr(v, "name", None) for v in tparams}
        name = "batch"
        k = 1
        while name in names:
            name, k = f"batch{k}", k + 1
        size: Dim = ShapeVar(name)
        tparams = tparams + (size,)  # type: ignore[operator]
    else:
        size = batch_size
    orig = [p.checked_type for p in fn.params]
    new_params, dims = [], []
    for p, t, a in zip(fn.params, orig, axes):
        nt, d = _param_dims(p, t, a, size, where)
        new_params.append(Var(p.name_hint, nt, span=p.span, attrs=p.attrs))
        dims.append(d)
    ref = _first_ref(new_params, dims, orig)
    if ref is None and batch_size is None:
        raise VmapError(f"no argument of {where} is batched (every in_axes entry is None): "
                        "give vmap a batch_size")
    b = _Batcher(mod, BatchContext(size, ref), graph, guard_branches)
    for p, np_, d in zip(fn.params, new_params, dims):
        b.env[p] = (np_, d)
    x, d = run_generators(b.spine(fn.body))
    rt = fn.ret_type or fn.body.checked_type_
    x = b.convert(x, d, rt, b.all0(rt))
    body = build_lets(b.out, x)
    return Function(tuple(new_params), body, None, tparams, fn.attrs, span=fn.span)


def _prepare(mod: IRModule) -> IRModule:
    from relay_ir.passes.to_anf import ToANormalForm
    from relay_ir.passes.type_infer import InferType
    return InferType()(ToANormalForm()(InferType()(mod)))


def vmap_function(fn: Function, in_axes: Any, batch_size: int | None = None) -> Function:
    """The batched version of one function whose body is dataflow (let, operator calls,
    tuples, projections; a fused primitive function): parameters batched as ``in_axes`` says
    (see :func:`vmap`), every output leaf batched on axis 0, the function's attributes
    (``Primitive=1``) kept. With ``batch_size`` None the batch is the symbolic dimension
    ``batch``, a type parameter of the result. The result is typed (``ret_type`` set) and,
    like a fused group, a dataflow graph without let bindings (shared nodes stay shared), so
    ``runtime.lower_tvm.lower_group`` lowers it. Lets in ``fn`` are walked too (inlined)."""
    from relay_ir.passes.type_infer import InferType
    if not isinstance(fn, Function):
        raise VmapError(f"vmap_function needs a Function, found {type(fn).__name__}")
    where = "the function"
    plain = Function(fn.params, fn.body, fn.ret_type, fn.type_params, span=fn.span)
    m = InferType()(IRModule({"main": plain}))
    bf = _batch_function(m["main"], in_axes, batch_size, None, where, graph=True)
    out = InferType()(IRModule({"main": Function(bf.params, bf.body, None, bf.type_params,
                                                 span=bf.span)}))["main"]
    return Function(out.params, out.body, out.ret_type, out.type_params, fn.attrs,
                    span=fn.span, checked_type_=out.checked_type_)


def vmap(mod: IRModule, entry: str = "main", in_axes: Any = 0,
         batch_size: int | None = None, guard_branches: bool = True) -> IRModule:
    """The module with ``@entry`` replaced by its batched version (same name); see the module
    docstring. Other globals are kept unchanged (the batched entry inlines those it calls)."""
    from relay_ir.passes.type_infer import InferType
    if not isinstance(mod, IRModule):
        raise VmapError(f"vmap needs an IRModule, found {type(mod).__name__}")
    if entry not in mod:
        known = ", ".join(f"@{n}" for n in mod.functions) or "none"
        raise VmapError(f"no global function @{entry} to batch (globals: {known})")
    from relay_ir.traversal import post_order
    for name in mod.functions:
        if name != entry and any(isinstance(e, GlobalVar) and e.name_hint == entry
                                 for e in post_order(mod[name].body)):
            raise VmapError(f"@{name} uses the entry @{entry}, whose type vmap changes: batch "
                            f"a wrapper entry that calls @{entry} instead",
                            getattr(mod[name], "span", None))
    m = _prepare(mod)
    fn = m[entry]
    bf = _batch_function(fn, in_axes, batch_size, m, f"@{entry}",
                         guard_branches=guard_branches)
    return InferType()(mod.with_function(entry, bf))


# NOTE: `relay_ir.passes.vmap` is bound to the function (as `passes.gradient` is); these
# attributes keep `relay_ir.passes.vmap.vmap_function` working as a dotted name too.
vmap.vmap_function = vmap_function  # type: ignore[attr-defined]
vmap.VmapError = VmapError  # type: ignore[attr-defined]
