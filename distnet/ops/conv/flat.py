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

Volumes (and lines, and dilated filters) are the same kernel: a volume ``(C, D, H, W)`` read as
``(C, D*H*W)`` is a sequence of rows too, a tap of its first axis reads rows ``H`` further on
per step, and a tile of wide rows may run across planes (:mod:`.flat_rows`).
"""
import math

from numpy.lib.stride_tricks import as_strided

from ...backend import get_array_module
from ..parallel import parallel_map, shares
from ..workspace import scratch
from .flat_rows import RowGeometry, full_correlation
from .shapes import dilation_of, padded_shape

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
    ``C`` input channels (times the taps of a volume's leading axes) and ``K`` outputs summed
    over filter rows (0: the weight gradient, whose products per filter row are separate
    outputs)."""
    return C * fw >= max(SHIFT_MIN_INNER, SHIFT_MIN_PER_OUTPUT * K)


def tile_rows(C, fh, fw, W, Ho, itemsize, K=0, dy=1):
    """Output rows per tile: the tile's im2col buffer (:class:`TileCols`) and, given ``K`` (the
    forward and data gradient), its partial outputs ``(g, K, n*W)`` each fit :data:`TILE_BYTES`
    (``C``: channels times leading taps, ``dy``: the dilation of the rows)."""
    if uses_shifts(C, fw, K):
        n, g = TILE_BYTES // (itemsize * C * fw * W) - (fh - 1) * dy, fh
    else:
        n, g = TILE_BYTES // (itemsize * C * fh * fw * W), 1
    if K:
        n = min(n, TILE_BYTES // (itemsize * g * K * W))
    return max(1, min(Ho, n))


class TileCols:
    """The im2col of one tile (``n`` output rows, ``L`` wide output positions) of the flat-shift
    kernel, in one kernel thread's buffer; filter tap ``(u, v)`` of input row ``i0 + u`` reads
    ``xf[c, (i0+u)*W + v + l]``, ``l < L`` (``xf (C, H*W)``: an image, row pitch ``W``). In a
    volume a tap ``(a, u, v)`` reads ``a``'s lead rows further on (:mod:`.flat_rows`:
    ``leads``), and with a dilation ``(dy, dx)`` the taps are ``u*dy`` rows and ``v*dx``
    columns apart.

    :meth:`stack` is ``(g, R, L)``: ``g`` matrices whose products with :meth:`filters`
    ``(g, K, R)``, summed over ``g`` in order, give the tile's ``(K, L)`` output. Two layouts:

    * **shifted rows** (:func:`uses_shifts`): the tile's ``n + fh - 1`` input rows copied
      once per column shift ``v`` (and lead) (``fw`` contiguous copies per channel into
      ``(C, fw, P)``); ``g = fh``, ``R = C*fw``, ``stack[u]`` (rows ``(c, v)``) is a strided
      view one image row of ``W`` further along for each filter row ``u``: nothing else is
      copied.
    * **full** (few channels, e.g. RGB: a GEMM with an inner dimension of ``C*fw`` = 9 is slow):
      ``fh*fw`` row copies into ``(C, fh*fw, n*W)``; ``g = 1``, ``R = C*fh*fw``.
    """

    def __init__(self, C, fh, fw, W, n, work, name, like, K=0, leads=(0,), dilation=(1, 1)):
        self.C, self.fh, self.fw, self.W = C, fh, fw, W
        self.leads, (self.dy, self.dx) = tuple(leads), dilation
        nl = len(self.leads)
        self.shifts = uses_shifts(C * nl, fw, K)
        if self.shifts:
            self.buf = scratch(work, name, (C, nl, fw, (n + (fh - 1) * self.dy) * W), like.dtype, like=like)
            z2 = self.buf.reshape(C * nl * fw, -1)
            s = z2.strides[1]   # stack[u, r, l] = z2[r, u*dy*W + l]; the last read is z2[r, P - 1]
            self._stack = as_strided(z2, (fh, C * nl * fw, n * W - (fw - 1) * self.dx),
                                     (self.dy * W * s, z2.strides[0], s), writeable=False)
        else:
            self.buf = scratch(work, name, (C, nl * fh * fw, n * W), like.dtype, like=like)
            self._stack = self.buf.reshape(1, C * nl * fh * fw, n * W)

    def fill(self, xf, i0, L):
        """Copy the tile of output rows ``i0...`` (``L`` wide positions) into the buffer."""
        fh, fw, W, dy, dx = self.fh, self.fw, self.W, self.dy, self.dx
        if self.shifts:
            P = (fh - 1) * dy * W + L
            for a, lead in enumerate(self.leads):
                base = (i0 + lead) * W
                for v in range(fw):
                    self.buf[:, a, v, :P] = xf[:, base + v * dx:base + v * dx + P]
            return
        for a, lead in enumerate(self.leads):
            for u in range(fh):
                base = (i0 + lead + u * dy) * W
                for v in range(fw):
                    self.buf[:, (a * fh + u) * fw + v, :L] = xf[:, base + v * dx:base + v * dx + L]

    def stack(self, L):
        return self._stack[:, :, :L]

    def filters(self, w):
        """``w (K, C, *lead, fh, fw)`` -> ``(g, K, R)`` contiguous, columns matching
        :meth:`stack`'s rows."""
        xp = get_array_module(w)
        K = w.shape[0]
        if self.shifts:
            w5 = w.reshape(K, self.C, len(self.leads), self.fh, self.fw)
            return xp.ascontiguousarray(w5.transpose(3, 0, 1, 2, 4)).reshape(self.fh, K, -1)
        return xp.ascontiguousarray(w).reshape(1, K, -1)

    def weight_grad(self, acc, fshape):
        """``acc (g, R, K)`` (sums of ``stack @ dy_wide.T``) -> ``dw (K, C, *fshape)``."""
        xp = get_array_module(acc)
        C, fh, fw, K, nl = self.C, self.fh, self.fw, acc.shape[2], len(self.leads)
        if self.shifts:
            dw = xp.ascontiguousarray(acc.reshape(fh, C, nl, fw, K).transpose(4, 1, 2, 0, 3))
        else:
            dw = xp.ascontiguousarray(acc.reshape(C, nl * fh * fw, K).transpose(2, 0, 1))
        return dw.reshape((K, C) + tuple(fshape))


def _flat_image(xf, wg, geo, out_b, cols, parts, zeros=None):
    """One image: ``out_b (K, *out)`` (any strides) = stride-1 valid correlation of
    ``xf (C, prod(spatial))`` with the filters ``wg = cols.filters(w)``, laid out by ``geo``
    (:class:`~.flat_rows.RowGeometry`); ``cols`` (:class:`TileCols`) and ``parts (g, K, n*W)``
    are the tile buffers. ``zeros``: a ``(K, n*W)`` array of zeros, given for ``max(y, 0)``
    (ReLU) instead of ``y``.

    Per tile: fill ``cols``, one stacked GEMM ``parts[u] = wg[u] @ cols.stack[u]``, then
    ``(parts[0] + parts[1]) + ...`` in that order over the tile's contiguous wide rows (the
    ReLU too: numpy's ``maximum`` is vectorised only with two array operands whose rows are
    contiguous, 3-5x faster than ``maximum(y, 0)`` over the strided output), and the valid
    columns copied out. Every output pixel is the same sum whatever the tile, so a distributed
    run's tiles give the single-process numbers (up to BLAS's own rounding).
    """
    xp = get_array_module(xf)
    g, K = wg.shape[:2]
    W, Wo = geo.W, geo.Wo
    n = parts.shape[2] // W
    acc = parts[0]
    out_b = geo.rows_view(out_b)
    for i0 in range(0, geo.rows, n):
        m = min(n, geo.rows - i0)
        L = geo.span(m)
        cols.fill(xf, i0, L)
        xp.matmul(wg, cols.stack(L), out=parts[:, :, :L])
        for u in range(1, g):
            xp.add(acc[:, :L], parts[u, :, :L], out=acc[:, :L])
        if zeros is not None:
            xp.maximum(acc[:, :L], zeros[:, :L], out=acc[:, :L])
        for t0, t1, index in geo.blocks(i0, m):     # valid columns (all < L)
            out_b[index] = acc[:, t0 * W:t1 * W].reshape(K, t1 - t0, W)[:, :, :Wo]


def is_flat_readable(x):
    """Whether each image of ``x (B, C, *spatial)`` reads as the flat matrix ``(C, H*W)``
    without a copy: its rows contiguous and one after the other (a C-contiguous array, or a band
    of full-width rows of one)."""
    pitch = x.dtype.itemsize
    for n, s in zip(reversed(x.shape[2:]), reversed(x.strides[2:])):
        if n != 1 and s != pitch:
            return False
        pitch *= n
    return True


def flat_readable(x):
    """``x`` if :func:`is_flat_readable`, else a C-contiguous copy."""
    return x if is_flat_readable(x) else get_array_module(x).ascontiguousarray(x)


class _Images:
    """Image ``b`` of ``x`` as the flat matrix ``(C, prod(spatial))`` of its zero-padded
    image: a view if ``pad`` is None, else copied into one padded image buffer (border zeroed
    once)."""

    def __init__(self, x, pad, work, name="xpad"):
        self.x, self.pad = (flat_readable(x) if pad is None else x), pad
        self.C = x.shape[1]
        self.spatial = padded_shape(x.shape, pad)
        if pad is not None:
            self.buf = scratch(work, name, (self.C,) + self.spatial, x.dtype, like=x, zeroed=True)
            self.inner = (slice(None),) + tuple(slice(lo, lo + n) for n, (lo, _) in zip(x.shape[2:], pad))

    def __getitem__(self, b):
        size = math.prod(self.spatial)
        if self.pad is None:
            return self.x[b].reshape(self.C, size)
        self.buf[self.inner] = self.x[b]
        return self.buf.reshape(self.C, size)


def _tile_cols(C, geo, n, work, name, like, K=0):
    """The :class:`TileCols` of ``geo`` (:class:`~.flat_rows.RowGeometry`) for ``C`` channels."""
    return TileCols(C, geo.fh, geo.fw, geo.W, n, work, name, like, K, geo.leads, (geo.dy, geo.dx))


def _tile_rows(C, geo, itemsize, K=0):
    """:func:`tile_rows` of ``geo`` for ``C`` channels."""
    return tile_rows(C * geo.taps, geo.fh, geo.fw, geo.W, geo.rows, itemsize, K, geo.dy)


def _flat_plan(x, fshape, pad, dilation, K=0):
    """What both flat kernels start from: ``(xp, x, C, geo, n)`` with ``geo`` the
    :class:`~.flat_rows.RowGeometry` of the padded image, ``n`` output rows per tile, and ``x``
    made contiguous when it is read as it is (padding copies every image into a buffer
    anyway)."""
    xp = get_array_module(x)
    C = x.shape[1]
    geo = RowGeometry(padded_shape(x.shape, pad), fshape, dilation_of(dilation, len(fshape)))
    n = _tile_rows(C, geo, x.dtype.itemsize, K)
    return xp, (flat_readable(x) if pad is None else x), C, geo, n


def _cols_elements(C, geo, n, K=0):
    """Elements of the :class:`TileCols` buffer of ``geo`` for ``C`` channels, ``n`` rows, and
    of the partial outputs ``(g, K, n*W)`` beside it (0 without ``K``)."""
    nl = len(geo.leads)
    if uses_shifts(C * nl, geo.fw, K):
        return C * nl * geo.fw * (n + (geo.fh - 1) * geo.dy) * geo.W, geo.fh * K * n * geo.W
    return C * nl * geo.fh * geo.fw * n * geo.W, K * n * geo.W


def workspace_bytes(spatial, w_shape, itemsize, relu=False, dilation=None):
    """``(always, data_gradient)``: bytes one kernel thread's workspace holds after
    :func:`fprop` and :func:`bprop` on images of the padded ``spatial`` shape, read as they are
    (no ``pad``), ``itemsize``-byte numbers: the forward's tile columns and partial outputs
    (and zeros with ``relu``), the weight gradient's columns, wide ``dz`` tile and sums, the
    ReLU mask; and what only the data gradient adds: ``dz`` in its zero-bordered image, its
    tile columns and partial outputs (the mask is then the whole output's)."""
    K, C = w_shape[:2]
    fshape, dil = w_shape[2:], dilation_of(dilation, len(w_shape) - 2)
    geo = RowGeometry(tuple(spatial), fshape, dil)
    n = _tile_rows(C, geo, itemsize, K)
    cols, parts = _cols_elements(C, geo, n, K)
    nw = _tile_rows(C, geo, itemsize)
    dw_cols, _ = _cols_elements(C, geo, nw)
    dw = 2 * C * len(geo.leads) * geo.fh * geo.fw * K              # its sums: acc and part (g, R, K)
    always = (cols + parts + (K * n * geo.W if relu else 0) + dw_cols + dw + K * nw * geo.W) * itemsize
    mask = K * nw * geo.Wo if relu else 0           # the ReLU mask of a tile; with dx, of the output
    always += mask
    image, _, _ = full_correlation(tuple(spatial), fshape, dil, ((0, 0),) * len(fshape))
    geo_dz = RowGeometry(image, fshape, dil)
    nx = _tile_rows(K, geo_dz, itemsize, C)
    dx_cols, dx_parts = _cols_elements(K, geo_dz, nx, C)
    dx = (K * math.prod(image) + dx_cols + dx_parts) * itemsize
    return always, dx + (K * math.prod(geo.out) - mask if relu else 0)


def fprop(x, w, out, work, relu=False, pad=None, dilation=None):
    """``out (B, K, Ho, Wo)`` = stride-1 valid correlation of ``x (B, C, H, W)`` zero-padded
    by ``pad`` (applied one image at a time) with ``w (K, C, fh, fw)`` (any number of spatial
    axes; ``dilation``: one int per axis, 1 by default). The images are shared out over the
    kernel threads (:mod:`distnet.ops.parallel`), each with its own tile buffers."""
    K = w.shape[0]
    xp, x, C, geo, n = _flat_plan(x, w.shape[2:], pad, dilation, K)
    W = geo.W

    def run(share):
        s, images = share
        imgs = _Images(x, pad, work, f"xpad{s}")
        cols = _tile_cols(C, geo, n, work, f"cols{s}", x, K)
        wg = cols.filters(w)
        parts = scratch(work, f"parts{s}", (wg.shape[0], K, n * W), x.dtype, like=x)
        # never written: zeros since allocation (the workspace contract)
        zeros = scratch(work, f"zeros{s}", (K, n * W), x.dtype, like=x, zeroed=True) if relu else None
        for b in images:
            _flat_image(imgs[b], wg, geo, out[b], cols, parts, zeros)

    parallel_map(run, shares(x.shape[0], xp), xp)
    return out


class _WeightGrad:
    """One kernel thread's weight gradient in the flat backward pass: per image and tile of
    ``n`` output rows, ``acc += cols.stack @ dz_wide.T`` (one stacked GEMM, inner dimension the
    tile's wide positions), ``dz_wide`` the tile's ``dz`` with row pitch ``W`` and zeros in the
    garbage columns (and rows)."""

    def __init__(self, x, pad, work, s, w_shape, geo, n):
        K, C = w_shape[:2]
        self.fshape = w_shape[2:]
        self.imgs = _Images(x, pad, work, f"xpad{s}")
        self.cols = _tile_cols(C, geo, n, work, f"dwcols{s}", x)   # its own: the layout may differ
        shape = self.cols.stack(1).shape[:2] + (K,)
        self.acc = scratch(work, f"dw{s}", shape, x.dtype, like=x)
        self.acc[...] = 0
        self.part = scratch(work, f"dwpart{s}", shape, x.dtype, like=x)
        self.n, self.geo = n, geo

    def add_image(self, b, wide_dz):
        """Add image ``b``'s products; ``wide_dz(i0, m, L)`` gives the ``(K, L)`` wide ``dz``
        of the tile of output rows ``i0 ... i0 + m - 1``."""
        xp = get_array_module(self.acc)
        xf, geo = self.imgs[b], self.geo
        for i0 in range(0, geo.rows, self.n):
            m = min(self.n, geo.rows - i0)
            L = geo.span(m)
            self.cols.fill(xf, i0, L)
            xp.matmul(self.cols.stack(L), wide_dz(i0, m, L).T, out=self.part)
            self.acc += self.part

    @staticmethod
    def total(shares):
        """``dw (K, C, *fshape)``: the shares' sums added in share order (deterministic)."""
        acc = shares[0].acc.copy()
        for g in shares[1:]:
            acc += g.acc
        return shares[0].cols.weight_grad(acc, shares[0].fshape)


def _wide_dz_tiles(xp, dy, relu_y, b, buf, mask, dz_image, geo, in_place):
    """``wide_dz(i0, m, L)`` for :meth:`_WeightGrad.add_image` of image ``b``: a view of the
    ``dz`` image when it is laid out as the wide output (``in_place``: its pitches those of the
    input, e.g. "same" padding), else the tile copied into ``buf (K, n, W)`` (columns ``Wo...``
    never written: zero; a volume's garbage rows zeroed) from the ``dz`` image, or without one
    from ``dy`` (masked by ``relu_y > 0`` on the way). ``dz_image``: ``(flat, region, start)``,
    the image as ``(K, size)``, the view of its ``dz`` region and the flat position there of
    the first output."""
    K, Wo = dy.shape[1], geo.Wo

    def wide_dz(i0, m, L):
        if in_place:
            start = dz_image[2] + i0 * geo.W
            return dz_image[0][:, start:start + L]
        last = 0
        for t0, t1, index in geo.blocks(i0, m):
            if t0 > last:
                buf[:, last:t0] = 0                 # garbage rows between planes
            dst = buf[:, t0:t1, :Wo]
            if dz_image is not None:
                dst[...] = geo.rows_view(dz_image[1])[index]
            elif relu_y is None:
                dst[...] = geo.rows_view(dy[b])[index]
            else:   # the tile's dz only (no dz image without dx)
                xp.multiply(geo.rows_view(dy[b])[index],
                            xp.greater(geo.rows_view(relu_y[b])[index], 0, out=mask[:, :t1 - t0]), out=dst)
            last = t1
        if last < m:
            buf[:, last:m] = 0
        return buf.reshape(K, -1)[:, :L]
    return wide_dz


class _DataGrad:
    """One kernel thread's data gradient in the flat backward pass: image ``b``'s ``dz`` written
    into a zero-bordered image whose full correlation with the flipped, transposed filters is
    the kept part of ``dx`` (:func:`~.flat_rows.full_correlation`), the ReLU mask applied on the
    way; then the forward kernel on it."""

    def __init__(self, w, dy, image, offset, geo_dz, n, work, s):
        K, C = w.shape[:2]
        flip = (slice(None), slice(None)) + (slice(None, None, -1),) * (w.ndim - 2)
        wf = w.swapaxes(0, 1)[flip]                        # (C, K, *f): flipped, transposed
        self.geo = geo_dz
        dzp = scratch(work, f"dzpad{s}", (K,) + tuple(image), dy.dtype, like=dy, zeroed=True)
        region = dzp[(slice(None),) + tuple(slice(o, o + n_) for o, n_ in zip(offset, dy.shape[2:]))]
        start = sum(o * math.prod(image[i + 1:]) for i, o in enumerate(offset))
        #: ``(flat, region, start)``: only ``region`` is ever written, so the border stays zero
        self.image = (dzp.reshape(K, math.prod(image)), region, start)
        self.cols = _tile_cols(K, geo_dz, n, work, f"dxcols{s}", dy, C)
        self.wg = self.cols.filters(wf)
        self.parts = scratch(work, f"dxparts{s}", (self.wg.shape[0], C, n * geo_dz.W), dy.dtype, like=dy)

    def set_dz(self, xp, dy_b, relu_b, mask):
        """Write image ``b``'s ``dz`` (``dy_b``, times ``[relu_b > 0]`` when given) into the image."""
        if relu_b is None:
            self.image[1][...] = dy_b
        else:
            xp.multiply(dy_b, xp.greater(relu_b, 0, out=mask), out=self.image[1])

    def image_dx(self, dx_b):
        """``dx_b (C, *kept)``: the full correlation of the image written last."""
        _flat_image(self.image[0], self.wg, self.geo, dx_b, self.cols, self.parts)


def bprop(x, w, dy, crop, work, pad=None, need_dx=True, need_dw=True, dx_out=None, relu_y=None,
          dilation=None):
    """``(dx, dw)`` of the flat kernel (stride 1) in one pass over the images (``None`` for the
    one not needed). ``dx``: the part of the (padded) chunk kept by ``crop = ((top, bottom),
    (left, right))`` (one pair per spatial axis; needs ``crop`` at most the window's extent - 1),
    written into ``dx_out`` if given. ``relu_y``: the output of a fused-ReLU forward; ``dy`` is
    then the gradient of that output and the gradients are those of the conv itself,
    ``dz = dy * [relu_y > 0]``.

    Per image, on its kernel thread (no batch-sized ``dz``): with ``dx``, ``dz`` is written
    once into a zero-bordered image (:class:`_DataGrad`, the ReLU mask applied on the way), so
    that ``dx`` is the full correlation of it with the flipped, transposed filters
    (:func:`_flat_image`, cropped for free); the weight gradient reads its wide tiles from that
    image or a tile buffer (:func:`_wide_dz_tiles`, :class:`_WeightGrad`).
    """
    K, C = w.shape[:2]
    fshape, dil = w.shape[2:], dilation_of(dilation, w.ndim - 2)
    xp, x, _, geo, n = _flat_plan(x, fshape, pad, dil)
    spatial = padded_shape(x.shape, pad)
    image, offset, kept = full_correlation(spatial, fshape, dil, crop)
    in_place = need_dx and tuple(image[1:]) == tuple(spatial[1:])
    if need_dx:
        geo_dz = RowGeometry(image, fshape, dil)
        nx = _tile_rows(K, geo_dz, dy.dtype.itemsize, C)
        if dx_out is None:
            dx_out = xp.empty((x.shape[0], C) + kept, dtype=dy.dtype)

    def run(share):
        s, images = share
        data = mask = buf = grad = None
        if need_dx:   # only dz is written: the border stays zero
            data = _DataGrad(w, dy, image, offset, geo_dz, nx, work, s)
        if relu_y is not None:
            mask = scratch(work, f"dzmask{s}", (K,) + (tuple(geo.out) if need_dx else (n, geo.Wo)), "bool",
                           like=dy)
        if need_dw:
            grad = _WeightGrad(x, pad, work, s, w.shape, geo, n)
            if not in_place:
                buf = scratch(work, f"dywide{s}", (K, n, geo.W), dy.dtype, like=dy, zeroed=True)
        for b in images:
            if need_dx:
                data.set_dz(xp, dy[b], None if relu_y is None else relu_y[b], mask)
            if need_dw:
                grad.add_image(b, _wide_dz_tiles(xp, dy, relu_y, b, buf, mask, data and data.image, geo,
                                                 in_place))
            if need_dx:
                data.image_dx(dx_out[b])
        return grad

    res = parallel_map(run, shares(x.shape[0], xp), xp)
    return (dx_out if need_dx else None), (_WeightGrad.total(res) if need_dw else None)
