"""``conv-nchwc``: convolutional networks in a blocked channel layout (``NCHW16c``) for llvm.

A target lowering of ``runtime.build`` (:mod:`relay_ir.runtime.target_lowering`), on by
default (:data:`relay_ir.runtime.target_lowering.NCHWC`: measured 1.3-1.4x faster on
ResNet-50 v1 / v2 and MobileNet v2 at one thread, faster at two too; benchmarks/RESULTS.md,
"blocked channel layouts"). It rewrites a function's NCHW float32 convolutions with constant
OIHW weights so that their results are stored blocked by ``b`` channels,
``[N, C/b, H, W, b]`` (element ``x[n, c // b, h, w, c % b]``), with weights packed at compile
time as ``OIHW<b>o``; the ops between convolutions keep the blocked layout:

* ``nn.conv2d`` (regular, depthwise, grouped) reads its input in whatever layout it arrives
  (NCHW for a network's input, blocked by 16 or 8 for another convolution's result) and
  writes blocked by ``b`` = the largest of the target's blocks (:func:`target_block`: 16 with
  AVX-512, 8 with AVX2) that divides its output channels (else it stays NCHW);
* elementwise and broadcasting ops (relu, clip, add, multiply, ...) whose tensor operands are
  all blocked alike, or constants broadcast per channel (``[C, 1, 1]``, ``[1, C, 1, 1]``:
  re-laid out at compile time) or scalars; ``nn.bias_add`` over channels with a constant bias
  (as an ``add`` of the re-laid bias);
* the max / average pools and the global pools (their ``layout`` attribute becomes
  ``NCHW<b>c``);
* ``concatenate`` on channels of operands blocked alike (a tuple written in the call).

Any other use of a blocked value (dense, reshape, the function's result, a tuple, ...) gets
``layout_transform(x, "NCHW<b>c", "NCHW")`` once per value; so a layout changes only where it
must. Values are unchanged: each output is the same products summed in the same order as
the NCHW convolution (the schedules differ only in where results are stored).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generator

import numpy as np

from relay_ir.expr import (Call, Constant, Expr, Function, If, Let, Match, Op, RefCreate,
                           RefWrite, Tuple, Var)
from relay_ir.functor import ExprMutator, with_fields
from relay_ir.module import IRModule
from relay_ir.op import OpPattern
from relay_ir.passes.pass_manager import FunctionPass
from relay_ir.ty import TensorType

# channel blocks, by preference, for a vector of 16 (AVX-512) and of 8 (AVX2) float32 lanes
BLOCKS_512 = (16, 8)
BLOCKS_256 = (8,)
# attributes of elementwise / broadcast ops that say nothing about positions or shapes (an op
# with any other, an axis or a shape, keeps NCHW operands)
_POSITION_FREE = frozenset({"a_min", "a_max", "alpha", "approximate", "dtype"})
_POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d")


def target_block(target: Any = "llvm") -> tuple[int, ...]:
    """The channel blocks for ``target`` (an llvm target), by preference: ``(16, 8)`` where
    the CPU has AVX-512 (``-mcpu`` features), ``(8,)`` otherwise."""
    from tvm.target import codegen
    from relay_ir.runtime.lower_tvm import resolve_target
    t = resolve_target(target)
    try:
        wide = bool(codegen.target_has_features("avx512f", t))
    except Exception:  # NOTE: a target LLVM cannot query: the narrow block is always valid
        wide = False
    return BLOCKS_512 if wide else BLOCKS_256


@dataclass(frozen=True)
class ConvNCHWc(FunctionPass):
    """Convolutions and the ops between them in ``NCHW<b>c`` (module docstring)::

        relu(nn.conv2d(x, W))  =>  relu(nn.conv2d(x, Wp, kernel_layout="OIHW16o",
                                                  out_layout="NCHW16c"))
        Wp[o // b, i, h, w, o % b] = W[o, i, h, w]       (b = 16 or 8: the target's block)

    and ``layout_transform(y, "NCHW16c", "NCHW")`` where a blocked value reaches an op
    without a blocked form."""

    name: ClassVar[str] = "conv-nchwc"
    opt_level: ClassVar[int] = 2
    blocks: tuple[int, ...] = BLOCKS_512

    def function_transformer(self, mod: IRModule, ctx: Any) -> Callable[[Function], Function]:
        return lambda fn: _Blocked(self.blocks).visit(fn)  # type: ignore[return-value]


def _static4(t: Any) -> tuple[int, ...] | None:
    if not isinstance(t, TensorType) or len(t.shape) != 4 or t.dtype != "float32" or \
            not all(type(d) is int for d in t.shape):
        return None
    return tuple(t.shape)


def _blocked_type(shape: tuple[int, ...], b: int) -> TensorType:
    n, c, h, w = shape
    return TensorType((n, c // b, h, w, b), "float32")


def _layout(b: int) -> str:
    return f"NCHW{b}c"


class _Blocked(ExprMutator):
    def __init__(self, blocks: tuple[int, ...]) -> None:
        super().__init__()
        self.blocks = blocks
        # id(new expr) -> (expr, block, NCHW shape): the expr holds NCHW<block>c data
        self.blk: dict[int, tuple[Expr, int, tuple[int, ...]]] = {}
        self._back: dict[int, Expr] = {}       # id(blocked expr) -> its NCHW transform
        self._to: dict[tuple[int, int], Expr] = {}

    # ------------------------------------------------------------------ layout helpers
    def _mark(self, e: Expr, b: int, shape: tuple[int, ...]) -> Expr:
        self.blk[id(e)] = (e, b, shape)
        return e

    def nchw(self, e: Expr) -> Expr:
        """``e`` in NCHW: a layout_transform (once per value) when ``e`` is blocked."""
        info = self.blk.get(id(e))
        if info is None:
            return e
        out = self._back.get(id(e))
        if out is None:
            from relay_ir.op._rules import make_call
            out = make_call("layout_transform", e, src_layout=_layout(info[1]),
                            dst_layout="NCHW", span=e.span)
            self._back[id(e)] = out
        return out

    def to_block(self, e: Expr, b: int) -> Expr:
        """``e`` (blocked or NCHW) as ``NCHW<b>c``."""
        info = self.blk.get(id(e))
        if info is not None and info[1] == b:
            return e
        key = (id(e), b)
        out = self._to.get(key)
        if out is None:
            from relay_ir.op._rules import make_call
            src = _layout(info[1]) if info is not None else "NCHW"
            shape = info[2] if info is not None else _static4(e.checked_type_)
            out = make_call("layout_transform", e, src_layout=src, dst_layout=_layout(b),
                            span=e.span)
            self._to[key] = out
            assert shape is not None
            self._mark(out, b, shape)
        return out

    def _block_for(self, channels: int) -> int:
        return next((b for b in self.blocks if channels % b == 0), 0)

    # ------------------------------------------------------------------ places a value leaves
    def _fix_tail(self, e: Expr) -> Expr:
        """``e`` with the tail of its let spine in NCHW."""
        spine = []
        node = e
        while type(node) is Let:
            spine.append(node)
            node = node.body
        tail = self.nchw(node)
        if tail is node:
            return e
        for let in reversed(spine):
            tail = Let(let.var, let.value, tail, span=let.span)
        return tail

    def visit_function(self, f: Function) -> Generator[Expr, Any, Expr]:
        new = yield from super().visit_function(f)
        body = self._fix_tail(new.body)  # type: ignore[attr-defined]
        if body is new.body:  # type: ignore[attr-defined]
            return new
        return with_fields(new, body=body)

    def visit_if(self, i: If) -> Generator[Expr, Any, Expr]:
        cond = yield i.cond
        t = yield i.true_branch
        f = yield i.false_branch
        cond, t, f = self.nchw(cond), self._fix_tail(t), self._fix_tail(f)
        if cond is i.cond and t is i.true_branch and f is i.false_branch:
            return i
        return If(cond, t, f, span=i.span)

    def visit_tuple(self, t: Tuple) -> Expr:
        fields = tuple(self.nchw(self.visit(x)) for x in t.fields)
        if all(a is b for a, b in zip(fields, t.fields)):
            return t
        return Tuple(fields, span=t.span)

    def visit_ref_create(self, r: RefCreate) -> Expr:
        return with_fields(r, value=self.nchw(self.visit(r.value)))

    def visit_ref_write(self, r: RefWrite) -> Expr:
        return with_fields(r, ref=self.visit(r.ref), value=self.nchw(self.visit(r.value)))

    def visit_match(self, m: Match) -> Generator[Expr, Any, Expr]:
        new = yield from super().visit_match(m)
        data = self.nchw(new.data)  # type: ignore[attr-defined]
        clauses = tuple(with_fields(c, rhs=self._fix_tail(c.rhs))
                        for c in new.clauses)  # type: ignore[attr-defined]
        if data is new.data and all(  # type: ignore[attr-defined]
                a.rhs is b.rhs for a, b in zip(clauses, new.clauses)):  # type: ignore[attr-defined]
            return new
        return with_fields(new, data=data, clauses=clauses)

    def visit_binding(self, var: Var, value: Expr) -> Generator[Expr, Any, tuple[Var, Expr]]:
        new_value = yield value
        if type(new_value) is Let:
            new_value = self._fix_tail(new_value)
        info = self.blk.get(id(new_value))
        if info is not None:
            nv = Var(var.name_hint, _blocked_type(info[2], info[1]), span=var.span)
            self.memo[var] = nv
            self._mark(nv, info[1], info[2])
            return nv, new_value
        new_var = yield var
        return new_var, new_value

    # ------------------------------------------------------------------ calls
    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        if type(new) is not Call:
            return new
        if type(new.op) is not Op:
            return self._plain(new)
        name = new.op.name
        if name == "nn.conv2d":
            out = self._conv(new, c)
        elif name in _POOLS:
            out = self._pool(new, c)
        elif name == "nn.bias_add":
            out = self._bias_add(new, c)
        elif name == "concatenate":
            out = self._concat(new, c)
        else:
            out = self._elemwise(new, c)
        return out if out is not None else self._plain(new)

    def _plain(self, new: Call) -> Expr:
        args = tuple(self.nchw(a) for a in new.args)
        if all(a is b for a, b in zip(args, new.args)):
            return new
        return Call(new.op, args, new.attrs, new.type_args, span=new.span)

    def _conv(self, new: Call, c: Call) -> Expr | None:
        at = new.attrs
        x, w = new.args
        shape = _static4(c.checked_type_)
        xshape = _static4(c.args[0].checked_type_)
        if (shape is None or xshape is None or type(w) is not Constant or w.data.ndim != 4
                or w.data.dtype != np.float32 or at.kernel_layout != "OIHW"
                or at.data_layout != "NCHW" or at.out_layout not in ("", "NCHW")
                or at.out_dtype not in ("", None, "float32")):
            return None
        o = shape[1]
        b = self._block_for(o)
        if not b:
            return None
        info = self.blk.get(id(x))
        data_layout = _layout(info[1]) if info is not None else "NCHW"
        data = w.data.reshape(o // b, b, *w.data.shape[1:]).transpose(0, 2, 3, 4, 1)
        data = np.ascontiguousarray(data)
        wt = Constant(data, span=w.span,
                      checked_type_=TensorType(tuple(data.shape), "float32"))
        call = Call(new.op, (x, wt),
                    at.with_changes(data_layout=data_layout, kernel_layout=f"OIHW{b}o",
                                    out_layout=_layout(b)),
                    new.type_args, span=new.span)
        return self._mark(call, b, shape)

    def _pool(self, new: Call, c: Call) -> Expr | None:
        x = new.args[0]
        info = self.blk.get(id(x))
        shape = _static4(c.checked_type_)
        if info is None or shape is None or new.attrs.layout != "NCHW" or \
                new.attrs.out_layout not in ("", "NCHW"):
            return None
        lay = _layout(info[1])
        call = Call(new.op, (x,), new.attrs.with_changes(layout=lay, out_layout=""),
                    new.type_args, span=new.span)
        return self._mark(call, info[1], shape)

    def _bias_add(self, new: Call, c: Call) -> Expr | None:
        x, bias = new.args
        info = self.blk.get(id(x))
        shape = _static4(c.checked_type_)
        if info is None or shape is None or type(bias) is not Constant or \
                new.attrs.axis not in (1, -3) or bias.data.shape != (shape[1],):
            return None
        from relay_ir.op._rules import make_call
        b = info[1]
        data = np.ascontiguousarray(bias.data.reshape(shape[1] // b, 1, 1, b))
        cb = Constant(data, span=bias.span,
                      checked_type_=TensorType(tuple(data.shape), str(data.dtype)))
        return self._mark(make_call("add", x, cb, span=new.span), b, shape)

    def _concat(self, new: Call, c: Call) -> Expr | None:
        """``concatenate((a, b, ..), axis=1)`` of operands blocked alike: the channel blocks
        concatenated (each operand's channels a multiple of the block)."""
        shape = _static4(c.checked_type_)
        tup = c.args[0]
        if shape is None or type(tup) is not Tuple or new.attrs.axis not in (1, -3):
            return None
        fields = [self.visit(f) for f in tup.fields]      # NOTE: memo hits: the new fields
        infos = [self.blk.get(id(f)) for f in fields]
        if not infos or any(i is None for i in infos) or \
                len({i[1] for i in infos}) != 1:  # type: ignore[index]
            return None
        b = infos[0][1]  # type: ignore[index]
        call = Call(new.op, (Tuple(tuple(fields), span=tup.span),),
                    new.attrs.with_changes(axis=1), new.type_args, span=new.span)
        return self._mark(call, b, shape)

    def _elemwise(self, new: Call, c: Call) -> Expr | None:
        od = getattr(new.op, "opdef", None)
        if od is None or od.pattern > OpPattern.BROADCAST or \
                any(f.name not in _POSITION_FREE for f in (od.attrs or ())):
            return None
        shape = _static4(c.checked_type_)
        infos = [self.blk.get(id(a)) for a in new.args]
        blocked = [i for i in infos if i is not None]
        if shape is None or not blocked:
            return None
        b = blocked[0][1]
        args = []
        for a, orig, info in zip(new.args, c.args, infos):
            if info is not None:
                if info[2] != shape:
                    return None
                args.append(self.to_block(a, b) if info[1] != b else a)
                continue
            t = orig.checked_type_
            if not isinstance(t, TensorType):
                return None
            if len(t.shape) == 0 or all(d == 1 for d in t.shape):
                if len(t.shape) > 5:
                    return None
                args.append(a)          # a scalar (or all-ones shape) broadcasts as before
                continue
            if type(a) is Constant and a.data.shape in ((shape[1], 1, 1), (1, shape[1], 1, 1)):
                lead = a.data.shape[:-3]
                data = np.ascontiguousarray(
                    a.data.reshape(*lead, shape[1] // b, b, 1, 1).swapaxes(-3, -1)
                    .reshape(*lead, shape[1] // b, 1, 1, b))
                args.append(Constant(data, span=a.span, checked_type_=TensorType(
                    tuple(data.shape), str(data.dtype))))
                continue
            if _static4(t) == shape:
                args.append(self.to_block(a, b))    # NOTE: a full NCHW operand (rare)
                continue
            return None
        call = Call(new.op, tuple(args), new.attrs, new.type_args, span=new.span)
        return self._mark(call, b, shape)
