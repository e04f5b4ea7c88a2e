"""W1-W8 of WORKLOADS.md: data, relay_ir implementations and the peers (numpy, JAX, PyTorch).

Every implementation is an :class:`Impl`: ``make()`` does the set-up (parse, differentiate,
optimize, compile; jit/trace for the peers) and returns a zero-argument ``call`` that performs
one timed unit of work and returns its result; ``check(result)`` gives the workload's check
value. ``kind`` is ``relay_ir``, ``peer`` (counted for the ratio) or ``reference`` (shown, not
counted: closed forms without AD). JAX and PyTorch implementations exist only when those
packages import; numpy always does.

The runner is ``benchmarks/run_workloads.py``; W8 (time to first result in a fresh process) is
there too, using :func:`w8_child` here.
"""
from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))

HDR = '#[version = "0.0.5"]\n'
F32 = np.float32


@dataclass
class Impl:
    """One implementation of a workload (see the module docstring)."""

    name: str
    make: Callable[[], Callable[[], Any]]
    check: Callable[[Any], float]
    kind: str = "peer"
    note: str = ""


@dataclass
class Workload:
    """A workload: its key, title, goal (ratio to the best peer) and implementations."""

    key: str
    title: str
    goal: float | None
    impls: Callable[[], list[Impl]]
    unit: str = "ms"
    repeat: int = 10
    definition: str = ""


# NOTE: run_workloads.py --peers narrows this (e.g. to numpy only, as without the bench extra)
ALLOWED_PEERS: set[str] | None = None
# relay_ir's compiled executor for every runtime.build of the workloads: "" (the default one)
# or "relax" (TVM's Relax VM); run_workloads.py --executor
EXECUTOR = ""


def build_kw() -> dict[str, Any]:
    """Keyword arguments of runtime.build for the chosen executor."""
    return {"executor": EXECUTOR} if EXECUTOR else {}


def op_call_sites(mod: Any, entry: str = "main") -> int:
    """Operator call sites in ``entry`` and every global it reaches (a static count)."""
    from relay_ir.expr import Call, GlobalVar, Op
    from relay_ir.traversal import post_order
    seen, todo, count = {entry}, [entry], 0
    while todo:
        for node in post_order(mod[todo.pop()]):
            if isinstance(node, Call) and isinstance(node.op, Op):
                count += 1
            elif isinstance(node, GlobalVar) and node.name_hint not in seen:
                seen.add(node.name_hint)
                todo.append(node.name_hint)
    return count


def blocked_mlp(layers: int, per_block: int, width: int, batch: int, checkpoint: bool, *,
                dtype: str = "float32", act: str = "nn.relu", bias: bool = True,
                loss: str = "mean") -> str:
    """The checkpointing workload: ``layers`` layers ``act(h W (+ b))`` in blocks of
    ``per_block`` (a global ``@block``), loss ``loss(h * h)``; each block call marked
    ``annotation.checkpoint`` or not."""
    T = f"Tensor[({batch}, {width}), {dtype}]"
    W = f"Tensor[({width}, {width}), {dtype}]"
    B = f"Tensor[({width}), {dtype}]"

    def params(idx: range) -> str:
        return ", ".join(f"%w{i}: {W}" + (f", %b{i}: {B}" if bias else "") for i in idx)

    def layer(i: int) -> str:
        h = f"nn.matmul(%h{i}, %w{i})"
        return f"{act}(add({h}, %b{i}))" if bias else f"{act}({h})"

    body = "\n".join(f"  let %h{i + 1} = {layer(i)};" for i in range(per_block))
    text = f"def @block(%h0: {T}, {params(range(per_block))}) -> {T} {{\n{body}\n  " \
           f"%h{per_block}\n}}\n"
    lines = []
    for k in range(layers // per_block):
        args = ", ".join(f"%w{j}" + (f", %b{j}" if bias else "")
                         for j in range(k * per_block, (k + 1) * per_block))
        call = f"@block(%a{k}, {args})"
        lines.append(f"  let %a{k + 1} = "
                     + (f"annotation.checkpoint({call})" if checkpoint else call) + ";")
    n = layers // per_block
    return ('#[version = "0.0.5"]\n' + text
            + f"def @main(%a0: {T}, {params(range(layers))}) -> {dtype} {{\n"
            + "\n".join(lines) + f"\n  {loss}(multiply(%a{n}, %a{n}))\n}}\n")


def peak_memory(mod: Any, args: list[np.ndarray]) -> int:
    """Peak bytes traced by ``tracemalloc`` during one interpreter call (after a warm-up)."""
    import gc
    import tracemalloc

    from relay_ir import runtime
    runtime.evaluate(mod, *args)
    gc.collect()
    tracemalloc.start()
    try:
        runtime.evaluate(mod, *args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def have(pkg: str) -> bool:
    """Whether peer ``pkg`` is installed (found without importing it) and allowed."""
    if ALLOWED_PEERS is not None and pkg in ("jax", "torch") and pkg not in ALLOWED_PEERS:
        return False
    return importlib.util.find_spec(pkg) is not None


def _threads() -> int:
    return len(os.sched_getaffinity(0))


def _torch() -> Any:
    import torch
    torch.set_num_threads(_threads())
    return torch


def _jax() -> Any:
    import jax
    jax.config.update("jax_enable_x64", False)
    return jax


def _sum64(a: Any) -> float:
    return float(np.asarray(a, dtype=np.float64).sum())


def _build(src: str) -> Any:
    import relay_ir as rly
    from relay_ir import runtime
    return runtime.build(rly.parse(src), target="llvm", **build_kw())


# ============================================================================ W1
N1 = 4 * 2 ** 20
W1_SRC = HDR + f"""def @main(%x: Tensor[({N1}), float32]) {{
  let %t = tanh(add(multiply(%x, 1.5f), 0.25f));
  subtract(multiply(%t, sigmoid(%x)), multiply(%x, 0.5f))
}}"""


def w1_data() -> np.ndarray:
    """x: 4M float32 standard normal from default_rng(0)."""
    return np.random.default_rng(0).standard_normal(N1, dtype=F32)


def w1_impls() -> list[Impl]:
    """relay_ir build, numpy, torch eager / compile, jax eager / jit."""
    x = w1_data()
    out = []

    def rly_make() -> Callable[[], Any]:
        exe = _build(W1_SRC)
        return lambda: exe(x)   # x as numpy allocated it (no extra alignment)
    out.append(Impl("relay_ir runtime.build (fused)", rly_make, _sum64, "relay_ir"))

    def np_make() -> Callable[[], Any]:
        a, b, h = F32(1.5), F32(0.25), F32(0.5)
        return lambda: np.tanh(x * a + b) * (F32(1) / (F32(1) + np.exp(-x))) - h * x
    out.append(Impl("numpy", np_make, _sum64))
    if have("torch"):
        def t_make(compiled: bool) -> Callable[[], Callable[[], Any]]:
            def make() -> Callable[[], Any]:
                torch = _torch()
                xt = torch.from_numpy(x)

                def t_fn(v: Any) -> Any:
                    return torch.tanh(v * 1.5 + 0.25) * torch.sigmoid(v) - 0.5 * v
                f = torch.compile(t_fn) if compiled else t_fn

                def call() -> Any:
                    with torch.no_grad():
                        return f(xt)
                return call
            return make
        out.append(Impl("torch eager", t_make(False), lambda r: _sum64(r.numpy())))
        out.append(Impl("torch.compile (inductor)", t_make(True), lambda r: _sum64(r.numpy())))
    if have("jax"):
        def j_make(jit: bool) -> Callable[[], Callable[[], Any]]:
            def make() -> Callable[[], Any]:
                jax = _jax()
                jnp = jax.numpy

                def f(v: Any) -> Any:
                    return jnp.tanh(v * 1.5 + 0.25) * jax.nn.sigmoid(v) - 0.5 * v
                g = jax.jit(f) if jit else f
                xj = jax.device_put(x)
                return lambda: g(xj).block_until_ready()
            return make
        out.append(Impl("jax eager (no jit)", j_make(False), _sum64))
        out.append(Impl("jax.jit", j_make(True), _sum64))
    return out


# ============================================================================ W2 / W7 / W8
MLP_SIZES = [(784, 512), (512, 512), (512, 10)]
W2_LOSS = HDR + """def @main(%x: Tensor[(64, 784), float32], %y: Tensor[(64, 10), float32],
          %w1: Tensor[(784, 512), float32], %b1: Tensor[(512), float32],
          %w2: Tensor[(512, 512), float32], %b2: Tensor[(512), float32],
          %w3: Tensor[(512, 10), float32], %b3: Tensor[(10), float32]) -> float32 {
  let %h1 = nn.relu(add(nn.matmul(%x, %w1), %b1));
  let %h2 = nn.relu(add(nn.matmul(%h1, %w2), %b2));
  let %logp = nn.log_softmax(add(nn.matmul(%h2, %w3), %b3));
  negative(mean(sum(multiply(%logp, %y), axis=[1])))
}"""


def w2_data() -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """x (64, 784), integer labels (64,), [W1, b1, W2, b2, W3, b3] as WORKLOADS.md orders them."""
    rng = np.random.default_rng(0)
    params = []
    for fi, fo in MLP_SIZES:
        bound = 1 / np.sqrt(fi)
        params.append(rng.uniform(-bound, bound, (fi, fo)).astype(F32))
        params.append(rng.uniform(-bound, bound, (fo,)).astype(F32))
    x = rng.standard_normal((64, 784), dtype=F32)
    y = rng.integers(0, 10, 64)
    return x, y, params


class _Stateful:
    """A training loop's call: each call runs one step from the previous step's parameters."""

    def __init__(self, step: Callable[[list[Any]], tuple[Any, list[Any]]], params: list[Any]):
        self.step, self.params, self.first_loss = step, params, None

    def __call__(self) -> Any:
        loss, self.params = self.step(self.params)
        if self.first_loss is None:
            self.first_loss = float(loss)
        return self

    def check(self) -> float:
        return float(self.first_loss)


def _first_loss(r: Any) -> float:
    return r.check()


def w2_relay_step() -> Callable[[], Any]:
    """The compiled W2 step: gradient -> SGD in the program -> optimize -> build."""
    import relay_ir as rly
    from relay_ir import demo
    x, y, params = w2_data()
    exe = demo.compile_step(rly.parse(W2_LOSS), "main", n_data=2, lr=0.01)
    xa, ya = x, np.eye(10, dtype=F32)[y]

    def step(p: list[Any]) -> tuple[Any, list[Any]]:
        res = exe(xa, ya, *p)
        return res[0], list(res[1:])
    return _Stateful(step, list(params))


def w2_args() -> list[np.ndarray]:
    """W2's arguments in ``@main``'s order: x, one-hot labels, then the parameters."""
    x, y, params = w2_data()
    return [x, np.eye(10, dtype=F32)[y], *params]


def w2_numpy_loss(x: np.ndarray, y1h: np.ndarray, *p: np.ndarray) -> Any:
    """W2's loss in numpy (the forward only)."""
    w1, b1, w2, b2, w3, b3 = p
    h2 = np.maximum(np.maximum(x @ w1 + b1, 0) @ w2 + b2, 0)
    z = h2 @ w3 + b3
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -np.mean(np.sum(logp * y1h, axis=1))


def w2_numpy_value_and_grad(x: np.ndarray, y1h: np.ndarray, *p: np.ndarray,
                            inputs: bool = False) -> tuple[Any, list[np.ndarray]]:
    """W2's loss and its hand-written gradients: the six parameters' (with ``inputs``: x's and
    y's first, as ``passes.gradient`` orders them)."""
    w1, b1, w2, b2, w3, b3 = p
    a1 = x @ w1 + b1
    h1 = np.maximum(a1, 0)
    a2 = h1 @ w2 + b2
    h2 = np.maximum(a2, 0)
    z = h2 @ w3 + b3
    zs = z - z.max(axis=1, keepdims=True)
    e = np.exp(zs)
    s = e.sum(axis=1, keepdims=True)
    logp = zs - np.log(s)
    loss = -np.mean(np.sum(logp * y1h, axis=1))
    n = F32(len(x))
    dz = (e / s - y1h) / n          # NOTE: each row of y1h sums to 1 (one-hot)
    da2 = (dz @ w3.T) * (a2 > 0)
    da1 = (da2 @ w2.T) * (a1 > 0)
    grads = [x.T @ da1, da1.sum(0), h1.T @ da2, da2.sum(0), h2.T @ dz, dz.sum(0)]
    if inputs:
        grads = [da1 @ w1.T, -logp / n] + grads
    return loss, grads


def _np_mlp_step(x: np.ndarray, y1h: np.ndarray, p: list[np.ndarray]
                 ) -> tuple[Any, list[np.ndarray]]:
    loss, g = w2_numpy_value_and_grad(x, y1h, *p)
    lr = F32(0.01)
    return loss, [q - lr * d for q, d in zip(p, g)]


def w2_impls() -> list[Impl]:
    """relay_ir compiled step, numpy by hand, torch eager / compile, jax.jit."""
    out = [Impl("relay_ir gradient+optimize+build, SGD in the program", w2_relay_step,
                _first_loss, "relay_ir")]

    def np_make() -> Callable[[], Any]:
        x, y, params = w2_data()
        y1h = np.eye(10, dtype=F32)[y]
        return _Stateful(lambda p: _np_mlp_step(x, y1h, p), params)
    out.append(Impl("numpy (hand-written backward)", np_make, _first_loss))
    if have("torch"):
        def t_make(compiled: bool) -> Callable[[], Callable[[], Any]]:
            def make() -> Callable[[], Any]:
                torch = _torch()
                x, y, params = w2_data()
                layers = []
                for i in range(3):
                    lin = torch.nn.Linear(*MLP_SIZES[i])
                    with torch.no_grad():
                        lin.weight.copy_(torch.from_numpy(params[2 * i].T.copy()))
                        lin.bias.copy_(torch.from_numpy(params[2 * i + 1]))
                    layers += [lin, torch.nn.ReLU()] if i < 2 else [lin]
                model = torch.nn.Sequential(*layers)
                opt = torch.optim.SGD(model.parameters(), lr=0.01)
                xt, yt = torch.from_numpy(x), torch.from_numpy(y)
                lossf = torch.nn.functional.cross_entropy

                def fwd(a: Any, b: Any) -> Any:
                    return lossf(model(a), b)
                f = torch.compile(fwd) if compiled else fwd

                def step(_: Any) -> tuple[Any, Any]:
                    opt.zero_grad(set_to_none=True)
                    loss = f(xt, yt)
                    loss.backward()
                    opt.step()
                    return loss.item(), None
                return _Stateful(step, None)
            return make
        out.append(Impl("torch eager (nn.Sequential + optim.SGD)", t_make(False), _first_loss))
        out.append(Impl("torch.compile fwd+loss, eager SGD", t_make(True), _first_loss))
    if have("jax"):
        out.append(Impl("jax.jit(value_and_grad + SGD)", _jax_w2_make, _first_loss))
    return out


def _jax_w2_loss(jax: Any) -> Callable[..., Any]:
    jnp = jax.numpy

    def loss(p: Any, x: Any, y: Any) -> Any:
        w1, b1, w2, b2, w3, b3 = p
        h = jax.nn.relu(x @ w1 + b1)
        h = jax.nn.relu(h @ w2 + b2)
        logp = jax.nn.log_softmax(h @ w3 + b3)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))
    return loss


def _jax_w2_make() -> Callable[[], Any]:
    jax = _jax()
    x, y, params = w2_data()
    loss = _jax_w2_loss(jax)

    def upd(p: Any, a: Any, b: Any) -> Any:
        v, g = jax.value_and_grad(loss)(p, a, b)
        return v, [q - 0.01 * d for q, d in zip(p, g)]
    f = jax.jit(upd, donate_argnums=0)
    xj, yj = jax.device_put(x), jax.device_put(y)

    def step(p: Any) -> tuple[Any, Any]:
        v, p = f(p, xj, yj)
        return v.block_until_ready(), p
    return _Stateful(step, [jax.device_put(q) for q in params])


# ============================================================================ W3
W3_SRC = HDR + """def @main(%x: Tensor[(1024, 1024), float32], %w: Tensor[(1024, 1024), float32],
          %b: Tensor[(1024), float32]) {
  nn.relu(add(nn.matmul(%x, %w), %b))
}"""


def w3_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """X, W (/32), b from default_rng(0) in that order."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 1024), dtype=F32)
    w = rng.standard_normal((1024, 1024), dtype=F32) / 32
    b = rng.standard_normal(1024, dtype=F32)
    return x, w, b


def w3_impls() -> list[Impl]:
    """relay_ir build, numpy, torch eager / compile, jax.jit."""
    x, w, b = w3_data()
    out = []

    def rly_make() -> Callable[[], Any]:
        exe = _build(W3_SRC)
        args = (x, w, b)
        return lambda: exe(*args)
    out.append(Impl("relay_ir runtime.build (matmul+bias+relu fused)", rly_make, _sum64,
                    "relay_ir"))
    out.append(Impl("numpy (matmul, +b, maximum)",
                    lambda: (lambda: np.maximum(x @ w + b, 0)), _sum64))
    if have("torch"):
        def t_make(compiled: bool) -> Callable[[], Callable[[], Any]]:
            def make() -> Callable[[], Any]:
                torch = _torch()
                xt, wt, bt = (torch.from_numpy(x), torch.from_numpy(w.T.copy()),
                              torch.from_numpy(b))

                def f(a: Any, ww: Any, bb: Any) -> Any:
                    return torch.relu(torch.nn.functional.linear(a, ww, bb))
                g = torch.compile(f) if compiled else f

                def call() -> Any:
                    with torch.no_grad():
                        return g(xt, wt, bt)
                return call
            return make
        out.append(Impl("torch eager relu(F.linear)", t_make(False), lambda r: _sum64(r.numpy())))
        out.append(Impl("torch.compile relu(F.linear)", t_make(True),
                        lambda r: _sum64(r.numpy())))
    if have("jax"):
        def j_make() -> Callable[[], Any]:
            jax = _jax()
            f = jax.jit(lambda a, ww, bb: jax.nn.relu(a @ ww + bb))
            args = [jax.device_put(a) for a in (x, w, b)]
            return lambda: f(*args).block_until_ready()
        out.append(Impl("jax.jit relu(X@W+b)", j_make, _sum64))
    return out


# ============================================================================ W4
T4, H4, V4 = 50, 256, 64


def w4_data(batch: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """[Wx, Wh, b, Wy, by], inputs (T, B), targets (T, B) as WORKLOADS.md orders them."""
    rng = np.random.default_rng(0)
    k = 1 / np.sqrt(H4)
    shapes = [(V4, 4 * H4), (H4, 4 * H4), (4 * H4,), (H4, V4), (V4,)]
    params = [rng.uniform(-k, k, s).astype(F32) for s in shapes]
    tokens = rng.integers(0, V4, (T4 + 1, batch))
    return params, tokens[:-1], tokens[1:]


def w4_source(batch: int) -> str:
    """The W4 loss unrolled over T = 50 steps (one cell per step, logits batched after)."""
    b, h, v = batch, H4, V4
    lines = [HDR + f"def @main(%xs: Tensor[({T4}, {b}, {v}), float32], "
             f"%ys: Tensor[({T4 * b}, {v}), float32], %wx: Tensor[({v}, {4 * h}), float32], "
             f"%wh: Tensor[({h}, {4 * h}), float32], %b: Tensor[({4 * h}), float32], "
             f"%wy: Tensor[({h}, {v}), float32], %by: Tensor[({v}), float32]) -> float32 {{",
             f"  let %h0 = zeros(shape=[{b}, {h}], dtype=\"float32\");",
             "  let %c0 = %h0;",
             "  let %xw = reshape(nn.matmul(reshape(%xs, newshape=[-1, "
             f"{v}]), %wx), newshape=[{T4}, {b}, {4 * h}]);"]
    for t in range(T4):
        lines += [
            f"  let %g{t} = add(add(take(%xw, {t}, axis=0), nn.matmul(%h{t}, %wh)), %b);",
            f"  let %s{t} = split(%g{t}, indices_or_sections=4, axis=1);",
            f"  let %c{t + 1} = add(multiply(sigmoid(%s{t}.1), %c{t}), "
            f"multiply(sigmoid(%s{t}.0), tanh(%s{t}.2)));",
            f"  let %h{t + 1} = multiply(sigmoid(%s{t}.3), tanh(%c{t + 1}));"]
    hs = ", ".join(f"%h{t + 1}" for t in range(T4))
    lines += [f"  let %hs = concatenate(({hs}), axis=0);",
              "  let %logp = nn.log_softmax(add(nn.matmul(%hs, %wy), %by));",
              "  negative(mean(sum(multiply(%logp, %ys), axis=[1])))", "}"]
    return "\n".join(lines)


def w4_impls(batch: int) -> list[Impl]:
    """relay_ir compiled step (unrolled program), torch loop / nn.LSTM, jax lax.scan."""
    params, inputs, targets = w4_data(batch)
    eye = np.eye(V4, dtype=F32)
    out = []

    def rly_make() -> Callable[[], Any]:
        import relay_ir as rly
        from relay_ir import demo
        exe = demo.compile_step(rly.parse(w4_source(batch)), "main", n_data=2, lr=0.1)
        xs, ys = eye[inputs], eye[targets.reshape(-1)]

        def step(p: list[Any]) -> tuple[Any, list[Any]]:
            res = exe(xs, ys, *p)
            return res[0], list(res[1:])
        return _Stateful(step, list(params))
    out.append(Impl(f"relay_ir compiled step, T unrolled, B={batch}", rly_make, _first_loss,
                    "relay_ir"))
    if have("torch"):
        def t_loop() -> Callable[[], Any]:
            torch = _torch()
            ps = [torch.from_numpy(p.copy()).requires_grad_() for p in params]
            xs = torch.from_numpy(eye[inputs])
            ys = torch.from_numpy(targets.reshape(-1))

            def step(_: Any) -> tuple[Any, Any]:
                wx, wh, b, wy, by = ps
                h = c = torch.zeros(batch, H4)
                hs = []
                for t in range(T4):
                    i, f, g, o = (xs[t] @ wx + h @ wh + b).chunk(4, 1)
                    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                    h = torch.sigmoid(o) * torch.tanh(c)
                    hs.append(h)
                loss = torch.nn.functional.cross_entropy(torch.cat(hs) @ wy + by, ys)
                grads = torch.autograd.grad(loss, ps)
                with torch.no_grad():
                    for p, d in zip(ps, grads):
                        p -= 0.1 * d
                return loss.item(), None
            return _Stateful(step, None)
        out.append(Impl(f"torch eager Python-loop cells B={batch}", t_loop, _first_loss))

        def t_lstm() -> Callable[[], Any]:
            torch = _torch()
            lstm = torch.nn.LSTM(V4, H4)
            head = torch.nn.Linear(H4, V4)
            with torch.no_grad():
                lstm.weight_ih_l0.copy_(torch.from_numpy(params[0].T.copy()))
                lstm.weight_hh_l0.copy_(torch.from_numpy(params[1].T.copy()))
                lstm.bias_ih_l0.copy_(torch.from_numpy(params[2]))
                lstm.bias_hh_l0.zero_()
                head.weight.copy_(torch.from_numpy(params[3].T.copy()))
                head.bias.copy_(torch.from_numpy(params[4]))
            opt = torch.optim.SGD(list(lstm.parameters()) + list(head.parameters()), lr=0.1)
            xs = torch.from_numpy(eye[inputs])
            ys = torch.from_numpy(targets.reshape(-1))

            def step(_: Any) -> tuple[Any, Any]:
                opt.zero_grad(set_to_none=True)
                hs, _unused = lstm(xs)
                loss = torch.nn.functional.cross_entropy(head(hs.reshape(-1, H4)), ys)
                loss.backward()
                opt.step()
                return loss.item(), None
            return _Stateful(step, None)
        out.append(Impl(f"torch nn.LSTM (reference) B={batch}", t_lstm, _first_loss))
    if have("jax"):
        def j_make() -> Callable[[], Any]:
            jax = _jax()
            jnp = jax.numpy

            def loss(p: Any, xs: Any, ys: Any) -> Any:
                wx, wh, b, wy, by = p

                def cell(carry: Any, x: Any) -> Any:
                    h, c = carry
                    i, f, g, o = jnp.split(x @ wx + h @ wh + b, 4, axis=1)
                    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                    h = jax.nn.sigmoid(o) * jnp.tanh(c)
                    return (h, c), h
                z = jnp.zeros((batch, H4), jnp.float32)
                _, hs = jax.lax.scan(cell, (z, z), xs)
                logp = jax.nn.log_softmax(hs.reshape(-1, H4) @ wy + by)
                return -jnp.mean(jnp.take_along_axis(logp, ys[:, None], axis=1))

            def upd(p: Any, xs: Any, ys: Any) -> Any:
                v, g = jax.value_and_grad(loss)(p, xs, ys)
                return v, [q - 0.1 * d for q, d in zip(p, g)]
            f = jax.jit(upd, donate_argnums=0)
            xs, ys = jax.device_put(eye[inputs]), jax.device_put(targets.reshape(-1))

            def step(p: Any) -> tuple[Any, Any]:
                v, p = f(p, xs, ys)
                return v.block_until_ready(), p
            return _Stateful(step, [jax.device_put(q) for q in params])
        out.append(Impl(f"jax.jit lax.scan B={batch}", j_make, _first_loss))
    return out


# ============================================================================ W5
H5, NTREES = 128, 64


def w5_trees() -> list[tuple[Any, int]]:
    """64 random trees as nested tuples: ``("leaf", token)`` / ``("node", l, r)``; labels."""
    trng = np.random.default_rng(1)

    def build(n: int) -> Any:
        # NOTE: recursion depth is the tree depth (<= 32 leaves); the order of draws is
        # WORKLOADS.md's: left subtree first
        if n == 1:
            return ("leaf", int(trng.integers(0, 100)))
        k = int(trng.integers(1, n))
        left = build(k)
        return ("node", left, build(n - k))
    out = []
    for _ in range(NTREES):
        n = int(trng.integers(8, 33))
        tree = build(n)
        out.append((tree, int(trng.integers(0, 5))))
    return out


def w5_params() -> list[np.ndarray]:
    """E, Wl, bl, U, bU, Wo, bo from default_rng(0), uniform(-0.1, 0.1), float32."""
    rng = np.random.default_rng(0)
    h = d = H5
    shapes = [(100, d), (d, 3 * h), (3 * h,), (2 * h, 5 * h), (5 * h,), (h, 5), (5,)]
    return [rng.uniform(-0.1, 0.1, s).astype(F32) for s in shapes]


def w5_source() -> str:
    """The W5 TreeLSTM in relay_ir (float32, H = D = 128, 100 tokens, 5 classes)."""
    h, t1 = H5, f"Tensor[(1, {H5}), float32]"
    st = f"({t1}, {t1})"
    return HDR + f"""type BinTree {{
  Leaf(int32),
  Node(BinTree, BinTree),
}}

def @embed(%t: BinTree, %e: Tensor[(100, {h}), float32], %wl: Tensor[({h}, {3 * h}), float32],
           %bl: Tensor[({3 * h}), float32], %u: Tensor[({2 * h}, {5 * h}), float32],
           %bu: Tensor[({5 * h}), float32]) -> {st} {{
  match (%t) {{
    Leaf(%tok) => {{
      let %x = reshape(take(%e, %tok, axis=0), newshape=[1, {h}]);
      let %s = split(add(nn.matmul(%x, %wl), %bl), indices_or_sections=3, axis=1);
      let %c = multiply(sigmoid(%s.0), tanh(%s.2));
      (multiply(sigmoid(%s.1), tanh(%c)), %c)
    }},
    Node(%a, %b) => {{
      let %l = @embed(%a, %e, %wl, %bl, %u, %bu);
      let %r = @embed(%b, %e, %wl, %bl, %u, %bu);
      let %s = split(add(nn.matmul(concatenate((%l.0, %r.0), axis=1), %u), %bu),
                     indices_or_sections=5, axis=1);
      let %c = add(multiply(sigmoid(%s.0), tanh(%s.4)),
                   add(multiply(sigmoid(%s.1), %l.1), multiply(sigmoid(%s.2), %r.1)));
      (multiply(sigmoid(%s.3), tanh(%c)), %c)
    }},
  }}
}}

def @main(%t: BinTree, %label: Tensor[(5), float32], %e: Tensor[(100, {h}), float32],
          %wl: Tensor[({h}, {3 * h}), float32], %bl: Tensor[({3 * h}), float32],
          %u: Tensor[({2 * h}, {5 * h}), float32], %bu: Tensor[({5 * h}), float32],
          %wo: Tensor[({h}, 5), float32], %bo: Tensor[(5), float32]) -> float32 {{
  let %root = @embed(%t, %e, %wl, %bl, %u, %bu);
  negative(sum(multiply(nn.log_softmax(add(nn.matmul(%root.0, %wo), %bo)), %label)))
}}
"""


def _to_adt(mod: Any, tree: Any) -> Any:
    """A nested-tuple tree as a relay_ir ``BinTree`` value (explicit stack, no recursion)."""
    from relay_ir import runtime
    leaf, node = mod.get_constructor("Leaf"), mod.get_constructor("Node")
    todo: list[tuple[bool, Any]] = [(False, tree)]
    vals: list[Any] = []
    while todo:
        done, t = todo.pop()
        if t[0] == "leaf":
            vals.append(runtime.ADTValue(leaf, (np.array(t[1], "int32"),)))
        elif done:
            r, left = vals.pop(), vals.pop()
            vals.append(runtime.ADTValue(node, (left, r)))
        else:
            todo += [(True, t), (False, t[2]), (False, t[1])]
    return vals[0]


class _PerTree:
    """One pass over the 64 trees; check = sum of the losses; time reported per tree."""

    def __init__(self, one: Callable[[Any, int], float], trees: list[tuple[Any, int]]):
        self.one, self.trees, self.total = one, trees, 0.0

    def __call__(self) -> Any:
        self.total = sum(self.one(t, y) for t, y in self.trees)
        return self

    def check(self) -> float:
        return float(self.total)


def w5_impls() -> list[Impl]:
    """relay_ir (compiled when runtime.build takes ADTs, else the interpreter), torch, jax."""
    trees, params = w5_trees(), w5_params()
    eye5 = np.eye(5, dtype=F32)
    out = []

    def rly_make() -> Callable[[], Any]:
        import relay_ir as rly
        from relay_ir import passes, runtime
        mod = rly.parse(w5_source())
        g = passes.optimize(passes.gradient(mod, entry="main"))
        adts = [(_to_adt(mod, t), y) for t, y in trees]
        try:
            exe = runtime.build(g, target="llvm", **build_kw())
            run = exe
        except rly.DiagnosticError:
            def run(*a: Any) -> Any:
                return runtime.evaluate(g, *a)

        def one(t: Any, y: int) -> float:
            v, _grads = run(t, eye5[y], *params)
            return float(v)
        return _PerTree(one, adts)
    out.append(Impl("relay_ir gradient + optimize, compiled (Relax VM)",
                    rly_make, lambda r: r.check(), "relay_ir"))
    if have("torch"):
        def t_make() -> Callable[[], Any]:
            torch = _torch()
            ps = [torch.from_numpy(p.copy()).requires_grad_() for p in params]
            e, wl, bl, u, bu, wo, bo = ps

            def embed(t: Any) -> Any:
                if t[0] == "leaf":
                    i, o, uu = (e[t[1]] @ wl + bl).chunk(3)
                    c = torch.sigmoid(i) * torch.tanh(uu)
                    return torch.sigmoid(o) * torch.tanh(c), c
                hl, cl = embed(t[1])
                hr, cr = embed(t[2])
                i, fl, fr, o, uu = (torch.cat([hl, hr]) @ u + bu).chunk(5)
                c = (torch.sigmoid(i) * torch.tanh(uu) + torch.sigmoid(fl) * cl
                     + torch.sigmoid(fr) * cr)
                return torch.sigmoid(o) * torch.tanh(c), c

            def one(t: Any, y: int) -> float:
                h, _c = embed(t)
                loss = -torch.log_softmax(h @ wo + bo, 0)[y]
                torch.autograd.grad(loss, ps)
                return loss.item()
            return _PerTree(one, trees)
        out.append(Impl("torch eager recursion", t_make, lambda r: r.check()))
    if have("jax"):
        def j_make() -> Callable[[], Any]:
            jax = _jax()
            jnp = jax.numpy

            @jax.jit
            def leaf(e: Any, wl: Any, bl: Any, tok: Any) -> Any:
                i, o, uu = jnp.split(e[tok] @ wl + bl, 3)
                c = jax.nn.sigmoid(i) * jnp.tanh(uu)
                return jax.nn.sigmoid(o) * jnp.tanh(c), c

            @jax.jit
            def node(u: Any, bu: Any, hl: Any, cl: Any, hr: Any, cr: Any) -> Any:
                i, fl, fr, o, uu = jnp.split(jnp.concatenate([hl, hr]) @ u + bu, 5)
                c = (jax.nn.sigmoid(i) * jnp.tanh(uu) + jax.nn.sigmoid(fl) * cl
                     + jax.nn.sigmoid(fr) * cr)
                return jax.nn.sigmoid(o) * jnp.tanh(c), c

            def loss(p: Any, t: Any, y: int) -> Any:
                e, wl, bl, u, bu, wo, bo = p

                def embed(t: Any) -> Any:
                    if t[0] == "leaf":
                        return leaf(e, wl, bl, t[1])
                    hl, cl = embed(t[1])
                    hr, cr = embed(t[2])
                    return node(u, bu, hl, cl, hr, cr)
                h, _c = embed(t)
                return -jax.nn.log_softmax(h @ wo + bo)[y]
            vg = jax.value_and_grad(loss)
            pj = [jax.device_put(p) for p in params]

            def one(t: Any, y: int) -> float:
                v, g = vg(pj, t, y)
                jax.block_until_ready(g)
                return float(v)
            return _PerTree(one, trees)
        out.append(Impl("jax value_and_grad, jit-ed cells (no whole-tree jit)", j_make,
                        lambda r: r.check(), note="jit per tree shape costs ~3 s per shape"))
    return out


# ============================================================================ W6
def w6_source(bound: str = "1000f") -> str:
    """W6's loop with the trip count ``bound``: a constant (``"1000f"``), or ``"%n"``, a
    parameter of ``@main`` passed along the loop (known only at run time: nothing unrolls it)."""
    n_param, n_arg = (", %n: float32", ", %n") if bound == "%n" else ("", "")
    return HDR + f"""def @loop(%x: float32{n_param}, %i: float32, %acc: float32) -> float32 {{
  if (%i >= {bound}) {{
    %acc
  }} else {{
    @loop(%x{n_arg}, %i + 1f, %acc + sin(%x * %i) * 0.001f)
  }}
}}

def @main(%x: float32{n_param}) -> float32 {{
  @loop(%x{n_arg}, 0f, 0f)
}}"""


W6_SRC = w6_source()


def w6_impls(compiled: bool = True) -> list[Impl]:
    """relay_ir gradient (compiled, or interpreted with ``compiled=False``), torch 0-d tensors,
    jax.jit(grad); closed forms."""
    x = F32(0.5)
    out = []

    def rly_make() -> Callable[[], Any]:
        import relay_ir as rly
        from relay_ir import passes, runtime
        g = passes.optimize(passes.gradient(rly.parse(W6_SRC), entry="main"))
        try:
            if not compiled:
                raise rly.DiagnosticError("interpreted on request")
            run = runtime.build(g, target="llvm", **build_kw())
        except rly.DiagnosticError:
            def run(*a: Any) -> Any:
                return runtime.evaluate(g, *a)
        xa = np.array(x)
        return lambda: run(xa)[1][0]
    out.append(Impl("relay_ir gradient of a recursive loop, compiled (Relax VM)",
                    rly_make, float, "relay_ir"))

    def rly_loop_make() -> Callable[[], Any]:
        # NOTE: the trip count an input (1000 at run time): nothing static unrolls the loop,
        # so this is the executor's cost per step (the tape rule's forward and backward loops)
        import relay_ir as rly
        from relay_ir import passes, runtime
        g = passes.optimize(passes.gradient(rly.parse(w6_source("%n")), entry="main"))
        run = runtime.build(g, target="llvm", **build_kw())
        xa, na = np.array(x), np.array(F32(1000))
        return lambda: run(xa, na)[1][0]
    out.append(Impl("relay_ir, the trip count an input (stays a loop)", rly_loop_make, float,
                    "reference"))
    if have("torch"):
        def t_make() -> Callable[[], Any]:
            torch = _torch()
            xt = torch.tensor(0.5, requires_grad=True)

            def call() -> Any:
                acc = torch.tensor(0.0)
                for i in range(1000):
                    acc = acc + torch.sin(xt * i) * 0.001
                return torch.autograd.grad(acc, xt)[0].item()
            return call
        out.append(Impl("torch eager 0-d tensors", t_make, float))
    if have("jax"):
        def j_make() -> Callable[[], Any]:
            jax = _jax()
            jnp = jax.numpy

            def f(v: Any) -> Any:
                acc = 0.0
                for i in range(1000):
                    acc = acc + jnp.sin(v * i) * 0.001
                return acc
            g = jax.jit(jax.grad(f))
            xj = jnp.float32(0.5)
            return lambda: g(xj).block_until_ready()
        out.append(Impl("jax.jit(jax.grad)", j_make, float))
    i = np.arange(1000, dtype=F32)
    out.append(Impl("numpy closed form (no AD)",
                    lambda: (lambda: np.sum(F32(0.001) * i * np.cos(x * i))), float, "reference"))

    def py() -> Callable[[], Any]:
        import math
        return lambda: sum(0.001 * k * math.cos(0.5 * k) for k in range(1000))
    out.append(Impl("pure Python closed form (no AD)", py, float, "reference"))
    return out


# ============================================================================ W7
def w7_v() -> np.ndarray:
    """v ~ default_rng(2) standard normal (784, 512) float32."""
    return np.random.default_rng(2).standard_normal((784, 512), dtype=F32)


def w7_relay_make() -> Callable[[], Any]:
    """H v by reverse over reverse: gradient of <dL/dW1, v> wrt W1, optimized and built."""
    exe, args = w7_relay_exe()
    return lambda: exe(*args)[1]


def w7_relay_exe() -> tuple[Any, list[np.ndarray]]:
    """The compiled H v program of :func:`w7_relay_make` and its arguments."""
    import relay_ir as rly
    from relay_ir import demo, passes, runtime
    from relay_ir.expr import Call, Function, Let, TupleGetItem, Var
    from relay_ir.module import IRModule
    from relay_ir.op._rules import make_call
    mod = rly.parse(W2_LOSS)
    g = passes.gradient(mod, entry="main")
    ps = [Var(p.name_hint, p.type_annotation) for p in g["main"].params]
    v, r = Var("v", ps[2].type_annotation), Var("r")
    body = Let(r, Call(g.get_global_var("main"), tuple(ps)),
               make_call("sum", make_call("multiply", TupleGetItem(TupleGetItem(r, 1), 2), v)))
    gv = passes.InferType()(g.with_function("gv", Function((*ps, v), body)))
    step = demo.first_order(demo.sgd_step_module(gv, "gv", wrt=[2]), "train_step")
    exe = runtime.build(IRModule({"main": step["train_step"]}), target="llvm",
                        **build_kw())
    x, y, params = w2_data()
    return exe, [x, np.eye(10, dtype=F32)[y], *params, w7_v()]


def w7_relay_fwd_exe() -> tuple[Any, list[np.ndarray]]:
    """H v forward over reverse (as jax.jvp(jax.grad)): ``passes.jvp`` of the optimized
    gradient wrt W1, tangent v for W1 and zeros for the other inputs, optimized and built."""
    import relay_ir as rly
    from relay_ir import passes, runtime
    from relay_ir.expr import Call, Function, TupleGetItem, Var
    from relay_ir.module import IRModule
    from relay_ir.op._rules import make_call
    mod = rly.parse(W2_LOSS)
    fwd_rev = passes.jvp(passes.optimize(passes.gradient(mod, wrt=("w1",))), "main")
    ps = [Var(p.name_hint, p.type_annotation) for p in mod["main"].params]
    v = Var("v", ps[2].type_annotation)
    # NOTE: "no tangent" for the other inputs: symbolic zeros, which optimization may drop as
    # absent terms (a plain zeros tensor keeps IEEE semantics: inf * 0 is nan)
    tangents = [v if i == 2 else make_call("zeros", shape=list(p.type_annotation.shape),
                                           dtype="float32", symbolic=True)
                for i, p in enumerate(ps)]
    # @main(params, tangents) = ((loss, (dW1,)), (d loss, (H v,)))
    out = Call(fwd_rev.get_global_var("main"), tuple(ps + tangents))
    body = TupleGetItem(TupleGetItem(TupleGetItem(out, 1), 1), 0)
    hvp = passes.optimize(fwd_rev.with_function("hvp", Function((*ps, v), body)), entry="hvp")
    exe = runtime.build(IRModule({"main": hvp["hvp"]}), target="llvm", **build_kw())
    x, y, params = w2_data()
    return exe, [x, np.eye(10, dtype=F32)[y], *params, w7_v()]


def _fro(a: Any) -> float:
    return float(np.linalg.norm(np.asarray(a, dtype=np.float64)))


def w7_impls() -> list[Impl]:
    """relay_ir compiled HVP, torch vhp / double backward, jax.jit(jvp(grad))."""
    def fwd_make() -> Callable[[], Any]:
        exe, args = w7_relay_fwd_exe()
        return lambda: exe(*args)
    out = [Impl("relay_ir jvp of grad (fwd-over-rev), optimize + build", fwd_make, _fro,
                "relay_ir"),
           Impl("relay_ir grad of grad, optimize + build", w7_relay_make, _fro, "relay_ir")]
    x, y, params = w2_data()
    v = w7_v()
    if have("torch"):
        def t_make(kind: str) -> Callable[[], Callable[[], Any]]:
            def make() -> Callable[[], Any]:
                torch = _torch()
                xt, yt = torch.from_numpy(x), torch.from_numpy(y)
                w1 = torch.from_numpy(params[0].copy())
                rest = [torch.from_numpy(p) for p in params[1:]]
                vt = torch.from_numpy(v)

                def loss(a: Any) -> Any:
                    b1, w2, b2, w3, b3 = rest
                    h = torch.relu(xt @ a + b1)
                    h = torch.relu(h @ w2 + b2)
                    return torch.nn.functional.cross_entropy(h @ w3 + b3, yt)
                if kind == "vhp":
                    return lambda: torch.autograd.functional.vhp(loss, w1, vt)[1].numpy()

                def dbl() -> Any:
                    a = w1.clone().requires_grad_()
                    (gr,) = torch.autograd.grad(loss(a), a, create_graph=True)
                    (hv,) = torch.autograd.grad((gr * vt).sum(), a)
                    return hv.numpy()
                return dbl
            return make
        out.append(Impl("torch autograd.functional.vhp", t_make("vhp"), _fro))
        out.append(Impl("torch double backward (autograd.grad x2)", t_make("dbl"), _fro))
    if have("jax"):
        def j_make() -> Callable[[], Any]:
            jax = _jax()
            loss = _jax_w2_loss(jax)
            rest = [jax.device_put(p) for p in params[1:]]
            xj, yj = jax.device_put(x), jax.device_put(y)

            def lw(w1: Any) -> Any:
                return loss([w1, *rest], xj, yj)
            hvp = jax.jit(lambda w1, vv: jax.jvp(jax.grad(lw), (w1,), (vv,))[1])
            w1, vj = jax.device_put(params[0]), jax.device_put(v)
            return lambda: hvp(w1, vj).block_until_ready()
        out.append(Impl("jax.jit(jvp(grad)) (fwd-over-rev)", j_make, _fro))
    return out


# ============================================================================ table
def workloads() -> list[Workload]:
    """W1-W7 (W8 is a process-level measurement in run_workloads.py)."""
    return [
        Workload("W1", "elementwise fusion: tanh(x*1.5+0.25)*sigmoid(x) - 0.5*x, 4M float32",
                 0.5, w1_impls, repeat=10),
        Workload("W2", "MLP 784-512-512-10 train step, batch 64 (fwd + bwd + SGD)", 1.0,
                 w2_impls, repeat=20),
        Workload("W3", "dense+bias+relu 1024x1024x1024 float32", 1.0, w3_impls, repeat=10),
        Workload("W4a", "LSTM char-RNN train step T=50 H=256 V=64, B=1", 1.0,
                 lambda: w4_impls(1), repeat=5),
        Workload("W4b", "LSTM char-RNN train step T=50 H=256 V=64, B=32", 1.0,
                 lambda: w4_impls(32), repeat=3),
        Workload("W5", "TreeLSTM H=128, 64 random trees of 8-32 leaves, fwd+bwd per tree "
                 "(time per tree)", 0.7, w5_impls, repeat=1),
        Workload("W6", "grad of sum_{i<1000} sin(x*i)*0.001 (scalar loop), x = 0.5", 0.5,
                 w6_impls, unit="us", repeat=5),
        Workload("W7", "Hessian-vector product of the W2 loss wrt W1 (784x512)", 1.0, w7_impls,
                 repeat=10),
    ]


# ============================================================================ W8
def w8_child(variant: str) -> dict[str, float]:
    """In a fresh process: import, build the W2 step, time the first and second step."""
    t0 = time.perf_counter()
    if variant.startswith("relay_ir"):
        import tvm  # noqa: F401  (the framework import, as `import jax` / `import torch`)

        import relay_ir  # noqa: F401
        from relay_ir import demo, runtime  # noqa: F401
        from relay_ir.runtime import executor  # noqa: F401
        call = w2_relay_step
    elif variant.startswith("jax"):
        import jax
        if variant == "jax-warm":
            jax.config.update("jax_compilation_cache_dir", os.environ["W8_CACHE"])
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        call = _jax_w2_make
    else:
        import torch  # noqa: F401
        call = dict((i.name, i.make) for i in w2_impls())[
            "torch.compile fwd+loss, eager SGD" if variant.startswith("torch-compile")
            else "torch eager (nn.Sequential + optim.SGD)"]
    setup = time.perf_counter() - t0
    t1 = time.perf_counter()
    step = call()
    step()
    first = time.perf_counter() - t1
    t2 = time.perf_counter()
    step()
    second = time.perf_counter() - t2
    return {"setup_s": setup, "first_ms": first * 1e3, "second_ms": second * 1e3,
            "check": step.check()}


# ============================================================================ profile
def relay_step(key: str) -> tuple[Any, list[np.ndarray]]:
    """The compiled relay_ir executable of W2, W4a, W4b or W7 and its arguments."""
    import relay_ir as rly
    from relay_ir import demo
    if key == "W2":
        x, y, params = w2_data()
        exe = demo.compile_step(rly.parse(W2_LOSS), "main", n_data=2, lr=0.01)
        return exe, [x, np.eye(10, dtype=F32)[y], *params]
    if key in ("W4a", "W4b"):
        batch = 1 if key == "W4a" else 32
        params, inputs, targets = w4_data(batch)
        eye = np.eye(V4, dtype=F32)
        exe = demo.compile_step(rly.parse(w4_source(batch)), "main", n_data=2, lr=0.1)
        return exe, [eye[inputs], eye[targets.reshape(-1)], *params]
    if key == "W7":
        return w7_relay_exe()
    raise ValueError(f"no compiled relay_ir step to profile for {key} (W2, W4a, W4b, W7)")


def profile_kernels(exe: Any, args: list[np.ndarray], calls: int = 10
                    ) -> list[tuple[str, int, float]]:
    """Per fused group: (label, kernel instructions in the program, ms per call x those),
    slowest first.

    NOTE: the Relax VM calls kernels from C++, so they cannot be wrapped: each static kernel
    of the executable (runtime internals: ``exe._backend.kernels``) is timed on its own with
    random inputs of its parameter types, ``calls`` times; its count is the number of
    ``kernel`` instructions naming its group (exact for straight-line programs). Symbolic
    kernels and host groups are not timed. ``args`` is unused (kept for the CLI).
    """
    import tvm
    from relay_ir.runtime.lower_tvm import flatten_type
    backend = exe._backend
    uses: dict[int, int] = {}
    for cf in backend.cp.functions:
        for ins in cf.code:
            if ins[0] == "kernel":
                uses[ins[2]] = uses.get(ins[2], 0) + 1
            elif ins[0] == "kernel_ret":
                uses[ins[1]] = uses.get(ins[1], 0) + 1
    rng = np.random.default_rng(0)
    rows = []
    for k, kern in backend.kernels.items():
        if kern.dyn is not None or kern.module is None:
            continue
        ins = []
        for t in kern.param_types:
            for leaf in flatten_type(t):
                shape = tuple(int(d) for d in leaf.concrete_shape)
                a = rng.standard_normal(shape) if "float" in leaf.dtype else np.ones(shape)
                ins.append(tvm.runtime.tensor(np.asarray(a, dtype=leaf.dtype)))
        ins += [tvm.runtime.tensor(c) for c in kern.consts]
        ins += [tvm.runtime.empty(shape, dtype) for shape, dtype in kern.outs]
        f = kern.module[kern.symbol]
        f(*ins)
        t0 = time.perf_counter()
        for _ in range(calls):
            f(*ins)
        n = uses.get(k, 1)
        rows.append((kern.label[:100], n, (time.perf_counter() - t0) / calls * 1e3 * n))
    return sorted(rows, key=lambda r: -r[2])
