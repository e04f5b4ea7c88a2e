"""``make demo`` (relay_ir/demo.py): a shortened run (one epoch) and its building blocks."""
from __future__ import annotations

import io
import os

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import demo, runtime

pytest.importorskip("sklearn", reason="the demo extra (pip install -e .[demo]) is missing")
pytest.importorskip("tqdm", reason="the demo extra (pip install -e .[demo]) is missing")


def _numpy_grads(x, y, w1, b1, w2, b2):
    a1 = x @ w1 + b1
    h = np.maximum(a1, 0)
    z = h @ w2 + b2
    zs = z - z.max(1, keepdims=True)
    e = np.exp(zs)
    p = e / e.sum(1, keepdims=True)
    loss = -np.mean(np.sum((zs - np.log(e.sum(1, keepdims=True))) * y, 1))
    dz = (p - y) / len(x)
    da1 = (dz @ w2.T) * (a1 > 0)
    return loss, (x.T @ da1, da1.sum(0), h.T @ dz, dz.sum(0))


def test_compiled_step_matches_numpy_gradients() -> None:
    with open(demo.MODEL, encoding="utf-8") as f:
        mod = rly.parse(f.read(), source_name=demo.MODEL)
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (demo.BATCH, 64)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, demo.BATCH)]
    params = demo.init_params(1)
    params[1] = rng.standard_normal(demo.HIDDEN).astype(np.float32) * 0.1
    loss, grads = _numpy_grads(x, y, *params)
    grad_exe = demo.compile_step(mod, "main", n_data=2, lr=None)
    res = grad_exe(x, y, *params)
    assert len(res) == 5
    np.testing.assert_allclose(res[0], loss, rtol=1e-5)
    for got, want in zip(res[1:], grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    # the in-program SGD update: p - 0.5 * dL/dp
    sgd = demo.compile_step(mod, "main", n_data=2, lr=0.5)
    res = sgd(x, y, *params)
    for got, p, d in zip(res[1:], params, grads):
        np.testing.assert_allclose(got, p - 0.5 * d, rtol=1e-4, atol=1e-6)


def test_first_order_leaves_no_closures_or_references() -> None:
    with open(demo.MODEL, encoding="utf-8") as f:
        mod = rly.parse(f.read(), source_name=demo.MODEL)
    step = demo.first_order(demo.sgd_step_module(mod, n_data=2, lr=0.1), "train_step")
    text = rly.astext(step)
    assert list(step.functions) == ["train_step"]
    for banned in ("ref(", "ref_read", "ref_write", "fn ("):
        assert banned not in text.split("{", 1)[1], banned


def test_one_epoch_demo_learns() -> None:
    out = io.StringIO()
    res = demo.train(1, progress=False, out=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("compiled train step and predictor in ")
    assert lines[1].startswith("epoch  1/1  loss ") and "train accuracy" in lines[1]
    (_, loss, acc, _), = res["history"]
    assert loss < 1.5 and acc > 0.8          # one pass over 1,408 digits
    assert res["test_acc"] > 0.8
    assert len(res["y_test"]) == 360
    got = runtime.evaluate(demo.predictor(res["module"]), res["x_test"], *res["params"])
    assert (got.argmax(1) == res["test_pred"]).mean() > 0.99   # interpreter agrees


def test_export_and_reload_or_says_why() -> None:
    with open(demo.MODEL, encoding="utf-8") as f:
        mod = rly.parse(f.read(), source_name=demo.MODEL)
    params = demo.init_params(0)
    x = np.random.default_rng(0).uniform(0, 1, (20, 64)).astype(np.float32)
    expected = runtime.evaluate(demo.predictor(mod), x, *params).argmax(1)
    out = io.StringIO()
    ok = demo.export_and_reload(mod, params, x, expected, out=out)
    if ok is None:
        assert "export: skipped" in out.getvalue()
    else:
        assert ok and "predictions match (20/20)" in out.getvalue()


def test_main_runs_the_examples_section(capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(demo.ROOT, "examples", "factorial.rly")
    assert demo.main(["--examples", path]) == 0
    out = capsys.readouterr().out
    assert "@main -> 120 (int32)" in out and "1/1 examples" in out


def test_readme_tour_runs(tmp_path: object, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    """The README's Tour code block runs, export and reload included."""
    text = open(os.path.join(demo.ROOT, "README.md"), encoding="utf-8").read()
    tour = text.split("## Tour", 1)[1]
    code = tour.split("```python\n", 1)[1].split("```", 1)[0]
    code = code.replace("/tmp/mlp_step.so", str(tmp_path) + "/mlp_step.so")
    monkeypatch.chdir(demo.ROOT)
    exec(compile(code, "README.md#tour", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("fn (Tensor[(32, 64), float32], Tensor[(32, 10), float32]")
    assert out[1].startswith("loss after 100 steps: ")
    assert float(out[1].split(": ")[1]) < 0.5     # from ~2.3: 100 steps on one batch of 32


def test_shortened_make_demo_output(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m relay_ir.demo --epochs 1``: every section prints what the README shows."""
    assert demo.main(["--epochs", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    n = len([p for p in os.listdir(os.path.join(demo.ROOT, "examples")) if p.endswith(".rly")])
    assert f"{n}/{n} examples parsed, type-checked, printed and ran" in out
    assert "compiled train step and predictor in " in out
    acc = float(out.split("test accuracy: ", 1)[1].split()[0])
    assert 0.8 < acc <= 1.0
    assert "reloaded in a fresh process: predictions match (360/360)" in out


def test_training_epochs_compile_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel the epochs use is compiled (or found) before the first epoch: the train
    step's through runtime.build, the predictor's `?` batch for both data set sizes."""
    from relay_ir.runtime.kernel_cache import KernelCache
    lookups: list[int] = []
    get = KernelCache.get

    def counting_get(self, requests, target):  # type: ignore[no-untyped-def]
        lookups.append(len(requests))
        return get(self, requests, target)
    monkeypatch.setattr(KernelCache, "get", counting_get)

    class Lines(io.StringIO):
        at_compile_line: int | None = None

        def write(self, s: str) -> int:
            if s.startswith("compiled train step"):
                Lines.at_compile_line = len(lookups)
            return super().write(s)
    out = Lines()
    demo.train(epochs=2, progress=False, out=out)
    assert "epoch  2/2" in out.getvalue()
    assert Lines.at_compile_line is not None and Lines.at_compile_line > 0
    assert len(lookups) == Lines.at_compile_line, "kernels looked up during the epochs"
