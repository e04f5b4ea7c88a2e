"""Drivers for the model examples: ``python examples/models.py NAME`` (NAME: all, convnet,
charrnn, treelstm, newton).

* ``convnet``  -- ``convnet.rly``: conv2d + max-pool + dense trained on the 8x8 digits as
  1x8x8 images; the loss on a fixed batch falls at least 3x in 30 SGD steps.
* ``charrnn``  -- ``lstm_charrnn.rly``: an LSTM over a list of one-hot characters, trained on
  ``data/charrnn.txt``; the mean loss over the text falls at least 2.5x in 400 steps.
* ``treelstm`` -- ``treelstm.rly``: a TreeLSTM over a binary-tree ADT; its gradients match
  central finite differences on a small tree, and 20 steps lower the loss over 8 trees.
  ``treelstm --batch N`` trains on minibatches of N trees: the compiled gradient program runs
  the N trees together with ``exe.run_batch`` and the per-tree gradients are summed.
* ``newton``   -- ``newton.rly``: Newton's method with f' and f'' obtained by differentiating
  twice (``passes.gradient`` of ``passes.gradient``), converging to ln(2)/3.

Dataflow training steps (convnet, charrnn: the list is unrolled by partial evaluation) are
compiled with ``runtime.build``; the tree and Newton programs keep control flow and run on the
interpreter (``runtime.evaluate``).
"""
from __future__ import annotations

import functools
import os
import sys
import time
from typing import Any, Callable

import numpy as np

import relay_ir as rly
from relay_ir import demo, passes, runtime
from relay_ir.module import IRModule

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name: str) -> IRModule:
    """Parse ``examples/NAME``."""
    path = os.path.join(HERE, name)
    with open(path, encoding="utf-8") as f:
        return rly.parse(f.read(), source_name=path)


def sgd(step: Callable[..., Any], data: tuple, params: list[np.ndarray], steps: int,
        lr: float, momentum: float = 0.9) -> list[float]:
    """Momentum SGD with a step function returning ``(loss, grads...)``; returns the losses."""
    vel = [np.zeros_like(p) for p in params]
    losses = []
    for _ in range(steps):
        res = step(*data, *params)
        losses.append(float(res[0]))
        for i, d in enumerate(res[1:]):
            vel[i] = momentum * vel[i] - lr * d
            params[i] = params[i] + vel[i]
    return losses


# ----------------------------------------------------------------------------- convnet
def convnet(steps: int = 30, verbose: bool = True) -> dict[str, float]:
    """Train convnet.rly on one fixed batch of 32 digits; loss before and after."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.images[:32] / 16.0).astype(np.float32).reshape(32, 1, 8, 8)
    y = np.eye(10, dtype=np.float32)[d.target[:32]]
    rng = np.random.default_rng(0)
    params = [rng.uniform(-1, 1, (8, 1, 3, 3)).astype(np.float32) / 3,
              np.zeros(8, np.float32),
              (rng.uniform(-1, 1, (128, 10)) / np.sqrt(128)).astype(np.float32),
              np.zeros(10, np.float32)]
    t0 = time.perf_counter()
    exe = demo.compile_step(load("convnet.rly"), "main", n_data=2, lr=None)
    losses = sgd(exe, (x, y), params, steps, lr=0.1)
    final = float(exe(x, y, *params)[0])
    out = {"first": losses[0], "last": final, "seconds": time.perf_counter() - t0}
    if verbose:
        print(f"convnet: loss {out['first']:.4f} -> {final:.4f} in {steps} steps "
              f"({out['first'] / final:.1f}x lower; {out['seconds']:.1f} s incl. compile)")
    return out


# ----------------------------------------------------------------------------- charrnn
T, V, H = 16, 32, 32


def charrnn_data() -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """The shipped text as symbol ids (< V) and its one-hot (input, target) windows of T."""
    with open(os.path.join(HERE, "data", "charrnn.txt"), encoding="utf-8") as f:
        text = " ".join(f.read().split())
    chars = sorted(set(text))
    assert len(chars) <= V, chars
    ids = np.array([chars.index(c) for c in text])
    eye = np.eye(V, dtype=np.float32)
    windows = [(eye[ids[i:i + T]], eye[ids[i + 1:i + T + 1]])
               for i in range(0, len(ids) - T - 1, T)]
    return ids, windows


@functools.lru_cache(maxsize=1)
def charrnn_step() -> IRModule:
    """lstm_charrnn.rly's @main differentiated into ``@train_step``, optimized first-order.

    Partial evaluation unrolls the Steps list (its length is static), so the result is plain
    dataflow that ``runtime.build`` compiles. Cached: it is the slow part (seconds).
    """
    mod = load("lstm_charrnn.rly")
    return demo.first_order(demo.sgd_step_module(mod, n_data=2, lr=None), "train_step")


def charrnn(steps: int = 400, verbose: bool = True) -> dict[str, float]:
    """Train lstm_charrnn.rly over the text's windows in order; mean loss before and after."""
    _, windows = charrnn_data()
    rng = np.random.default_rng(0)
    k = 1 / np.sqrt(H)
    params = [rng.uniform(-k, k, s).astype(np.float32)
              for s in ((V, 4 * H), (H, 4 * H), (4 * H,), (H, V), (V,))]
    t0 = time.perf_counter()
    exe = runtime.build(IRModule({"main": charrnn_step()["train_step"]}), target="llvm")
    compile_s = time.perf_counter() - t0

    def mean_loss() -> float:
        return float(np.mean([exe(x, y, *params)[0] for x, y in windows]))
    before = mean_loss()
    vel = [np.zeros_like(p) for p in params]
    for s in range(steps):
        x, y = windows[s % len(windows)]
        res = exe(x, y, *params)
        for i, d in enumerate(res[1:]):
            vel[i] = 0.9 * vel[i] - 0.2 * np.clip(d, -5, 5)
            params[i] = params[i] + vel[i]
    after = mean_loss()
    out = {"before": before, "after": after, "compile_s": compile_s,
           "seconds": time.perf_counter() - t0}
    if verbose:
        print(f"charrnn: mean loss over the text {before:.3f} -> {after:.3f} in {steps} steps "
              f"({before / after:.1f}x lower; compile {compile_s:.1f} s, "
              f"total {out['seconds']:.1f} s)")
    return out


# ----------------------------------------------------------------------------- treelstm
def make_tree(mod: IRModule, n: int, rng: np.random.Generator) -> Any:
    """A random binary tree of ``n`` leaves (W5's shape rule) as a ``BinTree`` ADT value."""
    leaf, node = mod.get_constructor("Leaf"), mod.get_constructor("Node")
    # NOTE: built with an explicit stack (no recursion): (n, None) means "build n leaves"
    todo: list[tuple[str, int]] = [("build", n)]
    vals: list[Any] = []
    while todo:
        kind, k = todo.pop()
        if kind == "node":
            right, left = vals.pop(), vals.pop()
            vals.append(runtime.ADTValue(node, (left, right)))
        elif k == 1:
            vals.append(runtime.ADTValue(leaf, (np.array(rng.integers(0, 10), "int32"),)))
        else:
            m = int(rng.integers(1, k))
            todo += [("node", 0), ("build", k - m), ("build", m)]
    return vals[0]


def treelstm_params(seed: int = 0) -> list[np.ndarray]:
    """E, Wl, bl, U, bU, Wo, bo for D = H = 8, 10 tokens, 3 classes (float64)."""
    rng = np.random.default_rng(seed)
    shapes = [(10, 8), (8, 24), (24,), (16, 40), (40,), (8, 3), (3,)]
    return [rng.uniform(-0.5, 0.5, s) for s in shapes]


def minibatch_step(exe: Any, trees: list[tuple[Any, np.ndarray]],
                   params: list[np.ndarray]) -> tuple[float, list[np.ndarray]]:
    """Loss and parameter gradients summed over a minibatch of ``(tree, label)`` pairs: the
    gradient program (built with entry ``loss``) runs every tree together with
    ``exe.run_batch``, its kernel calls batched across the trees."""
    outs = exe.run_batch([(t, y, *params) for t, y in trees], entry="loss")
    loss = float(sum(float(v) for v, _ in outs))
    grads = [np.sum([g[2 + j] for _, g in outs], axis=0) for j in range(len(params))]
    return loss, grads


def treelstm_minibatch(batch: int = 8, steps: int = 20, verbose: bool = True) -> dict[str, float]:
    """Train the TreeLSTM on minibatches of ``batch`` random trees with ``run_batch`` (the
    compiled gradient program); loss over the training trees before and after."""
    mod = load("treelstm.rly")
    g = passes.gradient(mod, entry="loss")
    exe = runtime.build(g, target="llvm", entry="loss")
    rng = np.random.default_rng(1)
    params = treelstm_params()
    trees = [(make_tree(mod, int(rng.integers(2, 9)), rng), np.eye(3)[int(rng.integers(0, 3))])
             for _ in range(4 * batch)]
    loss_exe = runtime.build(mod, target="llvm", entry="loss")

    def total() -> float:
        outs = loss_exe.run_batch([(t, y, *params) for t, y in trees], entry="loss")
        return float(sum(float(v) for v in outs))
    before = total()
    t0 = time.perf_counter()
    for s in range(steps):
        chunk = [trees[(s * batch + i) % len(trees)] for i in range(batch)]
        _, grads = minibatch_step(exe, chunk, params)
        params = [p - (0.5 / batch) * d for p, d in zip(params, grads)]
    secs = time.perf_counter() - t0
    after = total()
    out = {"before": before, "after": after, "trees_per_s": steps * batch / secs}
    if verbose:
        print(f"treelstm --batch {batch}: loss over {len(trees)} trees {before:.3f} -> "
              f"{after:.3f} in {steps} steps ({out['trees_per_s']:.0f} trees/s with run_batch)")
    return out


def treelstm(steps: int = 20, verbose: bool = True) -> dict[str, float]:
    """Finite-difference check of the TreeLSTM gradient, then a few SGD steps over 8 trees."""
    mod = load("treelstm.rly")
    g = passes.gradient(mod, entry="loss")
    rng = np.random.default_rng(1)
    params = treelstm_params()
    tree, label = make_tree(mod, 5, rng), np.eye(3)[1]
    _, grads = runtime.evaluate(g, tree, label, *params, entry="loss")
    worst = 0.0
    eps = 1e-6
    for pi in range(len(params)):
        for idx in [tuple(int(rng.integers(0, s)) for s in params[pi].shape) for _ in range(3)]:
            hi = [p.copy() for p in params]
            lo = [p.copy() for p in params]
            hi[pi][idx] += eps
            lo[pi][idx] -= eps
            fd = (runtime.evaluate(mod, tree, label, *hi, entry="loss")
                  - runtime.evaluate(mod, tree, label, *lo, entry="loss")) / (2 * eps)
            worst = max(worst, abs(float(fd) - float(grads[2 + pi][idx])) /
                        max(1e-3, abs(float(fd))))
    trees = [(make_tree(mod, int(rng.integers(2, 7)), rng), np.eye(3)[int(rng.integers(0, 3))])
             for _ in range(8)]

    def total() -> float:
        return float(sum(runtime.evaluate(mod, t, y, *params, entry="loss") for t, y in trees))
    before = total()
    for s in range(steps):
        t, y = trees[s % len(trees)]
        _, gr = runtime.evaluate(g, t, y, *params, entry="loss")
        params = [p - 0.5 * d for p, d in zip(params, gr[2:])]
    after = total()
    out = {"fd_rel_err": worst, "before": before, "after": after}
    if verbose:
        print(f"treelstm: gradients vs central differences: worst relative error {worst:.1e}; "
              f"loss over 8 trees {before:.3f} -> {after:.3f} in {steps} steps")
    return out


# ----------------------------------------------------------------------------- newton
def build_newton() -> IRModule:
    """newton.rly plus f' and f'' of its @main by AD applied twice, and ``@run(x0, n)``.

    ``gradient(@main)`` makes @main return ``(f(x), (f'(x),))``; ``@d1(x)`` projects f'.
    ``gradient(@d1)`` makes @d1 return ``(f'(x), (f''(x),))``; ``@d2(x)`` projects f''.
    ``@run(x0, n) = @newton(x0, n, fn (v) { @d1(v).0 }, fn (w) { @d2(w) })``.
    """
    from relay_ir.expr import Call, Function, Let, TupleGetItem, Var
    f64 = rly.TensorType((), "float64")

    def derivative(m: IRModule, entry: str, name: str) -> IRModule:
        x, r = Var("x", f64), Var("r")
        body = Let(r, Call(m.get_global_var(entry), (x,)), TupleGetItem(TupleGetItem(r, 1), 0))
        return m.with_function(name, Function((x,), body))
    m = derivative(passes.gradient(load("newton.rly"), entry="main"), "main", "d1")
    m = derivative(passes.gradient(m, entry="d1"), "d1", "d2")
    x, n, v, w = Var("x", f64), Var("n", rly.TensorType((), "int32")), Var("v", f64), Var("w", f64)
    df = Function((v,), TupleGetItem(Call(m.get_global_var("d1"), (v,)), 0))
    d2f = Function((w,), Call(m.get_global_var("d2"), (w,)))
    run = Function((x, n), Call(m.get_global_var("newton"), (x, n, df, d2f)))
    return passes.InferType()(m.with_function("run", run))


def newton(x0: float = 2.0, iters: int = 8, verbose: bool = True) -> dict[str, float]:
    """Run Newton's method in the program from ``x0``; the iterate and its error."""
    x = float(runtime.evaluate(build_newton(), np.float64(x0), np.int32(iters), entry="run"))
    exact = float(np.log(2.0) / 3)
    out = {"x": x, "exact": exact, "error": abs(x - exact)}
    if verbose:
        print(f"newton: x0 = {x0}, {iters} steps -> {x:.15f} (ln(2)/3 = {exact:.15f}, "
              f"error {out['error']:.1e})")
    return out


def main(argv: list[str]) -> int:
    """Run the named examples (default: all)."""
    if argv and argv[0] == "treelstm" and "--batch" in argv:
        i = argv.index("--batch")
        try:
            batch = int(argv[i + 1])
        except (IndexError, ValueError):
            print("usage: models.py treelstm --batch N")
            return 2
        treelstm_minibatch(batch)
        return 0
    names = argv or ["all"]
    table = {"convnet": convnet, "charrnn": charrnn, "treelstm": treelstm, "newton": newton}
    for n in (list(table) if names == ["all"] else names):
        if n not in table:
            print(f"unknown example {n!r}; choose from {', '.join(table)} or all")
            return 2
        table[n]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
