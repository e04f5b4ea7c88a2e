"""The model examples (examples/models.py, examples/builder_example.py) reach their outcomes."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import builder_example  # noqa: E402
import models  # noqa: E402


def test_convnet_loss_falls_3x_in_30_steps() -> None:
    pytest.importorskip("sklearn", reason="the demo extra (digits) is missing")
    out = models.convnet(steps=30, verbose=False)
    assert out["first"] > 2.0            # about ln(10) at the start
    assert out["first"] / out["last"] >= 3.0, out


def test_charrnn_loss_falls_2_5x_in_400_steps() -> None:
    out = models.charrnn(steps=400, verbose=False)
    assert abs(out["before"] - np.log(models.V)) < 0.1     # untrained: uniform over 32 symbols
    assert out["before"] / out["after"] >= 2.5, out


def test_charrnn_compiled_step_matches_the_interpreter() -> None:
    _, windows = models.charrnn_data()
    x, y = windows[0]
    rng = np.random.default_rng(5)
    params = [rng.uniform(-0.3, 0.3, s).astype(np.float32)
              for s in ((32, 128), (32, 128), (128,), (32, 32), (32,))]
    mod = models.load("lstm_charrnn.rly")
    step = models.charrnn_step()
    assert "ref(" not in rly.astext(step) and "match" not in rly.astext(step)
    compiled = runtime.build(rly.IRModule({"main": step["train_step"]}))(x, y, *params)
    value, grads = runtime.evaluate(passes.gradient(mod), x, y, *params)
    np.testing.assert_allclose(compiled[0], value, rtol=1e-5)
    for got, want in zip(compiled[1:], grads[2:]):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)


def test_treelstm_gradients_match_finite_differences_and_training_lowers_the_loss() -> None:
    out = models.treelstm(steps=20, verbose=False)
    assert out["fd_rel_err"] < 1e-6, out
    assert out["after"] < 0.9 * out["before"], out


def test_treelstm_trees_have_different_shapes() -> None:
    mod = models.load("treelstm.rly")
    rng = np.random.default_rng(0)

    def leaves(t: object) -> int:
        todo, n = [t], 0
        while todo:
            v = todo.pop()
            if v.constructor.name == "Leaf":
                n += 1
            else:
                todo += list(v.fields)
        return n
    sizes = [leaves(models.make_tree(mod, k, rng)) for k in (1, 2, 5, 9)]
    assert sizes == [1, 2, 5, 9]


def test_newton_converges_to_ln2_over_3() -> None:
    out = models.newton(x0=2.0, iters=8, verbose=False)
    assert abs(out["x"] - np.log(2.0) / 3) < 1e-12, out
    few = models.newton(x0=2.0, iters=2, verbose=False)
    assert few["error"] > 1e-3                 # it is the iteration that converges


def test_newton_second_derivative_is_exact() -> None:
    mod = models.build_newton()
    for x in (-0.5, 0.3, 1.7):
        d2 = float(runtime.evaluate(mod, np.float64(x), entry="d2"))
        assert abs(d2 - (np.exp(x) + 4 * np.exp(-2 * x))) < 1e-10


def test_builder_example_registers_and_runs_its_pass() -> None:
    out = builder_example.main()
    assert out["same"]
    assert rly.astext(out["before"]).count("nn.relu(") == 2
    assert rly.astext(out["after"]).count("nn.relu(") == 1
    assert type(passes.get_pass("fold-double-relu")).__name__ == "FoldDoubleRelu"


def test_model_examples_run_from_the_command_line() -> None:
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "models.py"), "newton"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "newton: x0 = 2.0, 8 steps -> 0.231049060186" in r.stdout
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "models.py"), "nope"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "unknown example 'nope'" in r.stdout
