"""ONNX control flow: ``If`` as relay_ir's ``if``.

A condition known when importing selects its branch, whose nodes are converted in place.
Otherwise each branch becomes its own let-spine (seeing the enclosing values) and the node
an ``if`` over the condition's single element; both branches must produce the same types.
``Loop`` and ``Scan`` become a let-bound recursive function (tail calls: the executors run
it in constant stack) whose parameters are the loop-carried values, the iteration number and
the scan outputs accumulated so far (concatenated along a new axis 0).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from relay_ir.expr import Call, Function, If, Tuple, Var
from relay_ir.frontend.onnx import Graph, Node, OnnxImportError, Value, convert_nodes, converter
from relay_ir.structural import structural_equal
from relay_ir.traversal import build_lets
from relay_ir.ty import ANY, FuncType, TensorType, TupleType, Type


def _subgraph_outputs(sub: Graph, n: Node, body: Any, env: dict[str, Value],
                      name: str) -> list[Value]:
    """Convert the subgraph ``body`` (attribute ``name`` of ``n``) into ``sub`` with the
    values of ``env`` in scope; its outputs (errors name the attribute)."""
    try:
        convert_nodes(sub, body.node, env, n.opset)
    except OnnxImportError as e:
        raise n.error(f"{name}: {getattr(e, 'message', e)}") from None
    outs = []
    for vo in body.output:
        if vo.name not in env:
            raise n.error(f"{name}: output {vo.name!r} is never computed")
        outs.append(env[vo.name])
    return outs


def _branch(g: Graph, n: Node, name: str) -> tuple[Graph, list[Value]]:
    sub = Graph(g.names)
    return sub, _subgraph_outputs(sub, n, n.attrs[name], dict(n.env), name)


@converter("If")
def _if(g: Graph, n: Node) -> list[Value]:
    cond = n.inputs[0]
    if cond.value is not None:
        taken = "then_branch" if bool(np.asarray(cond.value).reshape(-1)[0]) else "else_branch"
        sub, outs = _branch(g, n, taken)
        g.bindings.extend(sub.bindings)
        return outs
    c = cond if cond.ndim == 0 else g.call("reshape", cond, newshape=[])
    if c.dtype != "bool":
        c = g.call("cast", c, dtype="bool")
    gt, then_outs = _branch(g, n, "then_branch")
    ge, else_outs = _branch(g, n, "else_branch")
    if len(then_outs) != len(else_outs):
        raise n.error("the branches have different numbers of outputs")
    for k, (a, b) in enumerate(zip(then_outs, else_outs)):
        if a.ty != b.ty:
            raise n.error(f"output {k}: the then branch gives {a.ty}, the else branch {b.ty}")
    if len(then_outs) == 1:
        t_body, e_body, ty = then_outs[0].expr, else_outs[0].expr, then_outs[0].ty
    else:
        t_body = Tuple(tuple(v.expr for v in then_outs))
        e_body = Tuple(tuple(v.expr for v in else_outs))
        ty = TupleType(tuple(v.ty for v in then_outs))
    expr = If(c.expr, build_lets(gt.bindings, t_body), build_lets(ge.bindings, e_body))
    out = g.bind(expr, ty)
    if len(then_outs) == 1:
        return [out]
    return [g.item(out, k) for k in range(len(then_outs))]


# ---------------------------------------------------------------------------- Loop and Scan

def _join(a: Type, b: Type, what: str, n: Node) -> TensorType:
    """The loop-carried type covering ``a`` and ``b``: dims that differ become ``?``."""
    if not (isinstance(a, TensorType) and isinstance(b, TensorType)):
        raise n.error(f"{what}: only tensor-typed loop values are supported (found {a}, {b})")
    if a.dtype != b.dtype or len(a.shape) != len(b.shape):
        raise n.error(f"{what}: the body turns a {a} into a {b} (the dtype and rank of a "
                      "loop-carried value must stay the same)")
    return TensorType(tuple(x if (isinstance(x, int) and isinstance(y, int) and x == y)
                            or x is y else ANY for x, y in zip(a.shape, b.shape)), a.dtype)


Step = Callable[[Graph, Graph, list[Value]], "tuple[Value, list[Value], list[Value]]"]


def _recursive_loop(g: Graph, n: Node, inits: list[Value], step: Step
                    ) -> tuple[list[Value], list[Value]]:
    """Emit ``let %loop = fn(states..., accs...) { if (cont) { body; %loop(next...) } else
    { (states..., accs...) } }; %loop(inits..., empty accs...)`` and return the final states
    and the accumulated scan outputs (stacked on a new axis 0).

    ``step(head, body, states)`` converts one iteration: it emits the continue condition
    (a bool scalar) into ``head`` and the iteration into ``body``, and returns the condition,
    the next states and the scan outputs. The parameter types start as the initial values'
    types; a body that changes a dim (a growing value) makes that dim ``?`` and is converted
    again.
    """
    tys: list[Type] = [v.ty for v in inits]
    acc_tys: list[Type] | None = None
    acc_inits: list[Value] = []
    for _attempt in range(6):
        params = [Var(g.names.make(f"{g.hint}_s{k}"), t) for k, t in enumerate(tys)]
        aparams = [Var(g.names.make(f"{g.hint}_acc{k}"), t)
                   for k, t in enumerate(acc_tys or [])]
        head, body = Graph(g.names), Graph(g.names)
        head.hint = f"{g.hint}_cont"
        cont, nxt, scans = step(head, body, [Value(p, t) for p, t in zip(params, tys)])
        if acc_tys is None:
            # NOTE: a first conversion learns the scan outputs' types
            acc_tys, acc_inits = [], []
            for k, s in enumerate(scans):
                shp = s.shape
                if not all(isinstance(d, int) for d in shp):
                    raise n.error(f"scan output {k}: its shape {s.ty} must be static")
                acc_inits.append(g.const(np.zeros((0,) + shp, dtype=s.dtype)))
                acc_tys.append(TensorType((ANY,) + shp, s.dtype))
            continue
        if len(scans) != len(aparams):
            raise n.error("the body's number of scan outputs changed")
        new_acc = []
        body.hint = f"{g.hint}_scan"
        for a, t, s in zip(aparams, acc_tys, scans):
            e = body.call("expand_dims", s, axis=0)
            new_acc.append(body.call("concatenate", [Value(a, t), e], axis=0))
        new_tys = [_join(t, v.ty, f"loop value {k}", n) for k, (t, v) in
                   enumerate(zip(tys, nxt))]
        new_acc_tys = [_join(t, v.ty, f"scan output {k}", n) for k, (t, v) in
                       enumerate(zip(acc_tys, new_acc))]
        if all(structural_equal(a, b) for a, b in zip(new_tys + new_acc_tys, tys + acc_tys)):
            break
        tys, acc_tys = new_tys, new_acc_tys
    else:
        raise n.error("the loop-carried types do not settle")
    all_params = params + aparams
    all_tys = tys + acc_tys
    ret = TupleType(tuple(all_tys))
    fvar = Var(g.names.make(f"{g.hint}_loop"), None,
               checked_type_=FuncType(tuple(all_tys), ret))
    tail = Call(fvar, tuple(v.expr for v in nxt + new_acc))
    fbody = If(cont.expr, build_lets(body.bindings, tail), Tuple(tuple(all_params)))
    fn = Function(tuple(all_params), build_lets(head.bindings, fbody), ret_type=ret)
    g.bindings.append((fvar, fn))
    out = g.bind(Call(fvar, tuple(v.expr for v in inits + acc_inits)), ret)
    items = [g.item(out, k) for k in range(len(all_tys))]
    return items[:len(tys)], items[len(tys):]


def _scalar_bool(g: Graph, v: Value) -> Value:
    c = v if v.ndim == 0 else g.call("reshape", v, newshape=[])
    return c if c.dtype == "bool" else g.call("cast", c, dtype="bool")


def _bind_body_inputs(n: Node, body: Any, values: list[Value]) -> dict[str, Value]:
    if len(body.input) != len(values):
        raise n.error(f"body: it takes {len(body.input)} inputs, the node gives "
                      f"{len(values)}")
    env = dict(n.env)
    for vi, v in zip(body.input, values):
        env[vi.name] = v
    return env


def _convert_body(sub: Graph, n: Node, body: Any, env: dict[str, Value]) -> list[Value]:
    outs = _subgraph_outputs(sub, n, body, env, "body")
    return [_declared(sub, vo, v) for vo, v in zip(body.output, outs)]


def _declared(sub: Graph, vo: Any, v: Value) -> Value:
    """``v`` with the static shape the body declares for it, where ours has ``?`` dims (a
    Slice at the iteration number): a reshape, which checks the shape when it runs."""
    if not isinstance(v.ty, TensorType) or not vo.type.HasField("tensor_type") or \
            not vo.type.tensor_type.HasField("shape"):
        return v
    dims = vo.type.tensor_type.shape.dim
    if len(dims) != v.ndim or not all(d.HasField("dim_value") for d in dims) or \
            all(isinstance(d, int) for d in v.shape):
        return v
    want = [int(d.dim_value) for d in dims]
    if any(isinstance(a, int) and a != b for a, b in zip(v.shape, want)):
        return v
    return sub.call("reshape", v, newshape=want)


@converter("Loop")
def _loop(g: Graph, n: Node) -> list[Value]:
    body = n.attrs["body"]
    m, cond0 = n.input(0), n.input(1)
    carried = [v for v in n.inputs[2:]]
    if any(v is None for v in carried):
        raise n.error("an omitted loop-carried input")
    nc = len(carried)
    if m is not None:
        m = m if m.ndim == 0 else g.call("reshape", m, newshape=[])
        if m.dtype != "int64":
            m = g.call("cast", m, dtype="int64")
    c0 = g.const(np.array(True)) if cond0 is None else _scalar_bool(g, cond0)
    i0 = g.const(np.array(0, dtype="int64"))

    def step(head: Graph, sub: Graph, st: list[Value]) -> tuple[Value, list[Value], list[Value]]:
        i, c, vs = st[0], st[1], st[2:]
        if m is None:
            cont = c
        elif cond0 is None:
            cont = head.call("less", i, m)
        else:
            cont = head.call("logical_and", head.call("less", i, m), c)
        env = _bind_body_inputs(n, body, [i, c] + vs)
        outs = _convert_body(sub, n, body, env)
        if len(outs) < 1 + nc:
            raise n.error(f"body: {len(outs)} outputs for {nc} loop-carried values")
        sub.hint = f"{g.hint}_next"
        c_next = c if cond0 is None else _scalar_bool(sub, outs[0])
        i_next = sub.call("add", i, sub.const(np.array(1, dtype="int64")))
        return cont, [i_next, c_next] + outs[1:1 + nc], outs[1 + nc:]

    finals, scans = _recursive_loop(g, n, [i0, c0] + carried, step)
    if m is not None and m.value is not None and cond0 is None:
        # NOTE: a for loop of a known trip count: the scan outputs' length is static
        trips = max(int(np.asarray(m.value)), 0)
        scans = [g.call("reshape", s, newshape=[trips] + [int(d) for d in s.shape[1:]])
                 for s in scans]
    return finals[2:] + scans


@converter("Scan")
def _scan(g: Graph, n: Node) -> list[Value]:
    if n.opset < 9:
        return _scan8(g, n)
    return _scan9(g, n, list(n.inputs))


def _scan9(g: Graph, n: Node, inputs: list[Value | None]) -> list[Value]:
    body = n.attrs["body"]
    k = int(n.attr("num_scan_inputs"))
    if any(v is None for v in inputs):
        raise n.error("an omitted input")
    states, xs = inputs[:len(inputs) - k], inputs[len(inputs) - k:]
    ns = len(states)
    in_axes = list(n.attr("scan_input_axes", [0] * k))
    in_dirs = list(n.attr("scan_input_directions", [0] * k))
    nout = len(body.output) - ns
    out_axes = list(n.attr("scan_output_axes", [0] * nout))
    out_dirs = list(n.attr("scan_output_directions", [0] * nout))
    seq: list[Value] = []
    length: Any = None
    for j, x in enumerate(xs):
        a = in_axes[j] + x.ndim if in_axes[j] < 0 else in_axes[j]
        if not 0 <= a < x.ndim:
            raise n.error(f"scan input {j}: axis {in_axes[j]} is out of range")
        if a != 0:
            x = g.call("transpose", x, axes=[a] + [d for d in range(x.ndim) if d != a])
        if in_dirs[j]:
            x = g.call("reverse", x, axis=0)
        seq.append(x)
        d = x.shape[0]
        if isinstance(d, int):
            if isinstance(length, int) and length != d:
                raise n.error(f"scan inputs of lengths {length} and {d}")
            length = d
    if length is None:
        t = g.call("take", g.call("shape_of", seq[0], dtype="int64"),
                   g.const(np.array(0, dtype="int64")), axis=0)
    else:
        t = g.const(np.array(length, dtype="int64"))
    i0 = g.const(np.array(0, dtype="int64"))

    def step(head: Graph, sub: Graph, st: list[Value]) -> tuple[Value, list[Value], list[Value]]:
        i, vs = st[0], st[1:]
        cont = head.call("less", i, t)
        sub.hint = f"{g.hint}_x"
        elems = [sub.call("take", x, i, axis=0) for x in seq]
        env = _bind_body_inputs(n, body, vs + elems)
        outs = _convert_body(sub, n, body, env)
        sub.hint = f"{g.hint}_next"
        i_next = sub.call("add", i, sub.const(np.array(1, dtype="int64")))
        return cont, [i_next] + outs[:ns], outs[ns:]

    finals, scans = _recursive_loop(g, n, [i0] + states, step)
    res = finals[1:]
    for j, s in enumerate(scans):
        if isinstance(length, int):
            s = g.call("reshape", s, newshape=[length] + [int(d) for d in s.shape[1:]])
        if out_dirs[j]:
            s = g.call("reverse", s, axis=0)
        a = out_axes[j] + s.ndim if out_axes[j] < 0 else out_axes[j]
        if a != 0:
            perm = list(range(1, s.ndim))
            perm.insert(a, 0)
            s = g.call("transpose", s, axes=perm)
        res.append(s)
    return res


def _scan8(g: Graph, n: Node) -> list[Value]:
    """Opset 8: axis 0 of every input is a batch; each batch row is scanned (axis 1)."""
    if n.input(0) is not None:
        raise n.error("sequence_lens is not supported (every sequence is taken in full)")
    ins = list(n.inputs[1:])
    batch = ins[0].shape[0] if ins else None
    if not isinstance(batch, int):
        raise n.error("the batch size must be static")
    k = int(n.attr("num_scan_inputs"))
    dirs = list(n.attr("directions", [0] * k))
    rows: list[list[Value]] = []
    for b in range(batch):
        row = [g.call("take", x, g.const(np.array(b, dtype="int64")), axis=0) for x in ins]
        sub = Node(n.proto, n.index, row, 9)
        sub.env = n.env
        sub.attrs = {"body": n.attrs["body"], "num_scan_inputs": k,
                     "scan_input_directions": dirs}
        rows.append(_scan9(g, sub, row))
    return [g.call("stack", [r[j] for r in rows], axis=0) for j in range(len(rows[0]))]
