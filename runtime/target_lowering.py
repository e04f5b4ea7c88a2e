"""Rewrites that pay off on one kind of target only: applied by ``runtime.build`` for it.

``passes.optimize`` is target-independent: it keeps values and removes work on every target.
A rewrite whose benefit was measured on one target's kernels (a threshold, a cost factor) runs
here, in ``runtime.build``'s lowering, for that target only:

* ``llvm`` (CPU): ``combine-sums`` (a sum of matmuls joined into one product when the operands
  hold under a quarter of the results they no longer write; a sum of slice scatters one stack)
  and ``share-weight-transpose`` (a weight read ``transpose_b`` by two or more products of at
  most 32 rows is transposed once: TVM's CPU dense schedule repacks it per call), then CSE and
  DCE over what they leave. Measured on W4 and W7 (benchmarks/run_workloads.py).
  Then ``conv-nchwc`` (:mod:`relay_ir.runtime.nchwc`, on unless :data:`NCHWC` is False):
  convolutions with constant weights computed in a blocked channel layout (``NCHW16c``, 8c
  where 16 does not divide the channels or the CPU has AVX2 only), weights packed
  ``OIHW16o`` at compile time, the elementwise ops, batch-norm remains, pools and global
  pools between them kept blocked, ``layout_transform`` back to NCHW only where an op has no
  blocked form (dense, reshape, the result). Measured on ResNet-50 v1 / v2 and MobileNet v2
  (benchmarks/RESULTS.md): 1.2-1.4x faster at 1 and 2 threads, the same values bitwise.
  Then ``conv-weight-layout`` (for the convolutions left in NCHW): a convolution's constant
  OIHW weight stored blocked by 16 (8,
  4) output channels, ``OIHW16o`` (IHWO, transposed, for depthwise weights and channel counts
  no block divides), at compile time, so that the CPU schedule, vectorized over output
  channels, reads each weight vector in place, contiguously, without packing it on every call
  (``schedules.schedule_conv_channels``).
  And ``dense-weight-pack``: a dense layer's constant ``[N, K]`` weight stored as the panels
  ``[N/nr, K, nr]`` the CPU matmul schedule would otherwise copy it into on every call (a
  9.4 MB weight took ~5 ms per call to pack on one core, as long as the product itself), the
  product written as a ``batch_matmul`` over the panels (measured on the BERT and GPT-2 layers
  of benchmarks/bench_models.py: dense layers 1.8-1.9x faster, bitwise the same results).
  With ``runtime.build(..., fast_math=True)`` only: ``conv-winograd`` before
  ``conv-weight-layout`` (3x3 stride-1 convolutions as Winograd F(4x4, 3x3) where its measured
  cost rule picks them; it changes values beyond rounding: ``runtime/winograd.py``).
* every other target (``cuda``): nothing; these costs were not measured there.

Before them, on every target: ``simplify-inference`` (batch norm with constant statistics to a
per-channel scale and shift, the scale folded into the preceding conv2d's or dense's constant
weights; dropout to the identity). It changes results by float rounding only (checked at
compile time for inf, nan and the sign of zero: passes/simplify_inference.py), which
``passes.optimize`` does not allow itself; its benefit (51 fewer kernels in ResNet-50) holds
on every target.

Both passes stay available by name (``rly opt --passes combine-sums``, ``get_pass``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from relay_ir.expr import Call, Constant, Expr, Function, Op
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.passes.pass_manager import FunctionPass
from relay_ir.ty import TensorType

# target kind -> the passes applied for it, in order (names from relay_ir.passes)
TARGET_PASSES: dict[str, tuple[str, ...]] = {
    "llvm": ("combine-sums", "share-weight-transpose", "conv-weight-layout",
             "dense-weight-pack"),
}
# ``conv-nchwc`` (runtime/nchwc.py) before ``conv-weight-layout`` on llvm: convolutions and the
# ops between them in a blocked channel layout (NCHW16c). On: measured faster on ResNet-50 v1
# and v2 and MobileNet v2 at 1 and 2 threads (benchmarks/RESULTS.md); False: the NCHW
# schedules (for before/after figures: ``bench_models.py --switch NCHWC=False:True``)
NCHWC = True
# passes applied for every target, before TARGET_PASSES
INFERENCE_PASSES: tuple[str, ...] = ("simplify-inference",)
# NOTE: what the rewrites leave: the joined terms' own bindings (dead), duplicated joins
CLEANUP: tuple[str, ...] = ("cse", "dce", "to-anf")


def target_kind(target: Any) -> str:
    """The kind name of ``target`` (``"llvm"``, ``"cuda"``): a string, a dict or a Target."""
    from relay_ir.runtime.lower_tvm import resolve_target
    return str(resolve_target(target).kind.name)


def target_rewrites(mod: IRModule, target: Any, opt_level: int = 2,
                    winograd: bool = False) -> IRModule:
    """``mod`` with the cost rewrites of ``target``'s kind applied (:data:`TARGET_PASSES`);
    ``mod`` itself for targets without any, or below ``opt_level`` 2 (the passes' level).
    ``winograd`` (``runtime.build(fast_math=True)``): on llvm, ``conv-winograd``
    (:mod:`relay_ir.runtime.winograd`) before ``conv-weight-layout``."""
    from relay_ir.passes import get_pass
    from relay_ir.passes.pass_manager import PassContext, Sequential, run_pass
    kind = target_kind(target)
    names = INFERENCE_PASSES + TARGET_PASSES.get(kind, ())
    if winograd and kind == "llvm":
        i = names.index("conv-weight-layout")
        names = names[:i] + ("conv-winograd",) + names[i:]
    if NCHWC and kind == "llvm":
        i = names.index("conv-weight-layout")
        names = names[:i] + ("conv-nchwc",) + names[i:]
    if not names or opt_level < 2:
        return mod
    outer = PassContext.current()
    with PassContext(opt_level=opt_level, instruments=outer.instruments,
                     config=outer.config) as ctx:
        infer = get_pass("infer-type")
        typed = run_pass(infer, mod, ctx)  # NOTE: the passes require types
        out = typed
        for n in names:
            new = run_pass(_get(n, target), out, ctx)
            if not _same(new, out):
                out = run_pass(infer, new, ctx)
        if out is typed:
            return mod
        return Sequential(tuple(get_pass(n) for n in CLEANUP), seq_name="cleanup")(out, ctx)


def _get(name: str, target: Any = "llvm") -> Any:
    if name == "conv-nchwc":
        from relay_ir.runtime.nchwc import ConvNCHWc, target_block
        return ConvNCHWc(blocks=target_block(target))
    if name == "conv-winograd":
        from relay_ir.runtime.winograd import ConvWinograd
        return ConvWinograd()
    from relay_ir.passes import get_pass
    return get_pass(name)


def _same(a: IRModule, b: IRModule) -> bool:
    """Whether no function changed (passes return unchanged functions as the same node)."""
    if a is b:
        return True
    return a.functions.keys() == b.functions.keys() and all(
        a.functions[k] is b.functions[k] for k in a.functions)


# output-channel blocks of the constant convolution weights, by preference (the vector widths
# of schedules.schedule_conv_channels)
WEIGHT_BLOCKS = (16, 8, 4)


@dataclass(frozen=True)
class ConvWeightLayout(FunctionPass):
    """A convolution's constant weight laid out at compile time the way the CPU convolution
    schedules read it (a block of output channels innermost)::

        nn.conv2d(x, W)  =>  nn.conv2d(x, W', kernel_layout="OIHW16o")
            W'[o // 16, i, h, w, o % 16] = W[o, i, h, w]     (8o, 4o when 16 does not divide O)
        nn.conv2d(x, W)  =>  nn.conv2d(x, W', kernel_layout="IHWO")   W' = transpose(W, 1, 2, 3, 0)
            for depthwise weights and channel counts that no block divides

    for ``W`` a constant in ``OIHW`` and NCHW data and output. Blocked, each 16-channel weight
    vector of the schedule's inner loop follows the previous one in memory; IHWO puts O floats
    between them (L1 set conflicts for O of 512-2048). Values are unchanged (the same products
    summed in the same order). A layout for llvm only: ``runtime.build`` applies it in its CPU
    lowering (:data:`TARGET_PASSES`).
    """

    name: ClassVar[str] = "conv-weight-layout"
    opt_level: ClassVar[int] = 2

    def function_transformer(self, mod: IRModule, ctx: Any) -> Callable[[Function], Function]:
        return lambda fn: _ConvLayout().visit(fn)  # type: ignore[return-value]


class _ConvLayout(ExprMutator):
    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        if type(new) is not Call or type(new.op) is not Op or new.op.name != "nn.conv2d":
            return new
        at = new.attrs
        w = new.args[1]
        if (type(w) is not Constant or w.data.ndim != 4 or at.kernel_layout != "OIHW"
                or at.data_layout != "NCHW" or at.out_layout not in ("", "NCHW")):
            return new
        o, cg = w.data.shape[:2]
        block = next((b for b in WEIGHT_BLOCKS if o % b == 0), 0)
        if block and not (cg == 1 and at.groups == o):
            # [O/b, I, H, W, b]: w[o, i, h, w] at [o // b, i, h, w, o % b]
            data = np.ascontiguousarray(
                w.data.reshape(o // block, block, *w.data.shape[1:]).transpose(0, 2, 3, 4, 1))
            layout = f"OIHW{block}o"
        else:
            data = np.ascontiguousarray(w.data.transpose(1, 2, 3, 0))
            layout = "IHWO"
        wt = Constant(data, span=w.span,
                      checked_type_=TensorType(tuple(data.shape), str(data.dtype)))
        return Call(new.op, (new.args[0], wt), at.with_changes(kernel_layout=layout),
                    new.type_args, span=new.span, checked_type_=new.checked_type_)


# NOTE: the rows below which a product is left alone: the panel rewrite adds two layout
# kernels (the input as one batch, the panels' results back to [M, N]) that a few rows do not
# pay for, and the small-batch products of the workloads have their own rewrites
# (share-weight-transpose)
PACK_MIN_ROWS = 16


@dataclass(frozen=True)
class DenseWeightPack(FunctionPass):
    """A dense layer's constant weight packed at compile time into the column panels the CPU
    matmul schedule reads (``schedules.schedule_matmul`` copies a ``[N, K]`` weight, or a
    ``[K, N]`` one over 2 MB, into ``[N/nr, K, nr]`` panels on every call)::

        nn.dense(x, W)  =>  reshape(transpose(nn.batch_matmul(reshape(x, [1, M, K]), Wp,
                                                              transpose_b=False),
                                              axes=[1, 0, 2]), [M, N])
        Wp[p, k, r] = W[p * nr + r, k]        (nr = 32, or 16 when 32 does not divide N)

    and the same for ``nn.matmul(x, W)`` (``W`` as ``[K, N]``: ``Wp[p, k, r] = W[k, p * nr +
    r]``; with ``transpose_b`` as ``nn.dense``), the form ONNX ``MatMul`` imports to,

    for ``W`` a float32 constant (no ``out_dtype``, no ``transpose_a``), ``x`` of static
    shape ``[M, K]`` with ``M >=``
    :data:`PACK_MIN_ROWS`, and ``N`` a multiple of 16. Each panel ``Wp[p]`` is a ``[K, nr]``
    matrix read row by row, which the schedule uses in place. Values are unchanged: every
    output element is the same products summed in the same order. A layout for llvm only:
    ``runtime.build`` applies it in its CPU lowering (:data:`TARGET_PASSES`).
    """

    name: ClassVar[str] = "dense-weight-pack"
    opt_level: ClassVar[int] = 2

    def function_transformer(self, mod: IRModule, ctx: Any) -> Callable[[Function], Function]:
        return lambda fn: _DensePack().visit(fn)  # type: ignore[return-value]


class _DensePack(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        # NOTE: one [1, M, K] view per input (q, k and v of a BERT layer read the same x)
        self._batched: dict[int, Expr] = {}

    def visit_call(self, c: Call) -> Expr:
        from relay_ir.op._rules import make_call
        new = super().visit_call(c)
        if (type(new) is not Call or type(new.op) is not Op
                or new.op.name not in ("nn.dense", "nn.matmul")):
            return new
        at = new.attrs
        w = new.args[1]
        out = new.checked_type_
        if new.op.name == "nn.dense":
            nk = True
        elif at.transpose_a:
            return new
        else:
            nk = bool(at.transpose_b)     # nn.matmul: W is [N, K] with transpose_b, else [K, N]
        if (type(w) is not Constant or w.data.ndim != 2 or w.data.dtype != np.float32
                or at.out_dtype not in ("", None) or not isinstance(out, TensorType)
                or out.dtype != "float32" or len(out.shape) != 2
                or not all(type(d) is int for d in out.shape)):
            return new
        m, n = out.shape
        k = w.data.shape[1] if nk else w.data.shape[0]
        if m < PACK_MIN_ROWS or n % 16 != 0 or w.data.shape != ((n, k) if nk else (k, n)):
            return new
        nr = 32 if n % 32 == 0 else 16
        if nk:
            data = np.ascontiguousarray(w.data.reshape(n // nr, nr, k).transpose(0, 2, 1))
        else:
            data = np.ascontiguousarray(w.data.reshape(k, n // nr, nr).transpose(1, 0, 2))
        wp = Constant(data, span=w.span,
                      checked_type_=TensorType(tuple(data.shape), str(data.dtype)))
        span = new.span
        x3 = self._batched.get(id(new.args[0]))
        if x3 is None:
            x3 = make_call("reshape", new.args[0], newshape=[1, m, k], span=span)
            self._batched[id(new.args[0])] = x3
        prod = make_call("nn.batch_matmul", x3, wp, transpose_b=False, span=span)
        back = make_call("transpose", prod, axes=[1, 0, 2], span=span)
        return make_call("reshape", back, newshape=[m, n], span=span)
