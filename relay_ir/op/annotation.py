"""Annotations: ``on_device`` and ``device_copy`` (devices), ``annotation.*`` (compiler hints).

TVM's device planner (``PlanDevices``) reads and writes these calls:

* ``on_device(%x, virtual_device=D, constrain_result=False, constrain_body=True)`` states that
  ``%x`` is (or its result must be) computed on the virtual device ``D``;
* ``device_copy(%x, src_virtual_device=S, dst_virtual_device=D)`` copies ``%x`` between devices.

relay_ir runs everything on one device, so both are the identity in the interpreter, and their
type is the argument's type (any type: tensor, tuple, function...). The device values are kept
as written -- usually a metadata reference such as ``meta[VirtualDevice][0]`` -- in ``any``-kind
attributes, and printed back. Gradients pass straight through: ``g => g``.

TVM's compiler annotations are identities too: ``annotation.stop_fusion`` (a fusion barrier),
``annotation.checkpoint`` (recompute in the backward pass) and the BYOC region markers
``annotation.compiler_begin`` / ``annotation.compiler_end`` (``compiler="..."``).
"""
from __future__ import annotations

from typing import Any, Sequence

from relay_ir.attrs import Attrs
from relay_ir.expr import Expr
from relay_ir.op import OpPattern
from relay_ir.op._rules import F, defop
from relay_ir.ty import Type


def annotation_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    """``op(x: T) : T`` for any type ``T`` (unknown parts flow both ways through unification)."""
    return arg_types[0]


def annotation_ref(args: list, attrs: Attrs) -> Any:
    """The argument itself (values are immutable, so no copy is needed)."""
    return args[0]


def annotation_grad(call: Any, out: Expr, g: Expr) -> tuple[Expr, ...]:
    """The adjoint passes through unchanged: ``g => (g,)``."""
    return (g,)


def annotation_jvp(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
    """The tangent passes through unchanged."""
    return tangents[0]


def annotation_compute(attrs: Attrs, inputs: list, out_type: Type) -> Any:
    """The input tensor(s) themselves: nothing is computed on a single device."""
    return inputs[0]


defop("on_device", 1,
      attrs=[F("virtual_device", "any", None, "the virtual device (e.g. meta[VirtualDevice][0])"),
             F("constrain_result", "bool", False, "the result is on that device too"),
             F("constrain_body", "bool", True, "the argument is computed on that device")],
      attrs_type="OnDeviceAttrs", rel=annotation_rel, impl=annotation_ref,
      pattern=OpPattern.OPAQUE, grad=annotation_grad, jvp=annotation_jvp,
      compute=annotation_compute,
      doc="Device annotation: the identity here; the virtual device is kept.")

defop("device_copy", 1,
      attrs=[F("src_virtual_device", "any", None, "where the argument lives"),
             F("dst_virtual_device", "any", None, "where the result lives")],
      attrs_type="DeviceCopyAttrs", rel=annotation_rel, impl=annotation_ref,
      pattern=OpPattern.OPAQUE, grad=annotation_grad, jvp=annotation_jvp,
      compute=annotation_compute,
      doc="Copy between virtual devices: the identity here; the devices are kept.")


for _name, _doc in [("annotation.stop_fusion", "Fusion barrier: the identity here."),
                    ("annotation.checkpoint", "Recompute for the backward pass: an identity.")]:
    defop(_name, 1, rel=annotation_rel, impl=annotation_ref, pattern=OpPattern.OPAQUE,
          grad=annotation_grad, jvp=annotation_jvp, compute=annotation_compute, doc=_doc)

for _name, _doc in [("annotation.compiler_begin", "Start of a region for an external compiler."),
                    ("annotation.compiler_end", "End of a region for an external compiler.")]:
    defop(_name, 1, attrs=[F("compiler", "str", "", "the external compiler's name")],
          attrs_type="CompilerAttrs", rel=annotation_rel, impl=annotation_ref,
          pattern=OpPattern.OPAQUE, grad=annotation_grad, jvp=annotation_jvp,
          compute=annotation_compute, doc=_doc + " The identity here.")
