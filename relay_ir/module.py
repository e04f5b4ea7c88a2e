"""IRModule: the global functions and type definitions of a program. Immutable.

``mod["main"]`` (or ``mod[global_var]``) is a :class:`~relay_ir.expr.Function`; updates return
a new module (``mod.with_function("f", fn)``, ``mod.with_type(type_data)``).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Container, Iterator, Mapping

from relay_ir.expr import Constructor, Expr, Function, GlobalVar
from relay_ir.span import SourceFile
from relay_ir.ty import GlobalTypeVar, TypeData



def fresh_name(base: str, taken: Container[str], *, sep: str = "", first: int = 1) -> str:
    """``base`` if it is not in ``taken``, else the first of ``base{sep}{first}``,
    ``base{sep}{first + 1}``, ... that is not (the caller records it as taken)."""
    name, k = base, first
    while name in taken:
        name = f"{base}{sep}{k}"
        k += 1
    return name

class IRModule:
    """Global functions (by name) and ADT definitions (by name); never mutated once built."""

    __slots__ = ("_functions", "_global_vars", "_types", "_constructors", "source", "attrs")

    def __init__(self, functions: Mapping[GlobalVar | str, Function] | None = None,
                 type_definitions: Mapping[GlobalTypeVar | str, TypeData] | None = None,
                 source: SourceFile | None = None, attrs: Mapping[str, object] | None = None):
        self._functions: dict[str, Function] = {}
        self._global_vars: dict[str, GlobalVar] = {}
        self._types: dict[str, TypeData] = {}
        self._constructors: dict[str, Constructor] = {}
        self.source = source
        self.attrs = dict(attrs or {})
        for td in (type_definitions or {}).values():
            self._add_type(td)
        for key, fn in (functions or {}).items():
            gv = key if isinstance(key, GlobalVar) else GlobalVar(key)
            if not isinstance(fn, Function):
                raise TypeError(f"global @{gv.name_hint} must be a Function, got "
                                f"{type(fn).__name__}")
            self._functions[gv.name_hint] = fn
            self._global_vars[gv.name_hint] = gv

    def _add_type(self, td: TypeData) -> None:
        self._types[td.header.name_hint] = td
        for c in td.constructors:
            self._constructors[c.name_hint] = c

    # ----------------------------------------------------------------- reading
    @staticmethod
    def _key(key: GlobalVar | str) -> str:
        return key.name_hint if isinstance(key, GlobalVar) else key

    def __getitem__(self, key: GlobalVar | str) -> Function:
        name = self._key(key)
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(f"no global function @{name} in the module") from None

    def __contains__(self, key: object) -> bool:
        if isinstance(key, (GlobalVar, str)):
            return self._key(key) in self._functions
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._functions)

    def __len__(self) -> int:
        return len(self._functions)

    # read-only views, in definition order
    functions = property(lambda self: MappingProxyType(self._functions),
                         doc="Global name -> Function, in definition order (read-only view).")
    global_vars = property(lambda self: MappingProxyType(self._global_vars),
                           doc="Global name -> GlobalVar (read-only view).")
    type_definitions = property(lambda self: MappingProxyType(self._types),
                                doc="ADT name -> TypeData (read-only view).")
    constructors = property(lambda self: MappingProxyType(self._constructors),
                            doc="Constructor name -> Constructor (read-only view).")

    def get_global_var(self, name: str) -> GlobalVar:
        gv = self._global_vars.get(name)
        if gv is None:
            raise KeyError(f"no global function @{name} in the module")
        return gv

    def get_type(self, name: GlobalTypeVar | str) -> TypeData:
        key = name.name_hint if isinstance(name, GlobalTypeVar) else name
        try:
            return self._types[key]
        except KeyError:
            raise KeyError(f"no type definition {key} in the module") from None

    def get_constructor(self, name: str) -> Constructor:
        return self._constructors[name]

    # ----------------------------------------------------------------- updating
    def _copy(self) -> IRModule:
        m = IRModule.__new__(IRModule)
        m._functions = dict(self._functions)
        m._global_vars = dict(self._global_vars)
        m._types = dict(self._types)
        m._constructors = dict(self._constructors)
        m.source = self.source
        m.attrs = dict(self.attrs)
        return m

    def with_function(self, key: GlobalVar | str, fn: Function) -> IRModule:
        """A new module where global ``key`` is ``fn`` (added or replaced)."""
        m = self._copy()
        name = self._key(key)
        m._functions[name] = fn
        if name not in m._global_vars:
            m._global_vars[name] = key if isinstance(key, GlobalVar) else GlobalVar(name)
        return m

    def without_function(self, key: GlobalVar | str) -> IRModule:
        m = self._copy()
        name = self._key(key)
        m._functions.pop(name, None)
        m._global_vars.pop(name, None)
        return m

    def with_functions(self, functions: Mapping[GlobalVar | str, Function]) -> IRModule:
        """A new module with every function of ``functions`` added or replaced."""
        m = self._copy()
        for key, fn in functions.items():
            name = self._key(key)
            m._functions[name] = fn
            if name not in m._global_vars:
                m._global_vars[name] = key if isinstance(key, GlobalVar) else GlobalVar(name)
        return m

    def map_functions(self, f: Callable[[Function], Function]) -> IRModule:
        """A module with ``f`` applied to every global function (``self`` if none changed)."""
        changed = {}
        for name, fn in self._functions.items():
            new = f(fn)
            if new is not fn:
                changed[name] = new
        return self.with_functions(changed) if changed else self

    def with_type(self, td: TypeData) -> IRModule:
        """A new module with the ADT ``td`` added or replaced."""
        m = self._copy()
        old = m._types.get(td.header.name_hint)
        if old is not None:
            for c in old.constructors:
                m._constructors.pop(c.name_hint, None)
        m._add_type(td)
        return m

    def with_attrs(self, **attrs: object) -> IRModule:
        m = self._copy()
        m.attrs.update(attrs)
        return m

    @staticmethod
    def from_expr(expr: Expr, functions: Mapping[GlobalVar | str, Function] | None = None,
                  type_definitions: Mapping[GlobalTypeVar | str, TypeData] | None = None
                  ) -> IRModule:
        """A module whose ``main`` is ``expr`` (wrapped in a function over its free vars)."""
        from relay_ir.traversal import free_vars
        if not isinstance(expr, Function):
            expr = Function(tuple(free_vars(expr)), expr, span=expr.span)
        fns = dict(functions or {})
        fns["main"] = expr
        return IRModule(fns, type_definitions)

    def __repr__(self) -> str:
        try:
            from relay_ir.printer import astext
            return astext(self)
        except Exception as e:  # NOTE: repr must never raise
            return f"<IRModule with {len(self)} functions (unprintable: {e})>"
