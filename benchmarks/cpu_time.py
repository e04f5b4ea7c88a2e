"""Run a benchmark script with CPU time (``time.process_time``) in place of wall-clock time.

On a shared machine (other jobs keeping the load above the core count) wall-clock timings
move by 2x between identical runs; CPU time of the process does not count the waiting.

Run: ``.venv/bin/python benchmarks/cpu_time.py benchmarks/bench_interpreter.py [ARGS...]``.
"""
from __future__ import annotations

import runpy
import sys
import time


def main() -> None:
    """Patch ``time.perf_counter`` and run the script named on the command line."""
    if len(sys.argv) < 2:
        raise SystemExit("usage: cpu_time.py SCRIPT [ARGS...]")
    time.perf_counter = time.process_time  # NOTE: for this process only
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
