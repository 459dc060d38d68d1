"""The batch im2col layout, shared by the tiled (CPU), whole-batch and blocked (device)
convolutions, for any number of spatial axes (written here for images; a volume adds an axis
to the patch element and to the output position alike).

The patch matrix ``cols`` has shape ``(C*fh*fw, Ho*Wo*B)``: row ``f = (c*fh + u)*fw + v`` is the
patch element (neon's order), column ``(i*Wo + j)*B + b`` the output position. Forward
``y2 = w2 @ cols``; backward ``dw2 = dy2 @ cols.T`` and ``dcols = w2.T @ dy2``, folded back.
Batch-innermost columns make the copy and the fold move runs of ``Wo*B`` or ``B`` contiguous
elements, and ``y2`` *is* the output in CHWN memory (:mod:`distnet.ops.layout`). A block of
output rows ``i0 ... i0 + m - 1`` is the contiguous column range of those rows, so every
algorithm cuts the matrix by rows of the output (by planes of a volume: the first axis).
"""
import math

from ..layout import chwn_order, empty_chwn, is_chwn
from ..parallel import copyto as pcopyto
from ..parallel import kernel_threads
from ..windows import patches, to_cols
from ..workspace import scratch
from .shapes import crop_into, keeps_all, padded_shape


def to_chwn(x, work=None, name="chwn", pad=None):
    """``x (B, C, H, W)`` (any number of spatial axes) zero-padded by ``pad`` in (C, H, W, B)
    memory, still indexed as (B, C, H, W): ``x`` itself if it already is and needs no padding,
    else a copy into the workspace buffer ``name`` (border zeroed once, at allocation)."""
    if pad is None and is_chwn(x):
        return x
    xn = empty_chwn(x.shape[:2] + padded_shape(x.shape, pad), x.dtype, like=x, work=work, name=name,
                    zeroed=pad is not None)
    if pad is None:
        pcopyto(xn, x, axis=1)
    else:
        inner = tuple(slice(lo, lo + n) for n, (lo, _) in zip(x.shape[2:], pad))
        pcopyto(xn[(slice(None), slice(None)) + inner], x, axis=1)
    return xn


def chwn_patches(x, fshape, stride, work=None, pad=None, dilation=None):
    """The patch view ``(B, C, Ho, Wo, fh, fw)`` of ``x`` padded by ``pad`` in CHWN memory
    (:func:`to_chwn`), no copy beyond that one."""
    return patches(to_chwn(x, work, pad=pad), fshape, stride, dilation)


def _split_axis_of(shape):
    """The first axis of ``shape`` long enough to cut into kernel-thread shares."""
    T = kernel_threads()
    return next((i for i, n in enumerate(shape) if n >= 2 * T), 0)


def im2col(x, fshape, stride, work=None, pad=None, dilation=None):
    """Contiguous patch matrix ``(C*fh*fw, Ho*Wo*B)`` of ``x (B, C, H, W)`` zero-padded by
    ``pad`` (valid windows of the padded array).

    ``cols[(c*fh + u)*fw + v, (i*Wo + j)*B + b] == x[b, c, i*sy + u*dy, j*sx + v*dx]`` (the
    ``dilation`` ``(dy, dx)``, 1 by default; a volume likewise). With a ``work`` space the matrix
    is its buffer (reused by the next call). The copy reads runs of ``Wo*B`` (stride 1) or ``B``
    contiguous elements of the CHWN input.
    """
    p = chwn_patches(x, fshape, stride, work, pad, dilation)   # (B, C, Ho, Wo, fh, fw) view, no copy
    nd = len(fshape)
    B, C = p.shape[:2]
    out, f = p.shape[2:2 + nd], p.shape[2 + nd:]
    cols = scratch(work, "im2col", (C,) + f + out + (B,), x.dtype, like=x)
    pcopyto(cols, p.transpose(to_cols(nd)), axis=_split_axis_of(cols.shape))
    return cols.reshape(C * math.prod(f), math.prod(out) * B)


def patch_rows(buf, p, images, i0, m, xp):
    """The im2col of output rows ``i0 ... i0 + m - 1`` (the first spatial axis: planes of a
    volume) of ``images`` (a slice of the batch) of the patch view ``p``, copied into the flat
    buffer ``buf``: ``(C, fh, fw, m, Wo, Bs)``."""
    nd = (p.ndim - 2) // 2
    C = p.shape[1]
    out, f = p.shape[2:2 + nd], p.shape[2 + nd:]
    Bs = images.stop - images.start
    shape = (C,) + f + (m,) + out[1:] + (Bs,)
    cols = buf[:math.prod(shape)].reshape(shape)
    xp.copyto(cols, p[images, :, i0:i0 + m].transpose(to_cols(nd)))
    return cols


def dy_rows(buf, dy, images, i0, m, xp):
    """Output rows ``i0 ... i0 + m - 1`` (the first spatial axis) of ``images`` of
    ``dy (B, K, Ho, Wo)`` copied into the flat buffer ``buf`` in the im2col column order:
    ``(K, m*Wo*Bs)``."""
    K, rest = dy.shape[1], dy.shape[3:]
    Bs = images.stop - images.start
    shape = (K, m) + rest + (Bs,)
    d = buf[:math.prod(shape)].reshape(shape)
    xp.copyto(d, dy[images, :, i0:i0 + m].transpose(chwn_order(dy.ndim)))
    return d.reshape(K, math.prod(shape[1:]))


def add_product(first, a, b, acc, part, xp):
    """``acc = a @ b`` when ``first``, else ``acc += a @ b`` (through the buffer ``part``):
    blocks' weight-gradient products summed in block order, the same bits every run."""
    if first:
        xp.matmul(a, b, out=acc)
    else:
        xp.matmul(a, b, out=part)
        acc += part


def dx_buffer(dx_out, crop, shape, dtype, like, work):
    """Where the input gradient ``(B, C, H, W)`` is folded: ``dx_out`` itself when it is held
    in CHWN memory and nothing is cropped, else a CHWN workspace buffer."""
    if keeps_all(crop) and dx_out is not None and is_chwn(dx_out):
        return dx_out
    return empty_chwn(shape, dtype, like=like, work=work, name="dxn")


def finish_dx(dxn, crop, dx_out, xp):
    """The input gradient the caller asked for from the folded ``dxn``: itself when it is
    ``dx_out``, else its crop copied into ``dx_out`` (:func:`~.shapes.crop_into`)."""
    return dx_out if dxn is dx_out else crop_into(dxn, crop, dx_out, xp)
