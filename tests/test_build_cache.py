"""The pipeline caches: ``runtime.build``'s whole-build cache (runtime/build_cache.py) and
``passes.optimize``'s cache (passes/optimize_cache.py). Both are off in the rest of the suite
(tests/conftest.py); these tests turn them on, with their entries in a temporary directory
(the kernels still come from the suite's shared kernel cache)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.passes import optimize_cache as oc
from relay_ir.traversal import post_order

MLP = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(8, 3), float32], %b: Tensor[(3), float32])
    -> float32 {
  let %h = nn.relu(add(nn.matmul(%x, %w), %b));
  sum(multiply(%h, %h))
}
"""

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 8)).astype("float32")
W = RNG.standard_normal((8, 3)).astype("float32")
B = RNG.standard_normal(3).astype("float32")


def _numpy(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> float:
    h = np.maximum(x @ w + b, 0)
    return float((h * h).sum())


@pytest.fixture
def build_cache(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """The whole-build cache on, its entries under tmp_path."""
    from relay_ir.runtime import build_cache as bc
    monkeypatch.setenv("RELAY_IR_BUILD_CACHE", "1")
    monkeypatch.setattr(bc, "entry_path",
                        lambda d, key: os.path.join(str(tmp_path), f"build-{key}.so"))
    before = dict(bc.STATS)
    yield bc, tmp_path, (lambda k: bc.STATS[k] - before[k])


@pytest.fixture
def opt_cache(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """The optimize cache on, its entries under tmp_path."""
    monkeypatch.setenv("RELAY_IR_OPT_CACHE", "1")
    monkeypatch.setattr(oc, "entry_path",
                        lambda key: os.path.join(str(tmp_path), f"optimize-{key}.json"))
    before = dict(oc.STATS)
    yield tmp_path, (lambda k: oc.STATS[k] - before[k])


def _entries(d, prefix: str) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(f for f in os.listdir(d) if f.startswith(prefix) and ".tmp" not in f
                  and not f.endswith(".so.json"))


# ============================================================================ whole-build cache
@pytest.mark.tvm
def test_build_miss_then_hit_gives_the_same_values(build_cache) -> None:
    bc, d, delta = build_cache
    m = rly.parse(MLP)
    first = runtime.build(m)
    assert delta("misses") == 1 and delta("stored") == 1 and delta("hits") == 0
    assert len(_entries(d, "build-")) == 1
    assert type(first).__name__ == "RelaxExecutable"
    second = runtime.build(rly.parse(MLP))        # a new parse: same text, same key
    assert delta("hits") == 1
    assert isinstance(second, bc.CachedBuild)
    want = _numpy(X, W, B)
    np.testing.assert_allclose(float(first(X, W, B)), want, rtol=1e-5)
    np.testing.assert_allclose(float(second(X, W, B)), float(first(X, W, B)), rtol=0, atol=0)
    assert (second.num_kernels(), second.num_compiled(), second.host_kernels()) == \
        (first.num_kernels(), first.num_compiled(), first.host_kernels())
    with pytest.raises(rly.DiagnosticError, match="@nope"):
        second(X, W, B, entry="nope")
    # argument errors as the built one's, pointing at the caller's source
    for bad in ((X, W), (X.astype("float64"), W, B), (X[:, :3], W, B)):
        with pytest.raises(rly.DiagnosticError) as built_err:
            first(*bad)
        with pytest.raises(rly.DiagnosticError) as hit_err:
            second(*bad)
        assert str(hit_err.value) == str(built_err.value)
        assert hit_err.value.span is not None and \
            (hit_err.value.span.line, hit_err.value.span.column) == \
            (built_err.value.span.line, built_err.value.span.column)


@pytest.mark.tvm
def test_least_recently_used_entries_are_evicted_over_the_size_limit(build_cache,
                                                                     monkeypatch) -> None:
    bc, d, delta = build_cache
    a, b = rly.parse(MLP), rly.parse(MLP.replace("multiply(%h, %h)", "multiply(%h, 2f)"))
    runtime.build(a)
    (entry_a,) = _entries(d, "build-")
    size = os.path.getsize(os.path.join(d, entry_a))
    monkeypatch.setenv("RELAY_IR_BUILD_CACHE_MB", str(1.5 * size / 2 ** 20))
    os.utime(os.path.join(d, entry_a), (1, 1))          # long unused
    runtime.build(b)                                      # stored: a goes, b stays
    assert delta("evicted") == 1 and len(_entries(d, "build-")) == 1
    assert entry_a not in _entries(d, "build-")
    assert not os.path.exists(os.path.join(d, entry_a + ".json"))
    assert isinstance(runtime.build(rly.parse(MLP.replace("multiply(%h, %h)",
                                                          "multiply(%h, 2f)"))), bc.CachedBuild)
    again = runtime.build(a)                              # a miss again, and a works
    assert type(again).__name__ == "RelaxExecutable"
    np.testing.assert_allclose(float(again(X, W, B)), _numpy(X, W, B), rtol=1e-5)
    monkeypatch.setenv("RELAY_IR_BUILD_CACHE_MB", "not a number")   # the default: no eviction
    assert bc.size_limit() == bc.DEFAULT_SIZE_MB * 2 ** 20


@pytest.mark.tvm
def test_build_key_changes_with_every_option(build_cache, monkeypatch) -> None:
    bc, _, _ = build_cache
    from relay_ir.passes import PassContext
    from relay_ir.runtime import schedules
    m = rly.parse(MLP)
    base = dict(mod=m, target="llvm-config", entry="main", opt_level=2, max_fuse_depth=256,
                fast_math=None)

    def key(**kw):  # type: ignore[no-untyped-def]
        return bc.build_key(**{**base, **kw})
    k0 = key()
    assert key() == k0 and key(mod=rly.parse(MLP)) == k0
    keys = {k0, key(opt_level=1), key(fast_math=True), key(fast_math=False),
            key(max_fuse_depth=4), key(entry="other"), key(target="llvm-other"),
            key(mod=rly.parse(MLP.replace("multiply(%h, %h)", "add(%h, %h)")))}
    with PassContext(config={"unsafe_math": True}):
        keys.add(key())
    monkeypatch.setattr(schedules, "PACK_PANELS", not schedules.PACK_PANELS)
    keys.add(key())
    assert len(keys) == 10


@pytest.mark.tvm
def test_build_cache_misses_on_a_different_option_and_bound_params(build_cache) -> None:
    bc, d, delta = build_cache
    m = rly.parse(MLP)
    runtime.build(m)
    runtime.build(m, opt_level=1)
    assert delta("misses") == 2 and len(_entries(d, "build-")) == 2
    w2 = W * 2
    a = runtime.build(m, params={"w": W})
    b = runtime.build(m, params={"w": w2})           # other weights: another entry
    assert delta("misses") == 4 and delta("hits") == 0
    c = runtime.build(m, params={"w": w2.copy()})    # equal weights: a hit
    assert delta("hits") == 1
    np.testing.assert_allclose(float(a(X, B)), _numpy(X, W, B), rtol=1e-5)
    np.testing.assert_allclose(float(b(X, B)), _numpy(X, w2, B), rtol=1e-5)
    np.testing.assert_allclose(float(c(X, B)), _numpy(X, w2, B), rtol=1e-5)


@pytest.mark.tvm
@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "counts"])
def test_a_damaged_build_entry_is_rebuilt(build_cache, damage: str) -> None:
    bc, d, delta = build_cache
    m = rly.parse(MLP)
    runtime.build(m)
    [name] = _entries(d, "build-")
    path = os.path.join(d, name)
    data = open(path, "rb").read()
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        k = len(data) // 3
        data = data[:k] + bytes([data[k] ^ 0xFF]) + data[k + 1:]
    elif damage == "garbage":
        data = b"not a module" * 10
    elif damage == "empty":
        data = b""
    else:                                   # the module file is fine, its counts are not
        path = path + ".json"
        data = b'{"num_kernels": "x"}'
    with open(path, "wb") as f:
        f.write(data)
    exe = runtime.build(m)
    assert delta("rebuilt_corrupt") == 1 and delta("hits") == 0
    assert type(exe).__name__ == "RelaxExecutable"
    np.testing.assert_allclose(float(exe(X, W, B)), _numpy(X, W, B), rtol=1e-5)
    again = runtime.build(m)                 # the entry was written again
    assert delta("hits") == 1
    np.testing.assert_allclose(float(again(X, W, B)), _numpy(X, W, B), rtol=1e-5)


@pytest.mark.tvm
def test_build_cache_off(build_cache, monkeypatch) -> None:
    bc, d, delta = build_cache
    from relay_ir.runtime.kernel_cache import KernelCache
    monkeypatch.setenv("RELAY_IR_BUILD_CACHE", "0")
    runtime.build(rly.parse(MLP))
    monkeypatch.setenv("RELAY_IR_BUILD_CACHE", "1")
    runtime.build(rly.parse(MLP), cache=KernelCache(use_disk=False))   # no disk store
    assert _entries(d, "build-") == [] and delta("misses") == 0


@pytest.mark.tvm
def test_a_cached_build_exports_and_rebuilds_on_demand(build_cache, tmp_path) -> None:
    bc, d, delta = build_cache
    m = rly.parse(MLP)
    runtime.build(m)
    hit = runtime.build(m)
    assert isinstance(hit, bc.CachedBuild)
    out = str(tmp_path / "model.so")
    hit.export_library(out)               # the cached file, copied
    assert hit._built is None
    loaded = runtime.load_module(out)
    np.testing.assert_allclose(float(loaded(X, W, B)), _numpy(X, W, B), rtol=1e-5)
    assert str(hit.target.kind.name) == "llvm"
    # what needs the compiler's objects builds the module again (once)
    assert "main" in hit.module and hit._built is not None
    assert hit.kernel_sources() == hit._built.kernel_sources()


PROGRAM = r'''
import os
import sys
import numpy as np
import relay_ir as rly
from relay_ir import runtime
from relay_ir.passes import optimize_cache
from relay_ir.runtime import build_cache, executor
# NOTE: the entries in the test's directory; the kernels from the suite's kernel cache
d = os.environ["TEST_BUILD_DIR"]
build_cache.entry_path = lambda _, key: os.path.join(d, f"build-{key}.so")
optimize_cache.entry_path = lambda key: os.path.join(d, f"optimize-{key}.json")
if sys.argv[1] == "hit":
    def refuse(*a, **k):
        raise AssertionError("built again")
    executor._build = refuse
m = rly.parse(sys.stdin.read())
rng = np.random.default_rng(0)
x = rng.standard_normal((4, 8)).astype("float32")
w = rng.standard_normal((8, 3)).astype("float32")
b = rng.standard_normal(3).astype("float32")
print(float(runtime.build(m)(x, w, b)), build_cache.STATS["hits"])
'''


@pytest.mark.tvm
def test_a_fresh_process_loads_the_build(tmp_path) -> None:
    env = dict(os.environ, RELAY_IR_BUILD_CACHE="1", RELAY_IR_OPT_CACHE="1",
               TEST_BUILD_DIR=str(tmp_path))

    def run(mode: str) -> tuple[float, int]:
        r = subprocess.run([sys.executable, "-c", PROGRAM, mode], input=MLP, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        v, hits = r.stdout.split()
        return float(v), int(hits)
    v1, h1 = run("build")
    assert len(_entries(tmp_path, "build-")) == 1 and len(_entries(tmp_path, "optimize-")) == 1
    v2, h2 = run("hit")
    assert (h1, h2) == (0, 1)
    assert v1 == v2 and abs(v1 - _numpy(X, W, B)) < 1e-3 * abs(v1)


# ============================================================================ optimize cache
GRAD_SRC = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(8, 3), float32]) -> float32 {
  let %h = tanh(nn.matmul(%x, %w));
  let %y = if (greater(sum(%h), 0f)) { multiply(%h, 2f) } else { negative(%h) };
  sum(multiply(%y, %y))
}
"""


def _grad(src: str = GRAD_SRC, name: str = "<string>") -> rly.IRModule:
    return passes.gradient(rly.parse(src, source_name=name), entry="main")


def test_optimize_hit_is_exactly_the_pipeline_result(opt_cache, monkeypatch) -> None:
    d, delta = opt_cache
    g = _grad()
    fresh = passes.optimize(g)
    assert delta("misses") == 1 and delta("stored") == 1
    assert len(_entries(d, "optimize-")) == 1
    g2 = _grad()
    hit = passes.optimize(g2)
    assert delta("hits") == 1
    assert rly.astext(hit) == rly.astext(fresh)
    for name in fresh.functions:
        rly.assert_structural_equal(hit[name], fresh[name])
    # node by node: class, span, inferred type, names, globals: what the pipeline gives g2
    monkeypatch.setenv("RELAY_IR_OPT_CACHE", "0")
    fresh2 = passes.optimize(g2)
    monkeypatch.setenv("RELAY_IR_OPT_CACHE", "1")
    assert oc.difference(fresh2, hit, g2) is None
    assert oc.difference(fresh, hit, g) == "the GlobalVar of @main"    # g's, not g2's
    a, b = oc.walk(fresh)[0], oc.walk(hit)[0]
    assert len(a) == len(b)
    assert any(n.span is not None for n in a) and any(n.checked_type_ is not None for n in a)
    for x, y in zip(a, b):
        assert type(x) is type(y) and x.checked_type_ == y.checked_type_
        assert (x.span is None) == (y.span is None)
        if x.span is not None:
            assert (x.span.line, x.span.column) == (y.span.line, y.span.column)
    assert hit.source is g2.source
    # the same values
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((4, 8)).astype("float32"),
            rng.standard_normal((8, 3)).astype("float32")]
    va = runtime.evaluate(fresh, *args)
    vb = runtime.evaluate(hit, *args)
    np.testing.assert_array_equal(va[0], vb[0])
    for p, q in zip(va[1], vb[1]):
        np.testing.assert_array_equal(p, q)


def test_least_recently_used_optimize_entries_are_evicted_over_the_size_limit(
        opt_cache, monkeypatch) -> None:
    d, delta = opt_cache
    a_src, b_src = MLP, MLP.replace("multiply(%h, %h)", "multiply(%h, 2f)")
    passes.optimize(rly.parse(a_src))
    (entry_a,) = _entries(d, "optimize-")
    size = os.path.getsize(os.path.join(d, entry_a))
    monkeypatch.setenv("RELAY_IR_OPT_CACHE_MB", str(1.5 * size / 2 ** 20))
    os.utime(os.path.join(d, entry_a), (1, 1))           # long unused
    passes.optimize(rly.parse(b_src))                      # stored: a goes, b stays
    assert delta("evicted") == 1 and entry_a not in _entries(d, "optimize-")
    (entry_b,) = _entries(d, "optimize-")
    os.utime(os.path.join(d, entry_b), (1, 1))
    passes.optimize(rly.parse(b_src))                      # a hit marks it recently used
    assert delta("hits") == 1 and os.path.getmtime(os.path.join(d, entry_b)) > 1
    monkeypatch.setenv("RELAY_IR_OPT_CACHE_MB", "not a number")   # the default
    from relay_ir.runtime.kernel_cache import size_limit_mb
    assert size_limit_mb(oc.SIZE_ENV_VAR, oc.DEFAULT_SIZE_MB) == oc.DEFAULT_SIZE_MB * 2 ** 20


def test_optimize_hit_takes_spans_from_the_callers_source(opt_cache) -> None:
    d, delta = opt_cache
    passes.optimize(_grad(name="first.rly"))
    hit = passes.optimize(_grad(name="second.rly"))
    assert delta("hits") == 1
    names = {n.span.source_name for f in hit.functions.values() for n in post_order(f)
             if n.span is not None}
    assert names == {"second.rly"}


def test_optimize_key_changes_with_every_option(opt_cache) -> None:
    d, delta = opt_cache
    g = _grad()
    passes.optimize(g)
    passes.optimize(g, opt_level=1)
    passes.optimize(g, unsafe_math=True)
    passes.optimize(g, disabled_pass=("cse",))
    passes.optimize(g, fuel=5)
    with passes.PassContext(config={"unsafe_math": True}):
        passes.optimize(g)                     # the same as unsafe_math=True
    passes.optimize(_grad(GRAD_SRC.replace("2f", "3f")))
    assert delta("misses") == 6 and delta("hits") == 1


@pytest.mark.parametrize("damage", ["garbage", "checksum", "consistent-but-wrong"])
def test_a_damaged_optimize_entry_is_ignored(opt_cache, damage: str) -> None:
    import json
    d, delta = opt_cache
    g = _grad()
    fresh = passes.optimize(g)
    [name] = _entries(d, "optimize-")
    path = os.path.join(d, name)
    e = json.load(open(path))
    if damage == "garbage":
        text = "{not json"
    elif damage == "checksum":
        e["text"] = e["text"].replace("tanh", "sigmoid")
        text = json.dumps(e)
    else:       # a well-formed entry whose table does not fit its text
        e["table"] = e["table"][:-3]
        e["checksum"] = oc._checksum(e["text"], e["types"], e["table"], e["names"])
        text = json.dumps(e)
    with open(path, "w") as f:
        f.write(text)
    again = passes.optimize(g)
    assert delta("rebuilt_corrupt") == 1 and delta("hits") == 0
    assert rly.astext(again) == rly.astext(fresh)
    assert oc.difference(fresh, again, g) is None
    assert len(_entries(d, "optimize-")) == 1            # written again
    passes.optimize(g)
    assert delta("hits") == 1


def test_optimize_cache_off_and_not_cacheable(opt_cache, monkeypatch) -> None:
    d, delta = opt_cache
    monkeypatch.setenv("RELAY_IR_OPT_CACHE", "0")
    passes.optimize(_grad())
    assert _entries(d, "optimize-") == [] and delta("misses") == 0
    monkeypatch.setenv("RELAY_IR_OPT_CACHE", "1")
    # a result with a match (ADT) is not cached, and is still the pipeline's result
    src = """#[version = "0.0.5"]
type Opt { Some(int32), No }
def @main(%o: Opt) -> int32 { match (%o) { Some(%v) => add(%v, 1), No => 0 } }
"""
    out = passes.optimize(rly.parse(src))
    assert delta("not_cacheable") == 1 and _entries(d, "optimize-") == []
    assert "match" in rly.astext(out)


def test_rly_cache_clear_empties_the_pipeline_caches(tmp_path) -> None:
    from relay_ir.runtime.kernel_cache import clear_disk, pipeline_usage
    for sub, names in (("builds", ["build-abc.so", "build-abc.so.json"]),
                       ("optimize", ["optimize-abc.json"])):
        os.makedirs(tmp_path / sub)
        for name in names:
            (tmp_path / sub / name).write_bytes(b"x" * 10)
    assert pipeline_usage(str(tmp_path)) == {"builds": (1, 20), "optimize": (1, 10)}
    assert clear_disk(str(tmp_path)) == 3
    assert pipeline_usage(str(tmp_path)) == {"builds": (0, 0), "optimize": (0, 0)}


EXAMPLES = sorted(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", f)
    for f in os.listdir(os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "examples")) if f.endswith(".rly"))


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_optimize_hits_are_exact_on_every_example(opt_cache, monkeypatch, path: str) -> None:
    """Each example and its gradient: a hit is exactly the pipeline's result, or the result
    is not cached (and optimize still returns it)."""
    d, delta = opt_cache
    mod = rly.parse(open(path).read(), source_name=path)
    mods = [mod]
    try:
        mods.append(passes.gradient(mod, entry="main"))
    except rly.DiagnosticError:
        pass                          # NOTE: not differentiable (integer programs)
    for m in mods:
        monkeypatch.setenv("RELAY_IR_OPT_CACHE", "0")
        fresh = passes.optimize(m)
        monkeypatch.setenv("RELAY_IR_OPT_CACHE", "1")
        before = delta("stored") + delta("not_cacheable")
        first = passes.optimize(m)
        assert delta("stored") + delta("not_cacheable") == before + 1
        assert rly.astext(first) == rly.astext(fresh)
        hits = delta("hits")
        again = passes.optimize(m)
        if delta("hits") > hits:
            assert oc.difference(fresh, again, m) is None
        else:
            assert rly.astext(again) == rly.astext(fresh)
    # NOTE: their optimized forms still call globals (recursion), which are not cached
    if os.path.basename(path) not in ("factorial.rly", "refs.rly"):
        assert delta("hits") == len(mods)
