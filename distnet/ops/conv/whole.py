"""Whole-batch im2col (the device's kernel while the patch matrix fits its budget,
:func:`~.blocked.block_rows`): one im2col copy of the whole batch, one GEMM forward, two
backward and one fold (:func:`distnet.ops.windows.fold`: one launch on a device), each cut into
kernel-thread shares on numpy (a forced ``method="im2col"`` there goes to :mod:`.tiled`)."""
from ...backend import get_array_module
from ..layout import is_chwn
from ..parallel import copyto as pcopyto
from ..parallel import matmul as pmatmul
from ..parallel import run_split
from ..windows import fold, from_cols
from ..workspace import scratch
from .im2col import dx_buffer, finish_dx, im2col, to_chwn
from .shapes import padded_hw


def fprop(x, w, stride, Ho, Wo, out, relu, work=None, pad=None):
    """One im2col copy, one GEMM ``(K, CF) @ (CF, Ho*Wo*B)`` written straight into ``out``
    when it is CHWN (else into a scratch matrix, then copied)."""
    xp = get_array_module(x, w)
    B, K = x.shape[0], w.shape[0]
    cols = im2col(x, w.shape[2:], stride, work, pad)     # (CF, P*B)
    direct = is_chwn(out)
    y2 = (out.transpose(1, 2, 3, 0).reshape(K, Ho * Wo * B) if direct
          else scratch(work, "y2", (K, Ho * Wo * B), x.dtype, like=x))
    pmatmul(w.reshape(K, -1), cols, out=y2)              # one GEMM for the whole batch
    if relu:
        run_split(lambda r: xp.maximum(y2[r], 0, out=y2[r]), K, xp, size=y2.size)
    if not direct:
        pcopyto(out, y2.reshape(K, Ho, Wo, B).transpose(3, 0, 1, 2), axis=1)
    return out


def bprop(x, w, dy, stride, need_dx, Ho, Wo, crop, dx_out, work=None, pad=None):
    """``(dx, dw)``: ``dw = (cols @ dy2.T).T``, ``dcols = w2.T @ dy2`` (over ``cols``), folded
    into CHWN memory (``dx_out`` itself when it is CHWN and nothing is cropped)."""
    xp = get_array_module(x, w, dy)
    B, C = x.shape[:2]
    H, W = padded_hw(x.shape, pad)
    K, _, fh, fw = w.shape
    cols = im2col(x, (fh, fw), stride, work, pad)        # (CF, P*B); recomputed, not cached
    dy2 = to_chwn(dy, work, "dy2").transpose(1, 2, 3, 0).reshape(K, Ho * Wo * B)
    # (CF, K) then a tiny transpose copy: measured faster than dy2 @ cols.T on OpenBLAS.
    dw = pmatmul(cols, dy2.T).T.reshape(w.shape)
    if not need_dx:
        return None, dw
    # (CF, P*B), written over cols (dead after dw).
    dcols = pmatmul(w.reshape(K, -1).T, dy2, out=cols)
    cols6 = dcols.reshape(C, fh, fw, Ho, Wo, B).transpose(from_cols(2))   # (B,C,Ho,Wo,fh,fw)
    # fold into (C, H, W, B) memory: the adds walk both operands in long contiguous runs
    dxn = dx_buffer(dx_out, crop, (B, C, H, W), dcols.dtype, dcols, work)

    def fold_share(c):
        fold(cols6[:, c], (B, c.stop - c.start, H, W), stride, out=dxn[:, c])
    run_split(fold_share, C, xp, size=cols6.size)
    return finish_dx(dxn, crop, dx_out, xp), dw
