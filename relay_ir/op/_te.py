"""Shared TE helpers for the operators' ``compute`` rules (TVM imported lazily, inside functions).

Every ``<op>_te(attrs, inputs, out_type)`` in the operator families builds its tensor
expression from these helpers so that the compiled kernel reproduces the numpy reference
implementation's dtype semantics exactly:

* :func:`cast` is numpy's ``astype`` (to ``bool`` means ``!= 0``; floats to ints truncate);
* :func:`trunc_div` / :func:`trunc_mod` / :func:`floor_div` / :func:`floor_mod` divide integers
  without ever trapping: a zero divisor gives 0, a ``-1`` divisor negates (wrapping);
* :func:`int_power` is exponentiation by squaring in the integer dtype (wrapping like numpy);
* :func:`broadcast` indexes numpy-broadcast operands of any rank; :func:`reduce` reduces over a
  list of axes with ``keepdims`` (an empty axis list copies).

Fast math (TVM_NOTES section 2): ``llvm.exp``/``tanh`` are scalarised libm calls, while
relay_ir's own :func:`exp_f32`, :func:`sigmoid_f32`, :func:`tanh_f32` and TOPI's ``fast_erf``
are vectorisable. :func:`fast_math` is a context manager selecting them (``True``: always,
``False``: never, ``None``: the per-op default in :data:`FAST_MATH_DEFAULT`, on only where the
measured float32 error stays within float32 tolerance). Only float32 computations use the fast
forms. What each form is and its measured error against numpy float64 over the whole float32
range: ``docs/fast_math.md`` (the other operators' errors: ``docs/op_compute.md``).

Host-only operators carry a reason in ``OpDef.host_only`` and no compute; see
:func:`host_only_reason`.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Iterator, Sequence

import numpy as np

_FAST: contextvars.ContextVar[bool | None] = contextvars.ContextVar("relay_ir_fast_math",
                                                                    default=None)

# Operators whose fast float32 form is on by default (error measured within float32 tolerance).
FAST_MATH_DEFAULT: frozenset[str] = frozenset({"exp", "tanh", "sigmoid", "nn.softmax", "erf",
                                               "nn.gelu"})


@contextlib.contextmanager
def fast_math(flag: bool | None) -> Iterator[None]:
    """Within the block, computes use fast transcendentals: always, never, or (None) by default."""
    tok = _FAST.set(flag)
    try:
        yield
    finally:
        _FAST.reset(tok)


_DIM: contextvars.ContextVar[Callable[[Any], Any] | None] = contextvars.ContextVar(
    "relay_ir_symbolic_dim", default=None)


@contextlib.contextmanager
def symbolic_dims(dim: Callable[[Any], Any] | None) -> Iterator[None]:
    """Within the block (a kernel lowered with symbolic shapes), :func:`symbolic_dim` turns a
    type's dimension (int, ``ShapeVar`` or ``DimExpr``) into its TIR expression with ``dim``."""
    tok = _DIM.set(dim)
    try:
        yield
    finally:
        _DIM.reset(tok)


def symbolic_dim(d: Any) -> Any:
    """The TIR expression of a symbolic type dimension, or None outside :func:`symbolic_dims`
    (a compute then needs static shapes)."""
    dim = _DIM.get()
    return None if dim is None else dim(d)


def out_shape(out_type: Any) -> list[Any]:
    """A result type's shape for ``te.compute``: ints, and the TIR expressions of symbolic
    dimensions inside :func:`symbolic_dims` (outside, a symbolic dimension stays as it is)."""
    dim = _DIM.get()
    return [d if isinstance(d, int) or dim is None else dim(d) for d in out_type.shape]


def use_fast(op_name: str, dtype: str) -> bool:
    """Whether ``op_name`` computing in ``dtype`` uses its fast form under the current setting."""
    if dtype != "float32":
        return False
    flag = _FAST.get()
    return op_name in FAST_MATH_DEFAULT if flag is None else flag


def host_only_reason(opdef: Any) -> str:
    """The documented reason an operator runs only on the host ("" when it has a compute)."""
    return getattr(opdef, "host_only", "") or ""


# ----------------------------------------------------------------------------- tvm access
def _mods() -> tuple[Any, Any, Any]:
    import tvm
    from tvm import te, tirx
    return tvm, te, tirx


def te_mod() -> Any:
    """``tvm.te``."""
    return _mods()[1]


def tir_mod() -> Any:
    """``tvm.tirx``."""
    return _mods()[2]


def dtype_of(t: Any) -> str:
    """The dtype string of a te.Tensor, tensor slice or PrimExpr."""
    dt = getattr(t, "dtype", None)
    if dt is None and hasattr(t, "var"):
        t = t.var
        dt = getattr(t, "dtype", None)
    return str(dt if dt is not None else t.ty)


def is_int(dtype: str) -> bool:
    """Signed or unsigned integer dtype."""
    return dtype.startswith(("int", "uint"))


def is_float(dtype: str) -> bool:
    """float16/32/64."""
    return dtype.startswith("float")


def const(value: Any, dtype: str) -> Any:
    """A constant of ``dtype`` holding ``np.asarray(value).astype(dtype)`` (numpy conversion)."""
    tirx = tir_mod()
    with np.errstate(all="ignore"):
        v = np.asarray(value).astype(dtype)
    if dtype == "bool":
        return tirx.const(bool(v), "bool")
    if is_float(dtype):
        return tirx.const(float(v), dtype)
    return tirx.const(int(v), dtype)


def const_value(value: Any, dtype: str) -> Any:
    """``value`` converted to ``dtype`` the numpy way, as a Python number."""
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(dtype).item()


def maximum(a: Any, b: Any) -> Any:
    """``np.maximum(a, b)`` as numpy computes it: NaN propagates (TVM's ``max`` lowers to a
    select that drops it) and a tie gives ``b`` (``maximum(-0.0, 0.0)`` is ``0.0``,
    ``maximum(0.0, -0.0)`` is ``-0.0``). Integers: ``max``.

    ``a <= b ? b : (b <= a ? a : a + b)``: both comparisons fail only for a NaN operand, and
    then ``a + b`` is NaN. Two selects, no ``isnan`` call: it vectorizes like ``max``.
    """
    tirx = tir_mod()
    if not is_float(dtype_of(a)):
        return tirx.max(a, b)
    return tirx.Select(a <= b, b, tirx.Select(b <= a, a, a + b))


def minimum(a: Any, b: Any) -> Any:
    """``np.minimum(a, b)`` as numpy computes it (NaN propagates, a tie gives ``b``):
    ``a >= b ? b : (b >= a ? a : a + b)``. Integers: ``min``."""
    tirx = tir_mod()
    if not is_float(dtype_of(a)):
        return tirx.min(a, b)
    return tirx.Select(a >= b, b, tirx.Select(b >= a, a, a + b))


_KEY_INT = {"float16": "int16", "float32": "int32", "float64": "int64"}


def opaque(v: Any) -> Any:
    """``v`` unchanged, but hidden from TVM's arithmetic simplifier (floats only).

    The simplifier rewrites ``x - x`` to 0, ``(x + y) - y`` to ``x`` and ``x == x`` to true
    for floats too, which is wrong for inf and NaN. A bitcast to the same-width integer and
    back keeps ``v``'s bits and defeats the structural match; LLVM folds the pair away, so the
    kernel is unchanged.
    """
    dt = dtype_of(v)
    if dt not in _KEY_INT:
        return v
    tirx = tir_mod()
    return tirx.reinterpret(dt, tirx.reinterpret(_KEY_INT[dt], v))


def order_key(v: Any, nan_first: bool = False) -> Any:
    """An integer that orders floats as their values do, NaN above everything (below with
    ``nan_first``): the max (min) of keys is the key of ``np.max`` (``np.min``), NaN
    propagating, and TVM's built-in integer reducers vectorize (rfactor) where a custom
    NaN-aware float combiner does not. :func:`from_order_key` inverts it.

    Bits ``i`` of ``v`` as a signed integer: ``i`` for ``v >= +0``, ``i ^ 0x7f..f`` below
    (``-0.0`` just under ``+0.0``); a NaN (magnitude bits above inf's) maps to the extreme key.
    """
    tirx = tir_mod()
    it = _KEY_INT[dtype_of(v)]
    bits = int(it[3:])
    mask = tirx.const((1 << (bits - 1)) - 1, it)
    i = tirx.reinterpret(it, v)
    inf_bits = tirx.const(int(np.array(np.inf, dtype_of(v)).view(it)), it)
    key = tirx.Select(i >= tirx.const(0, it), i, tirx.bitwise_xor(i, mask))
    extreme = tirx.min_value(it) if nan_first else tirx.max_value(it)
    return tirx.Select(tirx.bitwise_and(i, mask) > inf_bits, extreme, key)


def from_order_key(k: Any, dtype: str) -> Any:
    """The float of :func:`order_key` ``k`` (an extreme key decodes to a NaN)."""
    tirx = tir_mod()
    it = _KEY_INT[dtype]
    mask = tirx.const((1 << (int(it[3:]) - 1)) - 1, it)
    bits = tirx.Select(k >= tirx.const(0, it), k, tirx.bitwise_xor(k, mask))
    return tirx.reinterpret(dtype, bits)


def min_value(dtype: str) -> Any:
    """The smallest value of ``dtype`` (``-inf`` for floats)."""
    if is_float(dtype):
        return const(-np.inf, dtype)
    if dtype == "bool":
        return const(False, "bool")
    return tir_mod().min_value(dtype)


def max_value(dtype: str) -> Any:
    """The largest value of ``dtype`` (``+inf`` for floats)."""
    if is_float(dtype):
        return const(np.inf, dtype)
    if dtype == "bool":
        return const(True, "bool")
    return tir_mod().max_value(dtype)


def cast(x: Any, dtype: str) -> Any:
    """``x.astype(dtype)`` for an expression: to bool is ``x != 0``, floats to ints truncate."""
    tirx = tir_mod()
    src = dtype_of(x)
    if src == dtype:
        return x
    if dtype == "bool":
        if is_float(src):
            # NOTE: NaN is truthy in numpy; LLVM's ordered != would say False
            return tirx.Or(tirx.NE(x, const(0, src)), tirx.isnan(x))
        return tirx.NE(x, const(0, src))
    return tirx.Cast(dtype, x)


def ne(a: Any, b: Any) -> Any:
    """``a != b``; bools compare as int8 (LLVM has no ordered compare of i1 here)."""
    tirx = tir_mod()
    if dtype_of(a) == "bool":
        return tirx.NE(tirx.Cast("int8", a), tirx.Cast("int8", b))
    return tirx.NE(a, b)


def select(c: Any, a: Any, b: Any) -> Any:
    """Branch-free ``c ? a : b``."""
    return tir_mod().Select(c, a, b)


# ----------------------------------------------------------------------------- integer arithmetic
def _safe_divisor(b: Any, dtype: str) -> Any:
    """``b`` with 0 (and -1 for signed dtypes) replaced by 1, so a hardware divide never traps."""
    tirx = tir_mod()
    bad = tirx.EQ(b, const(0, dtype))
    if dtype.startswith("int"):
        bad = tirx.Or(bad, tirx.EQ(b, const(-1, dtype)))
    return select(bad, const(1, dtype), b)


def _guarded(tir_name: str, quotient: bool, doc: str) -> Callable[[Any, Any], Any]:
    """Integer ``tirx.<tir_name>`` made total: divisor 0 gives 0; divisor -1 (signed) gives
    ``-a`` for a quotient (wrapping) and 0 for a remainder."""
    def op(a: Any, b: Any) -> Any:
        tirx = tir_mod()
        dt = dtype_of(a)
        r = getattr(tirx, tir_name)(a, _safe_divisor(b, dt))
        if dt.startswith("int"):
            r = select(tirx.EQ(b, const(-1, dt)), const(0, dt) - a if quotient else const(0, dt),
                       r)
        return select(tirx.EQ(b, const(0, dt)), const(0, dt), r)
    op.__name__ = op.__qualname__ = tir_name
    op.__doc__ = doc
    return op


trunc_div = _guarded("truncdiv", True,
                     "Integer division rounding toward zero; ``x/0 = 0``, ``x/-1 = -x``.")
trunc_mod = _guarded("truncmod", False,
                     "Remainder of truncating division (sign of ``a``); 0 for divisors 0 and -1.")
floor_div = _guarded("floordiv", True,
                     "Integer division rounding down; ``x//0 = 0``, ``x//-1 = -x`` (wrapping).")
floor_mod = _guarded("floormod", False,
                     "Remainder of flooring division (sign of ``b``); 0 for divisors 0 and -1.")


def let_chain(bindings: Sequence[tuple[str, Any]], body: Callable[[list[Any]], Any]) -> Any:
    """``let v0 = e0(); let v1 = e1(v0); ... in body(vars)`` (shared subterms stay linear).

    Each binding is ``(name, fn)`` with ``fn(vars_so_far) -> PrimExpr``.
    """
    tirx = tir_mod()
    vars_: list[Any] = []
    values: list[Any] = []
    for name, fn in bindings:
        val = fn(vars_)
        v = tirx.Var(name, dtype_of(val))
        vars_.append(v)
        values.append(val)
    out = body(vars_)
    for v, val in zip(reversed(vars_), reversed(values)):
        out = tirx.Let(v, val, out)
    return out


def int_power(a: Any, b: Any) -> Any:
    """``a ** b`` for integers by squaring (wrapping); negative ``b``: 1, +-1 or 0 like numpy."""
    tirx = tir_mod()
    dt = dtype_of(a)
    if dt == "bool":
        return select(b, a, const(True, "bool"))
    bits = int(dt[4:]) if dt.startswith("uint") else int(dt[3:])
    signed = dt.startswith("int")
    nbits = bits - 1 if signed else bits
    one = const(1, dt)
    # bindings: a, b, then per bit i: the running result r_i and the square s_i = a^(2^i)
    binds: list[tuple[str, Callable[[list[Any]], Any]]] = [("pa", lambda v: a),
                                                          ("pb", lambda v: b)]

    def bit(vs: list[Any], i: int) -> Any:
        return tirx.NE(tirx.bitwise_and(tirx.shift_right(vs[1], const(i, dt)), one),
                       const(0, dt))
    # vars: [a, b, r0, s1, r1, s2, r2, ...]: s_i at 2i+1, r_i at 2i+2 (s_0 is a)
    binds.append(("pr0", lambda vs: select(bit(vs, 0), vs[0], one)))
    for i in range(1, nbits):
        prev_s = (lambda i: (lambda vs: vs[0] if i == 1 else vs[2 * i - 1]))(i)
        binds.append((f"ps{i}", (lambda ps: lambda vs: ps(vs) * ps(vs))(prev_s)))
        binds.append((f"pr{i}", (lambda i: lambda vs:
                                 vs[2 * i] * select(bit(vs, i), vs[2 * i + 1], one))(i)))

    def body(vs: list[Any]) -> Any:
        result = vs[-1]
        if not signed:
            return result
        pa, pb = vs[0], vs[1]
        odd = tirx.NE(tirx.bitwise_and(pb, one), const(0, dt))
        neg = select(tirx.EQ(pa, one), one,
                     select(tirx.EQ(pa, const(-1, dt)), select(odd, const(-1, dt), one),
                            const(0, dt)))
        return select(tirx.LT(pb, const(0, dt)), neg, result)
    return let_chain(binds, body)


# ----------------------------------------------------------------------------- tensor builders
def shape_of(t: Any) -> list[Any]:
    """The te shape as a list (IntImm dims become Python ints)."""
    tirx = tir_mod()
    return [int(d) if isinstance(d, tirx.IntImm) else d for d in t.shape]


def is_one(d: Any) -> bool:
    """A static unit dimension."""
    return isinstance(d, int) and d == 1


def broadcast_shape(shapes: Sequence[Sequence[Any]]) -> list[Any]:
    """numpy broadcast of te shapes (static 1s stretch; otherwise the first non-1 dim)."""
    n = max((len(s) for s in shapes), default=0)
    out: list[Any] = []
    for i in range(n):
        d: Any = 1
        for s in shapes:
            k = i - (n - len(s))
            if k < 0:
                continue
            e = s[k]
            if is_one(d):
                d = e
            elif isinstance(d, int) and isinstance(e, int) and e != 1 and e != d:
                raise ValueError(f"cannot broadcast shapes {shapes}")
        out.append(d)
    return out


def bcast_index(t: Any, idx: Sequence[Any]) -> Any:
    """``t`` read at output index ``idx`` under numpy broadcasting."""
    shp = shape_of(t)
    off = len(idx) - len(shp)
    tidx = [0 if is_one(d) else idx[off + k] for k, d in enumerate(shp)]
    return t(*tidx)


def broadcast(fn: Callable[..., Any], tensors: Sequence[Any], name: str = "T_bcast") -> Any:
    """``te.compute`` of ``fn(*elements)`` over the broadcast shape of ``tensors``."""
    te = te_mod()
    shape = broadcast_shape([shape_of(t) for t in tensors])
    return te.compute(shape, lambda *i: fn(*[bcast_index(t, i) for t in tensors]), name=name,
                      tag="broadcast")


def elemwise(fn: Callable[[Any], Any], x: Any, name: str = "T_elemwise") -> Any:
    """``te.compute`` of ``fn(x[i])`` over ``x``'s shape."""
    te = te_mod()
    return te.compute(x.shape, lambda *i: fn(x(*i)), name=name, tag="elemwise")


def cast_tensor(x: Any, dtype: str, name: str = "T_cast") -> Any:
    """``x.astype(dtype)`` as a tensor (the input itself when the dtype already matches)."""
    if dtype_of(x) == dtype:
        return x
    return elemwise(lambda v: cast(v, dtype), x, name=name)


def reduce(x: Any, axes: Sequence[int], keepdims: bool, kind: str, acc_dtype: str | None = None,
           fn: Callable[[Any], Any] | None = None, name: str = "T_reduce") -> Any:
    """Reduce ``fn(x)`` (default ``x``) over ``axes`` with ``kind`` in sum/prod/max/min.

    The accumulator has ``acc_dtype`` (default: the input dtype); the result keeps it. An empty
    ``axes`` gives an elementwise copy.
    """
    te = te_mod()
    tirx = tir_mod()
    shp = shape_of(x)
    acc = acc_dtype or dtype_of(x)
    axes = sorted(axes)

    def val(idx: Sequence[Any]) -> Any:
        v = x(*idx) if fn is None else fn(*idx)
        return cast(v, acc)
    if not axes:
        return te.compute(shp, lambda *i: val(i), name=name)
    raxes = [te.reduce_axis((0, shp[a]), name=f"k{a}") for a in axes]
    if keepdims:
        out_shape = [1 if i in axes else d for i, d in enumerate(shp)]
    else:
        out_shape = [d for i, d in enumerate(shp) if i not in axes]
    if kind == "sum":
        red = te.sum
    elif kind in ("max", "min") and acc in _KEY_INT:
        # NOTE: NaN-propagating as np.max / np.min: the built-in integer reducer over
        # order_key, decoded after (see order_key)
        keyed = reduce(x, axes, keepdims, kind, acc_dtype=_KEY_INT[acc],
                       fn=lambda *i: order_key(val(i), nan_first=kind == "min"),
                       name=name + "_key")
        return te.compute(shape_of(keyed), lambda *o: from_order_key(keyed(*o), acc),
                          name=name, tag="elemwise")
    elif kind == "max":
        red = te.comm_reducer(lambda a, b: tirx.max(a, b), lambda t: min_value(t), name="max")
    elif kind == "min":
        red = te.comm_reducer(lambda a, b: tirx.min(a, b), lambda t: max_value(t), name="min")
    elif kind == "prod":
        red = te.comm_reducer(lambda a, b: a * b, lambda t: const(1, t), name="prod")
    else:  # pragma: no cover - internal
        raise ValueError(kind)

    def body(*o: Any) -> Any:
        idx: list[Any] = []
        oi = 0
        ri = 0
        for i in range(len(shp)):
            if i in axes:
                idx.append(raxes[ri])
                ri += 1
                if keepdims:
                    oi += 1
            else:
                idx.append(o[oi])
                oi += 1
        return red(val(idx), axis=raxes)
    return te.compute(out_shape, body, name=name, tag="reduce")


def as_expr(v: Any, dtype: str) -> Any:
    """A Python int or PrimExpr as a PrimExpr of ``dtype``."""
    if isinstance(v, int):
        return const(v, dtype)
    return cast(v, dtype)


def shape_size(dims: Sequence[Any]) -> Any:
    """The product of te dims (a Python int when all are static)."""
    n: Any = 1
    for d in dims:
        n = n * d
    return n


def unary_float(x: Any, fn: Callable[[Any], Any], out_dtype: str) -> Any:
    """A float function on any dtype: integers and bools go through float64 and back."""
    dt = dtype_of(x)
    if is_float(dt):
        return elemwise(fn, x)
    return elemwise(lambda v: cast(fn(cast(v, "float64")), out_dtype), x)



def int_power_tensor(a: Any, b: Any) -> Any:
    """Broadcasting ``a ** b`` on wide integers as one opaque loop nest (te.extern).

    Exponentiation by squaring needs one squaring per exponent bit; as one expression TVM's
    passes expand the shared squares exponentially, so for 32/64-bit dtypes the running
    result and square live in a 2-element scratch buffer updated by a serial loop over bits.
    The block is opaque: schedules leave it alone and it is never inlined.
    """
    te, tirx = te_mod(), tir_mod()
    dt = dtype_of(a)
    shape = broadcast_shape([shape_of(a), shape_of(b)])
    bits = int(dt[4:]) if dt.startswith("uint") else int(dt[3:])
    signed = dt.startswith("int")
    nbits = bits - 1 if signed else bits

    def fcompute(ins: Any, outs: Any) -> Any:
        ab, bb = ins
        cb, sc = outs
        lv = [tirx.Var(f"i{k}", "int64" if "int64" in str(getattr(d, "dtype", "")) else "int32")
              for k, d in enumerate(shape)]

        def load(buf: Any) -> Any:
            off = len(shape) - len(buf.shape)
            return tirx.BufferLoad(buf, [0 if isinstance(d, tirx.IntImm) and int(d) == 1
                                         else lv[off + k] for k, d in enumerate(buf.shape)])
        one, zero = const(1, dt), const(0, dt)
        pa, pb = load(ab), load(bb)

        def r() -> Any:
            return tirx.BufferLoad(sc, [0])

        def s() -> Any:
            return tirx.BufferLoad(sc, [1])
        k = tirx.Var("k", dt)
        bit = tirx.NE(tirx.bitwise_and(tirx.shift_right(pb, k), one), zero)
        loop = tirx.For(k, zero, const(nbits, dt), tirx.ForKind.SERIAL, tirx.SeqStmt([
            tirx.BufferStore(sc, tirx.Select(bit, r() * s(), r()), [0]),
            tirx.BufferStore(sc, s() * s(), [1])]))
        res = r()
        if signed:
            odd = tirx.NE(tirx.bitwise_and(pb, one), zero)
            neg = select(tirx.EQ(pa, one), one,
                         select(tirx.EQ(pa, const(-1, dt)), select(odd, const(-1, dt), one),
                                zero))
            res = select(tirx.LT(pb, zero), neg, res)
        body: Any = tirx.SeqStmt([tirx.BufferStore(sc, one, [0]), tirx.BufferStore(sc, pa, [1]),
                                  loop, tirx.BufferStore(cb, res, lv)])
        for kk in reversed(range(len(shape))):
            body = tirx.For(lv[kk], 0, shape[kk], tirx.ForKind.SERIAL, body)
        return body
    return te.extern([shape, (2,)], [a, b], fcompute, name="T_int_power", dtype=[dt, dt])[0]


# ----------------------------------------------------------------------------- fast float32 forms
# NOTE: the constants of relay_ir's own float32 exp (docs/fast_math.md): x = n ln2 + r with
# n = round(x log2 e) (rounded by adding and subtracting 1.5 * 2**23) and |r| <= ln2 / 2, ln2 in
# two parts (the high one has 9 significant bits, so n * _LN2_HI is exact for |n| < 2**15);
# exp(r) by a degree-5 polynomial fitted for relative error on [-0.3467, 0.3467]
# (benchmarks/fast_math_accuracy.py --fit prints the fit).
_LOG2E = 1.4426950408889634
_LN2_HI = 0.693359375
_LN2_LO = -2.1219444005469057e-04
_ROUND_MAGIC = 12582912.0
_EXP_FINITE_MAX = 88.72283172607421875   # the largest float32 whose exp is finite
_EXP_POLY = (1.0, 0.9999997019767761, 0.4999914765357971, 0.1666763722896576,
             0.04189809784293175, 0.008290283381938934)


def _f32(v: float) -> Any:
    return const(v, "float32")


def clamp_keep_nan(v: Any, lo: float, hi: float) -> Any:
    """``v`` clamped to ``[lo, hi]`` with a NaN left NaN: ``max(lo, min(hi, v))``, the bound
    first (TVM's LLVM code generator makes ``min(a, b)`` the select ``a < b ? a : b``, false
    for a NaN ``b``; LLVM emits one ``vminps`` and one ``vmaxps``, which return their second
    operand for a NaN). ``tests/test_fast_math_forms.py`` checks that NaN passes through the
    built kernels. (The bounds are plain constants: a bitcast constant, :func:`opaque`, is
    ``*(int *)&literal`` in CUDA C, which nvcc rejects.)

    NOTE: ``v`` is used once. Every use of a form's input copies the input's expression in the
    tree TVM's passes walk, so a chain of these forms (tanh of tanh, a gradient program's
    sigmoid of a tanh) grows by the product of the uses: two selects per clamp made tanh of
    tanh take minutes to compile."""
    tirx = tir_mod()
    return tirx.max(_f32(lo), tirx.min(_f32(hi), v))


def _horner(coefs: Sequence[float], v: Any) -> Any:
    """``sum(coefs[k] * v**k)`` by Horner's rule (float32 constants)."""
    p = _f32(coefs[-1])
    for c in reversed(coefs[:-1]):
        p = p * v + _f32(c)
    return p


def _exp_reduce(u: Any, negate: bool = False) -> tuple[Any, Any]:
    """``(p, nbits)`` with ``exp(s u) = p * 2**n`` (``s = -1`` when ``negate``), where ``p =
    exp(r)`` by the polynomial and ``nbits`` is an int32 whose low 9 bits hold ``n`` (the bits of
    ``u s log2e + 1.5 * 2**23``). ``u`` must lie within +-150."""
    tirx = tir_mod()
    sgn = -1.0 if negate else 1.0
    # NOTE: opaque: the simplifier would fold (a + M) - M into a
    t = opaque(u * _f32(sgn * _LOG2E) + _f32(_ROUND_MAGIC))
    nf = t - _f32(_ROUND_MAGIC)
    # r' = u + s n ln2 = s r (exact reduction in two steps); p(r) = q(r') with q's odd
    # coefficients negated when s = -1
    if negate:
        r = u + nf * _f32(_LN2_HI) + nf * _f32(_LN2_LO)
    else:
        r = u - nf * _f32(_LN2_HI) - nf * _f32(_LN2_LO)
    p = _horner([c * (sgn ** k) for k, c in enumerate(_EXP_POLY)], r)
    return p, tirx.reinterpret("int32", t)


def _pow2_bits(n: Any, bias: int = 127) -> Any:
    """``2.0 ** (n + bias - 127)`` (float32) for an int32 whose low 9 bits hold ``n``, with
    ``n + bias`` in [0, 255]: the exponent field (0 gives +0.0, 255 gives inf)."""
    tirx = tir_mod()
    return tirx.reinterpret("float32", tirx.shift_left(n, const(23, "int32"))
                            + const(bias << 23, "int32"))


def exp_f32(x: Any) -> Any:
    """``exp(x)`` of a float32 PrimExpr, vectorisable (no libm call, no branch).

    Overflows to inf exactly where float32 ``exp`` does (x > 88.7228), gives subnormal results
    down to ``exp(-103.97)`` (gradual underflow: the scale ``2**n`` is applied as two factors
    ``2**(n >> 1) * 2**(n - (n >> 1))``), 0 below, ``exp(-inf) = 0``, ``exp(inf) = inf`` and
    NaN for NaN. Max relative error 1.6e-7 (2 ulp) where the result is a normal float32
    (docs/fast_math.md).
    """
    tirx = tir_mod()
    u = clamp_keep_nan(x, -110.0, 89.0)
    p, tbits = _exp_reduce(u)
    n = tbits - const(0x4B400000, "int32")
    n1 = tirx.shift_right(n, const(1, "int32"))
    # NOTE: an explicit inf above the largest x with a finite exp: were the result the product
    # that overflows, LLVM's contraction would turn exp(x) - exp(x) into fma(a, b, -a*b),
    # which is -inf (not NaN) for an overflowing a*b
    return select(x > _f32(_EXP_FINITE_MAX), _f32(np.inf),
                  p * _pow2_bits(n1) * _pow2_bits(n - n1))


def sigmoid_f32(x: Any) -> Any:
    """``sigmoid(x)`` of a float32 PrimExpr as ``0.5 / (0.5 + exp(-x) / 2)``, vectorisable.

    No cancellation anywhere: for x < 0 the result is 0.5 / (0.5 + a large number), relatively
    as accurate as the exp. ``exp(-x) / 2 = p * 2**(n - 1)`` is computed for x clamped to
    [-89.5, 87] with one scale factor (n - 1 in [-127, 128]: -127 gives 0, so x >= 87 gives
    exactly 1; 128 gives inf, so x <= -89.05 gives exactly 0 where the true result is below
    2.3e-39, and the subnormal results above that are those of the division).
    ``sigmoid(-inf) = 0``, ``sigmoid(inf) = 1``, NaN gives NaN; the result lies in [0, 1].
    """
    u = clamp_keep_nan(x, -89.5, 87.0)
    p, tbits = _exp_reduce(u, negate=True)
    half_e = p * _pow2_bits(tbits, bias=126)
    return _f32(0.5) / (_f32(0.5) + half_e)


# NOTE: tanh(x) = x N(x^2) / D(x^2), a degree 9/8 rational fitted on [0, 9] for relative error
# (linear-programming differential correction; benchmarks/fast_math_accuracy.py --fit);
# N(0) = D(0) = 1, so tanh(x) = x for tiny x. Beyond 9.01 float32 tanh is +-1; the rational
# passes 1 at x = 9.09 and is 1 + 3.7e-7 at the input clamp 9.5, so the output clamp to
# [-1, 1] makes it exactly +-1 there.
_TANH_CLAMP = 9.5
_TANH_NUM = (1.0, 0.1338086575269699, 0.0034952210262417793, 2.0596715330611914e-05,
             1.3327466241719321e-08)
_TANH_DEN = (1.0, 0.46714189648628235, 0.025876035913825035, 0.00032847505644895136,
             7.767453098495025e-07)


def tanh_f32(x: Any) -> Any:
    """``tanh(x)`` of a float32 PrimExpr by a rational function, vectorisable.

    x is clamped to [-9.5, 9.5] (NaN kept), then ``x N(x^2) / D(x^2)`` with ``N(0) = D(0) = 1``
    (so ``tanh(+-0) = +-0`` and ``tanh(x) = x`` to the last bit for tiny x), and the result
    clamped to [-1, 1]: ``tanh(+-inf) = +-1``, NaN gives NaN.
    """
    xc = clamp_keep_nan(x, -_TANH_CLAMP, _TANH_CLAMP)
    s = xc * xc
    y = xc * _horner(_TANH_NUM, s) / _horner(_TANH_DEN, s)
    return clamp_keep_nan(y, -1.0, 1.0)


def fast_exp_tensor(x: Any, name: str = "T_fast_exp") -> Any:
    """``exp`` of a float32 tensor through :func:`exp_f32` (vectorisable; overflow and
    gradual underflow where float32 ``exp``'s are)."""
    return elemwise(exp_f32, x, name=name)


def not_nan(v: Any) -> Any:
    """``abs(v) <= inf`` for a float PrimExpr: false only for NaN (an ordered compare). It stays
    a plain vector compare, where ``tirx.isnan`` kept TVM from vectorizing the loop and
    ``v != v`` is folded to false by the simplifier."""
    tirx = tir_mod()
    return tirx.abs(v) <= const(np.inf, dtype_of(v))


def fast_erf_tensor(x: Any, name: str = "T_fast_erf") -> Any:
    """``erf`` of a float32 (or float16, computed in float32) tensor through TOPI's vectorisable
    rational ``fast_erf`` (max relative error 3.7e-7 against ``math.erf``).

    ``fast_erf`` clamps its input to [-4, 4], so ``+-inf`` give ``+-1`` (exact in float32) but a
    NaN would give 1: a select (:func:`not_nan`) puts the NaN back. ``-0.0`` keeps its sign
    (an odd polynomial).
    """
    from tvm import topi
    te = te_mod()
    dt = dtype_of(x)
    xf = x if dt == "float32" else te.compute(x.shape, lambda *i: cast(x(*i), "float32"),
                                               name=f"{name}_in")
    e = topi.fast_erf(xf)
    return te.compute(x.shape,
                      lambda *i: cast(select(not_nan(xf(*i)), e(*i), xf(*i)), dt), name=name)

