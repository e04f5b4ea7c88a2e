"""Batching many instances of a dynamic-structure program: relay_ir's ``run_batch`` against
one-by-one execution, PyTorch eager per tree and a hand-batched PyTorch TreeLSTM (issue 25).

Two sections, each side by side in one process (interleaved rounds, medians):

* ``w5`` -- W5 of ``benchmarks/workloads.py`` (TreeLSTM H=128, its 64 trees and parameters,
  forward + backward; time per tree):
  relay_ir one-by-one (the compiled gradient program, ``exe(...)`` per tree, as
  run_workloads does); relay_ir ``exe.run_batch`` over batches of 1, 8 and 64 trees (speedup
  over one-by-one); PyTorch eager per tree (workloads.py's W5 peer); a hand-batched PyTorch
  TreeLSTM (:class:`LevelBatchedTreeLSTM`: all trees of a batch level by level, one GEMM per
  level) over batches of 8 and 64. Goals: run_batch(64) per tree <= 0.1x torch eager and
  <= 1.0x the hand-batched model (64).
* ``train`` -- training throughput (trees per second) of the TreeLSTM example
  (``examples/treelstm.rly``: H=8, float64, 3 classes): one epoch of minibatch SGD over 64
  random trees (mean gradient of each minibatch), the same loop for relay_ir one-by-one,
  relay_ir ``run_batch``, PyTorch per tree and PyTorch hand-batched; every implementation
  starts from the same parameters and must end with the same ones.

The W5 table's "set-up + first pass" is parse, gradient, optimize, build and the first pass for
relay_ir one-by-one (kernels from the kernel cache when warm); for the other rows the first
pass over the trees (run_batch compiles its batched kernels there).

Before timing, results are checked against each other (the benchmark fails otherwise):
run_batch against one-by-one (losses and summed gradients), the hand-batched model against the
per-tree PyTorch model, and PyTorch's losses against relay_ir's. ``run_batch`` is reported as
"not available" when the executable has none (a branch without it).

Run: ``.venv/bin/python benchmarks/bench_batching.py [--rounds 5] [--only w5,train]
[--threads N] [--json out.json]``. Timings from a shared, loaded machine are noisy: compare the
rows of one run, not figures of different runs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# NOTE: tree = ("leaf", token) | ("node", left, right): workloads.py's nested tuples


# ----------------------------------------------------------------------------- trees
def random_trees(n: int, lo: int, hi: int, tokens: int, classes: int,
                 seed: int) -> list[tuple[Any, int]]:
    """``n`` random binary trees of ``lo..hi`` leaves (W5's shape rule) with labels."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        # NOTE: explicit stack: ("build", k) makes a subtree of k leaves, ("node", 0) joins
        todo: list[tuple[str, int]] = [("build", int(rng.integers(lo, hi + 1)))]
        vals: list[Any] = []
        while todo:
            kind, k = todo.pop()
            if kind == "node":
                r, left = vals.pop(), vals.pop()
                vals.append(("node", left, r))
            elif k == 1:
                vals.append(("leaf", int(rng.integers(0, tokens))))
            else:
                m = int(rng.integers(1, k))
                todo += [("node", 0), ("build", k - m), ("build", m)]
        out.append((vals[0], int(rng.integers(0, classes))))
    return out


def tree_to_adt(mod: Any, tree: Any) -> Any:
    """A nested-tuple tree as a ``BinTree`` value of ``mod`` (no recursion)."""
    import workloads as wl
    return wl._to_adt(mod, tree)


class LevelPlan:
    """The schedule of a batch of trees, level by level (level = height: leaves are 0).

    Node states are stored level after level in one array: leaves first (``tokens[i]`` is
    leaf ``i``), then the nodes of height 1, 2, ... Level ``k`` (k >= 1) holds ``left[k-1]``
    and ``right[k-1]``: the indices of its nodes' children in that array (always in lower
    levels). ``roots[t]`` is tree ``t``'s root.
    """

    def __init__(self, trees: list[Any]):
        leaf_tok: list[int] = []
        # NOTE: a node is referred to as (height, position in its level) until the offsets
        # of the levels are known
        levels: list[list[tuple[tuple[int, int], tuple[int, int]]]] = []
        roots: list[tuple[int, int]] = []
        for tree in trees:
            todo: list[tuple[bool, Any]] = [(False, tree)]
            vals: list[tuple[int, int]] = []
            while todo:
                done, t = todo.pop()
                if t[0] == "leaf":
                    vals.append((0, len(leaf_tok)))
                    leaf_tok.append(int(t[1]))
                elif done:
                    r, left = vals.pop(), vals.pop()
                    h = 1 + max(left[0], r[0])
                    while len(levels) < h:
                        levels.append([])
                    vals.append((h, len(levels[h - 1])))
                    levels[h - 1].append((left, r))
                else:
                    todo += [(True, t), (False, t[2]), (False, t[1])]
            roots.append(vals[0])
        offsets = [0, len(leaf_tok)]
        for lv in levels:
            offsets.append(offsets[-1] + len(lv))

        def idx(ref: tuple[int, int]) -> int:
            return offsets[ref[0]] + ref[1]
        self.tokens = np.array(leaf_tok, dtype=np.int64)
        self.left = [np.array([idx(a) for a, _ in lv], dtype=np.int64) for lv in levels]
        self.right = [np.array([idx(b) for _, b in lv], dtype=np.int64) for lv in levels]
        self.roots = np.array([idx(r) for r in roots], dtype=np.int64)
        self.nodes = offsets[-1]


# ----------------------------------------------------------------------------- torch models
class PerTreeTorch:
    """The TreeLSTM in PyTorch one tree at a time (the per-tree reference model).

    ``params`` = E, Wl, bl, U, bU, Wo, bo as in W5 and examples/treelstm.rly; the loss of a
    tree is ``-log_softmax(h_root @ Wo + bo)[label]``.
    """

    def __init__(self, torch: Any, params: list[Any]):
        self.torch, self.params = torch, params

    def embed(self, tree: Any) -> tuple[Any, Any]:
        """(h, c) of the root: an explicit stack, the same arithmetic as workloads.py's peer."""
        torch = self.torch
        e, wl, bl, u, bu, _wo, _bo = self.params
        todo: list[tuple[bool, Any]] = [(False, tree)]
        vals: list[tuple[Any, Any]] = []
        while todo:
            done, t = todo.pop()
            if t[0] == "leaf":
                i, o, uu = (e[t[1]] @ wl + bl).chunk(3)
                c = torch.sigmoid(i) * torch.tanh(uu)
                vals.append((torch.sigmoid(o) * torch.tanh(c), c))
            elif done:
                (hr, cr), (hl, cl) = vals.pop(), vals.pop()
                i, fl, fr, o, uu = (torch.cat([hl, hr]) @ u + bu).chunk(5)
                c = (torch.sigmoid(i) * torch.tanh(uu) + torch.sigmoid(fl) * cl
                     + torch.sigmoid(fr) * cr)
                vals.append((torch.sigmoid(o) * torch.tanh(c), c))
            else:
                todo += [(True, t), (False, t[2]), (False, t[1])]
        return vals[0]

    def loss(self, tree: Any, label: int) -> Any:
        """The scalar loss of one tree."""
        h, _c = self.embed(tree)
        _e, _wl, _bl, _u, _bu, wo, bo = self.params
        return -self.torch.log_softmax(h @ wo + bo, 0)[label]


class LevelBatchedTreeLSTM:
    """The TreeLSTM hand-batched in PyTorch: all trees of a batch at once, level by level.

    Leaves: one gather of embeddings and one GEMM. Each higher level: one gather of the
    children's (h, c) by index from the states of the levels below, one GEMM with U, the
    gates. Autograd differentiates it as written (forward + backward).
    """

    def __init__(self, torch: Any, params: list[Any]):
        self.torch, self.params = torch, params

    def losses(self, plan: LevelPlan, labels: Any) -> Any:
        """The per-tree losses, a vector (``labels``: an int64 tensor, one per tree)."""
        torch = self.torch
        e, wl, bl, u, bu, wo, bo = self.params
        hd = u.shape[0] // 2
        i, o, uu = (e[torch.from_numpy(plan.tokens)] @ wl + bl).chunk(3, 1)
        c = torch.sigmoid(i) * torch.tanh(uu)
        # NOTE: h and c side by side in one state array: one gather per level
        states = [torch.cat([torch.sigmoid(o) * torch.tanh(c), c], 1)]
        for li, ri in zip(plan.left, plan.right):
            s_all = states[0] if len(states) == 1 else torch.cat(states)
            n = len(li)
            kids = s_all[torch.from_numpy(np.concatenate([li, ri]))]
            hl, cl = kids[:n, :hd], kids[:n, hd:]
            hr, cr = kids[n:, :hd], kids[n:, hd:]
            i, fl, fr, o, uu = (torch.cat([hl, hr], 1) @ u + bu).chunk(5, 1)
            c = (torch.sigmoid(i) * torch.tanh(uu) + torch.sigmoid(fl) * cl
                 + torch.sigmoid(fr) * cr)
            states.append(torch.cat([torch.sigmoid(o) * torch.tanh(c), c], 1))
        s_all = states[0] if len(states) == 1 else torch.cat(states)
        h = s_all[torch.from_numpy(plan.roots), :hd]
        logp = torch.log_softmax(h @ wo + bo, 1)
        return -logp[torch.arange(len(plan.roots)), labels]


def torch_params(torch: Any, params: list[np.ndarray]) -> list[Any]:
    """numpy parameters as leaf tensors that require gradients (copies)."""
    return [torch.from_numpy(p.copy()).requires_grad_() for p in params]


def check_batched_against_per_tree(torch: Any, params: list[np.ndarray],
                                   trees: list[tuple[Any, int]], rtol: float,
                                   atol: float) -> float:
    """Assert the hand-batched model's losses and gradients equal the per-tree model's.

    Returns the sum of the losses. Gradients: of the sum of the losses (the per-tree model
    accumulates tree by tree).
    """
    ps = torch_params(torch, params)
    per = PerTreeTorch(torch, ps)
    ref_losses = []
    for t, y in trees:
        loss = per.loss(t, y)
        loss.backward()
        ref_losses.append(loss.item())
    ref_grads = [np.zeros(p.shape, params[k].dtype) if p.grad is None
                 else p.grad.detach().numpy().copy() for k, p in enumerate(ps)]
    pb = torch_params(torch, params)
    bat = LevelBatchedTreeLSTM(torch, pb)
    losses = bat.losses(LevelPlan([t for t, _ in trees]),
                        torch.tensor([y for _, y in trees], dtype=torch.int64))
    losses.sum().backward()
    np.testing.assert_allclose(losses.detach().numpy(), ref_losses, rtol=rtol, atol=atol,
                               err_msg="hand-batched TreeLSTM losses != per-tree losses")
    for k, (p, g) in enumerate(zip(pb, ref_grads)):
        mine = np.zeros_like(g) if p.grad is None else p.grad.numpy()
        np.testing.assert_allclose(mine, g, rtol=rtol, atol=atol,
                                   err_msg=f"hand-batched TreeLSTM gradient {k} != per-tree")
    return float(sum(ref_losses))


# ----------------------------------------------------------------------------- timing
def interleave(calls: dict[str, Callable[[], Any]], rounds: int,
               per: int) -> dict[str, list[float]]:
    """Each call once per round, in turn; the times in ms divided by ``per``."""
    out: dict[str, list[float]] = {n: [] for n in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            out[name].append((time.perf_counter() - t0) * 1e3 / per)
    return out


def fmt(v: float) -> str:
    """Three significant digits."""
    if not np.isfinite(v):
        return str(v)
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def machine_line() -> str:
    """CPU model, cores, load average, versions, date."""
    import run_workloads
    return run_workloads.machine_line()


def relay_batch_fn(exe: Any) -> Callable[..., Any] | None:
    """``exe.run_batch`` when the executable has it, else None."""
    return getattr(exe, "run_batch", None)


def add_stats(acc: dict[str, int], exe: Any) -> None:
    """Add the counters of ``exe``'s last run_batch (``exe.batch_stats()``) to ``acc``."""
    get = getattr(exe, "batch_stats", None)
    for k, v in (get() if get is not None else {}).items():
        acc[k] = acc.get(k, 0) + int(v)


def stats_note(stats: dict[str, int]) -> str:
    """The kernel calls one pass made, in words (empty without counters)."""
    if "kernel_calls" not in stats:
        return ""
    return (f"{stats['kernel_calls']} kernel calls for {stats.get('instance_calls', '?')} "
            f"instance calls ({stats.get('batched_calls', '?')} batched) per pass")


def _sum_grads(results: list[Any], skip: int) -> list[np.ndarray]:
    grads = [np.zeros_like(np.asarray(g)) for g in results[0][1][skip:]]
    for _v, gs in results:
        for k, g in enumerate(gs[skip:]):
            grads[k] += g
    return grads


def _assert_same_results(got: list[Any], ref: list[Any], skip: int, rtol: float,
                         atol: float, what: str) -> None:
    assert len(got) == len(ref), f"{what}: {len(got)} results for {len(ref)} instances"
    np.testing.assert_allclose([float(v) for v, _ in got], [float(v) for v, _ in ref],
                               rtol=rtol, atol=atol, err_msg=f"{what}: losses differ")
    for k, (a, b) in enumerate(zip(_sum_grads(got, skip), _sum_grads(ref, skip))):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol,
                                   err_msg=f"{what}: summed gradient {k} differs")


# ----------------------------------------------------------------------------- W5
def bench_w5(rounds: int, torch: Any | None) -> dict[str, Any]:
    """W5 side by side: per-tree ms of each implementation; checks first."""
    import relay_ir as rly
    import workloads as wl
    from relay_ir import passes, runtime
    trees, params = wl.w5_trees(), wl.w5_params()
    n = len(trees)
    eye5 = np.eye(5, dtype=np.float32)
    rows: dict[str, dict[str, Any]] = {}
    calls: dict[str, Callable[[], Any]] = {}

    t0 = time.perf_counter()
    mod = rly.parse(wl.w5_source())
    exe = runtime.build(passes.optimize(passes.gradient(mod, entry="main")), target="llvm",
                        **wl.build_kw())
    args = [(tree_to_adt(mod, t), eye5[y], *params) for t, y in trees]

    def one_by_one() -> list[Any]:
        return [exe(*a) for a in args]
    ref = one_by_one()
    setup_s = time.perf_counter() - t0
    ref_total = float(sum(float(v) for v, _ in ref))
    one_name = "relay_ir one-by-one (exe per tree)"
    rows[one_name] = {"check": ref_total, "setup_s": setup_s}
    calls[one_name] = one_by_one

    run_batch = relay_batch_fn(exe)
    for b in (1, 8, 64):
        name = f"relay_ir run_batch, batches of {b}"
        if run_batch is None:
            rows[name] = {"note": "not available (this executable has no run_batch)"}
            continue

        def batched(b: int = b, stats: dict[str, int] | None = None) -> list[Any]:
            out: list[Any] = []
            for s in range(0, n, b):
                out += run_batch(args[s:s + b], entry="main")
                # NOTE: batch_stats counts the last batched run; a batch of one may run on
                # the VM without touching them
                if stats is not None and b > 1:
                    add_stats(stats, exe)
            return out
        try:
            t0 = time.perf_counter()
            stats: dict[str, int] = {}
            got = batched(stats=stats)
            first = time.perf_counter() - t0
            # NOTE: float32 sums over up to 64 trees in a different order
            _assert_same_results(got, ref, 1, 1e-4, 1e-5, name)
        except AssertionError:
            raise
        except Exception as e:  # NOTE: a failing run_batch is reported in its row
            rows[name] = {"note": f"error: {type(e).__name__}: {str(e).splitlines()[0][:120]}"}
            continue
        rows[name] = {"check": float(sum(float(v) for v, _ in got)), "setup_s": first,
                      "stats": stats, "note": stats_note(stats)}
        calls[name] = batched

    if torch is not None:
        peer = next(im for im in wl.w5_impls() if im.name == "torch eager recursion")
        t0 = time.perf_counter()
        call = peer.make()
        res = call()
        eager_name = "torch eager per tree (workloads.py W5 peer)"
        rows[eager_name] = {"check": peer.check(res), "setup_s": time.perf_counter() - t0}
        calls[eager_name] = call
        assert abs(rows[eager_name]["check"] - ref_total) <= 1e-4 * abs(ref_total), \
            (rows[eager_name]["check"], ref_total)
        total = check_batched_against_per_tree(torch, params, trees, 2e-4, 2e-5)
        assert abs(total - ref_total) <= 1e-4 * abs(ref_total), (total, ref_total)
        labels_all = [y for _, y in trees]
        for b in (8, 64):
            ps = torch_params(torch, params)
            model = LevelBatchedTreeLSTM(torch, ps)

            def hand(b: int = b, ps: list[Any] = ps, model: Any = model) -> float:
                total = 0.0
                for s in range(0, n, b):
                    plan = LevelPlan([t for t, _ in trees[s:s + b]])
                    loss = model.losses(plan, torch.tensor(labels_all[s:s + b])).sum()
                    torch.autograd.grad(loss, ps, materialize_grads=True)
                    total += loss.item()
                return total
            name = f"torch hand-batched level by level, batches of {b}"
            t0 = time.perf_counter()
            rows[name] = {"check": hand(), "setup_s": time.perf_counter() - t0,
                          "note": "timed with building the level plans from the trees"}
            calls[name] = hand
    else:
        rows["torch (not installed)"] = {"note": "pip install torch==2.13.0"}

    times = interleave(calls, rounds, n)
    for name, ts in times.items():
        rows[name].update(times=ts, median=statistics.median(ts), min=min(ts), max=max(ts))
    base = rows[one_name]["median"]
    for r in rows.values():
        if "median" in r:
            r["speedup_vs_one_by_one"] = base / r["median"]
    rec: dict[str, Any] = {"section": "w5", "unit": "ms per tree", "rows": rows,
                           "rounds": rounds}
    rb = rows.get("relay_ir run_batch, batches of 64", {})
    eager = rows.get("torch eager per tree (workloads.py W5 peer)", {})
    hand64 = rows.get("torch hand-batched level by level, batches of 64", {})
    if "median" in rb and "median" in eager:
        rec["run_batch_vs_torch_eager"] = rb["median"] / eager["median"]
    if "median" in rb and "median" in hand64:
        rec["run_batch_vs_hand_batched"] = rb["median"] / hand64["median"]
    # NOTE: the kernel calls one tree makes (the agenda's instance_calls are the same for
    # every chunk size): what a driver may spend per call to match a row
    counted = [r["stats"]["instance_calls"] for r in rows.values()
               if r.get("stats", {}).get("instance_calls")]
    if counted:
        per_tree = counted[0] / n
        rec["kernel_calls_per_tree"] = per_tree
        rec["us_per_instance_call"] = {name: r["median"] * 1e3 / per_tree
                                       for name, r in rows.items() if "median" in r}
    return rec


# ----------------------------------------------------------------------------- training
TRAIN_TREES, TRAIN_LR = 64, 0.5


def bench_train(rounds: int, batch: int, torch: Any | None,
                ntrees: int = TRAIN_TREES) -> dict[str, Any]:
    """One epoch of minibatch SGD on the TreeLSTM example per implementation (trees/s)."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import models as ex
    from relay_ir import passes, runtime
    mod = ex.load("treelstm.rly")
    init = ex.treelstm_params()
    data = random_trees(ntrees, 2, 12, 10, 3, seed=5)
    eye3 = np.eye(3)
    rows: dict[str, dict[str, Any]] = {}
    calls: dict[str, Callable[[], Any]] = {}
    finals: dict[str, list[np.ndarray]] = {}

    t0 = time.perf_counter()
    exe = runtime.build(passes.optimize(passes.gradient(mod, entry="loss"), entry="loss"),
                       target="llvm", entry="loss")
    setup_s = time.perf_counter() - t0
    adts = [(tree_to_adt(mod, t), eye3[y]) for t, y in data]

    def relay_epoch(grads_of: Callable[[list[Any]], list[Any]]) -> Callable[[], Any]:
        def epoch() -> list[np.ndarray]:
            ps = [p.copy() for p in init]
            for s in range(0, len(adts), batch):
                res = grads_of([(t, y, *ps) for t, y in adts[s:s + batch]])
                g = _sum_grads(res, 2)
                m = len(res)
                ps = [p - (TRAIN_LR / m) * d for p, d in zip(ps, g)]
            return ps
        return epoch

    name = "relay_ir one-by-one (exe per tree)"
    calls[name] = relay_epoch(lambda inst: [exe(*a, entry="loss") for a in inst])
    rows[name] = {"setup_s": setup_s}
    run_batch = relay_batch_fn(exe)
    name = f"relay_ir run_batch (minibatch {batch})"
    if run_batch is None:
        rows[name] = {"note": "not available (this executable has no run_batch)"}
    else:
        stats: dict[str, int] = {}

        def batch_grads(inst: list[Any]) -> list[Any]:
            out = run_batch(inst, entry="loss")
            if len(inst) > 1:
                add_stats(stats, exe)
            return out
        calls[name] = relay_epoch(batch_grads)
        rows[name] = {"stats": stats}
    if torch is not None:
        def torch_epoch(batched: bool) -> Callable[[], Any]:
            def epoch() -> list[np.ndarray]:
                ps = torch_params(torch, init)
                per, bat = PerTreeTorch(torch, ps), LevelBatchedTreeLSTM(torch, ps)
                for s in range(0, len(data), batch):
                    mb = data[s:s + batch]
                    if batched:
                        loss = bat.losses(LevelPlan([t for t, _ in mb]),
                                          torch.tensor([y for _, y in mb])).sum()
                    else:
                        loss = sum(per.loss(t, y) for t, y in mb)
                    gs = torch.autograd.grad(loss, ps, materialize_grads=True)
                    with torch.no_grad():
                        for p, g in zip(ps, gs):
                            p -= (TRAIN_LR / len(mb)) * g
                return [p.detach().numpy() for p in ps]
            return epoch
        calls["torch eager per tree"] = torch_epoch(False)
        calls[f"torch hand-batched level by level (minibatch {batch})"] = torch_epoch(True)
        rows["torch eager per tree"] = {}
        rows[f"torch hand-batched level by level (minibatch {batch})"] = {}
    else:
        rows["torch (not installed)"] = {"note": "pip install torch==2.13.0"}

    for name, call in calls.items():
        t0 = time.perf_counter()
        finals[name] = call()
        rows[name]["first_epoch_s"] = time.perf_counter() - t0
        if "stats" in rows[name]:
            # NOTE: the counters of the first epoch only (the timed ones add to a copy)
            rows[name]["stats"] = dict(rows[name]["stats"])
            rows[name]["note"] = stats_note(rows[name]["stats"]).replace("pass", "epoch")
    # NOTE: every implementation trains the same float64 model from the same start: the
    # parameters after one epoch must agree
    ref_name = next(iter(finals))
    for name, ps in finals.items():
        for k, (a, b) in enumerate(zip(ps, finals[ref_name])):
            np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-9,
                                       err_msg=f"{name}: parameter {k} after one epoch "
                                               f"differs from {ref_name}'s")
    # loss over the data after the epoch (relay_ir's interpreter-free check: one-by-one exe)
    final_loss = float(sum(float(exe(t, y, *finals[ref_name], entry="loss")[0])
                           for t, y in adts))
    start_loss = float(sum(float(exe(t, y, *init, entry="loss")[0]) for t, y in adts))
    times = interleave(calls, rounds, 1)
    for name, ts in times.items():
        med = statistics.median(ts)
        rows[name].update(times_ms=ts, median_ms=med, trees_per_s=len(data) / (med / 1e3),
                          best_trees_per_s=len(data) / (min(ts) / 1e3))
    return {"section": "train", "unit": "trees per second", "rows": rows, "rounds": rounds,
            "batch": batch, "trees": len(data), "loss_before": start_loss,
            "loss_after": final_loss}


# ----------------------------------------------------------------------------- report
def print_w5(rec: dict[str, Any]) -> None:
    """The W5 table (markdown)."""
    print(f"\n### W5 TreeLSTM H=128, 64 trees, forward + backward: ms per tree "
          f"(median of {rec['rounds']} interleaved rounds)\n")
    print("| implementation | median ms/tree | min | max | speedup vs one-by-one | "
          "set-up + first pass s | check (sum of losses) | notes |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rec["rows"].items():
        if "median" not in r:
            print(f"| {name} |  |  |  |  |  |  | {r.get('note', '')} |")
            continue
        print(f"| {name} | {fmt(r['median'])} | {fmt(r['min'])} | {fmt(r['max'])} | "
              f"{r['speedup_vs_one_by_one']:.2f}x | {r['setup_s']:.2f} | {r['check']:.7g} | "
              f"{r.get('note', '')} |")
    goals = []
    if "run_batch_vs_torch_eager" in rec:
        v = rec["run_batch_vs_torch_eager"]
        goals.append(f"run_batch(64) / torch eager per tree = **{v:.3f}x** (goal <= 0.1: "
                     f"{'met' if v <= 0.1 else 'MISSED'})")
    if "run_batch_vs_hand_batched" in rec:
        v = rec["run_batch_vs_hand_batched"]
        goals.append(f"run_batch(64) / torch hand-batched(64) = **{v:.2f}x** (goal <= 1.0: "
                     f"{'met' if v <= 1.0 else 'MISSED'})")
    if goals:
        print("\n" + "; ".join(goals))
    if "us_per_instance_call" in rec:
        per = "; ".join(f"{name}: {v:.2f}" for name, v in rec["us_per_instance_call"].items())
        print(f"\nOne tree makes {rec['kernel_calls_per_tree']:.0f} kernel calls (fused groups "
              f"of the gradient program). Time per tree divided by them, in us: {per}.")


def print_train(rec: dict[str, Any]) -> None:
    """The training table (markdown)."""
    print(f"\n### TreeLSTM example training (examples/treelstm.rly, H=8, float64): one epoch "
          f"of {rec['trees']} trees, minibatch {rec['batch']}, SGD; median of "
          f"{rec['rounds']} interleaved rounds\n")
    print("| implementation | trees/s (median) | trees/s (best round) | ms per epoch | "
          "first epoch s | notes |")
    print("|---|---|---|---|---|---|")
    for name, r in rec["rows"].items():
        if "median_ms" not in r:
            print(f"| {name} |  |  |  |  | {r.get('note', '')} |")
            continue
        print(f"| {name} | {fmt(r['trees_per_s'])} | {fmt(r['best_trees_per_s'])} | "
              f"{fmt(r['median_ms'])} | {r['first_epoch_s']:.2f} | {r.get('note', '')} |")
    print(f"\nEvery implementation ends the epoch with the same parameters (checked); loss over "
          f"the {rec['trees']} trees {rec['loss_before']:.4f} -> {rec['loss_after']:.4f}.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    ap.add_argument("--only", default="w5,train", help="sections: w5, train (comma list)")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for TVM kernels and PyTorch (default: every core)")
    ap.add_argument("--train-batch", type=int, default=8, help="minibatch size of training")
    ap.add_argument("--train-trees", type=int, default=TRAIN_TREES,
                    help="trees in the training epoch")
    ap.add_argument("--json", default="", help="also write the records to this file")
    a = ap.parse_args(argv)
    sections = [s.strip().lower() for s in a.only.split(",") if s.strip()]
    bad = [s for s in sections if s not in ("w5", "train")]
    if bad or not sections or min(a.rounds, a.train_batch, a.train_trees) < 1:
        ap.error(f"--only takes w5 and/or train (got {a.only!r}); --rounds, --train-batch "
                 f"and --train-trees take a number >= 1")
    threads = a.threads or len(os.sched_getaffinity(0))
    # NOTE: before tvm is imported (workloads.py only sets a default)
    os.environ["TVM_NUM_THREADS"] = str(threads)
    import workloads as wl
    wl._threads = lambda: threads  # type: ignore[assignment]  # the torch peer's threads
    torch = None
    if wl.have("torch"):
        import torch
        torch.set_num_threads(threads)
    print(f"machine: {machine_line()}; threads {threads} (a shared machine: compare rows of "
          f"this run only)")
    if threads > 1 and os.getloadavg()[0] > len(os.sched_getaffinity(0)):
        # NOTE: measured on the shared 2-core Xeon (load 6): torch eager per tree went from
        # ~11 ms at --threads 1 to ~330 ms at --threads 2 (OpenMP workers waiting for cores)
        print(f"WARNING: load average {os.getloadavg()[0]:.1f} exceeds the cores: multi-threaded "
              f"PyTorch (OpenMP) slows down by up to 30x on oversubscribed cores, which makes "
              f"its rows meaningless; use --threads 1 on a loaded machine")
    recs = []
    if "w5" in sections:
        recs.append(bench_w5(a.rounds, torch))
        print_w5(recs[-1])
    if "train" in sections:
        recs.append(bench_train(a.rounds, a.train_batch, torch, a.train_trees))
        print_train(recs[-1])
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"machine": machine_line(), "threads": threads, "records": recs}, f,
                      indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
