"""The batching benchmark's baselines (benchmarks/bench_batching.py): the level-by-level plan,
the hand-batched PyTorch TreeLSTM against the per-tree model, the per-tree model against
relay_ir's TreeLSTM example, and the training section's agreement check."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import bench_batching as bb  # noqa: E402

LEAF = "leaf"


def test_level_plan_orders_nodes_by_height() -> None:
    trees = [("node", (LEAF, 3), ("node", (LEAF, 1), (LEAF, 2))), (LEAF, 7)]
    plan = bb.LevelPlan(trees)
    # leaves 0..3 (tokens in visit order, left first), the height-1 node 4, the root 5
    assert plan.tokens.tolist() == [3, 1, 2, 7]
    assert [x.tolist() for x in plan.left] == [[1], [0]]
    assert [x.tolist() for x in plan.right] == [[2], [4]]
    assert plan.roots.tolist() == [5, 3]
    assert plan.nodes == 6


def test_random_trees_have_the_requested_leaf_counts() -> None:
    def leaves(t: object) -> int:
        todo, n = [t], 0
        while todo:
            x = todo.pop()
            if x[0] == LEAF:
                n += 1
            else:
                todo += [x[1], x[2]]
        return n
    data = bb.random_trees(20, 3, 6, 10, 3, seed=0)
    assert all(3 <= leaves(t) <= 6 for t, _ in data)
    assert all(0 <= y < 3 for _, y in data)
    assert data == bb.random_trees(20, 3, 6, 10, 3, seed=0)


def _small_params(h: int, tokens: int, classes: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = [(tokens, h), (h, 3 * h), (3 * h,), (2 * h, 5 * h), (5 * h,), (h, classes),
              (classes,)]
    return [rng.uniform(-0.5, 0.5, s) for s in shapes]


def test_hand_batched_equals_per_tree_model() -> None:
    torch = pytest.importorskip("torch")
    params = _small_params(4, 6, 3, seed=3)
    trees = bb.random_trees(5, 1, 7, 6, 3, seed=4) + [((LEAF, 2), 1)]
    total = bb.check_batched_against_per_tree(torch, params, trees, 1e-10, 1e-12)
    # the sum of the per-tree losses, recomputed here directly
    ps = bb.torch_params(torch, params)
    per = bb.PerTreeTorch(torch, ps)
    assert total == pytest.approx(sum(per.loss(t, y).item() for t, y in trees), rel=1e-12)


def test_hand_batched_check_detects_a_wrong_model() -> None:
    torch = pytest.importorskip("torch")
    params = _small_params(4, 6, 3, seed=3)
    trees = bb.random_trees(4, 2, 5, 6, 3, seed=6)

    class Swapped(bb.LevelBatchedTreeLSTM):
        # NOTE: left and right children exchanged: a different model for asymmetric trees
        def losses(self, plan: bb.LevelPlan, labels: object) -> object:
            plan.left, plan.right = plan.right, plan.left
            return super().losses(plan, labels)
    orig = bb.LevelBatchedTreeLSTM
    bb.LevelBatchedTreeLSTM = Swapped  # type: ignore[misc]
    try:
        with pytest.raises(AssertionError, match="hand-batched TreeLSTM"):
            bb.check_batched_against_per_tree(torch, params, trees, 1e-10, 1e-12)
    finally:
        bb.LevelBatchedTreeLSTM = orig  # type: ignore[misc]


def test_per_tree_torch_equals_relay_ir_treelstm_example() -> None:
    torch = pytest.importorskip("torch")
    import models as ex
    from relay_ir import passes, runtime
    mod = ex.load("treelstm.rly")
    g = passes.gradient(mod, entry="loss")
    params = ex.treelstm_params()
    eye3 = np.eye(3)
    for tree, y in bb.random_trees(3, 1, 5, 10, 3, seed=7):
        v, grads = runtime.evaluate(g, bb.tree_to_adt(mod, tree), eye3[y], *params,
                                    entry="loss")
        ps = bb.torch_params(torch, params)
        loss = bb.PerTreeTorch(torch, ps).loss(tree, y)
        loss.backward()
        assert loss.item() == pytest.approx(float(v), rel=1e-12)
        for p, gr in zip(ps, grads[2:]):
            # NOTE: a one-leaf tree does not use U, bU: torch has no gradient, relay_ir zeros
            mine = np.zeros_like(gr) if p.grad is None else p.grad.numpy()
            np.testing.assert_allclose(mine, gr, rtol=1e-10, atol=1e-12)


def test_training_section_through_the_command_line(tmp_path: object, capsys: object,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import workloads as wl
    # NOTE: main sets the thread counts process-wide: restored after the test
    monkeypatch.setenv("TVM_NUM_THREADS", os.environ.get("TVM_NUM_THREADS", ""))
    monkeypatch.setattr(wl, "_threads", wl._threads)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = torch.get_num_threads()
    out = os.path.join(str(tmp_path), "train.json")
    try:
        assert bb.main(["--only", "train", "--rounds", "1", "--train-trees", "8",
                        "--train-batch", "4", "--threads", "1", "--json", out]) == 0
    finally:
        torch.set_num_threads(before)
    text = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "| torch hand-batched level by level (minibatch 4) |" in text
    with open(out, encoding="utf-8") as f:
        rec = json.load(f)["records"][0]
    assert rec["section"] == "train" and rec["trees"] == 8 and rec["batch"] == 4
    rows = rec["rows"]
    timed = [n for n, r in rows.items() if "trees_per_s" in r]
    # relay_ir one-by-one and both torch loops at least (run_batch where the build has it);
    # bench_train asserted that they all end the epoch with the same parameters
    assert len(timed) >= 3
    assert all(rows[n]["trees_per_s"] > 0 for n in timed)
    # one epoch over 8 trees (mean-gradient SGD, lr 0.5) lowers the summed loss
    assert rec["loss_after"] < rec["loss_before"]


@pytest.mark.parametrize("argv", [["--only", "w6"], ["--only", ","], ["--rounds", "0"],
                                  ["--train-batch", "0"]])
def test_bad_command_lines_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bb.main(argv)
    assert e.value.code == 2
