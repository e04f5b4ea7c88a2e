"""The standard prelude: ``relay_ir/std/prelude.rly`` parsed once into an IRModule.

The prelude defines these ADTs::

    type List[A] { Cons(A, List[A]), Nil }
    type Option[A] { Some(A), None }
    type Tree[A] { Rose(A, List[Tree[A]]) }          -- rose trees
    type nat { zero, succ(nat) }                      -- Peano naturals

and these functions (all polymorphic ones quantify over their ``[..]`` parameters)::

    @id[A]          (A) -> A
    @compose[A,B,C] (fn (B) -> C, fn (A) -> B) -> fn (A) -> C      (g runs first)
    @flip[A,B,C]    (fn (A, B) -> C) -> fn (B, A) -> C
    @hd[A]          (List[A]) -> A                  (partial: fails on Nil)
    @tl[A]          (List[A]) -> List[A]            (partial: fails on Nil)
    @nth[A]         (List[A], int32) -> A
    @length[A]      (List[A]) -> int32
    @update[A]      (List[A], int32, A) -> List[A]
    @map[A,B]       (fn (A) -> B, List[A]) -> List[B]
    @foldl[A,B]     (fn (A, B) -> A, A, List[B]) -> A
    @foldr[A,B]     (fn (A, B) -> B, B, List[A]) -> B
    @foldr1[A]      (fn (A, A) -> A, List[A]) -> A  (partial: fails on Nil)
    @sum            (List[int32]) -> int32
    @concat[A]      (List[A], List[A]) -> List[A]
    @filter[A]      (fn (A) -> bool, List[A]) -> List[A]
    @zip[A,B]       (List[A], List[B]) -> List[(A, B)]   (truncates to the shorter list)
    @rev[A]         (List[A]) -> List[A]
    @map_accumr[A,B,C] (fn (A, B) -> (A, C), A, List[B]) -> (A, List[C])
    @map_accuml[A,B,C] (fn (A, B) -> (A, C), A, List[B]) -> (A, List[C])
    @unfoldr[A,B]   (fn (A) -> Option[(A, B)], A) -> List[B]
    @unfoldl[A,B]   (fn (A) -> Option[(A, B)], A) -> List[B]
    @tmap[A,B]      (fn (A) -> B, Tree[A]) -> Tree[B]
    @size[A]        (Tree[A]) -> int32
    @iterate[A]     (fn (A) -> A, int32) -> fn (A) -> A
    @nat_to_int     (nat) -> int32
    @int_to_nat     (int32) -> nat
    @nat_double     (nat) -> nat
    @nat_add        (nat, nat) -> nat
    @nat_nth[A]     (List[A], nat) -> A
    @nat_update[A]  (List[A], nat, A) -> List[A]
    @nat_iterate[A] (fn (A) -> A, nat) -> fn (A) -> A

``@map_accumr`` and ``@map_accuml`` return the outputs in list order (as Haskell's
``mapAccumR`` / ``mapAccumL``); ``@unfoldl`` is ``@rev`` of ``@unfoldr``.

Programs import the prelude with ``rly.parse(text, prelude=True)`` (or ``rly check
--prelude`` / ``rly run --prelude``): the resulting module holds the prelude's definitions plus
the program's, so the program may use ``Cons``, ``@map`` and friends directly.
"""
from __future__ import annotations

import functools
import os

from relay_ir.module import IRModule

PRELUDE_PATH = os.path.join(os.path.dirname(__file__), "std", "prelude.rly")


def prelude_text() -> str:
    """The text of ``std/prelude.rly``."""
    with open(PRELUDE_PATH, encoding="utf-8") as f:
        return f.read()


@functools.lru_cache(maxsize=None)
def prelude_module() -> IRModule:
    """The prelude as parsed (untyped; cached: IRModules are immutable)."""
    from relay_ir.parser import parse
    return parse(prelude_text(), source_name="prelude.rly")


@functools.lru_cache(maxsize=None)
def typed_prelude_module() -> IRModule:
    """The prelude after type inference (cached)."""
    from relay_ir.passes.type_infer import InferType
    return InferType()(prelude_module())
