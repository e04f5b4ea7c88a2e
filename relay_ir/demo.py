"""``make demo``: train the MLP of ``examples/mlp_train.rly`` on scikit-learn's 8x8 digits.

What it shows, end to end, on real data (``sklearn.datasets.load_digits`` ships inside
scikit-learn: nothing is downloaded):

1. parse and type-check the model written in ``.rly``;
2. ``passes.gradient`` of the loss, an SGD update appended in the IR (:func:`sgd_step_module`),
   ``passes.optimize`` down to first-order code, ``runtime.build(target="llvm")``;
3. train with momentum (the velocity kept in numpy), a tqdm progress bar (on a terminal
   only: piped or logged output gets just the lines) and one line per epoch (loss, train
   accuracy, time), then ``test accuracy: 0.9xx``;
4. export the trained predictor with ``export_library`` and reload it with
   ``runtime.load_module`` in a fresh process, checking its predictions match.

``python -m relay_ir.demo --examples`` runs the old demo instead: parse, type-check, print and
run every ``examples/*.rly``. ``--epochs N`` shortens training (the test suite uses 1).
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

import numpy as np

import relay_ir as rly
from relay_ir.errors import DiagnosticError
from relay_ir.expr import Call, Function, Let, RefCreate, Tuple, TupleGetItem, Var, const
from relay_ir.module import IRModule
from relay_ir.op._rules import make_call
from relay_ir.traversal import post_order
from relay_ir.ty import TensorType, TupleType, Type

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "examples", "mlp_train.rly")
BATCH, HIDDEN = 32, 64


# ----------------------------------------------------------------------------- training steps
def sgd_step_module(mod: IRModule, entry: str = "main", *, n_data: int = 0,
                    lr: float | None = None, name: str = "train_step",
                    wrt: Sequence[int] | None = None) -> IRModule:
    """``@entry(data.., params..) -> loss`` => ``@name(data.., params..)`` returning a step.

    ``@entry`` is differentiated with :func:`passes.gradient`; the new global calls it and
    returns ``(loss, p_1 - lr * dL/dp_1, ...)`` for the parameters after the first ``n_data``
    (or those whose indices ``wrt`` lists; with ``lr=None``: ``(loss, dL/dp_1, ...)``, the
    update left to the caller). Other gradients are dropped, so the optimizer removes their
    computation.
    """
    from relay_ir import passes
    g = passes.gradient(mod, entry=entry)
    fn = g[entry]
    params = tuple(Var(p.name_hint, p.type_annotation or p.checked_type) for p in fn.params)
    r = Var("r")
    grads = TupleGetItem(r, 1)
    outs: list[Any] = [TupleGetItem(r, 0)]
    for i in (range(n_data, len(params)) if wrt is None else wrt):
        p, d = params[i], TupleGetItem(grads, i)
        if lr is None:
            outs.append(d)
        else:
            dtype = p.type_annotation.dtype  # type: ignore[union-attr]
            outs.append(make_call("subtract", p, make_call("multiply", d, const(lr, dtype))))
    body = Let(r, Call(g.get_global_var(entry), params), Tuple(tuple(outs)))
    return g.with_function(name, Function(params, body))


def first_order(mod: IRModule, entry: str) -> IRModule:
    """``passes.optimize`` of a gradient program, down to first-order code where it can.

    A dataflow loss is first-order after one ``optimize``. A loss that recurses over a list
    of known length (the char-RNN) needs a second round: partial evaluation unrolls the
    recursion, then store forwarding and dead-reference elimination remove the cells.
    """
    from relay_ir import passes
    from relay_ir.passes import PassContext, parse_pipeline
    out = passes.optimize(mod, entry=entry)
    if not any(isinstance(e, RefCreate) for fn in out.functions.values() for e in post_order(fn)):
        return out
    tail = parse_pipeline("partial-eval,dead-ref-elim,dce,remove-unused-functions,to-anf")
    with PassContext(opt_level=3):
        out = tail(out)
    out = passes.optimize(out, entry=entry)
    # NOTE: store forwarding in the second optimize leaves cells that are written, never read
    with PassContext(opt_level=3):
        return parse_pipeline("dead-ref-elim,dce,to-anf")(out)


def compile_step(mod: IRModule, entry: str = "main", *, n_data: int = 0,
                 lr: float | None = None, name: str = "train_step", target: str = "llvm",
                 wrt: Sequence[int] | None = None) -> Any:
    """gradient -> SGD step -> optimize -> ``runtime.build``: the step is the ``@main`` entry."""
    from relay_ir import runtime
    step = first_order(sgd_step_module(mod, entry, n_data=n_data, lr=lr, name=name, wrt=wrt),
                       name)
    return runtime.build(IRModule({"main": step[name]}), target=target)


def predictor(mod: IRModule) -> IRModule:
    """The module whose ``@main`` is the model's ``@logits`` (any batch size)."""
    return IRModule({"main": mod["logits"]})


# ----------------------------------------------------------------------------- data
def load_data(seed: int = 0) -> tuple[np.ndarray, ...]:
    """Digits (1797 8x8 images, pixels / 16) split 80/20 with a fixed seed: Xtr, Xte, ytr, yte."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    return tuple(train_test_split(x, d.target.astype(np.int64), test_size=0.2,
                                  random_state=seed, stratify=d.target))


def init_params(seed: int = 0) -> list[np.ndarray]:
    """He-uniform weights, zero biases, for 64-HIDDEN-10."""
    rng = np.random.default_rng(seed)
    out = []
    for fi, fo in [(64, HIDDEN), (HIDDEN, 10)]:
        bound = np.sqrt(6.0 / fi)
        out += [rng.uniform(-bound, bound, (fi, fo)).astype(np.float32),
                np.zeros(fo, np.float32)]
    return out


def _is_tty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # NOTE: a closed stream
        return False


def train(epochs: int = 20, *, lr: float = 0.1, momentum: float = 0.9, seed: int = 0,
          progress: bool = True, out: Any = None) -> dict[str, Any]:
    """Train the demo MLP; returns params, accuracies, per-epoch history and timings."""
    from tqdm import tqdm

    from relay_ir import runtime
    from relay_ir.runtime.executor import as_aligned
    out = out or sys.stdout
    xtr, xte, ytr, yte = load_data(seed)
    with open(MODEL, encoding="utf-8") as f:
        mod = rly.parse(f.read(), source_name=MODEL)
    t0 = time.perf_counter()
    exe = compile_step(mod, "main", n_data=2, lr=None)
    ones = np.ones((BATCH, 64), np.float32)
    exe(ones, np.eye(10, dtype=np.float32)[np.zeros(BATCH, int)], *init_params(seed),
        entry="main")                                       # load the kernels (warm-up)
    pred = runtime.build(predictor(mod), target="llvm")
    params = init_params(seed)
    # NOTE: the predictor's batch dim is `?`: its kernels are compiled once over a symbolic
    # batch at build time; one warm-up call per shape it will see (train and test set)
    for x in (xtr, xte):
        pred(x, *params, entry="main")
    compile_s = time.perf_counter() - t0
    print(f"compiled train step and predictor in {compile_s:.2f} s "
          f"({exe.num_kernels()} fused kernels per step)",
          file=out)
    rng = np.random.default_rng(seed)
    eye = np.eye(10, dtype=np.float32)
    vel = [np.zeros_like(p) for p in params]
    history = []
    nb = len(xtr) // BATCH
    # NOTE: the bar redraws with carriage returns: only on a terminal, or a piped or logged
    # run gets a `0%|` fragment before every epoch line
    show_bar = progress and _is_tty(sys.stderr) and _is_tty(out)
    for ep in range(1, epochs + 1):
        t_ep = time.perf_counter()
        order = rng.permutation(len(xtr))
        losses = []
        bar = tqdm(range(nb), desc=f"epoch {ep:2d}/{epochs}", leave=False, file=sys.stderr,
                   disable=not show_bar, ncols=80)
        for b in bar:
            idx = order[b * BATCH:(b + 1) * BATCH]
            res = exe(as_aligned(xtr[idx]), as_aligned(eye[ytr[idx]]), *params,
                      entry="main")
            loss, grads = float(res[0]), res[1:]
            losses.append(loss)
            for i, (p, d) in enumerate(zip(params, grads)):
                vel[i] = momentum * vel[i] - lr * d
                params[i] = as_aligned(p + vel[i])
            if b % 8 == 0:
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        bar.close()
        acc = float((pred(xtr, *params, entry="main").argmax(1) == ytr).mean())
        dt = time.perf_counter() - t_ep
        history.append((ep, float(np.mean(losses)), acc, dt))
        print(f"epoch {ep:2d}/{epochs}  loss {np.mean(losses):.4f}  train accuracy {acc:.3f}  "
              f"time {dt * 1e3:.1f} ms", file=out)
    test_pred = pred(xte, *params, entry="main").argmax(1)
    test_acc = float((test_pred == yte).mean())
    return {"params": params, "history": history, "compile_s": compile_s, "test_acc": test_acc,
            "test_pred": test_pred, "x_test": xte, "y_test": yte, "module": mod}


# ----------------------------------------------------------------------------- export
_CHILD = """
import sys, numpy as np
from relay_ir import runtime
lib = runtime.load_module(sys.argv[1])
d = np.load(sys.argv[2])
args = [d["x"]] + [d["p%d" % i] for i in range(4)]
np.save(sys.argv[3], np.asarray(lib(*args, entry="main")).argmax(1))
"""


def export_and_reload(mod: IRModule, params: Sequence[np.ndarray], x: np.ndarray,
                      expected: np.ndarray, out: Any = None) -> bool:
    """Export the predictor, reload it in a fresh process, compare predictions."""
    from relay_ir import runtime
    out = out or sys.stdout
    exe = runtime.build(predictor(mod), target="llvm")
    exe(x, *params)           # NOTE: plans (and compiles) the entry for these shapes first
    with tempfile.TemporaryDirectory(prefix="relay_ir_demo_") as d:
        lib = os.path.join(d, "mlp_digits.so")
        t0 = time.perf_counter()
        exe.export_library(lib)
        print(f"exported the predictor to {os.path.basename(lib)} "
              f"({os.path.getsize(lib) / 1024:.0f} KiB) in {time.perf_counter() - t0:.2f} s",
              file=out)
        np.savez(os.path.join(d, "in.npz"), x=x, **{f"p{i}": p for i, p in enumerate(params)})
        res = os.path.join(d, "pred.npy")
        subprocess.run([sys.executable, "-c", _CHILD, lib, os.path.join(d, "in.npz"), res],
                       check=True)
        got = np.load(res)
    same = int((got == expected).sum())
    print(f"reloaded in a fresh process: predictions "
          f"{'match' if same == len(expected) else 'DIFFER'} ({same}/{len(expected)})", file=out)
    return same == len(expected)


# ----------------------------------------------------------------------------- examples
def sample_value(t: Type, rng: np.random.Generator) -> Any:
    """A deterministic sample argument of type ``t`` (small positive ints, normal floats)."""
    if isinstance(t, TensorType):
        shape = tuple(d if isinstance(d, int) else 2 for d in t.shape)
        if t.dtype == "bool":
            return rng.integers(0, 2, shape).astype("bool")
        if t.dtype.startswith(("int", "uint")):
            return np.asarray(rng.integers(1, 6, shape), dtype=t.dtype)
        return np.asarray(rng.standard_normal(shape), dtype=t.dtype)
    if isinstance(t, TupleType):
        return tuple(sample_value(f, rng) for f in t.fields)
    raise ValueError(f"no sample input for parameters of type {rly.astext(t)}")


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        if value.ndim:
            return f"{value.dtype}{list(value.shape)}"
        return f"{value.item()!r} ({value.dtype})"
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    return repr(value)


def run_example(path: str) -> bool:
    """Parse, type-check and run ``@main`` of one example on sample inputs (one line each)."""
    from relay_ir import runtime
    from relay_ir.passes import InferType
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        mod = rly.parse(text, source_name=path)
        typed = InferType()(mod)
        assert rly.structural_equal(rly.parse(rly.astext(mod)), mod, map_free_vars=True)
        rng = np.random.default_rng(0)
        params = typed["main"].params
        args = [sample_value(p.checked_type, rng) for p in params]
        result = runtime.evaluate(typed, *args)
        print(f"  {os.path.basename(path):22s} {len(mod.functions)} global(s), typed, "
              f"round-trips; @main -> {_describe(result)}")
        return True
    except DiagnosticError as e:
        print(str(e))
        return False


def run_examples(paths: Sequence[str] = ()) -> bool:
    """Every ``examples/*.rly`` through :func:`run_example`; True when all pass."""
    paths = list(paths) or sorted(glob.glob(os.path.join(ROOT, "examples", "*.rly")))
    ok = [run_example(p) for p in paths]
    print(f"{sum(ok)}/{len(ok)} examples parsed, type-checked, printed and ran")
    return all(ok)


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    """The ``make demo`` entry point."""
    ap = argparse.ArgumentParser(prog="python -m relay_ir.demo", description=__doc__.split(
        "\n")[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true",
                    help="no progress bar (there is none when the output is not a terminal)")
    ap.add_argument("--no-export", action="store_true", help="skip export and reload")
    ap.add_argument("--examples", nargs="*", default=None,
                    help="run the examples (all, or the files given) instead of training")
    args = ap.parse_args(argv)
    if args.examples is not None:
        return 0 if run_examples(args.examples) else 1
    t0 = time.perf_counter()
    print("examples/*.rly: parse, type-check, print, run @main with the interpreter")
    ok = run_examples()
    print(f"\nrelay_ir demo: {os.path.relpath(MODEL, ROOT)} on scikit-learn's 8x8 digits")
    try:
        res = train(args.epochs, seed=args.seed, progress=not args.no_progress)
    except DiagnosticError as e:
        print(str(e))
        return 1
    print(f"test accuracy: {res['test_acc']:.3f}")
    if not args.no_export:
        ok = export_and_reload(res["module"], res["params"], res["x_test"],
                               res["test_pred"]) and ok
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
