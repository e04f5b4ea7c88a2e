"""Subcommands of the `rly` command line (one module each)."""
from __future__ import annotations

import argparse


def add_prelude_flag(parser: argparse.ArgumentParser) -> None:
    """``--prelude``: parse with the standard prelude (the same flag for every subcommand)."""
    parser.add_argument("--prelude", action="store_true",
                        help="parse with the standard prelude (List, Option, map, foldl, ...)")


def add_show_types_flag(parser: argparse.ArgumentParser) -> None:
    """``--show-types``: print inferred types on every binding."""
    parser.add_argument("--show-types", action="store_true", dest="show_types",
                        help="print inferred types on every binding")
