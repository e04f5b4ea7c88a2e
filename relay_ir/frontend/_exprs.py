"""Expressions of the Python frontend: names, operators, calls, numpy functions, indexing."""
from __future__ import annotations

import ast
import builtins
import types as pytypes
from typing import Any, Callable

import numpy as np

from relay_ir.expr import Call, Constant, If, Tuple, Var
from relay_ir.frontend.python import (_BINOPS, _CMPOPS, _UNSUPPORTED_EXPR, Closure, PyFunction,
                                      PyTuple, Static, Translator, Val, Weak, _FnCtx, _ty_str)
from relay_ir.ty import TensorType, TupleType

_BIG = 2 ** 31 - 1


# ----------------------------------------------------------------------------- names
def from_py(obj: Any) -> Any:
    """A Python object read by name as a frontend value."""
    if isinstance(obj, (bool, int, float)) and not isinstance(obj, np.generic):
        return Weak(obj)
    if isinstance(obj, np.ndarray):
        c = Constant(obj)
        return Val(c, TensorType(tuple(int(d) for d in obj.shape), str(obj.dtype)))
    if isinstance(obj, np.generic) and not isinstance(obj, (np.str_, np.bytes_)):
        c = Constant(np.asarray(obj))
        return Val(c, TensorType((), str(c.data.dtype)))
    if isinstance(obj, tuple):
        return PyTuple(tuple(from_py(x) for x in obj))
    if isinstance(obj, pytypes.FunctionType):
        from relay_ir.frontend._numpy import _handler
        if _handler(obj) is not None or (getattr(obj, "__module__", None) or "").startswith(
                ("numpy", "relay_ir")):
            return Static(obj)  # NOTE: mapped onto operators (or unknown), never translated
        return PyFunction(obj)
    return Static(obj)


def lookup(tr: Translator, name: str, env: dict, node: ast.AST) -> Any:
    if name in env:
        return env[name]
    src = env.get("$src") or tr.ctx.src
    for scope in (src.nonlocals, src.globals):
        if name in scope:
            obj = scope[name]
            if isinstance(obj, list):
                return PyTuple(tuple(from_py(x) for x in obj))
            return from_py(obj)
    if hasattr(builtins, name):
        return Static(getattr(builtins, name))
    raise tr.err(node, f"name `{name}` is not defined (or is defined only on some paths)")


# ----------------------------------------------------------------------------- expressions
def expr(tr: Translator, node: ast.expr, env: dict) -> Any:
    t = type(node)
    if t is ast.Constant:
        v = node.value
        if isinstance(v, (bool, int, float)):
            return Weak(v)
        return Static(v)
    if t is ast.Name:
        return lookup(tr, node.id, env, node)
    if t is ast.BinOp:
        # NOTE: `a + b + c + ...` nests to the left; walk that spine as a list
        spine = []
        left: ast.expr = node
        while isinstance(left, ast.BinOp):
            spine.append(left)
            left = left.left
        acc = expr(tr, left, env)
        for n in reversed(spine):
            b = expr(tr, n.right, env)
            if type(n.op) is ast.MatMult:
                acc = matmul(tr, acc, b, n)
            elif type(n.op) in _BINOPS:
                acc = tr.binop(type(n.op), acc, b, n)
            else:
                raise tr.err(n, f"the operator {type(n.op).__name__} is not supported")
        return acc
    if t is ast.UnaryOp:
        v = expr(tr, node.operand, env)
        if isinstance(node.op, ast.Not):
            c = tr.truth(v, node.operand)
            if isinstance(c, Weak):
                return Weak(not c.value)
            return tr.op("logical_not", [c], node)
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.USub):
            if isinstance(v, Weak):
                return Weak(-v.value)
            return tr.op("negative", [tr.tensor(v, node)], node)
        raise tr.err(node, "the operator ~ is not supported")
    if t is ast.Compare:
        left = expr(tr, node.left, env)
        out = None
        for opn, right_node in zip(node.ops, node.comparators):
            right = expr(tr, right_node, env)
            if type(opn) not in _CMPOPS:
                raise tr.err(node, f"the comparison {type(opn).__name__} is not supported")
            c = tr.compare(type(opn), left, right, node)
            out = c if out is None else _logical(tr, "and", out, c, node)
            left = right
        return out
    if t is ast.BoolOp:
        kind = "and" if isinstance(node.op, ast.And) else "or"
        out = expr(tr, node.values[0], env)
        for sub in node.values[1:]:
            out = _logical(tr, kind, out, expr(tr, sub, env), node)
        return out
    if t is ast.IfExp:
        return if_exp(tr, node, env)
    if t is ast.Tuple or t is ast.List:
        for e in node.elts:
            if isinstance(e, ast.Starred):
                raise tr.err(e, "a starred expression is not supported")
        return PyTuple(tuple(expr(tr, e, env) for e in node.elts))
    if t is ast.Subscript:
        return subscript(tr, expr(tr, node.value, env), node.slice, env, node)
    if t is ast.Attribute:
        return attribute(tr, expr(tr, node.value, env), node)
    if t is ast.Call:
        return call(tr, node, env)
    if t is ast.Lambda:
        return Closure(node, dict(env), env.get("$src") or tr.ctx.src, "<lambda>")
    if t in _UNSUPPORTED_EXPR:
        raise tr.err(node, f"{_UNSUPPORTED_EXPR[t]} is not supported in a relay_ir function")
    raise tr.err(node, f"the expression {t.__name__} is not supported")


def _logical(tr: Translator, kind: str, a: Any, b: Any, node: ast.AST) -> Any:
    ca = tr.truth(a, node)
    if isinstance(ca, Weak):  # Python's short circuit, decided now
        if kind == "and":
            return b if ca.value else a
        return a if ca.value else b
    cb = tr.truth(b, node)
    if isinstance(cb, Weak):
        if kind == "and":
            return ca if cb.value else Weak(False)
        return Weak(True) if cb.value else ca
    return tr.op("logical_and" if kind == "and" else "logical_or", [ca, cb], node)


def if_exp(tr: Translator, node: ast.IfExp, env: dict) -> Any:
    from relay_ir.frontend._stmts import join_values
    c = tr.truth(expr(tr, node.test, env), node.test)
    if isinstance(c, Weak):
        return expr(tr, node.body if c.value else node.orelse, env)
    from relay_ir.frontend.python import RecursiveTypeUnknown
    ctx = tr.ctx
    vals: list = [None, None]
    scopes: list = [None, None]
    saved = ctx.provisional_ret
    order, retried = [0, 1], False
    try:
        while order:
            i = order.pop(0)
            ctx.open()
            try:
                vals[i] = expr(tr, (node.body, node.orelse)[i], env)
            except RecursiveTypeUnknown:
                ctx.scopes.pop()
                if retried:
                    raise
                # NOTE: a recursive call before any `return` of its function: the other
                # branch's type is the call's until a `return` gives the function's type
                # (`v * k if k > 0 else f(v, k + 1)`; InferType checks the result)
                retried = True
                other = 1 - i
                if vals[other] is None:
                    ctx.open()
                    vals[other] = expr(tr, (node.body, node.orelse)[other], env)
                    scopes[other] = ctx.scopes.pop()
                    order = [o for o in order if o != other]
                ctx.provisional_ret = tr.mat(vals[other], node).ty
                order.insert(0, i)
                continue
            scopes[i] = ctx.scopes.pop()
    finally:
        ctx.provisional_ret = saved
    static, exprs, ty = join_values(tr, "the conditional expression", vals, node)
    if exprs is None:
        return static
    from relay_ir.traversal import build_lets
    r = ctx.bind(If(c.expr, build_lets(scopes[0], exprs[0]), build_lets(scopes[1], exprs[1]),
                    span=ctx.src.span(node)), "if")
    return tr.wrap_param(r, ty)


# ----------------------------------------------------------------------------- arrays
def _static_int(tr: Translator, v: Any, node: ast.AST, what: str) -> int:
    if isinstance(v, Weak) and isinstance(v.value, (int, np.integer)) \
            and not isinstance(v.value, bool):
        return int(v.value)
    raise tr.err(node, f"{what} must be an integer known while translating")


def _static_ints(tr: Translator, v: Any, node: ast.AST, what: str) -> list[int]:
    if isinstance(v, PyTuple):
        return [_static_int(tr, x, node, what) for x in v.items]
    return [_static_int(tr, v, node, what)]


def _axis(tr: Translator, v: Any, node: ast.AST) -> list[int] | None:
    if v is None or (isinstance(v, Static) and v.obj is None):
        return None
    return _static_ints(tr, v, node, "axis")


def _float_input(tr: Translator, v: Any, node: ast.AST) -> Val:
    if isinstance(v, Weak):
        return tr.mat(v, node, "float64" if not isinstance(v.value, bool) else "float64")
    v = tr.tensor(v, node)
    if v.ty.dtype.startswith(("int", "uint", "bool")):
        return tr.cast(v, "float64", node)
    return v


def matmul(tr: Translator, a: Any, b: Any, node: ast.AST) -> Val:
    """``a @ b`` for 1-D and 2-D operands (numpy's rules)."""
    a, b = tr.promote([tr.tensor(a, node), tr.tensor(b, node)], node)
    na, nb = len(a.ty.shape), len(b.ty.shape)
    if na == 1 and nb == 1:
        return tr.op("sum", [tr.op("multiply", [a, b], node)], node, axis=None)
    if na == 2 and nb == 2:
        return tr.op("nn.matmul", [a, b], node)
    if na == 2 and nb == 1:
        w = tr.op("expand_dims", [b], node, axis=0)
        return tr.op("squeeze", [tr.op("nn.dense", [a, w], node)], node, axis=[1])
    if na == 1 and nb == 2:
        x = tr.op("expand_dims", [a], node, axis=0)
        return tr.op("squeeze", [tr.op("nn.matmul", [x, b], node)], node, axis=[0])
    if na >= 3 and na == nb:
        return tr.op("nn.batch_matmul", [a, b], node, transpose_b=False)
    raise tr.err(node, f"`@` of arrays of types {_ty_str(a.ty)} and {_ty_str(b.ty)} is not "
                 "supported (1-D and 2-D operands, or batches of equal rank)")


def unstack(tr: Translator, v: Val, node: ast.AST) -> PyTuple:
    """``a, b = x`` for an array with a static first dimension: its rows."""
    n = v.ty.shape[0]
    return PyTuple(tuple(_index_array(tr, v, [Weak(i)], node) for i in range(n)))


def _index_array(tr: Translator, x: Val, items: list[Any], node: ast.AST) -> Val:
    shape = x.ty.shape
    if len(items) > len(shape):
        raise tr.err(node, f"too many indices for an array of type {_ty_str(x.ty)}")
    begin, end, strides, squeeze, takes = [], [], [], [], []
    sliced = False
    for k, dim in enumerate(shape):
        it = items[k] if k < len(items) else slice(None)
        if isinstance(it, Weak) and isinstance(it.value, (int, np.integer)) \
                and not isinstance(it.value, bool):
            i = int(it.value)
            if isinstance(dim, int):
                if not -dim <= i < dim:
                    raise tr.err(node, f"index {i} is out of bounds for axis {k} of size {dim}")
                i = i + dim if i < 0 else i
            elif i < 0:
                raise tr.err(node, "a negative index into a dimension unknown until run time")
            begin.append(i)
            end.append(i + 1)
            strides.append(1)
            squeeze.append(k)
            sliced = True
        elif isinstance(it, slice):
            if isinstance(dim, int):
                b, e, s = it.indices(dim)
                if s < 0 and e < 0:
                    e = -dim - 1
                if (b, e, s) != (0, dim, 1):
                    sliced = True
            else:
                if (it.start or 0) < 0 or (it.stop is not None and it.stop < 0) or \
                        (it.step or 1) < 0:
                    raise tr.err(node, "negative slice bounds on a dimension unknown until run "
                                 "time are not supported")
                b, e, s = it.start or 0, _BIG if it.stop is None else it.stop, it.step or 1
                sliced = sliced or (b, e, s) != (0, _BIG, 1)
            begin.append(b)
            end.append(e)
            strides.append(s)
        elif isinstance(it, Val):
            if it.ty.shape != () or not it.ty.dtype.startswith(("int", "uint")):
                raise tr.err(node, "only integer scalars, slices and integers known while "
                             "translating can index an array")
            begin.append(0)
            end.append(dim if isinstance(dim, int) else _BIG)
            strides.append(1)
            takes.append((k, it))
        else:
            raise tr.err(node, "unsupported index (integers, slices and integer scalars are "
                         "supported)")
    out = x
    if sliced:
        out = tr.op("strided_slice", [out], node, begin=begin, end=end, strides=strides)
    if squeeze:
        out = tr.op("squeeze", [out], node, axis=squeeze)
    for k, idx in reversed(takes):
        axis = k - sum(1 for q in squeeze if q < k)
        out = tr.op("take", [out, idx], node, axis=axis, mode="wrap")
    return out


def _slice_value(tr: Translator, s: ast.Slice, env: dict) -> slice:
    parts = []
    for p in (s.lower, s.upper, s.step):
        if p is None:
            parts.append(None)
        else:
            parts.append(_static_int(tr, expr(tr, p, env), p, "a slice bound"))
    return slice(*parts)


def subscript(tr: Translator, base: Any, sl: ast.expr, env: dict, node: ast.AST) -> Any:
    if isinstance(base, Val) and isinstance(base.ty, TupleType):
        base = tr.wrap_param(base.expr, base.ty)
    elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
    items: list[Any] = []
    for e in elts:
        if isinstance(e, ast.Slice):
            items.append(_slice_value(tr, e, env))
        else:
            items.append(expr(tr, e, env))
    if isinstance(base, PyTuple):
        if len(items) != 1:
            raise tr.err(node, "a tuple takes one index")
        it = items[0]
        if isinstance(it, slice):
            return PyTuple(base.items[it])
        if isinstance(it, Val):
            raise tr.err(node, "indexing a tuple with a run-time index is not supported: "
                         "the index must be known while translating (a constant, or a "
                         "Python int computed from constants)")
        i = _static_int(tr, it, node, "a tuple index")
        if not -len(base.items) <= i < len(base.items):
            raise tr.err(node, f"tuple index {i} out of range (length {len(base.items)})")
        return base.items[i]
    if isinstance(base, Val):
        return _index_array(tr, tr.tensor(base, node), items, node)
    raise tr.err(node, "this value cannot be indexed")


class _Method:
    """``x.sum`` before the call: the receiver and the method name."""

    __slots__ = ("recv", "name")

    def __init__(self, recv: Any, name: str):
        self.recv = recv
        self.name = name


_ARRAY_METHODS = {"sum", "mean", "max", "min", "prod", "reshape", "transpose", "astype", "dot",
                  "var", "std", "argmax", "argmin"}


def attribute(tr: Translator, v: Any, node: ast.Attribute) -> Any:
    name = node.attr
    if isinstance(v, Static):
        if not hasattr(v.obj, name):
            raise tr.err(node, f"`{getattr(v.obj, '__name__', v.obj)}` has no attribute "
                         f"`{name}`")
        return from_py(getattr(v.obj, name))
    if isinstance(v, Val) and isinstance(v.ty, TensorType):
        if name == "shape":
            return PyTuple(tuple(Weak(d) if isinstance(d, int) else _dim_of(tr, v, k, node)
                                 for k, d in enumerate(v.ty.shape)))
        if name == "ndim":
            return Weak(len(v.ty.shape))
        if name == "T":
            return tr.op("transpose", [v], node)
        if name == "dtype":
            return Static(np.dtype(v.ty.dtype))
        if name in _ARRAY_METHODS:
            return _Method(v, name)
    if isinstance(v, PyTuple) and name in ("append", "extend", "insert", "pop", "remove",
                                          "clear", "sort", "reverse"):
        raise tr.err(node, f"`.{name}(...)` mutates a list; mutation is not supported "
                     "(build a new tuple instead)")
    raise tr.err(node, f"the attribute `{name}` is not supported here")


def _dim_of(tr: Translator, v: Val, k: int, node: ast.AST) -> Val:
    shp = tr.op("shape_of", [v], node, dtype="int32")
    return tr.op("take", [shp, tr.mat(Weak(k), node, "int32")], node, axis=0)


# ----------------------------------------------------------------------------- calls
def call(tr: Translator, node: ast.Call, env: dict) -> Any:
    f = expr(tr, node.func, env)
    for a in node.args:
        if isinstance(a, ast.Starred):
            raise tr.err(a, "`*args` in a call is not supported")
    args = [expr(tr, a, env) for a in node.args]
    kwargs = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise tr.err(kw, "`**kwargs` in a call is not supported")
        kwargs[kw.arg] = expr(tr, kw.value, env)
    if isinstance(f, Closure):
        return call_closure(tr, f, args, kwargs, node)
    if isinstance(f, PyFunction):
        return call_pyfunction(tr, f, args, kwargs, node)
    from relay_ir.frontend._numpy import _handler, call_method
    if isinstance(f, _Method):
        return call_method(tr, f, args, kwargs, node)
    if isinstance(f, Static):
        h = _handler(f.obj)
        if h is not None:
            return h(tr, args, kwargs, node)
    name = ast.unparse(node.func) if hasattr(ast, "unparse") else "function"
    raise tr.err(node.func, f"call of an unknown function `{name}` (supported: the numpy "
                 "functions and builtins listed in docs/frontend_python.md, and Python "
                 "functions whose source is available)")


def _bind_args(tr: Translator, fnode: Any, args: list, kwargs: dict, node: ast.AST,
               name: str, defaults: Callable[[int], Any]) -> list[tuple[str, Any, ast.AST]]:
    a = fnode.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        raise tr.err(node, f"`{name}`: *args, **kwargs and keyword-only parameters are not "
                     "supported")
    pnames = [p.arg for p in a.args]
    vals: dict[str, Any] = dict(zip(pnames, args))
    if len(args) > len(pnames):
        raise tr.err(node, f"`{name}` takes {len(pnames)} arguments, got {len(args)}")
    for k, v in kwargs.items():
        if k not in pnames or k in vals:
            raise tr.err(node, f"`{name}` got an unexpected or repeated argument `{k}`")
        vals[k] = v
    nd = len(a.defaults)
    for i, p in enumerate(pnames):
        if p not in vals:
            j = i - (len(pnames) - nd)
            if j < 0:
                raise tr.err(node, f"`{name}` is missing the argument `{p}`")
            vals[p] = defaults(j)
    return [(p, vals[p], q) for p, q in zip(pnames, a.args)]


def _materializable(v: Any) -> bool:
    if isinstance(v, (Val, Weak)):
        return True
    if isinstance(v, PyTuple):
        return all(_materializable(x) for x in v.items)
    return False


def _single_return(fnode: Any) -> ast.expr | None:
    if isinstance(fnode, ast.Lambda):
        return fnode.body
    stmts = [s for s in fnode.body if not (isinstance(s, ast.Expr)
                                           and isinstance(s.value, ast.Constant))]
    if len(stmts) == 1 and isinstance(stmts[0], ast.Return) and stmts[0].value is not None:
        return stmts[0].value
    return None


def call_closure(tr: Translator, clo: Closure, args: list, kwargs: dict, node: ast.AST) -> Any:
    fnode = clo.node
    bound = _bind_args(tr, fnode, args, kwargs, node, clo.name,
                       lambda j: expr(tr, fnode.args.defaults[j], clo.env))
    body = _single_return(fnode)
    if body is not None:  # a one-expression function: inline it (it may return a function)
        if any(c is clo for c in tr.inline_stack):
            raise tr.err(node, f"the nested function `{clo.name}` calls itself; define "
                         "recursive functions at module level")
        env = dict(clo.env)
        env["$src"] = clo.src
        for p, v, _ in bound:
            env[p] = v
        tr.inline_stack.append(clo)
        try:
            return expr(tr, body, env)
        finally:
            tr.inline_stack.pop()
    if any(c is clo for c in tr.inline_stack):
        raise tr.err(node, f"the nested function `{clo.name}` calls itself; define "
                     "recursive functions at module level")
    tr.inline_stack.append(clo)
    try:
        return call_local(tr, fnode, clo.src, dict(clo.env), bound, clo.name, node)
    finally:
        tr.inline_stack.pop()


def call_local(tr: Translator, fnode: Any, src: Any, env: dict, bound: list, name: str,
               node: ast.AST) -> Any:
    """A multi-statement function called here: a local IR function over its value arguments."""
    env["$src"] = src
    params, actuals = [], []
    for p, v, pnode in bound:
        if _materializable(v):
            m = tr.mat(v, node)
            var = Var(p, m.ty)
            params.append(var)
            actuals.append(m.expr)
            env[p] = tr.wrap_param(var, m.ty)
        else:
            env[p] = v
    outer = tr.ctx
    ctx = _FnCtx(src, name)
    tr.ctx = ctx
    try:
        body = tr.function_body(fnode, env)
    finally:
        tr.ctx = outer
    ret = tr.merged_ret(ctx, fnode)
    from relay_ir.expr import Function
    fv = outer.bind(Function(tuple(params), body, ret, span=src.span(fnode)), name)
    r = outer.bind(Call(fv, tuple(actuals), span=outer.src.span(node)), "v")
    return tr.wrap_param(r, ret)


def call_pyfunction(tr: Translator, f: PyFunction, args: list, kwargs: dict,
                    node: ast.AST) -> Any:
    from relay_ir.frontend.python import _get_source
    fn = f.fn
    fnode, src = _get_source(fn)
    defaults = fn.__defaults__ or ()
    bound = _bind_args(tr, fnode, args, kwargs, node, fn.__name__,
                       lambda j: from_py(defaults[j]))
    ret_expr = _single_return(fnode)
    if isinstance(ret_expr, ast.Lambda):  # returns a closure: inlined, not a global
        env = {"$src": src}
        for p, v, _ in bound:
            env[p] = v
        return expr(tr, ret_expr, env)
    if all(_materializable(v) for _, v, _ in bound):
        vals = [tr.mat(v, node) for _, v, _ in bound]
        gv, ret = tr.translate_global(fn, [v.ty for v in vals], node_src=(fnode, src))
        if ret is None:
            from relay_ir.frontend.python import RecursiveTypeUnknown
            e = tr.err(node, f"cannot infer the return type of the recursive function "
                         f"`{fn.__name__}`: put a base case (a `return` that does not "
                         "recurse) before the recursive call")
            raise RecursiveTypeUnknown(e.message, e.span)
        r = tr.ctx.bind(Call(gv, tuple(v.expr for v in vals), span=tr.ctx.src.span(node)),
                        "v")
        return tr.wrap_param(r, ret)
    env = {}
    return call_local(tr, fnode, src, env, bound, fn.__name__, node)
