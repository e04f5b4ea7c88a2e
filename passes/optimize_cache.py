"""The optimize cache: ``passes.optimize``'s result kept on disk, by its input's content.

``passes.optimize`` of a gradient program is most of the Python time of a training step's
first build (~45 ms of the W2 step's ~200 ms in a fresh process). Like jax's persistent
cache, which traces again and then looks the compiled program up, the program is still
parsed and differentiated, but optimizing it again is a look-up: ``optimize-<key>.json``
under ``optimize/`` in the kernel cache directory (``RELAY_IR_CACHE_DIR``).

**Exactly what optimize returns.** An entry holds the result's canonical text plus, for every
expression node of the result (in the order of :func:`walk`: each global by name,
children before parents), its ``span`` (as the position of the input node that carried the
same span: spans are never stored, they are taken from the module being optimized, so errors
point into the caller's source), its inferred type (``checked_type_``), a call's type arguments and a
variable's own name (the printer renames variables that share one). A hit parses the text and
rebuilds each node with its span and type. An entry is written only when that rebuild,
done right after the pipeline ran, reproduces the result exactly: the same text,
structurally equal, and node for node the same class, span and inferred type (else the
result is simply not cached). What a hit does not keep: which sub-expressions other than
variables were one shared object (a constant used twice is two equal nodes). Modules whose
result has ADT definitions, ``match`` or calls of globals are not cached.

**Key** (SHA-256): relay_ir's code (:func:`~relay_ir.runtime.kernel_cache.source_digest`),
the input's canonical text and attributes, which of its nodes share spans and their inferred
types (position by position), and the options (``opt_level``, ``disabled_pass``,
``required_pass``, ``entry``, ``fuel``, the PassContext config: ``unsafe_math``).

A missing, unreadable, corrupt (checksum) or inconsistent entry is ignored (and deleted):
the pipeline runs. ``RELAY_IR_OPT_CACHE=0`` turns the cache off (the test suite does:
tests/conftest.py); a hit runs no pass, so a PassContext's instruments see none.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

from relay_ir.expr import Call, Constructor, Expr, Function, GlobalVar, Match, Op, Var
from relay_ir.module import IRModule
from relay_ir.traversal import children

ENV_VAR = "RELAY_IR_OPT_CACHE"
FORMAT_VERSION = 1
SUBDIR = "optimize"
#: the most the entries may take, in MiB (``RELAY_IR_OPT_CACHE_MB``); past it the least
#: recently stored or hit entries are deleted
SIZE_ENV_VAR = "RELAY_IR_OPT_CACHE_MB"
DEFAULT_SIZE_MB = 1024.0

#: counters of this process (tests read them)
STATS: dict[str, int] = {"hits": 0, "misses": 0, "stored": 0, "not_cacheable": 0,
                         "rebuilt_corrupt": 0, "evicted": 0}


def enabled() -> bool:
    """Whether the optimize cache is on (``RELAY_IR_OPT_CACHE``: ``0``, ``off``, ``false``
    or ``no`` turn it off; on by default; another value is a DiagnosticError)."""
    from relay_ir.errors import env_switch
    return env_switch(ENV_VAR)


class _Bad(Exception):
    """An entry that does not rebuild (corrupt or inconsistent)."""


#: nodes a walk visits once (binders and references to shared objects); every other node is
#: visited at each of its occurrences, so that two structurally equal programs give the same
#: sequence whatever sub-expressions they share
_ONCE = (Var, GlobalVar, Op, Constructor)


def walk(mod: IRModule) -> tuple[list[Expr], int]:
    """(the nodes of every global, by name, children before parents, each occurrence of a
    node that is not a variable, global, operator or constructor counted; the number of
    distinct nodes per global, summed: :func:`~relay_ir.passes.optimizer.pipeline_fuel`'s
    count). _Bad when sharing makes the walk more than 8 times longer than the module."""
    out: list[Expr] = []
    distinct = 0
    for name in sorted(mod.functions):
        seen: set[int] = set()
        every: set[int] = set()
        stack: list[tuple[Expr, bool]] = [(mod[name], False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                out.append(node)
                continue
            if isinstance(node, _ONCE):
                if id(node) in seen:
                    continue
                seen.add(id(node))
            every.add(id(node))
            stack.append((node, True))
            for c in reversed(children(node)):
                stack.append((c, False))
            if len(out) > 8 * len(every) + 10000:
                raise _Bad("sub-expressions shared too often")
        distinct += len(every)
    return out, distinct


def _nodes(mod: IRModule) -> list[Expr]:
    return walk(mod)[0]


def _type_texts(nodes: list[Expr]) -> tuple[list[str], list[Any]]:
    """(distinct types as text, for each node the index of its inferred type or -1 -- for a
    call with type arguments, ``[that, [indices of its type arguments]]``)."""
    from relay_ir.printer import astext
    index: dict[Any, int] = {}
    texts: list[str] = []

    def of(t: Any) -> int:
        k = index.get(t)
        if k is None:
            k = index[t] = len(texts)
            texts.append(astext(t))
        return k
    out: list[Any] = []
    for n in nodes:
        t = n.checked_type_
        k = -1 if t is None else of(t)
        if type(n) is Call and n.type_args:
            out.append([k, [of(a) for a in n.type_args]])
        else:
            out.append(k)
    return texts, out


def _span_firsts(nodes: list[Expr]) -> list[int]:
    """For each node, the position of the first node with an equal span (-1: no span)."""
    first: dict[Any, int] = {}
    out = []
    for i, n in enumerate(nodes):
        s = n.span
        out.append(-1 if s is None else first.setdefault(s, i))
    return out


def cache_key(mod: IRModule, nodes: list[Expr], options: dict[str, Any]) -> str:
    """The key of ``optimize(mod, **options)`` (module docstring)."""
    from relay_ir.printer import astext
    from relay_ir.runtime.kernel_cache import source_digest
    h = hashlib.sha256(f"{FORMAT_VERSION}|{source_digest()}|".encode())
    h.update(repr(sorted(options.items(), key=str)).encode())
    h.update(repr(sorted(mod.attrs.items(), key=str)).encode())
    texts, tys = _type_texts(nodes)
    h.update(json.dumps([_span_firsts(nodes), texts, tys]).encode())
    h.update(astext(mod).encode())
    return h.hexdigest()[:40]


def entry_path(key: str) -> str:
    """Where the entry of ``key`` is kept."""
    from relay_ir.runtime.kernel_cache import cache_dir
    return os.path.join(cache_dir(), SUBDIR, f"optimize-{key}.json")


def _checksum(text: str, types: list[str], table: list, names: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps([text, types, table, names]).encode()).hexdigest()


def _rebuild(mod: IRModule, in_nodes: list[Expr], text: str, types: list[str],
             table: list, names: dict[str, str]) -> IRModule:
    """The module of an entry: ``text`` parsed, every node given its span (from
    ``in_nodes``) and inferred type."""
    from relay_ir.parser import parse, parse_type
    parsed = parse(text, source_name="<optimize cache>")
    if parsed.type_definitions:
        raise _Bad("type definitions")
    tys: list[Any] = []
    if types:
        # NOTE: one parse for all of them: a tuple type of the types
        whole = parse_type("(" + ", ".join(types) + ("," if len(types) == 1 else "") + ")")
        tys = list(whole.fields)  # type: ignore[attr-defined]
        if len(tys) != len(types):
            raise _Bad("types")
    new: dict[int, Expr] = {}
    funcs: dict[str, Function] = {}
    nodes = _nodes(parsed)
    if len(nodes) != len(table):
        raise _Bad("the table does not fit the text")
    for pos, node in enumerate(nodes):
        si, ti = table[pos]
        if isinstance(node, Op):
            if si != -1 or ti != -1:
                raise _Bad("an operator with a span or type")
            new[id(node)] = node
            continue
        if isinstance(node, (Match, GlobalVar)):
            raise _Bad("match or global")
        targs: list = []
        if isinstance(ti, list):
            ti, targs = ti
        changes: dict[str, Any] = {
            "span": in_nodes[si].span if si >= 0 else None,
            "checked_type_": tys[ti] if ti >= 0 else None}
        hint = names.get(str(pos))
        if hint is not None:
            if not isinstance(node, Var):
                raise _Bad("a name for a node that is not a variable")
            changes["name_hint"] = hint
        if targs:
            if not isinstance(node, Call):
                raise _Bad("type arguments on a node that is not a call")
            changes["type_args"] = tuple(tys[k] for k in targs)
        for f in dataclasses.fields(node):
            v = getattr(node, f.name)
            if isinstance(v, Expr):
                changes[f.name] = new[id(v)]
            elif isinstance(v, tuple) and v and isinstance(v[0], Expr):
                changes[f.name] = tuple(new[id(x)] for x in v)
        new[id(node)] = dataclasses.replace(node, **changes)
    for gname in parsed.functions:
        funcs[gname] = new[id(parsed[gname])]  # type: ignore[assignment]
    # NOTE: globals the input has keep their GlobalVar objects (as the passes keep them)
    return IRModule({(mod.get_global_var(n) if n in mod.functions else n): funcs[n]
                     for n in parsed.functions}, source=mod.source, attrs=mod.attrs)


def difference(out: IRModule, got: IRModule, mod: IRModule) -> str | None:
    """Where ``got`` differs from ``out`` (the result of optimizing ``mod``); None if it is
    exactly ``out``: text, structure, and node by node class, span, inferred type, variable
    name and annotation, type arguments, operator identity."""
    from relay_ir.printer import astext
    from relay_ir.structural import structural_equal
    if list(out.functions) != list(got.functions):
        return "globals"
    if out.source is not mod.source or out.attrs != got.attrs:
        return "module source or attributes"
    if astext(out) != astext(got):
        return "text"
    for name in out.functions:
        if out.get_global_var(name) is not got.get_global_var(name):
            return f"the GlobalVar of @{name}"
        if not structural_equal(out[name], got[name]):
            return f"structure of @{name}"
    a, b = _nodes(out), _nodes(got)
    if len(a) != len(b):
        return "number of nodes"
    for i, (x, y) in enumerate(zip(a, b)):
        if type(x) is not type(y) or x.span != y.span or x.checked_type_ != y.checked_type_:
            return f"node {i} ({type(x).__name__}): class, span or inferred type"
        if isinstance(x, Var) and (x.name_hint != y.name_hint or  # type: ignore[attr-defined]
                                   x.type_annotation != y.type_annotation):  # type: ignore
            return f"node {i}: variable %{x.name_hint}"
        if isinstance(x, Call) and x.type_args != y.type_args:  # type: ignore[attr-defined]
            return f"node {i}: type arguments"
        if isinstance(x, Op) and x is not y:
            return f"node {i}: operator"
    return None


def lookup(key: str, mod: IRModule, in_nodes: list[Expr]) -> IRModule | None:
    """The cached result for ``key``, or None (a bad entry is deleted)."""
    path = entry_path(key)
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read()
    except OSError:
        return None
    try:
        e = json.loads(raw)
        if e.get("format") != FORMAT_VERSION or \
                e["checksum"] != _checksum(e["text"], e["types"], e["table"], e["names"]):
            raise _Bad("checksum")
        out = _rebuild(mod, in_nodes, e["text"], e["types"], e["table"], e["names"])
        try:
            os.utime(path)      # NOTE: recently used: the last to be evicted
        except OSError:
            pass
        return out
    except Exception:    # NOTE: whatever is wrong with an entry, the pipeline runs instead
        STATS["rebuilt_corrupt"] += 1
        try:
            os.remove(path)
        except OSError:
            pass
        return None


def store(key: str, mod: IRModule, in_nodes: list[Expr], out: IRModule) -> bool:
    """Write the entry of ``out`` if its rebuild reproduces it exactly (module docstring)."""
    from relay_ir.printer import astext
    if out.type_definitions or out.source is not mod.source or out.attrs != mod.attrs:
        STATS["not_cacheable"] += 1
        return False
    try:
        nodes = _nodes(out)
    except _Bad:
        STATS["not_cacheable"] += 1
        return False
    first: dict[Any, int] = {}
    for i, n in enumerate(in_nodes):
        if n.span is not None:
            first.setdefault(n.span, i)
    table = []
    for n in nodes:
        if isinstance(n, (Match, GlobalVar)):
            STATS["not_cacheable"] += 1
            return False
        si = -1
        if n.span is not None:
            si = first.get(n.span, -2)
            if si == -2:        # NOTE: a span the input does not have
                STATS["not_cacheable"] += 1
                return False
        table.append(si)
    types, tys = _type_texts(nodes)
    table = [[si, ti] for si, ti in zip(table, tys)]
    text = astext(out)
    # NOTE: the printer renames variables that share a name (%y, %y1): their own names
    names = {str(i): n.name_hint for i, n in enumerate(nodes) if type(n) is Var}
    try:
        got = _rebuild(mod, in_nodes, text, types, table, names)
        ok = difference(out, got, mod) is None
    except Exception:
        ok = False
    if not ok:
        STATS["not_cacheable"] += 1
        return False
    data = json.dumps({"format": FORMAT_VERSION, "text": text, "types": types,
                       "table": table, "names": names,
                       "checksum": _checksum(text, types, table, names)})
    from relay_ir.runtime.kernel_cache import write_atomic
    path = entry_path(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, data)
    except OSError:
        return False
    STATS["stored"] += 1
    from relay_ir.runtime.kernel_cache import evict_lru, size_limit_mb
    STATS["evicted"] += evict_lru(os.path.dirname(path), "optimize-", ".json",
                                  size_limit_mb(SIZE_ENV_VAR, DEFAULT_SIZE_MB), keep=path)
    return True


def clear(directory: str) -> int:
    """Delete every optimize-cache entry under the cache ``directory``; the number removed."""
    from relay_ir.runtime.kernel_cache import remove_entries
    return remove_entries(directory, SUBDIR, "optimize-")
