"""Tail calls and static memory planning for the Relax VM backend (``runtime.relax_vm``).

Rewrites of the abstract ops of ``relax_vm._Emitter`` (see that class for the op forms),
kept here so that the emitter itself stays small:

**Tail groups (mutual tail recursion in constant stack).** The functions that tail-call each
other directly (globals and closed inner functions: ``@even`` / ``@odd``) form the strongly
connected components of the direct tail-call graph. Each component of two or more functions
becomes ONE VM function ``__rly_group<k>(index, a0, ..., a<W-1>)``: a dispatch on ``index`` at
its top (an ``If`` on an int read from a constant table), then every member's code one after
the other with its registers renumbered (a member's parameters are the shared registers
``a0...``, its other registers a range of its own). A tail call between members is a parallel
move of the arguments into ``a0...`` and a ``Goto`` to the callee's first instruction, so
``@even``/``@odd`` recursion of any length runs in one VM frame. Every member keeps a VM function
under its own name (an entry stub: ``index`` and the padding added, then a call of the group), so
closures of a member, Python entries and calls from outside still work; direct calls emitted by
the backend call the group function itself (no stub in between).

Self tail calls (a function or a closure calling itself in tail position) are jumps too, as
before; all jumps go through :func:`emit_jump` (``("jump", moves, label, post)``), expanded
when written into the fewest register copies (a parallel move: a copy through a temporary only
where a cycle needs one).

**Closure tail calls (a trampoline).** In a program where some inner function calls a closure
value in tail position (:func:`needs_trampoline`; other programs keep plain results), inner
functions (closures and closed inner functions outside tail groups: :func:`is_tramp`) return
``(0, value)``, or a bounce: ``(1, c)`` for a tail
call of the closure ``c`` with no arguments, ``(2, thunk)`` with arguments (``thunk`` a closure
of ``__rly_apply<n>`` over ``c`` and the arguments). Every caller of such a function (closure
invocations, direct calls of inner functions, Python's ``__rly_invoke<n>``) runs
:func:`unwrap`: it invokes bounces until a value comes back, so a chain of closures each ending
in a call of the previous one (reverse-mode AD's backpropagators) runs at constant depth. A
closure of a function outside the convention (a global, a group member, a constructor) calls a
wrapper (``__rly_clo<f>``) that returns ``(0, value)``. TVM frees a chain of nested closures
recursively in C++, so programs that can build chains (:func:`builds_chains`) run on the large
stack thread of ``relax_vm``.

**Static memory planning of first-order regions.** Every kernel output used to get its own
``alloc_storage`` + ``alloc_tensor`` per call. :func:`plan_memory` finds the outputs that
live in one straight-line stretch of a function (defined once; every use in the same basic
block, after the definition) and whose uses are kernel inputs, a branch condition or the
function's return (the activation ends there). Values that escape (passed to a call, captured
by a closure, put in a tuple, an ADT, a reference, moved into another register) keep their own
allocation. The planned values are given slots of storage per activation, allocated at
the function's entry (before the first instruction, so that a self tail jump keeps it): a
value's slot is reused by later values once its last use has passed (best fit, growing a free
slot rather than opening a new one; a kernel never writes a slot one of its inputs occupies).
In a function that loops (a tail jump to itself or within its group) the tensors themselves
(``alloc_tensor`` views of the storage) are made at entry too, so an iteration allocates
nothing for them; elsewhere each planned value takes a view of the shared storage where it is
defined (one VM call instead of two, plus one per slot) where a slot holds two or more
values. TVM kernels take
tensors at byte offset 0 only, so each slot is a storage of its own.

**Loop-carried values.** A kernel output whose only uses besides kernel inputs are the move into
the parameter ``p`` of a self tail jump (``@loop(%i - 1, tanh(%x))``) is double-buffered when
``p`` itself is used only by kernels, conditions, the return and such moves: two buffers made
at entry, and the function body written twice (unrolled by two), each half writing its own
buffer and jumping to the other half, so ``p`` never holds the buffer being written and no
register swaps are needed. The parameter's first value (the caller's) is never written.
"""
from __future__ import annotations

from typing import Any

ALIGN = 64
ENABLED = True       # memory planning on (benchmarks turn it off to compare side by side)
_GROUP = "__rly_group"


# ============================================================================ tail groups
class TailGroup:
    """Functions merged into one VM function (see the module docstring)."""

    def __init__(self, name: str, members: list[int], width: int):
        self.name = name
        self.members = members
        self.index = {f: i for i, f in enumerate(members)}
        self.width = width


def _direct_tail_targets(backend: Any, fidx: int) -> list[int]:
    """The functions ``fidx`` tail-calls directly (statically known callees, itself excluded)."""
    cp = backend.cp
    cf = cp.functions[fidx]
    nfix = cf.nparams + cf.ncap
    out = []
    for ins in cf.code:
        if ins[0] != "tailcall":
            continue
        r = ins[1]
        if r < nfix:
            continue
        init = cf.init[r - nfix]
        if init is None:
            continue
        if init[0] == "global" and init[1] in cp.globals:
            g = cp.globals[init[1]]
        elif init[0] == "fn":
            g = init[1]
        else:
            continue
        if g != fidx:
            out.append(g)
    return out


def tail_groups(backend: Any) -> dict[int, TailGroup]:
    """The tail groups of the program (strongly connected components of two or more functions
    of the direct tail-call graph; iterative Tarjan), keyed by member."""
    cp = backend.cp
    n = len(cp.functions)
    succ = [_direct_tail_targets(backend, f) for f in range(n)]
    index = [-1] * n
    low = [0] * n
    on = [False] * n
    stack: list[int] = []
    comps: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] >= 0 or not succ[root]:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = True
        while work:
            v, i = work[-1]
            if i < len(succ[v]):
                work[-1] = (v, i + 1)
                w = succ[v][i]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on[w] = True
                    work.append((w, 0))
                elif on[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on[w] = False
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    groups: dict[int, TailGroup] = {}
    for k, comp in enumerate(comps):
        if any(cp.functions[f].ncap for f in comp):
            continue        # NOTE: cannot happen (a capturing function is never a direct callee)
        g = TailGroup(f"{_GROUP}{k}", comp, max(cp.functions[f].nparams for f in comp))
        for f in comp:
            groups[f] = g
    return groups


def direct_call(backend: Any, fidx: int, args: list) -> tuple[str, list]:
    """``(VM function name, arguments)`` of a direct call of function ``fidx``: a member of a
    tail group is called through its group (index first, padding last)."""
    g = backend.groups.get(fidx)
    if g is None:
        return backend.name_of(fidx), args
    for m in g.members:
        backend.name_of(m)
    return g.name, [("i", g.index[fidx]), *args, *[("i", 0)] * (g.width - len(args))]


def jumps_to(em: Any, fidx: int) -> bool:
    """Whether a tail call of ``fidx`` from emitter ``em``'s function is a jump."""
    if fidx == em.index:
        return True
    g = em.b.groups.get(em.index)
    return g is not None and em.b.groups.get(fidx) is g


def emit_jump(em: Any, fidx: int, srcs: list, span: Any) -> None:
    """A tail call that is a jump: ``("jump", moves, label, post)`` (moves: ``(dst, operand,
    temporary)``; the destination ``("P", i)`` is the group's i-th shared parameter)."""
    if fidx == em.index:
        moves = [(i, em.operand(r, span), em.tmp()) for i, r in enumerate(srcs)]
        em.ops.append(("jump", moves, 0, []))
        return
    em.b.name_of(fidx)
    moves = [(("P", i), em.operand(r, span), em.tmp()) for i, r in enumerate(srcs)]
    em.ops.append(("jump", moves, ("m", fidx, 0), []))


def expand(ops: list) -> list:
    """The ops with every ``jump`` written as register copies and a ``goto``."""
    if not any(op[0] == "jump" for op in ops):
        return ops
    out: list = []
    for op in ops:
        if op[0] != "jump":
            out.append(op)
            continue
        _, moves, label, post = op
        pending = [[d, s, t] for d, s, t in moves if s != ("r", d)]
        while pending:
            reads = {m[1][1] for m in pending if m[1][0] == "r"}
            for m in pending:
                if m[0] not in reads:
                    out.append(("call", "vm.builtin.copy", [m[1]], m[0]))
                    pending.remove(m)
                    break
            else:
                # NOTE: a cycle: the first destination's value moves to its temporary first
                d, _, t = pending[0]
                out.append(("call", "vm.builtin.copy", [("r", d)], t))
                for m in pending:
                    if m[1] == ("r", d):
                        m[1] = ("r", t)
        for d, s in post:
            out.append(("call", "vm.builtin.copy", [("r", s)], d))
        out.append(("goto", label))
    return out


# ============================================================================ closure calls
def is_tramp(backend: Any, fidx: int) -> bool:
    """Whether function ``fidx`` returns by the closure convention ``(flag, payload)``: every
    inner function (closures and closed inner functions) outside a tail group, in a program
    where some inner function tail-calls a closure value (:func:`needs_trampoline`)."""
    return backend.tramp and backend.cp.functions[fidx].name == "" and \
        fidx not in backend.groups


def needs_trampoline(backend: Any) -> bool:
    """Whether some inner function calls a closure value in tail position (not itself): only
    then do inner functions return by the closure convention (other programs keep plain
    results, and pay nothing)."""
    cp = backend.cp
    for f, cf in enumerate(cp.functions):
        if cf.name != "" or f in backend.groups:
            continue
        nfix = cf.nparams + cf.ncap
        selfs = {cf.nparams + i for i in backend.selfs.get(f, ())}
        for ins in cf.code:
            if ins[0] != "tailcall":
                continue
            r = ins[1]
            if r in selfs:
                continue
            if r < nfix or cf.init[r - nfix] is None:
                return True
    return False


def closure_name(backend: Any, fidx: int) -> str:
    """The VM function a closure of ``fidx`` calls: ``fidx`` itself when it follows the
    closure convention, else a wrapper ``__rly_clo<fidx>`` that returns ``(0, value)``."""
    name = backend.name_of(fidx)
    if not backend.tramp or is_tramp(backend, fidx):
        return name
    backend.clo_wrappers.add(fidx)
    return f"__rly_clo{fidx}"


def _depth_names() -> tuple[str, str]:
    from relay_ir.runtime.relax_vm import _ENTER, _LEAVE
    return _ENTER, _LEAVE


def unwrap(ops: list, tmp: Any, r: int, dst: int) -> None:
    """Append the trampoline: while the result ``r`` of a closure is a bounce ``(1, c)`` (a
    tail call of the closure ``c`` with no arguments) or ``(2, thunk)`` (with arguments),
    invoke it; then ``dst`` = the value of ``(0, value)``. A thunk adds a VM frame: its
    invocation is counted by the depth counter; ``c`` runs where its caller's frame was."""
    enter, leave = _depth_names()
    depth = ("c", ("depth",))
    key = ("tramp", len(ops), r)
    top, done, thunk = key + ("top",), key + ("done",), key + ("thunk",)
    f, p, t = tmp(), tmp(), tmp()
    # NOTE: ffi.RecursiveEq (TVM's C++ runtime) tests the flag: an array constant indexed by
    # it would not serialize for export
    ops += [("label", top),
            ("call", "vm.builtin.tuple_getitem", [("r", r), ("i", 0)], f),
            ("if", f, done),
            ("call", "vm.builtin.tuple_getitem", [("r", r), ("i", 1)], p),
            ("call", "ffi.RecursiveEq", [("r", f), ("i", 1)], t),
            ("if", t, thunk),
            ("call", "vm.builtin.invoke_closure", [("vm",), ("r", p)], r),
            ("goto", top),
            ("label", thunk),
            ("call", enter, [depth], None),
            ("call", "vm.builtin.invoke_closure", [("vm",), ("r", p)], r),
            ("call", leave, [depth], None),
            ("goto", top),
            ("label", done),
            ("call", "vm.builtin.tuple_getitem", [("r", r), ("i", 1)], dst)]


def emit_call(em: Any, target: tuple, args: list, dst: int) -> None:
    """A non-tail call (between the depth counter's calls): a direct call, or an invocation
    of a closure; a result in the closure convention is unwrapped into ``dst``."""
    if target[0] == "direct":
        name, a = direct_call(em.b, target[1], args)
        if not is_tramp(em.b, target[1]):
            em.ops.append(("call", name, a, dst))
            return
    else:
        name, a = "vm.builtin.invoke_closure", [("vm",), ("r", target[1]), *args]
        if not em.b.tramp:
            em.ops.append(("call", name, a, dst))
            return
    r = em.tmp()
    em.ops.append(("call", name, a, r))
    unwrap(em.ops, em.tmp, r, dst)


def emit_bounce(em: Any, target: tuple, srcs: list, span: Any) -> bool:
    """A tail call of a closure value from a function of the closure convention: return a
    bounce to the caller's trampoline (constant stack: the backpropagator chains of
    reverse-mode AD are such calls). False where the call is emitted as call + return."""
    if target[0] != "closure" or not is_tramp(em.b, em.index):
        return False
    args = [em.operand(r, span) for r in srcs]
    t = em.tmp()
    if not args:
        em.ops.append(("call", "vm.builtin.make_tuple", [("i", 1), ("r", target[1])], t))
    else:
        em.b.apply_arities.add(len(args))
        th = em.tmp()
        em.ops.append(("call", "vm.builtin.make_closure",
                       [("f", f"__rly_apply{len(args)}"), ("r", target[1]), *args], th))
        em.ops.append(("call", "vm.builtin.make_tuple", [("i", 2), ("r", th)], t))
    em.ops.append(("rawret", t))
    return True


def _returns(em: Any, ops: list) -> list:
    """A function of the closure convention returns ``(0, value)``; bounces (``rawret``)
    as they are."""
    tramp = is_tramp(em.b, em.index)
    out: list = []
    for op in ops:
        if op[0] == "ret" and tramp:
            t = em.tmp()
            out.append(("call", "vm.builtin.make_tuple", [("i", 0), ("r", op[1])], t))
            out.append(("ret", t))
        elif op[0] == "rawret":
            out.append(("ret", op[1]))
        else:
            out.append(op)
    return out


def write_invoke(em: Any, eb: Any, name: str, n: int, consts: dict) -> None:
    """``(limits, closure, args...)``: reset the depth counter, invoke the closure, unwrap its
    result (how Python calls a function value the program returned)."""
    from relay_ir.runtime.relax_vm import _RESET
    regs = [n + 2]

    def tmp() -> int:
        regs[0] += 1
        return regs[0]
    ops: list = [("call", _RESET, [("c", ("depth",)), ("r", 0)], None),
                 ("call", "vm.builtin.invoke_closure",
                  [("vm",), ("r", 1), *[("r", i + 2) for i in range(n)]], n + 2)]
    dst = n + 2
    if em.b.tramp:
        dst = tmp()
        unwrap(ops, tmp, n + 2, dst)
    ops.append(("ret", dst))
    em.write(eb, name, consts, ops=ops, nin=n + 2,
             names=["limits", "closure"] + [f"a{i}" for i in range(n)])


def write_helpers(backend: Any, eb: Any, em: Any, consts: dict) -> None:
    """The closure wrappers of functions outside the closure convention and the thunks of
    bounced calls with arguments."""
    enter, leave = _depth_names()
    depth = ("c", ("depth",))
    for fidx in sorted(backend.clo_wrappers):
        n = backend.cp.functions[fidx].nparams
        name, args = direct_call(backend, fidx, [("r", i) for i in range(n)])
        ops = [("call", enter, [depth], None),
               ("call", name, args, n),
               ("call", leave, [depth], None),
               ("call", "vm.builtin.make_tuple", [("i", 0), ("r", n)], n + 1),
               ("ret", n + 1)]
        em.write(eb, f"__rly_clo{fidx}", consts, ops=ops, nin=n,
                 names=[f"a{i}" for i in range(n)])
    for n in sorted(backend.apply_arities):
        ops = [("call", "vm.builtin.invoke_closure",
                [("vm",), ("r", 0), *[("r", i + 1) for i in range(n)]], n + 1),
               ("ret", n + 1)]
        em.write(eb, f"__rly_apply{n}", consts, ops=ops, nin=n + 1,
                 names=["closure"] + [f"a{i}" for i in range(n)])


def helper_names(backend: Any) -> list[str]:
    """The names :func:`write_helpers` writes (to declare first)."""
    return [f"__rly_clo{f}" for f in sorted(backend.clo_wrappers)] + \
        [f"__rly_apply{n}" for n in sorted(backend.apply_arities)]


def builds_chains(backend: Any) -> bool:
    """Whether some closure of the program captures a function value (a backpropagator
    capturing the previous one): such chains can be long, and TVM releases a chain of nested
    closures recursively in C++ (a 100,000-long one overflowed an 8 MiB stack)."""
    from relay_ir.ty import FuncType
    from relay_ir.traversal import free_vars
    cp = getattr(backend, "cp", None)
    if cp is None:
        return False       # NOTE: a module loaded from a file: its program is not known here
    for cf in cp.functions:
        if not cf.ncap or cf.func is None:
            continue
        fvs = cp.free_vars.get(cf.func)
        if fvs is None:
            fvs = free_vars(cf.func)
        for v in fvs:
            t = v.checked_type_ or v.type_annotation
            if t is None or _has_func(t, FuncType):
                return True
    return False


def _has_func(t: Any, func_type: type) -> bool:
    from relay_ir.ty import TupleType
    stack = [t]
    while stack:
        x = stack.pop()
        if isinstance(x, func_type):
            return True
        if isinstance(x, TupleType):
            stack.extend(x.fields)
        elif type(x).__name__ in ("RefType", "TypeCall"):
            return True        # NOTE: a reference or an ADT may hold a function: assume so
    return False


def release_on(worker: Any, holder: Any) -> None:
    """Drop ``holder.obj`` on ``worker``'s large-stack thread (without waiting)."""
    import threading
    box = [holder.obj]
    holder.obj = None
    worker.jobs.put((box.clear, [], threading.Event()))


# ============================================================================ writing
def _remap_ops(ops: list, fidx: int, nfix: int, base: int) -> list:
    """A member's ops in its group's register and label numbering."""
    def reg(r: Any) -> Any:
        if type(r) is tuple:
            return 1 + r[1]                    # ("P", i): the group's i-th parameter
        return 1 + r if r < nfix else base + r - nfix

    def label(k: Any) -> Any:
        return k if type(k) is tuple and k[0] == "m" and len(k) == 3 else ("m", fidx, k)

    def arg(a: tuple) -> tuple:
        return ("r", reg(a[1])) if a[0] == "r" else a

    out: list = []
    for op in ops:
        tag = op[0]
        if tag == "call":
            out.append(("call", op[1], [arg(a) for a in op[2]],
                        None if op[3] is None else reg(op[3])))
        elif tag == "label":
            out.append(("label", label(op[1])))
        elif tag == "goto":
            out.append(("goto", label(op[1])))
        elif tag == "if":
            out.append(("if", reg(op[1]), label(op[2])))
        elif tag == "ret":
            out.append(("ret", reg(op[1])))
        else:   # jump
            _, moves, lab, post = op
            out.append(("jump", [(reg(d), arg(s), reg(t)) for d, s, t in moves], label(lab),
                        [(reg(d), reg(s)) for d, s in post]))
    return out


def declarations(backend: Any, emitters: list) -> list[str]:
    """The names of the group functions to declare (besides every emitter's own)."""
    seen: list[str] = []
    for em in emitters:
        g = backend.groups.get(em.index)
        if g is not None and g.name not in seen:
            seen.append(g.name)
    return seen + helper_names(backend)


def write_functions(backend: Any, eb: Any, emitters: list, consts: dict) -> None:
    """Write every emitted function: plain ones as they are, group members as entry stubs
    plus one function per group."""
    by_index = {em.index: em for em in emitters}
    if emitters:
        write_helpers(backend, eb, emitters[0], consts)
    done: set[str] = set()
    for em in emitters:
        name = backend.names[em.index]
        g = backend.groups.get(em.index)
        if g is None:
            em.write(eb, name, consts)
            continue
        n = em.nfix
        with eb.function(name, n, list(em.cf.params)):
            eb.emit_call(g.name, [eb.imm(g.index[em.index]), *[eb.r(i) for i in range(n)],
                                  *[eb.imm(0)] * (g.width - n)], eb.r(n))
            eb.emit_ret(eb.r(n))
        if g.name in done:
            continue
        done.add(g.name)
        members = [by_index[f] for f in g.members]
        base = 1 + g.width
        prologue: list = []
        bodies: list = []
        for m in members:
            body = list(m.ops)
            prologue += _remap_ops(getattr(m, "prologue", []), m.index, m.nfix, base)
            bodies += _remap_ops(body, m.index, m.nfix, base)
            base += m.nregs - m.nfix
        dispatch: list = []
        for j, m in enumerate(members[:-1]):
            c = base
            base += 1
            dispatch.append(("call", "ffi.RecursiveEq", [("r", 0), ("i", j)], c))
            dispatch.append(("if", c, ("dispatch", j + 1)))
            dispatch.append(("goto", ("m", m.index, 0)))
            dispatch.append(("label", ("dispatch", j + 1)))
        dispatch.append(("goto", ("m", members[-1].index, 0)))
        names = ["index"] + [f"a{i}" for i in range(g.width)]
        members[0].write(eb, g.name, consts, ops=prologue + dispatch + bodies, nin=1 + g.width,
                         names=names)


def constant_value(key: tuple) -> Any:
    """The executable constants this module introduces (none: every constant must serialize
    for export)."""
    raise AssertionError(key[0])


# ============================================================================ memory planning
def _uses(op: Any):
    """``(register, kind)`` for every register ``op`` reads."""
    tag = op[0]
    if tag == "call":
        name = op[1]
        if name.startswith("k_"):
            kind = "kernel"
        elif name == "vm.builtin.read_if_cond":
            kind = "cond"
        else:
            kind = "escape"
        for a in op[2]:
            if a[0] == "r":
                yield a[1], kind
    elif tag == "if":
        yield op[1], "cond"
    elif tag == "ret":
        yield op[1], "ret"
    elif tag == "rawret":
        yield op[1], "escape"
    elif tag == "jump":
        for d, s, _t in op[1]:
            if s[0] == "r":
                yield s[1], ("jump", d) if op[2] == 0 else "escape"


def plan_memory(em: Any, loops: bool | None = None) -> dict[str, int]:
    """Plan the kernel outputs of emitter ``em`` (see the module docstring); rewrites
    ``em.ops`` and sets ``em.prologue``. Returns figures: planned values, arena bytes, the
    bytes they took unplanned."""
    em.prologue = []
    stats = {"planned": 0, "arena": 0, "unplanned_bytes": 0, "double": 0, "own_bytes": 0}
    if not ENABLED:
        em.ops = _returns(em, em.ops)
        return stats
    ops = em.ops = _drop_dead(em.ops, em.nfix)
    try:
        return _plan(em, ops, loops, stats)
    finally:
        em.ops = _returns(em, em.ops)
        # NOTE: the bytes of the outputs that keep their own allocation (per execution)
        stats["own_bytes"] = sum(
            _round(_const_shape(op[2][1])[0]) for op in em.ops  # type: ignore[index]
            if op[0] == "call" and op[1] == "vm.builtin.alloc_storage"
            and _const_shape(op[2][1]) is not None)


_PURE = frozenset(("vm.builtin.make_tuple", "vm.builtin.tuple_getitem", "vm.builtin.copy",
                   "vm.builtin.null_value", "vm.builtin.make_closure", "ffi.List",
                   "ffi.ListGetItem"))


def _drop_dead(ops: list, nfix: int) -> list:
    """The ops without the pure calls whose results are never read (the unit value of a
    ``ref_write``, a projection nobody uses), to a fixed point."""
    count: dict[int, int] = {}
    for op in ops:
        for r, _kind in _uses(op):
            count[r] = count.get(r, 0) + 1
        if op[0] == "jump":
            for _d, _s, t in op[1]:
                count[t] = count.get(t, 0) + 1    # NOTE: temporaries of a cycle: kept
    dead = [False] * len(ops)
    changed = True
    while changed:
        changed = False
        for i, op in enumerate(ops):
            if dead[i] or op[0] != "call" or op[1] not in _PURE or op[3] is None:
                continue
            if op[3] < nfix or count.get(op[3], 0):
                continue
            dead[i] = True
            changed = True
            for r, _kind in _uses(op):
                count[r] -= 1
    return [op for i, op in enumerate(ops) if not dead[i]]


def _plan(em: Any, ops: list, loops: bool | None, stats: dict) -> dict:
    targeted: set = set()
    for op in ops:
        if op[0] == "if":
            targeted.add(op[2])
        elif op[0] in ("goto", "jump"):
            targeted.add(op[1] if op[0] == "goto" else op[2])
    block = [0] * len(ops)
    b = 0
    for i, op in enumerate(ops):
        if op[0] == "label" and op[1] in targeted:
            b += 1
        block[i] = b
        if op[0] in ("if", "goto", "ret", "rawret", "jump"):
            b += 1
    defs: dict[int, list[int]] = {}
    uses: dict[int, list[tuple[int, Any]]] = {}
    for i, op in enumerate(ops):
        if op[0] == "call" and op[3] is not None:
            defs.setdefault(op[3], []).append(i)
        elif op[0] == "jump":
            for d, _s, t in op[1]:
                defs.setdefault(d, []).append(i)
                defs.setdefault(t, []).append(i)
        for r, kind in _uses(op):
            uses.setdefault(r, []).append((i, kind))
    if loops is None:
        loops = any(op[0] == "jump" for op in ops)
    # candidates: (start, end, nbytes, shape, dtype, alloc index, out register, jump param)
    cands: list[list] = []
    jump_vals: dict[int, list[list]] = {}     # param -> the candidates moved into it
    for i, op in enumerate(ops):
        if not (op[0] == "call" and op[1] == "vm.builtin.alloc_tensor" and i > 0):
            continue
        args, out = op[2], op[3]
        prev = ops[i - 1]
        st = args[0][1]
        if not (prev[0] == "call" and prev[1] == "vm.builtin.alloc_storage" and prev[3] == st
                and len(uses.get(st, ())) == 1 and defs.get(st) == [i - 1]
                and args[1] == ("i", 0)):
            continue
        shape, dtype = _const_shape(args[2]), args[3][1]
        size = _const_shape(prev[2][1])
        if shape is None or size is None:
            continue        # NOTE: a symbolic shape (relax_shapes): computed at run time
        nbytes = size[0]
        if defs.get(out) != [i] or out < em.nfix:
            continue
        ok, end, param = True, i, None
        for u, kind in uses.get(out, ()):
            if u <= i or block[u] != block[i]:
                ok = False
            elif type(kind) is tuple:
                if param is not None or type(kind[1]) is not int:
                    ok = False
                param = kind[1]
            elif kind == "escape":
                ok = False
            end = max(end, u)
        if not ok:
            continue
        cand = [i, end, nbytes, shape, dtype, i, out, param]
        if param is not None:
            jump_vals.setdefault(param, []).append(cand)
        cands.append(cand)
    # a parameter carrying planned values across a jump: its own uses must not escape
    bad_params = set()
    ptypes = _param_types(em)
    for p, idxs in jump_vals.items():
        want = ptypes.get(p)
        good = want is not None and all((c[3], c[4]) == want for c in idxs)
        for _u, kind in uses.get(p, ()):
            if kind == "escape" or (type(kind) is tuple and kind[1] != p):
                good = False
        if len(defs.get(p, ())) != len([op for op in ops if op[0] == "jump" and op[2] == 0
                                        and any(d == p for d, s, _t in op[1]
                                                if s != ("r", p))]):
            good = False
        if not good:
            bad_params.add(p)
    cands = [c for c in cands if c[7] is None or c[7] not in bad_params]
    if not cands:
        return stats
    # slots: best fit among the free ones, else grow the largest free one, else a new one
    slots: list[list[int]] = []      # [size, busy until]
    assign: list[int] = []
    for c in cands:
        start, end, nbytes = c[0], c[1], _round(c[2])
        if c[7] is not None:
            assign.append(-1)        # NOTE: double-buffered: two buffers of its own
            continue
        free = [k for k, s in enumerate(slots) if s[1] < start]
        fit = [k for k in free if slots[k][0] >= nbytes]
        if fit:
            k = min(fit, key=lambda k: slots[k][0])
        elif free:
            k = max(free, key=lambda k: slots[k][0])
            slots[k][0] = nbytes
        else:
            slots.append([nbytes, end])
            k = len(slots) - 1
        slots[k][1] = end
        assign.append(k)
    # NOTE: one storage per slot (TVM's kernels take tensors at byte offset 0 only). Outside
    # loops a slot costs a call per activation plus one per value; an own allocation two
    # calls per value: a slot is kept where it holds two or more values (a single value
    # alone in its slot saves neither memory nor calls)
    kept = [True] * len(slots)
    if not loops:
        uses_of = [0] * len(slots)
        for k in assign:
            if k >= 0:
                uses_of[k] += 1
        kept = [uses_of[k] >= 2 for k in range(len(slots))]
    sizes = [s[0] if keep else 0 for s, keep in zip(slots, kept)]
    pairs: dict[int, tuple[int, int]] = {}   # param -> (slot A, slot B)
    for p in sorted({c[7] for c in cands if c[7] is not None}):
        size = _round(jump_vals[p][0][2])
        pairs[p] = (len(sizes), len(sizes) + 1)
        sizes += [size, size]
    prologue = []
    storages = []
    for size in sizes:
        if not size:
            storages.append(None)
            continue
        st = em.tmp()
        prologue.append(("call", "vm.builtin.alloc_storage",
                         [("vm",), ("c", ("shape", (size,))), ("i", 0), ("dt", "uint8"),
                          ("c", ("str", "global"))], st))
        storages.append(st)
    total = sum(sizes)
    rename: dict[int, int] = {}
    drop: set[int] = set()
    views: dict[tuple, int] = {}
    buffers: dict[int, tuple[int, int]] = {}   # param -> (register written, the other)
    for p, (oa, ob) in pairs.items():
        shape, dtype = ptypes[p]
        regs = []
        for slot in (oa, ob):
            v = em.tmp()
            prologue.append(("call", "vm.builtin.alloc_tensor",
                             [("r", storages[slot]), ("i", 0), ("c", ("shape", shape)),
                              ("dt", dtype)], v))
            regs.append(v)
        buffers[p] = (regs[0], regs[1])
    for c, k in zip(cands, assign):
        i, out, shape, dtype = c[5], c[6], c[3], c[4]
        if k >= 0 and not kept[k]:
            continue
        stats["planned"] += 1
        stats["unplanned_bytes"] += _round(c[2])
        if c[7] is not None:
            stats["double"] += 1
            drop.update((i - 1, i))
            continue
        if loops:
            key = (k, shape, dtype)
            v = views.get(key)
            if v is None:
                v = views[key] = em.tmp()
                prologue.append(("call", "vm.builtin.alloc_tensor",
                                 [("r", storages[k]), ("i", 0), ("c", ("shape", shape)),
                                  ("dt", dtype)], v))
            rename[out] = v
            drop.update((i - 1, i))
        else:
            drop.add(i - 1)
            ops[i] = ("call", "vm.builtin.alloc_tensor",
                      [("r", storages[k]), ("i", 0), ("c", ("shape", shape)), ("dt", dtype)],
                      out)
    stats["arena"] = total

    doubled = {c[6]: p for p, cs in jump_vals.items() if p in buffers for c in cs}

    def copy(half: int) -> list:
        """The body with the double-buffered values in buffer ``half``; with two halves the
        body is written twice (unrolled by two): each half's tail jumps go to the other half,
        so the buffers alternate with no register swaps."""
        ren = dict(rename)
        for out, p in doubled.items():
            ren[out] = buffers[p][half]

        def arg(a: tuple) -> tuple:
            return ("r", ren.get(a[1], a[1])) if a[0] == "r" else a

        def lab(k: Any) -> Any:
            return ("u", k) if half else k

        out_ops = []
        for i, op in enumerate(ops):
            if i in drop:
                continue
            tag = op[0]
            if tag == "call":
                op = ("call", op[1], [arg(a) for a in op[2]], op[3])
            elif tag == "ret":
                op = ("ret", ren.get(op[1], op[1]))
            elif tag == "label":
                op = ("label", lab(op[1]))
            elif tag == "goto":
                op = ("goto", lab(op[1]))
            elif tag == "if":
                op = ("if", op[1], lab(op[2]))
            elif tag == "jump":
                target = op[2]
                if buffers and target == 0:
                    target = 0 if half else ("u", 0)
                op = ("jump", [(d, arg(s), t) for d, s, t in op[1]], target, list(op[3]))
            out_ops.append(op)
        return out_ops

    em.ops = copy(0) + copy(1) if buffers else copy(0)
    em.prologue = prologue
    return stats


def _const_shape(a: tuple) -> tuple | None:
    """The shape of operand ``a`` when it is a constant shape, else None."""
    if a[0] == "c" and type(a[1]) is tuple and a[1][0] == "shape":
        return tuple(a[1][1])
    return None


def _round(n: int) -> int:
    return max(ALIGN, (n + ALIGN - 1) // ALIGN * ALIGN)


def _param_types(em: Any) -> dict[int, tuple]:
    """Parameter register -> (shape, dtype) for the statically shaped tensor parameters."""
    from relay_ir.ty import TensorType
    out: dict[int, tuple] = {}
    fn = em.cf.func
    if fn is None:
        return out
    for i, p in enumerate(fn.params):
        t = p.checked_type_ or p.type_annotation
        if isinstance(t, TensorType) and t.is_static:
            out[i] = (tuple(int(d) for d in t.shape), str(t.dtype))
    return out


__all__ = ["TailGroup", "tail_groups", "direct_call", "jumps_to", "emit_jump", "expand",
           "plan_memory", "write_functions", "declarations", "constant_value"]
