"""``rly import``: an ONNX model as canonical ``.rly`` text.

``rly import model.onnx -o model.rly`` writes the text of ``@main`` (graph inputs, then the
weights) and the weights to ``model.npz`` next to it (``numpy.savez``: one array per weight,
keyed by its ``@main`` parameter name; read it with ``numpy.load(path)``, no pickle).
``--params PATH`` puts the weights elsewhere; ``--embed-weights`` binds them as constants in
the text's metadata section instead, so ``@main`` takes only the graph inputs and
``rly run model.rly input.npy`` runs it. ``--shape NAME=1,3,224,224`` (repeatable) fixes an
input's shape (a dim may be ``?`` or a name). Without ``-o`` the text goes to standard output
and the weights only where ``--params`` says. See docs/frontend_onnx.md.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from relay_ir.commands import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly import``."""
    parser.add_argument("file", metavar="MODEL", help="an ONNX model (.onnx)")
    parser.add_argument("-o", "--output", default=None, metavar="OUT",
                        help="write the .rly text here (default: standard output)")
    parser.add_argument("--params", default=None, metavar="NPZ",
                        help="write the weights here (default: OUT with the suffix .npz)")
    parser.add_argument("--embed-weights", action="store_true", dest="embed",
                        help="bind the weights as constants in the text's metadata section")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                        help="an input's shape (repeatable; a dim may be ? or a name)")


def _parse_shape(text: str) -> tuple[str, list[Any]]:
    name, eq, dims = text.rpartition("=")
    if not eq or not name:
        raise UsageError(f"rly import: --shape {text!r}: expected NAME=D0,D1,... "
                         "(e.g. input=1,3,224,224)")
    out: list[Any] = []
    for d in dims.split(",") if dims.strip() else []:
        d = d.strip()
        if d == "?":
            out.append(None)
        elif d.lstrip("-").isdigit():
            out.append(int(d))
        elif d.isidentifier():
            out.append(d)
        else:
            raise UsageError(f"rly import: --shape {text!r}: {d!r} is not a dim (an integer, "
                             "? or a name)")
    return name, out


def run(args: argparse.Namespace) -> int:
    """Import the model; write the text and the weights."""
    import numpy as np

    import relay_ir as rly
    from relay_ir.frontend import from_onnx
    shape = dict(_parse_shape(s) for s in args.shape)
    if not os.path.exists(args.file):
        raise UsageError(f"rly import: {args.file}: no such file")
    mod, params = from_onnx(args.file, shape=shape or None)
    if args.embed and params:
        from relay_ir.runtime.executor import bind_params
        mod = bind_params(mod, "main", params)
        params = {}
    text = rly.astext(mod)
    npz = args.params
    if npz is None and args.output is not None and not args.embed:
        npz = os.path.splitext(args.output)[0] + ".npz"
    if args.output is None:
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    if params:
        if npz is None:
            print(f"rly import: {len(params)} weights not written (give --params PATH, -o, "
                  "or --embed-weights)", file=sys.stderr)
        else:
            np.savez(npz, **params)
    return 0
