"""Relax VM executables exported as standard TVM modules (``runtime.relax_export``).

``exe.export_library(path)`` of a ``runtime.build(mod, executor="relax")`` result writes one
shared library with relay_ir's trailer. A fresh process runs it both through
``relay_ir.runtime.load_module`` (no compiler passes imported, ``tvm.compile`` never called)
and through plain TVM (``tvm.runtime.load_module`` + ``relax.VirtualMachine``) in a process
where ``import relay_ir`` fails; both must agree with the reference interpreter. Bad files
(missing, truncated, flipped byte, wrong version, wrong target) are ``ModuleFileError``\\ s in
this process, never a crash.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import tvm  # noqa: F401  (a required dependency: a broken install fails here)

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.runtime import relax_export
from relay_ir.runtime.relax_export import FORMAT_VERSION, TRAILER_MAGIC
from relay_ir.runtime.values import ADTValue, RefValue
from util_diff import TREE_SUM, assert_values_close, random_inputs

pytestmark = pytest.mark.tvm
HDR = '#[version = "0.0.5"]\n'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RECURSIVE = HDR + """
def @halve(%n: int32, %x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  if (%n == 0) { %x } else { add(multiply(@halve(%n - 1, %x), 0.5f), %x) }
}
def @main(%x: Tensor[(4), float32], %n: int32) -> Tensor[(4), float32] { @halve(%n, %x) }
"""

LIST_SUM = HDR + """
type List { Cons(Tensor[(4), float32], List), Nil }
def @sum(%l: List) -> Tensor[(4), float32] {
  match (%l) {
    Cons(%x, %r) => add(%x, @sum(%r)),
    Nil => zeros(shape=[4], dtype="float32"),
  }
}
def @rev(%l: List, %acc: List) -> List {
  match (%l) { Cons(%x, %r) => @rev(%r, Cons(tanh(%x), %acc)), Nil => %acc }
}
def @main(%l: List) -> (Tensor[(4), float32], List) { (@sum(%l), @rev(%l, Nil)) }
"""

# the programs of test_export: a recursive tensor program, a gradient, their input
from test_export import GRAD_SOURCE, X4  # noqa: E402
from test_export import RECURSIVE as TREE  # noqa: E402


def _list_value(mod: rly.IRModule, items: list[np.ndarray]) -> ADTValue:
    cons = {c.name_hint: c for td in mod.type_definitions.values() for c in td.constructors}
    v = ADTValue(cons["Nil"], ())
    for x in reversed(items):
        v = ADTValue(cons["Cons"], (x, v))
    return v


def _cases() -> list[tuple[str, rly.IRModule, tuple]]:
    rng = np.random.default_rng(0)
    mlp = rly.parse(open(os.path.join(ROOT, "examples", "mlp.rly")).read())
    closures = rly.parse(open(os.path.join(ROOT, "examples", "closures.rly")).read())
    refs = rly.parse(open(os.path.join(ROOT, "examples", "refs.rly")).read())
    lists = rly.parse(LIST_SUM)
    grad = passes.gradient(rly.parse(GRAD_SOURCE), "main")
    items = [rng.standard_normal(4).astype("float32") for _ in range(3)]
    from relay_ir.runtime.executor import bind_params
    x, *weights = random_inputs(mlp, seed=4)
    bound = bind_params(mlp, "main", dict(zip(("w1", "b1", "w2", "b2"), weights)))
    return [
        ("mlp", mlp, random_inputs(mlp, seed=3)),
        ("mlp_bound_weights", bound, (x,)),     # the weights are constants of the bytecode
        ("recursive", rly.parse(RECURSIVE), (X4, np.int32(40))),
        ("lists", lists, (_list_value(lists, items),)),
        ("tree", rly.parse(TREE), (X4, np.int32(3))),
        ("closures", closures, (np.float32(1.5),)),
        ("refs", refs, (np.int32(10),)),
        ("grad", grad, (rng.standard_normal(3).astype("float32"),
                        rng.standard_normal(3).astype("float32"))),
    ]


# ----------------------------------------------------------------------------- encodings
def _enc_arg(v: object, tags: dict[str, int]) -> object:
    """An argument as JSON: tensors, tuples, ADT values (constructor name and VM tag)."""
    if isinstance(v, ADTValue):
        return {"adt": v.constructor.name_hint, "tag": tags[v.constructor.name_hint],
                "fields": [_enc_arg(x, tags) for x in v.fields]}
    if isinstance(v, tuple):
        return {"tuple": [_enc_arg(x, tags) for x in v]}
    a = np.asarray(v)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.ravel().tolist()}


def _plain_value(v: object, tags: dict[str, int]) -> object:
    """An interpreter value in the calling convention of plain TVM, as JSON: a tuple is an
    array, an ADT value the array (tag, fields...), a reference a one-element list."""
    if isinstance(v, ADTValue):
        return {"array": [{"int": tags[v.constructor.name_hint]}] +
                [_plain_value(x, tags) for x in v.fields]}
    if isinstance(v, tuple):
        return {"array": [_plain_value(x, tags) for x in v]}
    if isinstance(v, RefValue):
        return {"list": [_plain_value(v.value, tags)]}
    a = np.asarray(v)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.ravel().tolist()}


def _close(got: object, want: object, what: str) -> None:
    """Compare two JSON value trees (tensors with a tolerance, everything else exactly)."""
    stack = [(got, want, what)]
    while stack:
        g, w, where = stack.pop()
        assert type(g) is dict and g.keys() == w.keys(), f"{where}: {g!r} vs {w!r}"
        if "data" in w:
            assert g["dtype"] == w["dtype"] and g["shape"] == w["shape"], where
            np.testing.assert_allclose(np.asarray(g["data"], dtype=float),
                                       np.asarray(w["data"], dtype=float), rtol=1e-4,
                                       atol=1e-5, err_msg=where)
        elif "int" in w:
            assert g == w, where
        else:
            (k,) = w.keys()
            assert len(g[k]) == len(w[k]), where
            stack.extend((a, b, f"{where}.{i}") for i, (a, b) in enumerate(zip(g[k], w[k])))


RELAY_CHILD = r"""
import json, sys
import numpy as np
import tvm
def no_compile(*a, **k):
    raise AssertionError("tvm.compile called while loading a module")
tvm.compile = no_compile
from relay_ir import runtime
from relay_ir.runtime.values import ADTValue, RefValue
def dec(d, m):
    if "adt" in d:
        return ADTValue(m.constructors[d["adt"]], tuple(dec(x, m) for x in d["fields"]))
    if "tuple" in d:
        return tuple(dec(x, m) for x in d["tuple"])
    return np.asarray(d["data"], dtype=d["dtype"]).reshape(d["shape"])
def enc(v, tags):
    if isinstance(v, ADTValue):
        return {"array": [{"int": tags[v.constructor.name_hint]}] + [enc(x, tags) for x in v.fields]}
    if isinstance(v, tuple):
        return {"array": [enc(x, tags) for x in v]}
    if isinstance(v, RefValue):
        return {"list": [enc(v.value, tags)]}
    a = np.asarray(v)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.ravel().tolist()}
spec = json.load(open(sys.argv[1]))
out = {}
for name, path, args in spec:
    m = runtime.load_module(path)
    tags = {c[1]: i for i, c in enumerate(m.metadata["constructors"])}
    out[name] = enc(m(*[dec(a, m) for a in args]), tags)
out["passes_imported"] = sorted(k for k in sys.modules if k.startswith("relay_ir.passes"))
print(json.dumps(out))
"""

PLAIN_CHILD = r"""
import sys
sys.modules["relay_ir"] = None          # this process cannot import relay_ir
import json
import numpy as np
import tvm, tvm_ffi
from tvm import relax
try:
    import relay_ir
    raise SystemExit("relay_ir was importable")
except ImportError:
    pass
def dec(d):
    if "adt" in d:
        return (d["tag"], *[dec(x) for x in d["fields"]])
    if "tuple" in d:
        return tuple(dec(x) for x in d["tuple"])
    return tvm.runtime.tensor(np.asarray(d["data"], dtype=d["dtype"]).reshape(d["shape"]))
def enc(v):
    if isinstance(v, tvm.runtime.Tensor):
        a = v.numpy()
        return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.ravel().tolist()}
    if isinstance(v, tvm_ffi.List):
        return {"list": [enc(x) for x in v]}
    if isinstance(v, tvm_ffi.Array):
        return {"array": [enc(x) for x in v]}
    if type(v) is int:
        return {"int": v}
    raise TypeError(type(v))
spec = json.load(open(sys.argv[1]))
out = {}
for name, path, args in spec:
    lib = tvm.runtime.load_module(path)
    vm = relax.VirtualMachine(lib, tvm.cpu())
    out[name] = enc(vm["main"](*[dec(a) for a in args]))
print(json.dumps(out))
"""


def _run_child(code: str, spec: list, tmp_path: object) -> dict:
    spec_path = os.path.join(str(tmp_path), "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code, spec_path], capture_output=True,
                          text=True, timeout=180, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_export_runs_in_fresh_processes_with_and_without_relay_ir(tmp_path: object) -> None:
    spec, wants = [], {}
    for name, mod, args in _cases():
        exe = runtime.build(mod, executor="relax")
        path = os.path.join(str(tmp_path), name + ".so")
        exe.export_library(path)
        with open(path, "rb") as f:
            data = f.read()
        assert data.startswith(b"\x7fELF") and data.endswith(TRAILER_MAGIC), name
        meta = relax_export.read_metadata(path)
        tags = {c[1]: i for i, c in enumerate(meta["constructors"])}
        want = runtime.evaluate(mod, *args)
        assert_values_close(exe(*args), want, rtol=1e-4, atol=1e-5, what=name)
        wants[name] = _plain_value(want, tags)
        spec.append([name, path, [_enc_arg(a, tags) for a in args]])
    relay = _run_child(RELAY_CHILD, spec, tmp_path)
    assert relay["passes_imported"] == []
    plain = _run_child(PLAIN_CHILD, spec, tmp_path)
    for name, want in wants.items():
        _close(relay[name], want, f"{name} (relay_ir.runtime.load_module)")
        _close(plain[name], want, f"{name} (plain TVM)")


def test_loaded_module_checks_arguments_and_takes_entry(tmp_path: object) -> None:
    mod = rly.parse(HDR + """
def @halve(%n: int32, %x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  if (%n == 0) { %x } else { add(multiply(@halve(%n - 1, %x), 0.5f), %x) }
}
def @twice(%x: Tensor[(4), float32]) -> Tensor[(4), float32] { add(%x, %x) }
def @main(%x: Tensor[(4), float32], %n: int32) -> Tensor[(4), float32] {
  subtract(@halve(%n, %x), @twice(%x))
}""")
    path = os.path.join(str(tmp_path), "m.so")
    # NOTE: opt_level 0: @twice is not inlined into @main (it stays a global to call)
    runtime.build(mod, executor="relax", opt_level=0).export_library(path, entry="twice")
    m = runtime.load_module(path)
    assert m.default_entry == "twice" and sorted(m.globals) == ["halve", "main", "twice"]
    np.testing.assert_allclose(m(X4), 2 * X4)
    np.testing.assert_allclose(m(X4, np.int32(2), entry="main"),
                               runtime.evaluate(mod, X4, np.int32(2)), rtol=1e-6)
    with pytest.raises(rly.DiagnosticError, match=r"argument 1 \(%x\).*shape"):
        m(np.zeros(3, "float32"))
    with pytest.raises(rly.DiagnosticError, match=r"expected 2 arguments"):
        m(X4, entry="main")
    with pytest.raises(rly.DiagnosticError, match="no global function @nope"):
        m(X4, entry="nope")
    with pytest.raises(rly.DiagnosticError, match="cannot be exported again"):
        m.export_library(os.path.join(str(tmp_path), "again.so"))
    with pytest.raises(rly.DiagnosticError, match="no global function @nope to export"):
        runtime.build(mod, executor="relax").export_library(path, entry="nope")
    # deep non-tail recursion: past the calling thread's limit it runs on the large stack
    np.testing.assert_allclose(m(X4, np.int32(5000), entry="main"), 0 * X4, atol=1e-5)


def test_reexport_to_the_same_path_loads_the_new_module(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "m.so")
    for k in (2.0, 3.0):
        mod = rly.parse(HDR + f"def @main(%x: Tensor[(4), float32]) {{ multiply(%x, {k}f) }}")
        runtime.build(mod, executor="relax").export_library(path)
        np.testing.assert_allclose(runtime.load_module(path)(X4), k * X4)


# ----------------------------------------------------------------------------- bad files
@pytest.fixture(scope="module")
def good_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bytes]:
    path = str(tmp_path_factory.mktemp("relax_export") / "good.so")
    runtime.build(rly.parse(RECURSIVE), executor="relax").export_library(path)
    with open(path, "rb") as f:
        return path, f.read()


def _footer(data: bytes) -> tuple:
    return struct.unpack_from("<QQ32s32sI8s", data, len(data) - 92)


def _rewrite_meta(data: bytes, change: object) -> bytes:
    lsize, msize, lsum, _, ver, magic = _footer(data)
    meta = json.loads(data[lsize:lsize + msize])
    change(meta)
    text = json.dumps(meta).encode()
    return data[:lsize] + text + struct.pack("<QQ32s32sI8s", lsize, len(text), lsum,
                                             hashlib.sha256(text).digest(), ver, magic)


def _flip(data: bytes, i: int) -> bytes:
    return data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1:]


def _bad_files(data: bytes) -> dict[str, tuple[bytes, str]]:
    lsize, msize = _footer(data)[:2]

    def target(m: dict) -> None:
        m["target"]["config"]["mcpu"] = "a-cpu-from-elsewhere"

    def machine(m: dict) -> None:
        m["target"]["machine"] = "sparc64"

    def tvm_version(m: dict) -> None:
        m["tvm_version"] = "0.9.0"

    return {
        "truncated_in_library": (data[:lsize // 2], "cut short"),
        "truncated_in_metadata": (data[:lsize + msize // 2], "cut short"),
        "truncated_in_trailer": (data[:-10], "cut short"),
        "truncated_to_a_few_bytes": (data[:3], "bad magic"),
        "empty": (b"", "empty"),
        "flipped_library_byte": (_flip(data, lsize // 3), "checksum"),
        "flipped_metadata_byte": (_flip(data, lsize + 5), "checksum"),
        "flipped_size": (data[:-92] + _flip(data[-92:], 2), "corrupt or truncated"),
        "wrong_version": (data[:-12] + struct.pack("<I", FORMAT_VERSION + 98) + data[-8:],
                          f"format version {FORMAT_VERSION + 98}"),
        "wrong_target_cpu": (_rewrite_meta(data, target), "a-cpu-from-elsewhere"),
        "wrong_machine": (_rewrite_meta(data, machine), "sparc64"),
        "wrong_tvm_version": (_rewrite_meta(data, tvm_version), "built with TVM 0.9.0"),
        "appended_bytes": (data + b"x", "bytes appended"),
        "only_the_magic": (TRAILER_MAGIC, "truncated"),
        "only_the_version_and_magic": (data[-12:], "truncated"),
        "no_library": (data[-92:], "corrupt or truncated"),
    }


def test_bad_files_are_module_file_errors_in_process(tmp_path: object,
                                                     good_file: tuple[str, bytes]) -> None:
    path, data = good_file
    for name, (content, words) in _bad_files(data).items():
        p = os.path.join(str(tmp_path), name + ".so")
        with open(p, "wb") as f:
            f.write(content)
        with pytest.raises(runtime.ModuleFileError, match=words):
            runtime.load_module(p)
    with pytest.raises(runtime.ModuleFileError, match="no such module file"):
        runtime.load_module(os.path.join(str(tmp_path), "missing.so"))
    assert issubclass(runtime.ModuleFileError, rly.DiagnosticError)
    # the process is intact and the good file still loads
    np.testing.assert_allclose(runtime.load_module(path)(X4, np.int32(0)), X4)


def test_plain_tvm_loads_the_file_with_its_trailer_and_limits_depth(
        tmp_path: object, good_file: tuple[str, bytes]) -> None:
    path, _ = good_file
    code = PLAIN_CHILD.split("def dec")[0] + r"""
lib = tvm.runtime.load_module(sys.argv[1])
vm = relax.VirtualMachine(lib, tvm.cpu())
x = tvm.runtime.tensor(np.float32([0.5, -1.0, 2.0, 0.25]))
print(vm["main"](x, tvm.runtime.tensor(np.array(3, "int32"))).numpy().tolist())
try:
    vm["main"](x, tvm.runtime.tensor(np.array(100000, "int32")))
    print("no error")
except Exception as e:
    print("error:", str(e).strip().splitlines()[-1])
print(vm["main"](x, tvm.runtime.tensor(np.array(1, "int32"))).numpy().tolist())
vm2 = relax.VirtualMachine(tvm.runtime.load_module(sys.argv[2]), tvm.cpu())
add_x = vm2["main"](x)                       # a closure
print(vm2.invoke_closure(add_x, tvm.runtime.tensor(np.float32([1, 2, 3, 4]))).numpy().tolist())
"""
    clo = os.path.join(str(tmp_path), "closure.so")
    runtime.build(rly.parse(HDR + """
def @main(%x: Tensor[(4), float32]) -> fn (Tensor[(4), float32]) -> Tensor[(4), float32] {
  fn (%y: Tensor[(4), float32]) { add(%x, %y) }
}"""), executor="relax").export_library(clo)
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", code, path, clo], capture_output=True,
                          text=True, timeout=120, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    mod = rly.parse(RECURSIVE)
    np.testing.assert_allclose(json.loads(lines[0]), runtime.evaluate(mod, X4, np.int32(3)),
                               rtol=1e-6)
    assert lines[1].startswith("error:") and "recursion depth limit reached" in lines[1]
    np.testing.assert_allclose(json.loads(lines[2]), runtime.evaluate(mod, X4, np.int32(1)),
                               rtol=1e-6)
    np.testing.assert_allclose(json.loads(lines[3]), X4 + np.float32([1, 2, 3, 4]))


def test_old_module_files_still_load(tmp_path: object) -> None:
    mod = rly.parse(RECURSIVE)
    path = os.path.join(str(tmp_path), "old.so")
    runtime.build(mod).export_library(path)
    np.testing.assert_allclose(runtime.load_module(path)(X4, np.int32(2)),
                               runtime.evaluate(mod, X4, np.int32(2)), rtol=1e-6)


# ----------------------------------------------------------------------------- command line
def test_rly_build_executor_relax_and_rly_run(tmp_path: object,
                                              capsys: pytest.CaptureFixture) -> None:
    from relay_ir.cli import main
    src = os.path.join(str(tmp_path), "p.rly")
    with open(src, "w") as f:
        f.write(RECURSIVE)
    out = os.path.join(str(tmp_path), "p.so")
    assert main(["build", src, "-o", out, "--executor", "relax"]) == 0
    assert "wrote" in capsys.readouterr().out
    with open(out, "rb") as f:
        data = f.read()
    assert data.startswith(b"\x7fELF") and data.endswith(TRAILER_MAGIC)
    assert main(["run", out, "[1.0, 2.0, 3.0, 4.0]", "2"]) == 0
    got, err = capsys.readouterr()
    want = runtime.evaluate(rly.parse(RECURSIVE), np.float32([1, 2, 3, 4]), np.int32(2))
    assert got.strip() == runtime.format_value(want) and "Scope" not in err
    assert main(["run", out, "[1.0, 2.0]", "2"]) == 1
    assert "argument 1 (%x)" in capsys.readouterr().err
    cut = os.path.join(str(tmp_path), "cut.so")
    with open(cut, "wb") as f:
        f.write(data[:len(data) // 2])
    assert main(["run", cut, "[1.0, 2.0, 3.0, 4.0]", "2"]) == 1
    err = capsys.readouterr().err
    assert "cut short" in err and "Traceback" not in err
    assert main(["build", src, "-o", out, "--executor", "nope"]) == 1
    assert "executor" in capsys.readouterr().err


def test_kernels_compiled_in_this_process_are_linked_without_compiling_again(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from relay_ir.runtime.kernel_cache import KernelCache
    mod = rly.parse(open(os.path.join(ROOT, "examples", "mlp.rly")).read())
    args = random_inputs(mod, seed=5)
    exe = runtime.build(mod, executor="relax",
                        cache=KernelCache(str(tmp_path), use_disk=False))

    def no_recompile(*a: object, **k: object) -> None:
        raise AssertionError("a kernel compiled in this process was compiled again")
    monkeypatch.setattr(relax_export, "_recompiled", no_recompile)
    path = os.path.join(str(tmp_path), "mlp.so")
    exe.export_library(path)
    m = runtime.load_module(path)
    assert m.num_compiled() == exe.num_compiled() > 0
    assert_values_close(m(*args), runtime.evaluate(mod, *args), rtol=1e-4, atol=1e-6)


def test_kernels_from_the_disk_cache_link_its_object_files(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from relay_ir.runtime.kernel_cache import KernelCache
    mod = rly.parse(open(os.path.join(ROOT, "examples", "mlp.rly")).read())
    args = random_inputs(mod, seed=6)
    want = runtime.evaluate(mod, *args)
    cache = KernelCache(os.path.join(str(tmp_path), "cache"))
    runtime.build(mod, executor="relax", cache=cache)
    cache.clear_memory()                 # what a new process sees: the disk cache only
    exe = runtime.build(mod, executor="relax", cache=cache)
    assert cache.stats.disk_hits > 0
    path = os.path.join(str(tmp_path), "mlp.so")
    real = relax_export._recompiled

    def no_recompile(*a: object, **k: object) -> None:
        raise AssertionError("a kernel of the disk cache was compiled again")
    monkeypatch.setattr(relax_export, "_recompiled", no_recompile)
    exe.export_library(path)
    assert_values_close(runtime.load_module(path)(*args), want, rtol=1e-4, atol=1e-6)
    # an altered object file is not linked: the kernels are compiled again instead
    objs = [f for f in os.listdir(os.path.join(str(tmp_path), "cache")) if f.endswith(".o")]
    assert objs
    for f in objs:
        with open(os.path.join(str(tmp_path), "cache", f), "r+b") as fh:
            fh.seek(100)
            fh.write(b"\xff\xff\xff\xff")
    calls = []
    monkeypatch.setattr(relax_export, "_recompiled",
                        lambda *a: calls.append(1) or real(*a))
    exe.export_library(path)
    assert calls
    assert_values_close(runtime.load_module(path)(*args), want, rtol=1e-4, atol=1e-6)


@pytest.mark.stress
def test_every_suite_program_it_emits_exports_and_agrees_after_loading(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """The differential sweep (test_vm_diff) through export and load: every program the
    Relax executor emits agrees with the interpreter when run from its module file."""
    import test_vm_diff as tv
    from relay_ir.errors import DiagnosticError
    from relay_ir.runtime import relax_vm
    from relay_ir.runtime.relax_vm import RelaxUnsupportedError
    from util_diff import assert_runs_like_the_interpreter
    monkeypatch.setattr(relax_vm, "DEEP_DEPTH", 20_000)
    path = os.path.join(str(tmp_path), "m.so")
    agreed = hosts = 0
    for name, mod, runs, args in tv._with_inputs():
        if not runs:
            continue
        try:
            exe = runtime.build(mod, executor="relax")
        except RelaxUnsupportedError:
            continue
        if any(k.dyn is not None and k.dyn.mode == "host"
               for k in exe._backend.kernels.values()):
            hosts += 1      # NOTE: carried as Relay text, run by relay_ir after loading
        exe.export_library(path)
        m = runtime.load_module(path)
        assert_runs_like_the_interpreter(m, mod, args, name)
        agreed += 1
    assert agreed >= 255 and hosts >= 1, (agreed, hosts)


def test_a_symbolic_program_exports_and_runs_every_shape_after_loading(tmp_path: object) -> None:
    """Symbolic kernels (one kernel for every n, shapes computed in the bytecode) export."""
    import relay_ir as rly
    from relay_ir import runtime
    src = '#[version = "0.0.5"]\n' + """
def @main[n](%x: Tensor[(n, 3), float32], %w: Tensor[(4, 3), float32]) {
  nn.relu(nn.dense(tanh(%x), %w))
}"""
    exe = runtime.build(rly.parse(src), executor="relax")
    path = os.path.join(str(tmp_path), "sym.so")
    exe.export_library(path)
    loaded = runtime.load_module(path)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3)).astype("float32")
    for n in (1, 5, 64):
        x = rng.standard_normal((n, 3)).astype("float32")
        want = runtime.evaluate(rly.parse(src), x, w)
        np.testing.assert_allclose(loaded(x, w), want, rtol=1e-5, atol=1e-5)


HOST_CHILD = r"""
import sys
import numpy as np
from relay_ir import runtime
from relay_ir.errors import DiagnosticError
m = runtime.load_module(sys.argv[1])
print(m.host_kernels())
for shape in ([2, 3], [3, 2], [1, 6]):
    print(m(np.arange(6, dtype="float32"), np.array(shape)).shape)
try:
    m(np.arange(6, dtype="float32"), np.array([4, 2]))
except DiagnosticError as e:
    print("error:", str(e).splitlines()[0])
"""


def test_a_program_with_a_host_group_exports_and_loads_through_relay_ir(tmp_path: object
                                                                        ) -> None:
    """A group run on the host (dyn.reshape: a value-dependent shape) goes into the file as
    Relay text; a fresh process runs it through relay_ir; plain TVM names what is missing."""
    src = '#[version = "0.0.5"]\n' + """
def @main(%x: Tensor[(6), float32], %s: Tensor[(2), int64]) {
  dyn.reshape(tanh(%x), %s)
}"""
    exe = runtime.build(rly.parse(src), executor="relax")
    x = np.arange(6, dtype="float32")
    np.testing.assert_allclose(exe(x, np.array([2, 3])), np.tanh(x).reshape(2, 3), rtol=1e-6)
    path = os.path.join(str(tmp_path), "h.so")
    exe.export_library(path)
    meta = relax_export.read_metadata(path)
    ((label, text),) = meta["host_groups"].values()
    assert label == "dyn.reshape+tanh" and "dyn.reshape(" in text and "tanh(" in text
    proc = subprocess.run([sys.executable, "-c", HOST_CHILD, path], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:4] == ["['host:dyn.reshape+tanh']", "(2, 3)", "(3, 2)", "(1, 6)"], lines
    assert lines[4].startswith("error:") and "cannot reshape (6) with 6 elements to (4, 2)" \
        in lines[4], lines
    plain = PLAIN_CHILD.split("def dec(d):")[0] + (
        "try:\n    tvm.relax.VirtualMachine(tvm.runtime.load_module(sys.argv[1]), tvm.cpu())\n"
        "except Exception as e:\n    print(str(e).splitlines()[0])\n")
    proc = subprocess.run([sys.executable, "-c", plain, path], capture_output=True, text=True,
                          timeout=300)
    assert "relay_ir.host.group" in proc.stdout, (proc.stdout, proc.stderr)
