"""runtime.tune / rly tune: MetaSchedule tuning whose faster kernels replace the default ones
in the kernel cache (each test with a kernel cache of its own)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.runtime import tuning as tune_mod
from relay_ir.runtime.kernel_cache import KernelCache, clear_disk

HDR = '#[version = "0.0.5"]\n'
PROGRAM = HDR + """
def @main(%x: Tensor[(8, 32), float32], %w: Tensor[(16, 32), float32]) {
  nn.relu(nn.dense(%x, %w))
}
"""


def _args() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((8, 32)).astype("float32"),
            rng.standard_normal((16, 32)).astype("float32"))


def test_without_the_tune_extra_it_is_a_diagnostic(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins
    real = builtins.__import__

    def no_psutil(name: str, *a: object, **k: object) -> object:
        if name == "psutil":
            raise ImportError("no psutil")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_psutil)
    with pytest.raises(rly.DiagnosticError, match=r"psutil.*\.\[tune\]"):
        runtime.tune(rly.parse(PROGRAM), trials=0)


def test_bad_trials_is_a_diagnostic() -> None:
    with pytest.raises(rly.DiagnosticError, match="trials"):
        runtime.tune(rly.parse(PROGRAM), trials=-1)


def test_a_replaced_kernel_is_what_later_builds_run(tmp_path: object) -> None:
    """KernelCache.replace (what tune does with a faster kernel), without MetaSchedule."""
    from relay_ir.runtime.executor import kernel_request
    from relay_ir.runtime.lower_tvm import schedule
    d = os.path.join(str(tmp_path), "cache")
    cache = KernelCache(d)
    exe = runtime.build(rly.parse(PROGRAM), cache=cache)
    (lowered, req), = tune_mod._distinct_kernels(exe)
    before = cache.library_of(req.key)
    cache.replace(req, schedule(lowered, exe.target, fallback=True), exe.target)
    after = cache.library_of(req.key)
    assert after is not None and after != before
    fresh = KernelCache(d)
    x, w = _args()
    out = runtime.build(rly.parse(PROGRAM), cache=fresh)(x, w)
    np.testing.assert_allclose(out, np.maximum(x @ w.T, 0), rtol=1e-5, atol=1e-5)
    assert fresh.library_of(req.key) == after and fresh.stats.compiled == 0


@pytest.mark.stress          # MetaSchedule's builder and runner pools: ~1-2 minutes
def test_tuned_kernels_replace_the_defaults_in_the_cache_and_a_log_reapplies(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    d = os.path.join(str(tmp_path), "cache")
    log = os.path.join(str(tmp_path), "log")
    cache = KernelCache(d)
    # NOTE: keep every valid tuned kernel, whatever its speed, so the replacement path runs
    monkeypatch.setattr(tune_mod, "MIN_GAIN", -1e9)
    report = runtime.tune(rly.parse(PROGRAM), trials=2, log=log, cache=cache)
    assert len(report.kernels) == 1 and report.kernels[0].default_ms > 0
    assert os.path.isfile(os.path.join(log, "database_tuning_record.json"))
    row = report.kernels[0]
    assert row.tuned_ms is not None and row.replaced, report.table()
    assert "1 of 1 kernels replaced" in report.table()
    lib = cache.library_of(row.key)
    assert lib is not None
    x, w = _args()
    expect = np.maximum(x @ w.T, 0)
    # a later build in a fresh cache object on the same directory runs the tuned kernel
    fresh = KernelCache(d)
    out = runtime.build(rly.parse(PROGRAM), cache=fresh)(x, w)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)
    assert fresh.library_of(row.key) == lib
    # a cleared cache loses the tuned kernel; trials=0 applies the log's records again
    clear_disk(d)
    again = runtime.tune(rly.parse(PROGRAM), trials=0, log=log, cache=KernelCache(d))
    assert again.kernels[0].replaced and again.kernels[0].key == row.key
    out = runtime.build(rly.parse(PROGRAM), cache=KernelCache(d))(x, w)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)


def test_rly_tune_with_an_empty_log_keeps_the_defaults(tmp_path: object,
                                                       capsys: pytest.CaptureFixture) -> None:
    from relay_ir.cli import main
    src = os.path.join(str(tmp_path), "m.rly")
    with open(src, "w") as f:
        f.write(PROGRAM)
    log = os.path.join(str(tmp_path), "log")
    assert main(["tune", src, "--trials", "0", "--log", log]) == 0
    out = capsys.readouterr().out
    assert "0 of 1 kernels replaced" in out and "dense" in out and log in out


def test_rly_tune_reads_weights_from_an_npz(tmp_path: object,
                                            capsys: pytest.CaptureFixture) -> None:
    from relay_ir.cli import main
    src = os.path.join(str(tmp_path), "m.rly")
    with open(src, "w") as f:
        f.write(PROGRAM)
    npz = os.path.join(str(tmp_path), "w.npz")
    np.savez(npz, w=_args()[1])
    assert main(["tune", src, "--trials", "0", "--log", os.path.join(str(tmp_path), "l"),
                 "--params", npz]) == 0
    assert "kernels replaced" in capsys.readouterr().out
    bad = os.path.join(str(tmp_path), "bad.npz")
    with open(bad, "wb") as f:
        f.write(b"not a zip")
    assert main(["tune", src, "--trials", "0", "--params", bad]) == 1
    assert "not a readable .npz" in capsys.readouterr().err


def test_rly_tune_of_an_unknown_entry_is_a_usage_error(tmp_path: object,
                                                       capsys: pytest.CaptureFixture) -> None:
    from relay_ir.cli import main
    src = os.path.join(str(tmp_path), "m.rly")
    with open(src, "w") as f:
        f.write(PROGRAM)
    assert main(["tune", src, "--trials", "0", "--entry", "nope"]) == 2
    assert "no global function @nope (globals: @main)" in capsys.readouterr().err
