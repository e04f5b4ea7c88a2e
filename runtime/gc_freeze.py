"""Keep the long-lived objects of TVM's and relay_ir's imports out of the cyclic collector's way.

Importing TVM registers hundreds of thousands of long-lived Python objects (its FFI classes and
functions, relay_ir's operator registry, the parser's tables). Every full (generation-2)
collection walks all of them, and the first ``runtime.build`` of a process allocates enough
to trigger one: 60-100 ms of W8's ~200 ms warm start, measured (benchmarks/RESULTS.md,
"W8 ... gc.freeze"). :func:`freeze_long_lived` imports TVM and moves every object the
collector tracks at that moment into its permanent generation (``gc.freeze()``), once per
process, at the start of the first ``runtime.build``. Frozen objects are still freed by
reference counting; only cyclic garbage that exists at that moment would stay uncollected.
``RELAY_IR_GC_FREEZE=0`` turns it off.
"""
from __future__ import annotations

import gc
import os

ENV_VAR = "RELAY_IR_GC_FREEZE"
_STATE = {"done": False}


def enabled() -> bool:
    """Whether the freeze is on (``RELAY_IR_GC_FREEZE``: ``0``, ``off``, ``false`` or ``no``
    turn it off)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "off", "false", "no")


def freeze_long_lived() -> bool:
    """Import TVM and freeze what the collector tracks (once per process); whether it froze
    now."""
    if _STATE["done"]:
        return False
    _STATE["done"] = True
    if not enabled():
        return False
    import tvm  # noqa: F401  (its import is what makes the long-lived objects)
    from relay_ir.runtime import lower_tvm  # noqa: F401
    gc.freeze()
    return True


__all__ = ["freeze_long_lived", "enabled", "ENV_VAR"]
