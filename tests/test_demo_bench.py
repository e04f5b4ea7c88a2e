"""``make bench`` (benchmarks/run_workloads.py) runs with numpy as the only peer."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import workloads as wl  # noqa: E402


def test_runner_with_numpy_only_prints_tables_and_agreeing_checks() -> None:
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run_workloads.py"),
                        "--only", "W1", "--rounds", "1", "--no-w8", "--peers", "numpy"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "peers: numpy\n" in out and "torch" not in out.split("peers:", 1)[1]
    assert "### W1 " in out and "### W2 " not in out
    assert "relay_ir / best peer (numpy): **" in out and "check values agree: True" in out
    assert "| 856104 |" in out          # WORKLOADS.md's check value


def test_w6_relay_ir_gradient_matches_the_closed_form() -> None:
    impls = {i.kind + ":" + i.name.split(" ")[0]: i for i in wl.w6_impls()}
    rly_impl = next(i for k, i in impls.items() if k.startswith("relay_ir:"))
    got = rly_impl.check(rly_impl.make()())
    exact = sum(0.001 * i * np.cos(0.5 * i) for i in range(1000))
    assert abs(got - exact) < 1e-4 and abs(got + 0.48174) < 1e-4


def test_w4_program_matches_a_numpy_lstm() -> None:
    """The generated W4 loss (interpreted, B=1) equals a numpy LSTM on the same data."""
    import relay_ir as rly
    from relay_ir import runtime
    params, inputs, targets = wl.w4_data(1)
    eye = np.eye(wl.V4, dtype=np.float32)
    wx, wh, b, wy, by = params
    h = c = np.zeros((1, wl.H4), np.float32)
    hs = []
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    for t in range(wl.T4):
        i, f, g, o = np.split(eye[inputs[t]] @ wx + h @ wh + b, 4, axis=1)
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
        hs.append(h)
    z = np.concatenate(hs) @ wy + by
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    want = -logp[np.arange(wl.T4), targets[:, 0]].mean()
    got = runtime.evaluate(rly.parse(wl.w4_source(1)), eye[inputs],
                           eye[targets.reshape(-1)], *params)
    assert abs(float(got) - 4.157316) < 2e-5 and abs(float(got) - want) < 2e-5


def test_w5_trees_follow_the_definition() -> None:
    trees = wl.w5_trees()
    assert len(trees) == 64

    def leaves(t: object) -> int:
        todo, n = [t], 0
        while todo:
            v = todo.pop()
            if v[0] == "leaf":
                n += 1
            else:
                todo += [v[1], v[2]]
        return n
    assert all(8 <= leaves(t) <= 32 for t, _ in trees)
    assert all(0 <= y < 5 for _, y in trees)
