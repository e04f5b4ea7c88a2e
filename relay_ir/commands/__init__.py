"""Subcommands of the `rly` command line (one module each)."""
from __future__ import annotations

import argparse
from typing import Any

from relay_ir.errors import DiagnosticError


class UsageError(DiagnosticError):
    """A bad command-line option value (an unknown entry or pass name): exit status 2, like
    argparse's own usage errors. Errors in the program itself keep exit status 1."""

    kind = "usage error"


def require_entry(names: Any, entry: str, file: str, prelude: bool = False) -> None:
    """A :class:`UsageError` naming ``entry`` and listing the globals when ``names`` (an
    IRModule, or the global names of a module file) lacks it (with ``prelude``, the prelude's
    own globals are not listed)."""
    names = list(names)
    if entry in names:
        return
    if prelude:
        from relay_ir.prelude import prelude_module
        std = prelude_module().functions
        names = [n for n in names if n not in std]
    listed = ", ".join("@" + n for n in names) or "none"
    raise UsageError(f"{file}: there is no global function @{entry} (globals: {listed})")


def add_prelude_flag(parser: argparse.ArgumentParser) -> None:
    """``--prelude``: parse with the standard prelude (the same flag for every subcommand)."""
    parser.add_argument("--prelude", action="store_true",
                        help="parse with the standard prelude (List, Option, map, foldl, ...)")


def add_build_flags(parser: argparse.ArgumentParser, entry_help: str) -> None:
    """``--target``, ``--entry`` and ``--opt-level``: how ``runtime.build`` compiles the program
    (the same flags for ``rly build`` and ``rly tune``)."""
    parser.add_argument("--target", default="llvm",
                        help="llvm (this CPU, the default) or cuda")
    parser.add_argument("--entry", default="main", help=entry_help)
    parser.add_argument("--opt-level", default=2, type=int, choices=(0, 1, 2, 3),
                        help="optimization level (default 2)")


def add_show_types_flag(parser: argparse.ArgumentParser) -> None:
    """``--show-types``: print inferred types on every binding."""
    parser.add_argument("--show-types", action="store_true", dest="show_types",
                        help="print inferred types on every binding")


def without_prelude(mod: Any) -> Any:
    """``mod`` without the standard prelude's globals and type definitions (what a file parsed
    with ``--prelude`` gets for free): the text printed from it needs ``--prelude`` again."""
    from relay_ir.module import IRModule
    from relay_ir.prelude import prelude_module
    std = prelude_module()
    return IRModule({mod.global_vars[n]: f for n, f in mod.functions.items()
                     if n not in std.functions},
                    {td.header: td for n, td in mod.type_definitions.items()
                     if n not in std.type_definitions},
                    source=mod.source, attrs=mod.attrs)
