"""Train a small MLP written as a plain Python/numpy function, with relay_ir's `grad`.

    .venv/bin/python examples/python_frontend.py [steps]

`value_and_grad(loss, argnums=1)` translates `loss` (from_python), differentiates it
(passes.gradient), optimizes and compiles it once for these shapes; every step then runs the
compiled gradient. The parameters travel as one tuple, so their gradient is a tuple too.
"""
from __future__ import annotations

import sys

import numpy as np

from relay_ir.frontend import value_and_grad


def mlp(params, x):
    w1, b1, w2, b2 = params
    h = np.tanh(x @ w1 + b1)
    return h @ w2 + b2


def loss(x, params, y):
    z = mlp(params, x)
    m = np.max(z, axis=1, keepdims=True)
    logp = z - m - np.log(np.sum(np.exp(z - m), axis=1, keepdims=True))
    return -np.mean(np.sum(logp * y, axis=1))


def accuracy(params, x, y):
    z = np.tanh(x @ params[0] + params[1]) @ params[2] + params[3]
    return float(np.mean(np.argmax(z, axis=1) == np.argmax(y, axis=1)))


def make_data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved half moons: a problem a linear model cannot solve."""
    t = rng.uniform(0, np.pi, n)
    label = rng.integers(0, 2, n)
    x = np.stack([np.cos(t) + label * 1.0 - 0.5, np.sin(t) * (1 - 2 * label) + label * 0.3], 1)
    x = (x + rng.normal(0, 0.1, x.shape)).astype("float32")
    return x, np.eye(2, dtype="float32")[label]


def main(steps: int = 300, lr: float = 0.5) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    x, y = make_data(256, rng)
    params = (rng.normal(0, 0.5, (2, 32)).astype("float32"), np.zeros(32, "float32"),
              rng.normal(0, 0.5, (32, 2)).astype("float32"), np.zeros(2, "float32"))
    step = value_and_grad(loss, argnums=1)
    first = None
    for k in range(steps):
        value, grads = step(x, params, y)
        first = float(value) if first is None else first
        params = tuple((p - lr * g).astype("float32") for p, g in zip(params, grads))
        if k % 100 == 0:
            print(f"step {k:4d}  loss {float(value):.4f}  accuracy {accuracy(params, x, y):.3f}")
    final = float(step(x, params, y)[0])
    print(f"final     loss {final:.4f}  accuracy {accuracy(params, x, y):.3f}")
    return first, final


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
