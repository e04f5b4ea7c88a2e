"""runtime.build freezes the long-lived objects of the imports once per process
(runtime/gc_freeze.py), unless RELAY_IR_GC_FREEZE=0."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import gc, numpy as np, relay_ir as rly
from relay_ir import runtime
from relay_ir.runtime import gc_freeze
assert gc.get_freeze_count() == 0
m = rly.parse('#[version = "0.0.5"]\\ndef @main(%x: Tensor[(3), float32]) { exp(%x) }')
exe = runtime.build(m)
first = gc.get_freeze_count()
runtime.build(m)
assert gc.get_freeze_count() == first            # once per process
np.testing.assert_allclose(exe(np.ones(3, "float32")), np.exp(np.ones(3)), rtol=1e-6)
print(first, "tvm" in __import__("sys").modules)
"""


@pytest.mark.tvm
@pytest.mark.parametrize("setting", ["1", "0"])
def test_first_build_freezes_once_unless_turned_off(setting: str) -> None:
    env = dict(os.environ, RELAY_IR_GC_FREEZE=setting)
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    count, tvm_loaded = r.stdout.split()
    assert tvm_loaded == "True"
    if setting == "1":
        assert int(count) > 10_000          # TVM's and relay_ir's objects
    else:
        assert int(count) == 0
