"""``grad`` and ``value_and_grad`` for Python functions, as in JAX.

``from_python`` -> ``passes.gradient`` -> ``passes.optimize`` -> ``runtime.build`` once per
argument signature (shapes and dtypes of the arguments); later calls with the same signature
reuse the compiled executable.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from relay_ir.frontend.python import FrontendError, _example_types, from_python
from relay_ir.module import fresh_name
from relay_ir.ty import TensorType, fmt_type


def _convert(x: Any) -> Any:
    """A Python argument by the frontend's rule (float -> float32, int -> int32)."""
    if isinstance(x, (bool, np.bool_)):
        return np.bool_(x)
    if isinstance(x, np.ndarray) or isinstance(x, np.generic):
        return x
    if isinstance(x, int):
        return np.int32(x)
    if isinstance(x, float):
        return np.float32(x)
    if isinstance(x, (tuple, list)):
        return tuple(_convert(v) for v in x)
    return x


def _float_leaves(t: Any) -> bool:
    """Whether every leaf of ``t`` is a float tensor (what a gradient can be taken of)."""
    from relay_ir.ty import tuple_leaves
    leaves = tuple_leaves(t)
    return bool(leaves) and all(isinstance(x, TensorType) and x.dtype.startswith("float")
                                for x in leaves)


def _sig_key(args: tuple) -> tuple:
    """A cheap key for the argument signature (the types are computed on a miss only)."""
    out = []
    for a in args:
        if type(a) is np.ndarray:
            out.append((a.shape, a.dtype.char))
        elif isinstance(a, (tuple, list)):
            out.append(("t", _sig_key(tuple(a))))
        elif isinstance(a, np.generic):
            out.append(("s", a.dtype.char))
        else:
            out.append(type(a))
    return tuple(out)


class _GradFn:
    """The callable ``value_and_grad`` returns: compiles per signature, then runs."""

    def __init__(self, fn: Callable, argnums: int | Sequence[int], with_value: bool,
                 jit: bool):
        self.fn = fn
        self.argnums = argnums
        self.with_value = with_value
        self.jit = jit
        self.cache: dict[tuple, Any] = {}  # by argument types
        self.fast_cache: dict[tuple, Any] = {}  # by shapes and dtypes as passed
        self.__name__ = f"grad({getattr(fn, '__name__', 'fn')})"
        self.__doc__ = f"The gradient of {getattr(fn, '__name__', 'fn')} (relay_ir.frontend)."

    def _nums(self, nargs: int) -> tuple[int, ...]:
        nums = (self.argnums,) if isinstance(self.argnums, int) else tuple(self.argnums)
        out = []
        for k in nums:
            if not -nargs <= k < nargs:
                raise FrontendError(f"argnums {k} is out of range for {nargs} arguments")
            out.append(k % nargs)
        return tuple(out)

    def gradient_module(self, *args: Any) -> Any:
        """``passes.gradient`` of ``from_python(fn)``: ``@main`` returns (value, grads)."""
        from relay_ir import passes
        mod = self.fn.module(*args) if isinstance(self.fn, _GradFn) else \
            from_python(self.fn, *args)
        main = mod["main"]
        name = getattr(self.fn, "__name__", "fn")
        ret = main.ret_type if main.ret_type is not None else main.checked_type.ret_type
        if not (isinstance(ret, TensorType) and ret.shape == ()
                and ret.dtype.startswith("float")):
            raise FrontendError(f"grad: `{name}` must return a float scalar, but it returns "
                                f"{fmt_type(ret)}")
        nums = self._nums(len(args))
        params = main.params
        for k in nums:
            t = params[k].checked_type
            if not _float_leaves(t):
                raise FrontendError(f"grad: argument {k} (`{params[k].name_hint}`) of `{name}` "
                                    f"has type {fmt_type(t)}; gradients are taken with "
                                    "respect to float arrays and scalars")
        return passes.gradient(mod, entry="main", wrt=tuple(params[k].name_hint for k in nums))

    def compile(self, *args: Any) -> Any:
        """The optimized gradient module (and its executable when ``jit``) for these
        arguments, made once per argument signature."""
        from relay_ir import passes, runtime
        fast = _sig_key(args)
        hit = self.fast_cache.get(fast)
        if hit is not None:
            return hit
        key = tuple(_example_types(self.fn, args))
        hit = self.cache.get(key)
        if hit is not None:
            self.fast_cache[fast] = hit
            return hit
        g = passes.optimize(self.gradient_module(*args))
        hit = (g, runtime.build(g) if self.jit else None)
        self.cache[key] = hit
        self.fast_cache[fast] = hit
        return hit

    def module(self, *args: Any) -> Any:
        """An IRModule whose ``@main`` computes what this callable returns (so that
        ``grad(grad(f))`` and ``from_python(grad(f), ...)`` work)."""
        from relay_ir import passes
        from relay_ir.expr import Call, Function, GlobalVar, Let, Tuple, TupleGetItem, Var
        from relay_ir.functor import ExprMutator
        from relay_ir.module import IRModule
        # NOTE: not optimized here: the caller (an outer grad) optimizes the whole program once
        g = self.gradient_module(*args)
        vg = GlobalVar(fresh_name("main_value_and_grad", g, sep="_", first=2))

        class _Rename(ExprMutator):
            def visit_global_var(self, gv: GlobalVar) -> Any:
                return vg if gv.name_hint == "main" else gv
        fns = {}
        for name in g:
            f = g[name]
            fns[vg.name_hint if name == "main" else name] = _Rename().visit(f)
        old = g["main"]
        params = tuple(Var(p.name_hint, p.checked_type) for p in old.params)
        r = Var("r")
        call = Call(vg, params)
        grads = TupleGetItem(r, 1)
        gr = TupleGetItem(grads, 0) if isinstance(self.argnums, int) else grads
        body = Tuple((TupleGetItem(r, 0), gr)) if self.with_value else gr
        fns["main"] = Function(params, Let(r, call, body))
        # NOTE: with the gradient's type definitions (a loop's tape, ADT twins)
        return passes.InferType()(IRModule(fns, dict(g.type_definitions)))

    def __call__(self, *args: Any) -> Any:
        """The gradient (or ``(value, gradient)``) of ``fn`` at ``args``."""
        from relay_ir import runtime
        g, exe = self.compile(*args)
        conv = [a if type(a) is np.ndarray else _convert(a) for a in args]
        out = exe(*conv) if exe is not None else runtime.evaluate(g, *conv)
        value, grads = out
        grads = tuple(grads)
        gr = grads[0] if isinstance(self.argnums, int) else grads
        return (value, gr) if self.with_value else gr


def value_and_grad(fn: Callable, argnums: int | Sequence[int] = 0, *, jit: bool = True
                   ) -> Callable:
    """``f(*args) -> (fn(*args), gradient)``: the gradient with respect to argument
    ``argnums`` (a tuple of gradients when ``argnums`` is a tuple). ``fn`` must return a float
    scalar. ``jit=False`` runs the gradient program on the reference interpreter instead of
    compiling it."""
    return _GradFn(fn, argnums, True, jit)


def grad(fn: Callable, argnums: int | Sequence[int] = 0, *, jit: bool = True) -> Callable:
    """``f(*args) -> gradient`` of ``fn`` (see :func:`value_and_grad`)."""
    return _GradFn(fn, argnums, False, jit)


__all__ = ["grad", "value_and_grad"]
