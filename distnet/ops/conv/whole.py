"""Whole-batch im2col (the device's kernel while the patch matrix fits its budget,
:func:`~.blocked.block_rows`): one im2col copy of the whole batch, one GEMM forward, two
backward and one fold (:func:`distnet.ops.windows.fold`: one launch on a device), each cut into
kernel-thread shares on numpy (a forced ``method="im2col"`` there goes to :mod:`.tiled`). Any
number of spatial axes (``Ho, Wo`` below: the output's spatial shape)."""
import math

from ...backend import get_array_module
from ..layout import chwn_order, from_chwn, is_chwn
from ..parallel import copyto as pcopyto
from ..parallel import matmul as pmatmul
from ..parallel import run_split
from ..windows import fold, from_cols
from ..workspace import scratch
from .im2col import dx_buffer, finish_dx, im2col, to_chwn
from .shapes import padded_shape


def fprop(x, w, stride, out_shape, out, relu, work=None, pad=None, dilation=None):
    """One im2col copy, one GEMM ``(K, CF) @ (CF, Ho*Wo*B)`` written straight into ``out``
    when it is CHWN (else into a scratch matrix, then copied)."""
    xp = get_array_module(x, w)
    B, K = x.shape[0], w.shape[0]
    P = math.prod(out_shape)
    cols = im2col(x, w.shape[2:], stride, work, pad, dilation)     # (CF, P*B)
    direct = is_chwn(out)
    y2 = (out.transpose(chwn_order(out.ndim)).reshape(K, P * B) if direct
          else scratch(work, "y2", (K, P * B), x.dtype, like=x))
    pmatmul(w.reshape(K, -1), cols, out=y2)              # one GEMM for the whole batch
    if relu:
        run_split(lambda r: xp.maximum(y2[r], 0, out=y2[r]), K, xp, size=y2.size)
    if not direct:
        pcopyto(out, y2.reshape((K,) + tuple(out_shape) + (B,)).transpose(from_chwn(out.ndim)), axis=1)
    return out


def bprop(x, w, dy, stride, need_dx, out_shape, crop, dx_out, work=None, pad=None, dilation=None):
    """``(dx, dw)``: ``dw = (cols @ dy2.T).T``, ``dcols = w2.T @ dy2`` (over ``cols``), folded
    into CHWN memory (``dx_out`` itself when it is CHWN and nothing is cropped)."""
    xp = get_array_module(x, w, dy)
    B, C = x.shape[:2]
    nd = x.ndim - 2
    spatial = padded_shape(x.shape, pad)
    K, fshape = w.shape[0], w.shape[2:]
    cols = im2col(x, fshape, stride, work, pad, dilation)        # (CF, P*B); recomputed, not cached
    dy2 = to_chwn(dy, work, "dy2").transpose(chwn_order(dy.ndim)).reshape(K, math.prod(out_shape) * B)
    # (CF, K) then a tiny transpose copy: measured faster than dy2 @ cols.T on OpenBLAS.
    dw = pmatmul(cols, dy2.T).T.reshape(w.shape)
    if not need_dx:
        return None, dw
    # (CF, P*B), written over cols (dead after dw).
    dcols = pmatmul(w.reshape(K, -1).T, dy2, out=cols)
    cols6 = dcols.reshape((C,) + tuple(fshape) + tuple(out_shape) + (B,)).transpose(from_cols(nd))
    # (B, C, Ho, Wo, fh, fw), folded into (C, H, W, B) memory: the adds walk both operands in
    # long contiguous runs
    dxn = dx_buffer(dx_out, crop, (B, C) + spatial, dcols.dtype, dcols, work)

    def fold_share(c):
        fold(cols6[:, c], (B, c.stop - c.start) + spatial, stride, out=dxn[:, c], dilation=dilation)
    run_split(fold_share, C, xp, size=cols6.size)
    return finish_dx(dxn, crop, dx_out, xp), dw
