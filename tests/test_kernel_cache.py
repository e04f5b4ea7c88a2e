"""Kernel cache: no recompiling on a second build, disk entries, corrupt entries rebuilt, CLI."""
from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest


import tvm

import relay_ir as rly
from relay_ir import runtime
from relay_ir.cli import main
from relay_ir.runtime import kernel_cache as kc

pytestmark = pytest.mark.tvm

MODEL = '''#[version = "0.0.5"]
def @main(%x: Tensor[(6, 24), float32], %w: Tensor[(24, 16), float32],
          %b: Tensor[(16), float32]) {
  %0 = nn.matmul(%x, %w);
  %1 = nn.relu(add(%0, %b));
  %2 = multiply(%1, %SCALE);
  (sum(%2, axis=[1]), exp(negative(%2)))
}'''


def model(scale: str) -> rly.IRModule:
    # NOTE: the scale is baked into the kernels, so each test gets kernels of its own
    return rly.parse(MODEL.replace("%SCALE", scale))


def inputs() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((6, 24)).astype("float32"),
            rng.standard_normal((24, 16)).astype("float32"),
            rng.standard_normal(16).astype("float32"))


@pytest.fixture
def count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts real ``tvm.compile`` calls (of kernels: the relax executor's own helper
    functions, compiled once per process, are compiled before counting starts)."""
    from relay_ir.runtime import relax_vm
    if not relax_vm._DEPTH_LIB:
        relax_vm._DEPTH_LIB.append(relax_vm._depth_module())
    calls = [0]
    real = tvm.compile

    def counting(*a: object, **k: object) -> object:
        calls[0] += 1
        return real(*a, **k)
    monkeypatch.setattr(tvm, "compile", counting)
    return calls


def check(exe: object, mod: rly.IRModule) -> int:
    """Run and compare with the interpreter; returns the number of compiled (TVM) kernels."""
    got = exe(*inputs())  # type: ignore[operator]
    ref = runtime.evaluate(mod, *inputs())
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    n = exe.num_kernels() - len(exe.host_kernels())  # type: ignore[attr-defined]
    assert n >= 1
    return n


def test_second_build_compiles_nothing(count_compiles: list[int], tmp_path: object) -> None:
    cache = kc.KernelCache(directory=str(tmp_path))
    mod = model("1.25f")
    n = check(runtime.build(mod, cache=cache), mod)   # 3 once every op has a TVM compute
    assert count_compiles[0] == 1 and cache.stats.compiled == n
    check(runtime.build(mod, cache=cache), mod)          # memory
    assert count_compiles[0] == 1 and cache.stats.memory_hits == n
    fresh = kc.KernelCache(directory=str(tmp_path))      # a new process: disk only
    check(runtime.build(mod, cache=fresh), mod)
    assert count_compiles[0] == 1 and fresh.stats.disk_hits == n
    entries = glob.glob(os.path.join(str(tmp_path), "*.json"))
    assert len(entries) == n and len(glob.glob(os.path.join(str(tmp_path), "*.so"))) == 1
    meta = json.load(open(entries[0]))
    assert set(meta) >= {"key", "lib", "symbol", "sha256", "version"}


def test_fresh_kernels_run_from_the_library_written(tmp_path: object) -> None:
    # a compiled kernel is loaded from the library just exported, not from the in-memory LLVM
    # module, which would JIT-compile the same code again (that module is kept for its source)
    disk = kc.KernelCache(directory=str(tmp_path))
    mod = model("1.75f")
    n = check(runtime.build(mod, cache=disk), mod)
    (lib,) = glob.glob(os.path.join(str(tmp_path), "*.so"))
    assert len(disk.modules) == n and set(disk._lib_of.values()) == {lib}
    assert {m.kind for m in disk.modules.values()} == {"llvm"}
    memory_only = kc.KernelCache(directory=str(tmp_path), use_disk=False)
    check(runtime.build(model("1.5f"), cache=memory_only), model("1.5f"))
    assert memory_only._lib_of == {}


def test_default_cache_is_shared_between_builds(count_compiles: list[int]) -> None:
    mod = model("0.75f")
    check(runtime.build(mod), mod)
    before = count_compiles[0]
    check(runtime.build(mod), mod)
    assert count_compiles[0] == before
    assert kc.default_cache().directory == os.environ["RELAY_IR_CACHE_DIR"]


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "bad-json"])
def test_corrupt_entries_are_rebuilt_not_loaded(damage: str, count_compiles: list[int],
                                               tmp_path: object) -> None:
    d = str(tmp_path)
    mod = model("2.5f")
    n = check(runtime.build(mod, cache=kc.KernelCache(directory=d)), mod)
    assert count_compiles[0] == 1
    (lib,) = glob.glob(os.path.join(d, "*.so"))
    # NOTE: a damaged file replaces the entry (a new inode), as another process or a disk
    # error would leave it: changing it in place would change the pages this process mapped
    # when it loaded the library, and touching them (at exit) raised SIGBUS
    data = bytearray(open(lib, "rb").read())
    if damage in ("truncate", "flip"):
        if damage == "truncate":
            data = data[:len(data) // 2]            # loading this would SIGBUS in dlopen
        else:
            data[len(data) // 2] ^= 0xFF
        with open(lib + ".damaged", "wb") as f:
            f.write(bytes(data))
        os.replace(lib + ".damaged", lib)
    elif damage == "delete":
        os.remove(lib)
    else:
        for e in glob.glob(os.path.join(d, "*.json")):
            open(e, "w").write("{not json")
    fresh = kc.KernelCache(directory=d)
    check(runtime.build(mod, cache=fresh), mod)
    assert count_compiles[0] == 2                      # rebuilt once, all kernels together
    assert fresh.stats.rebuilt_corrupt >= 1 and fresh.stats.disk_hits == 0
    again = kc.KernelCache(directory=d)                # and the rebuilt entries are good
    check(runtime.build(mod, cache=again), mod)
    assert count_compiles[0] == 2 and again.stats.disk_hits == n


def test_key_depends_on_function_shapes_and_target() -> None:
    from tvm import te
    a = te.placeholder((4,), "float32", name="a")
    f1 = te.create_prim_func([a, te.compute((4,), lambda i: a[i] + 1.0)])
    a2 = te.placeholder((4,), "float32", name="other_name")
    f1b = te.create_prim_func([a2, te.compute((4,), lambda i: a2[i] + 1.0)])
    f2 = te.create_prim_func([a, te.compute((4,), lambda i: a[i] * 2.0)])
    cpu = runtime.lower_tvm.resolve_target("llvm")
    other = runtime.lower_tvm.resolve_target({"kind": "llvm", "mcpu": "x86-64-v3"})
    k = kc.KernelCache.key
    assert k(f1, "s", cpu) == k(f1b, "s", cpu)        # names do not matter
    assert len({k(f1, "s", cpu), k(f2, "s", cpu), k(f1, "t", cpu), k(f1, "s", other)}) == 4


def test_cache_dir_env_and_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: object,
                               capsys: pytest.CaptureFixture) -> None:
    # NOTE: the VM's depth library goes into the kernel cache once per process, at its first
    # build: build once before moving the cache, so that the counts below are this test's own
    # kernels also when it runs alone
    runtime.build(model("2.5f"))
    d = os.path.join(str(tmp_path), "kcache")
    monkeypatch.setenv(kc.ENV_VAR, d)
    assert kc.cache_dir() == d
    mod = model("3.5f")
    n = check(runtime.build(mod, cache=kc.KernelCache()), mod)
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert d in out and f"{n} kernels in 1 libraries" in out
    assert main(["cache", "--clear"]) == 0
    # the entries, the library and its object file (linked by exported Relax modules)
    assert f"cleared {n + 2} files" in capsys.readouterr().out
    assert os.listdir(d) == []
    monkeypatch.delenv(kc.ENV_VAR)
    assert kc.cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "relay_ir",
                                          "kernels")
