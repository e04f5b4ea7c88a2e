"""Issue 20, runtime part: exported modules that run, one argument check, build and run CLI.

Written as a user meets them: ``rly build`` / ``rly run`` (``relay_ir.cli.main`` or a fresh
process), ``runtime.build``, ``export_library`` and ``runtime.load_module``. Programs are
small and compiled once per module (fixtures), so the file stays fast.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.cli import main
from relay_ir.passes import InferType

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HDR = '#[version = "0.0.5"]\n'
MLP = os.path.join(REPO, "examples", "mlp_train.rly")


def parse(text: str) -> rly.IRModule:
    return InferType()(rly.parse(HDR + text))


def header_of(path: str) -> dict:
    """The verified metadata of a module file (format in docs/runtime.md)."""
    from relay_ir.runtime.relax_export import read_metadata
    return read_metadata(path)


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def scalar(text: str) -> float:
    return float(text.strip().rstrip("f"))


# ============================================================================ exported modules
@pytest.fixture(scope="module")
def mlp_inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[np.ndarray]]:
    d = tmp_path_factory.mktemp("mlp")
    rng = np.random.default_rng(0)
    shapes = [(32, 64), (32, 10), (64, 64), (64,), (64, 10), (10,)]
    arrays = [rng.uniform(-1, 1, s).astype("float32") for s in shapes]
    paths = []
    for i, a in enumerate(arrays):
        p = str(d / f"a{i}.npy")
        np.save(p, a)
        paths.append(p)
    return paths, arrays


def test_mlp_train_builds_and_runs_from_the_module_file(
        tmp_path: object, capsys: pytest.CaptureFixture,
        mlp_inputs: tuple[list[str], list[np.ndarray]]) -> None:
    # @main calls @logits (batch `?`); inlined, its kernels must still reach the file
    paths, arrays = mlp_inputs
    out = os.path.join(str(tmp_path), "mt.so")
    rc, text, err = run_cli(capsys, "build", MLP, "-o", out)
    assert rc == 0, err
    rc, text, err = run_cli(capsys, "run", out, *paths)
    assert rc == 0, err
    want = runtime.evaluate(InferType()(rly.parse(open(MLP).read())), *arrays)
    np.testing.assert_allclose(scalar(text), want, rtol=1e-5)


TOUR_CHILD = """
import sys
import numpy as np
from relay_ir import runtime
m = runtime.load_module(sys.argv[1])
z = np.load(sys.argv[2])
loss, *params = m(*[z[f"a{i}"] for i in range(6)])
print(repr(float(loss)), repr(float(params[0].sum())))
"""


def _tour_code() -> str:
    readme = open(os.path.join(REPO, "README.md")).read()
    block = re.search(r"```python\n(import numpy as np\n.*?)```", readme, re.S)
    assert block is not None and "export_library" in block.group(1)
    return block.group(1)


def test_readme_tour_module_runs_after_reload_in_a_fresh_process(tmp_path: object) -> None:
    so = os.path.join(str(tmp_path), "mlp_step.so")
    npz = os.path.join(str(tmp_path), "inputs.npz")
    code = _tour_code().replace("/tmp/mlp_step.so", so).replace("range(100)", "range(3)")
    code += (f"\nnp.savez({npz!r}, **{{f'a{{i}}': a for i, a in enumerate([x, y, *params])}})"
             f"\nloss, *params = exe(x, y, *params)"
             f"\nprint('EXPECT', repr(float(loss)), repr(float(params[0].sum())))\n")
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "one more step, reloaded:" in r.stdout
    expect = [float(v) for v in r.stdout.split("EXPECT")[1].split()]
    r2 = subprocess.run([sys.executable, "-c", TOUR_CHILD, so, npz], capture_output=True,
                        text=True, env=env, timeout=300)
    assert r2.returncode == 0, r2.stderr
    got = [float(v) for v in r2.stdout.split()]
    np.testing.assert_allclose(got, expect, rtol=1e-6)


def _const_module() -> tuple[rly.IRModule, list[np.ndarray]]:
    from relay_ir.expr import Call, Constant, Function, Var
    from relay_ir.op import get_op
    from relay_ir.ty import TensorType
    rng = np.random.default_rng(1)
    ws = [rng.standard_normal((16, 16)).astype("float32") for _ in range(3)]
    x = Var("x", TensorType((16, 16), "float32"))
    h: object = x
    for w in ws:
        h = Call(get_op("tanh"), (Call(get_op("multiply"), (h, Constant(w))),))
    return InferType()(rly.IRModule({"main": Function((x,), h)})), ws


def test_module_file_stores_each_constant_once_and_export_does_not_compile(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    import tvm
    mod, ws = _const_module()
    exe = runtime.build(mod)
    x = np.random.default_rng(2).standard_normal((16, 16)).astype("float32")
    want = exe(x)
    calls = []
    real = tvm.compile
    monkeypatch.setattr(tvm, "compile", lambda *a, **k: calls.append(1) or real(*a, **k))
    path = os.path.join(str(tmp_path), "c.so")
    exe.export_library(path)
    assert calls == []                       # the kernels go in as the libraries that ran
    data = open(path, "rb").read()
    assert all(data.count(w.tobytes()) == 1 for w in ws)
    np.testing.assert_allclose(runtime.load_module(path)(x), want, rtol=1e-6)


def test_build_compiles_static_kernels_before_the_first_call(tmp_path: object) -> None:
    from relay_ir.runtime import kernel_cache as kc
    cache = kc.KernelCache(directory=str(tmp_path))
    mod = parse("def @main(%x: Tensor[(3, 7), float32]) { sum(exp(%x), axis=[1]) }")
    before = kc.COMPILE_COUNT[0]
    exe = runtime.build(mod, cache=cache)
    assert kc.COMPILE_COUNT[0] == before + 1      # at build
    x = np.ones((3, 7), "float32")
    np.testing.assert_allclose(exe(x), np.exp(x).sum(1), rtol=1e-6)
    assert kc.COMPILE_COUNT[0] == before + 1      # not at the first call


SYMBOLIC = """
def @main[n, m](%x: Tensor[(n), float32], %y: Tensor[(m), float32],
                %z: Tensor[(n + m), float32], %w: Tensor[(n), float32]) {
  (add(concatenate((%x, %y)), %z), multiply(%x, %w))
}"""


SYMBOLIC_KERNELS = """
def @main[n, m](%x: Tensor[(n), float32], %y: Tensor[(m), float32],
                %z: Tensor[(n + m), float32], %w: Tensor[(n), float32]) {
  (exp(%z), multiply(%x, %w), negative(%y))
}"""


def test_loaded_module_keeps_shared_and_polynomial_dims(tmp_path: object) -> None:
    from relay_ir.runtime.kernel_cache import KernelCache
    # NOTE: a private cache: export takes symbolic kernels from the cache's object files
    cache = KernelCache(directory=os.path.join(str(tmp_path), "kc"))
    exe = runtime.build(parse(SYMBOLIC_KERNELS), cache=cache)
    assert exe.host_kernels() == []
    f = np.float32
    args = [f([1, 2]), f([3, 4, 5]), f([1, 1, 1, 1, 1]), f([2, 2])]
    want = exe(*args)
    path = os.path.join(str(tmp_path), "sym.so")
    exe.export_library(path)
    m = runtime.load_module(path)
    for a, b in zip(m(*args), want):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(m(*args)[0], np.exp(args[2]), rtol=1e-6)
    with pytest.raises(rly.DiagnosticError, match=r"argument 4 \(%w\).*dimension n is 2"):
        m(f([1, 2]), f([3, 4, 5]), f([1, 1, 1, 1, 1]), f([2, 2, 2]))
    for runner in (exe, m):     # the same rule as the built one
        with pytest.raises(rly.DiagnosticError, match=r"argument 3 \(%z\)"):
            runner(f([1, 2]), f([3, 4, 5]), f([1, 1, 1, 1]), f([2, 2]))


def test_a_host_group_runs_built_and_after_export(tmp_path: object) -> None:
    exe = runtime.build(parse(SYMBOLIC))
    f = np.float32
    args = [f([1, 2]), f([3, 4, 5]), f([1, 1, 1, 1, 1]), f([2, 2])]
    got = exe(*args)
    np.testing.assert_array_equal(got[0], np.concatenate(args[:2]) + args[2])
    np.testing.assert_array_equal(got[1], args[0] * args[3])
    assert exe.host_kernels() == ["host:add+concatenate"]
    with pytest.raises(rly.DiagnosticError, match=r"argument 3 \(%z\)"):
        exe(f([1, 2]), f([3, 4, 5]), f([1, 1, 1, 1]), f([2, 2]))
    path = os.path.join(str(tmp_path), "sym.so")
    exe.export_library(path)
    m = runtime.load_module(path)
    assert m.host_kernels() == ["host:add+concatenate"]
    got = m(*args)
    np.testing.assert_array_equal(got[0], np.concatenate(args[:2]) + args[2])
    np.testing.assert_array_equal(got[1], args[0] * args[3])
    with pytest.raises(rly.DiagnosticError, match=r"argument 3 \(%z\)"):
        m(f([1, 2]), f([3, 4, 5]), f([1, 1, 1, 1]), f([2, 2]))


def test_a_loaded_module_runs_any_size_of_a_dynamic_dim(tmp_path: object) -> None:
    from relay_ir.runtime.kernel_cache import KernelCache
    cache = KernelCache(directory=os.path.join(str(tmp_path), "kc"))
    exe = runtime.build(parse("def @main(%x: Tensor[(?), float32]) { exp(%x) }"), cache=cache)
    path = os.path.join(str(tmp_path), "dyn.so")
    exe.export_library(path)                     # one kernel over a symbolic length
    m = runtime.load_module(path)
    for n in (3, 2, 1, 100):
        x = np.linspace(-1, 1, n, dtype="float32")
        np.testing.assert_allclose(m(x), np.exp(x), rtol=1e-6)


# ============================================================================ argument rule
ARGS_SRC = """
def @main(%x: Tensor[(2), float32], %i: int32, %h: float16, %b: bool) {
  %0 = (add(%x, 1f), add(%i, 1), add(%h, 1f16));
  if (%b) { %0 } else { %0 }
}"""
DATAFLOW_SRC = """
def @main(%x: Tensor[(2), float32], %i: int32, %h: float16, %b: bool) {
  (add(%x, 1f), add(%i, 1), add(%h, 1f16))
}"""


@pytest.fixture(scope="module")
def runners(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("args")
    vm_mod, df_mod = parse(ARGS_SRC), parse(DATAFLOW_SRC)
    vm_exe, df_exe = runtime.build(vm_mod), runtime.build(df_mod)
    path = str(d / "args.so")
    vm_exe.export_library(path)
    return {"interpreter": lambda *a: runtime.evaluate(vm_mod, *a),
            "build-dataflow": df_exe, "build-vm": vm_exe,
            "loaded": runtime.load_module(path)}


GOOD = (np.float32([1, 2]), np.int32(3), np.float16(1), np.bool_(True))
F32 = np.float32


def _misaligned(values: list[float]) -> np.ndarray:
    """A float32 array whose data is 4 bytes past a 64-byte boundary."""
    raw = np.zeros(len(values) * 4 + 128, np.uint8)
    off = (-raw.ctypes.data) % 64 + 4
    a = raw[off:off + len(values) * 4].view(np.float32)
    a[:] = values
    assert a.ctypes.data % 64 == 4
    return a


def _with(i: int, v: object) -> tuple:
    args = list(GOOD)
    args[i] = v
    return tuple(args)


REFUSED = {
    "float64 array for float32": (_with(0, np.float64([1, 2])), "%x", "float64"),
    "float 1e40 overflows float32": (_with(0, [1e40, 1.0]), "%x", "overflows"),
    "int64 array for int32": (_with(1, np.int64(3)), "%i", "int64"),
    "2**31+5 for int32": (_with(1, 2**31 + 5), "%i", "out of range"),
    "True for int32": (_with(1, True), "%i", "bool"),
    "True in a float32 list": (_with(0, [True, 1.0]), "%x", "bool"),
    "float for int32": (_with(1, 2.0), "%i", "float"),
    "1e6 overflows float16": (_with(2, 1e6), "%h", "overflows"),
    "float64 scalar for float16": (_with(2, np.float64(1)), "%h", "float64"),
    "int for bool": (_with(3, 1), "%b", "int"),
    "2**25+1 inexact in float32": (_with(0, [2**25 + 1, 0]), "%x", "exactly"),
    "wrong shape": (_with(0, F32([1, 2, 3])), "%x", r"\(3,\)"),
    "string": (_with(0, ["a", "b"]), "%x", "str"),
}

ACCEPTED = {
    "exact arrays": GOOD,
    "Python values that convert exactly": ([1, 2.5], 3, 0.5, True),
    "misaligned array": _with(0, _misaligned([1, 2])),
    "non-contiguous view": _with(0, F32([1, 9, 2, 9])[::2]),
    "read-only array": _with(0, np.frombuffer(F32([1, 2]).tobytes(), F32)),
}


@pytest.mark.parametrize("backend", ["interpreter", "build-dataflow", "build-vm", "loaded"])
@pytest.mark.parametrize("case", list(REFUSED))
def test_every_executor_refuses_the_same_arguments(runners: dict, backend: str,
                                                    case: str) -> None:
    args, param, words = REFUSED[case]
    with pytest.raises(rly.DiagnosticError, match=rf"\({param}\).*{words}"):
        runners[backend](*args)


@pytest.mark.parametrize("backend", ["interpreter", "build-dataflow", "build-vm", "loaded"])
@pytest.mark.parametrize("case", list(ACCEPTED))
def test_every_executor_accepts_the_same_arguments(runners: dict, backend: str,
                                                    case: str) -> None:
    args = ACCEPTED[case]
    x, i, h, _ = args
    got = runners[backend](*args)
    np.testing.assert_array_equal(got[0], np.asarray(x, F32) + 1)
    assert got[1].dtype == np.int32 and int(got[1]) == int(i) + 1
    assert got[2].dtype == np.float16 and float(got[2]) == float(h) + 1


def test_tuple_and_adt_arguments_are_checked_structurally(tmp_path: object) -> None:
    src = """
def @main(%t: (Tensor[(2), float32], int32), %o: Option[float32]) {
  %0 = add(%t.0, 1f);
  match (%o) { Some(%v) => add(%0, %v), None => %0 }
}"""
    mod = InferType()(rly.parse(HDR + src, prelude=True))
    exe = runtime.build(mod)
    path = os.path.join(str(tmp_path), "t.so")
    exe.export_library(path)
    some = mod.get_constructor("Some")
    from relay_ir.runtime.values import ADTValue
    ok = ((F32([1, 2]), np.int32(0)), ADTValue(some, [np.float32(1)]))
    for runner in (lambda *a: runtime.evaluate(mod, *a), exe, runtime.load_module(path)):
        np.testing.assert_array_equal(runner(*ok), [3, 4])
        with pytest.raises(rly.DiagnosticError, match=r"\(%t\)"):
            runner((F32([1, 2]),), ok[1])
        with pytest.raises(rly.DiagnosticError, match=r"\(%t\).*field 1"):
            runner((F32([1, 2]), True), ok[1])
        with pytest.raises(rly.DiagnosticError, match=r"\(%o\)"):
            runner(ok[0], np.float32(1))


@pytest.mark.parametrize("kwargs, words", [
    ({"opt_level": 7}, "opt_level must be 0, 1, 2 or 3"),
    ({"opt_level": -1}, "opt_level"),
    ({"opt_level": "2"}, "opt_level"),
    ({"opt_levle": 2}, "unknown option"),
    ({"max_fuse_depth": 0}, "max_fuse_depth"),
    ({"target": "tpu"}, "unknown target"),
])
def test_build_refuses_invalid_options(kwargs: dict, words: str) -> None:
    mod = parse("def @main(%x: float32) { %x }")
    with pytest.raises(rly.DiagnosticError, match=words):
        runtime.build(mod, **kwargs)


# ============================================================================ command line
@pytest.mark.parametrize("content, words", [
    (b"", "the file is empty"),
    (b"\x7fELF\x02\x01\x01" + b"\0" * 60, "shared library (ELF)"),
    (b"\xcf\xfa\xed\xfe" + b"\0" * 60, "shared library (Mach-O)"),
    (b"abc\0def" * 10, "binary file"),
    (b"RLYMOD", "made by an older relay_ir"),
])
def test_rly_run_says_what_a_file_is(tmp_path: object, capsys: pytest.CaptureFixture,
                                     content: bytes, words: str) -> None:
    p = os.path.join(str(tmp_path), "x.so")
    with open(p, "wb") as f:
        f.write(content)
    rc, out, err = run_cli(capsys, "run", p, "1")
    assert rc == 1 and words in err and out == "" and "Traceback" not in err


TWO = """
def @main(%x: float32) { %x }
def @twice(%x: Tensor[(3), float32]) { add(%x, %x) }
"""


def test_rly_build_entry_and_run_help(tmp_path: object, capsys: pytest.CaptureFixture) -> None:
    src = os.path.join(str(tmp_path), "two.rly")
    with open(src, "w") as f:
        f.write(HDR + TWO)
    out = os.path.join(str(tmp_path), "two.so")
    rc, text, err = run_cli(capsys, "build", src, "--entry", "twice", "-o", out)
    assert rc == 0, err
    rc, text, err = run_cli(capsys, "run", out, "[1.0, 2.0, 3.5]")
    assert rc == 0 and "[2., 4., 7.]" in text, err
    assert header_of(out)["default_entry"] == "twice"
    rc, text, err = run_cli(capsys, "build", src, "--entry", "nope", "-o", out)
    assert rc == 2 and "no global function @nope (globals: @main, @twice)" in err    # a usage error
    with pytest.raises(SystemExit) as ex:
        main(["run", out, "--help"])
    text, err = capsys.readouterr()
    assert ex.value.code == 0 and "usage: rly run" in text and "--entry" in text


BIG = """
def @main(%x: Tensor[(1, 1), float32]) {
  broadcast_to(%x, shape=[4000000, 4000000])
}"""
BIG_VM = """
def @main(%x: Tensor[(1, 1), float32], %c: bool) {
  if (%c) { broadcast_to(%x, shape=[4000000, 4000000]) }
  else { broadcast_to(negative(%x), shape=[4000000, 4000000]) }
}"""


@pytest.mark.parametrize("src, args", [(BIG, ()), (BIG_VM, (np.bool_(True),))])
def test_compiled_huge_allocation_is_a_located_diagnostic(src: str, args: tuple) -> None:
    exe = runtime.build(parse(src))
    with pytest.raises(rly.DiagnosticError) as e:
        exe(np.ones((1, 1), "float32"), *args)
    msg = str(e.value)
    assert "cannot allocate" in msg and "(4000000, 4000000)" in msg and "broadcast_to" in msg
    assert e.value.span is not None and e.value.span.line >= 2
