"""PyTorch importer: ``from_pytorch(module_or_exported_program, example_inputs) -> (IRModule,
params)`` through ``torch.export``.

The module is exported with ``torch.export.export`` and decomposed to the core ATen operator
set (``ExportedProgram.run_decompositions()``); the FX graph then becomes ``@main``: its
parameters are the user inputs in the program's order, then the weights (parameters, buffers
and lifted constants the converted program reads), and ``params`` maps each weight's
parameter name to its array. Weights are named after their ``state_dict`` key made a valid
``.rly`` name (``layer1.0.conv1.weight`` -> ``layer1_0_conv1_weight``, see
:func:`~relay_ir.frontend._importer.rly_name`); let-bound values after the FX node names.

Each FX node is converted by the function registered for its ATen overload (its ``str``, such
as ``aten.convolution.default``) in :mod:`relay_ir.frontend.pytorch_ops`. A program with ATen
operators that have no converter is one :class:`TorchImportError` listing each such node.
See docs/frontend_torch.md.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from relay_ir.errors import DiagnosticError, InternalError
from relay_ir.expr import Expr, Function, Tuple, Var
from relay_ir.frontend._importer import (RLY_DTYPES, Graph, Names, Value, np_to_rly_dtype,
                                         unsupported_message)
from relay_ir.module import IRModule
from relay_ir.op import lookup_opdef
from relay_ir.traversal import build_lets, free_vars
from relay_ir.ty import ANY, ShapeVar, TensorType

__all__ = ["from_pytorch", "TorchImportError", "SUPPORTED_OPS"]


class TorchImportError(DiagnosticError):
    """A PyTorch program the importer cannot convert (export failures, unsupported operators,
    dtypes or arguments)."""


_TORCH_DTYPES = {
    "float32": "float32", "float64": "float64", "float16": "float16", "int64": "int64",
    "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
}


def rly_dtype(dt: Any, where: str = "") -> str:
    """The relay_ir dtype of a ``torch.dtype`` (``torch.float32`` -> ``"float32"``)."""
    name = str(dt).replace("torch.", "")
    out = _TORCH_DTYPES.get(name)
    if out is None:
        raise TorchImportError(f"{where}unsupported element type {name} (relay_ir has "
                               f"{', '.join(sorted(RLY_DTYPES))})")
    return out


class TNode:
    """One FX node as converters see it: converted arguments, the output's metadata."""

    def __init__(self, node: Any, index: int, args: list[Any], kwargs: dict[str, Any],
                 used_outputs: set[int]):
        self.node = node
        self.index = index
        self.name = node.name
        self.target = str(node.target)
        self.args = args
        self.kwargs = kwargs
        self.used_outputs = used_outputs  # NOTE: the getitem indices read from a tuple result
        self.meta = node.meta.get("val")

    def where(self) -> str:
        return f"node {self.index} ({self.name}: {self.target})"

    def error(self, msg: str) -> TorchImportError:
        return TorchImportError(f"{self.where()}: {msg}")

    def arg(self, k: int, name: str, default: Any = None) -> Any:
        """Argument ``k`` (positional) or ``name`` (keyword), else ``default``."""
        if k < len(self.args):
            return self.args[k]
        return self.kwargs.get(name, default)

    def raw_arg(self, k: int) -> Any:
        """Argument ``k``'s FX-level value: a node's ``meta["val"]`` or the literal."""
        a = self.node.args[k] if k < len(self.node.args) else None
        return a.meta.get("val") if hasattr(a, "meta") else a

    @property
    def out_dtype(self) -> str:
        """The dtype torch computed for the (first) tensor output."""
        m = self.meta[0] if isinstance(self.meta, (tuple, list)) else self.meta
        return rly_dtype(m.dtype, f"{self.where()}: ")

    def out_shape(self, k: int = 0) -> tuple[Any, ...]:
        """The shape torch computed for tensor output ``k`` (ints; symbolic dims as objects)."""
        m = self.meta[k] if isinstance(self.meta, (tuple, list)) else self.meta
        return tuple(int(d) if _static(d) else d for d in m.shape)


def _static(d: Any) -> bool:
    """Whether a size from torch's metadata is a number (never ``int()`` of a symbolic
    SymInt: that would read its example value)."""
    import torch
    if isinstance(d, torch.SymInt):
        return bool(d.node.expr.is_number)
    return isinstance(d, int)


class TorchGraph(Graph):
    """The :class:`Graph` converters emit into, plus where each symbolic dim can be read:
    ``dim_sources[dim] = (value, axis)``, the first user input with that dim."""

    def __init__(self, names: Names):
        super().__init__(names)
        self.dim_sources: dict[Any, tuple[Value, int]] = {}


Converter = Callable[[Graph, TNode], Any]
_CONVERTERS: dict[str, Converter] = {}
_NEEDS: dict[str, tuple[str, ...]] = {}


def converter(*targets: str, needs: Sequence[str] = ()) -> Callable[[Converter], Converter]:
    """Register a converter for ATen overloads ``targets`` (``"aten.relu.default"``);
    ``needs`` names relay_ir operators it emits that not every build registers."""
    def deco(fn: Converter) -> Converter:
        for t in targets:
            _CONVERTERS[t] = fn
            if needs:
                _NEEDS[t] = tuple(needs)
        return fn
    return deco


def _ensure_converters() -> None:
    from relay_ir.frontend import pytorch_ops  # noqa: F401


class _SupportedOps:
    def __contains__(self, target: object) -> bool:
        _ensure_converters()
        return target in _CONVERTERS

    def __iter__(self):  # type: ignore[no-untyped-def]
        _ensure_converters()
        return iter(sorted(_CONVERTERS))


SUPPORTED_OPS = _SupportedOps()


# ---------------------------------------------------------------------------- export

def _export(model: Any, example_inputs: Any, dynamic_shapes: Any) -> Any:
    import torch
    if isinstance(model, torch.export.ExportedProgram):
        ep = model
    elif isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise TorchImportError("from_pytorch: a torch.nn.Module needs example_inputs")
        try:
            ep = torch.export.export(model, example_inputs, dynamic_shapes=dynamic_shapes)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise TorchImportError(f"torch.export.export failed ({type(e).__name__}: "
                                   f"{first})") from None
    else:
        raise TorchImportError(f"from_pytorch: expected a torch.nn.Module or a "
                               f"torch.export.ExportedProgram, got {type(model).__name__}")
    try:
        return ep.run_decompositions()
    except Exception as e:
        raise TorchImportError(f"decomposing to core ATen failed ({type(e).__name__}: "
                               f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})"
                               ) from None


def _as_tuple(example_inputs: Any) -> tuple | None:
    import torch
    if example_inputs is None:
        return None
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    return tuple(example_inputs)


def _dim_names(model: Any, example_inputs: tuple | None, dynamic_shapes: Any,
               user_nodes: list[Any]) -> dict[Any, str]:
    """torch symbol -> the name of the ``torch.export.Dim`` the user gave for it.

    ``dynamic_shapes`` is matched to the inputs as torch.export does: a tuple by position, a
    dict by the argument names of ``forward``."""
    import torch
    if dynamic_shapes is None or not user_nodes:
        return {}
    specs: list[Any]
    if isinstance(dynamic_shapes, Mapping):
        try:
            bound = inspect.signature(model.forward).bind(*(example_inputs or ()))
            specs = [dynamic_shapes.get(k) for k in bound.arguments]
        except (TypeError, ValueError, AttributeError):
            specs = list(dynamic_shapes.values())
    else:
        specs = list(dynamic_shapes)
    out: dict[Any, str] = {}
    for node, spec in zip(user_nodes, specs):
        val = node.meta.get("val")
        if spec is None or val is None or not isinstance(val, torch.Tensor):
            continue
        items = spec.items() if isinstance(spec, Mapping) else enumerate(spec)
        for i, dim in items:
            name = getattr(dim, "__name__", None)
            if not isinstance(name, str) or i >= val.dim():
                continue
            d = val.shape[i]
            if isinstance(d, torch.SymInt):
                out.setdefault(d.node.expr, name)
    return out


def _input_type(val: Any, where: str, syms: dict[Any, ShapeVar], dim_names: dict[Any, str],
                names: Names) -> TensorType:
    import sympy
    import torch
    if not isinstance(val, torch.Tensor):
        raise TorchImportError(f"{where}: only tensor inputs are supported (got "
                               f"{type(val).__name__})")
    dims: list[Any] = []
    for d in val.shape:
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            if expr.is_number:
                dims.append(int(expr))
            elif isinstance(expr, sympy.Symbol):
                if expr not in syms:
                    syms[expr] = ShapeVar(names.make(dim_names.get(expr, str(expr))))
                dims.append(syms[expr])
            else:
                dims.append(ANY)
        else:
            dims.append(int(d))
    return TensorType(tuple(dims), rly_dtype(val.dtype, f"{where}: "))


def _to_numpy(t: Any, where: str) -> np.ndarray:
    rly_dtype(t.dtype, f"{where}: ")
    arr = t.detach().cpu().contiguous().numpy()
    return np.array(arr, copy=True)


# ---------------------------------------------------------------------------- conversion

_IGNORED = frozenset({
    "aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default", "aten.sym_constrain_range.default",
    "aten._assert_async.msg",
})


def _target(node: Any) -> str:
    import operator
    if node.target is operator.getitem:
        return "getitem"
    return str(node.target)


def _unsupported(nodes: Sequence[Any]) -> list[str]:
    bad = []
    for i, n in enumerate(nodes):
        if n.op == "call_function":
            t = _target(n)
            if t != "getitem" and t not in _IGNORED and t not in _CONVERTERS:
                bad.append(f"node {i} ({n.name}): no converter for {t}")
            missing = [op for op in _NEEDS.get(t, ()) if lookup_opdef(op) is None]
            if missing:
                bad.append(f"node {i} ({n.name}): {t} needs the relay_ir operator(s) "
                           f"{', '.join(missing)}, not registered")
        elif n.op in ("call_module", "call_method", "get_attr"):
            bad.append(f"node {i} ({n.name}): {n.op} {n.target} is not supported")
    return bad


def _nest(results: list[Expr], spec: Any) -> Expr:
    """The entry's result: the flat outputs nested as the module returned them (tuples,
    lists and torch's named tuples such as ``torch.sort``'s become tuples), from the exported
    program's output tree spec; flat when it is unavailable or does not fit."""
    if spec is None or getattr(spec, "num_leaves", -1) != len(results):
        return results[0] if len(results) == 1 else Tuple(tuple(results))
    leaves = iter(results)
    # NOTE: an explicit stack (output trees are small, but no recursion by habit)
    done: list[list[Expr]] = [[]]
    todo: list[Any] = [(spec, False)]
    while todo:
        node, closing = todo.pop()
        kids = list(node.children()) if hasattr(node, "children") else list(
            node.children_specs)
        if node.type is None or not kids and node.num_leaves == 1:
            done[-1].append(next(leaves))
        elif closing:
            items = done.pop()
            done[-1].append(Tuple(tuple(items)))
        else:
            done.append([])
            todo.append((node, True))
            todo.extend((c, False) for c in reversed(kids))
    out = done[0][0]
    return out


def _check_output(tn: TNode, res: Any) -> None:
    """A converter's result against torch's metadata (static dims and dtype): a mismatch is a
    bug in the converter."""
    import torch
    vals = res if isinstance(res, list) else [res]
    metas = tn.meta if isinstance(tn.meta, (tuple, list)) else [tn.meta]
    for v, m in zip(vals, metas):
        if not isinstance(v, Value) or not isinstance(m, torch.Tensor):
            continue
        if not isinstance(v.ty, TensorType):
            continue
        want = rly_dtype(m.dtype, f"{tn.where()}: ")
        shape = tuple(v.ty.shape)
        ok = v.ty.dtype == want and len(shape) == m.dim() and all(
            not (isinstance(a, int) and _static(b)) or a == int(b)
            for a, b in zip(shape, m.shape))
        if not ok:
            raise InternalError(f"{tn.where()}: the converter gave {v.ty}, torch computes "
                                f"{tuple(m.shape)} {want}")


def _convert_arg(a: Any, env: dict[Any, Any]) -> Any:
    import torch.fx
    if isinstance(a, torch.fx.Node):
        return env[a]
    if isinstance(a, (list, tuple)):
        return [_convert_arg(x, env) for x in a]
    return a


def from_pytorch(model: Any, example_inputs: Any = None, *, dynamic_shapes: Any = None
                 ) -> tuple[IRModule, dict[str, np.ndarray]]:
    """Import a PyTorch model through ``torch.export``.

    ``model`` is a ``torch.nn.Module`` (put it in eval mode first: training-mode dropout and
    batch norm export as random and stateful operators) or a ``torch.export.ExportedProgram``.
    ``example_inputs``: a tensor or a tuple of tensors; ``dynamic_shapes`` is passed to
    ``torch.export.export`` and each ``torch.export.Dim`` becomes a named symbolic dimension
    of ``@main``. Returns ``(mod, params)``: ``@main`` takes the user inputs, then the weights;
    ``params`` maps the weights' parameter names to arrays.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        raise TorchImportError("from_pytorch needs torch (pip install relay_ir[torch])"
                               ) from None
    from torch.export.graph_signature import InputKind, OutputKind
    _ensure_converters()
    inputs_t = _as_tuple(example_inputs)
    ep = _export(model, inputs_t, dynamic_shapes)
    nodes = list(ep.graph.nodes)

    bad = _unsupported(nodes)
    if bad:
        raise TorchImportError(unsupported_message(" (core ATen)", bad))

    sig = ep.graph_signature
    spec_of = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
    placeholders = [n for n in nodes if n.op == "placeholder"]
    user_nodes = [n for n in placeholders
                  if spec_of.get(n.name) is None or spec_of[n.name].kind == InputKind.USER_INPUT]
    dim_names = _dim_names(model, inputs_t, dynamic_shapes, user_nodes)

    names = Names()
    g = TorchGraph(names)
    env: dict[Any, Any] = {}
    syms: dict[Any, ShapeVar] = {}
    inputs: list[Var] = []
    for n in user_nodes:
        val = n.meta.get("val")
        if val is None or not hasattr(val, "shape"):
            raise TorchImportError(f"input {n.name!r}: only tensor inputs are supported "
                                   f"(got {type(val).__name__})")
        ty = _input_type(val, f"input {n.name!r}", syms, dim_names, names)
        v = Var(names.make(n.name), ty)
        inputs.append(v)
        env[n] = Value(v, ty)
        for axis, d in enumerate(ty.shape):
            if isinstance(d, ShapeVar):
                g.dim_sources.setdefault(d, (env[n], axis))
    weights: list[tuple[Var, np.ndarray]] = []
    for n in placeholders:
        if n in env:
            continue
        spec = spec_of[n.name]
        key = spec.target
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            t = ep.state_dict[key] if key in ep.state_dict else ep.constants[key]
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            t = ep.constants[key]
        else:
            raise TorchImportError(f"input {n.name!r}: {spec.kind.name} inputs are not "
                                   "supported")
        arr = _to_numpy(t, f"weight {key!r}")
        ty = TensorType(arr.shape, np_to_rly_dtype(arr.dtype))
        v = Var(names.make(key), ty)
        weights.append((v, arr))
        env[n] = Value(v, ty)

    used: dict[Any, set[int]] = {}
    import operator
    for n in nodes:
        if n.op == "call_function" and n.target is operator.getitem:
            used.setdefault(n.args[0], set()).add(int(n.args[1]))

    out_node = None
    for i, n in enumerate(nodes):
        if n.op == "placeholder":
            continue
        if n.op == "output":
            out_node = n
            break
        t = _target(n)
        if t in _IGNORED:
            env[n] = None
            continue
        if t == "getitem":
            src, k = env[n.args[0]], int(n.args[1])
            if not isinstance(src, list) or k >= len(src) or src[k] is None:
                raise TorchImportError(f"node {i} ({n.name}): output {k} of "
                                       f"{n.args[0].name} is not supported by its converter")
            env[n] = src[k]
            continue
        tn = TNode(n, i, _convert_arg(list(n.args), env),
                   {k: _convert_arg(v, env) for k, v in n.kwargs.items()}, used.get(n, set()))
        g.hint = n.name
        try:
            res = _CONVERTERS[t](g, tn)
        except TorchImportError:
            raise
        except DiagnosticError as e:
            raise tn.error(str(e)) from None
        except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
            raise tn.error(f"unsupported arguments ({type(e).__name__}: {e})") from None
        _check_output(tn, res)
        env[n] = res

    assert out_node is not None
    results: list[Expr] = []
    outs = out_node.args[0]
    specs = sig.output_specs
    for k, o in enumerate(outs):
        if k < len(specs) and specs[k].kind != OutputKind.USER_OUTPUT:
            continue  # NOTE: buffer mutations (training-mode batch norm statistics)
        v = env.get(o) if o is not None and hasattr(o, "op") else None
        if not isinstance(v, Value):
            raise TorchImportError(f"output {k}: only tensor outputs are supported (got "
                                   f"{o!r})")
        results.append(v.expr)
    body_out = _nest(results, getattr(getattr(ep, "call_spec", None), "out_spec", None))
    body = build_lets(g.bindings, body_out)
    fv = set(free_vars(body))
    params: dict[str, np.ndarray] = {}
    wvars = []
    for v, arr in weights:
        if v in fv:
            wvars.append(v)
            params[v.name_hint] = arr
    fn = Function(tuple(inputs) + tuple(wvars), body, type_params=tuple(syms.values()))
    return IRModule({"main": fn}), params
