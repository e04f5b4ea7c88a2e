"""``rly grad FILE``: print the reverse-mode gradient program of a global.

``--entry NAME`` picks the global (default ``main``); the printed module's ``@NAME`` returns
``(result, (gradient per parameter))`` and is canonical text that ``rly check`` and ``rly run``
accept as is (without ``--prelude``: the prelude's definitions are printed when used).
``--mode higher_order`` (the default) is the reference-based transform; ``first_order`` is not
available yet. ``--prelude`` parses with the standard prelude, ``--show-types`` prints inferred
types on every binding.
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly grad``."""
    parser.add_argument("file", metavar="FILE", help="a .rly program ('-' for stdin)")
    parser.add_argument("--entry", default="main",
                        help="the global to differentiate (default: main)")
    parser.add_argument("--mode", default="higher_order", choices=("higher_order", "first_order"),
                        help="AD mode (default higher_order; first_order is not available yet)")
    parser.add_argument("--prelude", action="store_true",
                        help="parse with the standard prelude (List, Option, map, foldl, ...)")
    parser.add_argument("--show-types", action="store_true", dest="show_types",
                        help="print inferred types on every binding")


def run(args: argparse.Namespace) -> int:
    """Parse, differentiate, print."""
    from relay_ir.cli import read_source
    from relay_ir.parser import parse
    from relay_ir.passes.gradient import gradient
    from relay_ir.printer import astext

    text, name = read_source(args.file)
    mod = parse(text, source_name=name, prelude=bool(args.prelude))
    out = gradient(mod, entry=args.entry, mode=args.mode)
    printed = astext(out, show_types=args.show_types)
    sys.stdout.write(printed if printed.endswith("\n") else printed + "\n")
    return 0
