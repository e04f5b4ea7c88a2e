"""``rly fmt FILE...``: print the canonical text of Relay programs.

Without options the canonical text goes to standard output. ``--check`` prints nothing for a
canonical file and names each file that is not canonical (exit status 1). ``-i`` rewrites the
files in place. ``--prelude`` parses with the standard prelude in scope (so a file may use
``List``, ``Cons``, ``@map``, ...); only the file's own definitions are printed. Parse errors
are reported with the source line and a caret (exit status 1).
"""
from __future__ import annotations

import argparse
import sys

from relay_ir.cli import read_source


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``fmt`` options."""
    parser.add_argument("files", nargs="+", metavar="FILE", help=".rly files to format")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="exit with status 1 if a file is not in canonical form")
    mode.add_argument("-i", "--in-place", dest="in_place", action="store_true",
                      help="rewrite the files in canonical form")
    parser.add_argument("--prelude", action="store_true",
                        help="parse with the standard prelude in scope (List, Option, @map, "
                             "...); only the file's own definitions are printed")


def canonical_text(text: str, source_name: str, prelude: bool = False) -> str:
    """The canonical text of the module written in ``text`` (without the prelude's globals)."""
    from relay_ir.commands import without_prelude
    from relay_ir.parser import parse
    from relay_ir.printer import astext
    mod = parse(text, source_name, prelude=prelude)
    return astext(without_prelude(mod) if prelude else mod)


def run(args: argparse.Namespace) -> int:
    """Format, check or rewrite each file; returns the exit status."""
    status = 0
    for path in args.files:
        text, _ = read_source(path)
        out = canonical_text(text, path, prelude=args.prelude)
        if args.check:
            if out != text:
                print(f"{path}: not in canonical form (run `rly fmt -i {path}`)",
                      file=sys.stderr)
                status = 1
        elif args.in_place:
            if out != text:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(out)
        else:
            sys.stdout.write(out)
    return status
