"""Frontends: models from other frameworks and Python functions as relay_ir modules.

``from_onnx(model_or_path)`` imports an ONNX model (:mod:`relay_ir.frontend.onnx`,
docs/frontend_onnx.md); ``from_pytorch(module, example_inputs)`` imports a PyTorch model through
``torch.export`` (:mod:`relay_ir.frontend.pytorch`, docs/frontend_torch.md); ``from_python(fn, *example_args)`` translates a Python/numpy function
(:mod:`relay_ir.frontend.python`, docs/frontend_python.md); ``grad`` and ``value_and_grad``
build compiled gradient functions from it, as in JAX.
"""
from __future__ import annotations

from relay_ir.frontend._grad import grad, value_and_grad
from relay_ir.frontend.onnx import from_onnx
from relay_ir.frontend.python import FrontendError, from_python
from relay_ir.frontend.pytorch import from_pytorch

__all__ = ["from_onnx", "from_pytorch", "from_python", "grad", "value_and_grad", "FrontendError"]
