"""ONNX's recurrent layers (RNN, GRU, LSTM) unrolled over a static sequence length.

Each step is the ONNX formula written with relay_ir operators: the input projections of all
steps are one ``nn.matmul`` of the whole sequence, the recurrent ones one per step; gates are
sliced from the projected rows in ONNX's order (GRU: z, r, h; LSTM: i, o, f, c). Directions
``forward``, ``reverse`` and ``bidirectional``, ``layout`` 0 and 1, ``clip``, peepholes and
GRU's ``linear_before_reset`` are supported; ``sequence_lens`` only when every length is the
full sequence.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from relay_ir.frontend.onnx import Graph, Node, Value, converter
from relay_ir.frontend.onnx_ops import _scalar, _static_shape

_Act = Callable[[Graph, Value], Value]


def _activation(name: str, alpha: float | None, beta: float | None, n: Node) -> _Act:
    if name == "Sigmoid":
        return lambda g, x: g.call("sigmoid", x)
    if name == "Tanh":
        return lambda g, x: g.call("tanh", x)
    if name == "Relu":
        return lambda g, x: g.call("nn.relu", x)
    if name == "LeakyRelu":
        a = 0.01 if alpha is None else alpha
        return lambda g, x: g.call("nn.leaky_relu", x, alpha=a)
    if name == "HardSigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda g, x: g.call("clip", g.call("add", g.call(
            "multiply", x, _scalar(g, a, x)), _scalar(g, b, x)), a_min=0.0, a_max=1.0)
    if name == "Affine":
        a, b = (1.0 if alpha is None else alpha), (0.0 if beta is None else beta)
        return lambda g, x: g.call("add", g.call("multiply", x, _scalar(g, a, x)),
                                   _scalar(g, b, x))
    if name == "ScaledTanh":
        a, b = (1.0 if alpha is None else alpha), (1.0 if beta is None else beta)
        return lambda g, x: g.call("multiply", g.call("tanh", g.call(
            "multiply", x, _scalar(g, b, x))), _scalar(g, a, x))
    if name == "Softsign":
        return lambda g, x: g.call("divide", x, g.call("add", g.call("abs", x),
                                                       _scalar(g, 1, x)))
    raise n.error(f"activation {name!r} is not supported")


def _activations(n: Node, defaults: list[str], dirs: int) -> list[list[_Act]]:
    names = n.attr("activations")
    names = [a.decode() if isinstance(a, bytes) else a for a in names] if names else \
        defaults * dirs
    alphas = list(n.attr("activation_alpha", []) or [])
    betas = list(n.attr("activation_beta", []) or [])
    k = len(defaults)
    if len(names) != k * dirs:
        raise n.error(f"expected {k * dirs} activations, found {len(names)}")
    acts = [_activation(nm, alphas[i] if i < len(alphas) else None,
                        betas[i] if i < len(betas) else None, n)
            for i, nm in enumerate(names)]
    return [acts[d * k:(d + 1) * k] for d in range(dirs)]


def _dir(g: Graph, v: Value | None, d: int) -> Value | None:
    return None if v is None else g.call("take", v, g.const(np.int64(d)), axis=0)


def _gate(g: Graph, v: Value, k: int, h: int) -> Value:
    """Columns ``k*h .. (k+1)*h`` of the last axis."""
    return g.call("strided_slice", v, begin=[k * h], end=[(k + 1) * h], axes=[v.ndim - 1])


def _recurrent(kind: str, gates: int, defaults: list[str]):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: Node) -> list[Value]:
        x, w, r = n.inputs[0], n.inputs[1], n.inputs[2]
        b, lens, h0 = n.input(3), n.input(4), n.input(5)
        c0 = n.input(6) if kind == "LSTM" else None
        peep = n.input(7) if kind == "LSTM" else None
        layout = n.attr("layout", 0)
        if layout:
            x = g.call("transpose", x, axes=[1, 0, 2])
            h0 = None if h0 is None else g.call("transpose", h0, axes=[1, 0, 2])
            c0 = None if c0 is None else g.call("transpose", c0, axes=[1, 0, 2])
        seq, batch, _ = _static_shape(x, n)
        if lens is not None:
            if lens.value is None or not np.all(np.asarray(lens.value) == seq):
                raise n.error("sequence_lens must be known and equal to the sequence length")
        if kind == "LSTM" and n.attr("input_forget", 0):
            raise n.error("input_forget=1 is not supported")
        hidden = int(n.attr("hidden_size"))
        direction = n.attr("direction", "forward")
        dirs = 2 if direction == "bidirectional" else 1
        acts = _activations(n, defaults, dirs)
        clip = n.attr("clip")
        ys, hs, cs = [], [], []
        for d in range(dirs):
            reverse = direction == "reverse" or d == 1
            wd, rd = _dir(g, w, d), _dir(g, r, d)
            xw = g.call("nn.matmul", x, wd, transpose_b=True)  # (seq, batch, G*hidden)
            bd = _dir(g, b, d)
            wb = rb = None
            if bd is not None:
                wb = _gate_block(g, bd, 0, gates * hidden)
                rb = _gate_block(g, bd, 1, gates * hidden)
                if not (kind == "GRU" and n.attr("linear_before_reset", 0)):
                    xw = g.call("add", xw, g.call("add", wb, rb))
                    wb = rb = None
                else:
                    xw = g.call("add", xw, wb)
            zeros = g.const(np.zeros((batch, hidden), dtype=x.dtype))
            h = zeros if h0 is None else _dir(g, h0, d)
            c = zeros if c0 is None else _dir(g, c0, d)
            pd = _dir(g, peep, d)
            out: list[Value | None] = [None] * seq
            for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
                xt = g.call("take", xw, g.const(np.int64(t)), axis=0)
                step = _STEPS[kind]
                h, c = step(g, n, xt, h, c, rd, rb, pd, acts[d], hidden, clip)
                out[t] = h
            ys.append(g.call("stack", [v for v in out if v is not None], axis=0))
            hs.append(h)
            cs.append(c)
        y = g.call("stack", ys, axis=1)  # (seq, dirs, batch, hidden)
        yh = g.call("stack", hs, axis=0)
        yc = g.call("stack", cs, axis=0)
        if layout:
            y = g.call("transpose", y, axes=[2, 0, 1, 3])
            yh = g.call("transpose", yh, axes=[1, 0, 2])
            yc = g.call("transpose", yc, axes=[1, 0, 2])
        return [y, yh, yc][:n.num_outputs]
    return conv


def _gate_block(g: Graph, bd: Value, k: int, width: int) -> Value:
    return g.call("strided_slice", bd, begin=[k * width], end=[(k + 1) * width], axes=[0])


def _clip(g: Graph, v: Value, clip: float | None) -> Value:
    if clip is None:
        return v
    return g.call("clip", v, a_min=-float(clip), a_max=float(clip))


def _rnn_step(g, n, xt, h, c, rd, rb, pd, acts, hidden, clip):  # type: ignore[no-untyped-def]
    pre = g.call("add", xt, g.call("nn.matmul", h, rd, transpose_b=True))
    return acts[0](g, _clip(g, pre, clip)), c


def _gru_step(g, n, xt, h, c, rd, rb, pd, acts, hidden, clip):  # type: ignore[no-untyped-def]
    f, act_g = acts
    hr = g.call("nn.matmul", h, rd, transpose_b=True)  # (batch, 3*hidden)
    if rb is not None:  # NOTE: linear_before_reset: R's bias stays with the recurrent term
        hr = g.call("add", hr, rb)
    z = f(g, _clip(g, g.call("add", _gate(g, xt, 0, hidden), _gate(g, hr, 0, hidden)), clip))
    r = f(g, _clip(g, g.call("add", _gate(g, xt, 1, hidden), _gate(g, hr, 1, hidden)), clip))
    if n.attr("linear_before_reset", 0):
        rec = g.call("multiply", r, _gate(g, hr, 2, hidden))
    else:
        r_h = g.call("strided_slice", rd, begin=[2 * hidden], end=[3 * hidden], axes=[0])
        rec = g.call("nn.matmul", g.call("multiply", r, h), r_h, transpose_b=True)
    ht = act_g(g, _clip(g, g.call("add", _gate(g, xt, 2, hidden), rec), clip))
    one = _scalar(g, 1, z)
    new_h = g.call("add", g.call("multiply", g.call("subtract", one, z), ht),
                   g.call("multiply", z, h))
    return new_h, c


def _lstm_step(g, n, xt, h, c, rd, rb, pd, acts, hidden, clip):  # type: ignore[no-untyped-def]
    f, act_g, act_h = acts
    pre = g.call("add", xt, g.call("nn.matmul", h, rd, transpose_b=True))  # (batch, 4*hidden)

    def gate(k: int, peep_k: int | None, cell: Value | None) -> Value:
        v = _gate(g, pre, k, hidden)
        if pd is not None and peep_k is not None and cell is not None:
            v = g.call("add", v, g.call("multiply", _gate(g, pd, peep_k, hidden), cell))
        return _clip(g, v, clip)
    i = f(g, gate(0, 0, c))
    fg = f(g, gate(2, 2, c))
    ct = act_g(g, gate(3, None, None))
    new_c = g.call("add", g.call("multiply", fg, c), g.call("multiply", i, ct))
    o = f(g, gate(1, 1, new_c))
    return g.call("multiply", o, act_h(g, new_c)), new_c


_STEPS = {"RNN": _rnn_step, "GRU": _gru_step, "LSTM": _lstm_step}

converter("RNN")(_recurrent("RNN", 1, ["Tanh"]))
converter("GRU")(_recurrent("GRU", 3, ["Sigmoid", "Tanh"]))
converter("LSTM")(_recurrent("LSTM", 4, ["Sigmoid", "Tanh", "Tanh"]))
