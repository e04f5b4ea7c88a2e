"""Frontends: Python functions as relay_ir programs (``from_python``) and their gradients.

``from_python(fn, *example_args)`` translates a Python/numpy function into an IRModule (see
:mod:`relay_ir.frontend.python` and docs/frontend_python.md); ``grad`` and ``value_and_grad``
build compiled gradient functions from it, as in JAX.
"""
from __future__ import annotations

from relay_ir.frontend._grad import grad, value_and_grad
from relay_ir.frontend.python import FrontendError, from_python

__all__ = ["from_python", "grad", "value_and_grad", "FrontendError"]
