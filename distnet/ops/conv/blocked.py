"""Blocked im2col (the device's kernel for large images): the whole-batch algorithm of
:mod:`.whole` in blocks of output rows, so that a large image does not need ``C*fh*fw`` times
its size in device memory. The block budget is sized from the device's free memory
(:func:`cols_budget`); a batch whose patch matrix fits it is one block, :mod:`.whole`. Any number
of spatial axes: the blocks are of the first (rows of an image, planes of a volume).
"""
import math

from ...backend import get_array_module
from ..layout import from_chwn
from ..windows import extents, fold, from_cols
from ..workspace import scratch
from .im2col import add_product, chwn_patches, dx_buffer, dy_rows, finish_dx, patch_rows
from .shapes import padded_shape

#: A fixed budget in bytes for the patch matrix the device path builds at once (and for each of
#: the GEMM output, ``dy`` and input-gradient band that go with it), in place of the one sized
#: from the device's free memory; None: sized (:func:`cols_budget`). For measurements (a budget
#: past any matrix builds every batch whole).
DEVICE_COLS_BYTES = None
#: The sized budget: this fraction of the device's free memory when a process's first device
#: conv runs, rounded down to a power of two, within :data:`COLS_BYTES_MIN` and
#: :data:`COLS_BYTES_MAX`. The whole matrix is ``C*fh*fw`` times the input: 9 GiB in float32 for
#: 64 channels, 3x3, 512x512, batch 16, more than a GPU holds next to the rest. Each conv layer's
#: workspace keeps its blocks between steps, and a block takes about four budgets (patch matrix,
#: GEMM output, ``dy``, band), so the fraction leaves the memory to the activations and to the
#: other layers, while keeping each block's GEMM large (at 64 channels, 3x3, 256 MiB: ~116k
#: columns, 4 GFLOP), far more device work than the ~40 calls a block costs. A power of two, and
#: fixed for the process, so that a run's blocks (and so its weight gradients' summation order)
#: do not follow small changes of the free memory.
COLS_FREE_FRACTION = 1 / 32
COLS_BYTES_MIN = 32 << 20
COLS_BYTES_MAX = 1 << 30
_sized = {}


def cols_budget(xp):
    """Bytes of one block of the device path for arrays of ``xp`` (see :data:`DEVICE_COLS_BYTES`,
    :data:`COLS_FREE_FRACTION`): the device's free memory (``xp.cuda.Device().mem_info``) is read
    once per device and process."""
    if DEVICE_COLS_BYTES is not None:
        return DEVICE_COLS_BYTES
    device = xp.cuda.Device()
    key = (xp, device.id)
    if key not in _sized:
        free = int(device.mem_info[0] * COLS_FREE_FRACTION)
        power = 1 << max(free, 1).bit_length() - 1
        _sized[key] = min(COLS_BYTES_MAX, max(COLS_BYTES_MIN, power))
    return _sized[key]


def block_rows(x_shape, w_shape, stride, out_shape, itemsize, budget, pad=None, dilation=None):
    """Output rows per block of the device path: the block's patch matrix ``(CF, rows*Wo*B)``,
    its GEMM output or ``dy`` ``(K, rows*Wo*B)`` and the band of input rows its windows cover
    ``(C, (rows-1)*sy + fh, W, B)`` each fit ``budget`` bytes (at least one row; a row of a
    volume is a plane). ``Ho`` or more: the whole batch is one block."""
    B, C = x_shape[:2]
    W = math.prod(padded_shape(x_shape, pad)[1:])       # input elements per row
    Wo = math.prod(out_shape[1:])
    K, fh = w_shape[0], extents(w_shape[2:], dilation)[0]
    unit = itemsize * max(B, 1)                          # B 0: an empty batch, one block
    rows = budget // (unit * max(C * math.prod(w_shape[2:]), K) * Wo)
    band = (budget // (unit * C * W) - fh) // stride[0] + 1
    return max(1, min(rows, band))


def fprop(x, w, stride, out_shape, out, relu, work, pad, n, dilation=None):
    """Forward in blocks of ``n`` output rows: per block one im2col copy into ``(CF, n*Wo*B)``,
    one GEMM, the ReLU, one copy into ``out``. Every output pixel is the same dot product of
    length ``CF`` as in one block."""
    xp = get_array_module(x, w)
    p = chwn_patches(x, w.shape[2:], stride, work, pad, dilation)  # (B, C, Ho, Wo, fh, fw) view
    B, C = p.shape[:2]
    Ho, Wo = out_shape[0], math.prod(out_shape[1:])
    K, CF = w.shape[0], C * math.prod(w.shape[2:])
    w2 = w.reshape(K, CF)
    cbuf = scratch(work, "block_cols", (CF * n * Wo * B,), x.dtype, like=x)
    ybuf = scratch(work, "block_y2", (K * n * Wo * B,), x.dtype, like=x)
    for i0 in range(0, Ho, n):
        m = min(n, Ho - i0)
        L = m * Wo * B
        cols = patch_rows(cbuf, p, slice(0, B), i0, m, xp)
        y2 = ybuf[:K * L].reshape(K, L)
        xp.matmul(w2, cols.reshape(CF, L), out=y2)
        if relu:
            xp.maximum(y2, 0, out=y2)
        y2 = y2.reshape((K, m) + tuple(out_shape[1:]) + (B,))
        xp.copyto(out[:, :, i0:i0 + m], y2.transpose(from_chwn(out.ndim)))
    return out


def bprop(x, w, dy, stride, need_dx, out_shape, crop, dx_out, work, pad, n, dilation=None):
    """Backward in blocks of ``n`` output rows. Per block: the im2col copy, the block's ``dy``
    copied to ``(K, n*Wo*B)``, ``dw += (cols @ dy_block.T).T``, ``dcols = w2.T @ dy_block``
    (over the block's ``cols``) folded into the band of input rows the block's windows read,
    which is added into ``dx`` (CHWN, zeroed first): rows shared with the next block's band get
    both blocks' sums. Blocks run from the last output row to the first and ``dw`` adds their
    products in that order (a fixed order: the same bits every run)."""
    xp = get_array_module(x, w, dy)
    p = chwn_patches(x, w.shape[2:], stride, work, pad, dilation)
    B, C = p.shape[:2]
    nd = x.ndim - 2
    spatial = padded_shape(x.shape, pad)
    Ho, Wo = out_shape[0], math.prod(out_shape[1:])
    W, fh = math.prod(spatial[1:]), extents(w.shape[2:], dilation)[0]
    sy = stride[0]
    K, CF = w.shape[0], C * math.prod(w.shape[2:])
    w2 = w.reshape(K, CF)
    cbuf = scratch(work, "block_cols", (CF * n * Wo * B,), x.dtype, like=x)
    dbuf = scratch(work, "block_dy2", (K * n * Wo * B,), dy.dtype, like=dy)
    dws = scratch(work, "block_dw", (CF, K), x.dtype, like=x)
    part = scratch(work, "block_dwpart", (CF, K), x.dtype, like=x)
    if need_dx:
        dxn = dx_buffer(dx_out, crop, (B, C) + spatial, dy.dtype, dy, work)
        dxn[...] = 0                                     # rows no window reads stay 0
        bbuf = scratch(work, "block_band", (C * ((n - 1) * sy + fh) * W * B,), dy.dtype, like=dy)
    for t, i0 in enumerate(reversed(range(0, Ho, n))):
        m = min(n, Ho - i0)
        cols = patch_rows(cbuf, p, slice(0, B), i0, m, xp)
        dy2 = dy_rows(dbuf, dy, slice(0, B), i0, m, xp)
        c2 = cols.reshape(CF, m * Wo * B)
        add_product(t == 0, c2, dy2.T, dws, part, xp)
        if not need_dx:
            continue
        xp.matmul(w2.T, dy2, out=c2)                     # dcols of the block, over its cols
        r0, rows = i0 * sy, (m - 1) * sy + fh            # the input rows its windows read
        band = bbuf[:C * rows * W * B].reshape((C, rows) + spatial[1:] + (B,)).transpose(from_chwn(x.ndim))
        fold(cols.transpose(from_cols(nd)), (B, C, rows) + spatial[1:], stride, out=band, dilation=dilation)
        dxn[:, :, r0:r0 + rows] += band
    dw = xp.ascontiguousarray(dws.T).reshape(w.shape)
    return (finish_dx(dxn, crop, dx_out, xp) if need_dx else None), dw
