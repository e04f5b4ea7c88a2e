#!/usr/bin/env python3
"""Scaffold a new operator: ``make new-op NAME=nn.my_op [FAMILY=nn] [INPUTS=1]``.

Appends a skeleton (type relation, numpy reference, reverse-mode ``grad``, forward-mode
``jvp`` and TE ``compute`` rules, one ``defop`` registration) to ``relay_ir/op/<family>.py``.
The family defaults to ``nn`` for ``nn.*`` names and ``tensor`` otherwise. The skeleton is an
identity operator (of its first input) whose rules are all correct as they stand; edit them
together, then add sample inputs for the op to ``SAMPLES`` in ``tests/test_op_registry.py``
(the registry test fails until you do) and value tests to ``tests/test_ops.py``.
``--dry-run`` prints the code instead of writing it.
"""
from __future__ import annotations

import argparse
import keyword
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ("tensor", "reduce", "transform", "nn")

TEMPLATE = '''

# ----------------------------------------------------------------------------- {name}
@tensor_rel({names_list})  # waits (None) while an argument's type is still unknown
def {fn}_rel({typed_params}, attrs: Attrs) -> Type | None:
    """``{name}({params})``: TODO state the result type (for now: the type of the first input)."""
    return {first}


def {fn}_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Reference implementation of ``{name}`` (TODO; must return the relation's dtype)."""
    x = args[0]
    return wrap(np.array(x, copy=True), x.dtype)


def {fn}_te(attrs: Attrs, inputs: list, out_type: Type) -> Any:
    """TE compute (TODO; must agree with the reference). Imports tvm lazily."""
    from tvm import te
    x = inputs[0]
    return te.compute(x.shape, lambda *i: x(*i), name="{fn}")


def {fn}_grad(call: "Call", out: "Expr", out_grad: "Expr") -> "tuple[Expr, ...]":
    """Reverse mode (TODO): one adjoint per input, each of that input's type."""
    from relay_ir.op._rules import make_call
    return (out_grad,{zero_rest})


def {fn}_jvp(call: "Call", out: "Expr", tangents: "Sequence[Expr]") -> "Expr":
    """Forward mode (TODO): the result's tangent from one tangent per input."""
    return tangents[0]


defop("{name}", {n}, attrs=[], attrs_type="", rel={fn}_rel, impl={fn}_ref,
      compute={fn}_te, grad={fn}_grad, jvp={fn}_jvp,
      pattern=OpPattern.OPAQUE, doc="TODO one-line summary of {name}.")
'''


def render(name: str, inputs: int) -> str:
    """The skeleton code for operator ``name`` with ``inputs`` tensor inputs."""
    fn = re.sub(r"\W", "_", name.replace("nn.", "", 1))
    names = ["data"] if inputs == 1 else [f"x{i}" for i in range(inputs)]
    # NOTE: the skeleton is the identity of its first input: the others get zero adjoints
    zero_rest = "".join(f'\n            make_call("zeros_like", call.args[{i}]),'
                        for i in range(1, inputs))
    return TEMPLATE.format(name=name, fn=fn, n=inputs, params=", ".join(names),
                           names_list=", ".join(f'"{n}"' for n in names),
                           typed_params=", ".join(f"{n}: TensorType" for n in names),
                           first=names[0], zero_rest=zero_rest)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="operator name, e.g. nn.my_op")
    ap.add_argument("--family", choices=FAMILIES, default=None)
    ap.add_argument("--inputs", type=int, default=1)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    name = args.name
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name) or \
            keyword.iskeyword(name.split(".")[-1]):
        print(f"error: {name!r} is not a valid operator name", file=sys.stderr)
        return 2
    if args.inputs < 1:
        print("error: --inputs must be at least 1 (write 0-input ops by hand)", file=sys.stderr)
        return 2
    sys.path.insert(0, ROOT)
    from relay_ir.op import lookup_opdef
    if lookup_opdef(name) is not None:
        print(f"error: operator {name!r} is already registered", file=sys.stderr)
        return 1
    family = args.family or ("nn" if name.startswith("nn.") else "tensor")
    code = render(name, args.inputs)
    if args.dry_run:
        print(code)
        return 0
    path = os.path.join(ROOT, "relay_ir", "op", f"{family}.py")
    with open(path, encoding="utf-8") as f:
        src = f.read()
    needed = ["Any", "Sequence", "Attrs", "Type", "Call", "Expr", "tensor_rel", "TensorType", "wrap", "defop",
              "OpPattern", "np"]
    missing = [n for n in needed if not re.search(rf"\b{n}\b", src.split("\ndefop(")[0])]
    if missing:
        print(f"note: add imports for {', '.join(missing)} at the top of {path}")
    with open(path, "a", encoding="utf-8") as f:
        f.write(code)
    print(f"wrote a skeleton for {name} to {path}\n"
          f"next: fill in the relation and the reference, then add samples for {name!r} to "
          "SAMPLES in tests/test_op_registry.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
