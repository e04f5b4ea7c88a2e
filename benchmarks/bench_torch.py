"""Models imported from PyTorch (``from_pytorch``) against torch eager and ONNX Runtime.

Models: ResNet-18 (``tests/torch_models.py``' ResNetLike at width 64: torchvision's layer
shapes), the MobileNetV3-small-shaped CNN of the same file, both batch 1 at 224x224, and
``nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True)`` on (1, 128, 256), eval mode,
random weights (seed 0). relay_ir: ``from_pytorch`` then ``runtime.build(mod, "llvm",
params=params)``. Peers: torch eager under ``torch.no_grad()`` and ONNX Runtime on the model
exported by ``torch.onnx.export(dynamo=False)`` (n/a where that exporter fails). Calls are
interleaved, one per peer per round after a warm-up; the table gives median and best ms and
the largest differences of relay_ir's and ORT's outputs from torch's.

``--blocks``: instead, the MobileNet's stages (stem, each block, last convolution) each imported
and compiled alone, relay_ir against ORT on the same stage, median of ``--rounds``.

Run: ``.venv/bin/python benchmarks/bench_torch.py [--threads 2] [--rounds 10] [--only resnet18]
[--blocks]``
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import time
from typing import Any, Callable


def _threads(argv: list[str]) -> int:
    n = 2
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            n = int(argv[i + 1])
        elif a.startswith("--threads="):
            n = int(a.split("=", 1)[1])
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    return n


THREADS = _threads(sys.argv[1:] if __name__ == "__main__" else [])

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from torch_models import MobileNetV3Like, ResNetLike, randomize_batch_norms  # noqa: E402

from relay_ir import runtime  # noqa: E402
from relay_ir.frontend import from_pytorch  # noqa: E402


def _models() -> dict[str, Callable[[], tuple[Any, torch.Tensor]]]:
    def resnet18() -> tuple[Any, torch.Tensor]:
        torch.manual_seed(0)
        return randomize_batch_norms(ResNetLike(width=64, classes=1000)).eval(), \
            torch.randn(1, 3, 224, 224)

    def mobilenet_v3_like() -> tuple[Any, torch.Tensor]:
        torch.manual_seed(0)
        return randomize_batch_norms(MobileNetV3Like(classes=1000)).eval(), \
            torch.randn(1, 3, 224, 224)

    def encoder_layer() -> tuple[Any, torch.Tensor]:
        torch.manual_seed(0)
        return torch.nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True).eval(), \
            torch.randn(1, 128, 256)

    return {"resnet18": resnet18, "mobilenet_v3_like": mobilenet_v3_like,
            "transformer_encoder_layer": encoder_layer}


def _ort(model: Any, x: torch.Tensor) -> Callable[[], Any] | str:
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime not installed"
    f = io.BytesIO()
    try:
        torch.onnx.export(model, (x,), f, dynamo=False, input_names=["x"])
    except Exception as e:  # NOTE: the legacy exporter fails on some torch modules
        return f"torch.onnx.export failed ({type(e).__name__})"
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(f.getvalue(), opts, providers=["CPUExecutionProvider"])
    xn = x.numpy()
    return lambda: sess.run(None, {"x": xn})[0]


def _blocks(rounds: int) -> None:
    model, x = _models()["mobilenet_v3_like"]()
    stages = [("stem", model.stem)] + [(f"block{i}", b) for i, b in enumerate(model.blocks)] \
        + [("last", model.last)]
    print("| stage | input | relay_ir median ms | ORT median ms |")
    print("|---|---|---:|---:|")
    for name, stage in stages:
        with torch.no_grad():
            y = stage(x)
        mod, params = from_pytorch(stage, (x,))
        exe = runtime.build(mod, "llvm", params=params)
        xn = x.numpy()
        fs: dict[str, Callable[[], Any]] = {"relay_ir": lambda: exe(xn)}
        ort_fn = _ort(stage, x)
        if callable(ort_fn):
            fs["ort"] = ort_fn
        for f in fs.values():
            f()
        times: dict[str, list[float]] = {k: [] for k in fs}
        for _ in range(rounds):
            for k, f in fs.items():
                t0 = time.perf_counter()
                f()
                times[k].append((time.perf_counter() - t0) * 1e3)
        ort_ms = f"{np.median(times['ort']):.2f}" if "ort" in times else "n/a"
        print(f"| {name} | {tuple(x.shape)} | {np.median(times['relay_ir']):.2f} | {ort_ms} |",
              flush=True)
        x = y


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--only", default="")
    p.add_argument("--blocks", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(THREADS)
    if args.blocks:
        _blocks(args.rounds)
        return
    only = [s for s in args.only.split(",") if s]
    print(f"threads {THREADS}, rounds {args.rounds}, torch {torch.__version__}")
    print("| model | import s | build s | relay_ir median / best ms | torch eager median / best "
          "ms | ORT median / best ms | relay_ir / torch | relay_ir / ORT | max abs diff relay_ir, "
          "ORT (vs torch) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, make in _models().items():
        if only and name not in only:
            continue
        model, x = make()
        t0 = time.perf_counter()
        mod, params = from_pytorch(model, (x,))
        t_import = time.perf_counter() - t0
        t0 = time.perf_counter()
        exe = runtime.build(mod, "llvm", params=params)
        t_build = time.perf_counter() - t0
        xn = x.numpy()
        with torch.no_grad():
            want = model(x).numpy()
        diff = float(np.abs(exe(xn) - want).max())
        peers: dict[str, Callable[[], Any]] = {"relay_ir": lambda: exe(xn)}

        def eager() -> Any:
            with torch.no_grad():
                return model(x)
        peers["torch"] = eager
        ort_fn = _ort(model, x)
        if callable(ort_fn):
            peers["ort"] = ort_fn
            ort_diff = f"{float(np.abs(ort_fn() - want).max()):.1e}"
        else:
            ort_diff = "n/a"
        for f in peers.values():
            f()
        times: dict[str, list[float]] = {k: [] for k in peers}
        for _ in range(args.rounds):
            for k, f in peers.items():
                t0 = time.perf_counter()
                f()
                times[k].append((time.perf_counter() - t0) * 1e3)
        med = {k: float(np.median(v)) for k, v in times.items()}
        best = {k: min(v) for k, v in times.items()}

        def cell(k: str) -> str:
            return f"{med[k]:.2f} / {best[k]:.2f}" if k in med else "n/a"
        ort_ratio = f"{med['relay_ir'] / med['ort']:.2f}x" if "ort" in med else \
            (ort_fn if isinstance(ort_fn, str) else "n/a")
        print(f"| {name} | {t_import:.1f} | {t_build:.1f} | {cell('relay_ir')} | "
              f"{cell('torch')} | {cell('ort')} | {med['relay_ir'] / med['torch']:.2f}x | "
              f"{ort_ratio} | {diff:.1e}, {ort_diff} |", flush=True)


if __name__ == "__main__":
    main()
