"""Sliding windows over NCHW arrays: the patch view (im2col without a copy) and its adjoint
(fold, col2im with overlaps added). Shared by conv, pooling, local filtering and LCN."""
from ..backend import get_array_module
from .cuda import launch as cuda
from .cuda import windows as cuda_windows


def output_shape(in_hw, fshape, stride):
    """Valid-window output ``(Ho, Wo)``: ``(H - fh) // sy + 1`` and ``(W - fw) // sx + 1``."""
    (H, W), (fh, fw), (sy, sx) = in_hw, fshape, stride
    return (H - fh) // sy + 1, (W - fw) // sx + 1


def patches(x, fshape, stride):
    """Strided view ``(B, C, Ho, Wo, fh, fw)`` of the valid windows of ``x (B, C, H, W)``.

    ``patches(x)[b, c, i, j, u, v] == x[b, c, i*sy + u, j*sx + v]``. No copy is made. Never
    write through it (windows overlap): with numpy it is read-only; cupy's ``as_strided`` has
    no ``writeable`` flag, so there it is only a rule.
    """
    xp = get_array_module(x)
    (fh, fw), (sy, sx) = fshape, stride
    B, C, H, W = x.shape
    Ho, Wo = output_shape((H, W), fshape, stride)
    sb, sc, sh, sw = x.strides
    shape, strides = (B, C, Ho, Wo, fh, fw), (sb, sc, sh * sy, sw * sx, sh, sw)
    if xp.__name__ == "numpy":
        return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides, writeable=False)
    return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)


def fold(cols, x_shape, stride, out=None):
    """Adjoint of :func:`patches`: add ``cols (B, C, Ho, Wo, fh, fw)`` back into an array of
    ``x_shape (B, C, H, W)`` (overlapping windows add up; pixels no window reads stay 0)."""
    xp = get_array_module(cols)
    B, C, Ho, Wo, fh, fw = cols.shape
    sy, sx = stride
    if cuda.available(xp):      # one launch instead of one per tap
        return cuda_windows.fold(cols, xp.empty(x_shape, dtype=cols.dtype) if out is None else out,
                                 stride)
    if out is None:
        out = xp.zeros(x_shape, dtype=cols.dtype)
    else:
        out[...] = 0
    for u in range(fh):
        for v in range(fw):
            out[:, :, u:u + sy * (Ho - 1) + 1:sy, v:v + sx * (Wo - 1) + 1:sx] += cols[:, :, :, :, u, v]
    return out
