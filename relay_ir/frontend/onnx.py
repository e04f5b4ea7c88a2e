"""ONNX importer: ``from_onnx(model_or_path, shape=None, dtype=None) -> (IRModule, params)``.

The graph becomes ``@main``: its parameters are the graph inputs in the model's order, then
the weights (the initializers the converted program still reads), and ``params`` maps each
weight's parameter name to its array. ONNX names are made valid ``.rly`` names by
:func:`rly_name` (see docs/frontend_onnx.md for the mapping).

Each node is converted by the function registered for its operator in
:mod:`relay_ir.frontend.onnx_ops` (and ``onnx_nn``, ``onnx_extra``); every result is
let-bound in order, with its type computed from the operator's type relation as it is
emitted. Calls whose arguments are all constants
are folded with the operators' reference implementations, so shape computations
(``Shape -> Gather -> Concat -> Reshape``) reach the operators that need static values. Values
an operator needs as attributes (axes, shapes, pads) must be constants or initializers.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from relay_ir.errors import DiagnosticError
from relay_ir.expr import Expr, Function, Tuple, Var
from relay_ir.frontend._importer import RLY_DTYPES, Graph, Value  # noqa: F401
from relay_ir.frontend._importer import Names as _Names
from relay_ir.frontend._importer import np_to_rly_dtype as _np_to_rly_dtype
from relay_ir.frontend._importer import rly_name, unsupported_message
from relay_ir.module import IRModule
from relay_ir.traversal import build_lets, free_vars
from relay_ir.ty import ANY, ShapeVar, TensorType

__all__ = ["from_onnx", "rly_name", "OnnxImportError", "NeedsConstantError", "SUPPORTED_OPS"]


class OnnxImportError(DiagnosticError):
    """A model the importer cannot convert (unsupported operators, non-constant attributes)."""


class NeedsConstantError(OnnxImportError):
    """A node input whose value decides a shape is computed at run time; ``value_name`` is its
    ONNX name (binding that value as an initializer lets the import proceed)."""

    def __init__(self, message: str, value_name: str):
        super().__init__(message)
        self.value_name = value_name


class Node:
    """One ONNX node as converters see it: inputs (None for omitted ones), attributes."""

    def __init__(self, proto: Any, index: int, inputs: list[Value | None], opset: int):
        from onnx import helper
        self.proto = proto
        self.index = index
        self.op_type = proto.op_type
        self.name = proto.name
        self.inputs = inputs
        self.opset = opset
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        self.num_outputs = len(proto.output)
        self.env: dict[str, Value] = {}  # NOTE: the scope the node sees (set when converting)

    def where(self) -> str:
        return f"node {self.index} ({self.op_type} {self.name!r})" if self.name else \
            f"node {self.index} ({self.op_type})"

    def error(self, msg: str) -> OnnxImportError:
        return OnnxImportError(f"{self.where()}: {msg}")

    def attr(self, name: str, default: Any = None) -> Any:
        v = self.attrs.get(name, default)
        if isinstance(v, bytes):
            return v.decode()
        return v

    def input(self, k: int) -> Value | None:
        return self.inputs[k] if k < len(self.inputs) else None

    def static(self, k: int, what: str) -> np.ndarray | None:
        """Input ``k`` as an array (None if omitted); it must be a constant or initializer."""
        v = self.input(k)
        if v is None:
            return None
        if v.value is None:
            raise NeedsConstantError(f"{self.where()}: input {k} ({what}) must be a constant or "
                                     "an initializer: its value decides the output shape",
                                     self.proto.input[k])
        return v.value


Converter = Callable[[Graph, Node], "Value | list[Value]"]
_CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str) -> Callable[[Converter], Converter]:
    """Register a converter for ONNX operators ``op_types`` (default domain)."""
    def deco(fn: Converter) -> Converter:
        for t in op_types:
            _CONVERTERS[t] = fn
        return fn
    return deco


def _ensure_converters() -> None:
    from relay_ir.frontend import (onnx_control, onnx_extra, onnx_nn,  # noqa: F401
                                   onnx_ops, onnx_resize, onnx_rnn)


class _SupportedOps:
    def __contains__(self, op_type: object) -> bool:
        _ensure_converters()
        return op_type in _CONVERTERS

    def __iter__(self):  # type: ignore[no-untyped-def]
        _ensure_converters()
        return iter(sorted(_CONVERTERS))


SUPPORTED_OPS = _SupportedOps()


# ---------------------------------------------------------------------------- model loading

def _load(model_or_path: Any) -> Any:
    import onnx
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    path = str(model_or_path)
    try:
        return onnx.load(path)
    except FileNotFoundError:
        raise OnnxImportError(f"{path}: no such file") from None
    except Exception as e:  # NOTE: protobuf's DecodeError and friends
        raise OnnxImportError(f"{path}: not an ONNX model ({type(e).__name__}: {e})") from None


def _default_opset(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


def _dtype_of_elem(elem_type: int, where: str) -> str:
    from onnx import helper
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        raise OnnxImportError(f"{where}: unsupported element type {elem_type}") from None
    if _np_to_rly_dtype(dt) not in RLY_DTYPES:
        raise OnnxImportError(f"{where}: unsupported element type {dt}")
    return _np_to_rly_dtype(dt)


def _input_type(vi: Any, shape: Mapping[str, Any], dtype: Any, dims: dict[str, ShapeVar]
                ) -> TensorType:
    where = f"graph input {vi.name!r}"
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise OnnxImportError(f"{where}: only tensor inputs are supported")
    dt = _dtype_of_elem(tt.elem_type, where)
    if isinstance(dtype, Mapping):
        dt = str(dtype.get(vi.name, dt))
    elif dtype is not None:
        dt = str(dtype)
    if dt not in RLY_DTYPES:
        raise OnnxImportError(f"{where}: dtype {dt!r} is not a relay_ir dtype "
                              f"({', '.join(sorted(RLY_DTYPES))})")
    if vi.name in shape:
        out: list[Any] = []
        for d in shape[vi.name]:
            if d is None or d == "?" or (isinstance(d, int) and d < 0):
                out.append(ANY)
            elif isinstance(d, str):
                out.append(dims.setdefault(d, ShapeVar(rly_name(d))))
            else:
                out.append(int(d))
        return TensorType(tuple(out), dt)
    if not tt.HasField("shape"):
        raise OnnxImportError(f"{where}: the model gives no rank; pass shape={{{vi.name!r}: "
                              "(...)}}")
    out = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            out.append(dims.setdefault(d.dim_param, ShapeVar(rly_name(d.dim_param))))
        else:
            out.append(ANY)
    return TensorType(tuple(out), dt)


def _unsupported(graph: Any) -> list[str]:
    """Each node (also inside If/Loop/Scan bodies) whose operator has no converter."""
    from onnx import AttributeProto
    bad = []
    stack = [(graph, "")]
    while stack:
        gr, where = stack.pop()
        for i, n in enumerate(gr.node):
            if n.domain not in ("", "ai.onnx"):
                bad.append(f"{where}node {i} ({n.domain}.{n.op_type} {n.name!r}): operator "
                           f"domain {n.domain!r} is not supported")
            elif n.op_type not in _CONVERTERS:
                bad.append(f"{where}node {i} ({n.op_type} {n.name!r}): no converter for "
                           f"{n.op_type}")
            for a in n.attribute:
                inner = f"{where}node {i} ({n.op_type} {n.name!r}) {a.name}: "
                if a.type == AttributeProto.GRAPH:
                    stack.append((a.g, inner))
                elif a.type == AttributeProto.GRAPHS:
                    stack.extend((sub, inner) for sub in a.graphs)
    return bad


def convert_nodes(g: Graph, nodes: Any, env: dict[str, Value], opset: int) -> None:
    """Convert ``nodes`` in order into ``g``, reading and extending ``env`` (ONNX name ->
    Value); a subgraph converter (If) calls it again with a copy of its scope."""
    for i, n in enumerate(nodes):
        ins: list[Value | None] = []
        for name in n.input:
            if name == "":
                ins.append(None)
            elif name in env:
                ins.append(env[name])
            else:
                raise OnnxImportError(f"node {i} ({n.op_type} {n.name!r}): input {name!r} is "
                                      "not defined before it")
        node = Node(n, i, ins, opset)
        node.env = env
        g.hint = n.output[0] if n.output and n.output[0] else n.op_type.lower()
        try:
            res = _CONVERTERS[n.op_type](g, node)
        except OnnxImportError:
            raise
        except DiagnosticError as e:
            raise node.error(str(e)) from None
        except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
            # NOTE: a node missing a required input or attribute, or one of the wrong kind
            raise node.error(f"malformed or unsupported node ({type(e).__name__}: {e})"
                             ) from None
        outs = res if isinstance(res, list) else [res]
        for k, name in enumerate(n.output):
            if name == "":
                continue
            if k >= len(outs):
                raise node.error(f"output {k} ({name!r}) is not supported by the converter")
            env[name] = outs[k]


def from_onnx(model_or_path: Any, shape: Mapping[str, Sequence[Any]] | None = None,
              dtype: Any = None) -> tuple[IRModule, dict[str, np.ndarray]]:
    """Import an ONNX model (a ``ModelProto`` or a file path).

    Returns ``(mod, params)``: ``@main`` takes the graph inputs in order, then the weights;
    ``params`` maps the weights' parameter names to arrays. ``shape`` overrides input shapes
    (``{"input": (1, 3, 224, 224)}``; a string dim is a named symbolic dim, ``None`` or ``-1``
    unknown), ``dtype`` the input dtypes (one dtype or a name -> dtype mapping).
    Unsupported operators raise one :class:`OnnxImportError` listing each of them.
    """
    from onnx import numpy_helper
    _ensure_converters()
    model = _load(model_or_path)
    graph = model.graph
    opset = _default_opset(model)
    shape = dict(shape or {})

    bad = _unsupported(graph)
    if bad:
        raise OnnxImportError(unsupported_message(f" (opset {opset})", bad))
    unknown = set(shape) - {vi.name for vi in graph.input}
    if unknown:
        raise OnnxImportError(f"shape= names {sorted(unknown)} are not graph inputs "
                              f"(inputs: {[vi.name for vi in graph.input]})")

    names = _Names()
    g = Graph(names)
    env: dict[str, Value] = {}
    dims: dict[str, ShapeVar] = {}
    init_names = {t.name for t in graph.initializer}
    inputs: list[Var] = []
    for vi in graph.input:
        if vi.name in init_names:
            continue  # NOTE: IR version < 4 lists the initializers among the inputs too
        ty = _input_type(vi, shape, dtype, dims)
        v = Var(names.make(vi.name), ty)
        inputs.append(v)
        env[vi.name] = Value(v, ty)
    weights: list[tuple[Var, np.ndarray]] = []
    for t in graph.initializer:
        try:
            arr = numpy_helper.to_array(t)
        except Exception as e:
            raise OnnxImportError(f"initializer {t.name!r}: cannot read it ({e})") from None
        dt = _np_to_rly_dtype(arr.dtype)
        if dt not in RLY_DTYPES:
            raise OnnxImportError(f"initializer {t.name!r}: unsupported element type {dt}")
        ty = TensorType(arr.shape, dt)
        v = Var(names.make(t.name), ty)
        weights.append((v, arr))
        env[t.name] = Value(v, ty, arr)

    convert_nodes(g, graph.node, env, opset)

    results = []
    for vo in graph.output:
        if vo.name not in env:
            raise OnnxImportError(f"graph output {vo.name!r} is never computed")
        results.append(env[vo.name].expr)
    body_out: Expr = results[0] if len(results) == 1 else Tuple(tuple(results))
    body = build_lets(g.bindings, body_out)
    used = set(free_vars(body))
    params = {}
    wvars = []
    for v, arr in weights:
        if v in used:
            wvars.append(v)
            params[v.name_hint] = arr
    # NOTE: ShapeVars in order of first appearance among the inputs' types
    fn = Function(tuple(inputs) + tuple(wvars), body, type_params=tuple(dims.values()))
    return IRModule({"main": fn}), params
