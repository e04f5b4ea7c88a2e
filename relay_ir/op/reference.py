"""The operator reference, generated from the registry: ``docs/ops.md`` and ``rly ops``.

Every fact comes from the registered :class:`~relay_ir.op.OpDef`: the attribute schema (kind,
default, description), the first paragraph of the type relation's docstring, the gradient and
JVP rules (their docstrings), the TVM compute or the recorded host-only reason, and the fusion
pattern. The family is the ``relay_ir/op/<family>.py`` module that defines the operator's
rules. Only the argument names live here (:data:`ARG_NAMES`): an OpDef records how many
inputs an operator takes, not what they are called.

``python -m relay_ir.op.reference > docs/ops.md`` regenerates the document (a test checks that
the committed file equals this module's output).
"""
from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from relay_ir.op import OpDef, OpPattern, list_ops, lookup_opdef

#: The operator families, in document order: the modules ``relay_ir/op/<family>.py``.
FAMILIES = ("tensor", "reduce", "transform", "indexing", "nn", "conv", "conv_ext", "sorting",
            "dyn", "annotation", "indexing_ext")

REGENERATE = "python -m relay_ir.op.reference > docs/ops.md"

# Argument names as Relay's Python API wrote them, for operators whose inputs are not the
# common shapes below (one input: ``data``; a broadcasting binary op: ``lhs, rhs``).
ARG_NAMES: dict[str, tuple[str, ...]] = {
    "zeros": (), "ones": (),
    "full": ("fill_value",),
    "full_like": ("data", "fill_value"),
    "cast_like": ("data", "dtype_like"),
    "where": ("condition", "x", "y"),
    "variance": ("data", "mean"),
    "broadcast_to_like": ("data", "broadcast_type"),
    "collapse_sum_like": ("data", "collapse_type"),
    "reshape_like": ("data", "shape_like"),
    "take": ("data", "indices"),
    "take_grad": ("out_grad", "data_like", "indices"),
    "strided_slice_grad": ("out_grad", "data_like"),
    "nn.dense": ("data", "weight"),
    "nn.matmul": ("tensor_a", "tensor_b"),
    "nn.batch_matmul": ("tensor_a", "tensor_b"),
    "nn.bias_add": ("data", "bias"),
    "nn.prelu": ("data", "alpha"),
    "nn.pad": ("data", "pad_value"),
    "nn.layer_norm": ("data", "gamma", "beta"),
    "nn.batch_norm": ("data", "gamma", "beta", "moving_mean", "moving_var"),
    "nn.cross_entropy": ("predictions", "targets"),
    "nn.conv2d": ("data", "weight"),
    "nn.conv2d_backward_data": ("out_grad", "weight", "data_like"),
    "nn.conv2d_backward_weight": ("out_grad", "data", "weight_like"),
    "nn.avg_pool2d_grad": ("out_grad", "data"),
    "nn.max_pool2d_grad": ("out_grad", "data"),
    "nn.max_pool2d_gather": ("data", "values"),
    "dyn.zeros": ("shape",), "dyn.ones": ("shape",),
    "dyn.nonzero": ("data",), "dyn.unique": ("data",),
    "dyn.topk": ("data", "k"),
    "dyn.full": ("fill_value", "shape"),
    "dyn.broadcast_to": ("data", "shape"),
    "dyn.reshape": ("data", "newshape"),
    "dyn.expand_dims": ("data", "axis"),
    "dyn.squeeze": ("data", "axis"),
    "dyn.tile": ("data", "reps"),
    "dyn.tile_grad": ("out_grad", "data_like", "reps"),
    "dyn.strided_slice": ("data", "begin", "end", "strides"),
    "dyn.strided_slice_grad": ("out_grad", "data_like", "begin", "end", "strides"),
    "dyn.nn.pad": ("data", "pad_width", "pad_value"),
    "dyn.nn.pad_grad": ("out_grad", "data_like", "pad_width"),
    # opsa (issue 23): relay_ir/op/indexing_ext.py
    "gather": ("data", "indices"),
    "gather_nd": ("data", "indices"),
    "scatter_elements": ("data", "indices", "updates"),
    "scatter_nd": ("data", "indices", "updates"),
    "one_hot": ("indices", "on_value", "off_value"),
    "arange": (),
    # part opsb (issue 23)
    "nn.conv2d_transpose": ("data", "weight"),
    "nn.conv1d": ("data", "weight"),
    "nn.conv1d_transpose": ("data", "weight"),
    "nn.instance_norm": ("data", "gamma", "beta"),
    "nn.group_norm": ("data", "gamma", "beta"),
}

_KIND_TEXT = {
    "int": "int", "float": "float", "bool": "bool", "str": "str", "dtype": "dtype",
    "ints": "list of int", "floats": "list of float", "int?": "int or None",
    "ints?": "list of int or None", "int_or_ints": "int or list of int", "any": "any",
}


@dataclass(frozen=True)
class AttrEntry:
    """One attribute as the reference shows it."""

    name: str
    type: str
    default: str  # as written in .rly text
    doc: str
    required: bool = False  # no usable default: type checking reports a call without it

    @property
    def shown_default(self) -> str:
        """``= default`` text for the entry: the default, or that the attribute is required."""
        return "required" if self.required else self.default


@dataclass(frozen=True)
class OpEntry:
    """One operator's reference entry (every field is plain text)."""

    name: str
    family: str
    summary: str
    args: tuple[str, ...]
    attrs: tuple[AttrEntry, ...]
    type_rule: str
    differentiable: str  # "yes", or "no: <why>"
    reverse: str  # the reverse-mode (gradient) rule, "" when not differentiable
    forward: str  # the forward-mode (JVP) rule, likewise
    backend: str
    pattern: str

    @property
    def signature(self) -> str:
        """The call as written in ``.rly`` text, with every attribute's default.

        A required attribute shows its type instead (``reshape(data, newshape=<list of int>,
        ...)``). An attribute that an argument of the same name replaces (``dyn.reshape``'s
        ``newshape``: the shape is a tensor argument there) is left out.
        """
        parts = list(self.args) + [
            f"{a.name}=<{a.type}>" if a.required else f"{a.name}={a.default}"
            for a in self.attrs if a.name not in self.args]
        return f"{self.name}({', '.join(parts)})"


# ----------------------------------------------------------------------------- facts
def _unwrap(fn: Any) -> Any:
    while fn is not None and hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def _first_paragraph(doc: str | None) -> str:
    """The first paragraph of a docstring on one line, RST roles turned into Markdown."""
    if not doc:
        return ""
    para = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    text = " ".join(line.strip() for line in para.splitlines())
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def family_of(opdef: OpDef) -> str:
    """The family module (``relay_ir/op/<family>.py``) that defines the operator's rules.

    Shared helpers (``_rules``, ``_grad``, ``_jvp``, ``_te``) are skipped: the first of
    compute, reference implementation, relation, gradient and JVP defined in a family module
    names it (``"other"`` if none is).
    """
    for fn in (opdef.compute, opdef.impl, opdef.type_rel, opdef.grad, opdef.jvp):
        mod = getattr(_unwrap(fn), "__module__", None) or ""
        head, _, tail = mod.rpartition(".")
        if head == "relay_ir.op" and tail in FAMILIES:
            return tail
    return "other"


def arg_names(opdef: OpDef, strict: bool = False) -> tuple[str, ...]:
    """The operator's argument names (see :data:`ARG_NAMES`).

    An operator the table does not cover (a new one with several inputs) gets ``arg0, arg1,
    ...``, or a ``ValueError`` with ``strict`` (the test suite's check).
    """
    names = ARG_NAMES.get(opdef.name)
    problem = ""
    if names is None:
        from relay_ir.op import _rules
        rel = _unwrap(opdef.type_rel)
        binary = rel in (_rules.broadcast_rel, _rules.compare_rel) or (
            getattr(rel, "__qualname__", "").startswith("_fixed_broadcast_rel."))
        if opdef.num_inputs == 1:
            names = ("data",)
        elif opdef.num_inputs == 2 and binary:
            names = ("lhs", "rhs")
        else:
            problem = (f"operator {opdef.name!r} has {opdef.num_inputs} inputs and no argument "
                       f"names in relay_ir.op.reference.ARG_NAMES")
    elif len(names) != opdef.num_inputs:
        problem = (f"ARG_NAMES[{opdef.name!r}] names {len(names)} arguments; the operator "
                   f"takes {opdef.num_inputs}")
    if problem:
        if strict:
            raise ValueError(problem)
        names = tuple(f"arg{i}" for i in range(opdef.num_inputs))
    return names


def required_attrs(opdef: OpDef) -> tuple[str, ...]:
    """The attributes a call must give: what the relation checks for (``defop(...,
    required=...)``), and every attribute whose kind does not admit None (no ``?``, not
    ``any``) but whose default is None."""
    names = [f.name for f in opdef.attrs
             if f.default is None and not f.kind.endswith("?") and f.kind != "any"]
    rel = opdef.type_rel
    code = getattr(rel, "__code__", None)
    if code is not None and "required" in code.co_freevars and rel.__closure__:
        listed = rel.__closure__[code.co_freevars.index("required")].cell_contents
        names += [n for n in listed if n not in names]
    return tuple(f.name for f in opdef.attrs if f.name in names)


def type_rule(opdef: OpDef) -> str:
    """The type relation in a sentence: the first paragraph of its docstring.

    Shared relations write the operator as ``op``; the entry puts the operator's name there.
    """
    text = _first_paragraph(getattr(opdef.type_rel, "__doc__", None)
                            or getattr(_unwrap(opdef.type_rel), "__doc__", None))
    if not text:
        return "(no relation docstring)" if opdef.type_rel is not None else "(no relation)"
    return re.sub(r"`op\(", f"`{opdef.name}(", text)


def _rule_text(fn: Callable[..., Any] | None) -> str:
    return _first_paragraph(getattr(fn, "__doc__", None)) or "a registered rule"


def differentiable(opdef: OpDef) -> tuple[str, str, str]:
    """How AD treats the operator: (verdict, reverse-mode rule, forward-mode rule)."""
    if opdef.non_differentiable:
        return ("no: marked non-differentiable (reverse and forward mode give it a zero "
                "adjoint and tangent)", "", "")
    rev = _rule_text(opdef.grad) if opdef.grad is not None else "no rule (gradient reports it)"
    fwd = _rule_text(opdef.jvp) if opdef.jvp is not None else "no rule (jvp reports it)"
    yes = "yes" if opdef.grad is not None and opdef.jvp is not None else "partly"
    if opdef.effectful:
        yes += " (effectful: never removed or reordered)"
    return yes, rev, fwd


def backend(opdef: OpDef) -> str:
    """Whether the operator compiles to a TVM kernel, or why it runs on the host."""
    if opdef.compute is not None:
        return "TVM compute (TE/TOPI): compiles to a kernel"
    reason = opdef.host_only or "no compute registered"
    return f"host only: {reason}"


def pattern_name(p: OpPattern) -> str:
    """``OpPattern.OUT_ELEMWISE_FUSABLE`` -> ``out-elemwise-fusable``."""
    return p.name.lower().replace("_", "-")


def op_entry(opdef: OpDef) -> OpEntry:
    """The reference entry of one operator."""
    from relay_ir.printer import _attr_value
    required = required_attrs(opdef)
    attrs = []
    for f in opdef.attrs:
        kind = _KIND_TEXT.get(f.kind, f.kind)
        if f.name in required:
            kind = kind.removesuffix(" or None")
        attrs.append(AttrEntry(f.name, kind, _attr_value(f.default), f.doc, f.name in required))
    diff, rev, fwd = differentiable(opdef)
    return OpEntry(
        name=opdef.name, family=family_of(opdef), summary=_first_paragraph(opdef.doc),
        args=arg_names(opdef), attrs=tuple(attrs), type_rule=type_rule(opdef),
        differentiable=diff, reverse=rev, forward=fwd, backend=backend(opdef),
        pattern=pattern_name(opdef.pattern))


def entries() -> list[OpEntry]:
    """Every registered operator's entry, sorted by name."""
    return [op_entry(d) for d in list_ops()]


def family_intro(family: str) -> str:
    """The first paragraph of the family module's docstring."""
    mod = sys.modules.get(f"relay_ir.op.{family}")
    return _first_paragraph(getattr(mod, "__doc__", None))


def by_family(es: Sequence[OpEntry]) -> list[tuple[str, list[OpEntry]]]:
    """Entries grouped in :data:`FAMILIES` order (``other`` last, when any)."""
    order = list(FAMILIES) + sorted({e.family for e in es} - set(FAMILIES))
    return [(f, [e for e in es if e.family == f]) for f in order
            if any(e.family == f for e in es)]


def suggestions(name: str, names: Sequence[str] | None = None) -> list[str]:
    """Operator names close to ``name`` (difflib), also matching without the ``nn.`` prefix."""
    if names is None:
        names = [d.name for d in list_ops()]
    found = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
    short = {n.rpartition(".")[2]: n for n in names}
    for s in difflib.get_close_matches(name.rpartition(".")[2], list(short), n=5, cutoff=0.75):
        if short[s] not in found:
            found.append(short[s])
    return found[:5]


# ----------------------------------------------------------------------------- rendering
def entry_text(e: OpEntry) -> str:
    """The plain-text entry ``rly ops NAME`` prints."""
    lines = [e.signature, f"  {e.summary}", ""]
    field_w = 16
    lines.append(f"  {'family:':{field_w}}{e.family}")
    lines.append(f"  {'type rule:':{field_w}}{e.type_rule}")
    if e.attrs:
        lines.append("  attributes:")
        for a in e.attrs:
            doc = f"  -- {a.doc}" if a.doc else ""
            lines.append(f"    {a.name}: {a.type} = {a.shown_default}{doc}")
    else:
        lines.append(f"  {'attributes:':{field_w}}none")
    lines.append(f"  {'differentiable:':{field_w}}{e.differentiable}")
    if e.reverse:
        lines.append(f"    reverse mode: {e.reverse}")
        lines.append(f"    forward mode: {e.forward}")
    lines.append(f"  {'backend:':{field_w}}{e.backend}")
    lines.append(f"  {'fusion pattern:':{field_w}}{e.pattern}")
    return "\n".join(lines) + "\n"


def summary_text(es: Sequence[OpEntry]) -> str:
    """One line per operator (``rly ops``): name and summary, grouped by family."""
    width = max(len(e.name) for e in es) + 2
    lines = []
    for fam, group in by_family(es):
        lines.append(f"{fam}:")
        lines.extend(f"  {e.name:{width}}{e.summary}" for e in group)
    lines.append(f"{len(es)} operators; `rly ops NAME` prints one operator's entry "
                 f"(all of them: docs/ops.md)")
    return "\n".join(lines) + "\n"


def _anchor(name: str) -> str:
    return "op-" + name.replace(".", "-")


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|") if text else "-"


def markdown(es: Sequence[OpEntry] | None = None) -> str:
    """The whole reference as Markdown (``docs/ops.md``)."""
    es = entries() if es is None else list(es)
    groups = by_family(es)
    out = [
        "# Operator reference",
        "",
        f"<!-- generated by `{REGENERATE}`: do not edit; a test checks it against the "
        "registry -->",
        "",
        f"Generated from the operator registry (`relay_ir.op`) by `{REGENERATE}`; do not edit "
        "it by hand. `rly ops` lists the operators with a one-line summary and `rly ops NAME` "
        "prints one entry.",
        "",
        f"{len(es)} operators in {len(groups)} families. Each entry gives the call as written "
        "in `.rly` text with every attribute at its default (attributes are keyword arguments: "
        "`sum(%x, axis=[1], keepdims=True)`; `name=<type>` marks a required attribute), the "
        "attributes (type, default, description), the "
        "type rule (the first sentence of the operator's type relation), whether reverse mode "
        "(`passes.gradient`) and forward mode (`passes.jvp`) have rules for it, whether it "
        "compiles to a TVM kernel or runs on the host, and its fusion pattern (how `fuse-ops` "
        "groups it: `elemwise`, `broadcast` and `injective` operators fuse into each other, "
        "into a following `comm-reduce`, and into the epilogue of an `out-elemwise-fusable` "
        "one; `opaque` operators stand alone).",
        "",
        "## Index",
        "",
        "| family | operators |",
        "|---|---|",
    ]
    for fam, group in groups:
        links = ", ".join(f"[`{e.name}`](#{_anchor(e.name)})" for e in group)
        out.append(f"| [{fam}](#family-{fam}) | {links} |")
    for fam, group in groups:
        out += ["", f'<a id="family-{fam}"></a>', "", f"## {fam}", ""]
        intro = family_intro(fam)
        if intro:
            out += [intro, ""]
        for e in group:
            out += [f'<a id="{_anchor(e.name)}"></a>', "", f"### `{e.name}`", ""]
            if e.summary:
                out += [e.summary, ""]
            out += ["```", e.signature, "```", ""]
            out.append(f"- **Type rule:** {e.type_rule}")
            if not e.attrs:
                out.append("- **Attributes:** none")
            out.append(f"- **Differentiable:** {e.differentiable}")
            if e.reverse:
                out.append(f"  - reverse mode (`passes.gradient`): {e.reverse}")
                out.append(f"  - forward mode (`passes.jvp`): {e.forward}")
            out.append(f"- **Backend:** {e.backend}")
            out.append(f"- **Fusion pattern:** `{e.pattern}`")
            if e.attrs:
                out += ["", "| attribute | type | default | description |", "|---|---|---|---|"]
                for a in e.attrs:
                    shown = "required" if a.required else f"`{a.default}`"
                    out.append(f"| `{a.name}` | {a.type} | {shown} | {_md_cell(a.doc)} |")
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def lookup_entry(name: str) -> OpEntry | None:
    """The entry of operator ``name``, or None."""
    d = lookup_opdef(name)
    return None if d is None else op_entry(d)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m relay_ir.op.reference``: write the Markdown reference to standard output."""
    sys.stdout.buffer.write(markdown().encode("utf-8"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
