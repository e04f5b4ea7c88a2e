"""``rly ops``: the operator reference from the registry.

``rly ops`` lists every operator with a one-line summary, grouped by family; ``rly ops NAME``
prints that operator's full entry (call with defaults, attributes, type rule, differentiability,
backend, fusion pattern); ``rly ops --markdown`` prints the whole reference as Markdown, the
text of ``docs/ops.md``. An unknown NAME is a usage error (exit status 2) naming the closest
operators. See :mod:`relay_ir.op.reference`.
"""
from __future__ import annotations

import argparse

from relay_ir.commands import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly ops``."""
    parser.add_argument("name", nargs="?", metavar="NAME",
                        help="an operator name (nn.dense): print its full entry")
    parser.add_argument("--markdown", action="store_true",
                        help="print the whole reference as Markdown (the text of docs/ops.md)")


def run(args: argparse.Namespace) -> int:
    """Print the operator list, one operator's entry, or the Markdown reference."""
    from relay_ir.op import list_ops
    from relay_ir.op import reference as R
    if args.markdown:
        if args.name:
            raise UsageError("rly ops: --markdown prints every operator; give no NAME")
        print(R.markdown(), end="")
        return 0
    if args.name is None:
        print(R.summary_text(R.entries()), end="")
        return 0
    entry = R.lookup_entry(args.name)
    if entry is None:
        close = R.suggestions(args.name, [d.name for d in list_ops()])
        hint = (f"did you mean {', '.join(close)}?" if close
                else "`rly ops` lists every operator")
        raise UsageError(f"rly ops: there is no operator `{args.name}` ({hint})")
    print(R.entry_text(entry), end="")
    return 0
