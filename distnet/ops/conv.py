"""2-D convolution (cross-correlation, no flip, no bias) on an already padded NCHW chunk.

Two kernels compute the same numbers; :func:`conv2d_fprop` / :func:`conv2d_bprop` pick one.

**Flat-shift tiles** (numpy, stride 1, images wide enough that a row is worth a GEMM column
block): image ``b`` is read as the matrix ``xf = x[b] (C, H*W)``. For filter tap ``(u, v)`` the
slice ``xf[:, (i0+u)*W + v : ... + L]`` holds that tap's input for ``L`` consecutive output
positions of a *wide* output grid ``Ho x W`` (the last ``fw - 1`` columns of every row are
garbage and dropped). So the im2col of a tile of ``n`` output rows is plain contiguous row
copies (no transposes, no gathers) into a buffer sized to stay in a core's L2 cache
(:data:`TILE_BYTES`): either ``fh*fw`` copies (``C*fh*fw x n*W``, one GEMM ``w2 @ cols``), or,
with enough channels, only ``fw`` (the tile's rows once per column shift; filter row ``u``
reads them in place ``u`` image rows further on, one stacked GEMM of ``fh`` products summed in
order): :class:`_TileCols`. Backward, one pass over the images: each image's ``dz`` (``dy``,
times ``[y > 0]`` for a fused ReLU: ``relu_y``) is written once into a zero-bordered image;
``dw += cols.stack @ dz_wide.T`` per tile (garbage columns of ``dz_wide`` held at zero), and
``dx`` is the same forward kernel applied to that image, padded by ``f - 1`` with the filters
flipped and transposed (a "full" correlation), cropped for free by padding ``dz`` less.
Nothing is larger than one tile or one image except the output; a ReLU is applied as the tile
is written (``relu=True``).

**Batch im2col** (small images, strides, cupy): the patch matrix ``cols`` has shape
``(C*fh*fw, Ho*Wo*B)``; row ``f = (c*fh + u)*fw + v`` is the patch element (neon's order), column
``(i*Wo + j)*B + b`` the output position; fprop ``y2 = w2 @ cols``; bprop ``dw2 = dy2 @ cols.T``
and ``dcols = w2.T @ dy2``, folded back. Batch-innermost columns ("CHWN", as cuda-convnet and
neon's GPU kernels) make the im2col copy and the fold move runs of ``Wo*B`` or ``B`` contiguous
elements, and ``y2`` *is* the output in CHWN memory. So the kernel reads and writes CHWN arrays
(indexed ``(B, C, H, W)`` as every array, held in ``(C, H, W, B)`` memory: :func:`is_chwn`)
without a copy, and the layers hand such arrays from layer to layer (:func:`output_chwn`,
:func:`empty_chwn`); NCHW inputs and outputs are converted. On numpy the matrix is never built
whole (:func:`_tiled_fprop`, :func:`_tiled_bprop`): each kernel thread takes a share of the
images and walks its output rows in tiles of about :data:`SMALL_TILE_BYTES`, doing the tile's
im2col copy, its GEMMs and its part of the fold while the tile is in cache. On a device the matrix
is built whole when it fits :data:`DEVICE_COLS_BYTES`, else in blocks of output rows
(:func:`_blocked_fprop`, :func:`_blocked_bprop`), so that a large image does not need ``C*fh*fw``
times its size in device memory.

**Pointwise** (1x1 filters, no padding, no kernel forced): :mod:`distnet.ops.conv_pointwise`,
one GEMM per image and no patch matrix.

``w (K, C, fh, fw)`` is read as ``w2 (K, C*fh*fw)`` without a copy. Only ``xp`` functions are
used; the input dtype is kept (float32 stays float32). Scratch memory comes from an optional
:class:`~distnet.ops.workspace.Workspace` (``work``), so a training loop allocates it once.
"""
from numpy.lib.stride_tricks import as_strided

from ..backend import get_array_module
from ..errors import GeometryError
from .conv_pointwise import pointwise_bprop, pointwise_fprop, use_pointwise
from .parallel import matmul as pmatmul
from .parallel import copyto as pcopyto
from .parallel import kernel_threads, parallel_map, run_split, shares
from .windows import fold, output_shape, patches
from .workspace import scratch

#: Bytes of one im2col tile of the flat-shift kernel (a core's L2 is 1-2 MiB on current x86).
#: 2 MiB: bigimage conv2 / conv3 at 2 threads (AVX-512 sgemm) 5-15% faster than 1 MiB, 4 MiB mixed.
TILE_BYTES = 1 << 21
#: The flat-shift kernel is used when an image row is at least this wide (padded) and the
#: wasted columns (``fw - 1`` per row) are at most :data:`FLAT_MAX_WASTE` of the work.
FLAT_MIN_WIDTH = 64
FLAT_MAX_WASTE = 0.2
#: The flat kernel's tile im2col copies each input row once per column shift and reads the
#: filter rows in place (:class:`_TileCols`) when a filter row has at least this many weights
#: (``C*fw``; a first layer on RGB has 9: a GEMM of inner dimension 9 is slow) and, for the
#: products that are summed over filter rows afterwards (forward, data gradient), at least
#: :data:`SHIFT_MIN_PER_OUTPUT` times the number of outputs ``K``: the ``fh - 1`` sums over
#: ``(K, tile)`` must cost less than the ``(fh - 1) * C * fw`` row copies they save (measured:
#: bigimage conv2 C*fw/K = 3: 0.94x the time; conv3 forward 1.5: 1.09x).
SHIFT_MIN_INNER = 32
SHIFT_MIN_PER_OUTPUT = 2
#: Bytes of one im2col tile of the tiled batch im2col kernel (numpy, small images).
SMALL_TILE_BYTES = 1 << 20
#: Bytes of the patch matrix the device path builds at once (and of the GEMM output, ``dy`` and
#: input-gradient band that go with it): larger batches of output rows are cut into blocks of
#: rows (:func:`_device_block_rows`). The whole matrix is ``C*fh*fw`` times the input: 9 GiB in
#: float32 for 64 channels, 3x3, 512x512, batch 16, more than a GPU holds next to the rest. Each
#: layer's workspace keeps its blocks between steps, so the budget is paid per conv layer: 256 MiB
#: leaves the memory to the activations and keeps each block's GEMM large (at 64 channels, 3x3:
#: ~116k columns, 4 GFLOP), far more device work than the ~40 calls a block costs.
DEVICE_COLS_BYTES = 256 << 20



def _crop_into(dx, crop, dx_out, xp):
    """``dx (B, C, H, W)`` without ``crop = ((top, bottom), (left, right))``, copied into
    ``dx_out`` (made C-contiguous when None), by channel shares on the kernel threads."""
    (ct, cb), (cl, cr) = crop
    H, W = dx.shape[2:]
    dx = dx[:, :, ct:H - cb, cl:W - cr]
    if dx_out is None:
        dx_out = xp.empty(dx.shape, dtype=dx.dtype)
    pcopyto(dx_out, dx, axis=1)
    return dx_out

def _check(x, w, stride, pad=None):
    """Validate the shapes of a conv call; return ``(Ho, Wo)``."""
    if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1]:
        raise GeometryError(f"conv2d: x {x.shape} (B,C,H,W) and w {w.shape} (K,C,fh,fw) do not match")
    hw = _padded_hw(x.shape, pad)
    Ho, Wo = output_shape(hw, w.shape[2:], stride)
    if Ho < 1 or Wo < 1 or min(stride) < 1:
        raise GeometryError(f"conv2d: filter {tuple(w.shape[2:])} with stride {tuple(stride)} "
                            f"gives no output on an input of {tuple(hw)}")
    return Ho, Wo


def _norm_pad(pad):
    if pad is None:
        return None
    pad = tuple(tuple(int(v) for v in p) for p in pad)
    return None if pad == ((0, 0), (0, 0)) else pad


def _padded_hw(x_shape, pad):
    if pad is None:
        return tuple(x_shape[2:])
    (pt, pb), (pl, pr) = pad
    return (x_shape[2] + pt + pb, x_shape[3] + pl + pr)


def use_flat(x_shape, w_shape, stride, xp=None):
    """Whether :func:`conv2d_fprop` takes the flat-shift kernel for these shapes (numpy only)."""
    if xp is not None and xp.__name__ != "numpy":
        return False
    W, fw = x_shape[3], w_shape[3]
    return tuple(stride) == (1, 1) and W >= FLAT_MIN_WIDTH and (fw - 1) <= FLAT_MAX_WASTE * W


def _method(method, x, w, stride, pad=None):
    if method is None:
        shape = tuple(x.shape[:2]) + _padded_hw(x.shape, pad)
        return "flat" if use_flat(shape, w.shape, stride, get_array_module(x)) else "im2col"
    if method == "flat" and tuple(stride) != (1, 1):
        raise GeometryError("the flat-shift conv kernel needs stride 1")
    if method not in ("flat", "im2col"):
        raise ValueError(f"conv2d method must be 'flat' or 'im2col', got {method!r}")
    return method


# ------------------------------------------------------------------------ batch im2col kernel

def is_chwn(a):
    """Whether ``a`` (indexed ``(B, C, H, W)``) is held in batch-innermost ``(C, H, W, B)``
    memory, the layout the batch im2col kernel reads and writes without a copy."""
    return a.ndim == 4 and a.transpose(1, 2, 3, 0).flags.c_contiguous


def empty_chwn(shape, dtype, like=None, work=None, name=None):
    """A ``(B, C, H, W)``-indexed array in ``(C, H, W, B)`` memory (from ``work[name]`` if given)."""
    B, C, H, W = shape
    return scratch(work, name, (C, H, W, B), dtype, like=like).transpose(3, 0, 1, 2)


def output_chwn(x_shape, w_shape, stride, xp=None, pad=None):
    """Whether :func:`conv2d_fprop` would like ``out`` (and :func:`conv2d_bprop` ``dx_out``) in
    CHWN memory (:func:`empty_chwn`): the batch im2col kernel on numpy, which then writes its
    GEMM and its fold straight into them. Any layout is accepted either way."""
    if xp is not None and xp.__name__ != "numpy":
        return False
    shape = tuple(x_shape[:2]) + _padded_hw(x_shape, _norm_pad(pad))
    return not use_flat(shape, w_shape, stride, xp) and not use_pointwise(w_shape, _norm_pad(pad), None, None)


def _to_chwn(x, work=None, name="chwn", pad=None):
    """``x (B, C, H, W)`` zero-padded by ``pad`` in (C, H, W, B) memory, still indexed as
    (B, C, H, W): ``x`` itself if it already is and needs no padding, else a copy into the
    workspace buffer ``name`` (border zeroed once, at allocation)."""
    if pad is None and is_chwn(x):
        return x
    B, C, H, W = x.shape
    Hp, Wp = _padded_hw(x.shape, pad)
    buf = scratch(work, name, (C, Hp, Wp, B), x.dtype, like=x, zeroed=pad is not None)
    xn = buf.transpose(3, 0, 1, 2)
    if pad is None:
        pcopyto(xn, x, axis=1)
    else:
        (pt, _), (pl, _) = pad
        pcopyto(xn[:, :, pt:pt + H, pl:pl + W], x, axis=1)
    return xn


def _split_axis_of(shape):
    """The first axis of ``shape`` long enough to cut into kernel-thread shares."""
    T = kernel_threads()
    return next((i for i, n in enumerate(shape) if n >= 2 * T), 0)


def im2col(x, fshape, stride, work=None, pad=None):
    """Contiguous patch matrix ``(C*fh*fw, Ho*Wo*B)`` of ``x (B, C, H, W)`` zero-padded by
    ``pad`` (valid windows of the padded array).

    ``cols[(c*fh + u)*fw + v, (i*Wo + j)*B + b] == x[b, c, i*sy + u, j*sx + v]``. With a
    ``work`` space the matrix is its buffer (reused by the next call). The copy reads runs of
    ``Wo*B`` (stride 1) or ``B`` contiguous elements of the CHWN input.
    """
    xn = _to_chwn(x, work, pad=pad)                      # (C, H, W, B) memory, (B, C, H, W) view
    p = patches(xn, fshape, stride)                      # (B, C, Ho, Wo, fh, fw) view, no copy
    B, C, Ho, Wo, fh, fw = p.shape
    cols = scratch(work, "im2col", (C, fh, fw, Ho, Wo, B), x.dtype, like=x)
    pcopyto(cols, p.transpose(1, 4, 5, 2, 3, 0), axis=_split_axis_of(cols.shape))
    return cols.reshape(C * fh * fw, Ho * Wo * B)


def _device_block_rows(x_shape, w_shape, stride, Ho, Wo, itemsize, pad=None):
    """Output rows per block of the device path: the block's patch matrix ``(CF, rows*Wo*B)``,
    its GEMM output or ``dy`` ``(K, rows*Wo*B)`` and the band of input rows its windows cover
    ``(C, (rows-1)*sy + fh, W, B)`` each fit :data:`DEVICE_COLS_BYTES` (at least one row).
    ``Ho`` or more: the whole batch is one block."""
    B, C = x_shape[:2]
    W = _padded_hw(x_shape, pad)[1]
    K, _, fh, fw = w_shape
    unit = itemsize * max(B, 1)                          # B 0: an empty batch, one block
    rows = DEVICE_COLS_BYTES // (unit * max(C * fh * fw, K) * Wo)
    band = (DEVICE_COLS_BYTES // (unit * C * W) - fh) // stride[0] + 1
    return max(1, min(rows, band))


def _im2col_fprop(x, w, stride, Ho, Wo, out, relu, work=None, pad=None):
    """The whole batch: one im2col copy, one GEMM ``(K, CF) @ (CF, Ho*Wo*B)`` written straight
    into ``out`` when it is CHWN (else into a scratch matrix, then copied), each cut into
    kernel-thread shares. A patch matrix larger than :data:`DEVICE_COLS_BYTES` is built in
    blocks of output rows instead (:func:`_blocked_fprop`)."""
    xp = get_array_module(x, w)
    B, K = x.shape[0], w.shape[0]
    n = _device_block_rows(x.shape, w.shape, stride, Ho, Wo, x.dtype.itemsize, pad)
    if n < Ho:
        return _blocked_fprop(x, w, stride, Ho, Wo, out, relu, work, pad, n)
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


def _im2col_bprop(x, w, dy, stride, need_dx, Ho, Wo, crop, dx_out, work=None, pad=None):
    """``(dx, dw)`` of the whole batch: ``dw = (cols @ dy2.T).T``, ``dcols = w2.T @ dy2`` (over
    ``cols``), folded into CHWN memory (``dx_out`` itself when it is CHWN and nothing is
    cropped), each step cut into kernel-thread shares. A patch matrix larger than
    :data:`DEVICE_COLS_BYTES`: in blocks of output rows instead (:func:`_blocked_bprop`)."""
    xp = get_array_module(x, w, dy)
    B, C = x.shape[:2]
    H, W = _padded_hw(x.shape, pad)
    K, _, fh, fw = w.shape
    n = _device_block_rows(x.shape, w.shape, stride, Ho, Wo, x.dtype.itemsize, pad)
    if n < Ho:
        return _blocked_bprop(x, w, dy, stride, need_dx, Ho, Wo, crop, dx_out, work, pad, n)
    cols = im2col(x, (fh, fw), stride, work, pad)        # (CF, P*B); recomputed, not cached
    dy2 = _to_chwn(dy, work, "dy2").transpose(1, 2, 3, 0).reshape(K, Ho * Wo * B)
    # (CF, K) then a tiny transpose copy: measured faster than dy2 @ cols.T on OpenBLAS.
    dw = pmatmul(cols, dy2.T).T.reshape(w.shape)
    if not need_dx:
        return None, dw
    # (CF, P*B), written over cols (dead after dw).
    dcols = pmatmul(w.reshape(K, -1).T, dy2, out=cols)
    cols6 = dcols.reshape(C, fh, fw, Ho, Wo, B).transpose(5, 0, 3, 4, 1, 2)  # (B,C,Ho,Wo,fh,fw)
    if crop == ((0, 0), (0, 0)) and dx_out is not None and is_chwn(dx_out):
        dxn = dx_out
    else:   # fold into (C, H, W, B) memory: the adds walk both operands in long contiguous runs
        dxn = empty_chwn((B, C, H, W), dcols.dtype, like=dcols, work=work, name="dxn")

    def fold_share(c):
        fold(cols6[:, c], (B, c.stop - c.start, H, W), stride, out=dxn[:, c])
    run_split(fold_share, C, xp, size=cols6.size)
    if dxn is dx_out:
        return dx_out, dw
    return _crop_into(dxn, crop, dx_out, xp), dw


def _blocked_fprop(x, w, stride, Ho, Wo, out, relu, work, pad, n):
    """:func:`_im2col_fprop` in blocks of ``n`` output rows (device path, large images): per
    block one im2col copy into ``(CF, n*Wo*B)``, one GEMM, the ReLU, one copy into ``out``.
    Every output pixel is the same dot product of length ``CF`` as in one block."""
    xp = get_array_module(x, w)
    xn = _to_chwn(x, work, pad=pad)                      # (C, H, W, B) memory
    p = patches(xn, w.shape[2:], stride)                 # (B, C, Ho, Wo, fh, fw) view
    B, C, _, _, fh, fw = p.shape
    K, CF = w.shape[0], C * fh * fw
    w2 = w.reshape(K, CF)
    cbuf = scratch(work, "block_cols", (CF * n * Wo * B,), x.dtype, like=x)
    ybuf = scratch(work, "block_y2", (K * n * Wo * B,), x.dtype, like=x)
    for i0 in range(0, Ho, n):
        m = min(n, Ho - i0)
        L = m * Wo * B
        cols = cbuf[:CF * L].reshape(C, fh, fw, m, Wo, B)
        xp.copyto(cols, p[:, :, i0:i0 + m].transpose(1, 4, 5, 2, 3, 0))
        y2 = ybuf[:K * L].reshape(K, L)
        xp.matmul(w2, cols.reshape(CF, L), out=y2)
        if relu:
            xp.maximum(y2, 0, out=y2)
        xp.copyto(out[:, :, i0:i0 + m], y2.reshape(K, m, Wo, B).transpose(3, 0, 1, 2))
    return out


def _blocked_bprop(x, w, dy, stride, need_dx, Ho, Wo, crop, dx_out, work, pad, n):
    """:func:`_im2col_bprop` in blocks of ``n`` output rows (device path, large images). Per
    block: the im2col copy, the block's ``dy`` copied to ``(K, n*Wo*B)``, ``dw += (cols @
    dy_block.T).T``, ``dcols = w2.T @ dy_block`` (over the block's ``cols``) folded into the band
    of input rows the block's windows read, which is added into ``dx`` (CHWN, zeroed first):
    rows shared with the next block's band get both blocks' sums. Blocks run from the last
    output row to the first and ``dw`` adds their products in that order (a fixed order: the
    same bits every run)."""
    xp = get_array_module(x, w, dy)
    xn = _to_chwn(x, work, pad=pad)
    p = patches(xn, w.shape[2:], stride)
    B, C, _, _, fh, fw = p.shape
    H, W = xn.shape[2:]
    sy = stride[0]
    K, CF = w.shape[0], C * fh * fw
    w2 = w.reshape(K, CF)
    cbuf = scratch(work, "block_cols", (CF * n * Wo * B,), x.dtype, like=x)
    dbuf = scratch(work, "block_dy2", (K * n * Wo * B,), dy.dtype, like=dy)
    dws = scratch(work, "block_dw", (CF, K), x.dtype, like=x)
    part = scratch(work, "block_dwpart", (CF, K), x.dtype, like=x)
    if need_dx:
        dxn = (dx_out if crop == ((0, 0), (0, 0)) and dx_out is not None and is_chwn(dx_out)
               else empty_chwn((B, C, H, W), dy.dtype, like=dy, work=work, name="dxn"))
        dxn[...] = 0                                     # rows no window reads stay 0
        bbuf = scratch(work, "block_band", (C * ((n - 1) * sy + fh) * W * B,), dy.dtype, like=dy)
    for t, i0 in enumerate(reversed(range(0, Ho, n))):
        m = min(n, Ho - i0)
        L = m * Wo * B
        cols = cbuf[:CF * L].reshape(C, fh, fw, m, Wo, B)
        xp.copyto(cols, p[:, :, i0:i0 + m].transpose(1, 4, 5, 2, 3, 0))
        dy2 = dbuf[:K * L].reshape(K, m, Wo, B)
        xp.copyto(dy2, dy[:, :, i0:i0 + m].transpose(1, 2, 3, 0))
        dy2, c2 = dy2.reshape(K, L), cols.reshape(CF, L)
        if t == 0:
            xp.matmul(c2, dy2.T, out=dws)
        else:
            xp.matmul(c2, dy2.T, out=part)
            dws += part
        if not need_dx:
            continue
        xp.matmul(w2.T, dy2, out=c2)                     # dcols of the block, over its cols
        r0, rows = i0 * sy, (m - 1) * sy + fh            # the input rows its windows read
        band = bbuf[:C * rows * W * B].reshape(C, rows, W, B).transpose(3, 0, 1, 2)
        fold(cols.transpose(5, 0, 3, 4, 1, 2), (B, C, rows, W), stride, out=band)
        dxn[:, :, r0:r0 + rows] += band
    dw = xp.ascontiguousarray(dws.T).reshape(w.shape)
    if not need_dx:
        return None, dw
    if dxn is dx_out:
        return dx_out, dw
    return _crop_into(dxn, crop, dx_out, xp), dw


def _small_tile_rows(CF, Wo, Bs, Ho, itemsize):
    """Output rows per tile of the tiled im2col kernel: the tile ``(CF, rows*Wo*Bs)`` fits
    :data:`SMALL_TILE_BYTES` (at least one row)."""
    return max(1, min(Ho, SMALL_TILE_BYTES // (itemsize * CF * Wo * max(Bs, 1))))   # Bs 0: empty batch


def _tiled_fprop(x, w, stride, Ho, Wo, out, relu, work=None, pad=None):
    """numpy: the batch im2col kernel in cache-sized tiles. Each kernel thread takes a block of
    output rows of the whole batch when ``out`` is CHWN and there are enough rows (the GEMMs
    then write straight into ``out``), else a share of the images; it walks its part in tiles of
    ``(CF, rows*Wo*Bs)`` columns (:func:`_small_tile_rows`): the tile's im2col copy, one GEMM
    ``w2 @ tile``, the ReLU, the write into ``out`` (unless the GEMM wrote there). Every output
    pixel is the same dot product of length ``CF`` whatever the tiling."""
    xp = get_array_module(x, w)
    xn = _to_chwn(x, work, pad=pad)                      # (C, H, W, B) memory
    p = patches(xn, w.shape[2:], stride)                 # (B, C, Ho, Wo, fh, fw) view
    B, C, _, _, fh, fw = p.shape
    K, CF = w.shape[0], C * fh * fw
    w2 = w.reshape(K, CF)
    direct = is_chwn(out)
    if direct and Ho >= kernel_threads():                # (share, images, output rows)
        parts = [(s, range(B), rows) for s, rows in shares(Ho, xp)]
    else:
        parts = [(s, images, range(Ho)) for s, images in shares(B, xp)]
    y_all = out.transpose(1, 2, 3, 0).reshape(K, Ho * Wo * B) if direct else None

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
            ct = cbuf[:CF * L].reshape(C, fh, fw, m, Wo, Bs)
            xp.copyto(ct, p[b0:b1, :, i0:i0 + m].transpose(1, 4, 5, 2, 3, 0))
            yt = y_all[:, i0 * Wo * B:(i0 + m) * Wo * B] if whole else ybuf[:K * L].reshape(K, L)
            xp.matmul(w2, ct.reshape(CF, L), out=yt)
            if relu:
                xp.maximum(yt, 0, out=yt)
            if not whole:
                out[b0:b1, :, i0:i0 + m] = yt.reshape(K, m, Wo, Bs).transpose(3, 0, 1, 2)

    parallel_map(run, parts, xp)
    return out


def _tiled_bprop(x, w, dy, stride, need_dx, Ho, Wo, crop, dx_out, work=None, pad=None):
    """numpy: :func:`_im2col_bprop` in the tiles of :func:`_tiled_fprop`. Per share and tile:
    the im2col copy, ``dw_share += (tile @ dy_tile.T).T``, ``dcols = w2.T @ dy_tile`` (over the
    tile) folded at once into the share's images of ``dx`` (CHWN). The tiles are walked from
    the last output row to the first, so every ``dx`` pixel adds its window contributions in
    the order ``(u, v)`` of the untiled fold, whatever the tiling. ``dw`` = the shares' sums
    added in share order."""
    xp = get_array_module(x, w, dy)
    xn = _to_chwn(x, work, pad=pad)
    p = patches(xn, w.shape[2:], stride)
    B, C, _, _, fh, fw = p.shape
    H, W = xn.shape[2:]
    (sy, sx) = stride
    K, CF = w.shape[0], C * fh * fw
    w2 = w.reshape(K, CF)
    parts = shares(B, xp)
    dy_all = (dy.transpose(1, 2, 3, 0).reshape(K, Ho * Wo * B)
              if len(parts) == 1 and is_chwn(dy) else None)
    dxn = None
    if need_dx:
        dxn = (dx_out if crop == ((0, 0), (0, 0)) and dx_out is not None and is_chwn(dx_out)
               else empty_chwn((B, C, H, W), dy.dtype, like=dy, work=work, name="dxn"))

    def run(share):
        s, images = share
        b0, b1 = images.start, images.stop
        Bs = b1 - b0
        n = _small_tile_rows(CF, Wo, Bs, Ho, x.dtype.itemsize)
        cbuf = scratch(work, f"tcols{s}", (CF * n * Wo * Bs,), x.dtype, like=x)
        dbuf = None if dy_all is not None else scratch(work, f"tdy{s}", (K * n * Wo * Bs,), dy.dtype, like=dy)
        # dw as (CF, K) = tile @ dy_tile.T: 1.4x faster than dy_tile @ tile.T on OpenBLAS 0.3.31's
        # SkylakeX sgemm (conv2 of mnist_cnn, one core); transposed once at the end.
        dws = scratch(work, f"tdw{s}", (CF, K), x.dtype, like=x)
        part = scratch(work, f"tpart{s}", (CF, K), x.dtype, like=x)
        if need_dx:   # several shares: a private CHWN buffer (their images interleave in dxn,
            # so folding there would write cache lines the other threads write too)
            dxs = dxn if len(parts) == 1 else empty_chwn((Bs, C, H, W), dy.dtype, like=dy, work=work,
                                                         name=f"tdx{s}")
            dxs[...] = 0
        for t, i0 in enumerate(reversed(range(0, Ho, n))):
            m = min(n, Ho - i0)
            L = m * Wo * Bs
            ct = cbuf[:CF * L].reshape(C, fh, fw, m, Wo, Bs)
            ct2 = ct.reshape(CF, L)
            xp.copyto(ct, p[b0:b1, :, i0:i0 + m].transpose(1, 4, 5, 2, 3, 0))
            if dy_all is not None:
                dyt = dy_all[:, i0 * Wo * B:(i0 + m) * Wo * B]
            else:
                dyt = dbuf[:K * L].reshape(K, m, Wo, Bs)
                xp.copyto(dyt, dy[b0:b1, :, i0:i0 + m].transpose(1, 2, 3, 0))
                dyt = dyt.reshape(K, L)
            if t == 0:
                xp.matmul(ct2, dyt.T, out=dws)
            else:
                xp.matmul(ct2, dyt.T, out=part)
                dws += part
            if not need_dx:
                continue
            xp.matmul(w2.T, dyt, out=ct2)                 # dcols of the tile, over its cols
            for u in range(fh):
                rows = slice(i0 * sy + u, (i0 + m - 1) * sy + u + 1, sy)
                for v in range(fw):
                    cs = slice(v, v + sx * (Wo - 1) + 1, sx)
                    dxs[:, :, rows, cs] += ct[:, u, v].transpose(3, 0, 1, 2)
        if need_dx and dxs is not dxn:
            dxn[b0:b1] = dxs
        return dws

    res = parallel_map(run, parts, xp)
    dw = res[0].copy()
    for d in res[1:]:
        dw += d
    dw = xp.ascontiguousarray(dw.T).reshape(w.shape)
    if not need_dx:
        return None, dw
    if dxn is dx_out:
        return dx_out, dw
    return _crop_into(dxn, crop, dx_out, xp), dw


# ------------------------------------------------------------------------ flat-shift kernel

def _uses_shifts(C, fw, K=0):
    """Whether the flat kernel's tile im2col is the shifted-rows layout (:class:`_TileCols`) for
    ``C`` input channels and ``K`` outputs summed over filter rows (0: the weight gradient,
    whose products per filter row are separate outputs)."""
    return C * fw >= max(SHIFT_MIN_INNER, SHIFT_MIN_PER_OUTPUT * K)


def _tile_rows(C, fh, fw, W, Ho, itemsize, K=0):
    """Output rows per tile: the tile's im2col buffer (:class:`_TileCols`) and, given ``K`` (the
    forward and data gradient), its partial outputs ``(g, K, n*W)`` each fit :data:`TILE_BYTES`."""
    if _uses_shifts(C, fw, K):
        n, g = TILE_BYTES // (itemsize * C * fw * W) - (fh - 1), fh
    else:
        n, g = TILE_BYTES // (itemsize * C * fh * fw * W), 1
    if K:
        n = min(n, TILE_BYTES // (itemsize * g * K * W))
    return max(1, min(Ho, n))


class _TileCols:
    """The im2col of one tile (``n`` output rows, ``L`` wide output positions) of the flat-shift
    kernel, in one kernel thread's buffer; filter tap ``(u, v)`` of input row ``i0 + u`` reads
    ``xf[c, (i0+u)*W + v + l]``, ``l < L`` (``xf (C, H*W)``: an image, row pitch ``W``).

    :meth:`stack` is ``(g, R, L)``: ``g`` matrices whose products with :meth:`filters`
    ``(g, K, R)``, summed over ``g`` in order, give the tile's ``(K, L)`` output. Two layouts:

    * **shifted rows** (:func:`_uses_shifts`): the tile's ``n + fh - 1`` input rows copied
      once per column shift ``v`` (``fw`` contiguous copies per channel into ``(C, fw, P)``);
      ``g = fh``, ``R = C*fw``, ``stack[u]`` (rows ``(c, v)``) is a strided view one image row
      of ``W`` further along for each filter row ``u``: nothing else is copied.
    * **full** (few channels, e.g. RGB: a GEMM with an inner dimension of ``C*fw`` = 9 is slow):
      ``fh*fw`` row copies into ``(C, fh*fw, n*W)``; ``g = 1``, ``R = C*fh*fw``.
    """

    def __init__(self, C, fh, fw, W, n, work, name, like, K=0):
        self.C, self.fh, self.fw, self.W = C, fh, fw, W
        self.shifts = _uses_shifts(C, fw, K)
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
    ``xf (C, H*W)`` with the filters ``wg = cols.filters(w)``; ``cols`` (:class:`_TileCols`) and
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
        self.H, self.W = _padded_hw(x.shape, pad)
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
    H, W = _padded_hw(x.shape, pad)
    Ho = H - fh + 1
    n = _tile_rows(C, fh, fw, W, Ho, x.dtype.itemsize, K)
    return xp, (flat_readable(x) if pad is None else x), C, W, Ho, n


def _flat_conv(x, w, out, work, relu=False, pad=None):
    """``out (B, K, Ho, Wo)`` = stride-1 valid correlation of ``x (B, C, H, W)`` zero-padded
    by ``pad`` (applied one image at a time) with ``w (K, C, fh, fw)``. The images are shared
    out over the kernel threads (:mod:`distnet.ops.parallel`), each with its own tile buffers."""
    K, _, fh, fw = w.shape
    xp, x, C, W, Ho, n = _flat_plan(x, fh, fw, pad, K)
    B, Wo = x.shape[0], W - fw + 1

    def run(share):
        s, images = share
        imgs = _Images(x, pad, work, f"xpad{s}")
        cols = _TileCols(C, fh, fw, W, n, work, f"cols{s}", x, K)
        wg = cols.filters(w)
        parts = scratch(work, f"parts{s}", (wg.shape[0], K, n * W), x.dtype, like=x)
        # never written: zeros since allocation (the workspace contract)
        zeros = scratch(work, f"zeros{s}", (K, n * W), x.dtype, like=x, zeroed=True) if relu else None
        for b in images:
            _flat_image(imgs[b], wg, Ho, Wo, out[b], cols, parts, zeros)

    parallel_map(run, shares(B, xp), xp)
    return out


def _flat_bprop(x, w, dy, crop, work, pad=None, need_dx=True, need_dw=True, dx_out=None, relu_y=None):
    """``(dx, dw)`` of the flat kernel (stride 1) in one pass over the images (``None`` for the
    one not needed). ``dx``: the rows/cols of the (padded) chunk kept by ``crop = ((top,
    bottom), (left, right))`` (needs ``crop <= f - 1``), written into ``dx_out`` if given.
    ``relu_y``: the output of a fused-ReLU forward; ``dy`` is then the gradient of that output
    and the gradients are those of the conv itself, ``dz = dy * [relu_y > 0]``.

    Per image, on its kernel thread (no batch-sized ``dz``): with ``dx``, ``dz`` is written
    once into a zero-bordered image ``(K, Hd, Wd)`` (the ReLU mask applied on the way), padded
    by ``f - 1 - crop`` so that ``dx`` is the full correlation of it with the flipped,
    transposed filters (:func:`_flat_image`, cropped for free). The weight gradient reads its
    wide ``dz`` tiles (row pitch ``W``, zeros in the ``fw - 1`` garbage columns) straight from
    that image when its width is ``W`` (``left + right crop = fw - 1``, e.g. "same" padding),
    else copies them into a tile buffer (without ``dx``: straight from ``dy``, masked on the
    way): ``dw += cols.stack @ dz_wide.T`` per tile (one stacked GEMM, inner dimension the
    tile's wide positions). The per-thread ``dw`` sums are added in thread order
    (deterministic).
    """
    K, C, fh, fw = w.shape
    xp, x, _, W, Ho, n = _flat_plan(x, fh, fw, pad)
    B, H = x.shape[0], _padded_hw(x.shape, pad)[0]
    Wo = W - fw + 1
    (ct, cb), (cl, cr) = crop
    pt, pb, pl, pr = fh - 1 - ct, fh - 1 - cb, fw - 1 - cl, fw - 1 - cr
    Hd, Wd = Ho + pt + pb, Wo + pl + pr                  # the zero-bordered dz image
    hx, wx = H - ct - cb, W - cl - cr                     # dx plane kept
    in_place = need_dx and Wd == W
    if need_dx:
        wf = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]    # (C, K, fh, fw): flipped, transposed
        nx = _tile_rows(K, fh, fw, Wd, hx, dy.dtype.itemsize, C)
        if dx_out is None:
            dx_out = xp.empty((B, C, hx, wx), dtype=dy.dtype)

    def run(share):
        s, images = share
        if need_dx:
            dzp = scratch(work, f"dzpad{s}", (K, Hd, Wd), dy.dtype, like=dy, zeroed=True)
            dzf, dz = dzp.reshape(K, Hd * Wd), dzp[:, pt:pt + Ho, pl:pl + Wo]   # only dz is written
        mask = None
        if relu_y is not None:
            mask = scratch(work, f"dzmask{s}", (K, Ho if need_dx else n, Wo), "bool", like=dy)
        if need_dw:
            imgs = _Images(x, pad, work, f"xpad{s}")
            cols = _TileCols(C, fh, fw, W, n, work, f"dwcols{s}", x)   # its own: the layout may differ
            shape = cols.stack(1).shape[:2] + (K,)
            acc = scratch(work, f"dw{s}", shape, x.dtype, like=x)
            acc[...] = 0
            part = scratch(work, f"dwpart{s}", shape, x.dtype, like=x)
            if not in_place:   # columns Wo..W-1 of every row are never written: they stay zero
                dyw = scratch(work, f"dywide{s}", (K, n, W), dy.dtype, like=dy, zeroed=True)
        if need_dx:
            dxcols = _TileCols(K, fh, fw, Wd, nx, work, f"dxcols{s}", dy, C)
            wg = dxcols.filters(wf)
            parts = scratch(work, f"dxparts{s}", (wg.shape[0], C, nx * Wd), dy.dtype, like=dy)
        for b in images:
            if need_dx and mask is None:
                dz[...] = dy[b]
            elif need_dx:
                xp.multiply(dy[b], xp.greater(relu_y[b], 0, out=mask), out=dz)
            if need_dw:
                xf = imgs[b]
                for i0 in range(0, Ho, n):
                    m = min(n, Ho - i0)
                    L = m * W - (fw - 1)
                    cols.fill(xf, i0, L)
                    if in_place:
                        start = (pt + i0) * Wd + pl
                        dyt = dzf[:, start:start + L]
                    else:
                        if need_dx:
                            dyw[:, :m, :Wo] = dz[:, i0:i0 + m]
                        elif mask is None:
                            dyw[:, :m, :Wo] = dy[b, :, i0:i0 + m]
                        else:   # the tile's dz only (no dz image without dx)
                            xp.multiply(dy[b, :, i0:i0 + m], xp.greater(relu_y[b, :, i0:i0 + m], 0,
                                        out=mask[:, :m]), out=dyw[:, :m, :Wo])
                        dyt = dyw.reshape(K, n * W)[:, :L]
                    xp.matmul(cols.stack(L), dyt.T, out=part)
                    acc += part
            if need_dx:
                _flat_image(dzf, wg, hx, wx, dx_out[b], dxcols, parts)
        return (cols, acc) if need_dw else None

    res = parallel_map(run, shares(B, xp), xp)
    dw = None
    if need_dw:
        total = res[0][1].copy()
        for _, p in res[1:]:
            total += p
        dw = res[0][0].weight_grad(total)
    return (dx_out if need_dx else None), dw


# ------------------------------------------------------------------------ public entry points

def conv2d_fprop(x, w, stride, out=None, relu=False, work=None, method=None, pad=None):
    """Valid cross-correlation of ``x (B, C, H, W)`` with ``w (K, C, fh, fw)``.

    ``y[b, k, i, j] = sum_{c,u,v} w[k, c, u, v] * x[b, c, i*sy + u, j*sx + v]``, shape
    ``(B, K, Ho, Wo)`` with ``Ho = (H - fh)//sy + 1``, ``Wo = (W - fw)//sx + 1``; ``stride`` is
    ``(sy, sx)``. If ``out`` (``(B, K, Ho, Wo)``) is given the result is written there and
    returned. ``relu``: return ``max(y, 0)`` instead (fused into the write). ``work``: a
    :class:`~distnet.ops.workspace.Workspace` for the scratch tiles. ``method``: ``"flat"`` or
    ``"im2col"`` to force a kernel (default: :func:`use_flat`). ``pad = ((top, bottom), (left,
    right))``: zero padding of ``x`` done here (the flat kernel pads one image at a time, so no
    padded copy of the batch is made); ``H, W`` above are then the padded sizes.
    """
    xp = get_array_module(x, w)
    pad = _norm_pad(pad)
    Ho, Wo = _check(x, w, stride, pad)
    B, K = x.shape[0], w.shape[0]
    if use_pointwise(w.shape, pad, None, method):     # 1x1 filters: one GEMM per image
        return pointwise_fprop(x, w, stride, out, relu)
    if _method(method, x, w, stride, pad) == "flat":
        if out is None:
            out = xp.empty((B, K, Ho, Wo), dtype=xp.result_type(x.dtype, w.dtype))
        return _flat_conv(x, w, out, work, relu, pad)
    if out is None:
        out = xp.empty((B, K, Ho, Wo), dtype=xp.result_type(x.dtype, w.dtype))
    if xp.__name__ == "numpy":
        return _tiled_fprop(x, w, stride, Ho, Wo, out, relu, work, pad)
    return _im2col_fprop(x, w, stride, Ho, Wo, out, relu, work, pad)


def fuses_relu_grad(x, w, stride, pad=None, method=None):
    """Whether :func:`conv2d_bprop` applies ``relu_y``'s mask inside its kernel for these
    arguments (the flat-shift kernel: no batch-sized ``dz``); otherwise it computes
    ``dz = dy * [relu_y > 0]`` first, as a caller could."""
    pad = _norm_pad(pad)
    return _method(method, x, w, stride, pad) == "flat" and not use_pointwise(w.shape, pad, None, method)


def conv2d_bprop(x, w, dy, stride, need_dx=True, crop=None, dx_out=None, work=None, method=None,
                 pad=None, relu_y=None):
    """Gradients of :func:`conv2d_fprop` given ``dy (B, K, Ho, Wo)`` = dL/dy.

    Returns ``(dx, dw)``: ``dx (B, C, H, W)`` (``None`` if ``need_dx`` is false; pixels that no
    window reads get 0; overlapping windows add up) and ``dw (K, C, fh, fw)`` =
    ``sum_{b,i,j} dy[b, k, i, j] * x[b, c, i*sy + u, j*sx + v]``: a plain sum over batch and
    positions (the caller scales it).

    ``crop = ((top, bottom), (left, right))``: return only ``dx[:, :, top:H-bottom,
    left:W-right]`` (a layer's own tile inside its zero-padded chunk), C-contiguous; the flat
    kernel computes just that part. ``dx_out``: write ``dx`` there (its shape after the crop).
    ``pad``: ``x`` is unpadded and was padded by :func:`conv2d_fprop`; ``dx`` is then the
    gradient of the unpadded ``x`` (``crop`` defaults to ``pad``). ``relu_y``: the output of
    ``conv2d_fprop(..., relu=True)``; ``dy`` is then the gradient of that output, and the
    gradients returned are those of the conv, with ``dz = dy * [relu_y > 0]`` (the flat kernel
    applies the mask as it reads ``dy``, image by image: :func:`fuses_relu_grad`).
    """
    xp = get_array_module(x, w, dy)
    pad = _norm_pad(pad)
    Ho, Wo = _check(x, w, stride, pad)
    B, C = x.shape[:2]
    H, W = _padded_hw(x.shape, pad)
    K, _, fh, fw = w.shape
    if dy.shape != (B, K, Ho, Wo):
        raise GeometryError(f"conv2d_bprop: dy {dy.shape} should be {(B, K, Ho, Wo)}")
    if crop is None:
        crop = pad if pad is not None else ((0, 0), (0, 0))
    crop = tuple(tuple(int(c) for c in p) for p in crop)
    pointwise = use_pointwise(w.shape, pad, crop, method)
    flat = not pointwise and _method(method, x, w, stride, pad) == "flat"
    if relu_y is not None and not flat:   # the other kernels take dz = dy * [y > 0] as their dy
        dz = scratch(work, "reludz", dy.shape, dy.dtype, like=dy)
        xp.multiply(dy, relu_y > 0, out=dz)
        dy = dz
    if pointwise:                                     # 1x1 filters: one GEMM per image
        return pointwise_bprop(x, w, dy, stride, need_dx, dx_out)
    if flat:
        if not need_dx or (max(crop[0]) <= fh - 1 and max(crop[1]) <= fw - 1):
            return _flat_bprop(x, w, dy, crop, work, pad, need_dx, dx_out=dx_out, relu_y=relu_y)
        dx, dw = _flat_bprop(x, w, dy, ((0, 0), (0, 0)), work, pad, relu_y=relu_y)
    else:
        if xp.__name__ == "numpy":
            return _tiled_bprop(x, w, dy, stride, need_dx, Ho, Wo, crop, dx_out, work, pad)
        return _im2col_bprop(x, w, dy, stride, need_dx, Ho, Wo, crop, dx_out, work, pad)
    return _crop_into(dx, crop, dx_out, xp), dw
