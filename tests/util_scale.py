"""Scale gates in two sizes.

DESIGN's rule "no Python recursion in proportion to the program" is checked twice: by default
on a program of a few thousand bindings (or steps) run under ``shallow_stack()`` (at most
``FRAMES`` Python frames above the test, so any walk that recurses per binding fails), and at
full size (100,000 bindings, a million steps) in the stress tier (``make test-stress``)::

    @sizes(3_000, 100_000)
    def test_long_chain(n):
        mod = chain(n)
        with shallow_stack():
            ...
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator

import pytest

FRAMES = 200


def stack_depth() -> int:
    """How many Python frames are on the stack of the caller."""
    f: Any = sys._getframe(1)
    n = 0
    while f is not None:
        n += 1
        f = f.f_back
    return n


@contextlib.contextmanager
def shallow_stack(frames: int = FRAMES) -> Iterator[int]:
    """Run the block with the recursion limit ``frames`` above the current depth; afterwards
    check that the code under test left the limit alone (raising it is never the fix)."""
    old = sys.getrecursionlimit()
    limit = min(old, stack_depth() + frames)
    sys.setrecursionlimit(limit)
    try:
        yield limit
        assert sys.getrecursionlimit() == limit, "the code under test changed the recursion limit"
    finally:
        sys.setrecursionlimit(old)


def sizes(small: int, full: int, argname: str = "n") -> Any:
    """Parametrize ``argname`` with ``small`` (default run) and ``full`` (stress tier)."""
    return pytest.mark.parametrize(argname, [
        pytest.param(small, id=f"{small}"),
        pytest.param(full, id=f"{full}", marks=pytest.mark.stress)])
