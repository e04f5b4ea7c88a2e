"""Convolutional models for the benchmarks, written as ``.rly`` text by Python.

A model is a list of layers (:class:`Net`), from which come: the ``.rly`` program (weights as
parameters of ``@main``, bound with ``runtime.build(params=...)``), random weights (fixed
seed), a numpy-free PyTorch forward (``torch.nn.functional`` with the same weights) and an
ONNX graph (for ONNX Runtime), so every peer computes the same function.

* ResNet-50 v1 (He et al. 2015, as the ONNX model zoo's resnet50-v1: the stride of a
  down-sampling bottleneck is in its first 1x1 convolution), batch 1, 224x224, NCHW.
* MobileNet v2 (Sandler et al. 2018, width 1.0): inverted residuals with depthwise 3x3
  convolutions and ReLU6.
* ResNet-50 v2 (He et al. 2016, pre-activation, as gluon's resnet50_v2): batch norm and relu
  before each convolution (batch norms that remain scale-and-shift after the folding).

Every convolution has no bias and is followed by a batch norm, as in the published models.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

HDR = '#[version = "0.0.5"]\n'


@dataclass
class Conv:
    """One convolution: the shapes the per-layer benchmark needs."""

    name: str
    in_shape: tuple[int, int, int, int]    # N, C, H, W
    out_channels: int
    kernel: int
    stride: int
    padding: int
    groups: int

    @property
    def out_hw(self) -> tuple[int, int]:
        h, w = self.in_shape[2:]
        k, s, p = self.kernel, self.stride, self.padding
        return (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1

    @property
    def flops(self) -> int:
        n, c = self.in_shape[:2]
        oh, ow = self.out_hw
        return 2 * n * self.out_channels * (c // self.groups) * self.kernel ** 2 * oh * ow

    def key(self) -> tuple:
        return (self.in_shape, self.out_channels, self.kernel, self.stride, self.padding,
                self.groups)


@dataclass
class Net:
    """A network under construction: layers as (op, output, inputs, attrs, weights)."""

    name: str
    input_shape: tuple[int, int, int, int]
    seed: int = 0
    layers: list[tuple[str, str, tuple[str, ...], dict[str, Any], tuple[str, ...]]] = \
        field(default_factory=list)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    convs: list[Conv] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.shapes["data"] = self.input_shape
        self.count = 0

    # ------------------------------------------------------------------ construction
    def _out(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def _weight(self, name: str, a: np.ndarray) -> str:
        self.weights[name] = a.astype(np.float32)
        return name

    def conv(self, x: str, name: str, out_c: int, k: int, stride: int = 1,
             groups: int = 1) -> str:
        """conv2d (no bias, no batch norm after: ResNet v2's pre-activation blocks)."""
        n, c, h, w = self.shapes[x]
        pad = k // 2
        wt = self._weight(f"{name}_w", self.rng.standard_normal((out_c, c // groups, k, k))
                          * np.sqrt(2.0 / (c // groups * k * k)))
        conv = Conv(name, (n, c, h, w), out_c, k, stride, pad, groups)
        self.convs.append(conv)
        y = self._out()
        self.layers.append(("conv", y, (x,), {"stride": stride, "pad": pad, "groups": groups},
                            (wt,)))
        self.shapes[y] = (n, out_c, *conv.out_hw)
        return y

    def bn(self, x: str, name: str, act: str | None = "relu") -> str:
        """batch_norm -> relu / nothing (a pre-activation: nothing to fold it into)."""
        c = self.shapes[x][1]
        bn = tuple(self._weight(f"{name}_bn_{k_}", v) for k_, v in (
            ("gamma", self.rng.uniform(0.5, 1.5, c)),
            ("beta", self.rng.uniform(-0.2, 0.2, c)),
            ("mean", self.rng.uniform(-0.2, 0.2, c)),
            ("var", self.rng.uniform(0.5, 1.5, c))))
        z = self._out()
        self.layers.append(("bn", z, (x,), {}, bn))
        self.shapes[z] = self.shapes[x]
        return self.act(z, act) if act else z

    def conv_bn(self, x: str, name: str, out_c: int, k: int, stride: int = 1,
                groups: int = 1, act: str | None = "relu") -> str:
        """conv2d (no bias) -> batch_norm -> relu / relu6 / nothing."""
        return self.bn(self.conv(x, name, out_c, k, stride, groups), name, act)

    def act(self, x: str, kind: str) -> str:
        y = self._out()
        self.layers.append((kind, y, (x,), {}, ()))
        self.shapes[y] = self.shapes[x]
        return y

    def add(self, a: str, b: str) -> str:
        y = self._out()
        self.layers.append(("add", y, (a, b), {}, ()))
        self.shapes[y] = self.shapes[a]
        return y

    def max_pool(self, x: str) -> str:
        n, c, h, w = self.shapes[x]
        y = self._out()
        self.layers.append(("maxpool", y, (x,), {}, ()))
        self.shapes[y] = (n, c, (h + 2 - 3) // 2 + 1, (w + 2 - 3) // 2 + 1)
        return y

    def head(self, x: str, classes: int = 1000) -> str:
        """global average pool -> flatten -> dense + bias."""
        n, c = self.shapes[x][:2]
        y = self._out()
        self.layers.append(("gap", y, (x,), {}, ()))
        self.shapes[y] = (n, c)
        w = self._weight("fc_w", self.rng.standard_normal((classes, c)) / np.sqrt(c))
        b = self._weight("fc_b", self.rng.uniform(-0.1, 0.1, classes))
        z = self._out()
        self.layers.append(("dense", z, (y,), {}, (w, b)))
        self.shapes[z] = (n, classes)
        return z

    # ------------------------------------------------------------------ outputs
    def rly(self) -> str:
        """The ``.rly`` program: ``@main(%data, weights...)``."""
        def ty(shape: tuple[int, ...]) -> str:
            return f"Tensor[({', '.join(map(str, shape))}), float32]"
        params = [f"%data: {ty(self.input_shape)}"] + [
            f"%{k}: {ty(v.shape)}" for k, v in self.weights.items()]
        lines = [HDR + "def @main(" + ",\n          ".join(params) + ") {"]
        ref: dict[str, str] = {"data": "%data"}
        i = 0
        for op, out, ins, at, ws in self.layers:
            a = [ref[x] for x in ins]
            w = [f"%{x}" for x in ws]
            if op == "conv":
                e = (f"nn.conv2d({a[0]}, {w[0]}, strides=[{at['stride']}, {at['stride']}], "
                     f"padding=[{at['pad']}, {at['pad']}], groups={at['groups']})")
            elif op == "bn":
                lines.append(f"  %{i} = nn.batch_norm({a[0]}, {', '.join(w)});")
                ref[out] = f"%{i}.0"
                i += 1
                continue
            elif op == "relu":
                e = f"nn.relu({a[0]})"
            elif op == "relu6":
                e = f"clip({a[0]}, a_min=0f, a_max=6f)"
            elif op == "add":
                e = f"add({a[0]}, {a[1]})"
            elif op == "maxpool":
                e = f"nn.max_pool2d({a[0]}, pool_size=[3, 3], strides=[2, 2], padding=[1, 1])"
            elif op == "gap":
                e = f"nn.batch_flatten(nn.global_avg_pool2d({a[0]}))"
            elif op == "dense":
                e = f"nn.bias_add(nn.dense({a[0]}, {w[0]}), {w[1]})"
            else:
                raise ValueError(op)
            lines.append(f"  %{i} = {e};")
            ref[out] = f"%{i}"
            i += 1
        last = lines.pop()
        lines.append("  " + last.split(" = ", 1)[1].rstrip(";"))
        return "\n".join(lines) + "\n}\n"

    def input(self) -> np.ndarray:
        return np.random.default_rng(self.seed + 1).standard_normal(
            self.input_shape).astype(np.float32)

    def numpy_params(self) -> dict[str, np.ndarray]:
        return dict(self.weights)

    def torch_forward(self) -> Any:
        """``f(x: torch.Tensor) -> torch.Tensor`` with ``torch.nn.functional`` (eager)."""
        import torch
        import torch.nn.functional as F
        w = {k: torch.from_numpy(v.copy()) for k, v in self.weights.items()}

        def f(x: Any) -> Any:
            env = {"data": x}
            for op, out, ins, at, ws in self.layers:
                a = [env[i] for i in ins]
                if op == "conv":
                    y = F.conv2d(a[0], w[ws[0]], stride=at["stride"], padding=at["pad"],
                                 groups=at["groups"])
                elif op == "bn":
                    g, b, m, v = (w[k] for k in ws)
                    y = F.batch_norm(a[0], m, v, g, b, training=False, eps=1e-5)
                elif op == "relu":
                    y = F.relu(a[0])
                elif op == "relu6":
                    y = F.relu6(a[0])
                elif op == "add":
                    y = a[0] + a[1]
                elif op == "maxpool":
                    y = F.max_pool2d(a[0], 3, 2, 1)
                elif op == "gap":
                    y = torch.flatten(F.adaptive_avg_pool2d(a[0], 1), 1)
                else:
                    y = F.linear(a[0], w[ws[0]], w[ws[1]])
                env[out] = y
            return y
        return f

    def onnx_model(self) -> Any:
        """The same network as an ONNX ModelProto (opset 13)."""
        from onnx import TensorProto, helper, numpy_helper
        nodes = []
        inits = [numpy_helper.from_array(v, k) for k, v in self.weights.items()]
        last = "data"
        for op, out, ins, at, ws in self.layers:
            if op == "conv":
                p = at["pad"]
                nodes.append(helper.make_node("Conv", [ins[0], ws[0]], [out],
                                              strides=[at["stride"]] * 2, pads=[p] * 4,
                                              group=at["groups"]))
            elif op == "bn":
                nodes.append(helper.make_node("BatchNormalization", [ins[0], *ws], [out],
                                              epsilon=1e-5))
            elif op == "relu":
                nodes.append(helper.make_node("Relu", [ins[0]], [out]))
            elif op == "relu6":
                lo, hi = out + "_lo", out + "_hi"
                inits += [numpy_helper.from_array(np.array(0, np.float32), lo),
                          numpy_helper.from_array(np.array(6, np.float32), hi)]
                nodes.append(helper.make_node("Clip", [ins[0], lo, hi], [out]))
            elif op == "add":
                nodes.append(helper.make_node("Add", list(ins), [out]))
            elif op == "maxpool":
                nodes.append(helper.make_node("MaxPool", [ins[0]], [out], kernel_shape=[3, 3],
                                              strides=[2, 2], pads=[1, 1, 1, 1]))
            elif op == "gap":
                nodes.append(helper.make_node("GlobalAveragePool", [ins[0]], [out + "_p"]))
                nodes.append(helper.make_node("Flatten", [out + "_p"], [out], axis=1))
            else:
                nodes.append(helper.make_node("Gemm", [ins[0], ws[0], ws[1]], [out], transB=1))
            last = out
        graph = helper.make_graph(
            nodes, self.name,
            [helper.make_tensor_value_info("data", TensorProto.FLOAT, list(self.input_shape))],
            [helper.make_tensor_value_info(last, TensorProto.FLOAT, list(self.shapes[last]))],
            inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def resnet50_v1(batch: int = 1, size: int = 224, seed: int = 0) -> Net:
    """ResNet-50 v1: 53 convolutions, 53 batch norms, 16 residual adds."""
    net = Net("resnet50_v1", (batch, 3, size, size), seed)
    x = net.conv_bn("data", "conv0", 64, 7, stride=2)
    x = net.max_pool(x)
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for b in range(blocks):
            stride = 2 if stage > 0 and b == 0 else 1
            name = f"s{stage + 1}b{b + 1}"
            y = net.conv_bn(x, name + "_c1", width, 1, stride=stride)
            y = net.conv_bn(y, name + "_c2", width, 3)
            y = net.conv_bn(y, name + "_c3", 4 * width, 1, act=None)
            short = x if b > 0 else net.conv_bn(x, name + "_sc", 4 * width, 1, stride=stride,
                                                act=None)
            x = net.act(net.add(y, short), "relu")
    net.head(x)
    return net


def mobilenet_v2(batch: int = 1, size: int = 224, seed: int = 0) -> Net:
    """MobileNet v2 (width 1.0): 52 convolutions (17 depthwise), ReLU6."""
    net = Net("mobilenet_v2", (batch, 3, size, size), seed)
    x = net.conv_bn("data", "conv0", 32, 3, stride=2, act="relu6")
    c = 32
    setting = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
               (6, 160, 3, 2), (6, 320, 1, 1)]
    for i, (t, out_c, n, s) in enumerate(setting):
        for j in range(n):
            stride = s if j == 0 else 1
            name = f"b{i + 1}_{j + 1}"
            hid = c * t
            y = x if t == 1 else net.conv_bn(x, name + "_exp", hid, 1, act="relu6")
            y = net.conv_bn(y, name + "_dw", hid, 3, stride=stride, groups=hid, act="relu6")
            y = net.conv_bn(y, name + "_proj", out_c, 1, act=None)
            x = net.add(y, x) if stride == 1 and c == out_c else y
            c = out_c
    x = net.conv_bn(x, "conv_last", 1280, 1, act="relu6")
    net.head(x)
    return net


def resnet50_v2(batch: int = 1, size: int = 224, seed: int = 0) -> Net:
    """ResNet-50 v2 (He et al. 2016, pre-activation; the stride in the 3x3 convolution as in
    gluon's resnet50_v2): batch norm and relu before each convolution, so 17 of its batch
    norms follow a residual add or the input and cannot fold into a convolution's weights."""
    net = Net("resnet50_v2", (batch, 3, size, size), seed)
    x = net.bn("data", "bn_data", act=None)
    x = net.conv_bn(x, "conv0", 64, 7, stride=2)
    x = net.max_pool(x)
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for b in range(blocks):
            stride = 2 if stage > 0 and b == 0 else 1
            name = f"s{stage + 1}b{b + 1}"
            a = net.bn(x, name + "_bn1")
            short = net.conv(a, name + "_sc", 4 * width, 1, stride=stride) \
                if b == 0 else x
            y = net.conv_bn(a, name + "_c1", width, 1)
            y = net.conv_bn(y, name + "_c2", width, 3, stride=stride)
            y = net.conv(y, name + "_c3", 4 * width, 1)
            x = net.add(y, short)
    x = net.bn(x, "bn_last")
    net.head(x)
    return net


MODELS = {"resnet50_v1": resnet50_v1, "mobilenet_v2": mobilenet_v2, "resnet50_v2": resnet50_v2}


# ----------------------------------------------------------------------------- transformers
@dataclass
class Transformer:
    """One transformer layer, batch 1: a BERT-base encoder layer (post-LN, erf GELU) or a GPT-2
    block (pre-LN, causal mask, tanh GELU). Input ``(seq, hidden)``; weights as ``torch``'s
    ``nn.Linear`` stores them (``(out, in)``, so ``nn.dense`` and ``F.linear`` take them as
    they are); random with a fixed seed (N(0, 0.02) as both models initialize)."""

    name: str
    kind: str            # "bert" | "gpt2"
    seq: int = 128
    hidden: int = 768
    heads: int = 12
    ffn: int = 3072
    seed: int = 0
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    convs: list[Conv] = field(default_factory=list)   # none: the conv tables skip it

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        h, f = self.hidden, self.ffn

        def lin(name: str, out: int, inp: int) -> None:
            self.weights[f"{name}_w"] = (rng.standard_normal((out, inp)) * 0.02).astype(
                np.float32)
            self.weights[f"{name}_b"] = (rng.standard_normal(out) * 0.02).astype(np.float32)

        def ln(name: str) -> None:
            self.weights[f"{name}_g"] = rng.uniform(0.8, 1.2, h).astype(np.float32)
            self.weights[f"{name}_b"] = rng.uniform(-0.1, 0.1, h).astype(np.float32)
        if self.kind == "bert":
            for n in ("q", "k", "v", "o"):
                lin(n, h, h)
            ln("ln1")
        else:
            ln("ln1")
            lin("qkv", 3 * h, h)
            lin("o", h, h)
        lin("fc1", f, h)
        lin("fc2", h, f)
        ln("ln2")
        if self.kind == "gpt2":
            s = self.seq
            self.weights["mask"] = np.where(np.tril(np.ones((s, s), bool)), 0.0,
                                            -1e4).astype(np.float32)

    @property
    def input_shape(self) -> tuple[int, int]:
        return (self.seq, self.hidden)

    @property
    def flops(self) -> int:
        """Multiply-adds x 2 of the matrix products (dense layers and attention)."""
        s, h, f = self.seq, self.hidden, self.ffn
        return 2 * s * (4 * h * h + 2 * h * f) + 2 * 2 * s * s * h

    def input(self) -> np.ndarray:
        return np.random.default_rng(self.seed + 1).standard_normal(
            self.input_shape).astype(np.float32)

    def rly(self) -> str:
        """The ``.rly`` program: ``@main(%data, weights...)``."""
        s, h, nh, f = self.seq, self.hidden, self.heads, self.ffn
        d = h // nh

        def ty(shape: tuple[int, ...]) -> str:
            return f"Tensor[({', '.join(map(str, shape))}), float32]"
        params = [f"%data: {ty(self.input_shape)}"] + [
            f"%{k}: {ty(v.shape)}" for k, v in self.weights.items()]
        eps = "1e-12f" if self.kind == "bert" else "1e-05f"
        scale = f"{1.0 / np.sqrt(d):.6g}f"

        def heads(e: str) -> str:        # (s, h) -> (nh, s, d)
            return f"transpose(reshape({e}, newshape=[{s}, {nh}, {d}]), axes=[1, 0, 2])"

        def linear(x: str, n: str) -> str:
            return f"nn.bias_add(nn.dense({x}, %{n}_w), %{n}_b)"

        def layer_norm(x: str, n: str) -> str:
            return f"nn.layer_norm({x}, %{n}_g, %{n}_b, epsilon={eps})"
        body: list[str] = []
        if self.kind == "bert":
            x = "%data"
            body.append(f"let %q = {heads(linear(x, 'q'))};")
            body.append(f"let %k = {heads(linear(x, 'k'))};")
            body.append(f"let %v = {heads(linear(x, 'v'))};")
            scores = f"multiply(nn.batch_matmul(%q, %k), {scale})"
        else:
            body.append(f"let %h0 = {layer_norm('%data', 'ln1')};")
            body.append(f"let %qkv = split({linear('%h0', 'qkv')}, indices_or_sections=3, "
                        f"axis=1);")
            for i, n in enumerate("qkv"):
                body.append(f"let %{n} = " + heads(f"%qkv.{i}") + ";")
            scores = f"add(multiply(nn.batch_matmul(%q, %k), {scale}), %mask)"
        body.append(f"let %p = nn.softmax({scores}, axis=-1);")
        body.append(f"let %c = reshape(transpose(nn.batch_matmul(%p, %v, transpose_b=False), "
                    f"axes=[1, 0, 2]), newshape=[{s}, {h}]);")
        if self.kind == "bert":
            attn = "add(" + linear("%c", "o") + ", %data)"
            body.append(f"let %h = {layer_norm(attn, 'ln1')};")
            body.append(f"let %f = nn.gelu({linear('%h', 'fc1')});")
            body.append(layer_norm("add(" + linear("%f", "fc2") + ", %h)", "ln2"))
        else:
            body.append(f"let %h = add({linear('%c', 'o')}, %data);")
            fc1 = linear(layer_norm("%h", "ln2"), "fc1")
            body.append(f'let %f = nn.gelu({fc1}, approximate="tanh");')
            body.append(f"add({linear('%f', 'fc2')}, %h)")
        del f
        return (HDR + "def @main(" + ",\n          ".join(params) + ") {\n  "
                + "\n  ".join(body) + "\n}\n")

    def torch_forward(self) -> Any:
        """``f(x: torch.Tensor) -> torch.Tensor``, eager ``torch.nn.functional``."""
        import torch
        import torch.nn.functional as F
        w = {k: torch.from_numpy(v.copy()) for k, v in self.weights.items()}
        s, h, nh = self.seq, self.hidden, self.heads
        d = h // nh
        eps = 1e-12 if self.kind == "bert" else 1e-5

        def heads(t: Any) -> Any:
            return t.view(s, nh, d).transpose(0, 1)

        def attend(q: Any, k: Any, v: Any, mask: Any) -> Any:
            sc = torch.matmul(q, k.transpose(1, 2)) * (1.0 / d ** 0.5)
            if mask is not None:
                sc = sc + mask
            p = F.softmax(sc, dim=-1)
            return torch.matmul(p, v).transpose(0, 1).reshape(s, h)

        def f(x: Any) -> Any:
            if self.kind == "bert":
                c = attend(heads(F.linear(x, w["q_w"], w["q_b"])),
                           heads(F.linear(x, w["k_w"], w["k_b"])),
                           heads(F.linear(x, w["v_w"], w["v_b"])), None)
                a = F.layer_norm(F.linear(c, w["o_w"], w["o_b"]) + x, (h,), w["ln1_g"],
                                 w["ln1_b"], eps)
                g = F.gelu(F.linear(a, w["fc1_w"], w["fc1_b"]))
                return F.layer_norm(F.linear(g, w["fc2_w"], w["fc2_b"]) + a, (h,), w["ln2_g"],
                                    w["ln2_b"], eps)
            h0 = F.layer_norm(x, (h,), w["ln1_g"], w["ln1_b"], eps)
            q, k, v = F.linear(h0, w["qkv_w"], w["qkv_b"]).split(h, dim=1)
            a = F.linear(attend(heads(q), heads(k), heads(v), w["mask"]), w["o_w"],
                         w["o_b"]) + x
            g = F.gelu(F.linear(F.layer_norm(a, (h,), w["ln2_g"], w["ln2_b"], eps),
                                w["fc1_w"], w["fc1_b"]), approximate="tanh")
            return F.linear(g, w["fc2_w"], w["fc2_b"]) + a
        return f

    def onnx_model(self) -> Any:
        """The same layer as an ONNX ModelProto (opset 20: LayerNormalization, Gelu)."""
        from onnx import TensorProto, helper, numpy_helper
        s, h, nh = self.seq, self.hidden, self.heads
        d = h // nh
        nodes: list[Any] = []
        inits = [numpy_helper.from_array(np.ascontiguousarray(v.T) if k.endswith("_w") else v,
                                         k) for k, v in self.weights.items()]
        consts = {"shape_heads": np.array([s, nh, d], np.int64),
                  "shape_flat": np.array([s, h], np.int64),
                  "scale": np.array(1.0 / np.sqrt(d), np.float32),
                  "split3": np.array([h, h, h], np.int64)}
        inits += [numpy_helper.from_array(v, k) for k, v in consts.items()]
        count = [0]

        def node(op: str, ins: list[str], **attrs: Any) -> str:
            count[0] += 1
            out = f"t{count[0]}"
            nodes.append(helper.make_node(op, ins, [out], **attrs))
            return out

        def linear(x: str, n: str) -> str:
            return node("Add", [node("MatMul", [x, f"{n}_w"]), f"{n}_b"])

        def heads(x: str, perm: list[int]) -> str:
            return node("Transpose", [node("Reshape", [x, "shape_heads"])], perm=perm)

        def ln(x: str, n: str) -> str:
            return node("LayerNormalization", [x, f"{n}_g", f"{n}_b"], axis=-1,
                        epsilon=1e-12 if self.kind == "bert" else 1e-5)

        def attend(q: str, k: str, v: str) -> str:
            sc = node("Mul", [node("MatMul", [heads(q, [1, 0, 2]), heads(k, [1, 2, 0])]),
                              "scale"])
            if self.kind == "gpt2":
                sc = node("Add", [sc, "mask"])
            c = node("MatMul", [node("Softmax", [sc], axis=-1), heads(v, [1, 0, 2])])
            return node("Reshape", [node("Transpose", [c], perm=[1, 0, 2]), "shape_flat"])
        if self.kind == "bert":
            c = attend(linear("data", "q"), linear("data", "k"), linear("data", "v"))
            a = ln(node("Add", [linear(c, "o"), "data"]), "ln1")
            g = node("Gelu", [linear(a, "fc1")])
            out = ln(node("Add", [linear(g, "fc2"), a]), "ln2")
        else:
            qkv = linear(ln("data", "ln1"), "qkv")
            nodes.append(helper.make_node("Split", [qkv, "split3"], ["q", "k", "v"], axis=1))
            a = node("Add", [linear(attend("q", "k", "v"), "o"), "data"])
            g = node("Gelu", [linear(ln(a, "ln2"), "fc1")], approximate="tanh")
            out = node("Add", [linear(g, "fc2"), a])
        graph = helper.make_graph(
            nodes, self.name,
            [helper.make_tensor_value_info("data", TensorProto.FLOAT, [s, h])],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, [s, h])], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def bert_layer(seq: int = 128, seed: int = 0) -> Transformer:
    """A BERT-base encoder layer: hidden 768, 12 heads, FFN 3072, erf GELU, post-LN."""
    return Transformer("bert_layer", "bert", seq=seq, seed=seed)


def gpt2_block(seq: int = 128, seed: int = 0) -> Transformer:
    """A GPT-2 (small) block: hidden 768, 12 heads, FFN 3072, causal mask, tanh GELU, pre-LN."""
    return Transformer("gpt2_block", "gpt2", seq=seq, seed=seed)


XFMR_MODELS = {"bert_layer": bert_layer, "gpt2_block": gpt2_block}
