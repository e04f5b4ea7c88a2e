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
* a conv2d with NCHW output (``kind="conv"``), the first that applies of:
  :func:`schedule_conv_depthwise` (depthwise: vectorized along output rows, a zero-padded
  input plane per channel, split by column parity for stride 2),
  :func:`schedule_conv_rows` (at most 4 input channels: vectorized along output rows, 8
  output channels per register tile),
  :func:`schedule_conv1x1_gemm` (1x1, stride 1, unpadded: a GEMM over the flattened pixels,
  each pixel panel's input packed contiguous inside the parallel loop: :data:`PACK_PANELS`)
  and :func:`schedule_conv_channels` (vectorized over a block of 16 (8, 4) output channels,
  the weight read in place (``OIHW16o``, ``IHWO``) or packed ``[O/16, I, kh, kw, 16]`` per
  call (``OIHW``), the zero-padded input staged once, a register tile of up to 8 output
  columns, kernel loops inside, parallel over (batch, channel block, row), the epilogue
  computed per tile; any width, stride, padding, dilation and groups);
* an NCHW max / average pool (``kind="pool"``): :func:`schedule_pool` (the padded plane
  staged once, vectorized along output rows as depthwise);
* ``nn.conv2d_transpose`` (``kind="convt"``): :func:`schedule_conv_transpose` (its GEMM
  register-tiled over (channel, tap) rows x pixels, col2im by column phase);
* any other reduction (column sums, conv2d NHWC, pooling): the innermost spatial axis
  tiled and vectorized inside the reduction loops, the next spatial axis unrolled by 4 for
  register reuse, the outer spatial loops fused and parallel;
* several reductions in a row-wise group (softmax, log_softmax, layer_norm): each rfactored
  into 16 vector lanes, all blocks computed under the output's row loop (every loop but the
  reduced one when all reductions run along the innermost axis), which runs in parallel.

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
    """The largest iteration space among the blocks of an unscheduled PrimFunc (None when
    symbolic).

    The largest block, not the sum: the elementwise blocks of a fused group are inlined into
    one loop nest, so a chain of them costs about one pass. (With the sum, W5's fused
    ``add(old, outer product)`` of 256x640 counted twice, went parallel, and waking the pool
    made it 4-8x slower than its two serial kernels had been on the shared 2-core machine.)
    """
    from tvm import s_tir
    sch = s_tir.Schedule(func)
    most = 0
    for b in blocks(sch):
        vol = 1
        for loop in sch.get_loops(b):
            e = _extent(sch, loop)
            if e is None:
                return None
            vol *= e
        most = max(most, vol)
    return most


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


def inline_all(sch: Any, keep: tuple[str, ...] = ()) -> None:
    """Inline every non-output block that can be inlined (injective producers / epilogues),
    except the blocks named in ``keep``."""
    from tvm import s_tir
    outs = {sch.get(b).name_hint for b in sch.get_output_blocks(sch.get_sblock("root"))}
    # NOTE: whole passes in program order (a chain inlines in one pass); a pass that inlines
    # nothing ends the loop. Restarting after every inline would be quadratic in the blocks.
    for prim in ("compute_inline", "reverse_compute_inline"):
        progress = True
        while progress:
            progress = False
            for b in blocks(sch):
                name = sch.get(b).name_hint
                if name in outs or name in keep or _is_reduction(sch, b):
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


def _accumulate_at(sch: Any, blk: Any, loop: Any) -> Any:
    """A local accumulator of ``blk`` computed at ``loop``, its epilogue consumers there too,
    each vectorized along the tile's columns (scalar, the NaN-keeping selects of relu / clip
    become branches that mispredict on mixed signs: a clip epilogue took 6x the convolution;
    tests/test_conv_schedules.py, RESULTS.md). Returns the accumulator block."""
    acc = sch.cache_write(blk, 0, "local")
    consumers = sch.get_consumers(acc)
    sch.reverse_compute_at(acc, loop)
    for c in consumers:
        sch.reverse_compute_at(c, loop)
        _try_vectorize(sch, sch.get_loops(c)[-1])
    return acc


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
    block = _weight_block(stmt)
    if block and all(m.same_as(ivs[i]) for m, i in zip(w[1:4], (4, 5, 6))):
        return f"OIHW{block}o"
    return None


def _weight_block(stmt: Any) -> int:
    """``b`` when the block's weight (second read) is a blocked ``OIHW<b>o`` kernel read at
    ``[co // b, .., .., .., co % b]``; else 0."""
    from tvm import tirx
    reg = stmt.reads[1].region if len(stmt.reads) > 1 else []
    if len(reg) != 5:
        return 0
    co = stmt.iter_vars[1].var
    first, last = reg[0].min, reg[4].min
    if isinstance(first, tirx.FloorDiv) and isinstance(last, tirx.FloorMod) and \
            first.a.same_as(co) and last.a.same_as(co) and hasattr(first.b, "value") and \
            hasattr(last.b, "value") and int(first.b.value) == int(last.b.value) > 0:
        return int(first.b.value)
    return 0


def schedule_conv_channels(sch: Any, blk: Any) -> None:
    """NCHW conv2d vectorized over output channels, so that any output width runs vector code.

    ``co`` is split by 16 (8, 4) lanes and ``x`` by a register tile (:data:`CONV_TILES`); the
    order is ``(n, co/16, y) parallel, x/tile, rc, ry, rx, x-tile unrolled, co-lanes
    vectorized`` (rows outside the channel blocks when :func:`_rows_outer`): each data
    element is loaded once and broadcast to 16 channels, each weight vector is read
    contiguously: in place from a blocked ``OIHW16o`` (``8o``, ``4o``) or an ``IHWO`` weight
    (constant weights get one of them at compile time, ``conv-weight-layout``), else from a
    copy of the ``OIHW`` weight packed ``[O/16, I, kh, kw, 16]`` at the start of the call (in
    parallel), and the 16 x tile accumulators stay in registers (a local cache written back
    per tile, where the fused epilogue runs, vectorized along the columns). Raises
    ``ValueError`` when ``blk`` is not such a convolution or the output channels are not a
    multiple of 4.
    """
    layout = _conv_nchw(sch, blk)
    if layout is None:
        raise ValueError("not an NCHW conv2d block")
    n_, co, y, x, rc, ry, rx = sch.get_loops(blk)
    lanes = _largest_divisor(_extent(sch, co), (LANES, 8, 4))
    ow = _extent(sch, x)
    if lanes is None or ow is None:
        raise ValueError("output channels not a multiple of 4")
    if layout.endswith("o"):
        # NOTE: a blocked kernel (OIHW16o, conv-weight-layout) is read in place: one vector per
        # (channel block, rc, ry, rx), contiguous along rc, ry, rx
        lanes = int(layout[4:-1])
        if lanes not in (LANES, 8, 4):
            raise ValueError("a kernel block that is not a vector width")
    tile = next(d for d in CONV_TILES if ow % d == 0)
    co_o, co_i = sch.split(co, [None, lanes])
    x_o, x_i = sch.split(x, [None, tile])
    rows_outer = _rows_outer(sch, blk)
    if rows_outer:
        sch.reorder(n_, y, co_o, x_o, rc, ry, rx, x_i, co_i)
    else:
        sch.reorder(n_, co_o, y, x_o, rc, ry, rx, x_i, co_i)
    if layout == "OIHW":
        # NOTE: IHWO weights (conv-weight-layout, runtime/target_lowering.py) are read in
        # place; OIHW ones are packed per call
        packed = sch.cache_read(blk, 1, "global")
        sch.transform_layout(packed, ("write", 0),
                             lambda o, i, h, w: (o // lanes, i, h, w, o % lanes))
        pl = sch.get_loops(packed)
        _parallel(sch, sch.fuse(pl[0], pl[1]))
    acc = _accumulate_at(sch, blk, x_o)
    par = sch.fuse(n_, y, co_o) if rows_outer else sch.fuse(n_, co_o, y)
    sch.unroll(x_i)
    sch.vectorize(co_i)
    _parallel(sch, par)
    sch.decompose_reduction(blk, rc)


# Input size (bytes) above which the channel schedule runs the output rows outside the channel
# blocks (a conv input larger than one core's L2, the weights smaller than the input)
ROWS_OUTER_INPUT = 2 << 20


def _rows_outer(sch: Any, blk: Any) -> bool:
    """Whether the channel schedule should run rows outside channel blocks: the input no
    longer fits L2 while the weights are smaller, so each block of rows is read once for all
    channel blocks rather than once per channel block. Measured on ResNet-50 (1 thread): the
    1x1 stride-2 convolutions of 256x56x56 inputs 1.3x faster; smaller inputs (the 7x7 first
    layer, 14x14 maps) 1.1-1.6x slower (benchmarks/RESULTS.md)."""
    stmt = sch.get(blk)

    def nbytes(region: Any) -> int | None:
        buf = region.source if hasattr(region, "source") else None
        if buf is None:
            return None
        import tvm_ffi
        try:
            n = max(1, int(tvm_ffi.dtype(str(buf.dtype)).bits) // 8)
        except Exception:  # NOTE: a source without a dtype: count float32 elements
            n = 4
        for d in buf.shape:
            if not hasattr(d, "value"):
                return None
            n *= int(d.value)
        return n
    data, weight = nbytes(stmt.reads[0]), nbytes(stmt.reads[1])
    return data is not None and weight is not None and data > ROWS_OUTER_INPUT and \
        weight < data


def _conv_depthwise(sch: Any, blk: Any) -> bool:
    """Whether the NCHW conv2d ``blk`` is depthwise: one input channel per output channel,
    read at the output channel's own index (``groups`` = channels, no channel multiplier)."""
    from tvm.sym import analyzer as arith
    stmt = sch.get(blk)
    ivs = [iv.var for iv in stmt.iter_vars]
    doms = [iv.dom.extent for iv in stmt.iter_vars]
    if not hasattr(doms[4], "value") or int(doms[4].value) != 1:
        return False
    data = stmt.reads[0].region
    if len(data) != 4:
        return False
    return bool(arith.Analyzer().can_prove_equal(data[1].min, ivs[1] + ivs[4]))


# Vector widths of the depthwise schedule along the output row, by preference (measured on
# MobileNet v2, 1 thread: 56-wide rows 1.25-1.4x faster as 7 x 8 lanes than as 4 x 14; 28- and
# 14-wide rows 1.3-1.6x faster as 14 lanes than as 7)
DW_LANES = (16, 8, 14, 7, 12, 10, 6, 5, 4)
DW_PAD_BY_PARITY = True


def schedule_conv_depthwise(sch: Any, blk: Any, pad: Any | None) -> None:
    """A depthwise NCHW conv2d vectorized along the output row.

    Each (image, channel) plane is independent: the planes run in parallel; the zero-padded
    input plane (``pad``, the ``T_pad`` stage, when there is padding) is computed once per
    plane into a buffer (so the window loads carry no bounds tests), stored split by column
    parity for stride 2 (so that the strided window reads become contiguous vector loads);
    the 3x3 (any) window is unrolled, each tap one vector multiply-add of a row segment by a
    broadcast weight; the epilogue runs per segment, vectorized. Raises ``ValueError`` when
    ``blk`` is not a depthwise NCHW convolution.
    """
    if _conv_nchw(sch, blk) is None or not _conv_depthwise(sch, blk):
        raise ValueError("not a depthwise NCHW conv2d block")
    _window_rows(sch, blk, pad)


def _window_rows(sch: Any, blk: Any, pad: Any | None) -> None:
    """The row schedule of :func:`schedule_conv_depthwise` and :func:`schedule_pool`: ``blk``
    has loops ``(n, c, y, x, reductions..., ry, rx)`` and reads its input (first read) at
    column ``x * stride + ...``."""
    loops = sch.get_loops(blk)
    n_, co, y, x = loops[:4]
    red = loops[4:]
    ry, rx = red[-2:]
    ow = _extent(sch, x)
    if ow is None:
        raise ValueError("symbolic width")
    lanes = next((d for d in DW_LANES if ow % d == 0), ow if ow <= 16 else None)
    if lanes is None:
        raise ValueError("no vector width divides the output width")
    stmt = sch.get(blk)
    xv = stmt.iter_vars[3].var
    # the column stride: the coefficient of x in the data read's column index
    from tvm.sym import analyzer as arith
    col = stmt.reads[0].region[3].min
    ana = arith.Analyzer()
    stride = None
    for s in (1, 2, 3, 4):
        rest = ana.simplify(col - xv * s)
        if xv.name not in _vars_in(rest):
            stride = s
            break
    if stride is None:
        raise ValueError("column index not affine in x")
    x_o, x_i = sch.split(x, [None, lanes])
    sch.reorder(n_, co, y, x_o, *red, x_i)
    plane = sch.fuse(n_, co)
    _accumulate_at(sch, blk, x_o)
    if pad is not None:
        wp = _extent(sch, sch.get_loops(pad)[-1]) or 0
        parity = stride > 1 and ow > 8
        if parity:
            # NOTE: measured on MobileNet v2's strided layers: the parity split wins 1.4-4x
            # for outputs 14-56 wide and loses 2x at 7 wide (one 7-lane vector per row)
            sch.transform_layout(pad, ("write", 0),
                                 lambda a, b, c, d: (a, b, c, d % stride, d // stride))
            if DW_PAD_BY_PARITY and wp % stride == 0:
                # the copy iterates the stored order: contiguous vector stores
                sch.transform_block_layout(
                    pad, lambda a, b, c, d: (a, b, c, d % stride, d // stride))
        sch.compute_at(pad, plane)
        if stride == 1 or (parity and DW_PAD_BY_PARITY and wp % stride == 0):
            _try_vectorize(sch, sch.get_loops(pad)[-1])
    sch.unroll(ry)
    sch.unroll(rx)
    sch.vectorize(x_i)
    _parallel(sch, plane)
    sch.decompose_reduction(blk, red[0])


# Input channels (per group) up to which a convolution is vectorized along its output rows
# (conv-rows) rather than over output channels: a stem over 3 (RGB) channels has a reduction
# of 27 (3x3) multiply-adds per output, too short to pay the channel schedule's transposing
# write-back of each 16-channel x 7-column register tile
ROWS_MAX_CHANNELS = 4
# output channels per register tile of conv-rows, by preference
ROWS_CHANNEL_TILES = (8, 4, 2, 1)


def schedule_conv_rows(sch: Any, blk: Any, pad: Any | None) -> None:
    """An NCHW conv2d over few input channels vectorized along the output row.

    A register tile of 8 (4, 2, 1) output channels by one row segment (:data:`DW_LANES`):
    each input segment is loaded once (from the zero-padded input staged once per call,
    stored by column parity for stride 2, so that the loads are contiguous) and multiplied by
    8 broadcast weights; the window and the channel tile unrolled; the epilogue per tile,
    vectorized along the row; parallel over (image, channel tile, row). Raises
    ``ValueError`` when ``blk`` is not such a convolution.
    """
    if _conv_nchw(sch, blk) is None:
        raise ValueError("not an NCHW conv2d block")
    n_, co, y, x, rc, ry, rx = sch.get_loops(blk)
    oc, ow, ci = _extent(sch, co), _extent(sch, x), _extent(sch, rc)
    stmt = sch.get(blk)
    if oc is None or ow is None or ci is None or ci > ROWS_MAX_CHANNELS or \
            not stmt.reads[0].region[1].min.same_as(stmt.iter_vars[4].var):
        # NOTE: groups = 1 only (the input channel read is the reduction's own index)
        raise ValueError("not a convolution over few input channels")
    lanes = next((d for d in DW_LANES if ow % d == 0), ow if ow <= 16 else None)
    if lanes is None:
        raise ValueError("no vector width divides the output width")
    cb = next(c for c in ROWS_CHANNEL_TILES if oc % c == 0)
    xv = stmt.iter_vars[3].var
    from tvm.sym import analyzer as arith
    col = stmt.reads[0].region[3].min
    ana = arith.Analyzer()
    stride = next((st for st in (1, 2, 3, 4)
                   if xv.name not in _vars_in(ana.simplify(col - xv * st))), None)
    if stride is None:
        raise ValueError("column index not affine in x")
    co_o, co_i = sch.split(co, [None, cb])
    x_o, x_i = sch.split(x, [None, lanes])
    sch.reorder(n_, co_o, y, x_o, rc, ry, rx, co_i, x_i)
    _accumulate_at(sch, blk, x_o)
    if pad is not None:
        wp = _extent(sch, sch.get_loops(pad)[-1]) or 0
        if stride > 1 and wp % stride == 0:
            sch.transform_layout(pad, ("write", 0),
                                 lambda a, b, c, d: (a, b, c, d % stride, d // stride))
            sch.transform_block_layout(
                pad, lambda a, b, c, d: (a, b, c, d % stride, d // stride))
        pl = sch.get_loops(pad)
        _parallel(sch, sch.fuse(*pl[:2]))
        _try_vectorize(sch, pl[-1])
    par = sch.fuse(n_, co_o, y)
    sch.unroll(ry)
    sch.unroll(rx)
    sch.unroll(co_i)
    sch.vectorize(x_i)
    _parallel(sch, par)
    sch.decompose_reduction(blk, rc)


def schedule_pool(sch: Any, blk: Any, pad: Any | None) -> None:
    """An NCHW max / average pool (``out[n, c, y, x]`` reduced over a ``ry, rx`` window)
    vectorized along the output row, as :func:`schedule_conv_depthwise` does it: the (image,
    channel) planes in parallel, the padded input plane (``pad``, the pool's ``T_pad`` stage)
    computed once per plane into a buffer (no bounds tests in the window loads; for stride 2
    stored by column parity, so that the window loads are contiguous vectors), the window
    unrolled, the epilogue (max: the float decoded from its order key; average: the division
    by the tap count) per row segment, vectorized. Raises ``ValueError`` for any other block.
    """
    stmt = sch.get(blk)
    ivs = [iv.var for iv in stmt.iter_vars]
    if _iter_types(sch, blk) != [0, 0, 0, 0, 2, 2] or len(sch.get_loops(blk)) != 6 or \
            len(stmt.writes) != 1 or not stmt.reads:
        raise ValueError("not a 2-d pool block")
    out = stmt.writes[0].region
    data = stmt.reads[0].region
    if len(out) != 4 or not all(r.min.same_as(v) for r, v in zip(out, ivs)) or \
            len(data) != 4 or not data[0].min.same_as(ivs[0]) or \
            not data[1].min.same_as(ivs[1]) or ivs[2].name not in _vars_in(data[2].min):
        raise ValueError("not an NCHW pool")
    _window_rows(sch, blk, pad)


# Register tile of the 1x1 convolution as a GEMM: rows (output channels) by preference, and
# the vector columns (pixels) per tile.
GEMM_ROWS = (6, 8, 4, 5, 3, 2, 1)
GEMM_COLS = (32, 16)
# rows of the tile when the pixels allow 16 columns only (28x28 maps: 784 pixels): one vector
# per row, so twice the rows for as many accumulators as a 6-8 x 32 tile
GEMM_ROWS_16 = (16, 12, 8, 6, 4, 5, 3, 2, 1)
GEMM_WIDE_ROWS = True


def schedule_conv1x1_gemm(sch: Any, blk: Any) -> None:
    """A 1x1, stride-1, unpadded NCHW conv2d as a GEMM ``out[co, p] = sum_ci w[co, ci] x[ci, p]``
    over the flattened pixels ``p = y * W + x``: a register tile of 6 (8, 4, ...) output channels
    by 32 (16) pixels, vectorized over the pixels (each input row segment loaded once, each
    weight broadcast), the input channels in order inside, the epilogue at the tile, parallel
    over (image, pixel panel); the output-channel tiles run inside a pixel panel so that its
    input panel stays in L1. Raises ``ValueError`` when ``blk`` is not such a convolution or
    the pixel count is not a multiple of 16.
    """
    layout = _conv_nchw(sch, blk)
    if layout is None:
        raise ValueError("not an NCHW conv2d block")
    n_, co, y, x, rc, ry, rx = sch.get_loops(blk)
    stmt = sch.get(blk)
    ivs = [iv.var for iv in stmt.iter_vars]
    data = stmt.reads[0].region
    from tvm.sym import analyzer as arith
    eq = arith.Analyzer().can_prove_equal
    if _extent(sch, ry) != 1 or _extent(sch, rx) != 1 or len(data) != 4 or \
            not (eq(data[2].min, ivs[2] + ivs[5]) or eq(data[2].min, ivs[2])) or \
            not (eq(data[3].min, ivs[3] + ivs[6]) or eq(data[3].min, ivs[3])) or \
            not eq(data[1].min, ivs[4]):
        raise ValueError("not a 1x1 stride-1 unpadded convolution")
    oc, oh, wd = _extent(sch, co), _extent(sch, y), _extent(sch, x)
    if oc is None or oh is None or wd is None:
        raise ValueError("symbolic extents")
    nr = next((c for c in GEMM_COLS if (oh * wd) % c == 0), None)
    if nr is None:
        raise ValueError("pixels not a multiple of 16")
    mr = next(r for r in (GEMM_ROWS_16 if nr == 16 and GEMM_WIDE_ROWS else GEMM_ROWS)
              if oc % r == 0)
    # NOTE: the pixels become one iterator of the convolution, of its result and of the
    # epilogue (a fused loop alone would make the epilogue's region at a tile whole rows)
    consumers = sch.get_consumers(blk)
    if not consumers:
        # NOTE: the convolution writes the kernel's output itself: its buffer is a parameter,
        # whose shape must stay; the pixel-indexed result goes to an intermediate, then a copy
        sch.cache_write(blk, 0, "global")
        consumers = sch.get_consumers(blk)
    if any(len(sch.get_loops(c)) != 4 for c in consumers):
        raise ValueError("an epilogue not over the output's four axes")
    sch.transform_layout(blk, ("write", 0), lambda a, b, c, d: (a, b, c * wd + d))
    sch.transform_block_layout(blk, lambda a, b, c, d, e, f, g: (a, b, c * wd + d, e, f, g))
    for c in consumers:
        sch.transform_block_layout(c, lambda a, b, c, d: (a, b, c * wd + d))
    n_, co, p, rc, ry, rx = sch.get_loops(blk)
    p_o, p_i = sch.split(p, [None, nr])
    co_o, co_i = sch.split(co, [None, mr])
    sch.reorder(n_, p_o, co_o, rc, ry, rx, co_i, p_i)
    acc = sch.cache_write(blk, 0, "local")
    consumers = sch.get_consumers(acc)
    sch.reverse_compute_at(acc, co_o)
    _try_vectorize(sch, sch.get_loops(acc)[-1])
    for c in consumers:
        sch.reverse_compute_at(c, co_o)
        _try_vectorize(sch, sch.get_loops(c)[-1])
    par = sch.fuse(n_, p_o)
    sch.unroll(co_i)
    sch.vectorize(p_i)
    _parallel(sch, par)
    sch.decompose_reduction(blk, rc)


# Transposed convolutions get schedule_conv_transpose (False: the generic schedules; for
# before/after figures)
CONV_TRANSPOSE = True
# Vector columns (input pixels) of the transposed convolution's GEMM, by preference
CONVT_COLS = (32, 16, 14, 8, 7, 12, 10, 9, 6, 5, 4)


def schedule_conv_transpose(sch: Any) -> None:
    """``nn.conv2d_transpose`` (conv_ext.conv2d_transpose_te: a GEMM into columns, then
    col2im) on the CPU. The GEMM ``cols[n, co, ky, kx, iy, ix] = sum_ci x[n, ci, iy, ix] *
    w[ci, co, ky, kx]`` is re-indexed as ``cols[n, m, p]`` (``m = (co, ky, kx)``, ``p = (iy,
    ix)``, both flattened: the weight's rows ``m`` are contiguous in IOHW) and tiled like
    :func:`schedule_conv1x1_gemm`: 6 (8, 16, ...) rows by 32 (16, 14, 8, 7) pixels in
    registers, vectorized over the pixels, the input channels inside, parallel over pixel
    panels; col2im (each output pixel adds its taps) runs in parallel over (image, channel,
    row), vectorized along the row where a vector width divides it. Raises ``ValueError``
    for any other group (a grouped transposed convolution, an NHWC one, other blocks)."""
    inline_all(sch)
    bs = blocks(sch)
    reds = [b for b in bs if _is_reduction(sch, b)]
    if len(reds) != 1 or _iter_types(sch, reds[0]) != [0] * 6 + [2]:
        raise ValueError("not the GEMM of a transposed convolution")
    blk = reds[0]
    stmt = sch.get(blk)
    ivs = [iv.var for iv in stmt.iter_vars]
    data, weight = stmt.reads[0].region, stmt.reads[1].region if len(stmt.reads) > 1 else []
    if len(data) != 4 or len(weight) != 4 or \
            not all(data[i].min.same_as(ivs[j]) for i, j in ((0, 0), (1, 6), (2, 4), (3, 5))) or \
            not all(weight[i].min.same_as(ivs[j]) for i, j in ((0, 6), (1, 1), (2, 2), (3, 3))):
        raise ValueError("not an NCHW / IOHW transposed convolution (groups = 1)")
    exts = [_extent(sch, lp) for lp in sch.get_loops(blk)]
    if any(e is None for e in exts):
        raise ValueError("symbolic extents")
    _, co, kh, kw, h, w, _ = exts
    rows, pix = co * kh * kw, h * w
    nr = next((c for c in CONVT_COLS if pix % c == 0), None)
    if nr is None:
        raise ValueError("no vector width divides the pixels")
    mr = next(r for r in (GEMM_ROWS_16 if nr <= 16 else GEMM_ROWS) if rows % r == 0)
    sch.transform_layout(blk, ("write", 0),
                         lambda n, c, y, x, i, j: (n, (c * kh + y) * kw + x, i * w + j))
    sch.transform_block_layout(
        blk, lambda n, c, y, x, i, j, r: (n, (c * kh + y) * kw + x, i * w + j, r))
    n_, m, p, rc = sch.get_loops(blk)
    p_o, p_i = sch.split(p, [None, nr])
    m_o, m_i = sch.split(m, [None, mr])
    sch.reorder(n_, p_o, m_o, rc, m_i, p_i)
    acc = sch.cache_write(blk, 0, "local")
    col2im = sch.get_consumers(acc)
    sch.reverse_compute_at(acc, m_o)
    _try_vectorize(sch, sch.get_loops(acc)[-1])
    sch.unroll(m_i)
    sch.vectorize(p_i)
    _parallel(sch, sch.fuse(n_, p_o))
    sch.decompose_reduction(blk, rc)
    for b in col2im:
        loops = sch.get_loops(b)
        if len(loops) != 4:
            continue
        sw = int(sch.get(b).annotations.get("rly_stride_w", 1))
        ow = _extent(sch, loops[3])
        if sw > 1 and ow is not None and ow % sw == 0:
            # NOTE: output columns by phase (x % sw): within a phase, the taps that land and
            # the input columns they read no longer depend on the lane (contiguous loads)
            sch.transform_block_layout(b, lambda n, c, y, x: (n, c, y, x % sw, x // sw))
            loops = sch.get_loops(b)
            sch.unroll(loops[3])
        lanes = _largest_divisor(_extent(sch, loops[-1]), (16, 14, 8, 7))
        if lanes is not None:
            _, v = sch.split(loops[-1], [None, lanes])
            _try_vectorize(sch, v)
        _parallel(sch, sch.fuse(*loops[:3]))


def schedule_rowwise(sch: Any) -> None:
    """Softmax-like groups: rfactor reductions, compute all under the output row loop."""
    bs = blocks(sch)
    inner = all(reduces_innermost(sch, b) for b in bs if _is_reduction(sch, b))
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
    loops = sch.get_loops(out)
    # NOTE: every reduction runs along the innermost axis: the output's other loops are all
    # rows (12 x 128 attention rows as one loop of 1536, not 12 tasks each walking a 128 x 128
    # plane, whose per-row reductions LLVM turned into gathers)
    row = sch.fuse(*loops[:-1]) if inner and len(loops) > 2 else loops[0]
    for b in reversed(bs[:-1]):
        sch.compute_at(b, row, preserve_unit_loops=True)
    for b in blocks(sch):
        loops = sch.get_loops(b)
        if len(loops) < 2:
            continue
        if _is_reduction(sch, b):
            if sch.get(b).name_hint.endswith("_rf"):
                _vectorize_lanes(sch, b, 1)
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


def _vectorize_lanes(sch: Any, rf: Any, depth: int) -> None:
    """An rfactor block under a row loop: its lane loop (the first spatial loop below the
    ``depth`` outer loops) moved innermost, below the reduction, and vectorized: each step
    then adds one contiguous vector of the row into the lane accumulators."""
    loops = sch.get_loops(rf)[depth:]
    itypes = _iter_types(sch, rf)
    exts = [_extent(sch, lp) for lp in loops]
    lanes = [lp for lp, e in zip(loops, exts) if e is not None and e > 1]
    if len(lanes) != 2 or itypes[-1] != 2:
        return
    lane, red = lanes
    sch.reorder(red, lane)
    try:
        sch.vectorize(lane)
    except Exception as e:  # NOTE: an init the vectorizer refuses: leave it scalar
        if not type(e).__module__.startswith("tvm"):
            raise


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


def _matrix_vector(sch: Any, blk: Any) -> bool:
    """A product of one row by a ``[N, K]`` weight (a classifier head ``dense(x[1, K], W)``):
    a row reduction per output (contiguous in both operands), not the GEMM schedule, which
    would pack all of ``W`` on every call to use each element once (measured: ResNet-50's
    2048x1000 head 2.7 ms, MobileNet's 1280x1000 1.8 ms)."""
    loops = sch.get_loops(blk)
    if len(loops) != 3 or not reduces_innermost(sch, blk):
        return False
    rows = _extent(sch, loops[0])
    return rows == 1 and len(sch.get(blk).reads) >= 2 and \
        sch.get(blk).iter_vars[-1].var.name in _vars_in(sch.get(blk).reads[1].region[-1].min)


def scalar_func(func: Any) -> bool:
    """Whether every block of ``func`` computes one element into one-element buffers, under
    loops of extent 1 only: a group of scalar operators, such as an unrolled scalar loop."""
    def unit(e: Any) -> bool:
        return hasattr(e, "value") and int(e.value) == 1
    root = getattr(func.body, "block", None)
    if root is None:
        return False
    stack = [root]
    while stack:
        node = stack.pop()
        if hasattr(node, "seq"):                        # NOTE: SeqStmt
            stack.extend(node.seq)
        elif hasattr(node, "loop_var"):                 # NOTE: For
            if not unit(node.extent):
                return False
            stack.append(node.body)
        elif hasattr(node, "block"):                    # NOTE: SBlockRealize
            stack.append(node.block)
        elif hasattr(node, "iter_vars") and hasattr(node, "alloc_buffers"):  # NOTE: SBlock
            if not all(unit(iv.dom.extent) for iv in node.iter_vars) or \
                    not all(unit(d) for b in node.alloc_buffers for d in b.shape) or \
                    not all(unit(r.extent) for acc in (node.reads, node.writes)
                            for a in acc for r in a.region):
                return False
            stack.append(node.body)
    return True


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
        if kind == "matmul" and not _matrix_vector(sch, blk):
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
    ``"per-block"``, ``"parallel"``, ``"inline+parallel"``, ``"scalar"`` (one-element buffers
    only: left as it is) or ``"none"``).
    ``serial_below``: a kernel with a smaller iteration space gets no parallel loops;
    ``serial``: no parallel loops at all.
    """
    func = unaligned_params(func)
    if scalar_func(func):
        # NOTE: nothing to split, vectorize or parallelize; the one-element intermediates are
        # stack slots that LLVM keeps in registers. Inlining them (one s_tir compute_inline a
        # block, each costing time in the block count) only made large scalar groups slow to
        # compile: W6's unrolled 1000-step gradient spent 11 s in 12,000 inlines. Decided
        # before work_volume, which makes a Schedule of every block.
        if report is not None:
            report.append("scalar")
        return _tvm().IRModule({"main": func})
    vol = work_volume(func) if serial_below else None
    _SERIAL[0] = serial or (vol is not None and vol < serial_below)
    try:
        return _schedule_cpu(func, kind, report)
    finally:
        _SERIAL[0] = False


# Copy the input of a strided 1x1 convolution subsampled (a dense NCHW buffer) before the
# convolution, which then runs as a stride-1 one (conv-gemm where the pixels allow)
SUBSAMPLE_STRIDED = True


def _subsample_strided_1x1(sch: Any, blk: Any, schedule: bool = True,
                           strides: tuple[int, ...] = (2, 3, 4)) -> Any | None:
    """For a 1x1, unpadded NCHW convolution with a stride above 1: a block copying the pixels
    it reads, ``x[n, c, s*y, s*x]``, into a dense ``[N, C, OH, OW]`` buffer that the
    convolution reads instead (returned; scheduled, parallel over (image, channel), unless
    ``schedule`` is False); else None. ``strides=(1,)``: the same copy of a stride-1 one (for
    :func:`_input_at_panel`)."""
    if not SUBSAMPLE_STRIDED or _conv_nchw(sch, blk) is None:
        return None
    loops = sch.get_loops(blk)
    if _extent(sch, loops[5]) != 1 or _extent(sch, loops[6]) != 1:
        return None
    stmt = sch.get(blk)
    ivs = [iv.var for iv in stmt.iter_vars]
    data = stmt.reads[0].region
    if len(data) != 4 or not data[1].min.same_as(ivs[4]):
        return None
    from tvm.sym import analyzer as arith
    ana = arith.Analyzer()
    stride = None
    for st in strides:
        if any(ana.can_prove_equal(data[2].min, ivs[2] * st + r) and
               ana.can_prove_equal(data[3].min, ivs[3] * st + c)
               for r, c in ((ivs[5], ivs[6]), (0, 0))):
            stride = st
    if stride is None:
        return None
    rb = sch.reindex(blk, ("read", 0))
    # NOTE: reindex lays the copy out by the convolution's iterators, [n, y, x, c]
    sch.transform_layout(rb, ("write", 0), lambda n, y, x, c: (n, c, y, x))
    if not schedule:
        return rb
    n_, y, x, c = sch.get_loops(rb)
    sch.reorder(n_, c, y, x)
    _parallel(sch, sch.fuse(n_, c))
    return rb


# The input of a stride-1 1x1 conv-gemm packed per pixel panel into a contiguous [C, panel
# width] buffer, inside the GEMM's parallel loop, just before the panel's output-channel tiles
# read it (False: the tiles read the input rows in place, a page apart; for before/after
# figures)
PACK_PANELS = True


def _input_at_panel(sch: Any, rb: Any, conv: Any) -> None:
    """Move the input copy ``rb`` (:func:`_subsample_strided_1x1` with ``strides=(1,)``,
    unscheduled) of a conv-gemm convolution ``conv`` (scheduled: its outer loop the parallel
    pixel panels, its innermost the panel's pixels) into each panel: the copy's buffer laid
    out ``[N, panels, C, width]`` and its iteration flattened to ``[N, C, OH * OW]`` so that
    a panel needs exactly its own pixels, computed at the panel loop, the pixels vectorized."""
    ow = _extent(sch, sch.get_loops(rb)[2])       # the copy's loops: (n, y, x, c)
    nr = _extent(sch, sch.get_loops(conv)[-1])
    if ow is None or nr is None:
        raise ValueError("symbolic extents")
    sch.transform_layout(rb, ("write", 0),
                         lambda n, c, y, x: (n, (y * ow + x) // nr, c, (y * ow + x) % nr))
    sch.transform_block_layout(rb, lambda n, y, x, c: (n, c, y * ow + x))
    sch.compute_at(rb, sch.get_loops(conv)[0])
    _try_vectorize(sch, sch.get_loops(rb)[-1])


def _gemm_plan(sch: Any) -> None:
    inline_all(sch)
    reds = [b for b in blocks(sch) if _is_reduction(sch, b)]
    if len(reds) != 1:
        raise ValueError("not one reduction")
    # NOTE: a strided one keeps its separate subsampling copy: packed per panel instead, it
    # measured 0.6-3% slower (ResNet-50's 256->128 56x56/2, 1 and 2 threads; RESULTS.md)
    pack = None
    if _subsample_strided_1x1(sch, reds[0]) is None and PACK_PANELS:
        pack = _subsample_strided_1x1(sch, reds[0], schedule=False, strides=(1,))
    schedule_conv1x1_gemm(sch, reds[0])
    if pack is not None:
        _input_at_panel(sch, pack, reds[0])


# Pools get schedule_pool (False: the generic reduction schedule; for before/after figures)
POOL_ROWS = True


def _pool_plan(sch: Any) -> None:
    inline_all(sch, keep=("T_pad",))
    reds = [b for b in blocks(sch) if _is_reduction(sch, b)]
    if len(reds) != 1:
        raise ValueError("not one reduction")
    pad = next((b for b in blocks(sch) if sch.get(b).name_hint == "T_pad"), None)
    schedule_pool(sch, reds[0], pad)


def _rows_plan(sch: Any) -> None:
    inline_all(sch, keep=("T_pad",))
    reds = [b for b in blocks(sch) if _is_reduction(sch, b)]
    if len(reds) != 1:
        raise ValueError("not one reduction")
    pad = next((b for b in blocks(sch) if sch.get(b).name_hint == "T_pad"), None)
    schedule_conv_rows(sch, reds[0], pad)


def _depthwise_plan(sch: Any) -> None:
    inline_all(sch, keep=("T_pad",))
    reds = [b for b in blocks(sch) if _is_reduction(sch, b)]
    if len(reds) != 1:
        raise ValueError("not one reduction")
    pad = next((b for b in blocks(sch) if sch.get(b).name_hint == "T_pad"), None)
    schedule_conv_depthwise(sch, reds[0], pad)


# Stage the zero-padded input of the channel schedule in a buffer (one parallel copy per call)
# instead of testing the bounds at every load of the reduction: measured 1.4-1.7x on ResNet-50's
# 3x3 and 7x7 convolutions (1 thread; benchmarks/RESULTS.md)
STAGE_PAD = True


def _conv_plan(sch: Any) -> None:
    inline_all(sch, keep=("T_pad",) if STAGE_PAD else ())
    reds = [b for b in blocks(sch) if _is_reduction(sch, b)]
    if len(reds) != 1:
        raise ValueError("not one reduction")
    pad = next((b for b in blocks(sch) if sch.get(b).name_hint == "T_pad"), None)
    _subsample_strided_1x1(sch, reds[0])
    schedule_conv_channels(sch, reds[0])
    if pad is not None:
        loops = sch.get_loops(pad)
        # parallel over (image, channel), the rows vectorized
        _parallel(sch, sch.fuse(*loops[:2]))
        _try_vectorize(sch, loops[-1])


# Register tiles (output columns) of the blocked convolution schedule, by preference:
# regular convolutions (one input broadcast per column and input channel) and depthwise ones
# (one vector load per column and tap)
NCHWC_TILES = (7, 8, 6, 5, 4, 3, 2, 1)
NCHWC_DW_TILES = (14, 8, 7, 16, 12, 6, 5, 4, 3, 2, 1)
# channel blocks per register tile of a regular blocked convolution (else 2, else 1; each
# input broadcast then feeds this many weight vectors)
NCHWC_BLOCK_TILE = 2


def _conv_nchwc(sch: Any, blk: Any) -> bool:
    """Whether ``blk`` is a conv2d writing ``out[n, cb, y, x, c]`` (a blocked ``NCHW<b>c``
    result, ``conv-nchwc``) reduced over ``rc, ry, rx``, with its weight (second read) indexed
    ``[cb, rc, ry, rx, c]`` (``OIHW<b>o``, the same block)."""
    stmt = sch.get(blk)
    ivs = [iv.var for iv in stmt.iter_vars]
    if _iter_types(sch, blk) != [0, 0, 0, 0, 0, 2, 2, 2] or len(stmt.reads) < 2 or \
            len(stmt.writes) != 1 or len(sch.get_loops(blk)) != 8:
        return False
    out = stmt.writes[0].region
    if len(out) != 5 or not all(r.min.same_as(v) for r, v in zip(out, ivs)):
        return False
    w = [r.min for r in stmt.reads[1].region]
    return len(w) == 5 and all(m.same_as(ivs[i]) for m, i in zip(w, (1, 5, 6, 7, 4)))


def schedule_conv_nchwc(sch: Any, blk: Any) -> None:
    """A blocked-layout conv2d (``NCHW<b>c`` result, ``OIHW<b>o`` weight; regular, grouped or
    depthwise) vectorized over the channel block.

    Loops ``(n, cb, y) parallel, x/tile, rc, ry, rx, x-tile unrolled, c vectorized``: each
    weight vector is read in place, contiguously; a regular convolution broadcasts each input
    element to the block, a depthwise one (``rc`` of extent 1) loads each input as a vector of
    the block's channels (contiguous for any stride: no gathers) with the window unrolled. The
    ``tile x b`` accumulators stay in registers and are written back contiguously, where the
    fused epilogue runs, vectorized over the block. Raises ``ValueError`` for other blocks."""
    if not _conv_nchwc(sch, blk):
        raise ValueError("not a blocked conv2d block")
    n_, cb, y, x, c, rc, ry, rx = sch.get_loops(blk)
    ow, ci, lanes = _extent(sch, x), _extent(sch, rc), _extent(sch, c)
    if ow is None or ci is None or lanes is None or lanes > 64:
        raise ValueError("symbolic extents")
    depthwise = ci == 1
    if not depthwise and NCHWC_SUBSAMPLE:
        _subsample_nchwc(sch, blk)
    tile = next(d for d in (NCHWC_DW_TILES if depthwise else NCHWC_TILES) if ow % d == 0)
    ncb = _extent(sch, cb) or 1
    cbt = 1 if depthwise else next((t for t in (NCHWC_BLOCK_TILE, 2, 3, 1)
                                    if ncb % t == 0 and t * lanes <= 32), 1)
    x_o, x_i = sch.split(x, [None, tile])
    cb_o, cb_i = sch.split(cb, [None, cbt])
    sch.reorder(n_, cb_o, y, x_o, rc, ry, rx, cb_i, x_i, c)
    _accumulate_at(sch, blk, x_o)
    par = sch.fuse(n_, cb_o, y)
    if depthwise:
        sch.unroll(ry)
        sch.unroll(rx)
    sch.unroll(cb_i)
    sch.unroll(x_i)
    sch.vectorize(c)
    _parallel(sch, par)
    sch.decompose_reduction(blk, rc)


# Stage the zero-padded input of a blocked depthwise convolution in a buffer (as the regular
# ones do). False (the default): the window loads test the bounds, once per column and tap
# for a whole channel vector; measured on MobileNet v2 (1 thread, CPU time): its depthwise
# layers 1.3-3.7x faster without the extra pass over the input, the model 8.1 -> 7.0 ms
NCHWC_DW_STAGE_PAD = False


# A strided 1x1 blocked convolution reads a subsampled copy of its input (one parallel copy,
# the pixels it reads made dense) instead of every s-th pixel
NCHWC_SUBSAMPLE = True


def _subsample_nchwc(sch: Any, blk: Any) -> None:
    """For a 1x1, unpadded, strided blocked convolution ``blk`` (loops ``n, cb, y, x, c, rc,
    ry, rx``) reading a blocked input ``x[n, rc // B, s*y, s*x, rc % B]``: a block copying
    those pixels into a dense ``[N, C/B, OH, OW, B]`` buffer, which the convolution reads
    instead; nothing for any other convolution."""
    loops = sch.get_loops(blk)
    if _extent(sch, loops[6]) != 1 or _extent(sch, loops[7]) != 1:
        return
    stmt = sch.get(blk)
    ivs = [iv.var for iv in stmt.iter_vars]
    data = stmt.reads[0].region
    buf = getattr(stmt.reads[0], "source", None)
    if len(data) != 5 or buf is None or not hasattr(buf.shape[4], "value"):
        return
    from tvm.sym import analyzer as arith
    ana = arith.Analyzer()
    if not any(ana.can_prove_equal(data[2].min, ivs[2] * st + ivs[6]) and
               ana.can_prove_equal(data[3].min, ivs[3] * st + ivs[7]) for st in (2, 3, 4)):
        return
    b = int(buf.shape[4].value)
    rb = sch.reindex(blk, ("read", 0))
    sch.transform_layout(rb, ("write", 0), lambda n, y, x, c: (n, c // b, y, x, c % b))
    n_, y, x, c = sch.get_loops(rb)
    c_o, c_i = sch.split(c, [None, b])
    sch.reorder(n_, c_o, y, x, c_i)
    _parallel(sch, sch.fuse(n_, c_o, y))
    _try_vectorize(sch, c_i)


def _nchwc_plan(sch: Any) -> None:
    stage = STAGE_PAD
    if not NCHWC_DW_STAGE_PAD:
        reds = [b for b in blocks(sch) if _is_reduction(sch, b)]
        loops = sch.get_loops(reds[0]) if len(reds) == 1 else []
        if len(loops) == 8 and _extent(sch, loops[5]) == 1:
            stage = False
    inline_all(sch, keep=("T_pad",) if stage else ())
    reds = [b for b in blocks(sch) if _is_reduction(sch, b)]
    if len(reds) != 1:
        raise ValueError("not one reduction")
    pad = next((b for b in blocks(sch) if sch.get(b).name_hint == "T_pad"), None)
    schedule_conv_nchwc(sch, reds[0])
    if pad is not None:
        loops = sch.get_loops(pad)
        _parallel(sch, sch.fuse(*loops[:2]))
        _try_vectorize(sch, loops[-1])


def schedule_pool_nchwc(sch: Any, blk: Any) -> None:
    """A max / average pool over a blocked ``NCHW<b>c`` input: ``(n, cb, y) parallel, x,
    window, c vectorized`` (the window's bounds tests do not depend on the channel), the
    epilogue per column, vectorized. Raises ``ValueError`` for other blocks."""
    stmt = sch.get(blk)
    ivs = [iv.var for iv in stmt.iter_vars]
    if _iter_types(sch, blk) != [0, 0, 0, 0, 0, 2, 2] or len(sch.get_loops(blk)) != 7 or \
            len(stmt.writes) != 1 or not stmt.reads:
        raise ValueError("not a blocked 2-d pool block")
    out, data = stmt.writes[0].region, stmt.reads[0].region
    if len(out) != 5 or not all(r.min.same_as(v) for r, v in zip(out, ivs)) or \
            len(data) != 5 or not data[4].min.same_as(ivs[4]):
        raise ValueError("not a blocked pool")
    n_, cb, y, x, c, ry, rx = sch.get_loops(blk)
    sch.reorder(n_, cb, y, x, ry, rx, c)
    _accumulate_at(sch, blk, x)
    sch.unroll(ry)
    sch.unroll(rx)
    sch.vectorize(c)
    _parallel(sch, sch.fuse(n_, cb, y))
    sch.decompose_reduction(blk, ry)


def _pool_nchwc_plan(sch: Any) -> None:
    inline_all(sch)
    reds = [b for b in blocks(sch) if _is_reduction(sch, b)]
    if len(reds) != 1:
        raise ValueError("not one reduction")
    schedule_pool_nchwc(sch, reds[0])


def _schedule_cpu(func: Any, kind: str, report: list[str] | None) -> Any:
    tvm = _tvm()
    strategies: list[tuple[str, Callable[[Any], Any]]] = [
        ("conv-nchwc", _nchwc_plan),
        ("conv-depthwise", _depthwise_plan),
        ("conv-rows", _rows_plan),
        ("conv-gemm", _gemm_plan),
        ("conv-channels", _conv_plan)] if kind == "conv" else \
        [("pool-nchwc", _pool_nchwc_plan), ("pool-rows", _pool_plan)] \
        if kind == "pool" and POOL_ROWS else \
        [("conv-transpose", schedule_conv_transpose)] if kind == "convt" and CONV_TRANSPOSE \
        else []
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
