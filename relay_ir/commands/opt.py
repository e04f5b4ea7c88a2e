"""``rly opt FILE``: run a pass pipeline on a program and print the result.

``--passes to-anf,dce,fold-constant`` names the passes (they run whatever their level);
without it the default ``optimize`` pipeline runs at ``--opt-level`` (0 to 3, default 2), and
keeps only ``@main`` and what it reaches (``--entry`` names another root; a name the module
lacks is refused with the list of globals, exit status 2).
``--timing`` prints a per-pass time table on stderr, ``--print-after NAME`` prints the module
after each run of pass NAME (repeatable; ``all`` for every pass) on stderr, ``--prelude``
parses with the standard prelude, ``--show-types`` prints inferred types. An unknown level or
pass name is refused (exit status 2) with the valid choices. ``--unsafe-math`` opts into zero
rules that change inf, nan or -0.0 results (``x * 0 => 0``; off by default, docs/passes.md).
"""
from __future__ import annotations

import argparse
import sys

from relay_ir.cli import read_source
from relay_ir.commands import UsageError, add_prelude_flag, add_show_types_flag, require_entry


OPT_LEVELS = (0, 1, 2, 3)


def _opt_level(text: str) -> int:
    """``--opt-level`` value: an integer in :data:`OPT_LEVELS`."""
    try:
        level = int(text)
    except ValueError:
        level = -1
    if level not in OPT_LEVELS:
        raise argparse.ArgumentTypeError(
            f"invalid level {text!r} (choose from {', '.join(map(str, OPT_LEVELS))})")
    return level


def _pass_name(text: str) -> str:
    """``--print-after`` value: a registered pass name or ``all``."""
    from relay_ir.passes import PASS_REGISTRY
    if text != "all" and text not in PASS_REGISTRY:
        raise argparse.ArgumentTypeError(
            f"unknown pass {text!r} (choose from all, {', '.join(sorted(PASS_REGISTRY))})")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly opt``."""
    parser.add_argument("file", metavar="FILE", nargs="?",
                        help="a .rly program ('-' for stdin)")
    parser.add_argument("--passes", default=None,
                        help="comma-separated pass names (default: the optimize pipeline); "
                             "known: run `rly opt --list-passes`")
    parser.add_argument("--opt-level", type=_opt_level, default=2, dest="opt_level",
                        metavar="{0,1,2,3}",
                        help="optimization level for the default pipeline (default 2; 3 adds "
                             "cse, 0 only normalizes and types)")
    parser.add_argument("--entry", default=None, metavar="NAME",
                        help="the default pipeline keeps this global and what it reaches "
                             "(default main; a module without @main keeps every global; a "
                             "NAME the module lacks is refused)")
    parser.add_argument("--unsafe-math", action="store_true", dest="unsafe_math",
                        help="allow zero rules that change inf, nan or -0.0 results "
                             "(x*0 => 0, x+0 => x); off by default")
    parser.add_argument("--timing", action="store_true", help="per-pass time table on stderr")
    parser.add_argument("--print-after", action="append", default=[], dest="print_after",
                        metavar="NAME", type=_pass_name,
                        help="print the module after pass NAME on stderr (a registered pass "
                             "or `all`; repeatable)")
    add_prelude_flag(parser)
    add_show_types_flag(parser)
    parser.add_argument("--list-passes", action="store_true", dest="list_passes",
                        help="list the registered passes and exit")


def run(args: argparse.Namespace) -> int:
    """Parse, optimize, print."""
    from relay_ir import passes
    from relay_ir.passes import PASS_REGISTRY, PassContext, get_pass
    from relay_ir.passes.instrument import PrintIRAfter, Timing
    from relay_ir.printer import astext

    if args.list_passes:
        for name in sorted(PASS_REGISTRY):
            try:
                p = get_pass(name)
                doc = (type(p).__doc__ or "").strip().splitlines()[0]
                print(f"{name:<16} level {p.opt_level}  {doc}")
            except Exception as e:  # NOTE: a pass module that does not import: say so
                print(f"{name:<16} (unavailable: {e})")
        return 0

    from relay_ir.parser import parse
    if args.file is None:
        print("rly opt: a FILE is required", file=sys.stderr)
        return 2
    text, source = read_source(args.file)
    mod = parse(text, source, prelude=args.prelude)
    if args.entry is not None:
        require_entry(mod, args.entry, source, prelude=args.prelude)
    entry = args.entry or "main"

    instruments: list = list(PassContext.current().instruments)
    timing = Timing() if args.timing else None
    if timing is not None:
        instruments.append(timing)
    if args.print_after:
        names = () if "all" in args.print_after else tuple(args.print_after)
        instruments.append(PrintIRAfter(names, file=sys.stderr, show_types=args.show_types))

    if args.passes is not None:
        try:
            pipeline = passes.parse_pipeline(args.passes)
        except ValueError as e:
            raise UsageError(f"--passes: {e}") from None
        # NOTE: passes named explicitly always run, whatever their opt_level
        with PassContext(opt_level=args.opt_level,
                         required_pass=tuple(p.name for p in pipeline.passes),
                         instruments=instruments,
                         config={"unsafe_math": True} if args.unsafe_math else None) as ctx:
            out = pipeline(mod, ctx)
    else:
        with PassContext(opt_level=args.opt_level, instruments=instruments):
            out = passes.optimize(mod, opt_level=args.opt_level, entry=entry,
                                  unsafe_math=args.unsafe_math)

    text = astext(out, show_types=args.show_types)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if timing is not None:
        print(timing.table(), file=sys.stderr)
    return 0
