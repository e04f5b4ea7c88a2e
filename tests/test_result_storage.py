"""Results of the compiled executor and their storage (``runtime.relax_vm``).

A result is a zero-copy numpy view of storage from the VM's pooled allocator. A result the
caller keeps is never handed out again (the next call writes elsewhere); a large result the
caller drops goes back to the pool at once (the VM does not keep the value it returned last:
``RELEASE_BYTES``), so the next call reuses its storage instead of a second buffer.
"""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.runtime import relax_vm

pytestmark = pytest.mark.tvm

HEADER = '#[version = "0.0.5"]\n'
N = 1 << 19          # 2 MiB of float32: above RELEASE_BYTES


def _w1(n: int) -> str:
    return HEADER + f"""def @main(%x: Tensor[({n}), float32]) {{
  let %t = tanh(add(multiply(%x, 1.5f), 0.25f));
  subtract(multiply(%t, sigmoid(%x)), multiply(%x, 0.5f))
}}"""


def _w1_ref(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return np.tanh(x64 * 1.5 + 0.25) / (1 + np.exp(-x64)) - 0.5 * x64


def _inputs(k: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(k)
    return [rng.standard_normal(n, dtype=np.float32) * (j + 1) for j in range(k)]


@pytest.fixture(scope="module")
def w1() -> object:
    return runtime.build(rly.parse(_w1(N)), target="llvm")


def test_kept_results_are_independent_of_later_calls(w1: object) -> None:
    xs = _inputs(4, N)
    kept = [w1(x) for x in xs]                          # type: ignore[operator]
    snapshot = [r.copy() for r in kept]
    for x in xs[::-1]:
        w1(x)                                           # type: ignore[operator]
    for x, r, s in zip(xs, kept, snapshot):
        assert r.dtype == np.float32 and r.shape == (N,)
        assert np.array_equal(r, s)                     # nothing wrote into a kept result
        np.testing.assert_allclose(r, _w1_ref(x), rtol=2e-6, atol=2e-6)
    for i in range(len(kept)):
        for j in range(i + 1, len(kept)):
            assert not np.shares_memory(kept[i], kept[j])
    for x, r in zip(xs, kept):
        assert not np.shares_memory(x, r)               # the argument is never the result


def _dropped_result_addresses(exe: object, x: np.ndarray, want: np.ndarray) -> list[int]:
    """The data addresses of four results of ``exe(x)``, each checked and dropped at once."""
    addrs = []
    for _ in range(4):
        r = exe(x)                                      # type: ignore[operator]
        assert np.array_equal(r, want)
        addrs.append(r.ctypes.data)
        del r
    return addrs


def test_a_dropped_result_goes_back_to_the_pool(w1: object) -> None:
    x = _inputs(1, N)[0]
    want = w1(x).copy()                                 # type: ignore[operator]
    addrs = _dropped_result_addresses(w1, x, want)
    # the VM let go of each result: every call wrote into the same pooled buffer (before
    # RELEASE_BYTES two buffers took turns: the VM held the previous result)
    assert len(set(addrs)) == 1
    kept = w1(x)                                        # type: ignore[operator]
    other = w1(x)                                       # type: ignore[operator]
    assert kept.ctypes.data != other.ctypes.data        # a kept result is not reused
    assert np.array_equal(kept, want) and np.array_equal(other, want)


def test_small_results_skip_the_release_and_stay_correct() -> None:
    n = 1024
    exe = runtime.build(rly.parse(_w1(n)), target="llvm")
    xs = _inputs(3, n)
    kept = [exe(x) for x in xs]
    for x in xs:
        exe(x)
    for x, r in zip(xs, kept):
        np.testing.assert_allclose(r, _w1_ref(x), rtol=2e-6, atol=2e-6)
    assert len({r.ctypes.data for r in kept}) == 3


def test_tuple_results_are_released_and_independent() -> None:
    src = HEADER + f"""def @main(%x: Tensor[({N}), float32]) {{
  (add(%x, 1f), multiply(%x, 2f))
}}"""
    exe = runtime.build(rly.parse(src), target="llvm")
    x, y = _inputs(2, N)
    a = exe(x)
    b = exe(y)
    assert np.array_equal(a[0], x + 1) and np.array_equal(a[1], x * 2)
    assert np.array_equal(b[0], y + 1) and np.array_equal(b[1], y * 2)
    addrs = []
    for _ in range(3):
        r = exe(x)
        addrs.append((r[0].ctypes.data, r[1].ctypes.data))
        del r
    assert len(set(addrs)) == 1
    assert np.array_equal(a[0], x + 1)                  # still what the first call returned


def test_the_threshold_is_what_decides(w1: object, monkeypatch: pytest.MonkeyPatch) -> None:
    # with the release off (the old behaviour) the VM holds the previous result: two buffers
    # take turns, and the values are the same
    x = _inputs(1, N)[0]
    want = w1(x).copy()                                 # type: ignore[operator]
    monkeypatch.setattr(relax_vm, "RELEASE_BYTES", 1 << 62)
    addrs = _dropped_result_addresses(w1, x, want)
    assert len(set(addrs)) == 2


def test_exported_module_releases_too(tmp_path: object) -> None:
    import os
    exe = runtime.build(rly.parse(_w1(N)), target="llvm")
    path = os.path.join(str(tmp_path), "w1.so")
    exe.export_library(path)
    m = runtime.load_module(path)
    x = _inputs(1, N)[0]
    want = exe(x)
    addrs = []
    for _ in range(3):
        r = m(x)
        assert np.array_equal(r, want)
        addrs.append(r.ctypes.data)
        del r
    assert len(set(addrs)) == 1
