"""A fast driver for the parser's Lark LALR table: own contextual lexer and shift/reduce loop.

:mod:`relay_ir.parser` runs Lark's LALR(1) parser with its builder as the internal
transformer. Lark's generic machinery (the contextual lexer's ``next_token`` with its line
counter, ``Token.__new__``, and ``ParserState.feed_token``) costs more than the builder itself.
:class:`FastDriver` replays exactly the same parse with less overhead:

* the lexer uses, per parser state, the very regular expression Lark's contextual lexer built for
  that state (same terminals, same priority order, same keyword-vs-identifier "unless" remapping),
  prefixed with a possessive whitespace skip (whitespace only ever lexes as the ignored ``WS``
  terminal), and builds :class:`lark.Token` objects with the same positions;
* the driver walks Lark's own parse table (shift / reduce / goto) and calls the builder's
  methods with the same arguments as Lark's rule callbacks do: Lark's generic child filters
  (drop anonymous tokens, splice inlined ``_rules``, return the only child of a ``?rule``) are
  replaced by closures specialised to each rule (:func:`_rule_entry`), and tokens no rule keeps
  (``,``, ``=``, ...) are not built at all; a run of one-child reductions (``atomic`` ->
  ``postfix`` -> ``binop`` -> ...) is taken in one step, memoized per (state below, top state,
  lookahead).

It is only a fast path for valid input: any deviation from the ordinary way -- no token
matches, an unexpected token, an exception in a callback -- raises :class:`Fallback`, and the
caller re-parses with Lark itself, so error messages and positions are exactly Lark's.
Nothing recurses: the driver is one loop, like Lark's.
"""
from __future__ import annotations

import functools
import operator
import re
from typing import Any, Callable

from lark import Token
from lark.parsers.lalr_analysis import Shift

__all__ = ["Fallback", "FastDriver", "STATS"]

#: How many parses took the fast path, and how many fell back to Lark (for tests and profiling).
STATS = {"fast": 0, "fallback": 0}

_END = "$END"
_WS_TAIL = re.compile(r"(?:[ \t\n]|\r\n)*+\Z")
# the ignored WS terminal must be exactly `([ \t\n]|\r\n)+`, which the lexer skips itself
_WS_PROBES = ((" ", True), ("\t", True), ("\n", True), ("\r\n", True), (" \t\r\n\n", True),
              ("\r", False), ("\n\r", False), ("\f", False), ("\v", False), ("\u00a0", False),
              ("a", False), ("", False))


class Fallback(Exception):
    """The fast path gave up; the caller must parse the same text with Lark."""


def _is_tree_builder(cb: Any, name: str) -> bool:
    from lark.tree import Tree
    return (isinstance(cb, functools.partial) and cb.func is Tree and not cb.keywords
            and len(cb.args) == 1 and cb.args[0] == name and name.startswith("_"))


def _rule_entry(rule: Any, cb: Any, singles: frozenset[str] = frozenset()) -> tuple[int, str, Any]:
    """``(size, origin name, callback)`` for a rule; callback None means "keep the one child".

    Lark's wrappers are replaced by equivalents that do the same with fewer Python calls:

    * ``ExpandSingleChild`` on a one-symbol rule returns its only child, so the reduction only
      changes the state (callback None);
    * an inlined ``_rule`` whose every alternative is one kept, non-inlined symbol (``singles``:
      ``_item: match | block | binop``) also keeps its child (callback None); its parents take
      that child as one child instead of splicing a one-item list;
    * any other inlined ``_rule`` reduces to the plain list of its (filtered) children instead
      of a ``Tree`` whose ``children`` the parent splices: Lark reads nothing else from it;
    * a ``ChildFilterLALR_NoPlaceholders`` (drop anonymous tokens, splice inlined rules)
      becomes a closure specialised to its index list; a builder method marked
      ``one_child_identity`` (it returns its only child unchanged) on a one-symbol rule that
      keeps one plain child becomes callback None.

    Raises ValueError for any other wrapper (the driver then stays unused).
    """
    from lark.parse_tree_builder import ChildFilterLALR_NoPlaceholders, ExpandSingleChild
    size = len(rule.expansion)
    name = str(rule.origin.name)
    splices = any(not sym.is_term and sym.name.startswith("_") for sym in rule.expansion)
    if type(cb) is ExpandSingleChild and size == 1 and not splices:
        return size, name, None
    if name in singles:
        return size, name, None
    if _is_tree_builder(cb, name) and not splices:
        return size, name, _same  # the children list is already a fresh list
    if type(cb) is ChildFilterLALR_NoPlaceholders:
        to_include = [(i, expand and str(rule.expansion[i].name) not in singles)
                      for i, expand in cb.to_include]
        nb = cb.node_builder
        if (size == 1 and len(to_include) == 1 and not to_include[0][1]
                and getattr(nb, "one_child_identity", False) is True):
            return size, name, None
        return size, name, _child_filter(to_include, nb, name, size)
    if splices or name.startswith("_"):
        raise ValueError(f"unsupported callback for rule {name}")
    return size, name, cb


def _single_inlined(callbacks: Any) -> frozenset[str]:
    """Inlined rules each of whose alternatives is exactly one kept, non-inlined symbol."""
    ok: dict[str, bool] = {}
    for rule, cb in callbacks.items():
        name = str(rule.origin.name)
        if not name.startswith("_"):
            continue
        exp = rule.expansion
        single = (len(exp) == 1 and _is_tree_builder(cb, name)
                  and (exp[0].is_term or not exp[0].name.startswith("_")))
        ok[name] = ok.get(name, True) and single
    return frozenset(n for n, good in ok.items() if good)


def _child_filter(to_include: list[tuple[int, bool]], nb: Any, name: str, size: int) -> Any:
    """A closure doing what Lark's child filter does for ``to_include``, then calling ``nb``.

    ``(i, True)`` entries are inlined rules: child ``i`` is a list whose items are spliced in.
    As in Lark, a leading inlined rule's list is extended in place, so a left-recursive
    repetition stays linear. For an inlined rule itself (``nb`` builds its ``Tree``) the
    filtered list is the result. When every child is kept as it is, the (fresh) list of
    children is passed on unchanged.
    """
    if _is_tree_builder(nb, name):
        nb = None
    elif name.startswith("_"):
        raise ValueError(f"unsupported callback for rule {name}")
    idx = tuple(i for i, _ in to_include)
    if not any(expand for _, expand in to_include):
        if idx == tuple(range(size)):
            return _same if nb is None else nb
        if len(idx) == 1:
            i0 = idx[0]
            if nb is None:
                return lambda c: [c[i0]]
            return lambda c: nb([c[i0]])
        if not idx:
            return (lambda c: []) if nb is None else (lambda c: nb([]))
        get = operator.itemgetter(*idx)
        if nb is None:
            return lambda c: list(get(c))
        return lambda c: nb(list(get(c)))
    if len(to_include) == 1:  # one inlined rule: its children are the children
        i0 = idx[0]
        if nb is None:
            return operator.itemgetter(i0)
        return lambda c: nb(c[i0])
    (a, ea), rest = to_include[0], tuple(to_include[1:])
    keep = nb if nb is not None else _same
    if len(rest) == 1:
        b, eb = rest[0]
        if ea and eb:
            def both(c: list) -> Any:
                out = c[a]
                out += c[b]
                return keep(out)
            return both
        if ea:
            def first(c: list) -> Any:
                out = c[a]
                out.append(c[b])
                return keep(out)
            return first

        def second(c: list) -> Any:
            out = [c[a]]
            out += c[b]
            return keep(out)
        return second

    def filtered(c: list) -> Any:
        out = c[a] if ea else [c[a]]
        for i, expand in rest:
            if expand:
                out += c[i]
            else:
                out.append(c[i])
        return keep(out)
    return filtered


def _dropped_terminals(callbacks: Any) -> frozenset[str]:
    """Terminals that no rule passes on to its callback (anonymous ``","``, ``"="``, ...)."""
    from lark.parse_tree_builder import ChildFilterLALR_NoPlaceholders
    seen: set[str] = set()
    kept: set[str] = set()
    for rule, cb in callbacks.items():
        if type(cb) is ChildFilterLALR_NoPlaceholders:
            included = {i for i, _ in cb.to_include}
        else:
            included = set(range(len(rule.expansion)))
        for i, sym in enumerate(rule.expansion):
            if sym.is_term:
                seen.add(sym.name)
                if i in included:
                    kept.add(sym.name)
    return frozenset(str(t) for t in seen - kept)


def _same(x: Any) -> Any:
    return x


def _refuse(text: str, pos: int) -> Any:
    raise Fallback()


def _lexer_source(bl: Any, from_scanner: bool) -> tuple[str, int, dict[str, Any]]:
    """(regex, flags, terminal callbacks) of one of Lark's per-state lexers: read off Lark's
    scanner (``from_scanner``; built on first use), or written from its terminals as Lark's
    ``Scanner`` writes it (one alternation of named groups) without building the scanner,
    which would compile the same big regex once more: per state, the larger part of a
    process's first parse."""
    if from_scanner:
        scanner = bl.scanner
        if len(scanner._mres) != 1:
            raise ValueError("unsupported lexer configuration")
        return scanner._mres[0].pattern, scanner._mres[0].flags, bl.callback
    from lark.lexer import _create_unless
    terminals, callbacks = _create_unless(bl.terminals, bl.g_regex_flags, bl.re, bl.use_bytes)
    pattern = "|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in terminals)
    return pattern, bl.g_regex_flags, callbacks


def _state_lexer(bl: Any) -> tuple[Any, dict[str, dict[str, str]]]:
    """``(match, unless)`` for one of Lark's per-state lexers: its scanner regex behind a
    whitespace skip, and the keyword remaps of its terminals; ValueError if it uses anything
    this driver does not replay."""
    if bl.ignore_types != frozenset({"WS"}):
        raise ValueError("unsupported lexer configuration")
    ws = re.compile(bl.terminals_by_name["WS"].pattern.to_regexp())
    if not all(bool(ws.fullmatch(probe)) == ok for probe, ok in _WS_PROBES):
        raise ValueError("unsupported whitespace terminal")
    own = getattr(bl, "_scanner", 1) is None and not bl.user_callbacks and not bl.use_bytes
    pattern, flags, callbacks = _lexer_source(bl, from_scanner=not own)
    unless: dict[str, dict[str, str]] = {}
    for tname, cb in callbacks.items():
        if type(cb).__name__ != "UnlessCallback":
            raise ValueError("unsupported lexer callback")
        remap: dict[str, str] = {}
        for t in cb.scanner.terminals:
            if t.pattern.type != "str" or t.pattern.flags:
                raise ValueError("unsupported keyword terminal")
            remap.setdefault(t.pattern.value, t.name)
        unless[tname] = remap
    try:  # NOTE: possessive `*+` needs Python 3.11
        rx = re.compile(r"(?:[ \t\n]|\r\n)*+(?:" + pattern + ")", flags)
    except re.error as e:
        raise ValueError(f"cannot compile the state's lexer: {e}") from None
    return rx.match, unless


class FastDriver:
    """A contextual lexer and LALR driver over a built Lark (``parser="lalr"``) instance.

    Raises ``ValueError`` when the Lark instance has features this driver does not replay
    (terminal callbacks, a lexer other than the contextual one, ignored terminals other than
    plain whitespace, ...); the caller then simply keeps using Lark.
    """

    def __init__(self, lark: Any) -> None:
        frontend = lark.parser
        lalr = frontend.parser.parser           # lark.parsers.lalr_parser._Parser
        table = lalr.parse_table
        callbacks = lalr.callbacks
        if any(isinstance(k, str) for k in callbacks):
            raise ValueError("terminal callbacks are not supported")
        lexer = getattr(frontend.lexer, "lexer", frontend.lexer)
        lexers = getattr(lexer, "lexers", None)
        if lexers is None:
            raise ValueError("only the contextual lexer is supported")
        nstates = max(table.states) + 1
        if set(table.states) != set(range(nstates)):
            raise ValueError("parse states must be 0..n-1")

        # rules: index -> (size of the expansion, origin name, callback)
        rule_index: dict[Any, int] = {}
        singles = _single_inlined(callbacks)
        rules: list[tuple[int, str, Any]] = []
        actions: list[dict[str, int]] = [{} for _ in range(nstates)]
        for st, acts in table.states.items():
            d = actions[st]
            for name, (action, arg) in acts.items():
                name = str(name)  # plain str keys: Token keys compare in Python
                if action is Shift:
                    d[name] = arg                  # shift / goto: the new state (>= 0)
                else:
                    idx = rule_index.get(arg)
                    if idx is None:
                        idx = rule_index[arg] = len(rules)
                        rules.append(_rule_entry(arg, callbacks[arg], singles))
                    d[name] = ~idx                 # reduce: a negative rule index
        self.actions = actions
        self.rules = rules
        self.dropped = _dropped_terminals(callbacks)
        self.start_states = dict(table.start_states)
        self.end_states = dict(table.end_states)
        #: (state below, top state, lookahead) -> state after a chain of one-child reductions
        self.unit_memo: dict[tuple[int, int, str], int] = {}

        # per-state lexers: Lark's own scanner regex, behind a whitespace skip. Each is built
        # on its state's first use (:meth:`_state_lexer`): a program meets a few of the ~100
        # lexers, and building them all cost ~35 ms per process (Lark's scanners included).
        self._lexers = lexers
        self._built: dict[int, tuple[Any, dict[str, dict[str, str]]]] = {}
        self.lex_match: list[Any] = [self._first_use(st) for st in range(nstates)]
        self.lex_unless: list[dict[str, dict[str, str]]] = [{} for _ in range(nstates)]
        newline_types: set[str] = set()
        for st in range(nstates):
            newline_types |= lexers[st].newline_types
        self.newline_types = frozenset(newline_types - {"WS"})

    def _first_use(self, st: int) -> Callable[[str, int], Any]:
        def match(text: str, pos: int) -> Any:
            return self._state_lexer(st)(text, pos)
        return match

    def _state_lexer(self, st: int) -> Callable[[str, int], Any]:
        """Build (once per distinct Lark lexer) and install the matcher of state ``st``; a
        lexer this driver cannot replay makes every parse reaching it fall back to Lark."""
        bl = self._lexers[st]
        entry = self._built.get(id(bl))
        if entry is None:
            try:
                entry = _state_lexer(bl)
            except ValueError:
                entry = (_refuse, {})
            self._built[id(bl)] = entry
        self.lex_match[st], self.lex_unless[st] = entry
        return entry[0]

    def _unit_chain(self, under: int, origin: str, typ: str) -> int:
        """The state after a one-child reduction to ``origin`` above state ``under`` and all
        the one-child reductions that follow it on the same lookahead ``typ``.

        Those reductions all replace the top state and leave ``under`` below it, so the
        result depends only on (``under``, the top state, ``typ``); :meth:`_parse` memoizes it.
        """
        actions, rules = self.actions, self.rules
        state = actions[under][origin]
        while True:
            act = actions[state].get(typ)
            if act is None or act >= 0:
                return state
            _, origin, cb = rules[~act]
            if cb is not None:
                return state
            state = actions[under][origin]

    def parse(self, text: str, start: str) -> Any:
        """Parse ``text`` from start symbol ``start``; raises :class:`Fallback` on any trouble."""
        try:
            return self._parse(text, start)
        except Fallback:
            raise
        except Exception as e:  # a callback or the lexer objected: let Lark redo it
            raise Fallback() from e

    def _parse(self, text: str, start: str) -> Any:
        actions = self.actions
        rules = self.rules
        lex_match = self.lex_match
        lex_unless = self.lex_unless
        newline_types = self.newline_types
        end_state = self.end_states[start]
        state = self.start_states[start]
        states = [state]
        values: list[Any] = []
        push_state = states.append
        push_value = values.append
        new_str = str.__new__
        count = text.count
        rindex = text.rindex
        dropped = self.dropped
        unit_memo = self.unit_memo
        pos = 0
        line = 1
        line_start = 0
        at_end = False
        while True:
            m = lex_match[state](text, pos)
            if m is not None:
                s, e = m.span(m.lastindex)
                typ = m.lastgroup
                if s != pos:
                    nl = count("\n", pos, s)
                    if nl:
                        line += nl
                        line_start = rindex("\n", pos, s) + 1
                value = text[s:e]
                unl = lex_unless[state]
                if unl and typ in unl:
                    typ = unl[typ].get(value, typ)
                if typ in dropped:  # no rule keeps it: a placeholder stands in for the token
                    tok = None
                    if typ in newline_types and "\n" in value:
                        line += value.count("\n")
                        line_start = s + value.rindex("\n") + 1
                else:
                    tok = new_str(Token, value)
                    tok.type = typ
                    tok.start_pos = s
                    tok.value = value
                    tok.line = line
                    tok.column = s - line_start + 1
                    if typ in newline_types and "\n" in value:
                        line += value.count("\n")
                        line_start = s + value.rindex("\n") + 1
                    tok.end_line = line
                    tok.end_column = e - line_start + 1
                    tok.end_pos = e
                pos = e
            else:
                if _WS_TAIL.match(text, pos) is None:
                    raise Fallback()
                typ = _END
                tok = None
                at_end = True
            acts = actions[state]
            while True:
                act = acts.get(typ)
                if act is None:
                    raise Fallback()
                if act >= 0:
                    if at_end:
                        raise Fallback()
                    state = act
                    push_state(act)
                    push_value(tok)
                    break
                size, origin, cb = rules[~act]
                if cb is None:  # a one-child rule that returns its child
                    if at_end:
                        state = states[-1] = actions[states[-2]][origin]
                        if state == end_state:
                            return values[-1]
                    else:  # the whole chain of such reductions at once
                        key = (states[-2], state, typ)
                        nxt = unit_memo.get(key)
                        if nxt is None:
                            nxt = unit_memo[key] = self._unit_chain(states[-2], origin, typ)
                        state = states[-1] = nxt
                    acts = actions[state]
                    continue
                if size:
                    children = values[-size:]
                    del states[-size:]
                    del values[-size:]
                else:
                    children = []
                result = cb(children)
                state = actions[states[-1]][origin]
                push_state(state)
                push_value(result)
                if at_end and state == end_state:
                    return result
                acts = actions[state]
