"""``rly build FILE -o model.so [--target llvm|cuda]``: compile a program to a module file.

The program is parsed (``--prelude`` for the standard prelude), type-checked, optimized, fused
and compiled with ``runtime.build``; ``-o`` names the module file that
``export_library`` writes: one standard TVM shared library (bytecode + kernels) with
relay_ir's trailer (format version, checksums, entry types; docs/runtime.md):
``tvm.runtime.load_module`` + ``tvm.relax.VirtualMachine`` run it without relay_ir. ``rly run
model.so ARGS`` runs it later without the compiler. ``--opt-level`` (0 to 3, default 2) is the
optimization level. ``--entry NAME`` (default ``main``) is the global to build: the module
file holds it and the globals it reaches, and runs it by default (``rly run model.so``
without ``--entry``; an unknown name is a usage error, exit status 2). Type errors and
unsupported targets are
diagnostics (exit status 1). ``--executor relax`` is accepted (the one compiled executor).
"""
from __future__ import annotations

import argparse
import os

from relay_ir.cli import read_source
from relay_ir.commands import add_build_flags, add_prelude_flag, require_entry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly build``."""
    parser.add_argument("file", metavar="FILE", help="a .rly program ('-' for stdin)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="the module file to write (e.g. model.so)")
    add_build_flags(parser, "the global to build: the module holds it and what it reaches, "
                            "and runs it by default (default: main)")
    add_prelude_flag(parser)
    parser.add_argument("--executor", default=None, metavar="NAME",
                        help="relax (accepted: TVM's Relax VM is the one compiled executor)")


def run(args: argparse.Namespace) -> int:
    """Parse, compile and export FILE; print where the module went."""
    import relay_ir as rly
    from relay_ir import runtime
    from relay_ir.passes import InferType

    text, name = read_source(args.file)
    kwargs = {"prelude": True} if args.prelude else {}
    mod = InferType()(rly.parse(text, source_name=name, **kwargs))
    require_entry(mod, args.entry, name, prelude=bool(args.prelude))
    kwargs = {"executor": args.executor} if args.executor else {}
    exe = runtime.build(mod, target=args.target, entry=args.entry, opt_level=args.opt_level,
                        **kwargs)
    out = os.fspath(args.output)
    exe.export_library(out, entry=args.entry)
    kernels = exe.num_compiled()
    print(f"wrote {out} ({os.path.getsize(out)} bytes, {kernels} kernels, target "
          f"{exe.target.kind.name})")
    return 0
