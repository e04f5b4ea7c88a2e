"""``target="cuda"`` on the Relax VM executor (``runtime.build(mod, target="cuda",
executor="relax")``): the same bytecode as the CPU, with device-resident tensors.

How the pieces sit on the GPU:

* the VM is created with the devices ``[tvm.cuda(0), tvm.cpu()]``: device index 0 (the one
  every ``vm.builtin.alloc_storage`` of a kernel output names) is the GPU, so every
  intermediate tensor lives on the device, and the kernels are the fused groups compiled for
  the cuda target (dlight schedules, ``runtime.schedules.schedule_cuda``; the kernel cache
  keeps them in memory only);
* the VM itself uploads, when it starts, every tensor constant of the executable (the
  program's constants and the kernels' large constants) to device 0, and copies every tensor
  argument of a call (nested in tuples and ADT values too) to it; the runner uploads the
  tensors inside reference cells itself (the VM does not look inside an ``ffi.List``);
* a branch condition computed on the device is read by ``vm.builtin.read_if_cond``, which
  copies a non-CPU tensor to the host before reading it (one small device-to-host copy per
  branch);
* results come back as numpy arrays (one device-to-host copy each).

**The depth counter.** On the CPU the non-tail-call depth is counted in an int64 tensor held as
a constant of the executable. On the GPU that constant would be uploaded to the device like
every other, and the host functions that count could not read it. The cuda executable counts
instead in two static words of one host function, ``rly_depth(mode, a, b)`` (``mode`` 0: enter,
fails past the limit; 1: leave; 2: reset to depth ``a`` and limit ``b``; 3: a match failure):
the storage of ``tvm_static_handle``, which the host code generator makes a zero-initialized
global variable of the compiled library. The counter is therefore one per loaded library, not
per executable: the runner serializes the runs of every executable counted that way
(:data:`RUN_LOCK`); a plain TVM caller must not run two such modules at once from two threads.

**Not emitted for cuda yet:** groups with ``?`` or symbolic dimensions and host groups (refused
by name when the program is built).

**Without a GPU** the executable builds (every kernel compiled to CUDA C:
``exe.kernel_sources()``) and exports; calling it is a ``DiagnosticError`` "no CUDA GPU", and
loading an exported cuda module is a ``ModuleFileError`` saying the same.
"""
from __future__ import annotations

import threading
from typing import Any

from relay_ir.errors import DiagnosticError

DEPTH_FN = "rly_depth"          # the static-counter depth function (module docstring)
ENTER, LEAVE, RESET, FAIL = 0, 1, 2, 3
RUN_LOCK = threading.RLock()    # one run at a time of the executables counted statically

_MODULE: list[Any] = []


def static_depth_module() -> Any:
    """The host module of ``rly_depth`` (compiled once per process)."""
    if _MODULE:
        return _MODULE[0]
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def depth(mode: T.int64, a: T.int64, b: T.int64):
        T.func_attr({"global_symbol": "rly_depth"})
        # NOTE: each tvm_static_handle call site is one zero-initialized pointer-sized global
        # of the compiled library: the counter and the limit
        cp: T.let[T.handle] = T.call_intrin("handle", "tirx.tvm_static_handle")
        lp: T.let[T.handle] = T.call_intrin("handle", "tirx.tvm_static_handle")
        c = T.decl_buffer((1,), "int64", data=cp)
        lim = T.decl_buffer((1,), "int64", data=lp)
        if mode == T.int64(0):
            assert c[0] < lim[0], "relay_ir: recursion depth limit reached"
            c[0] = c[0] + T.int64(1)
        elif mode == T.int64(1):
            c[0] = c[0] - T.int64(1)
        elif mode == T.int64(2):
            c[0] = a
            lim[0] = b
        else:
            assert c[0] < T.int64(0), "relay_ir: no clause of the match matched the value"

    _MODULE.append(tvm.compile(tvm.IRModule({DEPTH_FN: depth}), target="llvm").mod)
    return _MODULE[0]


def has_gpu() -> bool:
    import tvm
    try:
        return bool(tvm.cuda(0).exist)
    except Exception:   # NOTE: a wheel without the CUDA runtime
        return False


def no_gpu_error() -> DiagnosticError:
    return DiagnosticError("target cuda: no CUDA GPU is available to run the kernels (they "
                           "are compiled; exe.kernel_sources() shows them, and "
                           "exe.export_library writes a module a GPU machine loads)")


def devices() -> list:
    """The VM's devices: the GPU (index 0, where kernel outputs and constants live), then the
    host."""
    import tvm
    return [tvm.cuda(0), tvm.cpu()]


def make_vm(module: Any) -> Any:
    """The Relax VM of a linked cuda executable, or None on a machine without a GPU."""
    if not has_gpu():
        return None
    from tvm import relax
    return relax.VirtualMachine(module, devices())


def to_device(a: Any) -> Any:
    """A host numpy array as a tensor on the GPU."""
    import tvm
    return tvm.runtime.tensor(a, device=tvm.cuda(0))


def kernel_source(module: Any) -> str:
    """The CUDA C of a kernel library compiled for cuda (its imported device module)."""
    for m in module.imports:
        if m.kind == "cuda":
            return m.inspect_source()
    return module.inspect_source()


__all__ = ["DEPTH_FN", "RUN_LOCK", "static_depth_module", "has_gpu", "no_gpu_error",
           "make_vm", "to_device", "kernel_source"]
