"""``exe.run_batch``: many instances of one compiled program, kernel calls batched.

Every test compares run_batch with running each instance alone (``exe(*args)``, the Relax
VM) and, where it is cheap, with the reference interpreter.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.runtime.values import ADTValue

from util_diff import (assert_values_close, copy_value, parse_program, program_files,
                       random_inputs)

pytestmark = pytest.mark.tvm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def _one_by_one(exe, batch, entry="main"):
    return [exe(*copy_value(tuple(a)), entry=entry) for a in batch]


def _check(exe, batch, entry="main", rtol=1e-5, atol=1e-6):
    want = _one_by_one(exe, batch, entry)
    got = exe.run_batch([copy_value(tuple(a)) for a in batch], entry=entry)
    assert isinstance(got, list) and len(got) == len(batch)
    for i, (w, g) in enumerate(zip(want, got)):
        assert_values_close(g, w, rtol=rtol, atol=atol, what=f"instance {i}")
    return got


# ----------------------------------------------------------------------------- examples
def _examples_with_main():
    out = []
    for path in program_files():
        if os.sep + "examples" + os.sep not in path:
            continue
        mod = parse_program(path)
        if "main" in mod:
            out.append(pytest.param(path, id=os.path.basename(path)))
    return out


@pytest.mark.parametrize("path", _examples_with_main())
def test_examples_equal_one_by_one(path):
    mod = parse_program(path)
    exe = runtime.build(mod, target="llvm")
    batch = [random_inputs(mod, seed=s) for s in range(3)]
    if os.path.basename(path) in ("factorial.rly", "refs.rly"):
        batch = [(np.array(n, "int32"),) for n in (0, 5, 3)]   # instances of different depth
    _check(exe, batch, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- trees
TREE = """#[version = "0.0.5"]
type BinTree { Leaf(Tensor[(1, 4), float32]), Node(BinTree, BinTree) }

def @embed(%t: BinTree, %w: Tensor[(8, 4), float32], %b: Tensor[(4), float32])
    -> Tensor[(1, 4), float32] {
  match (%t) {
    Leaf(%x) => tanh(add(%x, %b)),
    Node(%l, %r) => {
      let %h = concatenate((@embed(%l, %w, %b), @embed(%r, %w, %b)), axis=1);
      sigmoid(add(nn.matmul(%h, %w), %b))
    },
  }
}

def @main(%t: BinTree, %w: Tensor[(8, 4), float32], %b: Tensor[(4), float32]) -> float32 {
  sum(@embed(%t, %w, %b))
}
"""


def _random_tree(mod, n, rng):
    leaf, node = mod.get_constructor("Leaf"), mod.get_constructor("Node")
    todo, vals = [("build", n)], []
    while todo:
        kind, k = todo.pop()
        if kind == "node":
            r, left = vals.pop(), vals.pop()
            vals.append(ADTValue(node, (left, r)))
        elif k == 1:
            vals.append(ADTValue(leaf, (rng.standard_normal((1, 4)).astype("float32"),)))
        else:
            m = int(rng.integers(1, k))
            todo += [("node", 0), ("build", k - m), ("build", m)]
    return vals[0]


def _tree_batch(mod, sizes, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.uniform(-0.5, 0.5, (8, 4)).astype("float32")
    b = rng.uniform(-0.5, 0.5, (4,)).astype("float32")
    return [(_random_tree(mod, n, rng), w, b) for n in sizes]


def test_random_trees_of_different_sizes():
    mod = rly.parse(TREE)
    exe = runtime.build(mod, target="llvm")
    batch = _tree_batch(mod, [1, 2, 7, 3, 12, 5])
    got = _check(exe, batch)
    for (args, g) in zip(batch, got):
        assert_values_close(g, runtime.evaluate(mod, *args), rtol=1e-5, atol=1e-6)


def test_tree_gradient_program():
    mod = rly.parse(TREE)
    g = passes.optimize(passes.gradient(mod, entry="main"))
    exe = runtime.build(g, target="llvm")
    batch = _tree_batch(mod, [4, 1, 9, 6], seed=3)
    got = _check(exe, batch, rtol=1e-4, atol=1e-5)
    for (args, r) in zip(batch, got):
        assert_values_close(r, runtime.evaluate(g, *args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("defer,sizes", [("all", "static"), ("all", "symbolic"),
                                         ("none", "symbolic")])
def test_policies_give_the_same_results(monkeypatch, defer, sizes):
    """Every kernel parked (batched kernels of static power-of-two sizes, padded, or of a
    symbolic size) or none: the gradients equal one-by-one runs."""
    from relay_ir.runtime import batching
    monkeypatch.setattr(batching, "DEFER", defer)
    monkeypatch.setattr(batching, "BATCH_SIZES", sizes)
    mod = rly.parse(TREE)
    g = passes.optimize(passes.gradient(mod, entry="main"))
    exe = runtime.build(g, target="llvm")
    batch = _tree_batch(mod, [5, 5, 5, 2, 7], seed=11)
    _check(exe, batch, rtol=1e-4, atol=1e-5)
    stats = exe.batch_stats()
    assert stats["instance_calls"] > 0
    if defer == "none":
        assert stats["groups"] == 0 and stats["kernel_calls"] == stats["instance_calls"]
    else:
        assert stats["groups"] > 0
        if batching.have_vmap():
            assert stats["batched_calls"] > 0     # 3 instances and more share calls
    if sizes == "static" and batching.have_vmap():
        bks = [b for b in exe._batch_runner.batched.values() if b is not None]
        assert any(b.static for b in bks)       # a padded static kernel ran
        assert all(size & (size - 1) == 0 for b in bks for size in b.static)


def test_kernels_that_never_pay_stop_parking(monkeypatch):
    """The cost model's evidence: a parked kernel that cannot be batched (or whose batched
    calls never pay) runs inline after UNDEFER parked calls; results unchanged, fewer groups."""
    from relay_ir.runtime import batching
    monkeypatch.setattr(batching, "DEFER", "all")
    monkeypatch.setattr(batching, "UNDEFER", 2)
    mod = rly.parse(TREE)
    g = passes.optimize(passes.gradient(mod, entry="main"))
    exe = runtime.build(g, target="llvm")
    batch = _tree_batch(mod, [6] * 8, seed=2)
    _check(exe, batch, rtol=1e-4, atol=1e-5)
    first = exe.batch_stats()
    assert first["undeferred"] > 0
    stopped = [kr for kr in exe._batch_runner.kernels.values()
               if not kr.defer and kr.lost >= 2 and kr.lost > 4 * kr.won]
    assert stopped
    _check(exe, batch, rtol=1e-4, atol=1e-5)
    second = exe.batch_stats()
    assert second["groups"] < first["groups"]
    assert second["instance_calls"] == first["instance_calls"]


def test_batching_happened_and_shared_weights():
    """Fewer kernel calls than the instances make one by one; weights are passed once."""
    mod = rly.parse(TREE)
    exe = runtime.build(mod, target="llvm")
    batch = _tree_batch(mod, [6] * 8, seed=5)
    _check(exe, batch)
    stats = exe.batch_stats()
    per_instance = stats["instance_calls"]
    assert per_instance > 0
    assert stats["groups"] < per_instance          # calls were grouped by the agenda
    from relay_ir.runtime import batching
    if batching.have_vmap():
        assert stats["batched_calls"] > 0
        assert stats["kernel_calls"] < per_instance


def test_treelstm_example_gradients_sum():
    """The example's minibatch gradient equals the sum of per-tree gradients."""
    import models
    mod = models.load("treelstm.rly")
    g = passes.gradient(mod, entry="loss")
    exe = runtime.build(g, target="llvm", entry="loss")
    rng = np.random.default_rng(7)
    params = models.treelstm_params()
    trees = [(models.make_tree(mod, int(rng.integers(1, 7)), rng), np.eye(3)[i % 3])
             for i in range(5)]
    loss, grads = models.minibatch_step(exe, trees, params)
    want_loss = 0.0
    want = [np.zeros_like(p) for p in params]
    for t, y in trees:
        v, gr = runtime.evaluate(g, t, y, *params, entry="loss")
        want_loss += float(v)
        for j in range(len(params)):
            want[j] += gr[2 + j]
    assert abs(loss - want_loss) < 1e-9 * max(1.0, abs(want_loss))
    for a, b in zip(grads, want):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-10)


# ----------------------------------------------------------------------------- lists
LISTS = """#[version = "0.0.5"]
type List { Cons(Tensor[(3), float32], List), Nil }

def @map(%f: fn (Tensor[(3), float32]) -> Tensor[(3), float32], %xs: List) -> List {
  match (%xs) {
    Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)),
    Nil => Nil,
  }
}

def @sum(%xs: List) -> Tensor[(3), float32] {
  match (%xs) {
    Cons(%h, %t) => add(%h, @sum(%t)),
    Nil => zeros(shape=[3], dtype="float32"),
  }
}

def @main(%xs: List, %k: Tensor[(3), float32]) -> Tensor[(3), float32] {
  @sum(@map(fn (%v: Tensor[(3), float32]) { tanh(multiply(%v, %k)) }, %xs))
}
"""


def _list(mod, items):
    cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")
    v = ADTValue(nil, ())
    for x in reversed(items):
        v = ADTValue(cons, (x, v))
    return v


def test_lists_of_different_lengths():
    mod = rly.parse(LISTS)
    exe = runtime.build(mod, target="llvm")
    rng = np.random.default_rng(2)
    k = rng.standard_normal(3).astype("float32")
    batch = [(_list(mod, [rng.standard_normal(3).astype("float32") for _ in range(n)]), k)
             for n in (0, 3, 1, 10, 4)]
    got = _check(exe, batch)
    for (args, r) in zip(batch, got):
        assert_values_close(r, runtime.evaluate(mod, *args))


# ----------------------------------------------------------------------------- branches
BRANCHES = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32], %n: int32) -> Tensor[(4), float32] {
  if (greater(sum(%x), 0f)) {
    if (%n > 2) { multiply(%x, 2f) } else { exp(%x) }
  } else {
    tanh(subtract(%x, 1f))
  }
}
"""


def test_instances_take_different_branches():
    mod = rly.parse(BRANCHES)
    exe = runtime.build(mod, target="llvm")
    batch = [(np.array([1, 2, 3, 4], "float32"), np.array(5, "int32")),
             (np.array([1, 2, 3, 4], "float32"), np.array(0, "int32")),
             (np.array([-1, -2, 3, -4], "float32"), np.array(5, "int32")),
             (np.array([0.5, 0, 0, 0], "float32"), np.array(3, "int32"))]
    got = _check(exe, batch)
    np.testing.assert_allclose(got[0], [2, 4, 6, 8])
    np.testing.assert_allclose(got[1], np.exp([1, 2, 3, 4]).astype("float32"), rtol=1e-6)


def test_batch_of_one_and_empty():
    mod = rly.parse(BRANCHES)
    exe = runtime.build(mod, target="llvm")
    assert exe.run_batch([]) == []
    got = exe.run_batch([(np.ones(4, "float32"), np.array(3, "int32"))])
    np.testing.assert_allclose(got[0], 2 * np.ones(4))


MIXED = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 4), float32], %w: Tensor[(4, 2), float32]) -> Tensor[(?, 2), float32] {
  tanh(nn.matmul(%x, %w))
}
"""


def test_mixed_shapes_cannot_share_a_call():
    mod = rly.parse(MIXED)
    exe = runtime.build(mod, target="llvm")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 2)).astype("float32")
    batch = [(rng.standard_normal((n, 4)).astype("float32"), w) for n in (1, 3, 3, 5)]
    got = _check(exe, batch, rtol=1e-5, atol=1e-6)
    for (x, w_), r in zip(batch, got):
        assert r.shape == (x.shape[0], 2)
        np.testing.assert_allclose(r, np.tanh(x @ w_), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(r, exe(x, w_))     # the same symbolic kernel


# ----------------------------------------------------------------------------- refs, closures
REFS = """#[version = "0.0.5"]
def @count(%n: int32, %acc: ref(Tensor[(2), float32])) -> () {
  if (%n == 0) { () } else {
    ref_write(%acc, add(ref_read(%acc), ones(shape=[2], dtype="float32")));
    @count(%n - 1, %acc)
  }
}

def @main(%n: int32, %acc: ref(Tensor[(2), float32]))
    -> fn (Tensor[(2), float32]) -> Tensor[(2), float32] {
  @count(%n, %acc);
  let %v = ref_read(%acc);
  fn (%y: Tensor[(2), float32]) { multiply(%y, %v) }
}
"""


def test_refs_and_closures():
    mod = rly.parse(REFS)
    exe = runtime.build(mod, target="llvm")
    refs = [runtime.RefValue(np.zeros(2, "float32")) for _ in range(3)]
    got = exe.run_batch([(np.array(n, "int32"), r) for n, r in zip((2, 0, 5), refs)])
    for n, r, f in zip((2, 0, 5), refs, got):
        np.testing.assert_allclose(r.value, [n, n])           # written back to the caller's ref
        np.testing.assert_allclose(f(np.ones(2, "float32")), [n, n])


# ----------------------------------------------------------------------------- depth
DEEP = """#[version = "0.0.5"]
def @f(%n: int32) -> float32 {
  if (%n == 0) { 0f } else { add(@f(%n - 1), 1f) }
}
def @main(%n: int32) -> float32 { @f(%n) }
"""


def _deep(n):
    mod = rly.parse(DEEP)
    exe = runtime.build(mod, target="llvm")
    return exe.run_batch([(np.array(n, "int32"),), (np.array(7, "int32"),)])


def test_deep_recursion_is_iterative():
    """A 20,000-deep non-tail recursion under a recursion limit of 400: no Python recursion
    proportional to the program's depth (the 100,000-deep run is in the stress tier)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        got = _deep(20_000)
    finally:
        sys.setrecursionlimit(limit)
    assert float(got[0]) == 20_000.0 and float(got[1]) == 7.0


@pytest.mark.stress
def test_deep_recursion_100k():
    got = _deep(100_000)
    assert float(got[0]) == 100_000.0 and float(got[1]) == 7.0


# ----------------------------------------------------------------------------- errors
def test_bad_arguments_name_the_instance():
    mod = rly.parse(BRANCHES)
    exe = runtime.build(mod, target="llvm")
    good = (np.ones(4, "float32"), np.array(1, "int32"))
    with pytest.raises(rly.DiagnosticError) as e:
        exe.run_batch([good, good, (np.ones(5, "float32"), np.array(1, "int32"))])
    assert "instance 2" in str(e.value)
    with pytest.raises(rly.DiagnosticError) as e2:
        exe(np.ones(5, "float32"), np.array(1, "int32"))
    assert e2.value.message.split(": ", 1)[-1] in e.value.message      # exe()'s error
    with pytest.raises(rly.DiagnosticError, match="instance 1"):
        exe.run_batch([good, (np.ones(4, "float32"),)])
    with pytest.raises(rly.DiagnosticError, match="instance 0.*tuple or a list"):
        exe.run_batch([np.ones(4, "float32")])
    with pytest.raises(rly.DiagnosticError, match="no global function @nope"):
        exe.run_batch([good], entry="nope")


def test_run_time_failure_names_the_instance():
    src = """#[version = "0.0.5"]
    type T { A(Tensor[(2), float32]), B }
    def @main(%t: T) -> Tensor[(2), float32] {
      match? (%t) { A(%x) => exp(%x) }
    }
    """
    mod = rly.parse(src)
    exe = runtime.build(mod, target="llvm")
    a, b = mod.get_constructor("A"), mod.get_constructor("B")
    with pytest.raises(rly.DiagnosticError, match="instance 1.*match"):
        exe.run_batch([(ADTValue(a, (np.ones(2, "float32"),)),), (ADTValue(b, ()),)])


def test_loaded_module_gives_a_clear_error(tmp_path):
    mod = rly.parse(BRANCHES)
    exe = runtime.build(mod, target="llvm")
    path = str(tmp_path / "m.so")
    exe.export_library(path)
    loaded = runtime.load_module(path)
    with pytest.raises(rly.DiagnosticError, match=r"batched=True.*runtime.build"):
        loaded.run_batch([(np.ones(4, "float32"), np.array(1, "int32")),
                          (np.ones(4, "float32"), np.array(2, "int32"))])


# the child process: the loaded module's run_batch against its own one-by-one calls (VM)
_CHILD = r"""
import json, sys
import numpy as np
from relay_ir import runtime
from relay_ir.runtime.values import ADTValue
m = runtime.load_module(sys.argv[1])
leaf, node = m.constructors["Leaf"], m.constructors["Node"]
def tree(n, rng):
    todo, vals = [("build", n)], []
    while todo:
        kind, k = todo.pop()
        if kind == "node":
            r, left = vals.pop(), vals.pop()
            vals.append(ADTValue(node, (left, r)))
        elif k == 1:
            vals.append(ADTValue(leaf, (rng.standard_normal((1, 4)).astype("float32"),)))
        else:
            j = int(rng.integers(1, k))
            todo += [("node", 0), ("build", k - j), ("build", j)]
    return vals[0]
rng = np.random.default_rng(5)
w = rng.uniform(-0.5, 0.5, (8, 4)).astype("float32")
b = rng.uniform(-0.5, 0.5, (4,)).astype("float32")
batch = [(tree(n, rng), w, b) for n in json.loads(sys.argv[2])]
want = [m(*a) for a in batch]
got = m.run_batch(batch)
diff = 0.0
for x, y in zip(want, got):
    for u, v in zip([x[0], *x[1][1:]], [y[0], *y[1][1:]]):
        diff = max(diff, float(np.max(np.abs(np.asarray(u) - np.asarray(v)))))
print(json.dumps({"diff": diff, "loss": [float(x[0]) for x in got],
                  "stats": m.batch_stats(), "nbatched": len(m.metadata["batch"]["batched"])}))
"""


def test_loaded_module_runs_batches_in_a_fresh_process(tmp_path):
    """``export_library(path, batched=True)`` after a run_batch: a fresh process loads the
    file and its run_batch (batched kernels from the file, nothing compiled) equals the loaded
    module's one-by-one calls and this process's results."""
    import json
    import subprocess
    mod = rly.parse(TREE)
    g = passes.optimize(passes.gradient(mod, entry="main"))
    exe = runtime.build(g, target="llvm")
    sizes = [6, 6, 6, 6, 3, 9, 1, 6]
    batch = _tree_batch(mod, sizes, seed=5)
    want = _check(exe, batch, rtol=1e-4, atol=1e-5)     # compiles the batched kernels
    assert exe.batch_stats()["batched_calls"] > 0
    path = str(tmp_path / "tree_b.so")
    exe.export_library(path, batched=True)
    from relay_ir.runtime.relax_export import read_metadata
    meta = read_metadata(path)
    assert meta["batch"]["batched"] and meta["batch"]["program"].startswith("#[version")
    env = dict(os.environ, RELAY_IR_CACHE_DIR=str(tmp_path / "empty_cache"))
    r = subprocess.run([sys.executable, "-c", _CHILD, path, json.dumps(sizes)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["diff"] <= 1e-4
    assert out["nbatched"] > 0
    st = out["stats"]
    assert st["batched_calls"] > 0 and st["kernel_calls"] < st["instance_calls"]
    np.testing.assert_allclose(out["loss"], [float(w[0]) for w in want], rtol=1e-5, atol=1e-6)
    # nothing was compiled in the child: its kernel cache stayed empty
    cache = tmp_path / "empty_cache"
    assert not cache.exists() or not any(p.suffix == ".so" for p in cache.rglob("*"))


def test_export_batched_refused_for_loaded_and_plain_loads_keep_working(tmp_path):
    mod = rly.parse(TREE)
    exe = runtime.build(mod, target="llvm")
    path = str(tmp_path / "plain_b.so")
    exe.export_library(path, batched=True)     # no run_batch yet: no batched kernels
    loaded = runtime.load_module(path)
    batch = _tree_batch(mod, [3, 5, 2], seed=1)
    got = loaded.run_batch(batch)              # one call per instance, from the file
    for a, g in zip(batch, got):
        assert_values_close(g, exe(*a), rtol=1e-5, atol=1e-6)
    assert loaded.batch_stats()["batched_calls"] == 0
    assert_values_close(loaded(*batch[0]), exe(*batch[0]), rtol=1e-6, atol=1e-6)
    with pytest.raises(rly.DiagnosticError, match="cannot be exported again"):
        loaded.export_library(str(tmp_path / "again.so"), batched=True)


def test_treelstm_minibatch_training_lowers_the_loss():
    """``models.py treelstm --batch N``: minibatch SGD through run_batch lowers the loss."""
    import models
    out = models.treelstm_minibatch(batch=4, steps=6, verbose=False)
    assert out["after"] < 0.9 * out["before"]
    assert out["trees_per_s"] > 0
