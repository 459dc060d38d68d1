"""2-D convolution (cross-correlation, no flip, no bias) on an already padded NCHW chunk.

Both directions are one im2col copy plus one large GEMM per product:

* the patch matrix ``cols`` has shape ``(C*fh*fw, Ho*Wo*B)``; row ``f = (c*fh + u)*fw + v`` is
  the patch element (NEON.md §3.0), column ``(i*Wo + j)*B + b`` the output position;
* ``w (K, C, fh, fw)`` is read as the matrix ``w2 (K, C*fh*fw)`` without a copy;
* fprop ``y2 = w2 @ cols``; bprop ``dw2 = dy2 @ cols.T`` and ``dcols = w2.T @ dy2``, folded back.

Why batch-innermost columns ("CHWN", as cuda-convnet and neon's GPU kernels): the im2col copy
and the fold then move runs of ``Wo*B`` (stride 1) or ``B`` contiguous elements instead of
``Wo``, which on numpy is 2-3x faster than NCHW-ordered columns; the price is two small
transposes of x / dy / y, each a fraction of the im2col copy. One GEMM covers the whole batch
(numpy's batched matmul over B small matrices is slower). Only ``xp`` functions are used, so the
same code runs on numpy and cupy; the input dtype is kept (float32 stays float32).
"""
from ..backend import get_array_module
from ..errors import GeometryError
from .windows import fold, output_shape, patches


def _check(x, w, stride):
    """Validate the shapes of a conv call; return ``(Ho, Wo)``."""
    if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1]:
        raise GeometryError(f"conv2d: x {x.shape} (B,C,H,W) and w {w.shape} (K,C,fh,fw) do not match")
    Ho, Wo = output_shape(x.shape[2:], w.shape[2:], stride)
    if Ho < 1 or Wo < 1 or min(stride) < 1:
        raise GeometryError(f"conv2d: filter {tuple(w.shape[2:])} with stride {tuple(stride)} "
                            f"gives no output on an input of {tuple(x.shape[2:])}")
    return Ho, Wo


def im2col(x, fshape, stride):
    """Contiguous patch matrix ``(C*fh*fw, Ho*Wo*B)`` of ``x (B, C, H, W)`` (valid windows).

    ``cols[(c*fh + u)*fw + v, (i*Wo + j)*B + b] == x[b, c, i*sy + u, j*sx + v]``.
    """
    xp = get_array_module(x)
    # x in (C, H, W, B) memory order, still indexed as (B, C, H, W): patches() only needs strides.
    xn = xp.ascontiguousarray(x.transpose(1, 2, 3, 0)).transpose(3, 0, 1, 2)
    p = patches(xn, fshape, stride)                      # (B, C, Ho, Wo, fh, fw) view, no copy
    B, C, Ho, Wo, fh, fw = p.shape
    cols = xp.empty((C, fh, fw, Ho, Wo, B), dtype=x.dtype)
    xp.copyto(cols, p.transpose(1, 4, 5, 2, 3, 0))       # the im2col copy
    return cols.reshape(C * fh * fw, Ho * Wo * B)


def conv2d_fprop(x, w, stride, out=None):
    """Valid cross-correlation of ``x (B, C, H, W)`` with ``w (K, C, fh, fw)``.

    ``y[b, k, i, j] = sum_{c,u,v} w[k, c, u, v] * x[b, c, i*sy + u, j*sx + v]``, shape
    ``(B, K, Ho, Wo)`` with ``Ho = (H - fh)//sy + 1``, ``Wo = (W - fw)//sx + 1``; ``stride`` is
    ``(sy, sx)``. If ``out`` (``(B, K, Ho, Wo)``) is given the result is written there and returned.
    """
    xp = get_array_module(x, w)
    Ho, Wo = _check(x, w, stride)
    B, K = x.shape[0], w.shape[0]
    cols = im2col(x, w.shape[2:], stride)                # (CF, P*B)
    y2 = xp.matmul(w.reshape(K, -1), cols)               # (K, P*B): one GEMM for the whole batch
    y = y2.reshape(K, Ho, Wo, B).transpose(3, 0, 1, 2)   # NCHW-indexed view
    if out is None:
        return xp.ascontiguousarray(y)
    out[...] = y
    return out


def conv2d_bprop(x, w, dy, stride, need_dx=True):
    """Gradients of :func:`conv2d_fprop` given ``dy (B, K, Ho, Wo)`` = dL/dy.

    Returns ``(dx, dw)``: ``dx (B, C, H, W)`` (``None`` if ``need_dx`` is false; pixels that no
    window reads get 0; overlapping windows add up) and ``dw (K, C, fh, fw)`` =
    ``sum_{b,i,j} dy[b, k, i, j] * x[b, c, i*sy + u, j*sx + v]``: a plain sum over batch and
    positions (the caller scales it).
    """
    xp = get_array_module(x, w, dy)
    Ho, Wo = _check(x, w, stride)
    B, C, H, W = x.shape
    K, _, fh, fw = w.shape
    if dy.shape != (B, K, Ho, Wo):
        raise GeometryError(f"conv2d_bprop: dy {dy.shape} should be {(B, K, Ho, Wo)}")
    cols = im2col(x, (fh, fw), stride)                   # (CF, P*B); recomputed, not cached
    dy2 = xp.ascontiguousarray(dy.transpose(1, 2, 3, 0)).reshape(K, Ho * Wo * B)
    # (CF, K) then a tiny transpose copy: measured faster than dy2 @ cols.T on OpenBLAS.
    dw = xp.matmul(cols, dy2.T).T.reshape(w.shape)
    if not need_dx:
        return None, dw
    # (CF, P*B), written over cols (dead after dw): saves allocating and page-faulting a
    # second array as large as the im2col matrix.
    dcols = xp.matmul(w.reshape(K, -1).T, dy2, out=cols)
    cols6 = dcols.reshape(C, fh, fw, Ho, Wo, B).transpose(5, 0, 3, 4, 1, 2)  # (B,C,Ho,Wo,fh,fw)
    # Fold into (C, H, W, B) memory so the adds walk both operands in long contiguous runs.
    dxn = xp.empty((C, H, W, B), dtype=dcols.dtype).transpose(3, 0, 1, 2)
    fold(cols6, (B, C, H, W), stride, out=dxn)
    return xp.ascontiguousarray(dxn), dw
