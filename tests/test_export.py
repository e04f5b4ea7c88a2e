"""Module files: export -> load in a fresh process -> run; every bad file is a diagnostic."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tvm  # noqa: F401  (a required dependency: a broken install fails here)

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.runtime.relax_export import TRAILER_MAGIC
from relay_ir.runtime.vm import MAGIC
from util_diff import TREE_SUM, assert_values_close

pytestmark = pytest.mark.tvm
HDR = '#[version = "0.0.5"]\n'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RECURSIVE = HDR + TREE_SUM + """
def @build(%n: int32, %x: Tensor[(4), float32]) -> Tree {
  if (%n == 0) { Leaf(%x) } else { Node(@build(%n - 1, multiply(%x, 0.5f)), Leaf(%x)) }
}
def @main(%x: Tensor[(4), float32], %n: int32) -> (Tree, Tensor[(4), float32]) {
  let %t = @build(%n, %x);
  (%t, @sum(%t))
}
"""

GRAD_SOURCE = HDR + """
def @main(%x: Tensor[(3), float32], %w: Tensor[(3), float32]) -> float32 {
  let %f = fn (%z: Tensor[(3), float32]) { multiply(%z, tanh(%w)) };
  sum(%f(%f(exp(%x))))
}
"""

# (name, module, arguments): run in this process by the interpreter, in a child from the file
X4 = np.float32([0.5, -1.0, 2.0, 0.25])


def _cases() -> list[tuple[str, rly.IRModule, tuple]]:
    rng = np.random.default_rng(0)
    mlp = rly.parse(open(os.path.join(ROOT, "examples", "mlp.rly")).read())
    from util_diff import random_inputs
    closures = rly.parse(open(os.path.join(ROOT, "examples", "closures.rly")).read())
    refs = rly.parse(open(os.path.join(ROOT, "examples", "refs.rly")).read())
    grad = passes.gradient(rly.parse(GRAD_SOURCE), "main")
    return [
        ("mlp", mlp, random_inputs(mlp, seed=3)),
        ("tree", rly.parse(RECURSIVE), (X4, np.int32(3))),
        ("closures", closures, (np.float32(1.5),)),
        ("refs", refs, (np.int32(10),)),
        ("grad", grad, (rng.standard_normal(3).astype("float32"),
                        rng.standard_normal(3).astype("float32"))),
    ]


CHILD = r"""
import json, sys
import numpy as np
import tvm
def no_compile(*a, **k):
    raise AssertionError("tvm.compile called while loading a module")
tvm.compile = no_compile
from relay_ir import runtime
from relay_ir.runtime.values import ADTValue
def plain(v):
    stack_out = []
    if isinstance(v, np.ndarray) or isinstance(v, np.generic):
        a = np.asarray(v)
        return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.ravel().tolist()}
    if isinstance(v, tuple):
        return {"tuple": [plain(x) for x in v]}
    if isinstance(v, ADTValue):
        return {"con": v.constructor.name, "fields": [plain(x) for x in v.fields]}
    raise TypeError(type(v))
spec = json.load(open(sys.argv[1]))
out = {}
for name, path, args in spec:
    m = runtime.load_module(path)
    vals = [np.asarray(a["data"], dtype=a["dtype"]).reshape(a["shape"]) for a in args]
    out[name] = plain(m(*vals))
out["passes_imported"] = sorted(k for k in sys.modules if k.startswith("relay_ir.passes"))
out["compiler_passes"] = "relay_ir.passes" in sys.modules
print(json.dumps(out))
"""


def _unplain(d: dict, cons: dict) -> object:
    if "tuple" in d:
        return tuple(_unplain(x, cons) for x in d["tuple"])
    if "con" in d:
        return runtime.ADTValue(cons[d["con"]], tuple(_unplain(x, cons) for x in d["fields"]))
    return np.asarray(d["data"], dtype=d["dtype"]).reshape(d["shape"])


def _run_child(code: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def _child_answer(code: str, spec: list, tmp_path: object) -> dict:
    """Run ``code`` in a fresh process on ``spec`` (a JSON file); its last stdout line, parsed."""
    spec_path = os.path.join(str(tmp_path), "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    proc = _run_child(code, spec_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_export_then_load_and_run_in_a_fresh_process(tmp_path: object) -> None:
    spec = []
    expected = {}
    mods = {}
    for name, mod, args in _cases():
        exe = runtime.build(mod)
        path = os.path.join(str(tmp_path), name + ".so")
        exe.export_library(path)
        data = open(path, "rb").read()
        assert data.startswith(b"\x7fELF") and data.endswith(TRAILER_MAGIC)
        want = runtime.evaluate(mod, *args)
        assert_values_close(exe(*args), want, rtol=1e-5, atol=1e-5, what=name)
        expected[name] = want
        mods[name] = mod
        spec.append([name, path, [{"dtype": str(np.asarray(a).dtype),
                                   "shape": list(np.shape(a)),
                                   "data": np.asarray(a).ravel().tolist()} for a in args]])
    out = _child_answer(CHILD, spec, tmp_path)
    assert out["passes_imported"] == [] and out["compiler_passes"] is False
    for name, want in expected.items():
        cons = {c.name_hint: c for td in mods[name].type_definitions.values()
                for c in td.constructors} if mods[name].type_definitions else {}
        assert_values_close(_unplain(out[name], cons), want, rtol=1e-5, atol=1e-5, what=name)


# ----------------------------------------------------------------------------- bad files
BAD_CHILD = r"""
import json, sys
from relay_ir import runtime
from relay_ir.errors import DiagnosticError
out = {}
for name, path in json.load(open(sys.argv[1])):
    try:
        runtime.load_module(path)
        out[name] = "loaded"
    except DiagnosticError as e:
        out[name] = type(e).__name__ + ": " + e.message
print(json.dumps(out))
"""


def test_bad_module_files_are_diagnostics_in_a_fresh_process(tmp_path: object) -> None:
    # NOTE: every corruption of the format: test_relax_export; here a fresh process, and the
    # files that are no module of this executor at all
    mod = rly.parse(RECURSIVE)
    good = os.path.join(str(tmp_path), "good.so")
    runtime.build(mod).export_library(good)
    data = open(good, "rb").read()
    files = {
        "truncated_end": data[:-1],
        "corrupt_library": data[:5000] + bytes([data[5000] ^ 0xFF]) + data[5001:],
        "random_bytes": np.random.default_rng(0).bytes(5000),
        "empty": b"",
    }
    spec = []
    for name, content in files.items():
        p = os.path.join(str(tmp_path), name + ".so")
        with open(p, "wb") as f:
            f.write(content)
        spec.append([name, p])
    import tvm
    elf = os.path.join(str(tmp_path), "plain_elf.so")
    lib = tvm.compile(_tiny_prim(), target="llvm")
    lib.export_library(elf)
    spec.append(["plain_elf", elf])
    spec.append(["missing", os.path.join(str(tmp_path), "nope.so")])
    spec.append(["good", good])
    out = _child_answer(BAD_CHILD, spec, tmp_path)
    expect = {
        "truncated_end": "cut short", "corrupt_library": "checksum",
        "random_bytes": "bad magic", "empty": "empty", "plain_elf": "plain shared library",
        "missing": "no such module file",
    }
    for name, words in expect.items():
        assert out[name].startswith("ModuleFileError: ") and words in out[name], (name, out)
    assert out["good"] == "loaded"


def test_a_file_of_the_old_python_vm_is_refused_with_rebuild_it(tmp_path: object) -> None:
    old = os.path.join(str(tmp_path), "old.so")
    with open(old, "wb") as f:
        f.write(MAGIC + b"\x03\x00\x00\x00" + bytes(200))
    with pytest.raises(runtime.ModuleFileError, match="made by an older relay_ir.*rebuild it"):
        runtime.load_module(old)


def _tiny_prim() -> object:
    from tvm import te
    a = te.placeholder((4,), "float32", name="a")
    b = te.compute((4,), lambda i: a[i] * 2.0, name="b")
    return te.create_prim_func([a, b])


def test_a_loaded_module_runs_every_shape_of_a_dynamic_group(tmp_path: object) -> None:
    from relay_ir.runtime.kernel_cache import KernelCache
    mod = rly.parse(HDR + """
def @main(%x: Tensor[(?), float32], %c: bool) -> Tensor[(?), float32] {
  if (%c) { exp(%x) } else { %x }
}""")
    # NOTE: a private cache: export takes symbolic kernels from the cache's object files
    exe = runtime.build(mod, cache=KernelCache(directory=os.path.join(str(tmp_path), "kc")))
    x3 = np.float32([1, 2, 3])
    np.testing.assert_allclose(exe(x3, True), np.exp(x3), rtol=1e-6)
    path = os.path.join(str(tmp_path), "dyn.so")
    exe.export_library(path)
    m = runtime.load_module(path)
    np.testing.assert_allclose(m(x3, True), np.exp(x3), rtol=1e-6)
    np.testing.assert_array_equal(m(np.float32([1, 2]), False), [1, 2])
    np.testing.assert_allclose(m(np.float32([1, 2]), True), np.exp([1, 2]), rtol=1e-6)
