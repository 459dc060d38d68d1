"""Sliding windows over ``(B, C, *spatial)`` arrays, for any number of spatial axes: the output
shape, the patch view (im2col without a copy) and its adjoint (fold, col2im with overlaps
added). Shared by conv, pooling, local filtering and LCN.

For ``nd`` spatial axes (2 for images, 3 for volumes), ``fshape`` and ``stride`` have ``nd``
entries, and window ``(i_0, ...)`` reads through tap ``(u_0, ...)`` the input position
``i_d * s_d + u_d`` (valid windows: the caller pads). The patch view is ``(B, C, *windows,
*filter)``; :func:`to_cols` / :func:`from_cols` reorder it to and from the im2col matrix layout
``(C, *filter, *windows, B)`` (patch elements by rows, output positions with the batch innermost
by columns: the batch im2col convolution's).
"""
import itertools

from ..backend import get_array_module
from . import dispatch
from .cuda import windows as cuda_windows


def _dil(dilation, nd):
    """``dilation`` as one int per axis (None: 1 everywhere)."""
    return (1,) * nd if dilation is None else tuple(int(d) for d in dilation)


def extents(fshape, dilation=None):
    """Input positions a window spans per axis: ``(f - 1) * d + 1``."""
    return tuple((f - 1) * d + 1 for f, d in zip(fshape, _dil(dilation, len(fshape))))


def output_shape(in_shape, fshape, stride, dilation=None):
    """Valid-window output sizes: ``(n - extent) // s + 1`` per spatial axis, a tuple (the
    extent of a window is ``(f - 1) * d + 1`` with ``dilation`` ``d``, 1 by default)."""
    return tuple((n - e) // s + 1 for n, e, s in zip(in_shape, extents(fshape, dilation), stride))


def patches(x, fshape, stride, dilation=None):
    """Strided view ``(B, C, *windows, *fshape)`` of the valid windows of ``x (B, C, *spatial)``.

    ``patches(x)[b, c, i, j, u, v] == x[b, c, i*sy + u*dy, j*sx + v*dx]`` (2-D, with the
    dilation ``(dy, dx)``, 1 by default; likewise along every axis). No copy is made. Never
    write through it (windows overlap): with numpy it is read-only; cupy's ``as_strided`` has
    no ``writeable`` flag, so there it is only a rule.
    """
    xp = get_array_module(x)
    out = output_shape(x.shape[2:], fshape, stride, dilation)
    sb, sc, *sp = x.strides
    shape = tuple(x.shape[:2]) + out + tuple(fshape)
    strides = ((sb, sc) + tuple(s * st for s, st in zip(sp, stride))
               + tuple(s * d for s, d in zip(sp, _dil(dilation, len(sp)))))
    if dispatch.views_are_read_only(xp):
        return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides, writeable=False)
    return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)


def to_cols(nd):
    """The axes order taking a patch view ``(B, C, *windows, *filter)`` of ``nd`` spatial axes to
    the im2col layout ``(C, *filter, *windows, B)``."""
    return (1,) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd)) + (0,)


def from_cols(nd):
    """The inverse of :func:`to_cols`: ``(C, *filter, *windows, B)`` -> ``(B, C, *windows,
    *filter)``."""
    return (2 * nd + 1, 0) + tuple(range(1 + nd, 1 + 2 * nd)) + tuple(range(1, 1 + nd))


def tap_slices(out_shape, fshape, stride, dilation=None):
    """Per filter tap ``(u_0, ...)`` in C order: the tap and the slices (one per spatial axis)
    of the input positions it reads in the ``out_shape`` windows, ``u_d * dil_d + s_d * i_d``."""
    dil = _dil(dilation, len(fshape))
    for tap in itertools.product(*map(range, fshape)):
        yield tap, tuple(slice(u * d, u * d + s * (o - 1) + 1, s)
                         for u, d, s, o in zip(tap, dil, stride, out_shape))


@dispatch.op
def fold(cols, x_shape, stride, out=None, dilation=None):
    """Adjoint of :func:`patches`: add ``cols (B, C, *windows, *filter)`` back into an array of
    ``x_shape (B, C, *spatial)`` (overlapping windows add up, taps in C order; pixels no window
    reads stay 0). Written into ``out`` when given; returns it."""
    xp = get_array_module(cols)
    if out is None:
        out = xp.zeros(x_shape, dtype=cols.dtype)
    else:
        out[...] = 0
    nd = len(stride)
    whole = (slice(None), slice(None))
    for tap, slices in tap_slices(cols.shape[2:2 + nd], cols.shape[2 + nd:], stride, dilation):
        out[whole + slices] += cols[(Ellipsis,) + tap]
    return out


@fold.kernel(when=lambda cols, *args, **kwargs: (cols.ndim - 2) // 2 in cuda_windows.FOLD)
def fold(cols, x_shape, stride, out=None, dilation=None):     # one launch instead of one per tap
    xp = get_array_module(cols)
    return cuda_windows.fold(cols, xp.empty(x_shape, dtype=cols.dtype) if out is None else out,
                             stride, _dil(dilation, len(stride)))
