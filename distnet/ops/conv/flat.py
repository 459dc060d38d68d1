"""Flat-shift tiles (the CPU's kernel for stride 1 on images wide enough that a row is worth a
GEMM column block): image ``b`` is read as the matrix ``xf = x[b] (C, H*W)``. For filter tap
``(u, v)`` the slice ``xf[:, (i0+u)*W + v : ... + L]`` holds that tap's input for ``L``
consecutive output positions of a *wide* output grid ``Ho x W`` (the last ``fw - 1`` columns of
every row are garbage and dropped). So the im2col of a tile of ``n`` output rows is plain
contiguous row copies (no transposes, no gathers) into a buffer sized to stay in a core's L2
cache (:data:`TILE_BYTES`): either ``fh*fw`` copies (``C*fh*fw x n*W``, one GEMM
``w2 @ cols``), or, with enough channels, only ``fw`` (the tile's rows once per column shift;
filter row ``u`` reads them in place ``u`` image rows further on, one stacked GEMM of ``fh``
products summed in order): :class:`TileCols`.

Backward, one pass over the images: each image's ``dz`` (``dy``, times ``[y > 0]`` for a fused
ReLU: ``relu_y``) is written once into a zero-bordered image; ``dw += cols.stack @ dz_wide.T``
per tile (garbage columns of ``dz_wide`` held at zero), and ``dx`` is the same forward kernel
applied to that image, padded by ``f - 1`` with the filters flipped and transposed (a "full"
correlation), cropped for free by padding ``dz`` less. Nothing is larger than one tile or one
image except the output; a ReLU is applied as the tile is written (``relu=True``). The images
are shared out over the kernel threads (:mod:`distnet.ops.parallel`), each with its own tile
buffers.
"""
from numpy.lib.stride_tricks import as_strided

from ...backend import get_array_module
from ..parallel import parallel_map, shares
from ..workspace import scratch
from .shapes import padded_hw

#: Bytes of one im2col tile of the flat-shift kernel (a core's L2 is 1-2 MiB on current x86).
#: 2 MiB: bigimage conv2 / conv3 at 2 threads (AVX-512 sgemm) 5-15% faster than 1 MiB, 4 MiB mixed.
TILE_BYTES = 1 << 21
#: The flat kernel's tile im2col copies each input row once per column shift and reads the
#: filter rows in place (:class:`TileCols`) when a filter row has at least this many weights
#: (``C*fw``; a first layer on RGB has 9: a GEMM of inner dimension 9 is slow) and, for the
#: products that are summed over filter rows afterwards (forward, data gradient), at least
#: :data:`SHIFT_MIN_PER_OUTPUT` times the number of outputs ``K``: the ``fh - 1`` sums over
#: ``(K, tile)`` must cost less than the ``(fh - 1) * C * fw`` row copies they save (measured:
#: bigimage conv2 C*fw/K = 3: 0.94x the time; conv3 forward 1.5: 1.09x).
SHIFT_MIN_INNER = 32
SHIFT_MIN_PER_OUTPUT = 2


def uses_shifts(C, fw, K=0):
    """Whether the flat kernel's tile im2col is the shifted-rows layout (:class:`TileCols`) for
    ``C`` input channels and ``K`` outputs summed over filter rows (0: the weight gradient,
    whose products per filter row are separate outputs)."""
    return C * fw >= max(SHIFT_MIN_INNER, SHIFT_MIN_PER_OUTPUT * K)


def tile_rows(C, fh, fw, W, Ho, itemsize, K=0):
    """Output rows per tile: the tile's im2col buffer (:class:`TileCols`) and, given ``K`` (the
    forward and data gradient), its partial outputs ``(g, K, n*W)`` each fit :data:`TILE_BYTES`."""
    if uses_shifts(C, fw, K):
        n, g = TILE_BYTES // (itemsize * C * fw * W) - (fh - 1), fh
    else:
        n, g = TILE_BYTES // (itemsize * C * fh * fw * W), 1
    if K:
        n = min(n, TILE_BYTES // (itemsize * g * K * W))
    return max(1, min(Ho, n))


class TileCols:
    """The im2col of one tile (``n`` output rows, ``L`` wide output positions) of the flat-shift
    kernel, in one kernel thread's buffer; filter tap ``(u, v)`` of input row ``i0 + u`` reads
    ``xf[c, (i0+u)*W + v + l]``, ``l < L`` (``xf (C, H*W)``: an image, row pitch ``W``).

    :meth:`stack` is ``(g, R, L)``: ``g`` matrices whose products with :meth:`filters`
    ``(g, K, R)``, summed over ``g`` in order, give the tile's ``(K, L)`` output. Two layouts:

    * **shifted rows** (:func:`uses_shifts`): the tile's ``n + fh - 1`` input rows copied
      once per column shift ``v`` (``fw`` contiguous copies per channel into ``(C, fw, P)``);
      ``g = fh``, ``R = C*fw``, ``stack[u]`` (rows ``(c, v)``) is a strided view one image row
      of ``W`` further along for each filter row ``u``: nothing else is copied.
    * **full** (few channels, e.g. RGB: a GEMM with an inner dimension of ``C*fw`` = 9 is slow):
      ``fh*fw`` row copies into ``(C, fh*fw, n*W)``; ``g = 1``, ``R = C*fh*fw``.
    """

    def __init__(self, C, fh, fw, W, n, work, name, like, K=0):
        self.C, self.fh, self.fw, self.W = C, fh, fw, W
        self.shifts = uses_shifts(C, fw, K)
        if self.shifts:
            self.buf = scratch(work, name, (C, fw, (n + fh - 1) * W), like.dtype, like=like)
            z2 = self.buf.reshape(C * fw, -1)
            s = z2.strides[1]   # stack[u, r, l] = z2[r, u*W + l]; the last read is z2[r, P - 1]
            self._stack = as_strided(z2, (fh, C * fw, n * W - (fw - 1)), (W * s, z2.strides[0], s),
                                     writeable=False)
        else:
            self.buf = scratch(work, name, (C, fh * fw, n * W), like.dtype, like=like)
            self._stack = self.buf.reshape(1, C * fh * fw, n * W)

    def fill(self, xf, i0, L):
        """Copy the tile of output rows ``i0...`` (``L`` wide positions) into the buffer."""
        fh, fw, W = self.fh, self.fw, self.W
        if self.shifts:
            base, P = i0 * W, (fh - 1) * W + L
            for v in range(fw):
                self.buf[:, v, :P] = xf[:, base + v:base + v + P]
            return
        for u in range(fh):
            base = (i0 + u) * W
            for v in range(fw):
                self.buf[:, u * fw + v, :L] = xf[:, base + v:base + v + L]

    def stack(self, L):
        return self._stack[:, :, :L]

    def filters(self, w):
        """``w (K, C, fh, fw)`` -> ``(g, K, R)`` contiguous, columns matching :meth:`stack`'s rows."""
        xp = get_array_module(w)
        K = w.shape[0]
        if self.shifts:
            return xp.ascontiguousarray(w.transpose(2, 0, 1, 3)).reshape(self.fh, K, -1)
        return xp.ascontiguousarray(w).reshape(1, K, -1)

    def weight_grad(self, acc):
        """``acc (g, R, K)`` (sums of ``stack @ dy_wide.T``) -> ``dw (K, C, fh, fw)``."""
        xp = get_array_module(acc)
        C, fh, fw, K = self.C, self.fh, self.fw, acc.shape[2]
        if self.shifts:
            return xp.ascontiguousarray(acc.reshape(fh, C, fw, K).transpose(3, 1, 0, 2))
        return xp.ascontiguousarray(acc.reshape(C, fh, fw, K).transpose(3, 0, 1, 2))


def _flat_image(xf, wg, Ho, Wo, out_b, cols, parts, zeros=None):
    """One image: ``out_b (K, Ho, Wo)`` (any strides) = stride-1 valid correlation of
    ``xf (C, H*W)`` with the filters ``wg = cols.filters(w)``; ``cols`` (:class:`TileCols`) and
    ``parts (g, K, n*W)`` are the tile buffers. ``zeros``: a ``(K, n*W)`` array of zeros, given
    for ``max(y, 0)`` (ReLU) instead of ``y``.

    Per tile: fill ``cols``, one stacked GEMM ``parts[u] = wg[u] @ cols.stack[u]``, then
    ``(parts[0] + parts[1]) + ...`` in that order over the tile's contiguous wide rows (the
    ReLU too: numpy's ``maximum`` is vectorised only with two array operands whose rows are
    contiguous, 3-5x faster than ``maximum(y, 0)`` over the strided output), and the valid
    columns copied out. Every output pixel is the same sum whatever the tile, so a distributed
    run's tiles give the single-process numbers (up to BLAS's own rounding).
    """
    xp = get_array_module(xf)
    g, K = wg.shape[:2]
    W, fw = cols.W, cols.fw
    n = parts.shape[2] // W
    acc = parts[0]
    for i0 in range(0, Ho, n):
        m = min(n, Ho - i0)
        L = m * W - (fw - 1)              # the last row's garbage columns would read past the end
        cols.fill(xf, i0, L)
        xp.matmul(wg, cols.stack(L), out=parts[:, :, :L])
        for u in range(1, g):
            xp.add(acc[:, :L], parts[u, :, :L], out=acc[:, :L])
        if zeros is not None:
            xp.maximum(acc[:, :L], zeros[:, :L], out=acc[:, :L])
        out_b[:, i0:i0 + m, :] = acc[:, :m * W].reshape(K, m, W)[:, :, :Wo]   # valid columns (all < L)


def is_flat_readable(x):
    """Whether each image of ``x (B, C, H, W)`` reads as the flat matrix ``(C, H*W)`` without a
    copy: its rows contiguous and one after the other (a C-contiguous array, or a band of
    full-width rows of one)."""
    s, item = x.strides, x.dtype.itemsize
    return (x.shape[3] == 1 or s[3] == item) and (x.shape[2] == 1 or s[2] == x.shape[3] * item)


def flat_readable(x):
    """``x`` if :func:`is_flat_readable`, else a C-contiguous copy."""
    return x if is_flat_readable(x) else get_array_module(x).ascontiguousarray(x)


class _Images:
    """Image ``b`` of ``x`` as the flat matrix ``(C, H*W)`` of its zero-padded plane: a view if
    ``pad`` is None, else copied into one padded image buffer (border zeroed once)."""

    def __init__(self, x, pad, work, name="xpad"):
        xp = get_array_module(x)
        self.x, self.pad = (flat_readable(x) if pad is None else x), pad
        B, C = x.shape[:2]
        self.H, self.W = padded_hw(x.shape, pad)
        if pad is not None:
            self.buf = scratch(work, name, (C, self.H, self.W), x.dtype, like=x, zeroed=True)

    def __getitem__(self, b):
        C = self.x.shape[1]
        if self.pad is None:
            return self.x[b].reshape(C, self.H * self.W)
        (pt, _), (pl, _) = self.pad
        h, w = self.x.shape[2:]
        self.buf[:, pt:pt + h, pl:pl + w] = self.x[b]
        return self.buf.reshape(C, self.H * self.W)


def _flat_plan(x, fh, fw, pad, K=0):
    """What both flat kernels start from: ``(xp, x, C, W, Ho, n)`` with ``W`` the padded width,
    ``Ho`` the stride-1 output rows, ``n`` output rows per tile, and ``x`` made contiguous
    when it is read as it is (padding copies every image into a buffer anyway)."""
    xp = get_array_module(x)
    C = x.shape[1]
    H, W = padded_hw(x.shape, pad)
    Ho = H - fh + 1
    n = tile_rows(C, fh, fw, W, Ho, x.dtype.itemsize, K)
    return xp, (flat_readable(x) if pad is None else x), C, W, Ho, n


def fprop(x, w, out, work, relu=False, pad=None):
    """``out (B, K, Ho, Wo)`` = stride-1 valid correlation of ``x (B, C, H, W)`` zero-padded
    by ``pad`` (applied one image at a time) with ``w (K, C, fh, fw)``. The images are shared
    out over the kernel threads (:mod:`distnet.ops.parallel`), each with its own tile buffers."""
    K, _, fh, fw = w.shape
    xp, x, C, W, Ho, n = _flat_plan(x, fh, fw, pad, K)
    B, Wo = x.shape[0], W - fw + 1

    def run(share):
        s, images = share
        imgs = _Images(x, pad, work, f"xpad{s}")
        cols = TileCols(C, fh, fw, W, n, work, f"cols{s}", x, K)
        wg = cols.filters(w)
        parts = scratch(work, f"parts{s}", (wg.shape[0], K, n * W), x.dtype, like=x)
        # never written: zeros since allocation (the workspace contract)
        zeros = scratch(work, f"zeros{s}", (K, n * W), x.dtype, like=x, zeroed=True) if relu else None
        for b in images:
            _flat_image(imgs[b], wg, Ho, Wo, out[b], cols, parts, zeros)

    parallel_map(run, shares(B, xp), xp)
    return out




class _Crop:
    """The geometry of the flat backward pass for ``crop = ((top, bottom), (left, right))`` of
    the input gradient (``crop <= f - 1``): ``dz`` is written at ``(pt, pl)`` into a
    zero-bordered image ``(K, Hd, Wd)`` whose full correlation with the flipped filters is the
    ``dx`` plane kept, ``(hx, wx)``."""

    def __init__(self, crop, fh, fw, H, W):
        (ct, cb), (cl, cr) = crop
        self.Ho, self.Wo = H - fh + 1, W - fw + 1
        self.pt, self.pl = fh - 1 - ct, fw - 1 - cl
        self.Hd, self.Wd = self.Ho + self.pt + fh - 1 - cb, self.Wo + self.pl + fw - 1 - cr
        self.hx, self.wx = H - ct - cb, W - cl - cr


class _WeightGrad:
    """One kernel thread's weight gradient in the flat backward pass: per image and tile of
    ``n`` output rows, ``acc += cols.stack @ dz_wide.T`` (one stacked GEMM, inner dimension the
    tile's wide positions), ``dz_wide`` the tile's ``dz`` with row pitch ``W`` and zeros in the
    ``fw - 1`` garbage columns."""

    def __init__(self, x, pad, work, s, w_shape, W, n):
        K, C, fh, fw = w_shape
        self.imgs = _Images(x, pad, work, f"xpad{s}")
        self.cols = TileCols(C, fh, fw, W, n, work, f"dwcols{s}", x)   # its own: the layout may differ
        shape = self.cols.stack(1).shape[:2] + (K,)
        self.acc = scratch(work, f"dw{s}", shape, x.dtype, like=x)
        self.acc[...] = 0
        self.part = scratch(work, f"dwpart{s}", shape, x.dtype, like=x)
        self.n, self.W, self.fw = n, W, fw

    def add_image(self, b, Ho, wide_dz):
        """Add image ``b``'s products; ``wide_dz(i0, m, L)`` gives the ``(K, L)`` wide ``dz``
        of the tile of output rows ``i0 ... i0 + m - 1``."""
        xp = get_array_module(self.acc)
        xf = self.imgs[b]
        for i0 in range(0, Ho, self.n):
            m = min(self.n, Ho - i0)
            L = m * self.W - (self.fw - 1)
            self.cols.fill(xf, i0, L)
            xp.matmul(self.cols.stack(L), wide_dz(i0, m, L).T, out=self.part)
            self.acc += self.part

    @staticmethod
    def total(shares):
        """``dw (K, C, fh, fw)``: the shares' sums added in share order (deterministic)."""
        acc = shares[0].acc.copy()
        for g in shares[1:]:
            acc += g.acc
        return shares[0].cols.weight_grad(acc)


def _wide_dz_tiles(xp, dy, relu_y, b, buf, mask, dz_image, geo, in_place):
    """``wide_dz(i0, m, L)`` for :meth:`_WeightGrad.add_image` of image ``b``: a view of the
    ``dz`` image when its width is ``W`` (``in_place``: ``left + right crop = fw - 1``, e.g.
    "same" padding), else the tile copied into ``buf (K, n, W)`` (columns ``Wo...`` never
    written: zero) from the ``dz`` image, or without one from ``dy`` (masked by ``relu_y > 0``
    on the way)."""
    K = dy.shape[1]

    def wide_dz(i0, m, L):
        if in_place:
            start = (geo.pt + i0) * geo.Wd + geo.pl
            return dz_image[0][:, start:start + L]
        if dz_image is not None:
            buf[:, :m, :geo.Wo] = dz_image[1][:, i0:i0 + m]
        elif relu_y is None:
            buf[:, :m, :geo.Wo] = dy[b, :, i0:i0 + m]
        else:   # the tile's dz only (no dz image without dx)
            xp.multiply(dy[b, :, i0:i0 + m], xp.greater(relu_y[b, :, i0:i0 + m], 0, out=mask[:, :m]),
                        out=buf[:, :m, :geo.Wo])
        return buf.reshape(K, -1)[:, :L]
    return wide_dz


def bprop(x, w, dy, crop, work, pad=None, need_dx=True, need_dw=True, dx_out=None, relu_y=None):
    """``(dx, dw)`` of the flat kernel (stride 1) in one pass over the images (``None`` for the
    one not needed). ``dx``: the rows/cols of the (padded) chunk kept by ``crop = ((top,
    bottom), (left, right))`` (needs ``crop <= f - 1``), written into ``dx_out`` if given.
    ``relu_y``: the output of a fused-ReLU forward; ``dy`` is then the gradient of that output
    and the gradients are those of the conv itself, ``dz = dy * [relu_y > 0]``.

    Per image, on its kernel thread (no batch-sized ``dz``): with ``dx``, ``dz`` is written
    once into a zero-bordered image ``(K, Hd, Wd)`` (:class:`_Crop`, the ReLU mask applied on
    the way), so that ``dx`` is the full correlation of it with the flipped, transposed filters
    (:func:`_flat_image`, cropped for free); the weight gradient reads its wide tiles from that
    image or a tile buffer (:func:`_wide_dz_tiles`, :class:`_WeightGrad`).
    """
    K, C, fh, fw = w.shape
    xp, x, _, W, Ho, n = _flat_plan(x, fh, fw, pad)
    geo = _Crop(crop, fh, fw, padded_hw(x.shape, pad)[0], W)
    in_place = need_dx and geo.Wd == W
    if need_dx:
        wf = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]    # (C, K, fh, fw): flipped, transposed
        nx = tile_rows(K, fh, fw, geo.Wd, geo.hx, dy.dtype.itemsize, C)
        if dx_out is None:
            dx_out = xp.empty((x.shape[0], C, geo.hx, geo.wx), dtype=dy.dtype)

    def run(share):
        s, images = share
        dz_image = mask = buf = grad = None
        if need_dx:   # only dz is written: the border stays zero
            dzp = scratch(work, f"dzpad{s}", (K, geo.Hd, geo.Wd), dy.dtype, like=dy, zeroed=True)
            dz_image = dzp.reshape(K, geo.Hd * geo.Wd), dzp[:, geo.pt:geo.pt + Ho, geo.pl:geo.pl + geo.Wo]
            dxcols = TileCols(K, fh, fw, geo.Wd, nx, work, f"dxcols{s}", dy, C)
            wg = dxcols.filters(wf)
            parts = scratch(work, f"dxparts{s}", (wg.shape[0], C, nx * geo.Wd), dy.dtype, like=dy)
        if relu_y is not None:
            mask = scratch(work, f"dzmask{s}", (K, Ho if need_dx else n, geo.Wo), "bool", like=dy)
        if need_dw:
            grad = _WeightGrad(x, pad, work, s, w.shape, W, n)
            if not in_place:
                buf = scratch(work, f"dywide{s}", (K, n, W), dy.dtype, like=dy, zeroed=True)
        for b in images:
            if need_dx and mask is None:
                dz_image[1][...] = dy[b]
            elif need_dx:
                xp.multiply(dy[b], xp.greater(relu_y[b], 0, out=mask), out=dz_image[1])
            if need_dw:
                grad.add_image(b, Ho, _wide_dz_tiles(xp, dy, relu_y, b, buf, mask, dz_image, geo, in_place))
            if need_dx:
                _flat_image(dz_image[0], wg, geo.hx, geo.wx, dx_out[b], dxcols, parts)
        return grad

    res = parallel_map(run, shares(x.shape[0], xp), xp)
    return (dx_out if need_dx else None), (_WeightGrad.total(res) if need_dw else None)
