"""Pass instruments: hooks around pass runs (TVM's PassInstrument, in Python).

An instrument has five hooks, all optional: ``enter_pass_ctx()`` / ``exit_pass_ctx()`` when a
:class:`~relay_ir.passes.PassContext` holding it is entered and left, ``should_run(mod, info)``
(return False to skip a pass), and ``run_before_pass(mod, info)`` / ``run_after_pass(mod,
info)``. ``info`` is a :class:`~relay_ir.passes.PassInfo` (name, opt_level, required).

Shipped instruments: :class:`Timing` (a per-pass time table), :class:`PrintIRAfter` (prints
the module after chosen passes) and :class:`WellFormedCheck` (checks every pass output; the
test suite turns it on for every pass run).
"""
from __future__ import annotations

import sys
import time
from typing import IO, Iterable

from relay_ir.errors import WellFormednessError
from relay_ir.module import IRModule


class PassInstrument:
    """Base class: every hook does nothing. Override the ones you need."""

    def enter_pass_ctx(self) -> None:
        """Called when a PassContext holding this instrument is entered."""

    def exit_pass_ctx(self) -> None:
        """Called when that PassContext is left."""

    def should_run(self, mod: IRModule, info: object) -> bool:
        """Return False to skip the pass described by ``info``."""
        return True

    def run_before_pass(self, mod: IRModule, info: object) -> None:
        """Called with the input module right before a pass runs."""

    def run_after_pass(self, mod: IRModule, info: object) -> None:
        """Called with the output module right after a pass ran."""


class Timing(PassInstrument):
    """Record the wall time of every pass run; :meth:`table` formats them.

    Nested runs (the passes inside a ``Sequential``) are recorded with their depth; the table
    sums the top-level passes of every pipeline run.
    """

    def __init__(self) -> None:
        self.records: list[tuple[str, int, float]] = []  # (name, depth, seconds)
        self._starts: list[tuple[str, float]] = []

    def enter_pass_ctx(self) -> None:
        self._starts.clear()

    def run_before_pass(self, mod: IRModule, info: object) -> None:
        self._starts.append((getattr(info, "name", "?"), time.perf_counter()))

    def run_after_pass(self, mod: IRModule, info: object) -> None:
        if not self._starts:
            return
        name, t0 = self._starts.pop()
        self.records.append((name, len(self._starts), time.perf_counter() - t0))

    def totals(self) -> dict[str, tuple[int, float]]:
        """Pass name -> (runs, total seconds), for passes that are not pipelines."""
        out: dict[str, tuple[int, float]] = {}
        for name, _depth, secs in self.records:
            if name == "sequential":
                continue
            n, s = out.get(name, (0, 0.0))
            out[name] = (n + 1, s + secs)
        return out

    def table(self) -> str:
        """A text table: pass, runs, total ms, share of the total."""
        totals = self.totals()
        whole = sum(s for _n, s in totals.values()) or 1e-12
        width = max([len("pass")] + [len(k) for k in totals])
        lines = [f"{'pass':<{width}}  runs   time (ms)  share"]
        for name, (n, secs) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
            lines.append(f"{name:<{width}}  {n:>4}  {secs * 1e3:>10.2f}  {secs / whole:>5.1%}")
        lines.append(f"{'total':<{width}}  {sum(n for n, _ in totals.values()):>4}  "
                     f"{whole * 1e3:>10.2f}  100.0%")
        return "\n".join(lines)

    def clear(self) -> None:
        """Forget every record."""
        self.records.clear()
        self._starts.clear()


class PrintIRAfter(PassInstrument):
    """Print the module (Relay text) after each pass whose name is in ``names`` (all if empty)."""

    def __init__(self, names: Iterable[str] = (), file: IO[str] | None = None,
                 show_types: bool = False) -> None:
        self.names = tuple(names)
        self.file = file
        self.show_types = show_types

    def run_after_pass(self, mod: IRModule, info: object) -> None:
        name = getattr(info, "name", "?")
        if name == "sequential" or (self.names and name not in self.names):
            return
        from relay_ir.printer import astext
        out = self.file if self.file is not None else sys.stdout
        print(f"// after pass {name}", file=out)
        print(astext(mod, show_types=self.show_types), file=out)


class WellFormedCheck(PassInstrument):
    """Check every pass output with :func:`relay_ir.well_formed.check`.

    Raises :class:`~relay_ir.errors.WellFormednessError` naming the pass that produced
    ill-formed IR. ``check_input=True`` also checks each pass input.
    """

    def __init__(self, check_input: bool = False) -> None:
        self.check_input = check_input
        self.checked = 0

    def _check(self, mod: IRModule, info: object, when: str) -> None:
        from relay_ir.well_formed import check
        name = getattr(info, "name", "?")
        try:
            check(mod)
        except WellFormednessError as e:
            raise WellFormednessError(f"{when} pass `{name}`: {e.message}", e.span,
                                      e.notes) from None
        self.checked += 1

    def run_before_pass(self, mod: IRModule, info: object) -> None:
        if self.check_input:
            self._check(mod, info, "before")

    def run_after_pass(self, mod: IRModule, info: object) -> None:
        if getattr(info, "name", "") == "sequential":
            return
        self._check(mod, info, "after")
