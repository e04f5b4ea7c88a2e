"""The error hierarchy.

Every error a user can cause (bad text, ill-typed programs, bad arguments, corrupt files) is a
:class:`DiagnosticError` carrying a :class:`~relay_ir.span.Span`; ``str(err)`` shows the source
line with a caret. Bugs in relay_ir itself are :class:`InternalError`, which stands apart.
"""
from __future__ import annotations

from typing import Sequence

from relay_ir.span import Span, escape_control


class DiagnosticError(Exception):
    """Base of every user-facing error: a message, an optional span and notes."""

    kind = "error"

    def __init__(self, message: str, span: Span | None = None, notes: Sequence[str] = ()):
        super().__init__(message)
        self.message = message
        self.span = span
        self.notes = tuple(notes)

    def __str__(self) -> str:
        head = f"{self.span}: {self.kind}: {self.message}" if self.span else self.message
        parts = [escape_control(head)]
        if self.span is not None:
            ctx = self.span.print_with_context()
            if ctx:
                parts.append(ctx)
        parts.extend(f"note: {escape_control(n)}" for n in self.notes)
        return "\n".join(parts)

    def with_span(self, span: Span | None) -> DiagnosticError:
        """Attach ``span`` if this error has none yet; returns self."""
        if self.span is None and span is not None:
            self.span = span
        return self


RelayIRError = DiagnosticError


class ParseError(DiagnosticError):
    """The text is not valid Relay text format."""

    kind = "parse error"


class TypeInferenceError(DiagnosticError):
    """The program is ill-typed."""

    kind = "type error"


class IncompleteTypeError(TypeInferenceError):
    """A type is not determined by the program (nothing inconsistent; add an annotation)."""


class IncompleteMatchError(TypeInferenceError):
    """A total ``match`` does not cover every value of its type (use ``match?`` or add cases)."""


class ShapeMismatchError(TypeInferenceError):
    """Shapes (or dtypes) given to an operator do not agree."""


class UnificationError(TypeInferenceError):
    """Two types that must be equal are not."""


class UnboundVarError(TypeInferenceError):
    """A variable or type variable is used out of scope."""


class WellFormednessError(DiagnosticError):
    """The IR breaks an invariant (a var bound twice, used out of scope, ...)."""

    kind = "ill-formed IR"


class PassError(DiagnosticError):
    """A pass failed; carries the pass name."""

    kind = "pass error"

    def __init__(self, message: str, span: Span | None = None, notes: Sequence[str] = (),
                 pass_name: str = ""):
        super().__init__(message, span, notes)
        self.pass_name = pass_name


class InterpreterError(DiagnosticError):
    """A runtime failure of a well-typed program (failed ``match?``, bad argument, ...)."""

    kind = "runtime error"


class LoweringError(DiagnosticError):
    """An operator or function could not be lowered to TVM."""

    kind = "lowering error"


class InternalError(Exception):
    """A bug in relay_ir itself (not the user's fault)."""


class ConfigError(DiagnosticError, ValueError):
    """A bad setting: a PassContext option or an environment variable of the wrong form."""


_ON = ("1", "on", "true", "yes")
_OFF = ("0", "off", "false", "no")


def env_switch(name: str, default: bool = True) -> bool:
    """An on/off environment variable: ``1``/``on``/``true``/``yes`` or ``0``/``off``/
    ``false``/``no`` (any case); unset or empty means ``default``; anything else is a
    :class:`ConfigError` naming the variable (a typo must not flip a switch silently)."""
    import os
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in _ON:
        return True
    if raw in _OFF:
        return False
    raise ConfigError(f"environment variable {name}={os.environ[name]!r}: expected one of "
                          f"{', '.join(_ON)} (on) or {', '.join(_OFF)} (off)")
