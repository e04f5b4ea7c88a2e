"""Deeply nested programs (one per nesting kind) and the value each returns; see test_nesting."""
from __future__ import annotations

import numpy as np

HEADER = '#[version = "0.0.5"]\n'
KINDS = ("if", "fn", "tuple", "tuple_type", "call", "match", "let_in_if", "closures")


def program(kind: str, n: int) -> tuple[str, tuple[np.ndarray, ...], float]:
    """Source text nesting ``kind`` ``n`` levels deep, arguments, and the expected result."""
    x = np.array(1.5, "float32")
    if kind == "if":  # every level takes the true branch: the innermost %x
        body = "%x"
        for _ in range(n):
            body = f"if (%c) {{ {body} }} else {{ %x }}"
        return (HEADER + f"def @main(%c: bool, %x: float32) -> float32 {{ {body} }}",
                (np.array(True), x), 1.5)
    if kind == "fn":  # (fn (%y) { ... })(%x): immediately applied nested functions
        body = "%x"
        for i in range(n):
            body = f"(fn (%y{i}: float32) {{ add({body}, 1f) }})(%x)"
        return (HEADER + f"def @main(%x: float32) -> float32 {{ {body} }}", (x,), 1.5 + n)
    if kind == "tuple":  # (((%x, %x).0, %x).0 ...)
        body = "%x"
        for _ in range(n):
            body = f"({body}, %x).0"
        return HEADER + f"def @main(%x: float32) -> float32 {{ {body} }}", (x,), 1.5
    if kind == "tuple_type":  # ((((%x, %x), %x), %x)...) bound with its type annotation
        value, ty = "%x", "float32"
        for _ in range(n):
            value, ty = f"({value}, %x)", f"({ty}, float32)"
        proj = "%t"
        for _ in range(n):
            proj = f"({proj}.0)"
        return (HEADER + f"def @main(%x: float32) -> float32 {{ let %t: {ty} = {value}; "
                f"{proj} }}", (x,), 1.5)
    if kind == "call":
        body = "%x"
        for _ in range(n):
            body = f"add({body}, 1f)"
        return HEADER + f"def @main(%x: float32) -> float32 {{ {body} }}", (x,), 1.5 + n
    if kind == "match":  # match (%v) { B(%y) => { match (B(%y)) { ... } } }
        body = "%y"
        for _ in range(n):
            body = f"match (B(%y)) {{ B(%y) => {{ {body} }}, }}"
        return (HEADER + "type Box { B(float32), }\n"
                f"def @main(%x: float32) -> float32 {{ let %y = %x; {body} }}", (x,), 1.5)
    if kind == "let_in_if":  # lets inside each branch, the value passed inwards
        body = "%x"
        for i in range(n):
            body = (f"if (%c) {{ let %a{i} = add(%x, 1f); {body} }} "
                    f"else {{ %x }}")
        return (HEADER + f"def @main(%c: bool, %x: float32) -> float32 {{ {body} }}",
                (np.array(True), x), 1.5)
    if kind == "closures":  # %f_k calls %f_{k-1}: a call chain n deep at run time
        lines = ["let %f0 = fn (%a: float32) -> float32 { add(%a, 1f) };"]
        for i in range(1, n):
            lines.append(f"let %f{i} = fn (%a: float32) -> float32 {{ %f{i - 1}(add(%a, 1f)) }};")
        body = "\n  ".join(lines)
        return (HEADER + f"def @main(%x: float32) -> float32 {{\n  {body}\n  %f{n - 1}(%x)\n}}",
                (x,), 1.5 + n)
    raise ValueError(kind)
