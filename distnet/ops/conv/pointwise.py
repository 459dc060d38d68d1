"""1x1 ("pointwise") convolution as a plain GEMM per image, any stride, no im2col copy; any
number of spatial axes (a 1x1x1 filter on volumes alike).

``x (B, C, H, W)``, ``w (K, C, 1, 1)``, ``stride (sy, sx)``: ``y[b, k, i, j] = sum_c w[k, c] *
x[b, c, i*sy, j*sx]``, ``(B, K, Ho, Wo)`` with ``Ho = (H - 1)//sy + 1``. Read as matrices,
``y[b] (K, P) = w2 (K, C) @ xs[b] (C, P)`` with ``xs`` the (strided) input pixels and ``P = Ho*Wo``:
with stride 1 and a C-contiguous ``x`` every operand is a free reshape, so the forward is one
batched GEMM and no patch matrix is built. Backward side by side::

    dw (K, C)     = sum_b dy[b] (K, P) @ xs[b].T
    dx[b] (C, P)  = w2.T @ dy[b]       (stride > 1: scattered into the pixels the stride read,
                                        every other pixel 0)

:func:`distnet.ops.conv.conv2d_fprop` / :func:`~distnet.ops.conv.conv2d_bprop` call these for
unpadded 1x1 filters when no kernel is forced (:func:`use_pointwise`, :mod:`.choose`); they
compute the same numbers as the other kernels up to summation order.
"""
import math

from ...backend import get_array_module
from ..parallel import matmul as pmatmul


def use_pointwise(w_shape, pad=None, crop=None, method=None):
    """Whether a conv call takes this kernel: a 1x1 filter, no padding, no crop, no forced
    kernel (``pad``/``crop`` as normalised by :mod:`distnet.ops.conv`: None or zeros)."""
    no_crop = crop is None or all(tuple(c) == (0, 0) for c in crop)
    return method is None and all(f == 1 for f in w_shape[2:]) and pad is None and no_crop


def _strided(stride):
    """The index of the pixels a 1x1 filter reads at ``stride`` (every ``s``-th per axis)."""
    return (slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)


def _pixels(x, stride):
    """The pixels a 1x1 filter reads, as ``(B, C, P)`` (a view for stride 1 and contiguous x),
    and their spatial shape."""
    xp = get_array_module(x)
    xs = x if all(s == 1 for s in stride) else x[_strided(stride)]
    B, C, *out = xs.shape
    return xp.ascontiguousarray(xs).reshape(B, C, math.prod(out)), tuple(out)


def pointwise_fprop(x, w, stride, out=None, relu=False):
    """Forward (see the module docstring); ``out (B, K, Ho, Wo)`` if given; ``relu``: max(y, 0)."""
    xp = get_array_module(x, w)
    B, K = x.shape[0], w.shape[0]
    x3, spatial = _pixels(x, stride)
    P = math.prod(spatial)
    w2 = w.reshape(K, -1)
    dtype = xp.result_type(x.dtype, w.dtype)
    direct = out is not None and out.flags.c_contiguous
    y3 = out.reshape(B, K, P) if direct else xp.empty((B, K, P), dtype=dtype)
    pmatmul(xp.broadcast_to(w2, (B,) + w2.shape), x3, out=y3)
    if relu:
        xp.maximum(y3, 0, out=y3)
    if out is None:
        return y3.reshape((B, K) + spatial)
    if not direct:
        out[...] = y3.reshape((B, K) + spatial)
    return out


def pointwise_bprop(x, w, dy, stride, need_dx=True, dx_out=None):
    """``(dx, dw)``: ``dx (B, C, H, W)`` (None unless ``need_dx``; into ``dx_out`` if given) and
    ``dw (K, C, 1, 1)``, the plain sum over batch and pixels."""
    xp = get_array_module(x, w, dy)
    B, C = x.shape[:2]
    K = w.shape[0]
    x3, spatial = _pixels(x, stride)
    dy3 = xp.ascontiguousarray(dy).reshape(B, K, math.prod(spatial))
    # dw = sum_b dy[b] @ xs[b].T: one GEMM per image (no transposed copies of dy or x), the
    # (B, K, C) partial products summed in batch order.
    dw = pmatmul(dy3, x3.transpose(0, 2, 1)).sum(axis=0).reshape(w.shape)
    if not need_dx:
        return None, dw
    w2t = xp.ascontiguousarray(w.reshape(K, C).T)
    if all(s == 1 for s in stride):
        if dx_out is None:
            dx_out = xp.empty(x.shape, dtype=dy.dtype)
        if dx_out.flags.c_contiguous:
            pmatmul(xp.broadcast_to(w2t, (B, C, K)), dy3, out=dx_out.reshape(B, C, math.prod(x.shape[2:])))
        else:
            dx_out[...] = pmatmul(xp.broadcast_to(w2t, (B, C, K)), dy3).reshape(x.shape)
        return dx_out, dw
    d = pmatmul(xp.broadcast_to(w2t, (B, C, K)), dy3).reshape((B, C) + spatial)
    if dx_out is None:
        dx_out = xp.zeros(x.shape, dtype=dy.dtype)
    else:
        dx_out[...] = 0
    dx_out[_strided(stride)] = d
    return dx_out, dw
