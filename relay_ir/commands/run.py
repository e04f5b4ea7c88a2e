"""``rly run FILE [ARGS...]``: run a program with the interpreter and print its result.

An argument is a literal -- ``3`` (int), ``2.5`` (float), ``True``/``False``, a nested list
``[[1,2],[3,4]]``, a tuple ``(1, 2.5)`` -- converted with the entry parameter's dtype when it is
known (ints to int32 and floats to float32 otherwise), or the path of a ``.npy`` file (loaded
with ``allow_pickle=False``). Wrong argument count, shape or dtype is an error naming the
parameter (exit status 1).
"""
from __future__ import annotations

import argparse
import ast
import os
from typing import Any

from relay_ir.cli import read_source
from relay_ir.errors import DiagnosticError, InterpreterError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly run``."""
    parser.add_argument("file", metavar="FILE", help="a .rly program")
    # NOTE: REMAINDER, so that options may also follow the arguments (`rly run f.rly 2
    # --prelude`); run() picks the known options out of it (argparse cannot intermix them).
    parser.add_argument("args", metavar="ARGS", nargs=argparse.REMAINDER,
                        help="arguments: literals (3, 2.5, True, [[1,2],[3,4]]) or .npy files")
    parser.add_argument("--entry", default="main", help="the global to run (default: main)")
    parser.add_argument("--prelude", action="store_true",
                        help="parse with the standard prelude (List, Option, map, foldl, ...)")
    parser.add_argument("--target", default=None,
                        help="compile for this target (llvm, cuda) with runtime.build (dataflow "
                             "programs) instead of interpreting")


def parse_argument(text: str, index: int) -> Any:
    """One command-line argument: a ``.npy`` path or a Python-style literal (no evaluation)."""
    if text.endswith(".npy") or (os.path.exists(text) and not _looks_literal(text)):
        import numpy as np
        try:
            return np.load(text, allow_pickle=False)
        except OSError as e:
            raise InterpreterError(f"argument {index}: cannot read {text}: {e}") from None
        except ValueError as e:
            raise InterpreterError(f"argument {index}: {text} is not a plain .npy array "
                                   f"({e})") from None
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise InterpreterError(
            f"argument {index}: cannot read {text!r} (expected a number, True/False, a nested "
            f"list like [[1, 2], [3, 4]], or a .npy file)") from None
    if not _is_plain(value):
        raise InterpreterError(f"argument {index}: {text!r} is not a number, bool or list")
    return value


def _looks_literal(text: str) -> bool:
    s = text.strip()
    return bool(s) and (s[0] in "[(-+.0123456789" or s in ("True", "False"))


def _is_plain(v: Any) -> bool:
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif not isinstance(x, (bool, int, float)):
            return False
    return True


def _split_options(args: argparse.Namespace) -> list[str]:
    """Move --entry/--prelude/--target found among ARGS onto ``args``; return the rest."""
    rest: list[str] = []
    items = list(args.args)
    i = 0
    while i < len(items):
        tok = items[i]
        if tok == "--":
            rest.extend(items[i + 1:])
            break
        name, eq, val = tok.partition("=")
        if name in ("--entry", "--target"):
            if not eq:
                if i + 1 >= len(items):
                    raise DiagnosticError(f"rly run: {name} needs a value")
                i += 1
                val = items[i]
            setattr(args, name[2:], val)
        elif tok == "--prelude":
            args.prelude = True
        else:
            rest.append(tok)
        i += 1
    return rest


def run(args: argparse.Namespace) -> int:
    """Parse FILE, run its entry on ARGS, print the result."""
    arg_texts = _split_options(args)
    import relay_ir as rly
    from relay_ir.runtime.values import format_value

    text, _ = read_source(args.file)
    kwargs = {"prelude": True} if args.prelude else {}
    mod = rly.parse(text, source_name=args.file, **kwargs)
    if args.entry not in mod:
        raise DiagnosticError(f"{args.file}: there is no global function @{args.entry} "
                              f"(globals: {', '.join('@' + n for n in mod) or 'none'})")
    values = [parse_argument(a, i + 1) for i, a in enumerate(arg_texts)]
    if args.target:
        from relay_ir import runtime
        build = getattr(runtime, "build", None)
        if build is None:
            raise DiagnosticError(f"--target {args.target}: the compiled executor is not "
                                  f"available yet")
        result = build(mod, target=args.target)(*values, entry=args.entry)
    else:
        from relay_ir.runtime.interpreter import evaluate
        result = evaluate(mod, *values, entry=args.entry)
    print(format_value(result))
    return 0
