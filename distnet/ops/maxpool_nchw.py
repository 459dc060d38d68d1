"""Max pooling of large planes with non-overlapping windows, in NCHW memory throughout (the
CPU's kernel for planes of at least :data:`distnet.ops.pooling.NCHW_MIN_PLANE` pixels: no
transposes of a large activation), forward and backward.

Called by :func:`distnet.ops.pooling.maxpool_fprop` / :func:`~distnet.ops.pooling.maxpool_bprop`
(which check the shapes and choose); shapes and results as theirs: ``x (B, C, H, W)``, ``y`` and
``argmax`` (uint8, the first maximum's ``u*fw + v``) ``(B, C, Ho, Wo)``.
"""
import numpy as np

from ..backend import get_array_module
from . import dispatch
from .parallel import parallel_map, shares
from .windows import output_shape, tap_slices
from .workspace import scratch

#: NCHW max pooling works on blocks of the channels of one image holding about this many input
#: bytes: the few passes over a block (and its row maxima, masks and indices) stay in L2.
NCHW_BLOCK_BYTES = 1 << 20


def _nchw_blocks(x_shape, itemsize, xp):
    """``[(images, channels)]`` slices covering the batch: blocks of channels of one image of
    about :data:`NCHW_BLOCK_BYTES` (numpy); one block for the whole batch on a device (a fixed
    number of kernel launches per call, whatever the batch)."""
    B, C, H, W = x_shape
    if not dispatch.cache_tiled(xp):
        return [(slice(0, B), slice(0, C))]
    cb = max(1, min(C, NCHW_BLOCK_BYTES // max(1, H * W * itemsize)))
    return [(slice(b, b + 1), slice(c, min(C, c + cb))) for b in range(B) for c in range(0, C, cb)]


def workspace_arrays(x_shape, fshape, stride, itemsize=4):
    """The scratch :func:`maxpool_fprop` and :func:`maxpool_bprop` keep in their workspace for
    ``x (B, C, H, W)`` on numpy, as
    :class:`~distnet.layers.placement.WorkArray` fields (dicts): ``argmax`` (uint8, the output's
    shape, per sample) and, per block of channels (:func:`_nchw_blocks`, cut for
    ``itemsize``-byte numbers), the row maxima, the ``fh*fw`` window taps, three uint8 masks and
    the backward's bool mask, one set per kernel thread."""
    (fh, fw), out = fshape, output_shape(x_shape[2:], fshape, stride)
    blocks = _nchw_blocks((1,) + tuple(x_shape[1:]), itemsize, np)
    block, n = max(c.stop - c.start for _, c in blocks) * out[0] * out[1], len(blocks)
    return [dict(name="argmax", elements=x_shape[1] * out[0] * out[1], itemsize=1),
            dict(name="poolrow", elements=block, per_sample=False, per_thread=n),
            dict(name="pooltaps", elements=fh * fw * block, per_sample=False, per_thread=n),
            dict(name="poolmasks", elements=4 * block, per_sample=False, itemsize=1, per_thread=n)]


def _block_shares(blocks, xp):
    """The blocks cut into contiguous kernel-thread shares: ``[(share index, [blocks])]``."""
    return [(s, blocks[r.start:r.stop]) for s, r in shares(len(blocks), xp)]


def maxpool_fprop(x, fshape, stride, out=None, work=None):
    """Non-overlapping windows on a large plane, NCHW throughout (no transposes of a large
    activation). Per block of channels (:func:`_nchw_blocks`), two stages, each a few
    whole-block numpy passes over strided views (``x[..., u::fh, v::fw]`` holds element
    ``(u, v)`` of every window):

    1. every window row ``u``: its maximum ``r_u`` and the first column ``i_u`` that holds it
       (a later column replaces it only if strictly greater);
    2. the rows in order: ``y = r_0, k = i_0``, then row ``u`` replaces them only if
       ``r_u > y`` strictly, with ``k = u*fw + i_u``.

    So ``k`` is the first maximum in row-major order (ties go to the earlier row, then the
    earlier column) and NaNs propagate into ``y`` as with ``maximum``. Index updates are uint8
    arithmetic (``k += m * (new - k)``, never negative: ``new > k``), no masked copies. The
    blocks are shared out over the kernel threads (:mod:`distnet.ops.parallel`), each with its
    own scratch.
    """
    xp = get_array_module(x)
    B, C = x.shape[:2]
    (fh, fw), (Ho, Wo) = fshape, output_shape(x.shape[2:], fshape, stride)
    y = out if out is not None else xp.empty((B, C, Ho, Wo), dtype=x.dtype)
    argmax = scratch(work, "argmax", (B, C, Ho, Wo), "uint8", like=x)
    blocks = _nchw_blocks(x.shape, x.dtype.itemsize, xp)
    if not blocks:   # no images (a data replica with no rows of a short batch): nothing to pool
        return y, argmax
    nb = max(b.stop - b.start for b, _ in blocks)
    nc = max(c.stop - c.start for _, c in blocks)

    def run(share):
        s, mine = share
        shape = (nb, nc, Ho, Wo)
        r = scratch(work, f"poolrow{s}", shape, x.dtype, like=x)
        ri, m, t = (scratch(work, f"pool{n}{s}", shape, "uint8", like=x) for n in ("ri", "m", "t"))
        # numpy: the block's window elements copied out once, contiguous (see _pool_block)
        taps = (scratch(work, f"pooltaps{s}", (fh * fw,) + shape, x.dtype, like=x)
                if dispatch.cache_tiled(xp) else None)
        for bs, cs in mine:
            xb, yb, ab = x[bs, cs], y[bs, cs], argmax[bs, cs]
            cut = (slice(0, bs.stop - bs.start), slice(0, cs.stop - cs.start))
            _pool_block(xp, xb, yb, ab, r[cut], ri[cut], m[cut], t[cut], fh, fw, Ho, Wo,
                        None if taps is None else taps[(slice(None),) + cut])

    parallel_map(run, _block_shares(blocks, xp), xp)
    return y, argmax


def _pool_block(xp, xb, yb, ab, r, ri, m, t, fh, fw, Ho, Wo, taps=None):
    """:func:`maxpool_fprop` on one block: ``yb``/``ab`` (max, uint8 first argmax) of
    ``xb``; ``r`` (float), ``ri``, ``m``, ``t`` (uint8) are scratch of ``yb``'s shape. ``taps``
    (``(fh*fw,) + yb.shape``, numpy): the window elements are first copied there (one strided
    copy each), so that every comparison and maximum runs on contiguous operands, which numpy
    vectorises (on the strided views it does not: 2.5 vs 1.4 ms per 32x256x256 image)."""
    def strided(u, v):
        return xb[:, :, u:u + fh * (Ho - 1) + 1:fh, v:v + fw * (Wo - 1) + 1:fw]

    if taps is not None:
        for u in range(fh):
            for v in range(fw):
                taps[u * fw + v] = strided(u, v)

    def tap(u, v):
        return strided(u, v) if taps is None else taps[u * fw + v]

    mb = m.view("bool")
    for u in range(fh):
        val, idx = (yb, ab) if u == 0 else (r, ri)
        if fw == 1:
            val[...] = tap(u, 0)
            idx[...] = 0
        else:   # columns 0 and 1: the index is the mask itself
            xp.greater(tap(u, 1), tap(u, 0), out=idx.view("bool"))
            xp.maximum(tap(u, 0), tap(u, 1), out=val)
        for v in range(2, fw):
            xp.greater(tap(u, v), val, out=mb)          # strictly: the first maximum stays
            xp.maximum(val, tap(u, v), out=val)
            xp.subtract(v, idx, out=t)
            t *= m
            idx += t
        if u == 0:
            continue
        xp.greater(r, yb, out=mb)                       # strictly: the earlier row wins ties
        xp.maximum(yb, r, out=yb)
        xp.add(ri, u * fw, out=t)
        t -= ab
        t *= m
        ab += t


def maxpool_bprop(dy, argmax, x_shape, fshape, stride, out=None, work=None):
    """Adjoint of :func:`maxpool_fprop`: every covered pixel is written exactly once
    (``dx[..., u::fh, v::fw] = dy * (argmax == u*fw + v)``), block by block as the forward."""
    xp = get_array_module(dy)
    B, C, Ho, Wo = dy.shape
    (fh, fw), (sy, sx) = fshape, stride
    dx = out if out is not None else xp.empty(tuple(x_shape), dtype=dy.dtype)
    blocks = _nchw_blocks(x_shape, dy.dtype.itemsize, xp)
    if not blocks:   # no images: nothing to spread
        return dx
    nb = max(b.stop - b.start for b, _ in blocks)
    nc = max(c.stop - c.start for _, c in blocks)

    def run(share):
        s, mine = share
        mask = scratch(work, f"poolmask{s}", (nb, nc, Ho, Wo), "bool", like=dy)
        for bs, cs in mine:
            e, dxb, dyb, ab = mask[:bs.stop - bs.start, :cs.stop - cs.start], dx[bs, cs], dy[bs, cs], argmax[bs, cs]
            if x_shape[2] != sy * Ho or x_shape[3] != sx * Wo:   # rows / cols no window reads
                dxb[:, :, sy * Ho:, :] = 0
                dxb[:, :, :, sx * Wo:] = 0
            for k, (_, (rows, cols)) in enumerate(tap_slices((Ho, Wo), fshape, stride)):
                xp.equal(ab, k, out=e)
                xp.multiply(dyb, e, out=dxb[:, :, rows, cols])

    parallel_map(run, _block_shares(blocks, xp), xp)
    return dx
