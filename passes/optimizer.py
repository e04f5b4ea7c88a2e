"""The default optimization pipeline: ``passes.optimize(mod, opt_level=2)``.

NOTE: the module is named ``optimizer`` so that it never shadows the function ``optimize`` as
an attribute of ``relay_ir.passes``.
"""
from __future__ import annotations

from relay_ir.module import IRModule
from relay_ir.passes.pass_manager import PassContext, Sequential

# NOTE: names, in order. Passes above the context's opt_level are skipped by Sequential.
# Every pass keeps values (inf, nan, -0.0 included) and none holds a target's cost decision:
# combine-sums and share-weight-transpose run in runtime.build for llvm only
# (runtime/target_lowering.py).
# to-anf runs before infer-type so that the types simplify-expr needs are inferred once.
# The second half cleans what partial evaluation leaves (for a gradient program: the
# backpropagator closures and adjoint references it ran at compile time, and the zero adjoints
# the accumulations started from).
DEFAULT_PIPELINE: tuple[str, ...] = (
    "remove-unused-functions",  # 1  only what the entry reaches (skip the unused prelude)
    "to-anf",         # 0  canonical form: every intermediate value named once
    "infer-type",     # 0  types for the rules below
    "simplify-expr",  # 2  x*1, x+0, x*0, negative(negative(x)), reshape(reshape(x)), ...
    "fold-constant",  # 2  evaluate constant sub-programs with the reference implementations
    "inline",         # 1  functions called once or marked Inline=1
    "partial-eval",   # 1  static values, closures, known branches, store forwarding
    "dead-ref-elim",  # 1  references that no longer escape become lets (writes dropped)
    "merge-continuations",  # 1  one backpropagator closure per straight-line region
    "dce",            # 1  the closures and cells nothing reads any more
    "fold-constant",  # 2  constants exposed by inlining / partial evaluation
    "cse",            # 3  share identical pure computations
    "dce",            # 1  drop unused pure bindings (effects are kept)
    "remove-unused-functions",  # 1  globals whose every use was specialized away
    "to-anf",         # 0  back to the canonical form
)

# Partial evaluation unrolls one closure call per unit of fuel. A gradient program's backward
# pass is a chain of one closure per differentiable operator call, so the fuel grows with the
# program: at least MIN_FUEL, else FUEL_PER_NODE per expression node of the module. A loop is
# unrolled whole or not at all (its residual code is also bounded: partial_eval.UNROLL_BUDGET),
# and MIN_FUEL lets a loop of about 2000 steps unroll with its AD tape loop (two calls a step).
MIN_FUEL = 4096
FUEL_PER_NODE = 2


# The last few results of optimize, by identity, with their options: optimizing one of them
# again with the same options returns it as it is (a second run of the pipeline on a large
# unrolled program costs seconds). Strong references, so an id is never reused while listed.
RECENT_RESULTS = 8
_RECENT: dict[int, tuple[IRModule, tuple]] = {}


def pipeline_fuel(mod: IRModule) -> int:
    """The partial-evaluation fuel the default pipeline uses for ``mod`` (grows with its size)."""
    from relay_ir.traversal import post_order
    n = sum(sum(1 for _ in post_order(fn)) for fn in mod.functions.values())
    return max(MIN_FUEL, FUEL_PER_NODE * n)


def default_pipeline(names: tuple[str, ...] = DEFAULT_PIPELINE, *,
                     entry: str = "main", fuel: int = MIN_FUEL) -> Sequential:
    """The default pipeline as a :class:`Sequential` (``entry``: the global to keep; ``fuel``:
    partial evaluation's unrolling budget)."""
    from relay_ir.passes import get_pass
    out = []
    for n in names:
        if n == "remove-unused-functions":
            out.append(get_pass(n, entry=entry))
        elif n == "partial-eval":
            out.append(get_pass(n, fuel=fuel))
        else:
            out.append(get_pass(n))
    return Sequential(tuple(out), seq_name="optimize")


def optimize(mod: IRModule, opt_level: int = 2, *, disabled_pass: tuple[str, ...] = (),
             required_pass: tuple[str, ...] = (), entry: str = "main",
             fuel: int | None = None, unsafe_math: bool = False) -> IRModule:
    """Run the default pipeline; the result computes the same values as ``mod``.

    Pipeline (a pass runs when its level <= ``opt_level``)::

        remove-unused-functions (1) -> to-anf (0) -> infer-type (0) -> simplify-expr (2)
        -> fold-constant (2) -> inline (1) -> partial-eval (1) -> dead-ref-elim (1)
        -> merge-continuations (1) -> dce (1)
        -> fold-constant (2) -> cse (3) -> dce (1)
        -> remove-unused-functions (1) -> to-anf (0)

    When the module has the global ``entry`` (default ``main``), only it and what it reaches
    are kept (globals and type definitions); without it every global is kept. Passes that
    need types (simplify-expr) re-run ``infer-type`` first when the module changed. ``fuel``
    bounds partial evaluation's unrolling (default: :func:`pipeline_fuel`, which grows with the
    module so that the backward chain of a large gradient program is unrolled completely). The
    instruments of the current :class:`PassContext` (timing, printing, well-formedness
    checks) apply to every pass.

    A module that is itself one of the last few results of ``optimize`` with the same
    options (and PassContext config) is returned as it is: ``runtime.build``, which optimizes
    its input, does not run the pipeline again on a module the user already optimized.

    The result is cached on disk by the input's content and the options
    (``passes.optimize_cache``; ``RELAY_IR_OPT_CACHE=0`` turns it off): a hit returns exactly
    what the pipeline returns (text, spans, inferred types) without running any pass.

    Values are kept exactly, inf, nan and -0.0 included (results may differ only by float
    rounding). ``unsafe_math=True`` (the PassContext config key ``"unsafe_math"``, ``rly opt
    --unsafe-math``) opts into zero rules that change them: ``x * 0 => 0`` (nan for inf or
    nan ``x``), ``x + 0 => x`` (``-0.0 + 0`` is ``+0.0``), zeros through linear operators.
    Off by default, and unrelated to ``runtime.build(fast_math=...)``.
    """
    from relay_ir.passes import optimize_cache as oc
    outer = PassContext.current()
    sig = (opt_level, tuple(disabled_pass), tuple(required_pass), entry, fuel, unsafe_math,
           tuple(sorted(outer.config.items(), key=str)))
    seen = _RECENT.get(id(mod))
    if seen is not None and seen[0] is mod and seen[1] == sig:
        # NOTE: `mod` is itself what optimize returned with these options (modules are
        # immutable): runtime.build optimizes its input, and users optimize before building
        return mod
    cached = oc.enabled()
    nodes: list = []
    distinct = -1
    if cached:
        try:
            nodes, distinct = oc.walk(mod)
        except oc._Bad:          # NOTE: too much sharing to key on: no cache
            cached = False
    if fuel is None:
        # NOTE: pipeline_fuel(mod), from the count the cache key's walk made anyway
        fuel = max(MIN_FUEL, FUEL_PER_NODE * distinct) if cached else pipeline_fuel(mod)
    config = dict(outer.config)
    if unsafe_math:
        config["unsafe_math"] = True
    key = None
    if cached:
        try:
            key = oc.cache_key(mod, nodes, {
                "opt_level": opt_level, "disabled_pass": tuple(disabled_pass),
                "required_pass": tuple(required_pass), "entry": entry, "fuel": fuel,
                "config": sorted(config.items(), key=str)})
        except Exception:    # NOTE: a module the key cannot be taken of is not cached
            key = None
    if key is not None:
        hit = oc.lookup(key, mod, nodes)
        if hit is not None:
            oc.STATS["hits"] += 1
            return hit
        oc.STATS["misses"] += 1
    with PassContext(opt_level=opt_level, disabled_pass=tuple(disabled_pass),
                     required_pass=tuple(required_pass), instruments=outer.instruments,
                     config=config) as ctx:
        out = default_pipeline(entry=entry, fuel=fuel)(mod, ctx)
    if key is not None:
        try:
            oc.store(key, mod, nodes, out)
        except Exception:    # NOTE: failing to cache never fails the optimization
            pass
    _RECENT[id(out)] = (out, sig)
    while len(_RECENT) > RECENT_RESULTS:
        _RECENT.pop(next(iter(_RECENT)))
    return out
