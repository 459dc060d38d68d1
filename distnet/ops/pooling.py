"""Max, average and L2 pooling over valid windows of an already padded NCHW chunk (or any number
of spatial axes: ``(B, C, *S)``, volumes ``(B, C, D, H, W)``).

Each (b, c) map is pooled separately. ``fshape`` is ``(fh, fw)``, ``stride`` is ``(sy, sx)``
(one entry per spatial axis); the output is ``(B, C, Ho, Wo)`` with ``Ho = (H - fh)//sy + 1``,
``Wo = (W - fw)//sx + 1`` (docs/neon-semantics.md#pooling). Inputs and outputs are NCHW arrays.

How: the forward passes loop over the ``fh*fw`` window offsets (in C order on any axes); for each, one strided slice of
``x`` holds element ``(u, v)`` of every window, so no ``(B, C, Ho, Wo, fh, fw)`` temporary is
needed. The backward passes are the adjoint (``fold``). Internally every array is kept in
batch-innermost ("CHWN") memory while still indexed as ``(B, C, H, W)``: the slices then have
contiguous runs of ``B`` (or ``Wo*B``) elements instead of single pixels, which makes the numpy
loops 2-8x faster. Max pooling takes inputs, outputs and gradients already held in CHWN memory
(what the small-image conv kernel of :mod:`distnet.ops.conv` returns; :func:`output_chwn`) as they
are, and transposes only what arrives in NCHW; its work is shared out over the kernel threads by
channels. Large planes with non-overlapping windows use NCHW directly (no transposes:
:mod:`distnet.ops.maxpool_nchw`).

On a device that launches kernels (:mod:`distnet.ops.dispatch`), each op is one fused kernel
launch of :mod:`distnet.ops.cuda.pooling` (images; lines and volumes:
:mod:`distnet.ops.cuda.pooling_nd`) that reads its arrays in whatever layout they come (no
copies) and gives the numpy code's results (float64: bit for bit).
"""
from math import prod

from ..backend import get_array_module
from ..errors import GeometryError
from . import dispatch, maxpool_nchw
from .cuda import pooling as cuda_pooling
from .cuda import pooling_nd as cuda_pooling_nd
from .layout import chwn_order, empty_chwn, from_chwn, is_chwn
from .parallel import run_split
from .windows import fold, output_shape, tap_slices
from .workspace import scratch

#: Max pooling over planes of at least this many pixels with non-overlapping windows works in
#: NCHW directly (strided views, no transposes of a large activation); smaller planes use CHWN.
NCHW_MIN_PLANE = 1024


def _nchw_maxpool_ok(x_shape, fshape, stride):
    if len(fshape) != 2:
        return False
    fh, fw = fshape
    return (x_shape[2] * x_shape[3] >= NCHW_MIN_PLANE and tuple(stride) == (fh, fw)
            and fh * fw <= 256)


def uses_nchw_kernel(x_shape, fshape, stride):
    """Whether :func:`maxpool_fprop` takes :mod:`distnet.ops.maxpool_nchw` on the CPU for
    ``x_shape`` (large planes, non-overlapping windows)."""
    return _nchw_maxpool_ok(x_shape, fshape, stride)


def _kernels(fshape):
    """The device kernels of windows of ``fshape``: images', or those of lines and volumes."""
    return cuda_pooling if len(fshape) == 2 else cuda_pooling_nd


def _check_shapes(op, expected, **arrays):
    """A kernel reads and writes raw memory: every array must have the ``expected`` shape."""
    for name, a in arrays.items():
        if a is not None and tuple(a.shape) != tuple(expected):
            raise GeometryError(f"{op}: {name} has shape {tuple(a.shape)}, expected {tuple(expected)}")


def _chwn(a, work=None, name="chwn"):
    """``a (B, C, H, W)`` re-laid out in (C, H, W, B) memory order, still indexed as (B, C, H, W)
    (no copy if it already is; into the workspace buffer ``name`` if ``work`` is given)."""
    xp = get_array_module(a)
    t = a.transpose(chwn_order(a.ndim))
    if work is None or t.flags.c_contiguous:
        return xp.ascontiguousarray(t).transpose(from_chwn(a.ndim))
    buf = work.get(name, t.shape, a.dtype, like=a)
    buf[...] = t
    return buf.transpose(from_chwn(a.ndim))


def _nchw(a):
    """A C-contiguous (NCHW) copy of ``a``, the layout returned to callers."""
    return get_array_module(a).ascontiguousarray(a)


def _out_hw(x_shape, fshape, stride):
    """The output's spatial shape (``(Ho, Wo)`` for images)."""
    out = output_shape(x_shape[2:], fshape, stride)
    if len(x_shape) != 2 + len(fshape) or min(out) < 1 or min(stride) < 1:
        raise GeometryError(f"pooling: window {tuple(fshape)} with stride {tuple(stride)} gives no "
                            f"output on an input of shape {tuple(x_shape)}")
    return out


def _offsets(x_shape, fshape, stride):
    """Yield ``(k, index)`` per window offset ``(u, v)`` in row-major order, ``k = u*fw + v``:
    ``x[index]`` is the ``(B, C, Ho, Wo)`` array of every window's element ``(u, v)`` (any
    number of axes, offsets in C order)."""
    taps = tap_slices(_out_hw(x_shape, fshape, stride), fshape, stride)
    for k, (_, slices) in enumerate(taps):
        yield k, (slice(None), slice(None)) + slices


def _pooled(x, fshape, stride):
    """A new ``(B, C, Ho, Wo)`` output for pooling ``x`` (what a kernel writes)."""
    shape = tuple(x.shape[:2]) + _out_hw(x.shape, fshape, stride)
    return get_array_module(x).empty(shape, dtype=x.dtype)


def _spread(g, x_shape, fshape, stride):
    """``dx (x_shape)``, NCHW, with ``g[b, c, i, j]`` added to every pixel of window ``(i, j)``."""
    xp = get_array_module(g)
    g = _chwn(g)
    cols = xp.broadcast_to(g[(Ellipsis,) + (None,) * len(fshape)], g.shape + tuple(fshape))
    out = empty_chwn(x_shape, g.dtype, like=g)
    return _nchw(fold(cols, x_shape, stride, out=out))


# ----------------------------------------------------------------------------------- max pooling

def inside_of(chunk, in_plane):
    """``(y0, y1, x0, x1)`` (``(start, stop)`` per axis, flat): the part of a chunk (a Box in
    global coordinates, which may reach past the image: its padding) that lies inside the
    ``in_plane = (H, W)`` image (any number of axes), in the chunk's own coordinates; the
    ``inside`` argument of :func:`maxpool_fprop`."""
    return tuple(v for (c0, c1), n in zip(chunk.spans, in_plane)
                 for v in (max(c0, 0) - c0, min(c1, n) - c0))


def pad_with_minus_inf(x, inside, fshape, stride):
    """Max pooling's padding: every pixel of the chunk ``x (B, C, H, W)`` outside ``inside``
    (``(y0, y1, x0, x1)``, see :func:`inside_of`) is set to -inf **in place**, so that a padded
    position never wins a window (the max of a border window of negative values is the max of
    its real values, as in every other framework; zero padding would return 0). Raises
    :class:`GeometryError` if some window holds padding only (padding >= window)."""
    if _all_inside(x.shape, inside, fshape, stride):
        return x
    lowest = -float("inf") if x.dtype.kind == "f" else get_array_module(x).iinfo(x.dtype).min
    for axis, (lo, hi) in enumerate(zip(inside[::2], inside[1::2]), start=2):
        head = (slice(None),) * axis
        x[head + (slice(None, lo),)] = lowest
        x[head + (slice(hi, None),)] = lowest
    return x


def _all_inside(x_shape, inside, fshape, stride):
    """Whether ``inside`` is the whole chunk (no padding); raises :class:`GeometryError` if some
    window holds padding only (see :func:`pad_with_minus_inf`)."""
    spans = tuple(zip(inside[::2], inside[1::2]))
    if spans == tuple((0, n) for n in x_shape[2:]):
        return True
    out = _out_hw(x_shape, fshape, stride)
    # every window must meet [lo, hi) on every axis: the first and the last along each axis
    if not all(f > lo and s * (o - 1) < hi and hi > lo
               for (lo, hi), f, s, o in zip(spans, fshape, stride, out)):
        raise GeometryError(f"max pooling: a {'x'.join(map(str, fshape))} window lies entirely in "
                            "the padding (the padding must be smaller than the window)")
    return False


@dispatch.op
def maxpool_fprop(x, fshape, stride, out=None, work=None, inside=None):
    """Max over each window of ``x (B, C, H, W)``.

    Returns ``(y, argmax)``, both ``(B, C, Ho, Wo)``; ``y`` is C-contiguous. ``argmax`` is the
    row-major index ``u*fw + v`` of the FIRST maximum of the window (numpy ``argmax`` semantics
    for non-NaN values), ``uint8`` when ``fh*fw <= 256`` else ``int32``, in whatever memory
    layout suits :func:`maxpool_bprop` (index it as ``(B, C, Ho, Wo)``; do not rely on strides).
    ``out``: write ``y`` there. ``work``: a Workspace for ``argmax`` and the masks (then
    ``argmax`` is reused by the next call: valid until then). ``inside``: ``(y0, y1, x0, x1)``,
    the image's part of ``x`` when ``x`` is a padded chunk; the rest is padding, overwritten
    with -inf (:func:`pad_with_minus_inf`), so padded positions never win (on a device the
    kernel reads them as -inf instead and ``x`` is left as it is).
    """
    if inside is not None:
        pad_with_minus_inf(x, inside, fshape, stride)
    if _nchw_maxpool_ok(x.shape, fshape, stride):
        return maxpool_nchw.maxpool_fprop(x, fshape, stride, out, work)
    return _maxpool_fprop_chwn(x, fshape, stride, out, work)


@maxpool_fprop.kernel(when=lambda x, fshape, stride, out=None, work=None, inside=None:
                      dispatch.float_arrays(x, out))
def maxpool_fprop(x, fshape, stride, out=None, work=None, inside=None):     # one launch
    xp = get_array_module(x)
    shape = tuple(x.shape[:2]) + _out_hw(x.shape, fshape, stride)
    if inside is None or _all_inside(x.shape, inside, fshape, stride):
        inside = tuple(v for n in x.shape[2:] for v in (0, n))
    _check_shapes("max pooling", shape, out=out)
    y = out if out is not None else xp.empty(shape, dtype=x.dtype)
    argmax = scratch(work, "argmax", shape, _idx_dtype(fshape), like=x)
    return _kernels(fshape).maxpool_fprop(x, y, argmax, fshape, stride, inside,
                                          rows_first=_nchw_maxpool_ok(x.shape, fshape, stride))


def _idx_dtype(fshape):
    return "uint8" if prod(fshape) <= 256 else "int32"


def output_chwn(x_shape, fshape, stride, xp=None):
    """Whether :func:`maxpool_fprop` would like ``out`` (and :func:`maxpool_bprop` ``out``) in
    CHWN memory (``(C, H, W, B)`` memory indexed as ``(B, C, H, W)``): small planes on numpy,
    where it then writes them without a transpose copy. Any layout is accepted either way."""
    if xp is not None and not dispatch.prefers_chwn(xp):
        return False
    return not _nchw_maxpool_ok(x_shape, fshape, stride)


def _to_chwn(a, work, name):
    """``a`` in CHWN memory: itself if it already is, else a copy into ``work[name]`` (split
    over the channels on the kernel threads)."""
    if is_chwn(a):
        return a
    buf = empty_chwn(a.shape, a.dtype, a, work, name)
    run_split(lambda c: _copy(buf[:, c], a[:, c]), a.shape[1], get_array_module(a), size=a.size)
    return buf


def _copy(dst, src):
    dst[...] = src


def _maxpool_fprop_chwn(x, fshape, stride, out, work):
    """Small planes: every array in batch-innermost (CHWN) memory (``x`` and ``out`` are used
    as they are when they already are); the channels are shared out over the kernel threads."""
    xp = get_array_module(x)
    idx_dtype = _idx_dtype(fshape)
    B, C = x.shape[:2]
    xn = _to_chwn(x, work, "chwn")
    shape = (B, C) + _out_hw(x.shape, fshape, stride)
    y = out if out is not None and is_chwn(out) else empty_chwn(shape, x.dtype, x, work, "ychwn")
    argmax = empty_chwn(shape, idx_dtype, x, work, "argmax")
    d = empty_chwn(shape, idx_dtype, x, work, "d")
    m = empty_chwn(shape, "bool", x, work, "m")

    def run(c):
        xc, yc, ac, dc, mc = xn[:, c], y[:, c], argmax[:, c], d[:, c], m[:, c]
        for k, index in _offsets(x.shape, fshape, stride):
            s = xc[index]
            if k == 0:
                yc[...] = s
                ac[...] = 0
                continue
            # Strictly greater, so a later equal value does not replace the first maximum.
            xp.greater(s, yc, out=mc)
            xp.maximum(yc, s, out=yc)
            # argmax = where(m, k, argmax) as plain arithmetic (masked copies are several times
            # slower): k > every index stored so far, so k - argmax never wraps.
            xp.subtract(k, ac, out=dc)
            dc *= mc
            ac += dc
    run_split(run, C, xp, size=x.size)
    if y is out:
        return out, argmax
    if out is not None:
        out[...] = y
        return out, argmax
    return _nchw(y), argmax


@dispatch.op
def maxpool_bprop(dy, argmax, x_shape, fshape, stride, out=None, work=None):
    """Gradient of :func:`maxpool_fprop`: ``dy (B, C, Ho, Wo)`` goes to each window's argmax
    pixel; overlapping windows add up; other pixels get 0. Returns ``dx`` of ``x_shape`` (NCHW),
    written into ``out`` if given."""
    _out_hw(x_shape, fshape, stride)
    if _nchw_maxpool_ok(x_shape, fshape, stride):
        return maxpool_nchw.maxpool_bprop(dy, argmax, x_shape, fshape, stride, out, work)
    return _maxpool_bprop_chwn(dy, argmax, x_shape, fshape, stride, out, work)


@maxpool_bprop.kernel(when=lambda dy, argmax, x_shape, fshape, stride, out=None, work=None:
                      dispatch.float_arrays(dy, out) and argmax.dtype in cuda_pooling.MAXPOOL_BPROP)
def maxpool_bprop(dy, argmax, x_shape, fshape, stride, out=None, work=None):   # one launch
    xp = get_array_module(dy)
    _check_shapes("max pooling", tuple(x_shape[:2]) + _out_hw(x_shape, fshape, stride), dy=dy,
                  argmax=argmax)
    _check_shapes("max pooling", x_shape, out=out)
    dx = out if out is not None else xp.empty(tuple(x_shape), dtype=dy.dtype)
    return _kernels(fshape).maxpool_bprop(dy, argmax, dx, fshape, stride)


def _maxpool_bprop_chwn(dy, argmax, x_shape, fshape, stride, out, work):
    """Adjoint of :func:`_maxpool_fprop_chwn` in CHWN memory (``dy``, ``argmax`` and ``out``
    used as they are when they already are), the channels shared out over the kernel threads.
    Non-overlapping windows write every covered pixel once; overlapping ones add up."""
    xp = get_array_module(dy)
    C, out_shape = x_shape[1], dy.shape[2:]
    dyn = _to_chwn(dy, work, "dychwn")
    argn = _to_chwn(argmax, work, "argchwn")
    dxn = (out if out is not None and is_chwn(out)
           else empty_chwn(x_shape, dy.dtype, dy, work, "dxchwn"))
    m = empty_chwn(dy.shape, "bool", dy, work, "m")
    disjoint = all(s >= f for s, f in zip(stride, fshape))
    # pixels no window covers (cheaper than finding them)
    uncovered = any(n != s * (o - 1) + f or s > f for n, s, o, f in zip(x_shape[2:], stride, out_shape, fshape))
    if not disjoint:
        t = empty_chwn(dy.shape, dy.dtype, dy, work, "t")

    def run(c):
        dxc, dyc, ac, mc = dxn[:, c], dyn[:, c], argn[:, c], m[:, c]
        if not disjoint:
            dxc[...] = 0
        elif uncovered:
            dxc[...] = 0
        for k, index in _offsets(x_shape, fshape, stride):
            xp.equal(ac, k, out=mc)
            if disjoint:
                xp.multiply(dyc, mc, out=dxc[index])
            else:
                tc = t[:, c]
                xp.multiply(dyc, mc, out=tc)
                dxc[index] += tc
    run_split(run, C, xp, size=dxn.size)
    if dxn is out:
        return out
    if out is not None:
        out[...] = dxn
        return out
    return _nchw(dxn)


# ------------------------------------------------------------------------------- average pooling

@dispatch.op
def avgpool_fprop(x, fshape, stride):
    """Mean over each ``fh*fw`` window of ``x (B, C, H, W)`` -> ``(B, C, Ho, Wo)``. Always divides by
    ``fh*fw``: padded zeros count (the caller has already padded)."""
    xn = _chwn(x)
    y = None
    for _, index in _offsets(x.shape, fshape, stride):
        if y is None:
            y = xn[index].copy(order="K")
        else:
            y += xn[index]
    y *= 1.0 / prod(fshape)   # a Python scalar: float32 stays float32
    return _nchw(y)


@avgpool_fprop.kernel(when=lambda x, fshape, stride: dispatch.float_arrays(x))
def avgpool_fprop(x, fshape, stride):           # one launch
    return _kernels(fshape).avgpool_fprop(x, _pooled(x, fshape, stride), fshape, stride)


@dispatch.op
def avgpool_bprop(dy, x_shape, fshape, stride):
    """Gradient of :func:`avgpool_fprop`: ``dy / (fh*fw)`` spread over each window (overlaps add).
    Returns ``dx`` of ``x_shape``."""
    return _spread(dy * (1.0 / prod(fshape)), x_shape, fshape, stride)


@avgpool_bprop.kernel(when=lambda dy, x_shape, fshape, stride: dispatch.float_arrays(dy))
def avgpool_bprop(dy, x_shape, fshape, stride):     # one launch
    _check_shapes("average pooling", tuple(x_shape[:2]) + _out_hw(x_shape, fshape, stride), dy=dy)
    dx = get_array_module(dy).empty(tuple(x_shape), dtype=dy.dtype)
    return _kernels(fshape).avgpool_bprop(dy, dx, fshape, stride)


# ------------------------------------------------------------------------------------ L2 pooling

@dispatch.op
def l2pool_fprop(x, fshape, stride):
    """``y = sqrt(sum_window x**2)`` over each window of ``x (B, C, H, W)`` -> ``(B, C, Ho, Wo)``;
    no epsilon and no averaging (docs/neon-semantics.md#pooling)."""
    xp = get_array_module(x)
    xn = _chwn(x)
    y = t = None
    for _, index in _offsets(x.shape, fshape, stride):
        s = xn[index]
        if y is None:
            y = s * s                       # ufunc order "K": keeps the CHWN layout
            t = xp.empty_like(y)
        else:
            y += xp.multiply(s, s, out=t)
    return _nchw(xp.sqrt(y, out=y))


@l2pool_fprop.kernel(when=lambda x, fshape, stride: dispatch.float_arrays(x))
def l2pool_fprop(x, fshape, stride):            # one launch
    return _kernels(fshape).l2pool_fprop(x, _pooled(x, fshape, stride), fshape, stride)


@dispatch.op
def l2pool_bprop(x, y, dy, fshape, stride):
    """Gradient of :func:`l2pool_fprop`: ``dx[window] += dy * x[window] / yhat`` with ``yhat = y``,
    replaced by 1 where ``y == 0`` exactly (an all-zero window then passes no gradient instead of
    NaN). ``x (B, C, H, W)``, ``y`` and ``dy`` ``(B, C, Ho, Wo)``; returns ``dx`` like ``x``.

    ``x[pixel]`` is the same in every window that reads the pixel, so it is factored out:
    ``dx = x * spread(dy / yhat)``.
    """
    xp = get_array_module(x, y, dy)
    yhat = xp.where(y == 0, 1, y)
    return x * _spread(dy / yhat, x.shape, fshape, stride)


@l2pool_bprop.kernel(when=lambda x, y, dy, fshape, stride: dispatch.float_arrays(x, y, dy))
def l2pool_bprop(x, y, dy, fshape, stride):     # one launch
    _check_shapes("L2 pooling", tuple(x.shape[:2]) + _out_hw(x.shape, fshape, stride), y=y, dy=dy)
    dx = get_array_module(x).empty(x.shape, dtype=x.dtype)
    return _kernels(fshape).l2pool_bprop(x, y, dy, dx, fshape, stride)
