"""Programs printed by TVM's own Relay printer parse here and infer the types TVM printed.

tests/data/tvm_printed_*.rly hold TVM printouts (`mod.astext()`), type comments included; every
call's inferred type must equal the last `/* ty=... */` comment on its line.
"""
from __future__ import annotations

import glob
import os
import re

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.expr import Call
from relay_ir.traversal import post_order

DATA = os.path.join(os.path.dirname(__file__), "data")
FILES = sorted(glob.glob(os.path.join(DATA, "tvm_printed_*.rly")))


def _expected_types(text: str) -> list[str]:
    out = []
    for line in text.splitlines()[2:]:
        found = re.findall(r"/\* ty=(.*?) \*/", line)
        if found:
            out.append(found[-1])
    return out


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_types_match_tvm_annotations(path: str) -> None:
    text = open(path, encoding="utf-8").read()
    mod = passes.InferType()(rly.parse(text, source_name=path))
    calls = [e for e in post_order(mod["main"].body) if isinstance(e, Call)]
    got = [rly.astext(c.checked_type) for c in calls]
    assert got == _expected_types(text)


def test_mobilenet_head_runs_like_numpy() -> None:
    """The folded batch norm of the first block, computed independently with numpy."""
    text = open(os.path.join(DATA, "tvm_printed_mobilenet_head.rly"), encoding="utf-8").read()
    mod = rly.parse(text)
    rng = np.random.default_rng(1)
    args = []
    for p in mod["main"].params:
        shape = tuple(p.type_annotation.shape)
        a = rng.standard_normal(shape).astype("float32")
        if "moving_var" in p.name_hint:
            a = np.abs(a) + 0.5
        args.append(a)
    out = runtime.evaluate(mod, *args)
    assert out.shape == (1, 64, 112, 112) and out.dtype == np.float32
    assert (out >= 0).all()
    # the first block alone: conv (stride 2, pad 1) then the folded batch norm and relu
    lines = text.splitlines()
    signature = lines[1].replace("-> Tensor[(1, 64, 112, 112), float32] ", "")
    block = [ln for ln in lines[2:] if re.match(r"  %([0-9]|1[0-2]) = ", ln)]
    first = rly.parse("\n".join([lines[0], signature, *block, "  %12", "}"]))
    data, w, gamma, beta, mean, var = args[:6]
    x = np.pad(data[0], ((0, 0), (1, 1), (1, 1)))
    conv = np.zeros((32, 112, 112), "float64")
    for i in range(3):
        for j in range(3):
            patch = x[:, i:i + 223:2, j:j + 223:2]
            conv += np.einsum("chw,oc->ohw", patch, w[:, :, i, j])
    scale = gamma / np.sqrt(var + 1e-5)
    ref = np.maximum(conv * scale[:, None, None] + (beta - mean * scale)[:, None, None], 0)
    np.testing.assert_allclose(runtime.evaluate(first, *args)[0], ref, rtol=1e-4, atol=1e-4)
