"""``rly viz FILE -o out.dot|out.svg``: draw an entry's dataflow with its fusion groups.

The program is optimized and fused (``--no-fuse`` skips fusion, ``--opt-level`` picks the
level); each fused group is a DOT cluster holding its operators. ``.dot`` output is written
directly; ``.svg`` (or ``.png``/``.pdf``) runs Graphviz's ``dot`` program, which must be
installed (``apt-get install graphviz``). Without ``-o`` the DOT text goes to stdout.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from relay_ir.cli import read_source
from relay_ir.commands import require_entry
from relay_ir.errors import DiagnosticError
from relay_ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from relay_ir.module import IRModule
from relay_ir.traversal import flatten_lets, post_order


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly viz``."""
    parser.add_argument("file", metavar="FILE", help="a .rly program ('-' for stdin)")
    parser.add_argument("-o", "--output", default=None,
                        help="output file: .dot (DOT text) or .svg/.png/.pdf (needs Graphviz)")
    parser.add_argument("--entry", default="main", help="the function to draw (default: main)")
    parser.add_argument("--opt-level", type=int, default=2, dest="opt_level",
                        help="optimization level before fusion (default 2)")
    parser.add_argument("--no-fuse", action="store_true", dest="no_fuse",
                        help="draw the optimized program without fusion groups")
    parser.add_argument("--prelude", action="store_true", help="parse with the standard prelude")


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(mod: IRModule, entry: str = "main") -> str:
    """DOT text of ``mod[entry]``'s top-level dataflow; fused groups become clusters."""
    fn = mod[entry]
    lines = [f"digraph {_q(entry)} {{", "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", '
             'fontname="Helvetica"];']
    ids: dict[int, str] = {}        # value (var / node) -> DOT node id that produces it
    counter = [0]

    def new_id(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    for p in fn.params:
        nid = new_id("in")
        ids[id(p)] = nid
        lines.append(f"  {nid} [label={_q('%' + p.name_hint)}, shape=ellipse, "
                     f'fillcolor="#fff4d6"];')
    lets, body = flatten_lets(fn.body)
    prims: dict[int, Function] = {}
    group_no = 0

    def src(e: Expr) -> str | None:
        if isinstance(e, Constant):
            nid = new_id("c")
            label = str(e.data.item()) if e.data.ndim == 0 else f"const{list(e.data.shape)}"
            lines.append(f"  {nid} [label={_q(label)}, shape=plaintext, style=\"\"];")
            return nid
        return ids.get(id(e))

    for let in lets:
        v = let.value
        if isinstance(v, Function) and v.is_primitive:
            prims[id(let.var)] = v
            continue
        if isinstance(v, Call) and isinstance(v.op, Var) and id(v.op) in prims:
            fused = prims[id(v.op)]
            group_no += 1
            inner: dict[int, str] = {}
            for prm, arg in zip(fused.params, v.args):
                s = src(arg)
                if s is not None:
                    inner[id(prm)] = s
            lines.append(f"  subgraph cluster_{group_no} {{")
            lines.append(f"    label={_q(f'fused group {group_no} (%{let.var.name_hint})')};")
            lines.append('    style="rounded,dashed"; color="#4a72b0";')
            edges = []
            for node in post_order(fused.body):
                if isinstance(node, (Var, Op)) or id(node) in inner:
                    continue
                nid = new_id("op")
                inner[id(node)] = nid
                if isinstance(node, Call) and isinstance(node.op, Op):
                    label, args = node.op.name, node.args
                elif isinstance(node, Tuple):
                    label, args = "tuple", node.fields
                elif isinstance(node, TupleGetItem):
                    label, args = f".{node.index}", (node.tuple_value,)
                elif isinstance(node, Constant):
                    label = str(node.data.item()) if node.data.ndim == 0 else "const"
                    args = ()
                else:
                    label, args = type(node).__name__, ()
                lines.append(f"    {nid} [label={_q(label)}];")
                for a in args:
                    s = inner.get(id(a))
                    if s is not None:
                        edges.append(f"  {s} -> {nid};")
            lines.append("  }")
            lines.extend(edges)
            ids[id(let.var)] = inner[id(fused.body)]
            continue
        nid = new_id("v")
        ids[id(let.var)] = nid
        if isinstance(v, Call):
            label = v.op.name if isinstance(v.op, Op) else (
                "@" + v.op.name_hint if hasattr(v.op, "name_hint") else "call")
            args: tuple = v.args
        elif isinstance(v, Tuple):
            label, args = "tuple", v.fields
        elif isinstance(v, TupleGetItem):
            label, args = f".{v.index}", (v.tuple_value,)
        else:
            label, args = type(v).__name__, ()
        lines.append(f"  {nid} [label={_q(label)}];")
        for a in args:
            s = src(a)
            if s is not None:
                lines.append(f"  {s} -> {nid};")
    out = new_id("out")
    lines.append(f'  {out} [label="result", shape=ellipse, fillcolor="#e3f5e1"];')
    for b in (body.fields if isinstance(body, Tuple) else (body,)):
        s = src(b)
        if s is not None:
            lines.append(f"  {s} -> {out};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Parse, optimize, fuse, write DOT (or render it with Graphviz)."""
    from relay_ir.parser import parse
    from relay_ir.passes import optimize
    from relay_ir.passes.fuse_ops import fuse_ops

    text, source = read_source(args.file)
    mod = parse(text, source, prelude=args.prelude)
    require_entry(mod, args.entry, args.file, prelude=args.prelude)
    mod = optimize(mod, opt_level=args.opt_level)
    if not args.no_fuse:
        mod = fuse_ops(mod)
    dot = to_dot(mod, args.entry)
    if args.output is None:
        sys.stdout.write(dot)
        return 0
    ext = os.path.splitext(args.output)[1].lower()
    if ext in ("", ".dot", ".gv"):
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(dot)
        return 0
    exe = shutil.which("dot")
    if exe is None:
        raise DiagnosticError(f"rly viz: writing {ext} needs Graphviz's `dot` program, which "
                              f"is not installed (apt-get install graphviz); use -o FILE.dot "
                              f"for the DOT text")
    proc = subprocess.run([exe, f"-T{ext[1:]}", "-o", args.output], input=dot.encode(),
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise DiagnosticError(f"rly viz: dot failed: {proc.stderr.decode(errors='replace')}")
    return 0
