"""Which algorithm a conv call takes, and the public entry points that take it.

In order: an unpadded 1x1 filter with no kernel forced takes :mod:`.pointwise`; else, on the
CPU's arrays (:func:`distnet.ops.dispatch.cache_tiled`), stride 1 on wide rows takes
:mod:`.flat` (:func:`use_flat`) and the rest :mod:`.tiled`; on a device, :mod:`.whole` while
the patch matrix fits the block budget, else :mod:`.blocked`. Every algorithm takes any number
of spatial axes (images, volumes, lines) and a dilation; the choice for images is the one it
always was.
"""
import functools
import math

from ...backend import get_array_module
from ...errors import GeometryError
from .. import dispatch
from ..windows import extents
from ..workspace import scratch
from . import blocked, flat, tiled, whole
from .flat_rows import RowGeometry
from .pointwise import pointwise_bprop, pointwise_fprop, use_pointwise
from .shapes import check, crop_into, dilation_of, norm_pad, padded_shape

#: The flat-shift kernel is used on an image when a row is at least this wide (padded) and the
#: wasted columns (``fw - 1`` per row) are at most :data:`FLAT_MAX_WASTE` of the work.
FLAT_MIN_WIDTH = 64
FLAT_MAX_WASTE = 0.2
#: ... and on a volume or a line when the wide output's garbage (the wasted columns, and a
#: volume's rows between two planes) is at most this fraction of the work: its tiles run
#: across rows and planes, so the row width itself does not matter (benchmarks/README.md,
#: "Volumes": against the tiled im2col).
FLAT_MAX_WASTE_ND = 0.5


def use_flat(x_shape, w_shape, stride, xp=None, dilation=None):
    """Whether :func:`conv_fprop` takes the flat-shift kernel for these shapes (the CPU's
    arrays only; ``x_shape`` padded)."""
    if xp is not None and not dispatch.cache_tiled(xp):
        return False
    if any(s != 1 for s in stride):
        return False
    nd = len(x_shape) - 2
    if nd == 2:
        W, fw = x_shape[3], extents(w_shape[2:], dilation)[1]
        return W >= FLAT_MIN_WIDTH and (fw - 1) <= FLAT_MAX_WASTE * W
    geo = RowGeometry(x_shape[2:], w_shape[2:], dilation_of(dilation, nd))
    return 1 - math.prod(geo.out) / (geo.rows * geo.W) <= FLAT_MAX_WASTE_ND


def workspace_arrays(x_shape, w_shape, stride, relu=False, dilation=None):
    """The workspace :func:`conv_fprop` and :func:`conv_bprop` keep for ``x (B, C, *S)`` (a
    padded chunk, read as it is) on the CPU's arrays, as
    :class:`~distnet.layers.placement.WorkArray` fields (dicts; ``bytes_of(itemsize, images)``
    sizes a kernel thread's buffers, ``input_gradient`` marks the data gradient's): the flat
    kernel's tiles and padded image of ``dz`` (:func:`flat.workspace_bytes
    <distnet.ops.conv.flat.workspace_bytes>`), or the im2col kernel's
    (:func:`tiled.workspace_bytes <distnet.ops.conv.tiled.workspace_bytes>`) and the input
    gradient it folds in CHWN memory (``dxn``); none for 1x1 filters."""
    if use_pointwise(w_shape, None, None, None):
        return []
    shifts = use_flat(tuple(x_shape), w_shape, stride, dilation=dilation)
    arrays = [dict(name=name, bytes_of=functools.partial(_kernel_bytes, shifts, tuple(x_shape), tuple(w_shape),
                                                         tuple(stride), relu, dilation, k),
                   per_sample=False, per_thread=1, input_gradient=bool(k))
              for k, name in enumerate(("tiles", "data gradient tiles"))]
    if not shifts:
        arrays.append(dict(name="dxn", elements=math.prod(x_shape[1:]), input_gradient=True))
    return arrays


def _kernel_bytes(shifts, x_shape, w_shape, stride, relu, dilation, part, itemsize, images):
    """Part ``part`` (0: always, 1: the data gradient's) of a kernel thread's workspace bytes
    for ``images`` images: :func:`workspace_arrays`' sizes (a module function: placements pickle)."""
    if shifts:
        return flat.workspace_bytes(x_shape[2:], w_shape, itemsize, relu, dilation)[part]
    return tiled.workspace_bytes(x_shape, w_shape, stride, itemsize, images, dilation)[part]


def _method(method, x, w, stride, pad=None, dilation=None):
    if method is None:
        shape = tuple(x.shape[:2]) + padded_shape(x.shape, pad)
        return "flat" if use_flat(shape, w.shape, stride, get_array_module(x), dilation) else "im2col"
    if method == "flat" and any(s != 1 for s in stride):
        raise GeometryError("the flat-shift conv kernel needs stride 1")
    if method not in ("flat", "im2col"):
        raise ValueError(f"conv method must be 'flat' or 'im2col', got {method!r}")
    return method


def output_chwn(x_shape, w_shape, stride, xp=None, pad=None, dilation=None):
    """Whether :func:`conv_fprop` would like ``out`` (and :func:`conv_bprop` ``dx_out``) in
    CHWN memory (:func:`~distnet.ops.layout.empty_chwn`): the tiled batch im2col kernel, which
    then writes its GEMM and its fold straight into them. Any layout is accepted either way."""
    if xp is not None and not dispatch.prefers_chwn(xp):
        return False
    shape = tuple(x_shape[:2]) + padded_shape(x_shape, norm_pad(pad))
    return (not use_flat(shape, w_shape, stride, xp, dilation)
            and not use_pointwise(w_shape, norm_pad(pad), None, None))


def fuses_relu_grad(x, w, stride, pad=None, method=None, dilation=None):
    """Whether :func:`conv_bprop` applies ``relu_y``'s mask inside its kernel for these
    arguments (the flat-shift kernel: no batch-sized ``dz``); otherwise it computes
    ``dz = dy * [relu_y > 0]`` first, as a caller could."""
    pad = norm_pad(pad)
    return (_method(method, x, w, stride, pad, dilation) == "flat"
            and not use_pointwise(w.shape, pad, None, method))


def _device_blocks(x, w, stride, out_shape, pad, dilation):
    """Output rows per block of the device path (``Ho`` or more: the whole batch at once)."""
    budget = blocked.cols_budget(get_array_module(x))
    return blocked.block_rows(x.shape, w.shape, stride, out_shape, x.dtype.itemsize, budget, pad, dilation)


def conv_fprop(x, w, stride, out=None, relu=False, work=None, method=None, pad=None, dilation=None):
    """Valid cross-correlation of ``x (B, C, H, W)`` with ``w (K, C, fh, fw)``.

    ``y[b, k, i, j] = sum_{c,u,v} w[k, c, u, v] * x[b, c, i*sy + u, j*sx + v]``, shape
    ``(B, K, Ho, Wo)`` with ``Ho = (H - fh)//sy + 1``, ``Wo = (W - fw)//sx + 1``; ``stride`` is
    ``(sy, sx)``. Any number of spatial axes alike: ``x (B, C, D, H, W)``, ``w (K, C, fd, fh,
    fw)``, ``stride (sz, sy, sx)`` for volumes. ``dilation`` (one int per axis, default 1): tap
    ``u`` reads ``i*sy + u*dy`` (the window spans ``(fh - 1)*dy + 1`` rows). If ``out``
    (``(B, K, Ho, Wo)``) is given the result is written there and returned. ``relu``: return
    ``max(y, 0)`` instead (fused into the write). ``work``: a
    :class:`~distnet.ops.workspace.Workspace` for the scratch tiles. ``method``: ``"flat"`` or
    ``"im2col"`` to force a kernel (default: :func:`use_flat`). ``pad = ((top, bottom), (left,
    right))`` (a pair per axis): zero padding of ``x`` done here (the flat kernel pads one image
    at a time, so no padded copy of the batch is made); ``H, W`` above are then the padded
    sizes.
    """
    xp = get_array_module(x, w)
    pad = norm_pad(pad)
    dilation = None if dilation is None or all(d == 1 for d in dilation) else tuple(dilation)
    out_shape = check(x, w, stride, pad, dilation)
    B, K = x.shape[0], w.shape[0]
    if use_pointwise(w.shape, pad, None, method):     # 1x1 filters: one GEMM per image
        return pointwise_fprop(x, w, stride, out, relu)
    if out is None:
        out = xp.empty((B, K) + out_shape, dtype=xp.result_type(x.dtype, w.dtype))
    if _method(method, x, w, stride, pad, dilation) == "flat":
        return flat.fprop(x, w, out, work, relu, pad, dilation)
    if dispatch.cache_tiled(xp):
        return tiled.fprop(x, w, stride, out_shape, out, relu, work, pad, dilation)
    n = _device_blocks(x, w, stride, out_shape, pad, dilation)
    if n < out_shape[0]:
        return blocked.fprop(x, w, stride, out_shape, out, relu, work, pad, n, dilation)
    return whole.fprop(x, w, stride, out_shape, out, relu, work, pad, dilation)


def conv_bprop(x, w, dy, stride, need_dx=True, crop=None, dx_out=None, work=None, method=None,
               pad=None, relu_y=None, dilation=None):
    """Gradients of :func:`conv_fprop` given ``dy (B, K, Ho, Wo)`` = dL/dy.

    Returns ``(dx, dw)``: ``dx (B, C, H, W)`` (``None`` if ``need_dx`` is false; pixels that no
    window reads get 0; overlapping windows add up) and ``dw (K, C, fh, fw)`` =
    ``sum_{b,i,j} dy[b, k, i, j] * x[b, c, i*sy + u, j*sx + v]``: a plain sum over batch and
    positions (the caller scales it). Any number of spatial axes, and ``dilation``, as
    :func:`conv_fprop`.

    ``crop = ((top, bottom), (left, right))`` (a pair per axis): return only ``dx[:, :,
    top:H-bottom, left:W-right]`` (a layer's own tile inside its zero-padded chunk),
    C-contiguous; the flat kernel computes just that part. ``dx_out``: write ``dx`` there (its
    shape after the crop). ``pad``: ``x`` is unpadded and was padded by :func:`conv_fprop`;
    ``dx`` is then the gradient of the unpadded ``x`` (``crop`` defaults to ``pad``).
    ``relu_y``: the output of ``conv_fprop(..., relu=True)``; ``dy`` is then the gradient of
    that output, and the gradients returned are those of the conv, with ``dz = dy * [relu_y >
    0]`` (the flat kernel applies the mask as it reads ``dy``, image by image:
    :func:`fuses_relu_grad`).
    """
    xp = get_array_module(x, w, dy)
    pad = norm_pad(pad)
    dilation = None if dilation is None or all(d == 1 for d in dilation) else tuple(dilation)
    out_shape = check(x, w, stride, pad, dilation)
    B, C = x.shape[:2]
    K, nd = w.shape[0], x.ndim - 2
    if dy.shape != (B, K) + out_shape:
        raise GeometryError(f"conv_bprop: dy {dy.shape} should be {(B, K) + out_shape}")
    if crop is None:
        crop = pad if pad is not None else ((0, 0),) * nd
    crop = tuple(tuple(int(c) for c in p) for p in crop)
    pointwise = use_pointwise(w.shape, pad, crop, method)
    if not pointwise and _method(method, x, w, stride, pad, dilation) == "flat":
        reach = extents(w.shape[2:], dilation)
        if not need_dx or all(max(c) <= e - 1 for c, e in zip(crop, reach)):
            return flat.bprop(x, w, dy, crop, work, pad, need_dx, dx_out=dx_out, relu_y=relu_y,
                              dilation=dilation)
        dx, dw = flat.bprop(x, w, dy, ((0, 0),) * nd, work, pad, relu_y=relu_y, dilation=dilation)
        return crop_into(dx, crop, dx_out, xp), dw
    if relu_y is not None:     # the other kernels take dz = dy * [y > 0] as their dy
        dz = scratch(work, "reludz", dy.shape, dy.dtype, like=dy)
        xp.multiply(dy, relu_y > 0, out=dz)
        dy = dz
    if pointwise:                                     # 1x1 filters: one GEMM per image
        return pointwise_bprop(x, w, dy, stride, need_dx, dx_out)
    if dispatch.cache_tiled(xp):
        return tiled.bprop(x, w, dy, stride, need_dx, out_shape, crop, dx_out, work, pad, dilation)
    n = _device_blocks(x, w, stride, out_shape, pad, dilation)
    if n < out_shape[0]:
        return blocked.bprop(x, w, dy, stride, need_dx, out_shape, crop, dx_out, work, pad, n, dilation)
    return whole.bprop(x, w, dy, stride, need_dx, out_shape, crop, dx_out, work, pad, dilation)


#: The names the 2-D ops had (the same functions: any number of spatial axes).
conv2d_fprop, conv2d_bprop = conv_fprop, conv_bprop
