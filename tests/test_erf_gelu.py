"""erf and nn.gelu: the float64 reference against math.erf, IEEE special values in the
interpreter and compiled, the float32 kernels' accuracy, vectorized transcendental kernels (no
scalar libm call), fusion of gelu into a dense epilogue, and diagnostics."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.op.tensor import erf_f64, erfc_f64

HDR = '#[version = "0.0.5"]\n'


def _math_erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(float(v)) for v in x.reshape(-1)]).reshape(x.shape)


def _points() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.concatenate([np.linspace(-6, 6, 20001), rng.standard_normal(20000) * 3,
                           np.geomspace(1e-300, 1e-3, 2000), -np.geomspace(1e-40, 6, 2000),
                           [2.4999999999, 2.5, 2.5000000001, 5e-324, 26.0, 27.0]])


def test_reference_erf_float64_matches_math_erf() -> None:
    x = _points()
    want = _math_erf(x)
    got = erf_f64(x)
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
    assert rel.max() < 4e-15, (rel.max(), x[rel.argmax()])


def test_reference_erf_float32_is_correctly_rounded() -> None:
    x = (np.random.default_rng(1).standard_normal(50000) * 2.5).astype(np.float32)
    want = _math_erf(x.astype(np.float64)).astype(np.float32)
    m = rly.parse(HDR + "def @main(%x: Tensor[(50000), float32]) { erf(%x) }")
    np.testing.assert_array_equal(runtime.evaluate(m, x), want)


def test_reference_erfc_relative_accuracy_in_the_tail() -> None:
    x = np.linspace(2.5, 26.0, 500)
    want = np.array([math.erfc(v) for v in x])
    assert (np.abs(erfc_f64(x) - want) / want).max() < 1e-13


SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-30, -3.0, 10.0], np.float32)


def _special_program(n: int) -> rly.IRModule:
    return rly.parse(HDR + f"""def @main(%x: Tensor[({n}), float32]) {{
  (erf(%x), nn.gelu(%x), nn.gelu(%x, approximate="tanh"))
}}""")


@pytest.mark.parametrize("how", ["interpreter", "compiled"])
def test_ieee_special_values(how: str) -> None:
    m = _special_program(len(SPECIALS))
    run = (lambda x: runtime.evaluate(m, x)) if how == "interpreter" else runtime.build(m, "llvm")
    erf, gelu, gelu_t = run(SPECIALS)
    np.testing.assert_array_equal(erf[:5], [np.nan, 1.0, -1.0, -0.0, 0.0])
    assert np.signbit(erf[3]) and not np.signbit(erf[4])
    np.testing.assert_allclose(erf[5:], [1.1283791e-30, -0.99997791, 1.0], rtol=4e-7)
    for g in (gelu, gelu_t):
        # gelu(x) = x Phi(x): inf -> inf; -inf -> -inf * 0 = NaN (the formula, as torch and
        # ONNX Runtime evaluate it); -0.0 keeps its sign
        np.testing.assert_array_equal(g[:5], [np.nan, np.inf, np.nan, -0.0, 0.0])
        assert np.signbit(g[3])
        assert g[7] == np.float32(10.0)
    np.testing.assert_allclose(gelu[6], -3.0 * 0.5 * math.erfc(3.0 / math.sqrt(2.0)),
                               rtol=1e-6 if how == "interpreter" else 1e-3)


def _gelu_f64(x: np.ndarray, mode: str) -> np.ndarray:
    if mode == "none":
        return np.array([v * 0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x])
    # (1 + tanh(u)) / 2 = 1 / (1 + exp(-2u)): no cancellation for large negative x
    k = math.sqrt(2.0 / math.pi)
    return np.array([v / (1.0 + math.exp(min(-2.0 * k * (v + 0.044715 * v ** 3), 700.0)))
                     for v in x])


@pytest.mark.parametrize("mode", ["none", "tanh"])
def test_gelu_against_its_formula_interpreter_and_compiled(mode: str) -> None:
    x = np.linspace(-8, 8, 4099).astype(np.float32)
    m = rly.parse(HDR + f'def @main(%x: Tensor[(4099), float32]) {{ nn.gelu(%x, '
                  f'approximate="{mode}") }}')
    want = _gelu_f64(x.astype(np.float64), mode)
    ref = runtime.evaluate(m, x)
    np.testing.assert_allclose(ref, want, rtol=2e-7, atol=1e-30)
    got = runtime.build(m, "llvm")(x)
    # float32 kernels: 1 + erf(x) cancels for large negative x (as torch's float32 does)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_compiled_erf_float32_accuracy() -> None:
    x = np.concatenate([np.linspace(-5, 5, 1 << 16), np.geomspace(1e-30, 5, 4096)]).astype(
        np.float32)
    m = rly.parse(HDR + f"def @main(%x: Tensor[({len(x)}), float32]) {{ erf(%x) }}")
    got = runtime.build(m, "llvm")(x).astype(np.float64)
    want = _math_erf(x.astype(np.float64))
    assert (np.abs(got - want) / np.abs(want).clip(1e-38)).max() < 5e-7


def test_gelu_bad_mode_and_dtype_are_diagnostics() -> None:
    m = rly.parse(HDR + 'def @main(%x: Tensor[(3), float32]) {\n  nn.gelu(%x, '
                  'approximate="fast")\n}')
    with pytest.raises(rly.DiagnosticError, match="approximate") as e:
        rly.passes.InferType()(m)
    assert e.value.span is not None and (e.value.span.line, e.value.span.column) == (3, 3)
    m = rly.parse(HDR + "def @main(%x: Tensor[(3), int32]) { nn.gelu(%x) }")
    with pytest.raises(rly.DiagnosticError, match="float"):
        rly.passes.InferType()(m)


# ----------------------------------------------------------------------------- vectorization
def _vector_width() -> int:
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        flags = ""
    return 16 if "avx512f" in flags else 8 if "avx2" in flags else 4


_LIBM = re.compile(r"call[^\n]*@(expf?|tanhf?|erff?|logf?|llvm\.exp\.f32|llvm\.tanh\.f32)\b")

TRANSCENDENTAL = {
    "exp": "exp(%x)", "tanh": "tanh(%x)", "sigmoid": "sigmoid(%x)", "erf": "erf(%x)",
    "gelu": "nn.gelu(%x)", "gelu_tanh": 'nn.gelu(%x, approximate="tanh")',
    "w1": "subtract(multiply(tanh(add(multiply(%x, 1.5f), 0.25f)), sigmoid(%x)), "
          "multiply(0.5f, %x))",
}


@pytest.mark.parametrize("name", sorted(TRANSCENDENTAL))
def test_float32_transcendentals_compile_to_vector_code(name: str) -> None:
    """One kernel per expression, full-width vector instructions, no scalar libm call."""
    n = 4096
    from relay_ir.runtime.kernel_cache import KernelCache
    m = rly.parse(HDR + f"def @main(%x: Tensor[({n}), float32]) {{ {TRANSCENDENTAL[name]} }}")
    # NOTE: a kernel loaded from the disk cache has no LLVM source: compile afresh
    exe = runtime.build(m, "llvm", cache=KernelCache(use_disk=False))
    x = np.linspace(-4, 4, n).astype(np.float32)
    exe(x)
    assert exe.num_kernels() == 1
    ll = "\n".join(exe.kernel_sources())
    assert not _LIBM.search(ll), _LIBM.search(ll)
    w = _vector_width()
    assert f"<{w} x float>" in ll, f"no <{w} x float> instruction in the {name} kernel"


def test_gelu_fuses_into_the_dense_epilogue() -> None:
    m = rly.parse(HDR + """def @main(%x: Tensor[(8, 32), float32], %w: Tensor[(64, 32), float32],
          %b: Tensor[(64), float32]) {
  nn.gelu(nn.bias_add(nn.dense(%x, %w), %b))
}""")
    rng = np.random.default_rng(2)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((8, 32), (64, 32), (64,)))
    exe = runtime.build(m, "llvm")
    got = exe(x, w, b)
    assert exe.num_kernels() == 1
    np.testing.assert_allclose(got, runtime.evaluate(m, x, w, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mcpu,reg", [("haswell", "%ymm"), ("skylake-avx512", "%zmm")])
def test_avx2_and_avx512_targets_get_full_width_vector_code(mcpu: str, reg: str) -> None:
    """Built for an AVX2 CPU the kernels use ymm registers, for AVX-512 zmm; no libm call."""
    from relay_ir.runtime.kernel_cache import KernelCache
    body = "; ".join(f"let %{k} = {TRANSCENDENTAL[k]}" for k in ("erf", "gelu", "gelu_tanh"))
    m = rly.parse(HDR + f"def @main(%x: Tensor[(4096), float32]) {{ {body}; "
                  "(%erf, %gelu, %gelu_tanh, exp(%x), sigmoid(%x)) }")
    cache = KernelCache(use_disk=False)
    exe = runtime.build(m, {"kind": "llvm", "mcpu": mcpu}, cache=cache)
    if _vector_width() == 16 or mcpu == "haswell" and _vector_width() == 8:
        # NOTE: the kernels compile for either CPU here (build time); they run only where the
        # CPU has the instructions
        exe(np.linspace(-4, 4, 4096).astype(np.float32))
    asm = "\n".join(mod.inspect_source("s") for mod in cache.modules.values())
    assert asm.count(reg) > 50
    if reg == "%ymm":
        assert "%zmm" not in asm
    assert not re.search(r"call\w*\s+\S*(exp|erf|tanh)", asm)
