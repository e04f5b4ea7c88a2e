"""The ``rly`` command line.

Each subcommand lives in ``relay_ir/commands/<name>.py`` as ``add_arguments(parser)`` and
``run(args) -> int``. User errors (``DiagnosticError``) print their message with the source line
and a caret and exit with status 1; they never show a Python traceback. Bad option values
(``UsageError``: an unknown ``--entry`` or pass name) exit with status 2, as argparse's do.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from relay_ir.errors import DiagnosticError, ParseError
from relay_ir.span import SourceFile, Span

COMMANDS = {
    "fmt": "print canonical text (--check, -i, --prelude)",
    "check": "type-check and print the type of every global",
    "run": "run a program with the interpreter (--target: compiled), or a built module file",
    "build": "compile a program to a module file (-o model.so) for `rly run`",
    "opt": "run a pass pipeline (default: optimize, keeping what @main reaches) and print "
           "the result",
    "grad": "print the reverse-mode gradient program of a global",
    "viz": "draw the dataflow and fusion groups (DOT, or SVG with Graphviz)",
    "cache": "show the compiled-kernel cache (--clear empties it)",
    "ops": "list the operators, or print one operator's reference entry (rly ops NAME)",
    "import": "an ONNX model as .rly text (-o model.rly; weights in model.npz)",
    "tune": "tune a program's kernels with MetaSchedule (kept in the kernel cache where "
            "faster)",
}
# commands whose module name differs from the command (a Python keyword)
_MODULES = {"import": "import_"}


def read_source(path: str) -> tuple[str, str]:
    """The text of ``path`` (``-`` is standard input) and its display name.

    Bytes that are not UTF-8 are a :class:`ParseError` pointing at the offending line and
    column, never a traceback.
    """
    if path == "-":
        data, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        with open(path, "rb") as f:
            data, name = f.read(), path
    try:
        return data.decode("utf-8"), name
    except UnicodeDecodeError as e:
        good = data[:e.start].decode("utf-8")
        line = good.count("\n") + 1
        column = e.start - (good.rfind("\n") + 1 if "\n" in good else 0) + 1
        text = good + data[e.start:].decode("utf-8", errors="replace")
        span = Span(SourceFile(name, text), line, column, line, column + 1)
        raise ParseError(f"the file is not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                         f"{e.start})", span) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rly", description="relay_ir: Relay text tools")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, help_ in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        mod = _command_module(name)
        if mod is not None:
            mod.add_arguments(p)
    return parser


def _command_module(name: str):  # type: ignore[no-untyped-def]
    module = f"relay_ir.commands.{_MODULES.get(name, name)}"
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            return None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    mod = _command_module(args.command)
    if mod is None:
        print(f"rly: `{args.command}` is not available yet", file=sys.stderr)
        return 2
    from relay_ir.commands import UsageError
    try:
        return int(mod.run(args) or 0)
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return 2
    except DiagnosticError as e:
        print(str(e), file=sys.stderr)
        return 1
    except OSError as e:
        print(f"rly: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
