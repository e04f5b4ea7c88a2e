"""``rly grad FILE``: print the gradient (or, with ``--forward``, the JVP) program of a global.

``--entry NAME`` picks the global (default ``main``); the printed module's ``@NAME`` returns
``(result, (gradient per parameter))`` and is canonical text that ``rly check`` and ``rly run``
accept as is; with ``--prelude`` only the file's own and the generated definitions are printed
(as ``rly fmt --prelude`` does), so checking or running the result takes ``--prelude`` too.
``--mode higher_order`` (the default) is the reference-based transform, ``--mode first_order``
the direct reverse sweep of a pure dataflow entry. ``--wrt a,b`` returns the gradients of those
parameters only, in that order. ``--optimize`` runs ``passes.optimize`` on the result (for a
program with static control flow: first-order code, no references or closures).
``--forward`` prints the forward-mode program instead: ``@NAME`` takes the parameters and then
one tangent per parameter and returns ``(result, result tangent)`` (``--mode`` and ``--wrt``
do not apply to it). ``--prelude`` parses with the standard prelude, ``--show-types`` prints
inferred types on every binding.
"""
from __future__ import annotations

import argparse
import sys

from relay_ir.commands import (add_prelude_flag, add_show_types_flag, require_entry,
                               without_prelude)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly grad``."""
    parser.add_argument("file", metavar="FILE", help="a .rly program ('-' for stdin)")
    parser.add_argument("--entry", default="main",
                        help="the global to differentiate (default: main)")
    parser.add_argument("--mode", default="higher_order", choices=("higher_order", "first_order"),
                        help="reverse-mode AD: higher_order (default, any program) or "
                             "first_order (pure dataflow entries)")
    parser.add_argument("--wrt", default=None, metavar="A,B",
                        help="comma-separated parameter names: gradients of these only, in "
                             "that order (default: every parameter)")
    parser.add_argument("--optimize", action="store_true",
                        help="run the default optimization pipeline on the result")
    parser.add_argument("--no-loop-rule", action="store_true",
                        help="no first-order tape for self-tail-recursive loops: every global "
                             "keeps the reference-based rule (docs/ad.md, 'Loops')")
    parser.add_argument("--forward", action="store_true",
                        help="print the forward-mode (JVP) program: @ENTRY(params..., "
                             "tangents...) -> (result, tangent)")
    add_prelude_flag(parser)
    add_show_types_flag(parser)


def run(args: argparse.Namespace) -> int:
    """Parse, differentiate (reverse or forward mode), optionally optimize, print."""
    from relay_ir.cli import read_source
    from relay_ir.parser import parse
    from relay_ir.passes.gradient import gradient
    from relay_ir.passes.jvp import jvp
    from relay_ir.passes.optimizer import optimize
    from relay_ir.printer import astext

    if args.forward and (args.wrt is not None or args.mode != "higher_order"):
        sys.stderr.write("rly grad: --wrt and --mode apply to reverse mode, not --forward\n")
        return 2
    text, name = read_source(args.file)
    mod = parse(text, source_name=name, prelude=bool(args.prelude))
    require_entry(mod, args.entry, name, prelude=bool(args.prelude))
    if args.forward:
        out = jvp(mod, entry=args.entry)
    else:
        wrt = None
        if args.wrt is not None:
            wrt = tuple(w.strip().lstrip("%") for w in args.wrt.split(",") if w.strip())
        out = gradient(mod, entry=args.entry, mode=args.mode, wrt=wrt,
                       loop_rule=False if args.no_loop_rule else None)
    if args.optimize:
        out = optimize(out, entry=args.entry)
    if args.prelude:
        out = without_prelude(out)
    printed = astext(out, show_types=args.show_types)
    sys.stdout.write(printed if printed.endswith("\n") else printed + "\n")
    return 0
