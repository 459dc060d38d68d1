"""Global average pooling over all pixels of every channel, exact on tiles.

``x (N, C, h, w)`` is a tile (or the whole image: one tile) of a global ``(N, C, H, W)`` tensor;
the output is ``(N, C)``, the mean over the GLOBAL ``H*W`` pixels. Forward and backward::

    s = gap_partial(x)                  # (N, C): sum over this tile's pixels
    (Allreduce s over the tiles)        # spatial ranks only: every rank has whole-image sums
    y = gap_finish(s, H * W)            # (N, C) = s / (H*W)
    dx = gap_bprop(dy, (h, w), H * W)   # (N, C, h, w) = dy / (H*W) on every pixel of the tile

:func:`global_avg_pool_fprop` / :func:`global_avg_pool_bprop` are the one-tile case. The sums
keep ``x``'s dtype (float32 sums over up to ~1e6 pixels stay well within tolerance; pass
``dtype="float64"`` to accumulate in float64).
"""
from ..backend import get_array_module
from ..errors import GeometryError


def _check4(x, what):
    if x.ndim != 4:
        raise GeometryError(f"global average pooling: {what} must be (N, C, h, w), got shape {tuple(x.shape)}")


def gap_partial(x, dtype=None, out=None):
    """``(N, C)`` sums of ``x (N, C, h, w)`` over its pixels (in ``dtype``, default ``x``'s)."""
    _check4(x, "x")
    xp = get_array_module(x)
    return xp.sum(x, axis=(2, 3), dtype=dtype or x.dtype, out=out)


def gap_finish(sums, count, dtype=None):
    """``sums / count`` (the global pixel count ``H*W``), in ``dtype`` (default ``sums``')."""
    y = sums / count
    return y if dtype is None else y.astype(dtype, copy=False)


def gap_bprop(dy, tile_hw, count, out=None):
    """``dx (N, C, h, w)`` for the tile of ``tile_hw = (h, w)`` pixels: ``dy[:, :, None, None] /
    count`` (every pixel of the global image contributes ``1/count`` of its mean). Into ``out``
    if given."""
    xp = get_array_module(dy)
    N, C = dy.shape
    h, w = tile_hw
    if out is None:
        out = xp.empty((N, C, h, w), dtype=dy.dtype)
    out[...] = (dy / count)[:, :, None, None]
    return out


def global_avg_pool_fprop(x):
    """``y (N, C)``: the mean of ``x (N, C, H, W)`` over its pixels (a whole image)."""
    _check4(x, "x")
    return gap_finish(gap_partial(x), x.shape[2] * x.shape[3])


def global_avg_pool_bprop(dy, x_shape, out=None):
    """``dx (N, C, H, W)`` of :func:`global_avg_pool_fprop` given ``dy (N, C)``."""
    H, W = x_shape[2:]
    return gap_bprop(dy, (H, W), H * W, out=out)
