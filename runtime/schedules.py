"""CPU schedules (and the CUDA dlight path) for fused TIR PrimFuncs.

Every fused group arrives as one PrimFunc made by ``te.create_prim_func``. :func:`schedule_cpu`
inlines the injective producers (one loop nest per group), then picks a schedule by the shape
of what is left:

* injective only: loops fused, split by 16 lanes, outer loop parallel, inner vectorized;
* a matmul (dense / matmul / batch_matmul, ``kind="matmul"``): 6x32 register tiles, k split
  by 4, the B panel packed ``[N/nr, K, nr]``, the fused epilogue placed at the tile,
  parallel over tiles (TVM_NOTES section 4b);
* a reduction over the contiguous (innermost) axes: rfactor into 16 lanes, vectorized,
  parallel over rows, the epilogue computed at the row loop (section 4c);
* a conv2d with NCHW output (``kind="conv"``, :func:`schedule_conv_channels`): vectorized
  over a block of 16 (8, 4) output channels, the weight read in place (``IHWO``) or packed
  ``[O/16, I, kh, kw, 16]`` per call (``OIHW``), a register tile of up to 8 output columns, kernel loops inside, parallel over
  (batch, channel block, row), the epilogue computed per tile; any width, stride, padding,
  dilation and groups;
* any other reduction (column sums, conv2d NHWC, pooling): the innermost spatial axis
  tiled and vectorized inside the reduction loops, the next spatial axis unrolled by 4 for
  register reuse, the outer spatial loops fused and parallel;
* several reductions in a row-wise group (softmax, log_softmax, layer_norm): each rfactored,
  all blocks computed under the output's row loop, which runs in parallel.

Each step is tried on a fresh schedule and falls back to a simpler one on
``ScheduleError`` (a correct, parallel schedule always exists). :func:`schedule_cuda` runs
TVM's dlight default rules (Matmul, Reduction, GeneralReduction, Fallback; not GEMV).

Alignment: ``te.create_prim_func`` declares every parameter buffer 64-byte aligned, and LLVM
then emits aligned vector loads and stores (``align 64``) that fault on the 16-byte aligned
arrays numpy allocates. CPU kernels get their parameters re-declared with the element size as
alignment (:func:`unaligned_params`) before scheduling, so the vector code uses unaligned
loads (as fast as aligned ones on aligned data on AVX2 / AVX-512) and the executors pass
contiguous arrays of any alignment zero-copy.
"""
from __future__ import annotations

from typing import Any, Callable

LANES = 16

# Kernels whose iteration space (sum over blocks of the product of loop extents) is below
# this run on one thread when the caller asks (``schedule_cpu(..., serial_below=)``): waking
# TVM's thread pool costs 10-20 us, far more than a 1x128 vector op or a 1x256x640 matmul
# takes on one core (the scalar- and vector-sized kernels of control-heavy programs).
SERIAL_BELOW = 1 << 18
_SERIAL = [False]


def _parallel(sch: Any, loop: Any) -> None:
    """``sch.parallel(loop)`` unless the kernel being scheduled is small (then: nothing)."""
    if not _SERIAL[0]:
        sch.parallel(loop)


def work_volume(func: Any) -> int | None:
    """The iteration-space size of an unscheduled PrimFunc (None when symbolic)."""
    from tvm import s_tir
    sch = s_tir.Schedule(func)
    total = 0
    for b in blocks(sch):
        vol = 1
        for loop in sch.get_loops(b):
            e = _extent(sch, loop)
            if e is None:
                return None
            vol *= e
        total += vol
    return total


def _tvm() -> Any:
    import tvm
    return tvm


def unaligned_params(func: Any) -> Any:
    """``func`` with each parameter buffer declared aligned to its element size only.

    The buffers keep their shapes, strides and (zero) offsets; the body's uses are
    re-pointed to the new declarations. Internal allocations stay 64-byte aligned.
    """
    import tvm_ffi
    from tvm import tirx
    remap = {}
    for p in func.params:
        t = p.ty
        if not isinstance(t, tirx.buffer.BufferType):
            continue
        dt = tvm_ffi.dtype(str(t.dtype))
        size = max(1, (int(dt.bits) * int(dt.lanes) + 7) // 8)
        if int(t.data_alignment) == size:
            continue
        remap[p] = tirx.decl_buffer(list(t.shape), str(t.dtype), p.name,
                                    strides=list(t.strides), elem_offset=t.elem_offset,
                                    data_alignment=size, offset_factor=1)
    if not remap:
        return func

    def on_func(fn: Any, m: Any) -> Any:
        for old, new in remap.items():
            m.var_remap_set(old, new)
        return m.default_mutate(fn)
    return tvm_ffi.structural_mutate(func, [(tirx.PrimFunc, on_func)])


def blocks(sch: Any) -> list[Any]:
    """The child blocks of the root block, in program order."""
    return list(sch.get_child_blocks(sch.get_sblock("root")))


def inline_all(sch: Any) -> None:
    """Inline every non-output block that can be inlined (injective producers / epilogues)."""
    from tvm import s_tir
    outs = {sch.get(b).name_hint for b in sch.get_output_blocks(sch.get_sblock("root"))}
    # NOTE: whole passes in program order (a chain inlines in one pass); a pass that inlines
    # nothing ends the loop. Restarting after every inline would be quadratic in the blocks.
    for prim in ("compute_inline", "reverse_compute_inline"):
        progress = True
        while progress:
            progress = False
            for b in blocks(sch):
                if sch.get(b).name_hint in outs or _is_reduction(sch, b):
                    continue
                try:
                    getattr(sch, prim)(b)
                    progress = True
                except s_tir.ScheduleError:
                    pass


def _iter_types(sch: Any, b: Any) -> list[int]:
    return [int(iv.iter_type) for iv in sch.get(b).iter_vars]


def _is_reduction(sch: Any, b: Any) -> bool:
    return 2 in _iter_types(sch, b)


def _extent(sch: Any, loop: Any) -> int | None:
    ext = sch.get(loop).extent
    return int(ext.value) if hasattr(ext, "value") else None


def _vars_in(expr: Any) -> set[str]:
    from tvm import tirx
    return {v.name for v in tirx.analysis.undefined_vars(expr, [])}


def _largest_divisor(n: int | None, choices: tuple[int, ...] = (16, 8, 4)) -> int | None:
    if n is None:
        return None
    for c in choices:
        if n % c == 0 and n >= c:
            return c
    return None


# ----------------------------------------------------------------------------- injective
def schedule_injective(sch: Any, b: Any) -> None:
    """Fuse all loops of ``b``, split by 16, parallel outer, vectorize inner."""
    loops = sch.get_loops(b)
    if not loops:
        return
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    ext = _extent(sch, fused)
    if ext is not None and ext < LANES:
        return
    if ext is not None and ext < 4 * LANES:
        sch.vectorize(sch.split(fused, [None, LANES])[1]) if ext % LANES == 0 else None
        return
    o, v = sch.split(fused, [None, LANES])
    _parallel(sch, o)
    sch.vectorize(v)


# ----------------------------------------------------------------------------- matmul
def schedule_matmul(sch: Any, blk: Any, mr: int = 6, nr: int = 32, kc: int = 4,
                    pack: bool | None = None) -> None:
    """Register-tiled, B-packed, parallel matmul with its epilogue at the tile (4b).

    ``pack`` (default: when B is [N, K], read down columns otherwise, or larger than 2 MB)
    packs the B panel per call.
    """
    itypes = _iter_types(sch, blk)
    if itypes.count(2) != 1 or itypes[-1] != 2 or len(itypes) not in (3, 4):
        raise ValueError("not a matmul block")
    loops = sch.get_loops(blk)
    batch = loops[:-3]
    i, j, k = loops[-3:]
    n_ext = _extent(sch, j)
    if n_ext is not None and n_ext < nr:
        nr = 16 if n_ext > 8 else 8       # narrow outputs (logits): do not pad to 32 lanes
    elif n_ext is not None and n_ext % nr != 0:
        nr = _largest_divisor(n_ext, (16, 8)) or nr
    blk_stmt = sch.get(blk)
    kvar = blk_stmt.iter_vars[-1].var.name
    b_region = blk_stmt.reads[1].region
    b_is_nk = kvar in _vars_in(b_region[-1].min)
    k_ext = _extent(sch, k)
    if pack is None:
        # B read down its columns ([N, K]) always needs the panel; [K, N] only once B no
        # longer fits in L2 (measured: packing costs more than it saves below ~2 MB)
        big = n_ext is None or k_ext is None or n_ext * k_ext * 4 > (2 << 20)
        pack = b_is_nk or big
    pack = pack and n_ext is not None and n_ext % nr == 0
    if _extent(sch, i) is None:
        # NOTE: a symbolic row count (relax_shapes): 4-row tiles. With 6 the tile index
        # divides by (n + 5) // 6 at run time in the inner loops: dense 4096x256x128 took
        # 13-18 ms against 5.7-6.0 ms with 4 (the static kernel: 5.4-7 ms; loaded machine)
        mr = 4
    i0, i1 = sch.split(i, [None, mr])
    j0, j1 = sch.split(j, [None, nr])
    k0, k1 = sch.split(k, [None, kc])
    # NOTE: column panels outermost: one B panel (K x nr) stays in L2 while every row tile
    # of A streams past it; row tiles outermost re-read all of B from L3/DRAM per row tile.
    sch.reorder(j0, i0, k0, k1, i1, j1)
    cons = sch.get_consumers(blk)
    wb = cons[0] if len(cons) == 1 else sch.cache_write(blk, 0, "global")
    sch.reverse_compute_at(wb, i0)
    sch.vectorize(sch.get_loops(wb)[-1])
    if pack:
        bp = sch.cache_read(blk, 1, "global")
        nb = len(b_region) - 2
        if b_is_nk:
            def idx(*a: Any) -> Any:
                *bs, n, kk = a
                return (*bs, n // nr, kk, n % nr)
        else:
            def idx(*a: Any) -> Any:
                *bs, kk, n = a
                return (*bs, n // nr, kk, n % nr)
        sch.transform_layout(bp, ("write", 0), _index_map(idx, nb + 2))
        _parallel(sch, sch.get_loops(bp)[0])
    outer = sch.fuse(*batch, j0, i0) if batch else sch.fuse(j0, i0)
    _parallel(sch, outer)
    sch.vectorize(j1)
    sch.unroll(i1)
    init = sch.decompose_reduction(blk, k0)
    sch.vectorize(sch.get_loops(init)[-1])


def _index_map(fn: Callable[..., Any], arity: int) -> Callable[..., Any]:
    # NOTE: transform_layout reads the lambda's parameter count; build an exact-arity lambda.
    if arity == 2:
        return lambda a, b: fn(a, b)
    if arity == 3:
        return lambda a, b, c: fn(a, b, c)
    return lambda a, b, c, d: fn(a, b, c, d)


# ----------------------------------------------------------------------------- reductions
def _split_loops(sch: Any, blk: Any) -> tuple[list[Any], list[Any]]:
    loops = sch.get_loops(blk)
    itypes = _iter_types(sch, blk)
    ns = itypes.count(0)
    if len(loops) != len(itypes) or sorted(itypes) != itypes:
        raise ValueError("unexpected loop structure")
    return list(loops[:ns]), list(loops[ns:])


def reduces_innermost(sch: Any, blk: Any) -> bool:
    """Whether the innermost reduction iter indexes the contiguous axis of the first input."""
    st = sch.get(blk)
    red = [iv.var.name for iv in st.iter_vars if int(iv.iter_type) == 2]
    if not red or not st.reads:
        return False
    last = st.reads[0].region
    return bool(last) and red[-1] in _vars_in(last[-1].min)


def schedule_row_reduce(sch: Any, blk: Any) -> None:
    """rfactor the contiguous reduction into 16 lanes; parallel rows; epilogue at the row."""
    spatial, red = _split_loops(sch, blk)
    r = sch.fuse(*red) if len(red) > 1 else red[0]
    # NOTE: rfactor over a split with a tail (T.where) computes wrong sums: lanes must divide.
    lanes = _largest_divisor(_extent(sch, r))
    if lanes is None:
        # no lanes: rows in parallel, the reduction scalar, the epilogue at the row
        if spatial:
            sp = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
            for c in sch.get_consumers(blk):
                sch.reverse_compute_at(c, sp)
            _parallel(sch, sp)
        return
    nsp = len(spatial)
    _, ki = sch.split(r, [None, lanes])
    rf = sch.rfactor(ki, nsp)
    cons = sch.get_consumers(blk)
    if spatial:
        sp = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        sch.compute_at(rf, sp, preserve_unit_loops=False)
        lr = sch.get_loops(rf)
        sch.reorder(lr[-1], lr[-2])
        sch.vectorize(sch.get_loops(rf)[-1])
        for c in cons:
            sch.reverse_compute_at(c, sp)
        _parallel(sch, sp)
    else:
        lr = sch.get_loops(rf)
        sch.reorder(lr[-1], lr[-2])
        sch.vectorize(sch.get_loops(rf)[-1])


def schedule_reduce_generic(sch: Any, blk: Any) -> None:
    """Innermost spatial axis vectorized inside the reductions, next one unrolled by 4,
    outer spatial loops parallel (column sums, conv2d, pooling)."""
    spatial, red = _split_loops(sch, blk)
    if not spatial:
        raise ValueError("no spatial loop")
    inner = spatial[-1]
    lanes = _largest_divisor(_extent(sch, inner))
    outer_sp = spatial[:-1]
    tail: list[Any] = []
    if lanes:
        so, si = sch.split(inner, [None, lanes])
        outer_sp = outer_sp + [so]
        tail = [si]
    else:
        outer_sp = outer_sp + [inner]
    unrolled: list[Any] = []
    if len(outer_sp) >= 2 and tail:
        second = outer_sp[-2]
        f = _largest_divisor(_extent(sch, second), (4, 2))
        if f:
            a, bb = sch.split(second, [None, f])
            outer_sp = outer_sp[:-2] + [a, outer_sp[-1]]
            unrolled = [bb]
    sch.reorder(*outer_sp, *red, *unrolled, *tail)
    par = sch.fuse(*outer_sp) if len(outer_sp) > 1 else outer_sp[0]
    for u in unrolled:
        sch.unroll(u)
    if tail:
        sch.vectorize(tail[0])
    _parallel(sch, par)
    for c in sch.get_consumers(blk):
        sch.reverse_compute_at(c, par)
    if red:
        sch.decompose_reduction(blk, red[0])


# Register tile widths of the convolution schedule, by preference. NOTE: 8 comes after 7, 6
# and 5: with a tile of 8 contiguous unpadded input columns (a 1x1 convolution of a 56-wide
# map) LLVM turns the 8 broadcast loads into one vector load and lane shuffles, 10-18x slower
# (measured 5 GFLOP/s against 64-95 with a tile of 7; benchmarks/RESULTS.md).
CONV_TILES = (7, 6, 5, 8, 4, 3, 2, 1)


def _try_vectorize(sch: Any, loop: Any) -> None:
    """``sch.vectorize(loop)``, or nothing where TVM refuses it."""
    from tvm import s_tir
    try:
        sch.vectorize(loop)
    except s_tir.ScheduleError:
        pass


def _conv_nchw(sch: Any, blk: Any) -> str | None:
    """The weight layout (``"OIHW"`` or ``"IHWO"``) when ``blk`` is
    ``out[n, co, y, x] += data[..] * w[..]``: four spatial iterators written in order, three
    reduction ones, the weight (second read) indexed by ``co, rc, ry, rx`` or
    ``rc, ry, rx, co``; else None."""
    stmt = sch.get(blk)
    ivs = [iv.var for iv in stmt.iter_vars]
    if _iter_types(sch, blk) != [0, 0, 0, 0, 2, 2, 2] or len(stmt.reads) < 2 or \
            len(stmt.writes) != 1 or len(sch.get_loops(blk)) != 7:
        return None
    out = stmt.writes[0].region
    if len(out) != 4 or not all(r.min.same_as(v) for r, v in zip(out, ivs)):
        return None
    w = [r.min for r in stmt.reads[1].region]
    for layout, order in (("OIHW", (1, 4, 5, 6)), ("IHWO", (4, 5, 6, 1))):
        if len(w) == 4 and all(m.same_as(ivs[i]) for m, i in zip(w, order)):
            return layout
    return None


def schedule_conv_channels(sch: Any, blk: Any) -> None:
    """NCHW conv2d vectorized over output channels, so that any output width runs vector code.

    ``co`` is split by 16 (8, 4) lanes and ``x`` by a register tile (:data:`CONV_TILES`); the
    order is ``(n, co/16, y) parallel, x/tile, rc, ry, rx, x-tile unrolled, co-lanes
    vectorized``: each data element is loaded once and broadcast to 16 channels, each weight
    vector is read contiguously: in place from an ``IHWO`` weight (constant weights get that
    layout at compile time, ``conv-weight-layout``), else from a copy of the ``OIHW`` weight
    packed ``[O/16, I, kh, kw, 16]`` at the start of the call (in parallel), and the 16 x tile accumulators stay in registers (a local cache
    written back per tile, where the fused epilogue runs, vectorized along the columns). Raises ``ValueError`` when ``blk``
    is not such a convolution or the output channels are not a multiple of 4.
    """
    layout = _conv_nchw(sch, blk)
    if layout is None:
        raise ValueError("not an NCHW conv2d block")
    n_, co, y, x, rc, ry, rx = sch.get_loops(blk)
    lanes = _largest_divisor(_extent(sch, co), (LANES, 8, 4))
    ow = _extent(sch, x)
    if lanes is None or ow is None:
        raise ValueError("output channels not a multiple of 4")
    tile = next(d for d in CONV_TILES if ow % d == 0)
    co_o, co_i = sch.split(co, [None, lanes])
    x_o, x_i = sch.split(x, [None, tile])
    sch.reorder(n_, co_o, y, x_o, rc, ry, rx, x_i, co_i)
    if layout == "OIHW":
        # NOTE: IHWO weights (conv-weight-layout, runtime/target_lowering.py) are read in
        # place; OIHW ones are packed per call
        packed = sch.cache_read(blk, 1, "global")
        sch.transform_layout(packed, ("write", 0),
                             lambda o, i, h, w: (o // lanes, i, h, w, o % lanes))
        pl = sch.get_loops(packed)
        _parallel(sch, sch.fuse(pl[0], pl[1]))
    acc = sch.cache_write(blk, 0, "local")
    consumers = sch.get_consumers(acc)
    sch.reverse_compute_at(acc, x_o)
    for c in consumers:
        sch.reverse_compute_at(c, x_o)
        # NOTE: the epilogue vectorized along the tile's columns: scalar, the NaN-keeping
        # selects of relu / clip become branches that mispredict on mixed signs (a clip
        # epilogue took 6x the convolution; tests/test_conv_schedules.py, RESULTS.md)
        _try_vectorize(sch, sch.get_loops(c)[-1])
    par = sch.fuse(n_, co_o, y)
    sch.unroll(x_i)
    sch.vectorize(co_i)
    _parallel(sch, par)
    sch.decompose_reduction(blk, rc)


def schedule_rowwise(sch: Any) -> None:
    """Softmax-like groups: rfactor reductions, compute all under the output row loop."""
    bs = blocks(sch)
    for b in bs:
        if _is_reduction(sch, b) and reduces_innermost(sch, b):
            spatial, red = _split_loops(sch, b)
            r = sch.fuse(*red) if len(red) > 1 else red[0]
            lanes = _largest_divisor(_extent(sch, r))
            if lanes is not None:
                _, ki = sch.split(r, [None, lanes])
                sch.rfactor(ki, len(spatial))
    bs = blocks(sch)
    out = bs[-1]
    if _is_reduction(sch, out):
        raise ValueError("rowwise: the output is a reduction")
    row = sch.get_loops(out)[0]
    for b in reversed(bs[:-1]):
        sch.compute_at(b, row, preserve_unit_loops=True)
    for b in blocks(sch):
        loops = sch.get_loops(b)
        if len(loops) < 2:
            continue
        if _is_reduction(sch, b):
            it = _iter_types(sch, b)
            if sch.get(b).name_hint.endswith("_rf") and it[-1] == 0:
                pass
            continue
        name = sch.get(b).name_hint
        if name.endswith("_rf"):
            lr = sch.get_loops(b)
            sch.reorder(lr[-1], lr[-2])
            sch.vectorize(sch.get_loops(b)[-1])
            continue
        ext = _extent(sch, loops[-1])
        if ext is not None and ext >= LANES and ext % LANES == 0:
            _, v = sch.split(loops[-1], [None, LANES])
            sch.vectorize(v)
    _parallel(sch, row)


def schedule_generic(sch: Any) -> None:
    """The fallback: every block's outermost spatial loop runs in parallel."""
    from tvm import s_tir
    for b in blocks(sch):
        loops = sch.get_loops(b)
        if loops and _iter_types(sch, b)[0] == 0:
            try:
                _parallel(sch, loops[0])
            except s_tir.ScheduleError:
                pass


# ----------------------------------------------------------------------------- drivers
def _attempt(func: Any, steps: Callable[[Any], None]) -> Any | None:
    from tvm import s_tir
    sch = s_tir.Schedule(func)
    try:
        steps(sch)
    except (s_tir.ScheduleError, ValueError, IndexError, AssertionError):
        return None
    except Exception as e:  # NOTE: TVM raises plain TVMError subclasses for some misuses
        if type(e).__module__.startswith("tvm"):
            return None
        raise
    return sch.mod


def _cpu_plan(sch: Any, kind: str) -> None:
    inline_all(sch)
    bs = blocks(sch)
    reds = [b for b in bs if _is_reduction(sch, b)]
    if not reds:
        for b in bs:
            schedule_injective(sch, b)
        return
    if len(reds) == 1:
        blk = reds[0]
        if kind == "matmul":
            schedule_matmul(sch, blk)
        elif reduces_innermost(sch, blk) and kind not in ("conv", "pool"):
            schedule_row_reduce(sch, blk)
        else:
            schedule_reduce_generic(sch, blk)
        return
    schedule_rowwise(sch)


def schedule_cpu(func: Any, kind: str = "", report: list[str] | None = None,
                 serial_below: int = 0, serial: bool = False) -> Any:
    """An IRModule holding ``func`` scheduled for the CPU (see the module docstring).

    ``kind`` is a hint from the lowering: ``"matmul"``, ``"conv"``, ``"pool"`` or ``""``.
    ``report``, when given, receives the name of the strategy that applied (``"conv-channels"``,
    ``"planned"``,
    ``"per-block"``, ``"parallel"``, ``"inline+parallel"`` or ``"none"``).
    ``serial_below``: a kernel with a smaller iteration space gets no parallel loops;
    ``serial``: no parallel loops at all.
    """
    func = unaligned_params(func)
    vol = work_volume(func) if serial_below else None
    _SERIAL[0] = serial or (vol is not None and vol < serial_below)
    try:
        return _schedule_cpu(func, kind, report)
    finally:
        _SERIAL[0] = False


def _conv_plan(sch: Any) -> None:
    inline_all(sch)
    reds = [b for b in blocks(sch) if _is_reduction(sch, b)]
    if len(reds) != 1:
        raise ValueError("not one reduction")
    schedule_conv_channels(sch, reds[0])


def _schedule_cpu(func: Any, kind: str, report: list[str] | None) -> Any:
    tvm = _tvm()
    strategies: list[tuple[str, Callable[[Any], Any]]] = [
        ("conv-channels", _conv_plan)] if kind == "conv" else []
    strategies += [
        ("planned", lambda s: _cpu_plan(s, kind)),
        ("per-block", lambda s: (inline_all(s), _per_block(s))),
        ("inline+parallel", lambda s: (inline_all(s), schedule_generic(s))),
        ("parallel", schedule_generic)]
    for name, steps in strategies:
        mod = _attempt(func, steps)
        if mod is not None:
            if report is not None:
                report.append(name)
            return mod
    if report is not None:
        report.append("none")
    return tvm.IRModule({"main": func})


def _per_block(sch: Any) -> None:
    """Second choice: each block scheduled alone (no cross-block placement)."""
    from tvm import s_tir
    for b in blocks(sch):
        try:
            if _is_reduction(sch, b):
                schedule_reduce_generic(sch, b)
            else:
                schedule_injective(sch, b)
        except (s_tir.ScheduleError, ValueError):
            loops = sch.get_loops(b)
            if loops and _iter_types(sch, b)[0] == 0:
                _parallel(sch, loops[0])


def schedule_cuda(func: Any, target: Any, fallback_only: bool = False) -> Any:
    """An IRModule with ``func`` scheduled by dlight (Matmul, Reduction, GeneralReduction,
    Fallback; GEMV is left out, its kernels overflow shared memory); raises ``LoweringError``
    when no rule scheduled it. ``fallback_only``: just the Fallback rule (one thread per
    output element, reductions serial), for groups the other rules cannot compile."""
    tvm = _tvm()
    from tvm.s_tir import dlight as dl
    from relay_ir.errors import LoweringError
    mod = tvm.IRModule({"main": func})
    rules = [dl.gpu.Fallback()] if fallback_only else [
        dl.gpu.Matmul(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
    try:
        with target:
            mod = dl.ApplyDefaultSchedule(*rules)(mod)
    except Exception:
        # NOTE: a rule that fails inside TVM on this group (dlight's Reduction: an rfactor
        # InternalError on a gradient's reduction): the Fallback rule alone
        if fallback_only:
            raise
        return schedule_cuda(func, target, fallback_only=True)
    gv = mod.get_global_var("main")
    attrs = mod[gv].attrs
    if attrs is None or "tirx.is_scheduled" not in attrs:
        raise LoweringError("dlight did not schedule the kernel for CUDA (no rule matched)")
    return mod
