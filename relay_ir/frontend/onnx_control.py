"""ONNX control flow: ``If`` as relay_ir's ``if``.

A condition known when importing selects its branch, whose nodes are converted in place.
Otherwise each branch becomes its own let-spine (seeing the enclosing values) and the node
an ``if`` over the condition's single element; both branches must produce the same types.
Loop and Scan (recursive functions) are not converted yet.
"""
from __future__ import annotations

import numpy as np

from relay_ir.expr import If, Tuple
from relay_ir.frontend.onnx import Graph, Node, OnnxImportError, Value, convert_nodes, converter
from relay_ir.traversal import build_lets
from relay_ir.ty import TupleType


def _branch(g: Graph, n: Node, name: str) -> tuple[Graph, list[Value]]:
    body = n.attrs[name]
    sub = Graph(g.names)
    env = dict(n.env)
    try:
        convert_nodes(sub, body.node, env, n.opset)
    except OnnxImportError as e:
        raise n.error(f"{name}: {getattr(e, 'message', e)}") from None
    outs = []
    for vo in body.output:
        if vo.name not in env:
            raise n.error(f"{name}: output {vo.name!r} is never computed")
        outs.append(env[vo.name])
    return sub, outs


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
