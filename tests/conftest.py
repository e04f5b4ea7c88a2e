"""Shared test configuration. Helpers live in tests/util_*.py modules importable by name."""
from __future__ import annotations

import os
import sys
import tempfile

import pytest
from hypothesis import settings

sys.path.insert(0, os.path.dirname(__file__))

# NOTE: every test shares one kernel cache (compiled once per machine, not per test file),
# apart from the user's own ~/.cache/relay_ir
os.environ.setdefault("RELAY_IR_CACHE_DIR", os.path.join(
    tempfile.gettempdir(), f"relay_ir_test_kernels_{os.getuid()}"))

# NOTE: the pipeline caches (runtime.build_cache, passes.optimize_cache) are off under tests:
# tests of the compiler and the passes must compile and optimize (count compiles, time builds,
# see kernels, run instruments), not load an earlier result for the same module.
# tests/test_build_cache.py turns them on for its own tests.
os.environ.setdefault("RELAY_IR_BUILD_CACHE", "0")
os.environ.setdefault("RELAY_IR_OPT_CACHE", "0")

# NOTE: under CI (CI=true) hypothesis draws the same examples every run, so a landing is never
# decided by a lucky draw; local runs keep exploring new examples. Per-test settings (example
# counts, deadlines) still apply on top of the profile.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


def _has_tvm() -> bool:
    try:
        import tvm  # noqa: F401
        return True
    except Exception:
        return False


def _has_gpu() -> bool:
    try:
        import tvm
        return bool(tvm.cuda(0).exist)
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    skip_tvm = None if _has_tvm() else pytest.mark.skip(reason="apache-tvm not installed")
    skip_gpu = None if _has_gpu() else pytest.mark.skip(reason="no CUDA GPU")
    for item in items:
        if skip_tvm and "tvm" in item.keywords:
            item.add_marker(skip_tvm)
        if skip_gpu and "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _well_formed_pass_runs():  # type: ignore[no-untyped-def]
    """Every pass run in every test is checked by the WellFormedCheck instrument."""
    from relay_ir.passes import PassContext
    from relay_ir.passes.instrument import WellFormedCheck
    with PassContext(instruments=[WellFormedCheck()]):
        yield
