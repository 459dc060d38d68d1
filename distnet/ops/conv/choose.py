"""Which algorithm a conv call takes, and the public entry points that take it.

In order: an unpadded 1x1 filter with no kernel forced takes :mod:`.pointwise`; else, on the
CPU's arrays (:func:`distnet.ops.dispatch.cache_tiled`), stride 1 on wide rows takes
:mod:`.flat` (:func:`use_flat`) and the rest :mod:`.tiled`; on a device, :mod:`.whole` while
the patch matrix fits the block budget, else :mod:`.blocked`.
"""
from ...backend import get_array_module
from ...errors import GeometryError
from .. import dispatch
from ..workspace import scratch
from . import blocked, flat, tiled, whole
from .pointwise import pointwise_bprop, pointwise_fprop, use_pointwise
from .shapes import check, crop_into, norm_pad, padded_hw

#: The flat-shift kernel is used when an image row is at least this wide (padded) and the
#: wasted columns (``fw - 1`` per row) are at most :data:`FLAT_MAX_WASTE` of the work.
FLAT_MIN_WIDTH = 64
FLAT_MAX_WASTE = 0.2


def use_flat(x_shape, w_shape, stride, xp=None):
    """Whether :func:`conv2d_fprop` takes the flat-shift kernel for these shapes (the CPU's
    arrays only)."""
    if xp is not None and not dispatch.cache_tiled(xp):
        return False
    W, fw = x_shape[3], w_shape[3]
    return tuple(stride) == (1, 1) and W >= FLAT_MIN_WIDTH and (fw - 1) <= FLAT_MAX_WASTE * W


def _method(method, x, w, stride, pad=None):
    if method is None:
        shape = tuple(x.shape[:2]) + padded_hw(x.shape, pad)
        return "flat" if use_flat(shape, w.shape, stride, get_array_module(x)) else "im2col"
    if method == "flat" and tuple(stride) != (1, 1):
        raise GeometryError("the flat-shift conv kernel needs stride 1")
    if method not in ("flat", "im2col"):
        raise ValueError(f"conv2d method must be 'flat' or 'im2col', got {method!r}")
    return method


def output_chwn(x_shape, w_shape, stride, xp=None, pad=None):
    """Whether :func:`conv2d_fprop` would like ``out`` (and :func:`conv2d_bprop` ``dx_out``) in
    CHWN memory (:func:`~distnet.ops.layout.empty_chwn`): the tiled batch im2col kernel, which
    then writes its GEMM and its fold straight into them. Any layout is accepted either way."""
    if xp is not None and not dispatch.prefers_chwn(xp):
        return False
    shape = tuple(x_shape[:2]) + padded_hw(x_shape, norm_pad(pad))
    return not use_flat(shape, w_shape, stride, xp) and not use_pointwise(w_shape, norm_pad(pad), None, None)


def fuses_relu_grad(x, w, stride, pad=None, method=None):
    """Whether :func:`conv2d_bprop` applies ``relu_y``'s mask inside its kernel for these
    arguments (the flat-shift kernel: no batch-sized ``dz``); otherwise it computes
    ``dz = dy * [relu_y > 0]`` first, as a caller could."""
    pad = norm_pad(pad)
    return _method(method, x, w, stride, pad) == "flat" and not use_pointwise(w.shape, pad, None, method)


def _device_blocks(x, w, stride, Ho, Wo, pad):
    """Output rows per block of the device path (``Ho`` or more: the whole batch at once)."""
    budget = blocked.cols_budget(get_array_module(x))
    return blocked.block_rows(x.shape, w.shape, stride, Ho, Wo, x.dtype.itemsize, budget, pad)


def conv2d_fprop(x, w, stride, out=None, relu=False, work=None, method=None, pad=None):
    """Valid cross-correlation of ``x (B, C, H, W)`` with ``w (K, C, fh, fw)``.

    ``y[b, k, i, j] = sum_{c,u,v} w[k, c, u, v] * x[b, c, i*sy + u, j*sx + v]``, shape
    ``(B, K, Ho, Wo)`` with ``Ho = (H - fh)//sy + 1``, ``Wo = (W - fw)//sx + 1``; ``stride`` is
    ``(sy, sx)``. If ``out`` (``(B, K, Ho, Wo)``) is given the result is written there and
    returned. ``relu``: return ``max(y, 0)`` instead (fused into the write). ``work``: a
    :class:`~distnet.ops.workspace.Workspace` for the scratch tiles. ``method``: ``"flat"`` or
    ``"im2col"`` to force a kernel (default: :func:`use_flat`). ``pad = ((top, bottom), (left,
    right))``: zero padding of ``x`` done here (the flat kernel pads one image at a time, so no
    padded copy of the batch is made); ``H, W`` above are then the padded sizes.
    """
    xp = get_array_module(x, w)
    pad = norm_pad(pad)
    Ho, Wo = check(x, w, stride, pad)
    B, K = x.shape[0], w.shape[0]
    if use_pointwise(w.shape, pad, None, method):     # 1x1 filters: one GEMM per image
        return pointwise_fprop(x, w, stride, out, relu)
    if out is None:
        out = xp.empty((B, K, Ho, Wo), dtype=xp.result_type(x.dtype, w.dtype))
    if _method(method, x, w, stride, pad) == "flat":
        return flat.fprop(x, w, out, work, relu, pad)
    if dispatch.cache_tiled(xp):
        return tiled.fprop(x, w, stride, Ho, Wo, out, relu, work, pad)
    n = _device_blocks(x, w, stride, Ho, Wo, pad)
    if n < Ho:
        return blocked.fprop(x, w, stride, Ho, Wo, out, relu, work, pad, n)
    return whole.fprop(x, w, stride, Ho, Wo, out, relu, work, pad)


def conv2d_bprop(x, w, dy, stride, need_dx=True, crop=None, dx_out=None, work=None, method=None,
                 pad=None, relu_y=None):
    """Gradients of :func:`conv2d_fprop` given ``dy (B, K, Ho, Wo)`` = dL/dy.

    Returns ``(dx, dw)``: ``dx (B, C, H, W)`` (``None`` if ``need_dx`` is false; pixels that no
    window reads get 0; overlapping windows add up) and ``dw (K, C, fh, fw)`` =
    ``sum_{b,i,j} dy[b, k, i, j] * x[b, c, i*sy + u, j*sx + v]``: a plain sum over batch and
    positions (the caller scales it).

    ``crop = ((top, bottom), (left, right))``: return only ``dx[:, :, top:H-bottom,
    left:W-right]`` (a layer's own tile inside its zero-padded chunk), C-contiguous; the flat
    kernel computes just that part. ``dx_out``: write ``dx`` there (its shape after the crop).
    ``pad``: ``x`` is unpadded and was padded by :func:`conv2d_fprop`; ``dx`` is then the
    gradient of the unpadded ``x`` (``crop`` defaults to ``pad``). ``relu_y``: the output of
    ``conv2d_fprop(..., relu=True)``; ``dy`` is then the gradient of that output, and the
    gradients returned are those of the conv, with ``dz = dy * [relu_y > 0]`` (the flat kernel
    applies the mask as it reads ``dy``, image by image: :func:`fuses_relu_grad`).
    """
    xp = get_array_module(x, w, dy)
    pad = norm_pad(pad)
    Ho, Wo = check(x, w, stride, pad)
    B, C = x.shape[:2]
    K, _, fh, fw = w.shape
    if dy.shape != (B, K, Ho, Wo):
        raise GeometryError(f"conv2d_bprop: dy {dy.shape} should be {(B, K, Ho, Wo)}")
    if crop is None:
        crop = pad if pad is not None else ((0, 0), (0, 0))
    crop = tuple(tuple(int(c) for c in p) for p in crop)
    pointwise = use_pointwise(w.shape, pad, crop, method)
    if not pointwise and _method(method, x, w, stride, pad) == "flat":
        if not need_dx or (max(crop[0]) <= fh - 1 and max(crop[1]) <= fw - 1):
            return flat.bprop(x, w, dy, crop, work, pad, need_dx, dx_out=dx_out, relu_y=relu_y)
        dx, dw = flat.bprop(x, w, dy, ((0, 0), (0, 0)), work, pad, relu_y=relu_y)
        return crop_into(dx, crop, dx_out, xp), dw
    if relu_y is not None:     # the other kernels take dz = dy * [y > 0] as their dy
        dz = scratch(work, "reludz", dy.shape, dy.dtype, like=dy)
        xp.multiply(dy, relu_y > 0, out=dz)
        dy = dz
    if pointwise:                                     # 1x1 filters: one GEMM per image
        return pointwise_bprop(x, w, dy, stride, need_dx, dx_out)
    if dispatch.cache_tiled(xp):
        return tiled.bprop(x, w, dy, stride, need_dx, Ho, Wo, crop, dx_out, work, pad)
    n = _device_blocks(x, w, stride, Ho, Wo, pad)
    if n < Ho:
        return blocked.bprop(x, w, dy, stride, need_dx, Ho, Wo, crop, dx_out, work, pad, n)
    return whole.bprop(x, w, dy, stride, need_dx, Ho, Wo, crop, dx_out, work, pad)
