"""Rewrites of sums and matrix products: CombineSums and ShareWeightTranspose.

CombineSums: a sum of matrix products becomes one product of concatenations, and a sum of
scatters of distinct slices one stack.

    add(matmul(a1, b1), add(matmul(a2, b2), c)) => add(matmul(A, B), c)

where ``A`` joins ``a1, a2`` and ``B`` joins ``b1, b2`` along the contracted axis (rows of a
``transpose_a`` operand, columns otherwise; the reverse for ``b``), since
``sum_i a_i b_i = [a_1 .. a_n] [b_1; ..; b_n]``. A gradient accumulates a weight's adjoint this
way over the steps of an unrolled recurrence: 50 rank-1 updates of a (256, 1024) buffer, each
reading and writing the whole buffer, become one (256 x 50) (50 x 1024) product (W4).

Likewise ``take_grad(g_i, like, i)`` (the adjoint of ``take(x, i, axis)``: ``g_i`` written into
zeros like ``x`` at slice ``i``), summed over distinct constant ``i`` covering at least half the
axis, is ``stack((g_0, .., g_n), axis)`` with zeros for the missing slices: one write of the
result instead of one per step (W4: the adjoint of the per-step input projections, 50 scatters
of a (50, 32, 1024) buffer).

The rules apply to a let-bound ``add`` whose operands have its (static tensor) type, through
nested ``add``s of that type used only there, to the terms used only there: ``nn.matmul`` with
the same transpose flags and dtypes, ``take_grad`` along the same axis; at least two of them.
Products are joined only when their operands hold under a quarter of the elements of the
(n - 1) M x N results they no longer write (small contracted dimensions: not the two K = 784
terms of a forward-mode product rule, which joining would copy for nothing). Terms bound in
another function than the sum stay (joined into a closure, a product could run once per
call). The terms' own bindings are left for dead-code elimination. Results differ from the
original only by the order of the float additions.

ShareWeightTranspose: ``nn.matmul(x, w, transpose_b=True)`` reads ``w`` as ``[N, K]``, which the
CPU schedule repacks on every call (a 1 MiB weight costs ~150 us per call whatever ``x``).
When two or more such products with few rows (at most 32, see :data:`MAX_ROWS`) of one
function take the same parameter or constant ``w``, the function transposes it once at its
start and the products read ``[K, N]``:

    fn (%w) { .. nn.matmul(%a, %w, transpose_b=True) .. nn.matmul(%b, %w, transpose_b=True) }
    => fn (%w) { let %wt = transpose(%w, axes=[1, 0]); .. nn.matmul(%a, %wt) .. nn.matmul(%b, %wt) }

The backward pass of an unrolled recurrence multiplies by the transposed recurrent weight at
every step (W4: 50 times).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from relay_ir.expr import Call, Constant, Expr, Function, Let, Op, Tuple, Var, type_of
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.op import get_opdef
from relay_ir.passes.pass_manager import FunctionPass, PassContext
from relay_ir.traversal import post_order, use_children
from relay_ir.ty import TensorType, TupleType


def _is_op(e: Expr | None, name: str) -> bool:
    return type(e) is Call and type(e.op) is Op and e.op.name == name


def _static(t: object) -> bool:
    return isinstance(t, TensorType) and all(type(d) is int for d in t.shape)


class _Combine:
    """The rewrite of one function: ``plan`` maps a root ``add`` call to its replacement."""

    def __init__(self, func: Function) -> None:
        self.env: dict[Var, Expr] = {}
        self.uses: dict[Var, int] = {}
        # NOTE: the function literal each let belongs to: a term is only taken into a sum of
        # the same function (moving a product into a closure could run it once per call)
        self.scope: dict[Var, int] = {}
        stack: list[tuple[Expr, int]] = [(func, id(func))]
        seen: set[int] = set()
        while stack:
            node, fn = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if type(node) is Function:
                fn = id(node)
            elif type(node) is Let:
                self.env[node.var] = node.value
                self.scope[node.var] = fn
            for c in use_children(node):
                if type(c) is Var:
                    self.uses[c] = self.uses.get(c, 0) + 1
                else:
                    stack.append((c, fn))
        self.plan: dict[Call, Call] = {}
        self._add = get_opdef("add")
        self._concat = get_opdef("concatenate")
        sums = [(v, e) for v, e in self.env.items() if _is_op(e, "add")]
        # NOTE: a sum absorbed by the sum that uses it is not a root: every add is walked once
        inner: set[Var] = set()
        for v, e in sums:
            t = self._flat_type(v, e)
            if t is not None:
                inner.update(a for a in e.args if self._inner_sum(a, t, v) is not None)
        for v, e in sums:
            if v not in inner:
                self._plan_root(v, e)

    def _flat_type(self, v: Var, e: Call) -> TensorType | None:
        """The type of the sum ``v = e`` if its operands have it (no broadcasting) and it is
        static, else None."""
        t = type_of(v) or type_of(e)
        if not _static(t) or any(type_of(a) != t for a in e.args):
            return None
        return t  # type: ignore[return-value]

    def _single_use(self, v: Expr, name: str, root: Var | None = None) -> Call | None:
        """The ``name`` call bound to ``v`` if ``v`` is used exactly once (and, given ``root``,
        bound in the same function as it)."""
        if type(v) is not Var or self.uses.get(v, 0) != 1:
            return None
        if root is not None and self.scope.get(v) != self.scope.get(root):
            return None
        e = self.env.get(v)
        return e if _is_op(e, name) else None  # type: ignore[return-value]

    def _inner_sum(self, a: Expr, t: TensorType, root: Var) -> Call | None:
        e = self._single_use(a, "add", root)
        if e is None or self._flat_type(a, e) != t:  # type: ignore[arg-type]
            return None
        return e

    def _plan_root(self, v: Var, root: Call) -> None:
        t = self._flat_type(v, root)
        if t is None:
            return
        terms: list[Expr] = []
        stack = list(reversed(root.args))
        while stack:
            a = stack.pop()
            inner = self._inner_sum(a, t, v)
            if inner is not None:
                stack.extend(reversed(inner.args))
            else:
                terms.append(a)
        groups: dict[tuple, list[tuple[Call, Expr]]] = {}   # key -> [(matmul, the term)]
        # take_grad terms by (axis, type of g): index along the axis -> (g, the term)
        slots: dict[tuple, dict[int, tuple[Expr, Expr]]] = {}
        rest: list[Expr] = []
        for a in terms:
            sl = self._slot(a, t, v)
            if sl is not None and sl[1] not in slots.get(sl[0], {}):
                slots.setdefault(sl[0], {})[sl[1]] = (sl[2], a)
                continue
            mm = self._single_use(a, "nn.matmul", v)
            ta, tb = (type_of(x) for x in mm.args) if mm is not None else (None, None)
            if mm is None or type_of(a) != t or not (
                    _static(ta) and _static(tb) and len(ta.shape) == 2  # type: ignore
                    and len(tb.shape) == 2):  # type: ignore[union-attr]
                rest.append(a)
                continue
            attrs = mm.attrs
            key = (bool(attrs.transpose_a), bool(attrs.transpose_b), attrs.out_dtype,
                   ta.dtype, tb.dtype)  # type: ignore[union-attr]
            groups.setdefault(key, []).append((mm, a))
        combined: list[Expr] = []
        for key, pairs in groups.items():
            trans_a, trans_b = key[0], key[1]
            mms = [mm for mm, _ in pairs]
            # NOTE: joining copies the operands (K_i x (M + N) elements); it pays when that is
            # well below the (n - 1) x M x N results no longer written (each add is fused into
            # its product's epilogue, so that is all a separate product costs more): measured,
            # a quarter of it. Many small-K products (rank-k updates) qualify; the two K = 784
            # terms of a forward-mode product rule do not (joined: W7 1.36 -> 3.3 ms).
            rows, cols = t.shape
            ks = [type_of(mm.args[0]).shape[0 if trans_a else 1] for mm in mms]  # type: ignore
            if len(mms) < 2 or 4 * sum(ks) * (rows + cols) > (len(mms) - 1) * rows * cols:
                rest.extend(term for _, term in pairs)
                continue
            a = self._join([mm.args[0] for mm in mms], 0 if trans_a else 1)
            b = self._join([mm.args[1] for mm in mms], 1 if trans_b else 0)
            combined.append(Call(mms[0].op, (a, b), mms[0].attrs, span=mms[0].span,
                                 checked_type_=t))
        for key, by_index in slots.items():
            # NOTE: a stack over a long axis with few slices given would be mostly zeros
            if len(by_index) >= 2 and 2 * len(by_index) >= t.shape[key[0]]:
                combined.append(self._stack(key, by_index, t))
            else:
                rest.extend(term for _, term in by_index.values())
        if not combined:
            return
        out = None
        for term in combined + rest:
            out = term if out is None else Call(self._add.op, (out, term),
                                                self._add.make_attrs(), span=root.span,
                                                checked_type_=t)
        self.plan[root] = out  # type: ignore[assignment]

    def _slot(self, a: Expr, t: TensorType, root: Var) -> tuple[tuple, int, Expr] | None:
        """``((axis, type of g), i, g)`` for a term ``take_grad(g, like, i)`` with a constant
        index ``i`` in range along an axis of the sum's type (the scatter of one slice)."""
        tg = self._single_use(a, "take_grad", root)
        if tg is None:
            return None
        g, like, idx = tg.args
        attrs = tg.attrs
        gt = type_of(g)
        if type(idx) is not Constant or idx.data.ndim != 0 or idx.data.dtype.kind not in "iu" \
                or attrs.axis is None or attrs.batch_dims != 0 or type_of(like) != t \
                or not _static(gt):
            return None
        axis = attrs.axis + len(t.shape) if attrs.axis < 0 else attrs.axis
        i = int(idx.data)
        if not 0 <= axis < len(t.shape) or not 0 <= i < t.shape[axis]:
            return None
        return (axis, gt), i, g

    def _stack(self, key: tuple, by_index: dict[int, tuple[Expr, Expr]], t: TensorType
               ) -> Expr:
        """``take_grad(g_i, like, i)`` summed over distinct ``i`` = the ``g_i`` stacked along
        the axis (zeros where no ``i``): one write of the result instead of one per term."""
        axis, gt = key
        zeros = get_opdef("zeros")
        zero = Call(zeros.op, (), zeros.make_attrs({"shape": list(gt.shape), "dtype": gt.dtype}),
                    checked_type_=gt)
        parts = [by_index[i][0] if i in by_index else zero for i in range(t.shape[axis])]
        st = get_opdef("stack")
        tup = Tuple(tuple(parts), checked_type_=TupleType(tuple(gt for _ in parts)))
        return Call(st.op, (tup,), st.make_attrs({"axis": axis}), checked_type_=t)

    def _join(self, xs: list[Expr], axis: int) -> Expr:
        ts = [type_of(x) for x in xs]
        shape = list(ts[0].shape)  # type: ignore[union-attr]
        shape[axis] = sum(u.shape[axis] for u in ts)  # type: ignore[union-attr]
        tup = Tuple(tuple(xs), checked_type_=TupleType(tuple(ts)))  # type: ignore[arg-type]
        return Call(self._concat.op, (tup,), self._concat.make_attrs({"axis": axis}),
                    checked_type_=TensorType(tuple(shape), ts[0].dtype))  # type: ignore


class _Rewrite(ExprMutator):
    def __init__(self, plan: dict[Call, Call]) -> None:
        super().__init__()
        self.plan = plan

    def visit_call(self, c: Call) -> Expr:
        new = self.plan.get(c)
        return new if new is not None else super().visit_call(c)


@dataclass(frozen=True)
class CombineSums(FunctionPass):
    """A sum of matmuls becomes one matmul of joined operands, a sum of slice scatters a stack.

    ``add(matmul(a1, b1), matmul(a2, b2)) => matmul(concat(a1, a2), concat(b1, b2))``;
    ``add(take_grad(g0, x, 0), take_grad(g1, x, 1)) => stack((g0, g1))``.
    A CPU cost decision: ``runtime.build`` applies it for llvm targets only
    (runtime/target_lowering.py), not ``passes.optimize``.
    """

    name: ClassVar[str] = "combine-sums"
    opt_level: ClassVar[int] = 2
    required: ClassVar[tuple[str, ...]] = ("infer-type",)  # NOTE: reads checked types

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        plan = _Combine(func).plan
        if not plan:
            return func
        return _Rewrite(plan).visit(func)  # type: ignore[return-value]


class _ShareTranspose(ExprMutator):
    def __init__(self, shared: dict[Expr, Var]) -> None:
        super().__init__()
        self.shared = shared
        self._mm = get_opdef("nn.matmul")

    def visit_call(self, c: Call) -> Expr:
        # NOTE: only the few-row products that made the weight shared read the transpose; a
        # product above MAX_ROWS keeps transpose_b (packing wins there, see MAX_ROWS)
        wt = self.shared.get(c.args[1]) if _is_op(c, "nn.matmul") and len(c.args) == 2 \
            and c.attrs.transpose_b and _few_rows(c) else None
        if wt is None:
            return super().visit_call(c)
        attrs = self._mm.make_attrs({**dict(c.attrs.items()), "transpose_b": False})
        return Call(c.op, (self.visit(c.args[0]), wt), attrs, c.type_args, span=c.span,
                    checked_type_=c.checked_type_)


@dataclass(frozen=True)
class ShareWeightTranspose(FunctionPass):
    """A weight read transposed by several few-row matmuls is transposed once.

    ``f(matmul(a, w, transpose_b=True), matmul(b, w, transpose_b=True))`` =>
    ``let wt = transpose(w); f(matmul(a, wt), matmul(b, wt))`` for a parameter or constant ``w``
    read so by at least two products of at most :data:`MAX_ROWS` rows; products with more rows
    keep ``transpose_b``. A CPU cost decision: ``runtime.build`` applies it for llvm targets
    only (runtime/target_lowering.py), not ``passes.optimize``.
    """

    name: ClassVar[str] = "share-weight-transpose"
    opt_level: ClassVar[int] = 2
    required: ClassVar[tuple[str, ...]] = ("infer-type",)  # NOTE: reads checked types

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        count: dict[Expr, int] = {}
        params = set(func.params)
        for n in post_order(func.body):
            if _is_op(n, "nn.matmul") and len(n.args) == 2 and n.attrs.transpose_b \
                    and _few_rows(n):
                w = n.args[1]
                if (w in params or type(w) is Constant) and _static(type_of(w)) \
                        and len(type_of(w).shape) == 2:  # type: ignore[union-attr]
                    count[w] = count.get(w, 0) + 1
        shared = [w for w, n in count.items() if n >= 2]
        if not shared:
            return func
        tr = get_opdef("transpose")
        names = {w: Var(f"{getattr(w, 'name_hint', 'w')}_t", _transposed(type_of(w)))
                 for w in shared}
        body = _ShareTranspose(names).visit(func.body)
        for w in reversed(shared):
            t = names[w].type_annotation
            body = Let(names[w], Call(tr.op, (w,), tr.make_attrs({"axes": [1, 0]}),
                                      checked_type_=t), body, span=func.span)
        return Function(func.params, body, func.ret_type, func.type_params, func.attrs,
                        span=func.span, checked_type_=func.checked_type_)


# NOTE: measured: with up to 32 rows (W4's B = 1 and 32) the per-call repacking dominates the
# product and sharing one transpose wins 2-5x; with 64 rows (W7's batch) the packed panels make
# the product itself faster and sharing lost 6%.
MAX_ROWS = 32


def _few_rows(mm: Call) -> bool:
    """Whether the product ``mm`` has at most :data:`MAX_ROWS` (static) rows."""
    ta = type_of(mm.args[0])
    if not _static(ta) or len(ta.shape) != 2:  # type: ignore[union-attr]
        return False
    rows = ta.shape[1] if mm.attrs.transpose_a else ta.shape[0]  # type: ignore[union-attr]
    return rows <= MAX_ROWS


def _transposed(t: object) -> TensorType:
    assert isinstance(t, TensorType)
    return TensorType((t.shape[1], t.shape[0]), t.dtype)
