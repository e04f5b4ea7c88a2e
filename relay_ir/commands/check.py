"""``rly check FILE``: type-check a program and print the type of every global.

Prints one line per global function, in definition order::

    @main: fn (Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32]

A type error prints the diagnostic (with the source line and a caret) on stderr and exits with
status 1. ``--prelude`` parses the file with the standard prelude; its globals are then listed
too only with ``--all``.
"""
from __future__ import annotations

import argparse

from relay_ir.commands import add_prelude_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly check``."""
    parser.add_argument("file", metavar="FILE", help="a .rly program ('-' for stdin)")
    add_prelude_flag(parser)
    parser.add_argument("--all", action="store_true",
                        help="with --prelude, also list the prelude's globals")


def run(args: argparse.Namespace) -> int:
    """Parse, infer types, print ``@name: type`` per global."""
    from relay_ir.cli import read_source
    from relay_ir.parser import parse
    from relay_ir.passes.type_infer import InferType, fmt_type
    text, name = read_source(args.file)
    mod = parse(text, source_name=name, prelude=bool(args.prelude))
    typed = InferType()(mod)
    hidden: set[str] = set()
    if args.prelude and not args.all:
        from relay_ir.prelude import prelude_module
        hidden = set(prelude_module().functions)
    for gname, fn in typed.functions.items():
        if gname in hidden:
            continue
        print(f"@{gname}: {fmt_type(fn.checked_type)}")
    return 0
