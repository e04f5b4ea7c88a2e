"""Batching rules (``passes.vmap``): one per operator, in one table keyed by operator name.

A batching rule has the signature ``rule(call, args, in_dims, ctx) -> (expr, out_dim)``
(JAX's ``batching.primitive_batchers``):

* ``call`` -- the original, *unbatched* call (typed: ``call.args[i].checked_type_`` and
  ``call.checked_type_`` are the per-instance types);
* ``args`` -- the batched arguments (expressions of the new program);
* ``in_dims`` -- per argument, the axis of ``args[i]`` that holds the batch, or ``None`` when the
  argument is the same for every instance (unbatched); a tuple of those for a tuple argument;
* ``ctx`` -- a :class:`BatchContext`: the batch size and helpers (materialize an unbatched
  value, broadcast).

It returns the batched result and the axis of its batch (``None``: unbatched; a tuple for a tuple
result). The rule is only called when at least one argument is batched (a call whose arguments
are all unbatched is kept as it is). Rules build only registry operators, so the batched program
type-checks, lowers and differentiates like any other.

The families (each operator gets one in ``_TABLE`` at the bottom, or an explicit
``not batchable`` reason; ``tests/test_vmap.py`` checks that none is missing):

* **elementwise** (``exp``, ``cast``, ``clip``...): the same call, same batch axis;
* **broadcast** (``add``, ``where``...): batch moved to axis 0 on batched operands, and a batched
  operand of lower rank than the result gets size-1 axes after its batch axis, so numpy
  broadcasting still lines dimensions up from the right; unbatched operands stay as they are;
* **reductions** (``sum``, ``argmax``...): batch to 0, reduced axes shifted by one (``axis``
  None becomes the explicit list of every instance axis);
* **axis attributes** (``softmax``, ``concatenate``, ``split``, ``cumsum``, ``transpose``...):
  batch to 0, the ``axis``-like attributes shifted;
* **reshape-like** (``reshape``, ``squeeze``, ``nn.batch_flatten``, ``reshape_like``...): a
  ``reshape`` to ``(-1,) + per-instance output shape`` (needs a static output shape);
* **matrix products**: ``nn.dense`` / ``nn.matmul`` with an unbatched weight take the batch as
  one more leading row dimension (one bigger GEMM); with a batched weight they become
  ``nn.batch_matmul``; ``nn.batch_matmul`` folds the batch into its own batch dimension;
* **per-sample operators** (``nn.conv2d``, pooling, ``image.resize2d``, ``nn.instance_norm``...)
  with unbatched weights: the batch folded into ``N`` (``(B, N, ...) -> (B*N, ...)``) and
  unfolded after;
* **einsum**: a fresh label for the batch in front of the batched operands' and the output's;
* **batched convolution weights**: one grouped convolution (the batch moved into the channels);
* **unrolled** (the fallback of every family for the argument combinations it does not cover,
  and the whole rule of rare operators such as ``scatter_nd``): one call per
  instance on ``take(x, i, axis=d)`` and a ``stack`` of the results. Correct for any batch
  size known at compile time; a symbolic batch size makes it an error (``VmapError``);
* **not batchable**: operators whose output shape depends on values (``dyn.*``) and host-only
  operators.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from relay_ir.errors import DiagnosticError
from relay_ir.expr import Call, Expr, Tuple, TupleGetItem, const
from relay_ir.ty import Dim, TensorType, TupleType, Type

Rule = Callable[..., tuple[Expr, Any]]


class BatchError(DiagnosticError):
    """A call cannot be batched (no rule for these arguments, not batchable, bad shapes)."""

    kind = "vmap error"


def _op(name: str, *args: Expr, **attrs: Any) -> Expr:
    from relay_ir.op._rules import make_call
    return make_call(name, *args, **attrs)


def _prod(shape: Sequence[Dim]) -> int:
    n = 1
    for d in shape:
        n *= int(d)  # type: ignore[arg-type]
    return n


def _static(shape: Sequence[Dim]) -> bool:
    return all(isinstance(d, int) for d in shape)


def ttype(e: Expr) -> TensorType:
    """The (unbatched) tensor type of an argument of the original call."""
    t = e.checked_type_
    if not isinstance(t, TensorType):
        raise BatchError(f"expected a tensor, found {t}")
    return t


class BatchContext:
    """What a rule may need beyond its arguments: the batch size and a few helpers.

    ``size`` is the batch size, an int or a symbolic dimension (``ShapeVar``). ``ref`` (an
    expression batched on axis ``ref_dim``, of per-instance type ``ref_type``) is any batched
    value of the program, used to make a batch-shaped mask when ``size`` is symbolic.
    """

    def __init__(self, size: Dim, ref: tuple[Expr, int, TensorType] | None = None) -> None:
        self.size = size
        self.ref = ref
        self._mask: Expr | None = None

    # ------------------------------------------------------------------ moving the batch axis
    @staticmethod
    def to_front(x: Expr, d: int, rank: int) -> Expr:
        """``x`` (batched on axis ``d``, ``rank`` per-instance axes) with its batch on axis 0."""
        if d == 0:
            return x
        axes = [d] + [i for i in range(rank + 1) if i != d]
        return _op("transpose", x, axes=axes)

    def mask(self) -> Expr:
        """A bool tensor of shape ``(size,)`` (its values do not matter)."""
        if isinstance(self.size, int):
            return _op("zeros", shape=(self.size,), dtype="bool")
        if self._mask is None:
            if self.ref is None:
                raise BatchError("a symbolic batch size needs at least one batched argument")
            x, d, t = self.ref
            m = self.to_front(x, d, t.ndim)
            for _ in range(t.ndim):
                m = _op("take", m, const(0, "int32"), axis=1)
            self._mask = _op("cast", m, dtype="bool")
        return self._mask

    def materialize(self, x: Expr, t: TensorType) -> Expr:
        """An unbatched ``x`` of type ``t`` as a batched value (batch on axis 0), bit-exact:
        ``broadcast_to`` when every size is static, else ``where(mask, x, x)``."""
        if isinstance(self.size, int) and _static(t.shape):
            return _op("broadcast_to", _op("expand_dims", x, axis=0),
                       shape=(self.size,) + tuple(t.shape))
        m = self.mask()
        if t.ndim:
            m = _op("expand_dims", m, axis=1, num_newaxis=t.ndim)
        return _op("where", m, x, x)

    def front(self, x: Expr, d: int | None, t: TensorType) -> Expr:
        """``x`` batched on axis 0 whatever ``d`` was (materialized when unbatched)."""
        return self.materialize(x, t) if d is None else self.to_front(x, d, t.ndim)

    def broadcast(self, x: Expr, shape: Sequence[Dim]) -> Expr:
        """``x`` (batched on axis 0, per-instance shape broadcastable to ``shape``) broadcast to
        ``(size,) + shape`` (bit-exact)."""
        if isinstance(self.size, int) and _static(shape):
            return _op("broadcast_to", x, shape=(self.size,) + tuple(shape))
        if not _static(shape):
            raise BatchError("cannot broadcast to a shape with unknown dimensions "
                             f"{tuple(shape)} in a batched program")
        z = _op("zeros", shape=tuple(shape), dtype="bool")
        return _op("where", z, x, x)


# ============================================================================= helpers
def _rank(call: Call, i: int) -> int:
    return ttype(call.args[i]).ndim


def _shift(axis: int, ndim: int) -> int:
    """A per-instance axis (possibly negative) as the axis of the batched value (batch at 0)."""
    from relay_ir.op._rules import norm_axis
    return norm_axis(axis, ndim) + 1


def _with_attrs(call: Call, **changes: Any) -> dict[str, Any]:
    d = dict(call.attrs)
    d.update(changes)
    return d


def _recall(call: Call, args: Sequence[Expr], **changes: Any) -> Expr:
    from relay_ir.op import get_opdef
    od = get_opdef(call.op.name)  # type: ignore[union-attr]
    return Call(od.op, tuple(args), od.make_attrs(_with_attrs(call, **changes)))


def _take_instance(x: Expr, d: Any, i: int, t: Type) -> Expr:
    """Instance ``i`` of a (possibly tuple) batched value."""
    if d is None:
        return x
    if isinstance(d, tuple):
        assert isinstance(t, TupleType)
        return Tuple(tuple(_take_instance(TupleGetItem(x, k), dk, i, tk)
                           for k, (dk, tk) in enumerate(zip(d, t.fields))))
    return _op("take", x, const(i, "int32"), axis=d)


def unrolled(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
             ctx: BatchContext) -> tuple[Expr, Any]:
    """The fallback: ``stack([op(instance_i(args)) for i in range(size)])`` (static size)."""
    name = call.op.name  # type: ignore[union-attr]
    if not isinstance(ctx.size, int):
        raise BatchError(f"`{name}` with these batched arguments has no batching rule for a "
                         "symbolic batch size (it is batched by unrolling: give vmap a static "
                         "batch_size)")
    outs = []
    for i in range(ctx.size):
        inst = [_take_instance(a, d, i, c.checked_type_)
                for a, d, c in zip(args, in_dims, call.args)]
        outs.append(Call(call.op, tuple(inst), call.attrs, call.type_args))
    rt = call.checked_type_
    if isinstance(rt, TupleType):
        fields = tuple(_op("stack", Tuple(tuple(TupleGetItem(o, k) for o in outs)), axis=0)
                       for k in range(len(rt.fields)))
        return Tuple(fields), tuple(0 for _ in fields)
    return _op("stack", Tuple(tuple(outs)), axis=0), 0


def _all_tensor_args(call: Call, in_dims: Sequence[Any]) -> bool:
    return all(not isinstance(d, tuple) for d in in_dims) and all(
        isinstance(a.checked_type_, TensorType) for a in call.args)


# ============================================================================= families
def elementwise(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                ctx: BatchContext) -> tuple[Expr, Any]:
    """``op(x)`` with the same batch axis (one-input, shape-preserving operators)."""
    return _recall(call, args), in_dims[0]


def broadcasting(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                 ctx: BatchContext) -> tuple[Expr, Any]:
    """``op(a, b, ...)`` with numpy broadcasting: batched operands get their batch on axis 0
    and size-1 axes up to the result's rank; unbatched operands stay."""
    out_rank = ttype(call).ndim if isinstance(call.checked_type_, TensorType) else 0
    new = []
    for a, d, c in zip(args, in_dims, call.args):
        r = ttype(c).ndim
        if d is None:
            new.append(a)
            continue
        a = ctx.to_front(a, d, r)
        if r < out_rank:
            a = _op("expand_dims", a, axis=1, num_newaxis=out_rank - r)
        new.append(a)
    return _recall(call, new), 0


def ttype_call(call: Call) -> TensorType:
    t = call.checked_type_
    assert isinstance(t, TensorType)
    return t


def reduction(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
              ctx: BatchContext) -> tuple[Expr, Any]:
    """``sum(x, axis, keepdims, exclude)`` and kin: batch to 0, the reduced axes shifted."""
    from relay_ir.op._rules import reduce_axes
    r = _rank(call, 0)
    axes = reduce_axes(r, call.attrs.axis, call.attrs.exclude)
    new = [ctx.front(args[0], in_dims[0], ttype(call.args[0]))]
    for a, d, c in zip(args[1:], in_dims[1:], call.args[1:]):  # variance's mean
        new.append(ctx.front(a, d, ttype(c)))
    return _recall(call, new, axis=tuple(a + 1 for a in axes), exclude=False), 0


def axis_attr(*names: str, nargs: int | None = None, out_tuple: bool = False,
              extra: int = 0) -> Rule:
    """Batch every argument on axis 0 (materializing unbatched ones) and shift the ``axis``-like
    attributes ``names``. ``extra`` widens the axis range (``stack`` inserts an axis)."""
    def rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
             ctx: BatchContext) -> tuple[Expr, Any]:
        from relay_ir.op._rules import norm_axis
        n = len(args) if nargs is None else nargs
        if any(d is not None for d in in_dims[n:]) or not _all_tensor_args(call, in_dims):
            return unrolled(call, args, in_dims, ctx)
        r = _rank(call, 0)
        new = [ctx.front(a, d, ttype(c)) for a, d, c in zip(args[:n], in_dims, call.args)]
        new += list(args[n:])
        changes: dict[str, Any] = {}
        for nm in names:
            v = call.attrs[nm]
            if v is None:
                continue
            if isinstance(v, tuple):
                changes[nm] = tuple(norm_axis(a, r, extra=extra) + 1 for a in v)
            else:
                changes[nm] = norm_axis(v, r, extra=extra) + 1
        out = _recall(call, new, **changes)
        if out_tuple:
            rt = call.checked_type_
            assert isinstance(rt, TupleType)
            return out, tuple(0 for _ in rt.fields)
        return out, 0
    rule.__doc__ = f"Batch on axis 0, attributes {names} shifted by one."
    return rule


def _tuple_fields_front(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                        ctx: BatchContext) -> Expr:
    """The tuple argument of ``concatenate``/``stack``/``einsum`` with every field batched on
    axis 0."""
    t = call.args[0].checked_type_
    assert isinstance(t, TupleType)
    dims = in_dims[0] if isinstance(in_dims[0], tuple) else (in_dims[0],) * len(t.fields)
    src = args[0]
    fields = []
    for k, (ft, d) in enumerate(zip(t.fields, dims)):
        f = src.fields[k] if isinstance(src, Tuple) else TupleGetItem(src, k)
        fields.append(ctx.front(f, d, ft))  # type: ignore[arg-type]
    return Tuple(tuple(fields))


def tuple_axis(extra: int) -> Rule:
    """``concatenate(fields, axis)`` (``extra=0``) / ``stack(fields, axis)`` (``extra=1``)."""
    def rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
             ctx: BatchContext) -> tuple[Expr, Any]:
        from relay_ir.op._rules import norm_axis
        t = call.args[0].checked_type_
        assert isinstance(t, TupleType)
        r = t.fields[0].ndim  # type: ignore[attr-defined]
        tup = _tuple_fields_front(call, args, in_dims, ctx)
        return _recall(call, [tup], axis=norm_axis(call.attrs.axis, r, extra=extra) + 1), 0
    rule.__doc__ = "Every field batched on axis 0, ``axis`` shifted by one."
    return rule


def reshape_to_out(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                   ctx: BatchContext) -> tuple[Expr, Any]:
    """A reshape of the (batched) first argument: ``reshape(x, (-1,) + out_shape)`` (batch on
    0). The other arguments only give shapes (``reshape_like``: see :func:`like_rule`)."""
    out = ttype_call(call)
    if not _static(out.shape):
        return unrolled(call, args, in_dims, ctx)
    x = ctx.to_front(args[0], in_dims[0], _rank(call, 0))
    return _op("reshape", x, newshape=(-1,) + tuple(out.shape), allowzero=True), 0


def transpose_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                   ctx: BatchContext) -> tuple[Expr, Any]:
    """``transpose(x, axes)``: ``(0,) + shifted axes`` (None: reversed)."""
    r = _rank(call, 0)
    axes = call.attrs.axes
    axes = list(range(r - 1, -1, -1)) if axes is None else [a % r if r else a for a in axes]
    x = ctx.to_front(args[0], in_dims[0], r)
    return _recall(call, [x], axes=(0,) + tuple(a + 1 for a in axes)), 0


def squeeze_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                 ctx: BatchContext) -> tuple[Expr, Any]:
    """``squeeze(x, axis)``: the axes made explicit and shifted (never the batch axis)."""
    t = ttype(call.args[0])
    axis = call.attrs.axis
    if axis is None:
        axes = [i for i, d in enumerate(t.shape) if d == 1]
    else:
        axes = [a % t.ndim for a in axis]
    if not axes:
        return args[0], in_dims[0]
    x = ctx.to_front(args[0], in_dims[0], t.ndim)
    return _recall(call, [x], axis=tuple(a + 1 for a in axes)), 0


def expand_dims_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                     ctx: BatchContext) -> tuple[Expr, Any]:
    """``expand_dims(x, axis, n)``: axis normalized against rank + 1, shifted."""
    from relay_ir.op._rules import norm_axis
    r = _rank(call, 0)
    x = ctx.to_front(args[0], in_dims[0], r)
    return _recall(call, [x], axis=norm_axis(call.attrs.axis, r, extra=1) + 1), 0


def _front_at_rank(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                   ctx: BatchContext) -> Expr:
    """The first argument with its batch axis at 0 and size-1 axes after it up to the rank of
    the call's (per-instance) result."""
    out = ttype_call(call)
    r = _rank(call, 0)
    x = ctx.to_front(args[0], in_dims[0], r)
    if r < out.ndim:
        x = _op("expand_dims", x, axis=1, num_newaxis=out.ndim - r)
    return x


def broadcast_to_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                      ctx: BatchContext) -> tuple[Expr, Any]:
    """``broadcast_to(x, shape)``: batch to 0, size-1 axes up to the rank, broadcast."""
    return ctx.broadcast(_front_at_rank(call, args, in_dims, ctx), ttype_call(call).shape), 0


def _shape_giver_unbatched(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                           ctx: BatchContext, shape_args: Sequence[int]) -> Expr | None:
    """When only the arguments at ``shape_args`` (which give only shapes or dtypes) are
    batched, the call on a per-instance slice of them: the result is the same for all."""
    if any(d is not None for i, d in enumerate(in_dims) if i not in shape_args):
        return None
    new = list(args)
    for i in shape_args:
        if in_dims[i] is not None:
            new[i] = _op("take", args[i], const(0, "int32"), axis=in_dims[i])
    return Call(call.op, tuple(new), call.attrs, call.type_args)


def like_rule(shape_args: Sequence[int], main: Rule) -> Rule:
    """``main``, except that a call where only ``shape_args`` are batched stays unbatched."""
    def rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
             ctx: BatchContext) -> tuple[Expr, Any]:
        e = _shape_giver_unbatched(call, args, in_dims, ctx, shape_args)
        if e is not None:
            return e, None
        return main(call, args, in_dims, ctx)
    rule.__doc__ = main.__doc__
    return rule


def _bt_like(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
             ctx: BatchContext) -> tuple[Expr, Any]:
    if in_dims[1] is None:
        return broadcast_to_rule(call, args, in_dims, ctx)
    x = _front_at_rank(call, args, in_dims, ctx)
    return _op("broadcast_to_like", x,
               ctx.to_front(args[1], in_dims[1], ttype_call(call).ndim)), 0


def collapse_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                  ctx: BatchContext) -> tuple[Expr, Any]:
    """``collapse_sum_like(x, like)`` / ``collapse_sum_to(x, shape)``: sums over the leading
    axes the target lacks and (kept) over its size-1 axes, batch on 0."""
    src = ttype(call.args[0])
    dst = ttype_call(call)
    x = ctx.to_front(args[0], in_dims[0], src.ndim)
    lead = src.ndim - dst.ndim
    if lead:
        x = _op("sum", x, axis=tuple(range(1, lead + 1)))
    ones = tuple(i + 1 for i, (a, b) in enumerate(zip(src.shape[lead:], dst.shape))
                 if b == 1 and a != 1)
    if ones:
        x = _op("sum", x, axis=ones, keepdims=True)
    if not lead and not ones:
        x = _op("copy", x)
    return x, 0


def cast_like_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                   ctx: BatchContext) -> tuple[Expr, Any]:
    """``cast_like(x, like)``: a ``cast`` to like's dtype, batch axis of ``x``."""
    return _op("cast", args[0], dtype=ttype_call(call).dtype), in_dims[0]


def full_like_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                   ctx: BatchContext) -> tuple[Expr, Any]:
    """``full_like(like, value)``: ``full``'s value broadcast over like's per-instance shape."""
    out = ttype_call(call)
    if in_dims[1] is None:
        return Call(call.op, (_op("take", args[0], const(0, "int32"), axis=in_dims[0]),
                              args[1]), call.attrs, call.type_args), None
    v = _op("cast", ctx.to_front(args[1], in_dims[1], 0), dtype=out.dtype)
    if out.ndim:
        v = _op("expand_dims", v, axis=1, num_newaxis=out.ndim)
    return ctx.broadcast(v, out.shape), 0


def full_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
              ctx: BatchContext) -> tuple[Expr, Any]:
    """``full(value, shape)`` with a batched scalar value: broadcast over the shape."""
    out = ttype_call(call)
    v = _op("cast", ctx.to_front(args[0], in_dims[0], 0), dtype=out.dtype)
    if out.ndim:
        v = _op("expand_dims", v, axis=1, num_newaxis=out.ndim)
    return ctx.broadcast(v, out.shape), 0


def bias_add_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                  ctx: BatchContext) -> tuple[Expr, Any]:
    """``nn.bias_add(x, b, axis)``: unbatched bias -> axis shifted; a batched bias becomes an
    ``add`` with the bias laid out as ``(B, 1.., C, 1..)``."""
    from relay_ir.op._rules import norm_axis
    xt = ttype(call.args[0])
    ax = norm_axis(call.attrs.axis, xt.ndim)
    x = ctx.front(args[0], in_dims[0], xt)
    if in_dims[1] is None:
        return _recall(call, [x, args[1]], axis=ax + 1), 0
    b = ctx.to_front(args[1], in_dims[1], 1)
    if ax:
        b = _op("expand_dims", b, axis=1, num_newaxis=ax)
    if xt.ndim - 1 - ax:
        b = _op("expand_dims", b, axis=ax + 2, num_newaxis=xt.ndim - 1 - ax)
    return _op("add", x, b), 0


def first_arg_axis(*names: str, weights_unbatched: bool = True) -> Rule:
    """Only the first argument batched (weights unbatched, or unrolled): its batch to 0, the
    attributes ``names`` shifted (``nn.prelu``, ``nn.layer_norm``, ``nn.pad``...)."""
    shifted = axis_attr(*names, nargs=1)

    def rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
             ctx: BatchContext) -> tuple[Expr, Any]:
        if any(d is not None for d in in_dims[1:]) or in_dims[0] is None:
            return unrolled(call, args, in_dims, ctx)
        return shifted(call, args, in_dims, ctx)
    rule.__doc__ = f"Data batched on 0, attributes {names} shifted; batched weights unrolled."
    return rule


def pad_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
             ctx: BatchContext) -> tuple[Expr, Any]:
    """``nn.pad(x, value, pad_width)``: no padding on the batch axis."""
    if in_dims[0] is None or in_dims[1] is not None:
        return unrolled(call, args, in_dims, ctx)
    x = ctx.to_front(args[0], in_dims[0], _rank(call, 0))
    pw = ((0, 0),) + tuple(tuple(p) for p in call.attrs.pad_width)
    return _recall(call, [x, args[1]], pad_width=pw), 0


def tile_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
              ctx: BatchContext) -> tuple[Expr, Any]:
    """``tile(x, reps)``: reps padded to the rank (leading ones), then ``(1,) + reps``."""
    r = _rank(call, 0)
    reps = tuple(call.attrs.reps)
    out_r = max(r, len(reps))
    x = ctx.to_front(args[0], in_dims[0], r)
    if r < out_r:
        x = _op("expand_dims", x, axis=1, num_newaxis=out_r - r)
    reps = (1,) * (out_r - len(reps)) + reps
    return _recall(call, [x], reps=(1,) + reps), 0


def strided_slice_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                       ctx: BatchContext) -> tuple[Expr, Any]:
    """``strided_slice``: explicit ``axes`` (the first ``len(begin)`` when None), shifted."""
    if in_dims[0] is None or any(d is not None for d in in_dims[1:]):
        return unrolled(call, args, in_dims, ctx)
    r = _rank(call, 0)
    a = call.attrs
    axes = a.axes
    if axes is None:
        axes = tuple(range(len(a.begin)))
    axes = tuple(x % r for x in axes)
    x = ctx.to_front(args[0], in_dims[0], r)
    return _recall(call, [x] + list(args[1:]), axes=tuple(i + 1 for i in axes)), 0


def strided_slice_grad_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                            ctx: BatchContext) -> tuple[Expr, Any]:
    """``strided_slice_grad(g, like)`` (``like`` gives only a shape): both batched on 0, the
    slice's axes explicit and shifted, as :func:`strided_slice_rule`."""
    gt, lt = ttype(call.args[0]), ttype(call.args[1])
    a = call.attrs
    axes = tuple(range(len(a.begin))) if a.axes is None else a.axes
    axes = tuple(x % lt.ndim for x in axes)
    g = ctx.front(args[0], in_dims[0], gt)
    like = ctx.front(args[1], in_dims[1], lt)
    return _recall(call, [g, like], axes=tuple(i + 1 for i in axes)), 0


def take_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
              ctx: BatchContext) -> tuple[Expr, Any]:
    """``take(x, idx, axis, batch_dims)``: x batched -> axis + 1 (and batch_dims + 1 when the
    indices are batched too); only the indices batched -> the batch lands at ``axis``."""
    a = call.attrs
    xt, it = ttype(call.args[0]), ttype(call.args[1])
    if a.axis is None:  # the flattened x: indices index every instance's own elements
        if in_dims[0] is None:
            return _recall(call, args), in_dims[1]
        x = _op("reshape", ctx.to_front(args[0], in_dims[0], xt.ndim), newshape=(0, -1))
        if in_dims[1] is None:
            return _recall(call, [x, args[1]], axis=1, batch_dims=0), 0
        i = ctx.to_front(args[1], in_dims[1], it.ndim)
        return _recall(call, [x, i], axis=1, batch_dims=1), 0
    ax = a.axis % xt.ndim if xt.ndim else 0
    bd = a.batch_dims % (it.ndim + 1) if a.batch_dims < 0 else a.batch_dims
    dx, di = in_dims
    if dx is not None and di is None and bd == 0:
        x = ctx.to_front(args[0], dx, xt.ndim)
        return _recall(call, [x, args[1]], axis=ax + 1, batch_dims=0), 0
    if dx is None and bd == 0:
        i = ctx.to_front(args[1], di, it.ndim)
        return _recall(call, [args[0], i], axis=ax, batch_dims=0), ax
    x = ctx.front(args[0], dx, xt)
    i = ctx.front(args[1], di, it)
    return _recall(call, [x, i], axis=ax + 1, batch_dims=bd + 1), 0


def take_grad_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                   ctx: BatchContext) -> tuple[Expr, Any]:
    """``take_grad(g, like, idx, axis, batch_dims)`` (``like`` gives only a shape): as
    :func:`take_rule`, the scatter-add along ``axis + 1``, with ``batch_dims + 1`` when the
    indices are batched."""
    a = call.attrs
    gt, lt, it = (ttype(c) for c in call.args)
    if a.axis is None:  # scatter into each instance's flattened like, then its shape
        if not _static(lt.shape):
            return unrolled(call, args, in_dims, ctx)
        g = ctx.front(args[0], in_dims[0], gt)
        flat = _op("reshape", ctx.front(args[1], in_dims[1], lt), newshape=(0, -1))
        if in_dims[2] is None:
            y = _recall(call, [g, flat, args[2]], axis=1, batch_dims=0)
        else:
            i = ctx.to_front(args[2], in_dims[2], it.ndim)
            y = _recall(call, [g, flat, i], axis=1, batch_dims=1)
        return _op("reshape", y, newshape=(-1,) + tuple(lt.shape)), 0
    ax = a.axis % lt.ndim
    bd = a.batch_dims % (it.ndim + 1) if a.batch_dims < 0 else a.batch_dims
    g = ctx.front(args[0], in_dims[0], gt)
    like = ctx.front(args[1], in_dims[1], lt)
    if in_dims[2] is None and bd == 0:
        return _recall(call, [g, like, args[2]], axis=ax + 1, batch_dims=0), 0
    i = ctx.front(args[2], in_dims[2], it)
    return _recall(call, [g, like, i], axis=ax + 1, batch_dims=bd + 1), 0


def einsum_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                ctx: BatchContext) -> tuple[Expr, Any]:
    """``einsum(operands, equation)``: a fresh label for the batch, in front of every batched
    operand's labels and of the output's (ellipses made explicit labels first)."""
    import string
    from relay_ir.op.indexing_ext import parse_einsum
    t = call.args[0].checked_type_
    assert isinstance(t, TupleType)
    ranks = [f.ndim for f in t.fields]  # type: ignore[attr-defined]
    labels, out = parse_einsum(call.attrs.equation, ranks)
    letters = string.ascii_letters
    used = {c for lab in labels for c in lab if c in letters}
    free = iter(c for c in letters if c not in used)
    named: dict[str, str] = {}

    def name(c: str) -> str:
        if c not in letters and c not in named:
            named[c] = next(free)
        return named.get(c, c)
    labels = [[name(c) for c in lab] for lab in labels]
    out = [name(c) for c in out]
    z = next(free)
    dims = in_dims[0] if isinstance(in_dims[0], tuple) else (in_dims[0],) * len(ranks)
    src = args[0]
    fields, terms = [], []
    for k, (lab, d, r) in enumerate(zip(labels, dims, ranks)):
        f = src.fields[k] if isinstance(src, Tuple) else TupleGetItem(src, k)
        if d is None:
            fields.append(f)
            terms.append("".join(lab))
        else:
            fields.append(ctx.to_front(f, d, r))
            terms.append(z + "".join(lab))
    eq = ",".join(terms) + "->" + z + "".join(out)
    return _recall(call, [Tuple(tuple(fields))], equation=eq), 0


def matmul_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                ctx: BatchContext) -> tuple[Expr, Any]:
    """``nn.dense`` / ``nn.matmul``: an unbatched weight takes the batch as one more leading
    row axis of the data (one bigger GEMM); a batched weight makes an ``nn.batch_matmul``."""
    name = call.op.name  # type: ignore[union-attr]
    a = call.attrs
    ta = bool(a.get("transpose_a", False))
    tb = True if name == "nn.dense" else bool(a.transpose_b)
    xt, wt = ttype(call.args[0]), ttype(call.args[1])
    dx, dw = in_dims
    od = a.out_dtype or None
    if dw is None and not ta:
        x = ctx.to_front(args[0], dx, xt.ndim)
        return _recall(call, [x, args[1]]), 0
    if xt.ndim > 2 and not ta and _static(xt.shape):
        # (B, a, b, .., K) rows flattened to (B, a*b*.., K), one batch_matmul, unflattened
        x = ctx.front(args[0], dx, xt)
        x = _op("reshape", x, newshape=(-1, int(_prod(xt.shape[:-1])), xt.shape[-1]))
        w = _op("expand_dims", args[1], axis=0) if dw is None else ctx.to_front(args[1], dw, 2)
        kw = {} if od is None else {"out_dtype": od}
        y = _op("nn.batch_matmul", x, w, transpose_a=False, transpose_b=tb, **kw)
        return _op("reshape", y, newshape=(-1,) + tuple(ttype_call(call).shape)), 0
    if xt.ndim not in (1, 2):
        return unrolled(call, args, in_dims, ctx)
    x = args[0] if dx is None else ctx.to_front(args[0], dx, xt.ndim)
    if xt.ndim == 1:  # (K,) -> (1, K) rows
        x = _op("expand_dims", x, axis=0 if dx is None else 1)
    if dx is None:
        x = _op("expand_dims", x, axis=0)  # batch 1: batch_matmul broadcasts it
    w = _op("expand_dims", args[1], axis=0) if dw is None else ctx.to_front(args[1], dw, 2)
    kw = {} if od is None else {"out_dtype": od}
    y = _op("nn.batch_matmul", x, w, transpose_a=ta, transpose_b=tb, **kw)
    if xt.ndim == 1:
        y = _op("squeeze", y, axis=(1,))
    return y, 0


def batch_matmul_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                      ctx: BatchContext) -> tuple[Expr, Any]:
    """``nn.batch_matmul``: the batch folded into its batch axis ``(B, N, ..) -> (B*N, ..)``
    (both operands materialized; static equal N), unfolded after."""
    xt, yt = ttype(call.args[0]), ttype(call.args[1])
    out = ttype_call(call)
    if not (_static(xt.shape) and _static(yt.shape) and xt.shape[0] == yt.shape[0]):
        return unrolled(call, args, in_dims, ctx)
    x = ctx.front(args[0], in_dims[0], xt)
    y = ctx.front(args[1], in_dims[1], yt)
    x = _op("reshape", x, newshape=(-1,) + tuple(xt.shape[1:]))
    y = _op("reshape", y, newshape=(-1,) + tuple(yt.shape[1:]))
    z = _recall(call, [x, y])
    return _op("reshape", z, newshape=(-1,) + tuple(out.shape)), 0


def fold_n(n_data: int | tuple[int, ...] = 1, layout_attr: str | None = None) -> Rule:
    """Per-sample operators (convolutions, pooling, resize, instance/group norm, pooling
    gradients): the data arguments (the first ``n_data``, or those at the positions
    ``n_data``) carry a leading ``N`` axis and every other argument is unbatched; the batch
    folds into ``N`` and unfolds after. Needs the layout to start with ``N`` and static shapes;
    otherwise unrolled."""
    pos = tuple(range(n_data)) if isinstance(n_data, int) else n_data

    def rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
             ctx: BatchContext) -> tuple[Expr, Any]:
        out = call.checked_type_
        ok = (isinstance(out, TensorType) and _static(out.shape)
              and all(d is None for i, d in enumerate(in_dims) if i not in pos))
        if layout_attr is not None:
            ok = ok and str(call.attrs[layout_attr]).startswith("N")
            ol = call.attrs.get("out_layout")
            ok = ok and (not ol or str(ol).startswith("N"))
        if ok:
            ts = {i: ttype(call.args[i]) for i in pos}
            ok = all(_static(t.shape) and t.ndim >= 1 for t in ts.values())
        if not ok:
            return unrolled(call, args, in_dims, ctx)
        new = list(args)
        for i, t in ts.items():
            v = ctx.front(args[i], in_dims[i], t)
            new[i] = _op("reshape", v, newshape=(-1,) + tuple(t.shape[1:]))
        y = _recall(call, new)
        return _op("reshape", y, newshape=(-1,) + tuple(out.shape)), 0  # type: ignore[union-attr]
    rule.__doc__ = "The batch folded into the N axis of the data (unbatched weights)."
    return rule


def conv_rule(data_layout: str, kernel_layout: str) -> Rule:
    """``nn.conv2d``/``nn.conv1d`` (default layouts): unbatched weight -> the batch folded into
    ``N``; batched weight -> one grouped convolution (JAX's trick): the batch moves into the
    channels, ``(N, B*C, ..)`` against a weight ``(B*O, C/g, ..)`` with ``B*g`` groups, and
    back out of the result's channels."""
    folded = fold_n(1, "data_layout")

    def rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
             ctx: BatchContext) -> tuple[Expr, Any]:
        if in_dims[1] is None:
            return folded(call, args, in_dims, ctx)
        a = call.attrs
        xt, wt, out = ttype(call.args[0]), ttype(call.args[1]), ttype_call(call)
        if (a.data_layout != data_layout or a.kernel_layout != kernel_layout
                or (a.out_layout or data_layout) != data_layout
                or not (_static(xt.shape) and _static(wt.shape) and _static(out.shape))):
            return unrolled(call, args, in_dims, ctx)
        r = xt.ndim
        swap = (1, 0) + tuple(range(2, r + 1))
        x = ctx.front(args[0], in_dims[0], xt)                      # (B, N, C, ..)
        x = _op("reshape", _op("transpose", x, axes=swap),
                newshape=(xt.shape[0], -1) + tuple(xt.shape[2:]))  # (N, B*C, ..)
        w = ctx.to_front(args[1], in_dims[1], wt.ndim)              # (B, O, C/g, ..)
        w = _op("reshape", w, newshape=(-1,) + tuple(wt.shape[1:]))  # (B*O, C/g, ..)
        changes: dict[str, Any] = {"groups": a.groups * _size(ctx)}
        if a.channels is not None:
            changes["channels"] = a.channels * _size(ctx)
        y = _recall(call, [x, w], **changes)                        # (N, B*O, ..)
        y = _op("reshape", y, newshape=(out.shape[0], -1) + tuple(out.shape[1:]))
        return _op("transpose", y, axes=swap), 0
    rule.__doc__ = conv_rule.__doc__
    return rule


def _size(ctx: BatchContext) -> int:
    if not isinstance(ctx.size, int):
        raise BatchError("a convolution with a batched weight needs a static batch size "
                         "(give vmap a static batch_size)")
    return ctx.size


def shape_of_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                  ctx: BatchContext) -> tuple[Expr, Any]:
    """``shape_of(x)``: the per-instance shape, the same for every instance (unbatched)."""
    t = ttype(call.args[0])
    x = ctx.to_front(args[0], in_dims[0], t.ndim)
    s = _recall(call, [x])
    return _op("strided_slice", s, begin=(1,), end=(t.ndim + 1,), strides=(1,)), None


def passthrough(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                ctx: BatchContext) -> tuple[Expr, Any]:
    """Annotations: the same call, the argument's batch axis."""
    return Call(call.op, tuple(args), call.attrs, call.type_args), in_dims[0]


def split_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
               ctx: BatchContext) -> tuple[Expr, Any]:
    """``split(x, indices_or_sections, axis)``: axis shifted, every field batched on 0."""
    return axis_attr("axis", out_tuple=True)(call, args, in_dims, ctx)


def scan_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
              ctx: BatchContext) -> tuple[Expr, Any]:
    """``cumsum``/``cumprod``: axis shifted; axis None (flattened) -> reshape to ``(B, -1)``
    and scan axis 1."""
    t = ttype(call.args[0])
    x = ctx.to_front(args[0], in_dims[0], t.ndim)
    if call.attrs.axis is None:
        x = _op("reshape", x, newshape=(0, -1))
        return _recall(call, [x], axis=1), 0
    return _recall(call, [x], axis=call.attrs.axis % max(t.ndim, 1) + 1), 0


def sort_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
              ctx: BatchContext) -> tuple[Expr, Any]:
    """``sort``/``argsort``/``topk``: axis shifted (a tuple result batched on 0 leafwise)."""
    t = ttype(call.args[0])
    x = ctx.to_front(args[0], in_dims[0], t.ndim)
    out = _recall(call, [x], axis=call.attrs.axis % max(t.ndim, 1) + 1)
    rt = call.checked_type_
    if isinstance(rt, TupleType):
        return out, tuple(0 for _ in rt.fields)
    return out, 0


def one_hot_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                 ctx: BatchContext) -> tuple[Expr, Any]:
    """``one_hot(idx, on, off, depth, axis)``: indices batched on 0, axis shifted (-1 stays
    last); batched on/off values unrolled."""
    if in_dims[0] is None or any(d is not None for d in in_dims[1:]):
        return unrolled(call, args, in_dims, ctx)
    r = _rank(call, 0)
    ax = call.attrs.axis
    ax = r if ax == -1 else ax % (r + 1)
    x = ctx.to_front(args[0], in_dims[0], r)
    return _recall(call, [x, args[1], args[2]], axis=ax + 1), 0


def gather_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                ctx: BatchContext) -> tuple[Expr, Any]:
    """``gather(x, idx, axis)``: both batched on 0 (materialized), axis shifted."""
    xt, it = ttype(call.args[0]), ttype(call.args[1])
    x = ctx.front(args[0], in_dims[0], xt)
    i = ctx.front(args[1], in_dims[1], it)
    return _recall(call, [x, i], axis=call.attrs.axis % xt.ndim + 1), 0


def dropout_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
                 ctx: BatchContext) -> tuple[Expr, Any]:
    """``nn.dropout`` (inference form, a tuple of output and mask): elementwise, leafwise."""
    return _recall(call, args), (in_dims[0], in_dims[0])


def norm_rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
              ctx: BatchContext) -> tuple[Expr, Any]:
    """``nn.layer_norm``/``nn.batch_norm``-style: data batched, per-channel parameters
    unbatched -> axis shifted (batch_norm keeps its tuple result: data batched, the two
    per-channel outputs unbatched); batched parameters unrolled."""
    name = call.op.name  # type: ignore[union-attr]
    if in_dims[0] is None or any(d is not None for d in in_dims[1:]):
        return unrolled(call, args, in_dims, ctx)
    r = _rank(call, 0)
    x = ctx.to_front(args[0], in_dims[0], r)
    out = _recall(call, [x] + list(args[1:]), axis=call.attrs.axis % r + 1)
    if name == "nn.batch_norm":
        return out, (0, None, None)
    return out, 0


def not_batchable(reason: str) -> Callable[..., Any]:
    """The mark of an operator without batching rule (``OpDef.not_batchable`` holds ``reason``)."""
    def rule(call: Call, args: Sequence[Expr], in_dims: Sequence[Any],
             ctx: BatchContext) -> tuple[Expr, Any]:
        raise BatchError(f"`{call.op.name}` is not batchable: {reason}")  # type: ignore
    rule.not_batchable = reason  # type: ignore[attr-defined]
    return rule


_VALUE_SHAPE = ("its output shape depends on the values of its arguments (batch with "
                "exe.run_batch instead)")
_HOST = "it runs on the host with a value-dependent result (batch with exe.run_batch instead)"


# ============================================================================= the table
def _table() -> dict[str, Rule]:
    t: dict[str, Rule] = {}
    for n in ("exp log log2 log10 sqrt rsqrt sigmoid tanh sin cos tan asin acos atan sinh cosh "
              "asinh acosh atanh erf negative abs floor ceil trunc round sign copy logical_not "
              "bitwise_not zeros_like ones_like stop_gradient isnan isinf isfinite cast clip "
              "nn.relu nn.leaky_relu nn.gelu").split():
        t[n] = elementwise
    for n in ("add subtract multiply divide floor_divide mod floor_mod power maximum minimum "
              "logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor less "
              "greater less_equal greater_equal equal not_equal where").split():
        t[n] = broadcasting
    for n in "sum prod max min mean all any argmax argmin variance".split():
        t[n] = reduction
    # no inputs: never called with a batched argument
    for n in ("zeros", "ones", "arange"):
        t[n] = elementwise
    t["full"] = full_rule
    t["full_like"] = full_like_rule
    t["cast_like"] = like_rule([1], cast_like_rule)
    t["expand_dims"] = expand_dims_rule
    t["broadcast_to"] = broadcast_to_rule
    t["broadcast_to_like"] = like_rule([1], _bt_like)
    t["nn.bias_add"] = bias_add_rule
    t["nn.prelu"] = first_arg_axis("axis")
    t["collapse_sum_like"] = like_rule([1], collapse_rule)
    t["collapse_sum_to"] = collapse_rule
    t["reshape"] = reshape_to_out
    t["reshape_like"] = like_rule([1], reshape_to_out)
    t["nn.batch_flatten"] = reshape_to_out
    t["squeeze"] = squeeze_rule
    t["transpose"] = transpose_rule
    t["concatenate"] = tuple_axis(0)
    t["stack"] = tuple_axis(1)
    t["split"] = split_rule
    t["reverse"] = axis_attr("axis")
    t["repeat"] = axis_attr("axis")
    t["tile"] = tile_rule
    t["take"] = take_rule
    t["strided_slice"] = strided_slice_rule
    t["nn.pad"] = pad_rule
    t["gather"] = gather_rule
    t["one_hot"] = one_hot_rule
    t["nn.softmax"] = axis_attr("axis")
    t["nn.log_softmax"] = axis_attr("axis")
    t["nn.layer_norm"] = norm_rule
    t["nn.batch_norm"] = norm_rule
    t["nn.instance_norm"] = fold_n(1)
    t["nn.group_norm"] = fold_n(1)
    t["nn.dropout"] = dropout_rule
    t["cumsum"] = scan_rule
    t["cumprod"] = scan_rule
    t["sort"] = sort_rule
    t["argsort"] = sort_rule
    t["topk"] = sort_rule
    t["shape_of"] = shape_of_rule
    t["einsum"] = einsum_rule
    t["nn.dense"] = matmul_rule
    t["nn.matmul"] = matmul_rule
    t["nn.batch_matmul"] = batch_matmul_rule
    t["nn.conv2d"] = conv_rule("NCHW", "OIHW")
    t["nn.conv1d"] = conv_rule("NCW", "OIW")
    for n in ("nn.conv2d_transpose", "nn.conv1d_transpose"):
        t[n] = fold_n(1, "data_layout")
    for n in ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d"):
        t[n] = fold_n(1, "layout")
    for n in ("nn.max_pool2d_grad", "nn.avg_pool2d_grad", "nn.max_pool2d_gather"):
        t[n] = fold_n(2, "layout")
    t["image.resize2d"] = fold_n(1, "layout")
    for n in ("on_device", "device_copy", "annotation.stop_fusion", "annotation.checkpoint",
              "annotation.compiler_begin", "annotation.compiler_end"):
        t[n] = passthrough
    t["take_grad"] = like_rule([1], take_grad_rule)
    t["nn.conv2d_backward_data"] = fold_n((0, 2), "data_layout")
    # rare operators: unrolled (one call per instance, static batch size)
    t["strided_slice_grad"] = like_rule([1], strided_slice_grad_rule)
    t["scatter_elements"] = axis_attr("axis")
    for n in ("nn.cross_entropy", "nn.conv2d_backward_weight", "scatter_nd", "gather_nd",
              "layout_transform"):
        t[n] = unrolled
    return t


def install() -> None:
    """Set ``OpDef.batch`` (and ``not_batchable``) of every registered operator from the table;
    operators of the ``dyn.`` family and host-only operators are marked not batchable."""
    from relay_ir.op import _REGISTRY
    table = _table()
    for name, od in _REGISTRY.items():
        rule = table.get(name)
        reason = ""
        if rule is None and (name.startswith("dyn.") or od.host_only):
            reason = _VALUE_SHAPE if name.startswith("dyn.") else _HOST
            rule = not_batchable(reason)
        if rule is None:
            continue  # NOTE: an operator registered later without a rule: the registry test
        # NOTE: OpDef is frozen; the batching facts are attached once, right after loading.
        object.__setattr__(od, "batch", rule)
        object.__setattr__(od, "not_batchable", reason)


__all__ = ["BatchContext", "BatchError", "Rule", "install", "unrolled", "not_batchable"]
