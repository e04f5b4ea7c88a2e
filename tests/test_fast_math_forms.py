"""relay_ir's own float32 forms of exp, sigmoid and tanh (relay_ir/op/_te.py, docs/fast_math.md).

Checked against numpy float64 on dense samples of the whole float32 range (every 2**15-th bit
pattern, both signs) plus the tails that matter: sigmoid on [-104, -9] (tiny results that must
keep their relative accuracy), tanh near 0 (tanh(x) ~ x, down to the smallest normals), exp
near overflow and underflow. Where the float64 result is a normal float32 the relative error
is bounded (a few ulp); where it is subnormal the absolute error is; IEEE specials are exact;
the compiled W1 program agrees with the interpreter; the kernels are vector code on AVX2 and
AVX-512 targets alike.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tvm  # noqa: F401  (a required dependency: a broken install fails here)

import relay_ir as rly  # noqa: E402
from relay_ir import runtime  # noqa: E402
from relay_ir.runtime.kernel_cache import KernelCache  # noqa: E402

HDR = '#[version = "0.0.5"]\n'
TINY = float(np.finfo(np.float32).tiny)
BIG = float(np.finfo(np.float32).max)

# max relative error where the float64 result is a normal float32 (measured: exp 1.6e-7,
# sigmoid 2.4e-7, tanh 3.1e-7; float32's ulp is 6e-8 to 1.2e-7 relative) and max absolute
# error where it is subnormal (exp: gradual underflow, within 3 steps of 1.4e-45; sigmoid:
# exactly 0 below x = -89.05, where the true value is below 2.3e-39)
REL_BOUND = {"exp": 2.5e-7, "sigmoid": 3.5e-7, "tanh": 4e-7}
SUB_BOUND = {"exp": 4.3e-45, "sigmoid": 2.5e-39, "tanh": 1.5e-45}


def _samples() -> np.ndarray:
    bits = np.arange(0, 1 << 32, 1 << 15, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    rng = np.random.default_rng(7)
    tails = [rng.uniform(-104, -9, 4096), rng.uniform(-20, 20, 4096),
             rng.uniform(-1e-3, 1e-3, 2048), rng.uniform(80, 89, 2048),
             rng.uniform(-104, -80, 2048),
             np.geomspace(TINY, 1.0, 2048), -np.geomspace(TINY, 1.0, 2048)]
    x = np.concatenate([x] + [t.astype(np.float32) for t in tails])
    return x[np.isfinite(x)]


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        if name == "exp":
            return np.exp(x64)
        if name == "tanh":
            return np.tanh(x64)
        return 1.0 / (1.0 + np.exp(-x64))


_EXES: dict[tuple[str, int], object] = {}


def _run(name: str, x: np.ndarray) -> np.ndarray:
    key = (name, x.size)
    if key not in _EXES:
        m = rly.parse(HDR + f"def @main(%x: Tensor[({x.size}), float32]) {{ {name}(%x) }}")
        _EXES[key] = runtime.build(m, "llvm")
    return np.asarray(_EXES[key](x))  # type: ignore[operator]


@pytest.mark.parametrize("name", ["exp", "sigmoid", "tanh"])
def test_error_bounds_over_the_float32_range(name: str) -> None:
    x = _samples()
    got = _run(name, x).astype(np.float64)
    want = _reference(name, x)
    normal = (np.abs(want) >= TINY) & (np.abs(want) <= BIG)
    rel = np.abs(got[normal] - want[normal]) / np.abs(want[normal])
    worst = int(np.argmax(rel))
    assert rel.max() <= REL_BOUND[name], (name, rel.max(), x[normal][worst])
    sub = np.abs(want) < TINY
    if sub.any():
        assert np.abs(got[sub] - want[sub]).max() <= SUB_BOUND[name]
    # exp overflows exactly where float32 exp does
    if name == "exp":
        assert np.all(np.isinf(got[want > BIG])) and np.all(np.isfinite(got[want <= BIG]))


def test_sigmoid_keeps_relative_accuracy_in_the_negative_tail() -> None:
    x = np.linspace(-87.3, -9.0, 20000).astype(np.float32)
    got = _run("sigmoid", x).astype(np.float64)
    want = _reference("sigmoid", x)
    assert np.all(got > 0)
    assert (np.abs(got - want) / want).max() <= REL_BOUND["sigmoid"]


def test_tanh_is_x_near_zero() -> None:
    x = np.concatenate([np.geomspace(TINY, 1e-4, 4000), -np.geomspace(TINY, 1e-4, 4000)])
    x = x.astype(np.float32)
    got = _run("tanh", x)
    # tanh(x) = x - x^3/3: within half an ulp of x below 1e-4 only when x^2/3 < 2**-24
    small = np.abs(x) < 2e-4
    assert np.all(got[small] == x[small])


SPECIALS = np.array([-np.inf, np.inf, np.nan, -0.0, 0.0, 88.72, 88.7228, 88.73, -87.3, -88.5,
                     -89.0, -103.9, -104.5, -200.0, 1e-30, -1e-30, 1e-45, 9.0, 9.5, 20.0,
                     17.5, 3.4e38, -3.4e38], np.float32)


def test_ieee_specials() -> None:
    x = SPECIALS
    e = _run("exp", x)
    s = _run("sigmoid", x)
    t = _run("tanh", x)
    assert e[0] == 0.0 and e[1] == np.inf and np.isnan(e[2]) and e[3] == 1.0 and e[4] == 1.0
    assert np.isfinite(e[5]) and np.isfinite(e[6]) and e[7] == np.inf      # 88.7228 < ln(max)
    assert e[13] == 0.0 and e[21] == np.inf and e[22] == 0.0
    assert s[0] == 0.0 and s[1] == 1.0 and np.isnan(s[2]) and s[3] == 0.5 and s[4] == 0.5
    assert s[21] == 1.0 and s[22] == 0.0 and s[13] == 0.0
    assert t[0] == -1.0 and t[1] == 1.0 and np.isnan(t[2])
    assert t[3] == 0.0 and np.signbit(t[3]) and t[4] == 0.0 and not np.signbit(t[4])
    assert t[14] == np.float32(1e-30) and t[15] == np.float32(-1e-30)
    assert t[19] == 1.0 and t[21] == 1.0 and t[22] == -1.0
    x = _samples()
    s, t = _run("sigmoid", x), _run("tanh", x)
    assert s.min() >= 0.0 and s.max() <= 1.0
    assert t.min() >= -1.0 and t.max() <= 1.0
    assert np.array_equal(np.signbit(t), np.signbit(x))


W1 = ("let %t = tanh(add(multiply(%x, 1.5f), 0.25f));"
      " subtract(multiply(%t, sigmoid(%x)), multiply(%x, 0.5f))")
W1_LIKE = [W1,
           "add(exp(multiply(%x, 0.5f)), tanh(%x))",
           "multiply(sigmoid(%x), %x)",
           "nn.softmax(reshape(%x, newshape=[64, 64]))"]


@pytest.mark.parametrize("body", W1_LIKE)
def test_compiled_matches_interpreter_and_float64(body: str) -> None:
    text = HDR + f"def @main(%x: Tensor[(4096), float32]) {{ {body} }}"
    m = rly.parse(text)
    m64 = rly.parse(re.sub(r"(\d)f\b", r"\1f64", text.replace("float32", "float64")))
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(4000) * 4, [-np.inf, np.inf, -100.0, 100.0],
                        np.linspace(-30, 30, 92)]).astype(np.float32)
    exe = runtime.build(m, "llvm")
    got = np.asarray(exe(x)).astype(np.float64).reshape(-1)
    assert exe.num_kernels() == 1 or "softmax" in body
    # NOTE: W1's last step subtracts 0.5 x: the bound is relative to the terms, not the result
    tol = 2e-6 * np.abs(x.astype(np.float64)) + 1e-7
    for want in (runtime.evaluate(m, x), runtime.evaluate(m64, x.astype(np.float64))):
        want = np.asarray(want, np.float64).reshape(-1)
        same_special = (got == want) | (np.isnan(got) & np.isnan(want))
        with np.errstate(invalid="ignore"):
            close = np.abs(got - want) <= 2e-6 * np.abs(want) + tol
        assert np.all(same_special | close), (x[~(same_special | close)],
                                              got[~(same_special | close)])


@pytest.mark.parametrize("mcpu,reg,other", [("haswell", "%ymm", "%zmm"),
                                            ("znver3", "%ymm", "%zmm"),
                                            ("skylake-avx512", "%zmm", None),
                                            ("znver4", "%zmm", None)])
def test_w1_is_vector_code_on_avx2_and_avx512(mcpu: str, reg: str, other: str | None) -> None:
    """Built for AVX2 (Intel, AMD) the W1 kernel uses ymm registers, for AVX-512 zmm: packed
    divisions and FMAs, no scalar arithmetic, no libm call."""
    m = rly.parse(HDR + "def @main(%x: Tensor[(4096), float32]) { " + W1 + " }")
    cache = KernelCache(use_disk=False)
    runtime.build(m, {"kind": "llvm", "mcpu": mcpu}, cache=cache)
    asm = "\n".join(mod.inspect_source("s") for mod in cache.modules.values())
    assert re.search(rf"vdivps\s+{reg}", asm.replace("\t", " ")) or f"vdivps\t{reg}" in asm
    assert re.search(r"vfn?m(add|sub)\d+ps", asm)
    assert not re.search(r"\bv(div|mul|add|sub|fn?m(add|sub)\d*)ss\b", asm), "scalar float code"
    assert not re.search(r"call\w*\s+\S*(exp|tanh|sigm)", asm)
    if other:
        assert other not in asm


@pytest.mark.parametrize("name", ["exp_f32", "sigmoid_f32", "tanh_f32"])
def test_forms_use_their_input_few_times(name: str) -> None:
    """A form's input appears few times in its expression tree: TVM's passes walk the tree, so
    a chain of forms grows as the product of the uses (two-select clamps, four uses each, made
    tanh(tanh(x)) take minutes to compile). The printer expands the tree."""
    from tvm import tirx

    from relay_ir.op import _te as T
    x = tirx.Var("xin", "float32")
    form = getattr(T, name)
    uses = len(re.findall(r"\bxin\b", str(form(x))))
    assert uses <= 20, (name, uses)
    assert len(re.findall(r"\bxin\b", str(form(form(x))))) == uses * uses
