"""The batch im2col layout, shared by the tiled (CPU), whole-batch and blocked (device)
convolutions.

The patch matrix ``cols`` has shape ``(C*fh*fw, Ho*Wo*B)``: row ``f = (c*fh + u)*fw + v`` is the
patch element (neon's order), column ``(i*Wo + j)*B + b`` the output position. Forward
``y2 = w2 @ cols``; backward ``dw2 = dy2 @ cols.T`` and ``dcols = w2.T @ dy2``, folded back.
Batch-innermost columns make the copy and the fold move runs of ``Wo*B`` or ``B`` contiguous
elements, and ``y2`` *is* the output in CHWN memory (:mod:`distnet.ops.layout`). A block of
output rows ``i0 ... i0 + m - 1`` is the contiguous column range of those rows, so every
algorithm cuts the matrix by rows of the output.
"""
from ..layout import empty_chwn, is_chwn
from ..parallel import copyto as pcopyto
from ..parallel import kernel_threads
from ..windows import patches, to_cols
from ..workspace import scratch
from .shapes import crop_into, keeps_all, padded_hw

#: patches (B, C, Ho, Wo, fh, fw) -> the im2col layout (C, fh, fw, Ho, Wo, B)
COLS = to_cols(2)


def to_chwn(x, work=None, name="chwn", pad=None):
    """``x (B, C, H, W)`` zero-padded by ``pad`` in (C, H, W, B) memory, still indexed as
    (B, C, H, W): ``x`` itself if it already is and needs no padding, else a copy into the
    workspace buffer ``name`` (border zeroed once, at allocation)."""
    if pad is None and is_chwn(x):
        return x
    B, C, H, W = x.shape
    Hp, Wp = padded_hw(x.shape, pad)
    buf = scratch(work, name, (C, Hp, Wp, B), x.dtype, like=x, zeroed=pad is not None)
    xn = buf.transpose(3, 0, 1, 2)
    if pad is None:
        pcopyto(xn, x, axis=1)
    else:
        (pt, _), (pl, _) = pad
        pcopyto(xn[:, :, pt:pt + H, pl:pl + W], x, axis=1)
    return xn


def chwn_patches(x, fshape, stride, work=None, pad=None):
    """The patch view ``(B, C, Ho, Wo, fh, fw)`` of ``x`` padded by ``pad`` in CHWN memory
    (:func:`to_chwn`), no copy beyond that one."""
    return patches(to_chwn(x, work, pad=pad), fshape, stride)


def _split_axis_of(shape):
    """The first axis of ``shape`` long enough to cut into kernel-thread shares."""
    T = kernel_threads()
    return next((i for i, n in enumerate(shape) if n >= 2 * T), 0)


def im2col(x, fshape, stride, work=None, pad=None):
    """Contiguous patch matrix ``(C*fh*fw, Ho*Wo*B)`` of ``x (B, C, H, W)`` zero-padded by
    ``pad`` (valid windows of the padded array).

    ``cols[(c*fh + u)*fw + v, (i*Wo + j)*B + b] == x[b, c, i*sy + u, j*sx + v]``. With a
    ``work`` space the matrix is its buffer (reused by the next call). The copy reads runs of
    ``Wo*B`` (stride 1) or ``B`` contiguous elements of the CHWN input.
    """
    p = chwn_patches(x, fshape, stride, work, pad)      # (B, C, Ho, Wo, fh, fw) view, no copy
    B, C, Ho, Wo, fh, fw = p.shape
    cols = scratch(work, "im2col", (C, fh, fw, Ho, Wo, B), x.dtype, like=x)
    pcopyto(cols, p.transpose(COLS), axis=_split_axis_of(cols.shape))
    return cols.reshape(C * fh * fw, Ho * Wo * B)


def patch_rows(buf, p, images, i0, m, xp):
    """The im2col of output rows ``i0 ... i0 + m - 1`` of ``images`` (a slice of the batch) of
    the patch view ``p``, copied into the flat buffer ``buf``: ``(C, fh, fw, m, Wo, Bs)``."""
    B, C, Ho, Wo, fh, fw = p.shape
    Bs = images.stop - images.start
    cols = buf[:C * fh * fw * m * Wo * Bs].reshape(C, fh, fw, m, Wo, Bs)
    xp.copyto(cols, p[images, :, i0:i0 + m].transpose(COLS))
    return cols


def dy_rows(buf, dy, images, i0, m, xp):
    """Output rows ``i0 ... i0 + m - 1`` of ``images`` of ``dy (B, K, Ho, Wo)`` copied into
    the flat buffer ``buf`` in the im2col column order: ``(K, m*Wo*Bs)``."""
    K, Wo = dy.shape[1], dy.shape[3]
    Bs = images.stop - images.start
    d = buf[:K * m * Wo * Bs].reshape(K, m, Wo, Bs)
    xp.copyto(d, dy[images, :, i0:i0 + m].transpose(1, 2, 3, 0))
    return d.reshape(K, m * Wo * Bs)


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
