"""``rly run FILE [ARGS...]``: type-check a program, run it with the interpreter, print its result.

``--target llvm|cuda`` compiles the program with ``runtime.build`` (any program) and runs it
compiled. FILE may also be a module file written by ``rly build`` (recognized by its magic
bytes, whatever its name): it is loaded with ``runtime.load_module`` and run, without parsing
or compiling anything (``--entry`` defaults to the entry it was built with). An empty file, a
shared library (ELF, Mach-O) or a binary file is a diagnostic saying what it is (exit status
1). ``rly run FILE --help`` prints this command's help wherever ``--help`` stands.

The program is type-checked first (``InferType``, as ``runtime.evaluate`` does); a type error
is printed as a diagnostic (exit status 1) and nothing runs. An argument is a literal -- ``3``
(int), ``2.5`` (float), ``True``/``False``, a nested list ``[[1,2],[3,4]]``, a tuple
``(1, 2.5)`` -- converted with the entry parameter's dtype when every value converts exactly
(``runtime.values.check_arguments``; ints to int32 and floats to float32 when the type is
unknown), or the path of a ``.npy`` file (loaded with
``allow_pickle=False``). Wrong argument count, shape or dtype, and an integer the dtype cannot
hold (``300`` for a uint8), are errors naming the parameter (exit status 1). ``--max-depth N``
bounds the interpreter's nesting of non-tail calls (default
``runtime.interpreter.DEFAULT_MAX_DEPTH``; with ``--target`` it is an error: the compiled
executor has its own limit, ``runtime.relax_vm.DEEP_DEPTH``).
"""
from __future__ import annotations

import argparse
import ast
import os
from typing import Any

from relay_ir.cli import read_source
from relay_ir.commands import add_prelude_flag, require_entry
from relay_ir.errors import DiagnosticError, InterpreterError

_RELAX_MAGIC = b"RLYRELAX"       # runtime.relax_export.TRAILER_MAGIC (not imported: no TVM here)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly run``."""
    parser.add_argument("file", metavar="FILE",
                        help="a .rly program, or a module file written by `rly build`")
    # NOTE: REMAINDER, so that options may also follow the arguments (`rly run f.rly 2
    # --prelude`); run() picks the known options out of it (argparse cannot intermix them).
    parser.add_argument("args", metavar="ARGS", nargs=argparse.REMAINDER,
                        help="arguments: literals (3, 2.5, True, [[1,2],[3,4]]) or .npy files")
    parser.add_argument("--entry", default=None,
                        help="the global to run (default: main, or the entry a module file "
                             "was built with `rly build --entry`)")
    add_prelude_flag(parser)
    parser.add_argument("--target", default=None,
                        help="compile for this target (llvm, cuda) with runtime.build instead "
                             "of interpreting")
    parser.add_argument("--max-depth", default=None, type=_positive_int, metavar="N",
                        help="the interpreter's limit on nested (non-tail) calls "
                             "(default 1,048,576)")


def _positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {n}")
    return n


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


_MACHO = (b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe",
          b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")


def file_kind(path: str) -> str:
    """What ``path`` holds, by its content: ``module``, ``source`` (text), or raise.

    A module file (``rly build`` output, by its magic bytes, also when truncated) is
    ``module``; an empty file, a shared library (ELF, Mach-O) or another binary file (NUL
    bytes) is a ``DiagnosticError`` saying what the file is; anything else is read as source.
    """
    from relay_ir.runtime.vm import MAGIC
    if path == "-" or not os.path.isfile(path):
        return "source"      # NOTE: stdin, or a missing path: read_source reports it
    with open(path, "rb") as f:
        head = f.read(8192)
        f.seek(max(0, os.fstat(f.fileno()).st_size - 16))
        tail = f.read()
    if head.startswith(MAGIC) or (len(head) >= 4 and MAGIC.startswith(head)):
        return "module"
    if head.startswith(b"\x7fELF") and tail.endswith(_RELAX_MAGIC):
        return "module"      # NOTE: a Relax VM module: a shared library with relay_ir's trailer
    if not head:
        raise DiagnosticError(f"{path}: the file is empty: neither a module file written by "
                              f"`rly build` nor a .rly program (missing version header)")
    if head.startswith(b"\x7fELF") or head[:4] in _MACHO:
        fmt = "ELF" if head.startswith(b"\x7fELF") else "Mach-O"
        raise DiagnosticError(f"{path}: this is a shared library ({fmt}), not a relay_ir module "
                              f"file (or a module file cut short (truncated): it lacks "
                              f"relay_ir's trailer); "
                              f"`rly run` takes a .rly program or a module file written by "
                              f"`rly build`")
    if b"\0" in head:
        raise DiagnosticError(f"{path}: this is a binary file (it holds NUL bytes), neither a "
                              f".rly program nor a module file written by `rly build`")
    return "source"


def _looks_literal(text: str) -> bool:
    s = text.strip()
    return bool(s) and (s[0] in "[(-+.0123456789" or s in ("True", "False"))


def _is_plain(v: Any) -> bool:
    from relay_ir.runtime.values import leaves
    return all(isinstance(x, (bool, int, float)) for x in leaves(v))


def _split_options(args: argparse.Namespace) -> list[str]:
    """Move the options found among ARGS (--entry, --max-depth, ...) onto ``args``; return rest."""
    rest: list[str] = []
    items = list(args.args)
    i = 0
    while i < len(items):
        tok = items[i]
        if tok == "--":
            rest.extend(items[i + 1:])
            break
        if tok in ("-h", "--help"):
            from relay_ir.cli import build_parser
            build_parser().parse_args(["run", "--help"])   # NOTE: prints the help, exits 0
        name, eq, val = tok.partition("=")
        if name in ("--entry", "--target", "--max-depth"):
            if not eq:
                if i + 1 >= len(items):
                    raise DiagnosticError(f"rly run: {name} needs a value")
                i += 1
                val = items[i]
            if name == "--max-depth":
                try:
                    args.max_depth = _positive_int(val)
                except argparse.ArgumentTypeError as e:
                    raise DiagnosticError(f"rly run: --max-depth: {e}") from None
            else:
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
    from relay_ir.runtime.values import format_value
    if file_kind(args.file) == "module":
        from relay_ir.runtime import load_module
        module = load_module(args.file)
        entry = args.entry or module.default_entry
        names = module.globals if hasattr(module, "globals") else module.compiled.globals
        require_entry(names, entry, args.file)
        values = [parse_argument(a, i + 1) for i, a in enumerate(arg_texts)]
        if args.target and args.target != module.target.kind.name:
            raise DiagnosticError(f"{args.file} was built for target "
                                  f"{module.target.kind.name}, not {args.target}")
        print(format_value(module(*values, entry=entry)))
        return 0
    import relay_ir as rly

    args.entry = args.entry or "main"
    text, _ = read_source(args.file)
    kwargs = {"prelude": True} if args.prelude else {}
    mod = rly.parse(text, source_name=args.file, **kwargs)
    require_entry(mod, args.entry, args.file, prelude=bool(args.prelude))
    values = [parse_argument(a, i + 1) for i, a in enumerate(arg_texts)]
    if args.target:
        if args.max_depth:
            from relay_ir.runtime.relax_vm import DEEP_DEPTH
            raise DiagnosticError(f"rly run: --max-depth bounds the interpreter; the compiled "
                                  f"executor (--target) has its own limit ({DEEP_DEPTH:,} "
                                  f"non-tail calls)")
        from relay_ir.runtime.executor import build
        exe = build(mod, target=args.target)
        result = exe(*values, entry=args.entry)
    else:
        from relay_ir.runtime.interpreter import DEFAULT_MAX_DEPTH, evaluate
        result = evaluate(mod, *values, entry=args.entry,
                          max_depth=args.max_depth or DEFAULT_MAX_DEPTH)
    print(format_value(result))
    return 0
