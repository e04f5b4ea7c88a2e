"""Importers: models from other frameworks as relay_ir modules (``from_onnx``)."""
from __future__ import annotations

from relay_ir.frontend.onnx import from_onnx

__all__ = ["from_onnx"]
