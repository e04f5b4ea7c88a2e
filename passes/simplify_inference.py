"""SimplifyInference: batch norm and dropout of an inference program with constant weights.

Rules (``s = gamma / sqrt(var + eps)`` and ``t = beta - mean * s`` per channel, computed in
float64 at compile time, then in the data's dtype)::

    batch_norm(x, gamma, beta, mean, var).0       =>  add(multiply(x, S), T)
    batch_norm(x, gamma, beta, mean, var).1 / .2  =>  mean / var
    batch_norm(conv2d(y, W), ...).0               =>  add(conv2d(y, W * s), T)   (FoldScaleAxis)
    batch_norm(dense(y, W), ...).0                =>  add(dense(y, W * s), T)
    dropout(x).0                                  =>  x
    dropout(x).1                                  =>  ones_like(x)

where ``S`` and ``T`` are ``s`` and ``t`` shaped to broadcast along the batch norm's axis. The
convolution (``NCHW`` data, ``OIHW`` kernel) or dense product must be used only by the batch
norm and its weight must be a constant. Every new value is a constant, so no weight transform
is left to run: ``runtime.build(params=...)`` binds the weights first.

Values: results differ from the original only by float rounding (one multiply and add instead
of a subtract, divide, multiply and add; the scale applied to the weights before the sum
instead of after it), never in which elements are inf or nan, nor in the sign of a zero. The
pass checks that at compile time and leaves a batch norm as it is otherwise:

* ``s`` and ``t`` must be finite and ``mean * s`` non-zero where ``mean`` is (a variance of
  ``-eps``, an infinite weight or an underflow would turn ``x - mean`` into ``inf - inf``);
* where ``mean`` is zero, ``t`` is ``beta`` itself (``-0.0`` without ``center``: the identity
  of addition keeps ``-0.0`` results), so ``x * s + t`` has the zeros of ``x * s + beta``;
  without ``center`` and with a non-zero mean the rewrite is ``multiply(subtract(x, M), S)``;
* the scale goes into the weights only when the shift ``t`` has no ``-0.0`` (a sum whose terms
  change sign could otherwise turn ``-0.0`` into ``+0.0``) and the scaled weights are finite
  and zero exactly where the weights are.

One caveat is documented (docs/passes.md): near the float range's limit (``|x| ~ 3e38``) the
rounding of the folded form can overflow where the original did not, or the reverse.

This is the inference form of Relay's batch norm (the moving statistics are inputs), so the
rewrite applies to any program; ``runtime.build`` runs it in its lowering for every target
(``runtime/target_lowering.py``). ``passes.optimize`` does not: it keeps values bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from relay_ir.expr import Call, Constant, Expr, Function, Let, Op, TupleGetItem, Var, type_of
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.op._rules import make_call
from relay_ir.passes.pass_manager import FunctionPass, PassContext
from relay_ir.traversal import post_order, use_children
from relay_ir.ty import TensorType

_FLOATS = ("float16", "float32", "float64")


def _is_op(e: Expr | None, name: str) -> bool:
    return type(e) is Call and type(e.op) is Op and e.op.name == name


def _const(a: np.ndarray) -> Constant:
    a = np.ascontiguousarray(a)
    return Constant(a, checked_type_=TensorType(tuple(a.shape), str(a.dtype)))


@dataclass
class _BatchNorm:
    """How one batch norm binding is rewritten."""

    x: Expr
    scale: np.ndarray            # S: shaped to broadcast along the axis
    shift: np.ndarray | None     # T (None: no add; every element would be -0.0)
    center: np.ndarray | None    # M for the (x - M) * S form, else None
    mean: Constant
    var: Constant
    into: Var | None = None      # the producer whose weights take the scale


class _Plan:
    """What to rewrite in one function: batch norms, dropouts and the producers they absorb."""

    def __init__(self, func: Function) -> None:
        self.env: dict[Var, Expr] = {}
        uses: dict[Var, int] = {}
        projections: dict[Var, int] = {}
        for node in post_order(func):
            if type(node) is Let:
                self.env[node.var] = node.value
            if type(node) is TupleGetItem and type(node.tuple_value) is Var:
                projections[node.tuple_value] = projections.get(node.tuple_value, 0) + 1
            for c in use_children(node):
                if type(c) is Var:
                    uses[c] = uses.get(c, 0) + 1
        self.uses = uses
        self.bn: dict[Var, _BatchNorm] = {}
        self.dropout: set[Var] = set()
        self.scaled: dict[Var, np.ndarray] = {}   # producer var -> its new constant weight
        for v, e in self.env.items():
            # NOTE: only a tuple used through projections is replaced (a projection each)
            if uses.get(v, 0) != projections.get(v, 0):
                continue
            if _is_op(e, "nn.dropout"):
                self.dropout.add(v)
            elif _is_op(e, "nn.batch_norm"):
                bn = self._batch_norm(e)  # type: ignore[arg-type]
                if bn is not None:
                    self.bn[v] = bn

    def _batch_norm(self, call: Call) -> _BatchNorm | None:
        x, *rest = call.args
        tx = type_of(x)
        if not isinstance(tx, TensorType) or tx.dtype not in _FLOATS or not tx.shape:
            return None
        if any(type(a) is not Constant for a in rest):
            return None
        g, b, m, v = (np.asarray(a.data, np.float64) for a in rest)  # type: ignore[union-attr]
        at = call.attrs
        nd = len(tx.shape)
        axis = at.axis + nd if at.axis < 0 else at.axis
        dt = np.dtype(tx.dtype)
        with np.errstate(all="ignore"):
            s64 = (g if at.scale else 1.0) / np.sqrt(v + float(at.epsilon))
            s = s64.astype(dt)
            ms = (m * s.astype(np.float64)).astype(dt)
            zero_mean = m == 0
            t = np.where(zero_mean, b.astype(dt) if at.center else dt.type(-0.0),
                         ((b if at.center else 0.0) - m * s64).astype(dt)).astype(dt)
        if not (np.isfinite(s).all() and np.isfinite(t).all() and np.isfinite(ms).all()):
            return None
        if (ms[~zero_mean] == 0).any():
            return None
        shape = (-1,) + (1,) * (nd - 1 - axis)
        mean, var = rest[2], rest[3]
        if not at.center and not zero_mean.all():
            return _BatchNorm(x, s.reshape(shape), None, m.astype(dt).reshape(shape),
                              mean, var)  # type: ignore[arg-type]
        neg_zero = (t == 0) & np.signbit(t)
        shift = None if neg_zero.all() else t.reshape(shape)
        bn = _BatchNorm(x, s.reshape(shape), shift, None, mean, var)  # type: ignore[arg-type]
        if shift is not None and not neg_zero.any():
            bn.into = self._absorb(x, s, axis, nd)
        return bn

    def _absorb(self, x: Expr, s: np.ndarray, axis: int, nd: int) -> Var | None:
        """The producer ``x`` (a conv2d or dense with a constant weight, used only here) whose
        weight takes the per-channel scale ``s``, with its new weight planned."""
        if type(x) is not Var or self.uses.get(x, 0) != 1 or x in self.scaled:
            return None
        e = self.env.get(x)
        if type(e) is not Call or len(e.args) < 2 or type(e.args[1]) is not Constant:
            return None
        if not (_is_op(e, "nn.conv2d") or _is_op(e, "nn.dense")):
            return None
        w = e.args[1].data
        if w.dtype != s.dtype or e.attrs.out_dtype not in ("", str(s.dtype)):
            return None
        if _is_op(e, "nn.conv2d"):
            at = e.attrs
            if (at.data_layout != "NCHW" or at.kernel_layout != "OIHW"
                    or at.out_layout not in ("", "NCHW") or axis != 1 or w.ndim != 4):
                return None
            ws = w * s.reshape(-1, 1, 1, 1)
        elif _is_op(e, "nn.dense"):
            if axis != nd - 1 or w.ndim != 2:
                return None
            ws = w * s.reshape(-1, 1)
        else:
            return None
        if not np.isfinite(ws).all() or ((ws == 0) != (w == 0)).any():
            return None
        self.scaled[x] = ws
        return x


class _Rewrite(ExprMutator):
    def __init__(self, plan: _Plan) -> None:
        super().__init__()
        self.plan = plan
        self.out: dict[Var, Expr] = {}     # batch norm / dropout var -> its field 0 (an atom)

    def visit_binding(self, var: Var, value: Expr) -> Any:
        # NOTE: a generator (sub-visits are yielded): nesting costs no Python recursion
        plan = self.plan
        if var in plan.scaled:
            c = value
            assert type(c) is Call
            args = ((yield c.args[0]), _const(plan.scaled[var]))
            return var, Call(c.op, args, c.attrs, c.type_args, span=c.span)
        if var in plan.dropout:
            self.out[var] = yield value.args[0]  # type: ignore[attr-defined]
            return None
        bn = plan.bn.get(var)
        if bn is not None:
            x = yield bn.x
            if bn.into is not None:
                e: Expr = make_call("add", x, _const(bn.shift), span=value.span)  # type: ignore
            elif bn.center is not None:
                e = make_call("multiply", make_call("subtract", x, _const(bn.center)),
                              _const(bn.scale), span=value.span)
            else:
                e = make_call("multiply", x, _const(bn.scale), span=value.span)
                if bn.shift is not None:
                    e = make_call("add", e, _const(bn.shift), span=value.span)
            nv = Var(var.name_hint, None, span=var.span)
            self.out[var] = nv
            return nv, e
        if type(value) is TupleGetItem and value.index == 0 and value.tuple_value in self.out:
            self.memo[var] = self.out[value.tuple_value]  # type: ignore[index]
            return None
        return (yield var), (yield value)

    def visit_tuple_get_item(self, t: TupleGetItem) -> Expr:
        v = t.tuple_value
        if type(v) is Var and v in self.out:
            if t.index == 0:
                return self.out[v]
            if v in self.plan.dropout:
                return make_call("ones_like", self.out[v], span=t.span)
            bn = self.plan.bn[v]
            return bn.mean if t.index == 1 else bn.var
        return super().visit_tuple_get_item(t)


@dataclass(frozen=True)
class SimplifyInference(FunctionPass):
    """Batch norm with constant statistics to a scale and shift, dropout to the identity.

    Rules (the module docstring has all of them and the value checks)::

        batch_norm(x, gamma, beta, mean, var).0  =>  add(multiply(x, S), T)
        batch_norm(conv2d(y, W), ...).0          =>  add(conv2d(y, W * s), T)
        dropout(x).0                             =>  x

    Reads let-bound (A-normal form), typed programs."""

    name: ClassVar[str] = "simplify-inference"
    opt_level: ClassVar[int] = 2
    required: ClassVar[tuple[str, ...]] = ("to-anf", "infer-type")  # NOTE: reads let bindings

    def function_transformer(self, mod: IRModule, ctx: PassContext
                             ) -> Callable[[Function], Function]:
        def run(fn: Function) -> Function:
            plan = _Plan(fn)
            if not (plan.bn or plan.dropout):
                return fn
            return _Rewrite(plan).visit(fn)  # type: ignore[return-value]
        return run


def simplify_inference(mod: IRModule) -> Any:
    """:class:`SimplifyInference` on ``mod`` (in A-normal form, typed), then InferType."""
    from relay_ir.passes import InferType
    return InferType()(SimplifyInference()(mod))
