"""Tiled batch im2col (the CPU's kernel for small images and strides): the batch im2col of
:mod:`.im2col`, never built whole. Each kernel thread takes a share of the images (or, forward
into a CHWN output, of the output rows) and walks it in tiles of output rows of about
:data:`SMALL_TILE_BYTES`, doing the tile's im2col copy, its GEMMs and its part of the fold while
the tile is in a core's cache. Any number of spatial axes: "output rows" are the first spatial
axis (planes of a volume), "a row" the rest of the output (``Wo`` pixels of an image)."""
import functools
import math

from ...backend import get_array_module
from ..layout import chwn_order, empty_chwn, from_chwn, is_chwn
from ..parallel import kernel_threads, parallel_map, shares
from ..windows import output_shape, tap_slices
from ..workspace import scratch
from .im2col import add_product, chwn_patches, dx_buffer, dy_rows, finish_dx, patch_rows
from .shapes import padded_shape

#: Bytes of one im2col tile of the tiled batch im2col kernel (numpy, small images).
SMALL_TILE_BYTES = 1 << 20


def _small_tile_rows(CF, Wo, Bs, Ho, itemsize):
    """Output rows per tile of the tiled im2col kernel: the tile ``(CF, rows*Wo*Bs)`` fits
    :data:`SMALL_TILE_BYTES` (at least one row)."""
    return max(1, min(Ho, SMALL_TILE_BYTES // (itemsize * CF * Wo * max(Bs, 1))))   # Bs 0: empty batch


def workspace_bytes(x_shape, w_shape, stride, itemsize, images, dilation=None):
    """``(always, data_gradient)``: bytes one kernel thread's workspace holds after
    :func:`fprop` and :func:`bprop` on ``images`` images of ``x_shape`` ``(B, C, *S)``
    (padded): its tiles of columns, of the output and of ``dy``, and the weight gradient's sums;
    and its share of the input gradient folded (``tdx``). (The CHWN copy of the input is the
    chunk a plan counts among the activations.)"""
    K, C = w_shape[:2]
    CF = C * math.prod(w_shape[2:])
    out = output_shape(x_shape[2:], w_shape[2:], stride, dilation)
    Ho, Wo = out[0], math.prod(out[1:])
    n = _small_tile_rows(CF, Wo, images, Ho, itemsize)
    return itemsize * ((CF + 2 * K) * n * Wo * images + 2 * CF * K), itemsize * math.prod(x_shape[1:]) * images


def fprop(x, w, stride, out_shape, out, relu, work=None, pad=None, dilation=None):
    """Each kernel thread takes a block of output rows of the whole batch when ``out`` is CHWN
    and there are enough rows (the GEMMs then write straight into ``out``), else a share of the
    images; it walks its part in tiles of ``(CF, rows*Wo*Bs)`` columns
    (:func:`_small_tile_rows`): the tile's im2col copy, one GEMM ``w2 @ tile``, the ReLU, the
    write into ``out`` (unless the GEMM wrote there). Every output pixel is the same dot
    product of length ``CF`` whatever the tiling. ``out_shape``: the output's spatial shape
    (``(Ho, Wo)``)."""
    xp = get_array_module(x, w)
    p = chwn_patches(x, w.shape[2:], stride, work, pad, dilation)  # (B, C, Ho, Wo, fh, fw) view
    B, C = p.shape[:2]
    Ho, Wo = out_shape[0], math.prod(out_shape[1:])          # output rows, and pixels per row
    K, CF = w.shape[0], C * math.prod(w.shape[2:])
    w2 = w.reshape(K, CF)
    direct = is_chwn(out)
    if direct and Ho >= kernel_threads():                # (share, images, output rows)
        parts = [(s, range(B), rows) for s, rows in shares(Ho, xp)]
    else:
        parts = [(s, images, range(Ho)) for s, images in shares(B, xp)]
    y_all = out.transpose(chwn_order(out.ndim)).reshape(K, Ho * Wo * B) if direct else None

    def run(share):
        s, images, rows = share
        b0, b1 = images.start, images.stop
        Bs = b1 - b0
        whole = direct and Bs == B
        n = _small_tile_rows(CF, Wo, Bs, len(rows), x.dtype.itemsize)
        cbuf = scratch(work, f"tcols{s}", (CF * n * Wo * Bs,), x.dtype, like=x)
        ybuf = None if whole else scratch(work, f"ty{s}", (K * n * Wo * Bs,), x.dtype, like=x)
        for i0 in range(rows.start, rows.stop, n):
            m = min(n, rows.stop - i0)
            L = m * Wo * Bs
            ct = patch_rows(cbuf, p, slice(b0, b1), i0, m, xp)
            yt = y_all[:, i0 * Wo * B:(i0 + m) * Wo * B] if whole else ybuf[:K * L].reshape(K, L)
            xp.matmul(w2, ct.reshape(CF, L), out=yt)
            if relu:
                xp.maximum(yt, 0, out=yt)
            if not whole:
                yt = yt.reshape((K, m) + out_shape[1:] + (Bs,))
                out[b0:b1, :, i0:i0 + m] = yt.transpose(from_chwn(out.ndim))

    parallel_map(run, parts, xp)
    return out


def bprop(x, w, dy, stride, need_dx, out_shape, crop, dx_out, work=None, pad=None, dilation=None):
    """``(dx, dw)`` in the tiles of :func:`fprop`. Per share and tile: the im2col copy,
    ``dw_share += (tile @ dy_tile.T).T``, ``dcols = w2.T @ dy_tile`` (over the tile) folded at
    once into the share's images of ``dx`` (CHWN). The tiles are walked from the last output
    row to the first, so every ``dx`` pixel adds its window contributions in the order
    ``(u, v)`` of the untiled fold, whatever the tiling. ``dw`` = the shares' sums added in
    share order."""
    xp = get_array_module(x, w, dy)
    p = chwn_patches(x, w.shape[2:], stride, work, pad, dilation)
    B, C = p.shape[:2]
    spatial = padded_shape(x.shape, pad)
    Ho, Wo = out_shape[0], math.prod(out_shape[1:])
    K, CF = w.shape[0], C * math.prod(w.shape[2:])
    w2 = w.reshape(K, CF)
    parts = shares(B, xp)
    dy_all = (dy.transpose(chwn_order(dy.ndim)).reshape(K, Ho * Wo * B)
              if len(parts) == 1 and is_chwn(dy) else None)
    dxn = dx_buffer(dx_out, crop, (B, C) + spatial, dy.dtype, dy, work) if need_dx else None

    def run(share):
        s, images = share
        Bs = len(images)
        n = _small_tile_rows(CF, Wo, Bs, Ho, x.dtype.itemsize)
        cbuf = scratch(work, f"tcols{s}", (CF * n * Wo * Bs,), x.dtype, like=x)
        dbuf = None if dy_all is not None else scratch(work, f"tdy{s}", (K * n * Wo * Bs,), dy.dtype, like=dy)
        # dw as (CF, K) = tile @ dy_tile.T: 1.4x faster than dy_tile @ tile.T on OpenBLAS 0.3.31's
        # SkylakeX sgemm (conv2 of mnist_cnn, one core); transposed once at the end.
        dws = scratch(work, f"tdw{s}", (CF, K), x.dtype, like=x)
        part = scratch(work, f"tpart{s}", (CF, K), x.dtype, like=x)
        if need_dx:   # several shares: a private CHWN buffer (their images interleave in dxn,
            # so folding there would write cache lines the other threads write too)
            dxs = dxn if len(parts) == 1 else empty_chwn((Bs, C) + spatial, dy.dtype, like=dy, work=work,
                                                         name=f"tdx{s}")
            dxs[...] = 0
        for t, i0 in enumerate(reversed(range(0, Ho, n))):
            m = min(n, Ho - i0)
            ct = patch_rows(cbuf, p, slice(images.start, images.stop), i0, m, xp)
            ct2 = ct.reshape(CF, -1)
            dyt = (dy_all[:, i0 * Wo * B:(i0 + m) * Wo * B] if dy_all is not None
                   else dy_rows(dbuf, dy, slice(images.start, images.stop), i0, m, xp))
            add_product(t == 0, ct2, dyt.T, dws, part, xp)
            if need_dx:
                xp.matmul(w2.T, dyt, out=ct2)                   # dcols of the tile, over its cols
                _fold_tile(ct, dxs, i0, m, stride, dilation)
        if need_dx and dxs is not dxn:
            dxn[images.start:images.stop] = dxs
        return dws

    res = parallel_map(run, parts, xp)
    dw = res[0].copy()
    for d in res[1:]:
        dw += d
    dw = xp.ascontiguousarray(dw.T).reshape(w.shape)
    return (finish_dx(dxn, crop, dx_out, xp) if need_dx else None), dw


def _fold_tile(ct, dxs, i0, m, stride, dilation=None):
    """Add the tile's ``dcols`` ``ct (C, fh, fw, m, Wo, Bs)`` (output rows ``i0...``) into
    ``dxs (Bs, C, H, W)``, tap by tap in ``(u, v)`` order (any number of spatial axes)."""
    nd = len(stride)
    back = from_chwn(dxs.ndim)
    shift = i0 * stride[0]
    for src, (start, stop, step), rest in _fold_taps(ct.shape[1:1 + nd], ct.shape[1 + nd:1 + 2 * nd],
                                                     tuple(stride), dilation):
        dxs[(slice(None), slice(None), slice(start + shift, stop + shift, step)) + rest] += ct[src].transpose(back)


@functools.lru_cache(maxsize=256)
def _fold_taps(fshape, tile, stride, dilation):
    """Per tap of :func:`_fold_tile`, in order: its index into ``ct``, its rows (start, stop,
    step) before the tile's offset and its other axes' slices. Kept per shape: a small image's
    step folds hundreds of tiles, and forming the slices again each time cost about 8% of
    mnist_cnn's step."""
    return tuple(((slice(None),) + tap, (rows.start, rows.stop, rows.step), tuple(rest))
                 for tap, (rows, *rest) in tap_slices(tile, fshape, stride, dilation))
