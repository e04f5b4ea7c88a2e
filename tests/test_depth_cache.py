"""The depth-counting library of the Relax VM is kept in the kernel cache directory, so a fresh
process does not compile it again (W8: time to the first step)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

PROGRAM = r'''
import sys
import numpy as np
import relay_ir as rly
from relay_ir import runtime
from relay_ir.runtime import relax_vm
if sys.argv[1] == "no-compile":
    def refuse():
        raise AssertionError("compiled the depth library again")
    relax_vm._depth_module = refuse
m = rly.parse("""#[version = "0.0.5"]
def @f(%n: int64, %x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  if (%n <= 0i64) { %x } else { tanh(@f(%n - 1i64, %x)) }
}
def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] { @f(3i64, %x) }""")
print(float(runtime.build(m)(np.ones(4, "float32"))[0]))
'''


def _run(tmp_path, mode: str) -> float:
    env = dict(os.environ, RELAY_IR_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", PROGRAM, mode], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return float(r.stdout.strip())


def test_fresh_process_loads_the_depth_library_from_the_cache(tmp_path) -> None:
    want = float(np.tanh(np.tanh(np.tanh(1.0))))

    def close(v: float) -> bool:
        return abs(v - want) < 1e-6
    assert close(_run(tmp_path, "compile"))
    libs = [f for f in os.listdir(tmp_path) if f.startswith("depth-")]
    assert len(libs) == 1
    assert close(_run(tmp_path, "no-compile"))
    # a damaged file is rebuilt, not trusted
    with open(os.path.join(tmp_path, libs[0]), "wb") as f:
        f.write(b"not a library")
    assert close(_run(tmp_path, "compile"))
    assert close(_run(tmp_path, "no-compile"))
