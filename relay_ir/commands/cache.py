"""``rly cache``: show the compiled-kernel cache; ``rly cache --clear`` empties it.

The cache lives in ``$RELAY_IR_CACHE_DIR`` (default ``~/.cache/relay_ir/kernels``); see
:mod:`relay_ir.runtime.kernel_cache`.
"""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rly cache``."""
    parser.add_argument("--clear", action="store_true",
                        help="delete every cached kernel, whole build and optimized module")


def run(args: argparse.Namespace) -> int:
    """Print the cache directory and its size, or clear it."""
    from relay_ir.runtime.kernel_cache import cache_dir, clear_disk, disk_usage, pipeline_usage
    d = cache_dir()
    if args.clear:
        n = clear_disk(d)
        print(f"cleared {n} files from {d}")
        return 0
    entries, libs, total = disk_usage(d)
    print(f"kernel cache: {d}")
    print(f"  {entries} kernels in {libs} libraries, {total / 1e6:.2f} MB")
    use = pipeline_usage(d)
    print(f"  {use['builds'][0]} whole builds ({use['builds'][1] / 1e6:.2f} MB), "
          f"{use['optimize'][0]} optimized modules ({use['optimize'][1] / 1e6:.2f} MB)")
    print("  (set RELAY_IR_CACHE_DIR to move it; `rly cache --clear` empties it)")
    return 0
