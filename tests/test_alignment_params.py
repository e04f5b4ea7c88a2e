"""Compiled kernels on the arrays users have (any alignment, views) and build(params=...).

Kernels assume only element alignment of their arguments, so a contiguous array at any
address (numpy's own allocations are 16-byte aligned; a view starting at element 1 is 4-byte
aligned) is passed as it is; non-contiguous views are copied once. ``runtime.build(mod,
params={name: array})`` binds parameters of the entry as constants.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import tvm  # noqa: F401  (a required dependency: a broken install fails here)

import relay_ir as rly  # noqa: E402
from relay_ir import runtime  # noqa: E402
from relay_ir.runtime.kernel_cache import KernelCache  # noqa: E402

HDR = '#[version = "0.0.5"]\n'
RNG = np.random.default_rng(7)

CHAIN = HDR + """def @main(%x: Tensor[(1000), float32]) {
  let %t = tanh(add(multiply(%x, 1.5f), 0.25f));
  subtract(multiply(%t, sigmoid(%x)), multiply(%x, 0.5f))
}"""
DENSE = HDR + """def @main(%x: Tensor[(6, 40), float32], %w: Tensor[(48, 40), float32],
          %b: Tensor[(48), float32]) {
  nn.relu(add(nn.dense(%x, %w), %b))
}"""
CONV = HDR + """def @main(%x: Tensor[(2, 3, 9, 7), float32], %k: Tensor[(4, 3, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %k, padding=[1, 1], channels=4, kernel_size=[3, 3]))
}"""


def _chain_np(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return np.tanh(x * 1.5 + 0.25) / (1 + np.exp(-x)) - 0.5 * x


def _dense_np(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)


def _conv_np(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n c h w kh kw
    return np.maximum(np.einsum("nchwij,ocij->nohw", win, k.astype(np.float64)), 0)


def _offset(a: np.ndarray, elems: int = 1) -> np.ndarray:
    """A C-contiguous copy of ``a`` whose data starts ``elems`` elements into a buffer."""
    buf = np.empty(a.size + elems, a.dtype)
    v = buf[elems:].reshape(a.shape)
    v[...] = a
    assert v.flags.c_contiguous and v.ctypes.data % 64 != 0
    return v


def _strided(a: np.ndarray) -> np.ndarray:
    """A non-contiguous view holding the values of ``a`` (every other element of the last
    axis of a twice-as-wide array)."""
    buf = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    buf[..., ::2] = a
    v = buf[..., ::2]
    assert not v.flags.c_contiguous
    return v


CASES = {
    "chain": (CHAIN, lambda: [RNG.standard_normal(1000, dtype=np.float32)], _chain_np),
    "dense": (DENSE, lambda: [RNG.standard_normal((6, 40), dtype=np.float32),
                              RNG.standard_normal((48, 40), dtype=np.float32) / 8,
                              RNG.standard_normal(48, dtype=np.float32)], _dense_np),
    "conv": (CONV, lambda: [RNG.standard_normal((2, 3, 9, 7), dtype=np.float32),
                            RNG.standard_normal((4, 3, 3, 3), dtype=np.float32) / 4], _conv_np),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_misaligned_and_strided_inputs_equal_numpy(case: str) -> None:
    src, make, ref = CASES[case]
    exe = runtime.build(rly.parse(src))
    args = make()
    want = ref(*args)
    for variant in (args, [_offset(a) for a in args], [_strided(a) for a in args],
                    [_offset(a, 3) for a in args]):
        got = exe(*variant)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def _spy_wraps(exe: object, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Data addresses of the arrays the compiled executor hands to the VM (its zero-copy
    DLPack wrap of each argument)."""
    seen: list[int] = []
    real = exe._from_dlpack                               # type: ignore[attr-defined]

    def spy(a: np.ndarray, **kw: object) -> object:
        seen.append(a.ctypes.data)
        return real(a, **kw)
    monkeypatch.setattr(exe, "_from_dlpack", spy)
    return seen


def test_contiguous_misaligned_input_reaches_the_kernel_without_a_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    exe = runtime.build(rly.parse(CHAIN))
    x = _offset(RNG.standard_normal(1000, dtype=np.float32))
    assert x.ctypes.data % 16 != 0
    seen = _spy_wraps(exe, monkeypatch)
    got = exe(x)
    assert x.ctypes.data in seen                         # the caller's buffer itself
    assert not np.shares_memory(got, x)
    np.testing.assert_allclose(got, _chain_np(x), rtol=2e-5, atol=2e-5)
    seen.clear()
    s = _strided(x)
    exe(s)
    assert s.ctypes.data not in seen                     # a view with strides is copied


def test_vm_passes_contiguous_misaligned_entry_arguments_as_they_are(
        monkeypatch: pytest.MonkeyPatch) -> None:
    src = HDR + """def @main(%x: Tensor[(?), float32], %y: Tensor[(?), float32]) {
  if (less(sum(%x), 1e9f)) { add(tanh(%x), %y) } else { %y }
}"""
    exe = runtime.build(rly.parse(src))
    passed = _spy_wraps(exe, monkeypatch)
    x = _offset(RNG.standard_normal(999, dtype=np.float32))
    y = _offset(RNG.standard_normal(999, dtype=np.float32), 2)
    np.testing.assert_allclose(exe(x, y), np.tanh(x) + y, rtol=2e-5, atol=2e-5)
    assert x.ctypes.data in passed and y.ctypes.data in passed
    passed.clear()
    xs = _strided(x)
    np.testing.assert_allclose(exe(xs, y), np.tanh(x) + y, rtol=2e-5, atol=2e-5)
    assert xs.ctypes.data not in passed and y.ctypes.data in passed


def test_kernels_assume_only_element_alignment() -> None:
    exe = runtime.build(rly.parse(CHAIN), cache=KernelCache(use_disk=False))
    exe(RNG.standard_normal(1000, dtype=np.float32))
    ll = "\n".join(exe.kernel_sources())
    # vectorized (LLVM picks 256-bit vectors on some AVX-512 CPUs, e.g. rocketlake) ...
    assert re.search(r"<(8|16) x float>", ll)
    aligns = {int(a) for a in re.findall(r"align (\d+)", ll)}
    assert aligns and max(aligns) <= 8                    # ... without 64-byte assumptions


# ----------------------------------------------------------------------------- params
def _dense_args() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, w, b = CASES["dense"][1]()
    return x, w, b


def test_params_bind_entry_parameters_as_constants() -> None:
    x, w, b = _dense_args()
    exe = runtime.build(rly.parse(DENSE), params={"w": w, "b": b})
    assert [p.name_hint for p in exe.module[exe.entry].params] == ["x"]
    want = _dense_np(x, w, b)
    got = exe(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    w[...] = 0                                           # the executable holds copies
    np.testing.assert_allclose(exe(x), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(rly.DiagnosticError, match=r"expected 1 arguments \(%x\)"):
        exe(x, w)
    # binding only the middle parameter keeps the others in order
    x, w, b = _dense_args()
    exe2 = runtime.build(rly.parse(DENSE), params={"%w": w})
    np.testing.assert_allclose(exe2(x, b), _dense_np(x, w, b), rtol=1e-5, atol=1e-5)


def test_bound_params_are_folded() -> None:
    src = HDR + """def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(4, 8), float32]) {
  add(%x, exp(multiply(%w, 2f)))
}"""
    x = RNG.standard_normal((4, 8), dtype=np.float32)
    w = RNG.standard_normal((4, 8), dtype=np.float32)
    exe = runtime.build(rly.parse(src), params={"w": w})
    text = rly.astext(exe.module)
    assert "exp(" not in text and "multiply(" not in text and "add(" in text
    np.testing.assert_allclose(exe(x), x + np.exp(2 * w.astype(np.float64)), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("params, message", [
    ({"q": np.zeros((48, 40), np.float32)}, r"params\['q'\]: @main has no parameter %q "
                                            r"\(its parameters: %x, %w, %b\)"),
    ({"w": np.zeros((48, 40), np.float64)}, r"params\['w'\]: expected Tensor\[\(48, 40\), "
                                            r"float32\].*dtype float64"),
    ({"w": np.zeros((40, 48), np.float32)}, r"params\['w'\]: expected .*shape \(40, 48\)"),
    ([("w", 1)], r"params must map parameter names to arrays"),
    ({1: np.zeros(3)}, r"params keys are parameter names"),
])
def test_params_errors_name_the_parameter(params: object, message: str) -> None:
    with pytest.raises(rly.DiagnosticError, match=message) as info:
        runtime.build(rly.parse(DENSE), params=params)
    if isinstance(params, dict) and "w" in params:
        assert "^" in str(info.value)                    # points at %w in the source


def test_params_refused_for_tuple_parameters_and_called_entries() -> None:
    tup = HDR + """def @main(%p: (Tensor[(2), float32], Tensor[(2), float32])) {
  add(%p.0, %p.1)
}"""
    with pytest.raises(rly.DiagnosticError, match="only tensor parameters"):
        runtime.build(rly.parse(tup), params={"p": np.zeros(2, np.float32)})
    called = HDR + """def @f(%a: Tensor[(2), float32], %b: Tensor[(2), float32]) { add(%a, %b) }
def @main(%x: Tensor[(2), float32]) { @f(%x, %x) }"""
    with pytest.raises(rly.DiagnosticError, match="@main calls it"):
        runtime.build(rly.parse(called), entry="f", params={"b": np.zeros(2, np.float32)})
    with pytest.raises(rly.DiagnosticError, match="has no @g"):
        runtime.build(rly.parse(called), entry="g", params={"b": np.zeros(2, np.float32)})


def test_export_and_load_with_params_store_the_weights_once(tmp_path: object) -> None:
    src = HDR + """def @main(%x: Tensor[(4, 256), float32], %w: Tensor[(512, 256), float32],
          %b: Tensor[(512), float32]) {
  %0 = nn.relu(add(nn.dense(%x, %w), %b));
  add(%0, nn.relu(nn.dense(%x, %w)))
}"""
    x = RNG.standard_normal((4, 256), dtype=np.float32)
    w = RNG.standard_normal((512, 256), dtype=np.float32) / 16
    b = RNG.standard_normal(512, dtype=np.float32)
    exe = runtime.build(rly.parse(src), params={"w": w, "b": b})
    path = os.path.join(str(tmp_path), "m.rlym")
    exe.export_library(path)
    loaded = runtime.load_module(path)
    xw = x.astype(np.float64) @ w.T.astype(np.float64)
    want = np.maximum(xw + b, 0) + np.maximum(xw, 0)
    np.testing.assert_allclose(loaded(_offset(x)), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4)
    size = os.path.getsize(path)
    assert w.nbytes < size < w.nbytes * 1.5                # w once (used by both dense calls)
    with pytest.raises(rly.DiagnosticError, match=r"expected 1 arguments \(%x\), got 3"):
        loaded(x, w, b)
