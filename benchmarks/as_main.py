"""Run a benchmark script with this branch's executor changes switched off (issue 21, W5/W6).

``python benchmarks/as_main.py SCRIPT [ARGS...]`` runs ``SCRIPT`` as ``__main__`` after
restoring, in this process, what main did before the ``execperf`` changes:

* no ``merge-continuations`` (the pass becomes the identity);
* reference operations are fusion barriers again (``fuse_ops._is_barrier``);
* ``nn.matmul``/``nn.dense`` over one term keep their one-element reduction;
* ``schedules.work_volume`` is the sum over blocks (and ``SERIAL_BELOW`` is moved by one, so
  the kernel-cache keys differ from the new rule's and no kernel is shared between the two).

So "before" and "after" run from the same checkout, side by side (interleave the processes).
"""
from __future__ import annotations

import os
import runpy
import sys
import types

import relay_ir.op.nn as nn_mod
import relay_ir.passes.fuse_ops as fuse_ops
import relay_ir.passes.merge_continuations as merge
from relay_ir.expr import Call, Constant, Function, Op, Tuple, TupleGetItem, Var
from relay_ir.runtime import schedules


def _old_barrier(value):
    if isinstance(value, Call):
        if isinstance(value.op, Op):
            return value.op.opdef.effectful
        return True
    return not isinstance(value, (Tuple, TupleGetItem, Var, Constant, Function, Op))


def sum_volume(func):
    """The old serial-threshold measure: the sum of the blocks' iteration volumes."""
    from tvm import s_tir
    sch = s_tir.Schedule(func)
    total = 0
    for b in schedules.blocks(sch):
        vol = 1
        for loop in sch.get_loops(b):
            e = schedules._extent(sch, loop)
            if e is None:
                return None
            vol *= e
        total += vol
    return total


def old_matmul_T(t):
    """A copy of ``relay_ir.op.nn.T`` whose ``is_one`` says no: one-term matmul/dense keep
    their one-element reduction."""
    fake = types.SimpleNamespace(**{k: getattr(t, k) for k in dir(t) if not k.startswith("__")})
    fake.is_one = lambda d: False
    return fake


def switch_off():
    """Restore, in this process, what main did before the execperf changes."""
    merge.merge_continuations = lambda f: f
    fuse_ops._is_barrier = _old_barrier
    nn_mod.T = old_matmul_T(nn_mod.T)
    schedules.work_volume = sum_volume
    schedules.SERIAL_BELOW += 1


if __name__ == "__main__":
    switch_off()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
