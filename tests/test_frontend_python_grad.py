"""grad / value_and_grad of Python functions: gradients vs central finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from relay_ir.frontend import FrontendError, from_python, grad, value_and_grad
from test_frontend_python import power  # power by squaring, recursive

RNG = np.random.default_rng(1)
B = RNG.standard_normal(3)


def rand(*shape):
    return RNG.standard_normal(shape)


def numeric_grad(fn, args, k, eps=1e-6):
    """Central differences of fn (run by numpy, float64) in argument k."""
    x = np.array(args[k], dtype="float64")
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        hi = fn(*args[:k], x.copy() if x.ndim else x[()], *args[k + 1:])
        flat[i] = old - eps
        lo = fn(*args[:k], x.copy() if x.ndim else x[()], *args[k + 1:])
        flat[i] = old
        gflat[i] = (hi - lo) / (2 * eps)
    return g


# ----------------------------------------------------------------------------- functions
def sq_sum(x):
    return np.sum(x * x) * 0.5


def tanh_dot(w, x):
    return np.sum(np.tanh(x @ w) + B[:2] * 0.0)


def closure_over_param(x, y):
    def f(z):
        return np.sin(z) * y
    return np.sum(f(x) + f(x * x))


def branchy(x):
    if np.sum(x) > 0.0:
        y = x * x
    else:
        y = -x * 3.0
    return np.sum(y)


def while_data(x):
    y = x
    while np.sum(y * y) < 10.0:
        y = y * 1.5 + 0.1
    return np.sum(y)


def for_loop(x, n):
    acc = x
    for i in range(n):
        acc = np.tanh(acc) * x + float(i)
    return np.sum(acc)


def mlp_loss(w1, b1, w2, x, y):
    h = np.tanh(x @ w1 + b1)
    out = h @ w2
    d = out - y
    return np.mean(d * d)


def rnn_loss(wh, wx, xs):
    h = np.zeros(3, dtype=np.float64)
    for t in range(xs.shape[0]):
        h = np.tanh(h @ wh + xs[t] @ wx)
    return np.sum(h)


def tuple_arg(p, x):
    a, b = p
    return np.sum(a * x + b)


def higher(x):
    return np.sum(apply(lambda v: np.exp(v) * 0.5, x))


def apply(f, x):
    return f(f(x))


def softmax_xent(logits):
    m = np.max(logits)
    e = np.exp(logits - m)
    p = e / np.sum(e)
    return -np.log(p[0])


def scalar_cube(x):
    return x * x * x + np.sin(x)


CASES = [
    (sq_sum, (rand(4),), 0),
    (tanh_dot, (rand(3, 2), rand(4, 3)), 0),
    (closure_over_param, (rand(3), rand(3)), 0),
    (closure_over_param, (rand(3), rand(3)), 1),
    (branchy, (np.abs(rand(3)),), 0),
    (branchy, (-np.abs(rand(3)),), 0),
    (while_data, (np.abs(rand(2)) * 0.5 + 0.2,), 0),
    (for_loop, (rand(3), np.int32(3)), 0),
    (power, (np.float64(1.3), np.int32(7)), 0),
    (mlp_loss, (rand(3, 4), rand(4), rand(4, 2), rand(5, 3), rand(5, 2)), 0),
    (mlp_loss, (rand(3, 4), rand(4), rand(4, 2), rand(5, 3), rand(5, 2)), 2),
    (rnn_loss, (rand(3, 3) * 0.5, rand(2, 3), rand(4, 2)), 0),
    (tuple_arg, ((rand(3), rand(3)), rand(3)), 1),
    (higher, (rand(3) * 0.3,), 0),
    (softmax_xent, (rand(5),), 0),
]


@pytest.mark.parametrize("fn,args,k", CASES, ids=[f"{c[0].__name__}-{c[2]}" for c in CASES])
def test_grad_matches_finite_differences(fn, args, k):
    g = grad(fn, argnums=k, jit=False)(*args)
    np.testing.assert_allclose(g, numeric_grad(fn, args, k), rtol=1e-5, atol=1e-7)


def test_value_and_grad_tuple_argnums_compiled():
    args = (rand(3, 4), rand(4), rand(4, 2), rand(5, 3), rand(5, 2))
    vg = value_and_grad(mlp_loss, argnums=(0, 1, 2))
    value, grads = vg(*args)
    np.testing.assert_allclose(value, mlp_loss(*args), rtol=1e-10)
    assert len(grads) == 3
    for k in range(3):
        np.testing.assert_allclose(grads[k], numeric_grad(mlp_loss, args, k), rtol=1e-5,
                                   atol=1e-7)
    # cached per signature: the second call compiles nothing
    assert len(vg.cache) == 1
    vg(*args)
    assert len(vg.cache) == 1
    vg(*(a[:1] if i == 3 else a for i, a in enumerate(args[:4])), args[4][:1])
    assert len(vg.cache) == 2


def test_compiled_grad_equals_interpreted():
    args = (rand(3, 3) * 0.5, rand(2, 3), rand(4, 2))
    a = grad(rnn_loss, jit=True)(*args)
    b = grad(rnn_loss, jit=False)(*args)
    np.testing.assert_allclose(a, b, rtol=1e-10)


@pytest.mark.parametrize("fn,x", [(scalar_cube, 0.7), (power, None)])
def test_grad_of_grad(fn, x):
    if fn is power:
        gg = grad(grad(power, jit=False), jit=False)
        x0 = np.float64(1.1)
        got = gg(x0, np.int32(5))
        assert abs(got - 20 * 1.1 ** 3) < 1e-8
        return
    gg = grad(grad(fn, jit=False), jit=False)
    x0 = np.float64(x)
    g1 = grad(fn, jit=False)
    fd = (g1(x0 + 1e-5) - g1(x0 - 1e-5)) / 2e-5
    np.testing.assert_allclose(gg(x0), fd, rtol=1e-6)
    np.testing.assert_allclose(gg(x0), 6 * x - np.sin(x), rtol=1e-10)


def test_grad_of_grad_through_loop():
    def f(x, n):
        y = x
        for _ in range(n):
            y = np.sin(y) * x
        return y
    gg = grad(grad(f, jit=False), jit=False)
    g1 = grad(f, jit=False)
    x0 = np.float64(0.3)
    fd = (g1(x0 + 1e-5, 2) - g1(x0 - 1e-5, 2)) / 2e-5
    np.testing.assert_allclose(gg(x0, 2), fd, rtol=1e-6)


def test_python_scalars_converted_by_the_rule():
    g = grad(scalar_cube, jit=False)
    got = g(0.5)  # a Python float is float32
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, 3 * 0.25 + np.cos(0.5), rtol=1e-6)


def test_non_scalar_output_is_a_clear_error():
    with pytest.raises(FrontendError, match="must return a float scalar.*Tensor\\[\\(3\\)"):
        grad(lambda x: x * 2.0, jit=False)(rand(3))


def test_grad_wrt_integer_argument_is_an_error():
    with pytest.raises(FrontendError, match="argument 1 .*int32"):
        grad(for_loop, argnums=1, jit=False)(rand(3), np.int32(2))


def test_from_python_of_a_grad_function():
    mod = from_python(grad(sq_sum, jit=False), rand(3))
    assert mod["main"].checked_type is not None


def test_grad_of_a_tuple_argument_is_a_tuple():
    p, x = (rand(2), rand(2)), rand(2)
    ga, gb = grad(tuple_arg, argnums=0, jit=False)(p, x)
    np.testing.assert_allclose(ga, x, rtol=1e-12)
    np.testing.assert_allclose(gb, np.ones(2), rtol=1e-12)


def test_example_training_script_lowers_the_loss():
    import os
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "examples"))
    try:
        import python_frontend
    finally:
        sys.path.pop(0)
    first, final = python_frontend.main(steps=40)
    assert final < 0.5 * first
