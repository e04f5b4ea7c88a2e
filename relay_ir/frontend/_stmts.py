"""Statements of the Python frontend: assignments, ``if``, loops, ``return``/``break``/``continue``.

``block(tr, stmts, env, tail)`` translates a statement list into the current let scope and
returns the expression the block ends with: the value of a ``return``, a loop exit or self
call for ``break``/``continue``, or ``tail(env)`` when control falls off the end. Passing the
continuation as ``tail`` is what turns jumps into calls (Myia's construction).
"""
from __future__ import annotations

import ast
from typing import Any, Callable

from relay_ir.expr import Call, Expr, Function, If, Tuple, TupleGetItem, Var
from relay_ir.frontend.python import (_UNSUPPORTED_STMT, Closure, PyFunction, PyTuple, Static,
                                      Translator, Val, Weak, _Loop, _merge_types, _ty_str)
from relay_ir.traversal import build_lets
from relay_ir.ty import TensorType, TupleType, Type

_MUTATING_METHODS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
                     "update", "setdefault", "add", "discard", "popitem", "fill", "resize",
                     "itemset", "put", "setfield", "sort"}


# ----------------------------------------------------------------------------- AST facts
def _walk_stmts(stmts: list[ast.stmt]):
    """Every statement nested in ``stmts`` (not inside nested function definitions)."""
    stack = list(reversed(stmts))
    while stack:
        s = stack.pop()
        yield s
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for f in ("orelse", "finalbody", "body"):
            sub = getattr(s, f, None)
            if isinstance(sub, list):
                stack.extend(reversed(sub))


def _target_names(t: ast.AST, out: list[str]) -> None:
    stack = [t]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name):
            if n.id not in out:
                out.append(n.id)
        elif isinstance(n, (ast.Tuple, ast.List)):
            stack.extend(reversed(n.elts))
        elif isinstance(n, ast.Starred):
            stack.append(n.value)


def assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Names bound by ``stmts`` (assignments, loop targets, nested defs), in order."""
    out: list[str] = []
    for s in _walk_stmts(stmts):
        if isinstance(s, ast.Assign):
            for t in s.targets:
                _target_names(t, out)
        elif isinstance(s, (ast.AugAssign, ast.AnnAssign)):
            _target_names(s.target, out)
        elif isinstance(s, ast.For):
            _target_names(s.target, out)
        elif isinstance(s, ast.FunctionDef):
            if s.name not in out:
                out.append(s.name)
    return out


def has_jump(stmts: list[ast.stmt]) -> bool:
    """Whether ``stmts`` hold a ``return``, or a ``break``/``continue`` of the enclosing loop."""
    stack: list[tuple[ast.stmt, bool]] = [(s, False) for s in stmts]
    while stack:
        s, in_loop = stack.pop()
        if isinstance(s, ast.Return):
            return True
        if isinstance(s, (ast.Break, ast.Continue)) and not in_loop:
            return True
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        inner = in_loop or isinstance(s, (ast.While, ast.For))
        for f in ("body", "orelse", "finalbody"):
            sub = getattr(s, f, None)
            if isinstance(sub, list):
                stack.extend((x, inner) for x in sub)
    return False


def has_return(stmts: list[ast.stmt]) -> bool:
    """Whether ``stmts`` hold a ``return`` (not counting nested function definitions)."""
    return any(isinstance(s, ast.Return) for s in _walk_stmts(stmts))


def always_jumps(stmts: list[ast.stmt]) -> bool:
    """Whether every path through ``stmts`` ends in ``return``, ``break`` or ``continue``."""
    while stmts:
        last = stmts[-1]
        if isinstance(last, (ast.Return, ast.Break, ast.Continue)):
            return True
        if isinstance(last, ast.If):
            if not always_jumps(last.orelse):
                return False
            stmts = last.body
            continue
        return False
    return False


# ----------------------------------------------------------------------------- joins
def join_values(tr: Translator, name: str, vals: list[Any], node: ast.AST
                ) -> tuple[Any, list[Expr] | None, Type | None]:
    """Values of one variable on several paths: ``(static, None, None)`` when all are the same
    Python object, else ``(None, exprs per path, merged type)``."""
    first = vals[0]
    if all(v is first for v in vals) and not isinstance(first, Val):
        return first, None, None
    if all(isinstance(v, Weak) for v in vals) and all(v.value == first.value and
                                                       type(v.value) is type(first.value)
                                                       for v in vals):
        return first, None, None
    dtype = None
    for v in vals:
        if isinstance(v, Val) and isinstance(v.ty, TensorType):
            dtype = v.ty.dtype
            break
    mats = []
    for v in vals:
        if isinstance(v, (Closure, PyFunction, Static)):
            raise tr.err(node, f"`{name}` is bound to a function or Python object on one path "
                         "and to something else on another; only values can be joined")
        mats.append(tr.mat(v, node, dtype if isinstance(v, Weak) else None))
    ty = mats[0].ty
    for m in mats[1:]:
        merged = _merge_types(ty, m.ty)
        if merged is None:
            raise tr.err(node, f"`{name}` has type {_ty_str(ty)} on one path and "
                         f"{_ty_str(m.ty)} on another")
        ty = merged
    return None, [m.expr for m in mats], ty


def _rename_last(tr: Translator, v: Any, name: str) -> Any:
    """Give the binding that produced ``v`` the Python variable's name (readable IR)."""
    if not isinstance(v, Val) or not isinstance(v.expr, Var):
        return v
    scope = tr.ctx.scopes[-1]
    if scope and scope[-1][0] is v.expr and v.expr.name_hint in ("v", "if", "loop"):
        nv = Var(name)
        scope[-1] = (nv, scope[-1][1])
        # NOTE: in place, so every holder of this value (`a = b = e`, a tuple) sees the
        # renamed binder; nothing built so far refers to the old one (it was the last binding)
        v.expr = nv
    return v


def assign(tr: Translator, target: ast.AST, v: Any, env: dict) -> None:
    """Bind ``target`` (a name or a tuple of targets) to ``v``."""
    stack = [(target, v)]
    while stack:
        t, val = stack.pop()
        if isinstance(t, ast.Name):
            env[t.id] = _rename_last(tr, val, t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            if isinstance(val, Val) and isinstance(val.ty, TupleType):
                val = tr.wrap_param(val.expr, val.ty)
            if isinstance(val, Val) and isinstance(val.ty, TensorType) and val.ty.shape \
                    and isinstance(val.ty.shape[0], int):
                from relay_ir.frontend._exprs import unstack
                val = unstack(tr, val, t)
            if not isinstance(val, PyTuple):
                raise tr.err(t, "cannot unpack this value into several names")
            if len(val.items) != len(t.elts):
                raise tr.err(t, f"cannot unpack {len(val.items)} values into "
                             f"{len(t.elts)} names")
            for sub, item in zip(t.elts, val.items):
                stack.append((sub, item))
        elif isinstance(t, ast.Subscript):
            raise tr.err(t, "item assignment (`x[...] = v`) is not supported: arrays and "
                         "tuples are immutable here; build a new value (e.g. np.where, "
                         "np.concatenate)")
        elif isinstance(t, ast.Attribute):
            raise tr.err(t, "attribute assignment (mutation of an object) is not supported")
        elif isinstance(t, ast.Starred):
            raise tr.err(t, "starred assignment is not supported")
        else:
            raise tr.err(t, f"cannot assign to {type(t).__name__}")


def _lookup(tr: Translator, name: str, env: dict, node: ast.AST) -> Any:
    from relay_ir.frontend._exprs import lookup
    return lookup(tr, name, env, node)


# ----------------------------------------------------------------------------- block
def _branch(tr: Translator, stmts: list[ast.stmt], env: dict, tail: Callable) -> Expr:
    tr.ctx.open()
    body = block(tr, stmts, dict(env), tail)
    return tr.ctx.close(body)


def block(tr: Translator, stmts: list[ast.stmt], env: dict, tail: Callable[[dict], Expr]
          ) -> Expr:
    """See the module docstring."""
    ctx = tr.ctx
    stmts = list(stmts)
    # NOTE: `if c: <jump>` followed by more statements continues HERE, in a scope for the
    # else side, instead of recursing: guard chains cost no Python stack. Each such `if` is
    # a frame (condition, the jumping side's expression, which side jumps, span).
    frames: list[tuple[Expr, Expr, bool, Any]] = []

    def finish(x: Expr) -> Expr:
        for c, other, else_jumps, span in reversed(frames):
            x = ctx.close(x)
            x = If(c, x, other, span=span) if else_jumps else If(c, other, x, span=span)
        return x

    i = 0
    while i < len(stmts):
        s = stmts[i]
        i += 1
        t = type(s)
        if t in _UNSUPPORTED_STMT:
            raise tr.err(s, f"{_UNSUPPORTED_STMT[t]} is not supported in a relay_ir function")
        if t is ast.Pass:
            continue
        if t is ast.Expr:
            val = s.value
            if isinstance(val, ast.Constant):
                continue  # a docstring
            if isinstance(val, ast.Call) and isinstance(val.func, ast.Attribute) \
                    and val.func.attr in _MUTATING_METHODS:
                raise tr.err(val, f"`.{val.func.attr}(...)` mutates a list or object; "
                             "mutation is not supported (build a new tuple instead)")
            tr.expr(val, env)
            continue
        if t is ast.Assign:
            v = tr.expr(s.value, env)
            for target in s.targets:
                assign(tr, target, v, env)
            continue
        if t is ast.AnnAssign:
            if s.value is None:
                continue
            assign(tr, s.target, tr.expr(s.value, env), env)
            continue
        if t is ast.AugAssign:
            target = s.target
            if not isinstance(target, ast.Name):
                assign(tr, target, None, env)  # raises the item/attribute message
            cur = _lookup(tr, target.id, env, target)
            rhs = tr.expr(s.value, env)
            if type(s.op) is ast.MatMult:
                from relay_ir.frontend._exprs import matmul
                v = matmul(tr, cur, rhs, s)
            elif type(s.op) in _binops():
                v = tr.binop(type(s.op), cur, rhs, s)
            else:
                raise tr.err(s, f"the operator {type(s.op).__name__} is not supported")
            assign(tr, target, v, env)
            continue
        if t is ast.FunctionDef:
            if s.decorator_list:
                raise tr.err(s.decorator_list[0], "decorators are not supported")
            clo = Closure(s, env, env.get("$src") or ctx.src, s.name)
            env[s.name] = clo
            clo.env = dict(env)
            continue
        if t is ast.Return:
            if s.value is None:
                raise tr.err(s, "`return` without a value: a relay_ir function returns a value")
            if any(lp.after is None for lp in ctx.loops):
                raise tr.err(s, "`return` inside this loop is not supported")  # NOTE: unreachable
            v = tr.mat(tr.expr(s.value, env), s.value)
            ctx.ret_types.append(v.ty)
            return finish(v.expr)
        if t is ast.Break or t is ast.Continue:
            if not ctx.loops:
                raise tr.err(s, f"`{'break' if t is ast.Break else 'continue'}` outside a loop")
            loop = ctx.loops[-1]
            return finish(loop_exit(tr, loop, env, s) if t is ast.Break
                          else loop_next(tr, loop, env, s))
        if t is ast.If:
            cond = tr.truth(tr.expr(s.test, env), s.test)
            if isinstance(cond, Weak):  # decided while translating
                stmts = (s.body if cond.value else s.orelse) + stmts[i:]
                i = 0
                continue
            rest = stmts[i:]
            if not has_jump(s.body) and not has_jump(s.orelse):
                if_join_tuple(tr, s, cond, env)
                continue
            if not rest:
                return finish(If(cond.expr, _branch(tr, s.body, env, tail),
                                 _branch(tr, s.orelse, env, tail), span=ctx.src.span(s)))
            jb, je = always_jumps(s.body), always_jumps(s.orelse)
            if jb or je:
                other = _branch(tr, s.body if jb else s.orelse, env, tail)
                frames.append((cond.expr, other, je and not jb, ctx.src.span(s)))
                ctx.open()
                stmts = (s.orelse if jb else s.body) + rest
                i = 0
                continue
            return finish(if_join_function(tr, s, cond, rest, env, tail))
        if t is ast.While or t is ast.For:
            if s.orelse:
                raise tr.err(s.orelse[0], "`else` on a loop is not supported")
            if t is ast.For and not _is_range(s.iter):
                unrolled = unroll_for(tr, s, env)
                stmts = unrolled + stmts[i:]
                i = 0
                continue
            if has_return(s.body):
                return finish(translate_loop(tr, s, env, stmts[i:], tail))
            translate_loop(tr, s, env)
            continue
        raise tr.err(s, f"the statement {t.__name__} is not supported")
    return finish(tail(env))


def _binops() -> dict:
    from relay_ir.frontend.python import _BINOPS
    return _BINOPS


# ----------------------------------------------------------------------------- if
def _translate_branch(tr: Translator, stmts: list[ast.stmt], env: dict
                      ) -> tuple[list, dict]:
    """A branch without jumps in its own scope: its bindings and its final environment."""
    tr.ctx.open()
    final: dict = {}

    def keep(e: dict) -> Expr:
        final.update(e)
        return Tuple(())
    block(tr, stmts, dict(env), keep)
    return tr.ctx.scopes.pop(), final


def if_join_tuple(tr: Translator, s: ast.If, cond: Val, env: dict) -> None:
    """``if`` without jumps: every branch yields the variables they assign, as a tuple.

    An ``elif`` chain is walked as a list (no recursion per ``elif``): each ``elif`` test is
    evaluated in the scope of the previous ``else``, and the nested ``If`` is built inside out.
    """
    ctx = tr.ctx
    # levels: (condition or None for a test decided while translating, body scope, final env)
    levels: list[tuple[Any, list, dict | None]] = []
    body_scope, fin = _translate_branch(tr, s.body, env)
    levels.append((cond, body_scope, fin))
    assigned = assigned_names(s.body)
    orelse = s.orelse
    while len(orelse) == 1 and isinstance(orelse[0], ast.If):
        nxt = orelse[0]
        ctx.open()  # the scope of the previous `else`: it evaluates this test
        c = tr.truth(tr.expr(nxt.test, env), nxt.test)
        if isinstance(c, Weak):
            levels.append((None, [], None))
            orelse = nxt.body if c.value else nxt.orelse
            continue
        body_scope, fin = _translate_branch(tr, nxt.body, env)
        levels.append((c, body_scope, fin))
        assigned += assigned_names(nxt.body)
        orelse = nxt.orelse
    else_scope, else_fin = _translate_branch(tr, orelse, env)
    assigned += assigned_names(orelse)
    finals = [lv[2] for lv in levels if lv[2] is not None] + [else_fin]
    names = []
    for n in assigned:
        if n not in names and all(n in f for f in finals):
            names.append(n)
    dyn: list[tuple[str, list[Expr], Type]] = []
    for n in names:
        static, exprs, ty = join_values(tr, n, [f[n] for f in finals], s)
        if exprs is None:
            env[n] = static
        else:
            dyn.append((n, exprs, ty))  # type: ignore[arg-type]

    def out(k: int) -> Expr:
        if len(dyn) == 1:
            return dyn[0][1][k]
        return Tuple(tuple(d[1][k] for d in dyn))
    npaths = len(finals)
    inner: Expr = build_lets(else_scope, out(npaths - 1))
    path = npaths - 2
    for c, body_scope, fin in reversed(levels[1:]):
        scope = ctx.scopes.pop()
        if c is not None:
            inner = If(c.expr, build_lets(body_scope, out(path)), inner)
            path -= 1
        inner = build_lets(scope, inner)
    if not dyn:
        return  # NOTE: the branches only computed values nobody reads
    r = ctx.bind(If(cond.expr, build_lets(levels[0][1], out(0)), inner, span=ctx.src.span(s)),
                 dyn[0][0] if len(dyn) == 1 else "if")
    if len(dyn) == 1:
        env[dyn[0][0]] = tr.wrap_param(r, dyn[0][2])
        return
    for k, (n, _, ty) in enumerate(dyn):
        env[n] = tr.wrap_param(ctx.bind(TupleGetItem(r, k), n), ty)


def if_join_function(tr: Translator, s: ast.If, cond: Val, rest: list[ast.stmt], env: dict,
                     tail: Callable) -> Expr:
    """``if`` with jumps where both branches may fall through: the rest of the block becomes a
    local function ``%join`` that both branches call with the variables they assign."""
    ctx = tr.ctx
    in_both = set(assigned_names(s.body)) & set(assigned_names(s.orelse))
    carried = [n for n in assigned_names(s.body + s.orelse) if n in env or n in in_both]
    jvar = Var("join")
    calls: list[list[Any]] = []

    def jtail(e: dict) -> Expr:
        for n in carried:
            if n not in e:
                raise tr.err(s, f"`{n}` is assigned on some paths through this `if` but not "
                             "on all of those that continue after it")
        vals = [e[n] for n in carried]
        calls.append(vals)
        return Call(jvar, tuple(tr.mat(v, s).expr for v in vals), span=ctx.src.span(s))
    b0 = _branch(tr, s.body, env, jtail)
    b1 = _branch(tr, s.orelse, env, jtail)
    params = []
    env_j = dict(env)
    for k, n in enumerate(carried):
        static, _exprs, ty = join_values(tr, n, [c[k] for c in calls], s)
        if static is not None:
            raise tr.err(s, f"`{n}` must be a run-time value where the branches join")
        p = Var(n, ty)
        params.append(p)
        env_j[n] = tr.wrap_param(p, ty)
    ctx.open()
    jbody = block(tr, rest, env_j, tail)
    ctx.scopes[-2].append((jvar, Function(tuple(params), ctx.close(jbody))))
    return If(cond.expr, b0, b1, span=ctx.src.span(s))


# ----------------------------------------------------------------------------- loops
def loop_exit(tr: Translator, loop: _Loop, env: dict, node: ast.AST) -> Expr:
    """``break`` (or the loop condition failing): return the carried variables."""
    vals = [tr.mat(env[n], node, loop.dtypes[k] if isinstance(env[n], Weak) else None)
            for k, n in enumerate(loop.carried)]
    loop.out_types.append([v.ty for v in vals])
    loop.exits += 1
    if loop.after is not None:
        return Call(loop.after, tuple(v.expr for v in vals), span=tr.ctx.src.span(node))
    return Tuple(tuple(v.expr for v in vals))


def loop_next(tr: Translator, loop: _Loop, env: dict, node: ast.AST) -> Expr:
    """``continue`` (or the end of the body): the self call with the carried variables."""
    if loop.step is not None:
        env = dict(env)
        loop.step(env)
    vals = [tr.mat(env[n], node, loop.dtypes[k] if isinstance(env[n], Weak) else None)
            for k, n in enumerate(loop.carried)]
    loop.out_types.append([v.ty for v in vals])
    return Call(loop.fvar, tuple(v.expr for v in vals), span=tr.ctx.src.span(node))


def _is_range(it: ast.expr) -> bool:
    return isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"


def unroll_for(tr: Translator, s: ast.For, env: dict) -> list[ast.stmt]:
    """``for v in <tuple, list or array with a static first dimension>``: the body once per
    item, with ``v`` bound to it (no ``break``/``continue``)."""
    seq = tr.expr(s.iter, env)
    if isinstance(seq, Val) and isinstance(seq.ty, TupleType):
        seq = tr.wrap_param(seq.expr, seq.ty)
    if isinstance(seq, Val) and isinstance(seq.ty, TensorType) and seq.ty.shape \
            and isinstance(seq.ty.shape[0], int):
        from relay_ir.frontend._exprs import unstack
        seq = unstack(tr, seq, s.iter)
    if not isinstance(seq, PyTuple):
        raise tr.err(s.iter, "`for` loops iterate over `range(...)`, a tuple or list, or an "
                     "array with a static first dimension")
    if has_jump(s.body):
        raise tr.err(s, "`break`, `continue` and `return` are supported only in loops over "
                     "`range(...)`")
    out: list[ast.stmt] = []
    for k in range(len(seq.items)):
        name = f"$item{id(s)}_{k}"
        env[name] = seq.items[k]
        out.append(ast.copy_location(ast.Assign(
            targets=[s.target], value=ast.copy_location(ast.Name(id=name, ctx=ast.Load()),
                                                        s.iter)), s))
        out.extend(s.body)
    return out


def _range_args(tr: Translator, s: ast.For, env: dict) -> tuple[Any, Any, Any]:
    it = s.iter
    from relay_ir.frontend._exprs import lookup
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and not it.keywords
            and 1 <= len(it.args) <= 3):
        raise tr.err(it, "`for` loops must iterate over `range(...)`")
    f = lookup(tr, it.func.id, env, it.func)
    if not (isinstance(f, Static) and f.obj is range):
        raise tr.err(it, "`for` loops must iterate over `range(...)`")
    args = [tr.expr(a, env) for a in it.args]
    for a, n in zip(args, it.args):
        if not (isinstance(a, Weak) and isinstance(a.value, int)) and not (
                isinstance(a, Val) and isinstance(a.ty, TensorType) and a.ty.shape == ()
                and a.ty.dtype.startswith(("int", "uint"))):
            raise tr.err(n, "range(...) takes integers")
    if len(args) == 1:
        return Weak(0), args[0], Weak(1)
    if len(args) == 2:
        return args[0], args[1], Weak(1)
    if isinstance(args[2], Weak) and args[2].value == 0:
        raise tr.err(it.args[2], "range() step must not be zero")
    return args[0], args[1], args[2]


def translate_loop(tr: Translator, s: ast.While | ast.For, env: dict,
                   rest: list[ast.stmt] | None = None, tail: Callable | None = None
                   ) -> Expr | None:
    """One self-recursive local function per loop (see the module docstring of python.py).

    With ``rest`` (the body holds a ``return``), the statements after the loop become a local
    function ``%after`` over the loop variables, the loop's exits call it, and the loop call
    is returned as the block's result: every path of the loop function then returns what the
    Python function returns.
    """
    ctx = tr.ctx
    cps = rest is not None
    ret_start = len(ctx.ret_types)
    outer = env
    is_for = isinstance(s, ast.For)
    carried = [n for n in assigned_names(s.body) if n in env]
    step_fn = None
    if is_for:
        if not isinstance(s.target, ast.Name):
            raise tr.err(s.target, "the target of a `for` loop must be a name")
        start, stop, step = _range_args(tr, s, env)
        counter = f"${s.target.id}"
        env = dict(env)
        env[counter] = start if isinstance(start, Val) else tr.mat(start, s, "int32")
        if isinstance(start, Weak):
            env[counter] = Val(env[counter].expr, env[counter].ty, True)
        if s.target.id in env and s.target.id not in carried:
            carried.append(s.target.id)
        carried.append(counter)
        negative = isinstance(step, Weak) and step.value < 0

        def step_fn(e: dict) -> None:
            e[counter] = tr.binop(ast.Add, e[counter], step, s)
    init = [env[n] for n in carried]
    dtypes: list[str | None] = [None] * len(carried)
    for k, v in enumerate(init):
        if isinstance(v, (Closure, PyFunction, Static)):
            raise tr.err(s, f"`{carried[k]}` holds a function or Python object and is "
                         "reassigned in the loop; only values can be loop variables")
    types = [tr.mat(v, s).ty for v in init]
    kind = "for_loop" if is_for else "while_loop"
    for _attempt in range(6):
        del ctx.ret_types[ret_start:]
        fvar = Var(kind)
        loop = _Loop(fvar, carried, step_fn)
        if cps:
            loop.after = Var("after")
        loop.dtypes = [t.dtype if isinstance(t, TensorType) else None for t in types]
        params = [Var(n.lstrip("$"), t)
                  for n, t in zip(carried, types)]
        env2 = dict(env)
        for n, p, t, v0 in zip(carried, params, types, init):
            env2[n] = tr.wrap_param(p, t)
            if isinstance(env2[n], Val) and (isinstance(v0, Weak) or getattr(v0, "weak", 0)):
                env2[n].weak = True
        ctx.loops.append(loop)
        ctx.open()
        try:
            if is_for:
                cmp = ast.Gt if negative else ast.Lt
                cond = tr.compare(cmp, env2[counter], stop, s.iter)
            else:
                cond = tr.truth(tr.expr(s.test, env2), s.test)
            if isinstance(cond, Weak) and not cond.value:
                fbody = loop_exit(tr, loop, env2, s)
            else:
                ctx.open()
                e3 = dict(env2)
                if is_for:
                    e3[s.target.id] = e3[counter]
                body = ctx.close(block(tr, s.body, e3, lambda e: loop_next(tr, loop, e, s)))
                if isinstance(cond, Weak):
                    fbody = body
                else:
                    fbody = If(cond.expr, body, loop_exit(tr, loop, env2, s),
                               span=ctx.src.span(s))
            fbody = ctx.close(fbody)
        finally:
            ctx.loops.pop()
        new = list(types)
        for outs in loop.out_types:
            for k, u in enumerate(outs):
                m = _merge_types(new[k], u)
                if m is None and isinstance(init[k], Weak) and isinstance(u, TensorType) \
                        and isinstance(new[k], TensorType) and new[k].shape == u.shape:
                    m = u  # NOTE: a Python number's variable takes the dtype it meets
                if m is None:
                    raise tr.err(s, f"loop variable `{carried[k].lstrip('$')}` changes type in "
                                 f"the loop: {_ty_str(new[k])} before, {_ty_str(u)} after an "
                                 "iteration")
                new[k] = m
        if new == types:
            break
        types = new
    else:
        raise tr.err(s, "the types of the loop variables do not settle")
    if cps and loop.exits == 0:  # `while True` without `break`: only returns leave it
        ret = tr.merged_ret(ctx, s)
    elif cps:
        aparams = [Var(n.lstrip("$"), t) for n, t in zip(carried, types)]
        env_a = dict(outer)
        for n, p, t in zip(carried, aparams, types):
            if not n.startswith("$"):
                env_a[n] = tr.wrap_param(p, t)
        ctx.open()
        abody = ctx.close(block(tr, rest, env_a, tail))  # type: ignore[arg-type]
        ctx.scopes[-1].append((loop.after, Function(tuple(aparams), abody)))
        ret = tr.merged_ret(ctx, s)
    else:
        ret = TupleType(tuple(types))
    ctx.scopes[-1].append((fvar, Function(tuple(params), fbody, ret, span=ctx.src.span(s))))
    args = []
    for v, t in zip(init, types):
        if isinstance(v, Weak):
            args.append(tr.mat(v, s, t.dtype if isinstance(t, TensorType) else None).expr)
        else:
            args.append(tr.mat(v, s).expr)
    if cps:
        return Call(fvar, tuple(args), span=ctx.src.span(s))
    r = ctx.bind(Call(fvar, tuple(args), span=ctx.src.span(s)), kind.replace("_loop", ""))
    for k, (n, t) in enumerate(zip(carried, types)):
        if n.startswith("$"):
            continue
        outer[n] = tr.wrap_param(ctx.bind(TupleGetItem(r, k), n), t)
