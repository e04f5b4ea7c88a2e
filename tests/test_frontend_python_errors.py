"""Unsupported Python is a DiagnosticError at the Python source line, with a caret."""
from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

import relay_ir as rly
from relay_ir.frontend import FrontendError, from_python

X = np.ones(3, "float32")
COUNTER = 0


def uses_dict(x):
    d = {"a": x}
    return d["a"]


def uses_try(x):
    try:
        y = x + 1.0
    except ValueError:
        y = x
    return y


def uses_global(x):
    global COUNTER
    return x


def item_assignment(x):
    y = x * 1.0
    y[0] = 2.0
    return y


def attribute_mutation(x):
    x.shape = (3, 1)
    return x


def list_mutation(x):
    xs = [x]
    xs.append(x * 2.0)
    return xs[0]


def runtime_tuple_index(x, i):
    t = (x, x * 2.0)
    return t[i]


def unknown_call(x):
    return np.fft.fft(x)


def unknown_python_call(x):
    return print(x)


def loop_else(x):
    for i in range(3):
        x = x + 1.0
    else:
        x = x * 2.0
    return x


def branch_types_differ(x, c):
    if c > 0:
        y = x
    else:
        y = np.sum(x)
    return y


def no_return(x):
    y = x + 1.0


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if text in line:
            return first + k
    raise AssertionError(text)


@pytest.mark.parametrize("fn,args,needle,message", [
    (uses_dict, (X,), '{"a": x}', "a dict is not supported"),
    (uses_try, (X,), "try:", "a try statement is not supported"),
    (uses_global, (X,), "global COUNTER", "a global statement is not supported"),
    (item_assignment, (X,), "y[0] = 2.0", "item assignment"),
    (attribute_mutation, (X,), "x.shape = ", "attribute assignment"),
    (list_mutation, (X,), "xs.append(", "`.append(...)` mutates"),
    (runtime_tuple_index, (X, np.int32(0)), "t[i]", "run-time index"),
    (unknown_call, (X,), "np.fft.fft", "unknown function `np.fft.fft`"),
    (unknown_python_call, (X,), "print(x)", "unknown function `print`"),
    (loop_else, (X,), "x = x * 2.0", "`else` on a loop is not supported"),
    (branch_types_differ, (X, np.int32(1)), "if c > 0", "`y` has type Tensor[(3), float32]"),
    (no_return, (X,), "def no_return", "can end without returning"),
])
def test_diagnostic(fn, args, needle, message):
    with pytest.raises(FrontendError) as ei:
        from_python(fn, *args)
    err = ei.value
    assert isinstance(err, rly.DiagnosticError)
    assert message in err.message
    line = _line_of(fn, needle)
    assert err.span.line == line
    assert err.span.source_name == __file__
    text = str(err)
    assert f"{__file__}:{line}:" in text
    shown = text.splitlines()
    src_line = next(s for s in shown if s.lstrip().startswith(f"{line} |"))
    caret = shown[shown.index(src_line) + 1]
    col = caret.index("^") - src_line.index("|") - 2
    assert src_line[src_line.index("|") + 2:][col:].startswith(needle.split("(")[0][:4])


def test_bad_argument_type():
    with pytest.raises(FrontendError, match="cannot pass a str"):
        from_python(uses_dict, "text")


def test_source_not_available_names_function_and_line():
    code = (
        "import numpy as np\n"
        "from relay_ir.frontend import from_python, FrontendError\n"
        "src = 'def f(x):\\n    return x + 1.0\\n'\n"
        "ns = {}\n"
        "exec(src, ns)\n"
        "try:\n"
        "    from_python(ns['f'], np.ones(2, 'float32'))\n"
        "except FrontendError as e:\n"
        "    print('ERR', e.message)\n"
        "    print('AT', e.span.source_name, e.span.line)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ERR the source of function f (defined at <string>:1) is not available" in out.stdout
    assert "AT <string> 1" in out.stdout
    assert "Traceback" not in out.stderr
