"""``rly tune FILE [--trials N] [--log DIR] [--params W.npz]``: tune a program's kernels.

Builds FILE as ``rly build`` does, then runs :func:`relay_ir.runtime.tune`: MetaSchedule
searches ``--trials`` candidates over the program's kernels, writes its database in ``--log``
(default ``<kernel cache>/tuning``), and every tuned kernel that measured faster than relay_ir's
own schedule replaces it in the kernel cache, so later ``rly build`` / ``runtime.build`` calls
on this machine use it. ``--trials 0`` re-applies the records of an existing log. ``--params``:
an ``.npz`` of weights (as ``rly import`` writes) bound as constants, as
``runtime.build(params=...)`` does; tune with the same weights and options you build with.
Needs the ``tune`` extra (psutil, cloudpickle).
"""
from __future__ import annotations

import argparse

from relay_ir.cli import read_source
from relay_ir.commands import add_build_flags, add_prelude_flag, require_entry
from relay_ir.errors import DiagnosticError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly tune``."""
    parser.add_argument("file", metavar="FILE", help="a .rly program ('-' for stdin)")
    parser.add_argument("--trials", type=int, default=64,
                        help="measured candidates over all kernels (default 64; 0: apply "
                             "the log's records only)")
    parser.add_argument("--log", default=None, metavar="DIR",
                        help="the tuning database directory (default: <kernel cache>/tuning)")
    parser.add_argument("--params", default=None, metavar="W.npz",
                        help="weights bound as constants (an .npz keyed by parameter name)")
    add_build_flags(parser, "the global whose kernels are tuned (default main)")
    add_prelude_flag(parser)


def run(args: argparse.Namespace) -> int:
    """Tune FILE's kernels; print the report table."""
    import numpy as np

    import relay_ir as rly
    from relay_ir.passes import InferType
    from relay_ir.runtime.tuning import tune

    text, name = read_source(args.file)
    kwargs = {"prelude": True} if args.prelude else {}
    mod = InferType()(rly.parse(text, source_name=name, **kwargs))
    require_entry(mod, args.entry, name, prelude=bool(args.prelude))
    params = None
    if args.params:
        try:
            with np.load(args.params) as z:
                params = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise DiagnosticError(f"--params {args.params}: not a readable .npz file "
                                  f"({e})") from None
    report = tune(mod, args.target, trials=args.trials, log=args.log, entry=args.entry,
                  params=params, opt_level=args.opt_level, progress=True)
    print(report.table())
    return 0
