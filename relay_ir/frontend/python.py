"""Python functions as relay_ir programs: ``from_python(fn, *example_args) -> IRModule``.

The translation follows Myia's parser (Braun et al.'s SSA construction read as functional
programming): control flow that cannot be expressed as a value becomes functions and calls.

* straight-line code becomes a let-spine; every operation is one typed operator call;
* ``if`` whose branches only assign becomes ``let %t = if (c) {..; (a, b)} else {..}``;
  an ``if`` with ``return``/``break``/``continue`` in it puts the rest of the block in the
  branch that falls through, or, when both may, in a local *join* function both call;
* each ``while`` / ``for .. in range(..)`` loop becomes ONE self-recursive local function whose
  parameters are the loop-carried variables: ``break`` returns them, ``continue`` and the end
  of the body call the function again (a tail call the executor turns into a jump). A carried
  variable whose shape changes from one iteration to the next gets ``?`` dims (a fixpoint);
* nested ``def``/``lambda`` are closures; module-level functions (and recursion) become
  globals, one per argument signature.

Types are tracked while translating, so numpy's promotion rules (NEP 50: a Python number takes
the dtype of the array it meets) and shape-dependent choices (``@``, ``len``, indexing) are
decided statically; see docs/frontend_python.md.
"""
from __future__ import annotations

import ast
import inspect
import linecache
import operator
import textwrap
from typing import Any, Callable

import numpy as np

from relay_ir.errors import DiagnosticError
from relay_ir.expr import Call, Expr, Function, GlobalVar, Tuple, TupleGetItem, Var, const
from relay_ir.module import IRModule, fresh_name
from relay_ir.op import get_opdef
from relay_ir.span import SourceFile, Span
from relay_ir.traversal import build_lets
from relay_ir.ty import ANY, TensorType, TupleType, Type


class FrontendError(DiagnosticError):
    """Python code outside the supported subset, or ill-typed under its rules."""


class RecursiveTypeUnknown(FrontendError):
    """A recursive call met before any ``return`` of its function gave the return type."""


# ----------------------------------------------------------------------------- values
class Val:
    """A run-time value: an IR atom and its (static) type.

    ``weak``: the value is a Python number at run time (a ``range`` counter, a variable that
    started as a Python number), so it promotes like one (NEP 50).
    """

    __slots__ = ("expr", "ty", "weak")

    def __init__(self, expr: Expr, ty: Type, weak: bool = False):
        self.expr = expr
        self.ty = ty
        self.weak = weak


class Weak:
    """A Python number or bool known while translating (NEP 50's weak scalar)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class PyTuple:
    """A tuple (or list display) whose structure is static; items are values."""

    __slots__ = ("items",)

    def __init__(self, items: tuple):
        self.items = tuple(items)


class Static:
    """A Python object used by name only (a module, a numpy function, a builtin, a string)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj


class Closure:
    """A nested ``def`` or ``lambda``: its AST, the environment it closes over, its source."""

    __slots__ = ("node", "env", "src", "name")

    def __init__(self, node: ast.AST, env: dict, src: _Source, name: str):
        self.node = node
        self.env = env
        self.src = src
        self.name = name


class PyFunction:
    """A Python function object met by name (module level): each signature is a global."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable):
        self.fn = fn


class _Source:
    """Where a function's AST came from, to make spans at the right file line and column."""

    def __init__(self, file: SourceFile | None, line_off: int, col_off: int, fname: str,
                 globals_: dict, nonlocals: dict, first_line: int):
        self.file = file
        self.line_off = line_off
        self.col_off = col_off
        self.fname = fname
        self.globals = globals_
        self.nonlocals = nonlocals
        self.first_line = first_line

    def span(self, node: ast.AST) -> Span:
        """The span of ``node`` in the file (the AST was parsed from a dedented excerpt)."""
        line = getattr(node, "lineno", 1) + self.line_off
        col = getattr(node, "col_offset", 0) + 1 + self.col_off
        end_line = (getattr(node, "end_lineno", None) or line - self.line_off) + self.line_off
        end_col = (getattr(node, "end_col_offset", None) or col - 1 - self.col_off) \
            + 1 + self.col_off
        return Span(self.file, line, col, end_line, end_col)


def _python_type_of(x: Any, what: str) -> Type:
    """The IR type of an example argument (see the module docstring of frontend)."""
    if isinstance(x, (bool, np.bool_)):
        return TensorType((), "bool")
    if isinstance(x, np.ndarray):
        return TensorType(tuple(int(d) for d in x.shape), str(x.dtype))
    if isinstance(x, np.generic):
        return TensorType((), str(x.dtype))
    if isinstance(x, int):
        return TensorType((), "int32")
    if isinstance(x, float):
        return TensorType((), "float32")
    if isinstance(x, (tuple, list)):
        return TupleType(tuple(_python_type_of(v, what) for v in x))
    raise FrontendError(f"{what}: cannot pass a {type(x).__name__} to a relay_ir function "
                        "(numpy arrays, numbers, bools and tuples of them are supported)")


def _get_source(fn: Callable) -> tuple[ast.AST, _Source]:
    """Parse ``fn``'s source; a DiagnosticError naming it when the source is not available."""
    code = getattr(fn, "__code__", None)
    if code is None:
        raise FrontendError(f"cannot translate {fn!r}: not a Python function")
    fname = code.co_filename
    where = f"{fn.__name__} (defined at {fname}:{code.co_firstlineno})"
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        raise FrontendError(f"the source of function {where} is not available "
                            "(functions defined by `python -c` or `exec` cannot be translated)",
                            Span(SourceFile(fname, ""), code.co_firstlineno, 1)) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    indent = len(lines[0]) - len(lines[0].lstrip())
    try:
        tree = ast.parse(dedented)
    except SyntaxError:
        try:  # NOTE: a lambda in the middle of an expression line
            tree = ast.parse("(" + dedented.strip() + ")")
        except SyntaxError:
            raise FrontendError(f"cannot parse the source of function {where}") from None
    node = None
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == fn.__name__:
            node = n
            break
    if node is None and fn.__name__ == "<lambda>":
        node = next((n for n in ast.walk(tree) if isinstance(n, ast.Lambda)), None)
    if node is None:
        raise FrontendError(f"cannot find the definition of function {where} in its source")
    full = "".join(linecache.getlines(fname)) or text
    nonlocals = {}
    if fn.__closure__:
        for name, cell in zip(code.co_freevars, fn.__closure__):
            try:
                nonlocals[name] = cell.cell_contents
            except ValueError:
                pass
    src = _Source(SourceFile(fname, full), first - 1, indent, fname, fn.__globals__, nonlocals,
                  code.co_firstlineno)
    return node, src


# ----------------------------------------------------------------------------- dtypes & types
def _is_weak(v: Any) -> bool:
    return isinstance(v, Weak) or (isinstance(v, Val) and v.weak)


def _merge_types(a: Type, b: Type) -> Type | None:
    """The least general type covering ``a`` and ``b`` (differing dims become ``?``)."""
    if a == b:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.dtype != b.dtype or len(a.shape) != len(b.shape):
            return None
        return TensorType(tuple(x if x == y else ANY for x, y in zip(a.shape, b.shape)), a.dtype)
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.fields) == len(b.fields):
        fs = [_merge_types(x, y) for x, y in zip(a.fields, b.fields)]
        if any(f is None for f in fs):
            return None
        return TupleType(tuple(fs))  # type: ignore[arg-type]
    return None


def _ty_str(t: Type) -> str:
    from relay_ir.ty import fmt_type
    return fmt_type(t)


_BINOPS = {
    ast.Add: ("add", operator.add), ast.Sub: ("subtract", operator.sub),
    ast.Mult: ("multiply", operator.mul), ast.Div: ("divide", operator.truediv),
    ast.FloorDiv: ("floor_divide", operator.floordiv), ast.Mod: ("floor_mod", operator.mod),
    ast.Pow: ("power", operator.pow),
}
_CMPOPS = {
    ast.Lt: ("less", operator.lt), ast.LtE: ("less_equal", operator.le),
    ast.Gt: ("greater", operator.gt), ast.GtE: ("greater_equal", operator.ge),
    ast.Eq: ("equal", operator.eq), ast.NotEq: ("not_equal", operator.ne),
}
_UNSUPPORTED_STMT = {
    ast.Try: "a try statement", ast.Global: "a global statement",
    ast.Nonlocal: "a nonlocal statement", ast.With: "a with statement",
    ast.Raise: "a raise statement", ast.Delete: "a del statement",
    ast.Import: "an import statement", ast.ImportFrom: "an import statement",
    ast.ClassDef: "a class definition", ast.AsyncFunctionDef: "an async function",
    ast.AsyncFor: "an async for loop", ast.AsyncWith: "an async with statement",
    ast.Assert: "an assert statement",
}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED_STMT[ast.TryStar] = "a try statement"
if hasattr(ast, "Match"):
    _UNSUPPORTED_STMT[ast.Match] = "a match statement"
_UNSUPPORTED_EXPR = {
    ast.Dict: "a dict", ast.DictComp: "a dict comprehension", ast.Set: "a set",
    ast.SetComp: "a set comprehension", ast.ListComp: "a list comprehension",
    ast.GeneratorExp: "a generator expression", ast.Starred: "a starred expression",
    ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield from",
    ast.JoinedStr: "an f-string", ast.NamedExpr: "an assignment expression (:=)",
}


class _FnCtx:
    """One IR function being built: its let scopes and the types of its returns."""

    def __init__(self, src: _Source, name: str):
        self.src = src
        self.name = name
        self.scopes: list[list[tuple[Var, Expr]]] = [[]]
        self.ret_types: list[Type] = []
        # NOTE: the type of the other branch of a conditional expression whose recursive
        # branch came first (`v if k > 0 else f(k - 1)`): the recursive call's type until a
        # `return` gives the real one
        self.provisional_ret: Type | None = None
        self.loops: list[_Loop] = []

    def bind(self, value: Expr, hint: str = "v") -> Var:
        """Bind ``value`` to a fresh variable in the innermost scope."""
        v = Var(hint)
        self.scopes[-1].append((v, value))
        return v

    def open(self) -> None:
        """Open a nested scope (a branch or a function body)."""
        self.scopes.append([])

    def close(self, body: Expr) -> Expr:
        """Close the innermost scope around ``body``."""
        return build_lets(self.scopes.pop(), body)


class _Loop:
    """The loop being translated: its function variable and its carried names."""

    def __init__(self, fvar: Var, carried: list[str], step: Callable[[dict], None] | None):
        self.fvar = fvar
        self.carried = carried
        self.step = step  # for `for`: advance the hidden counter before the self call
        self.out_types: list[list[Type]] = []
        self.dtypes: list[str | None] = []
        # NOTE: set when the body holds a `return`: the loop then ends by calling the rest of
        # the function (`%after`) instead of returning its variables (continuation style)
        self.after: Var | None = None
        self.exits = 0


# ----------------------------------------------------------------------------- translator
class Translator:
    """Translates Python functions (their AST) into the functions of one IRModule."""

    def __init__(self) -> None:
        self.functions: dict[str, Function] = {}
        self.gvars: dict[tuple, GlobalVar] = {}
        self.pending: dict[tuple, _FnCtx] = {}
        self.names: set[str] = set()
        self.ctx: _FnCtx = None  # type: ignore[assignment]
        self.inline_stack: list[Any] = []

    # -------------------------------------------------------------- errors
    def err(self, node: ast.AST | None, msg: str, src: _Source | None = None) -> FrontendError:
        """A :class:`FrontendError` at ``node``'s Python source span (name and line number in
        the message when the source line cannot be shown)."""
        src = src or self.ctx.src
        if node is None:
            return FrontendError(msg)
        span = src.span(node)
        if src.file is None or src.file.line(span.line) is None:
            return FrontendError(f"{msg} (in function {src.fname}, line {span.line})", span)
        return FrontendError(msg, span)

    # -------------------------------------------------------------- globals
    def global_name(self, base: str) -> str:
        """A global name not used yet: ``base``, ``base_2``, ..."""
        name = fresh_name(base, self.names, sep="_", first=2)
        self.names.add(name)
        return name

    def translate_global(self, fn: Callable, arg_types: list[Type], name: str | None = None,
                         node_src: tuple | None = None) -> tuple[GlobalVar, Type | None]:
        """The global for ``fn`` at ``arg_types`` (translated on first use) and its return
        type; during ``fn``'s own translation (recursion) the return type of the first
        ``return`` translated so far, or None."""
        key = (fn, tuple(arg_types))
        if key in self.gvars:
            gv = self.gvars[key]
            if key in self.pending:  # recursion: the return type seen so far
                pend = self.pending[key]
                rts = pend.ret_types
                return gv, (rts[0] if rts else pend.provisional_ret)
            return gv, self.functions[gv.name_hint].ret_type
        node, src = node_src or _get_source(fn)
        gv = GlobalVar(self.global_name(name or fn.__name__))
        self.gvars[key] = gv
        args = node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise self.err(node, "*args, **kwargs and keyword-only parameters are not "
                           "supported", src)
        pnames = [a.arg for a in args.args]
        if len(pnames) != len(arg_types):
            raise self.err(node, f"function `{fn.__name__}` takes {len(pnames)} arguments, "
                           f"got {len(arg_types)}", src)
        params = [Var(p, t, span=src.span(a)) for p, t, a in zip(pnames, arg_types, args.args)]
        env = {p: self.wrap_param(v, t) for p, v, t in zip(pnames, params, arg_types)}
        outer = self.ctx
        ctx = _FnCtx(src, fn.__name__)
        self.pending[key] = ctx
        self.ctx = ctx
        try:
            body = self.function_body(node, env)
        finally:
            self.ctx = outer
            del self.pending[key]
        ret = self.merged_ret(ctx, node)
        self.functions[gv.name_hint] = Function(tuple(params), body, ret, span=src.span(node))
        return gv, ret

    def merged_ret(self, ctx: _FnCtx, node: ast.AST) -> Type:
        """The return type covering every ``return`` of ``ctx`` (differing dims become ``?``)."""
        ret = ctx.ret_types[0]
        for t in ctx.ret_types[1:]:
            m = _merge_types(ret, t)
            if m is None:
                raise self.err(node, f"function `{ctx.name}` returns values of different types: "
                               f"{_ty_str(ret)} and {_ty_str(t)}", ctx.src)
            ret = m
        return ret

    def wrap_param(self, var: Expr, t: Type) -> Any:
        """A value of type ``t`` held by ``var``: tuples become static tuples of projections."""
        if isinstance(t, TupleType):
            return PyTuple(tuple(self.wrap_param(TupleGetItem(var, i), f)
                                 for i, f in enumerate(t.fields)))
        return Val(var, t)

    def function_body(self, node: ast.AST, env: dict) -> Expr:
        """The body of a ``def`` or ``lambda`` in the current (fresh) function context."""
        ctx = self.ctx
        if isinstance(node, ast.Lambda):
            v = self.mat(self.expr(node.body, env), node.body)
            ctx.ret_types.append(v.ty)
            return ctx.close(v.expr) if len(ctx.scopes) > 1 else build_lets(ctx.scopes[0],
                                                                             v.expr)

        def fall_off(env: dict) -> Expr:
            raise self.err(node, f"function `{ctx.name}` can end without returning a value; "
                           "every path must end in `return <value>`")
        body = self.block(list(node.body), env, fall_off)  # type: ignore[attr-defined]
        return build_lets(ctx.scopes[0], body)

    # -------------------------------------------------------------- materialize
    def mat(self, v: Any, node: ast.AST, dtype: str | None = None) -> Val:
        """``v`` as an IR value (a Python number becomes a constant of the IR's scalar type)."""
        if isinstance(v, Val):
            return v
        if isinstance(v, Weak):
            c = const(v.value, dtype)
            return Val(c, TensorType((), c.dtype))
        if isinstance(v, PyTuple):
            vs = [self.mat(x, node) for x in v.items]
            return Val(Tuple(tuple(x.expr for x in vs)), TupleType(tuple(x.ty for x in vs)))
        what = {Closure: "a function", PyFunction: "a function"}.get(type(v), "this value")
        if isinstance(v, Static):
            what = f"`{getattr(v.obj, '__name__', type(v.obj).__name__)}`"
        raise self.err(node, f"{what} cannot be used as a run-time value here (functions can "
                       "be called and passed to Python functions, not stored, returned or "
                       "carried through `if`/loops)")

    def tensor(self, v: Any, node: ast.AST) -> Val:
        """``v`` as a tensor value (an error for tuples and functions)."""
        v = self.mat(v, node)
        if not isinstance(v.ty, TensorType):
            raise self.err(node, f"expected an array, got a value of type {_ty_str(v.ty)}")
        return v

    # -------------------------------------------------------------- operator calls
    def op(self, name: str, args: list[Val], node: ast.AST, hint: str = "v", **attrs: Any
           ) -> Val:
        """Bind the call of operator ``name``; its type comes from the operator's relation."""
        od = get_opdef(name)
        span = self.ctx.src.span(node)
        try:
            rec = od.make_attrs(attrs, span)
            t = od.type_rel([a.ty for a in args], rec)
        except DiagnosticError as e:
            msg = e.message if e.message.startswith(name) else f"{name}: {e.message}"
            raise self.err(node, msg) from None
        if isinstance(t, tuple):
            t = t[0]
        if t is None:
            raise self.err(node, f"cannot type the call of {name}")
        call = Call(od.op, tuple(a.expr for a in args), rec, span=span)
        return Val(self.ctx.bind(call, hint), t)

    def cast(self, v: Val, dtype: str, node: ast.AST) -> Val:
        """``v`` in ``dtype`` (``v`` itself when it has it)."""
        if v.ty.dtype == dtype:
            return v
        return self.op("cast", [v], node, dtype=dtype)

    def promote(self, vals: list[Any], node: ast.AST, divide: bool = False) -> list[Val]:
        """NEP 50: arrays' dtypes promote; Python numbers are weak (take the arrays' dtype)."""
        keys = []
        all_weak = all(_is_weak(v) for v in vals)
        for v in vals:
            if isinstance(v, Weak):
                keys.append(v.value)
            elif isinstance(v, Val) and v.weak and not all_weak \
                    and isinstance(v.ty, TensorType):
                kind = np.dtype(v.ty.dtype).kind
                keys.append({"b": False, "f": 0.0}.get(kind, 0))
            else:
                keys.append(np.dtype(self.tensor(v, node).ty.dtype))
        try:
            dt = np.result_type(*keys)
        except TypeError as e:
            raise self.err(node, f"cannot combine these dtypes: {e}") from None
        if divide and dt.kind in "biu":
            dt = np.dtype("float32" if all_weak else "float64")
        if dt == np.int64 and all(isinstance(v, Weak) or np.dtype(v.ty.dtype) != np.int64
                                  for v in vals):
            dt = np.dtype("int32")  # NOTE: Python ints with int32 scalars stay int32 (the IR's)
        out = []
        for v in vals:
            if isinstance(v, Weak):
                out.append(self.mat(v, node, str(dt)))
            else:
                out.append(self.cast(self.tensor(v, node), str(dt), node))
        return out

    def binop(self, opn: type, a: Any, b: Any, node: ast.AST) -> Any:
        """``a <op> b``: folded for Python numbers, else promoted and one operator call."""
        name, pyop = _BINOPS[opn]
        if isinstance(a, Weak) and isinstance(b, Weak):
            try:
                return Weak(pyop(a.value, b.value))
            except ArithmeticError as e:
                raise self.err(node, f"{type(e).__name__}: {e}") from None
        if isinstance(a, PyTuple) and isinstance(b, PyTuple) and opn is ast.Add:
            return PyTuple(a.items + b.items)
        x, y = self.promote([a, b], node, divide=opn is ast.Div)
        out = self.op(name, [x, y], node)
        out.weak = _is_weak(a) and _is_weak(b)
        return out

    def compare(self, opn: type, a: Any, b: Any, node: ast.AST) -> Any:
        """``a <cmp> b`` (see :meth:`binop`); the result is bool."""
        name, pyop = _CMPOPS[opn]
        if isinstance(a, Weak) and isinstance(b, Weak):
            return Weak(pyop(a.value, b.value))
        x, y = self.promote([a, b], node)
        return self.op(name, [x, y], node)

    def truth(self, v: Any, node: ast.AST) -> Any:
        """A condition: a Weak (decided now) or a bool scalar Val."""
        if isinstance(v, Weak):
            return Weak(bool(v.value))
        if isinstance(v, PyTuple):
            return Weak(bool(v.items))
        v = self.tensor(v, node)
        if v.ty.shape != ():
            raise self.err(node, f"the truth value of an array of shape "
                           f"{_ty_str(v.ty)} is ambiguous; conditions must be scalars")
        if v.ty.dtype != "bool":
            return self.op("not_equal", [v, self.mat(Weak(0), node, v.ty.dtype)], node)
        return v

    # -------------------------------------------------------------- statements
    def block(self, stmts: list[ast.stmt], env: dict, tail: Callable[[dict], Expr]) -> Expr:
        """Translate ``stmts`` in the current scope; returns the block's result expression."""
        from relay_ir.frontend import _stmts
        return _stmts.block(self, stmts, env, tail)

    # -------------------------------------------------------------- expressions
    def expr(self, node: ast.expr, env: dict) -> Any:
        from relay_ir.frontend import _exprs
        return _exprs.expr(self, node, env)


def _example_types(fn: Callable, args: tuple) -> list[Type]:
    name = getattr(fn, "__name__", "fn")
    return [_python_type_of(a, f"argument {i} of `{name}`") for i, a in enumerate(args)]


def from_python(fn: Callable, *example_args: Any) -> IRModule:
    """The IRModule whose ``@main`` is the Python function ``fn``.

    Parameter types come from ``example_args``: a numpy array gives a tensor of its shape and
    dtype, a Python float ``float32``, an int ``int32``, a bool ``bool``, a tuple a tuple.
    Functions ``fn`` calls become further globals. The module passes InferType. Python outside
    the supported subset (docs/frontend_python.md) is a :class:`FrontendError` (a
    ``DiagnosticError``) at the Python source line.
    """
    from relay_ir import passes
    from relay_ir.frontend._grad import _GradFn
    if isinstance(fn, _GradFn):
        return fn.module(*example_args)
    tr = Translator()
    types = _example_types(fn, example_args)
    node_src = _get_source(fn)
    try:
        tr.translate_global(fn, types, name="main", node_src=node_src)
    except RecursionError:
        # NOTE: the translation recurses only on the nesting of `if`s, loops and functions
        raise FrontendError(f"`{getattr(fn, '__name__', 'fn')}` nests `if`/`elif` chains, "
                            "loops or functions too deeply to translate",
                            node_src[1].span(node_src[0])) from None
    mod = IRModule({n: f for n, f in tr.functions.items()})
    try:
        return passes.InferType()(mod)
    except DiagnosticError as e:
        raise FrontendError(f"the translated program does not type-check: {e.message}",
                            e.span, e.notes) from None


__all__ = ["from_python", "FrontendError", "Translator"]
