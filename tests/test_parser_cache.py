"""The parser's LALR tables cached on disk: written once, reused, rebuilt when damaged."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = '''#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %c: bool) -> Tensor[(2, 3), float32] {
  let %y = if (%c) { nn.relu(%x) } else { multiply(%x, 2f) };
  add(%y, 1f)
}'''

CHILD = f"""
import relay_ir as rly
from relay_ir._fastparse import STATS
print(rly.astext(rly.parse({PROGRAM!r})))
print("fast path:", STATS["fast"] > 0)
"""


def _child(cache: str) -> str:
    env = dict(os.environ, RELAY_IR_CACHE_DIR=cache,
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""
    return proc.stdout


def test_tables_are_written_once_reused_and_rebuilt_when_damaged(tmp_path: object) -> None:
    cache = str(tmp_path)
    first = _child(cache)
    assert first.endswith("fast path: True\n") and "nn.relu(%x)" in first
    (table,) = glob.glob(os.path.join(cache, "parser-*.lark"))
    stamp = os.stat(table).st_mtime_ns
    assert _child(cache) == first
    assert os.stat(table).st_mtime_ns == stamp          # read, not written again
    for damage in (b"", b"not a pickle\n", open(table, "rb").read()[:5000]):
        with open(table, "wb") as f:
            f.write(damage)
        assert _child(cache) == first                   # rebuilt silently, same parser
        assert os.path.getsize(table) > 10_000           # and the tables written again
