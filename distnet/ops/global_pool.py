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
from math import prod

from ..backend import get_array_module
from ..errors import GeometryError


def _check4(x, what):
    if not 3 <= x.ndim <= 5:
        raise GeometryError(f"global average pooling: {what} must be (N, C, h, w) (or (N, C, *s): "
                            f"1 to 3 spatial axes), got shape {tuple(x.shape)}")


def gap_partial(x, dtype=None, out=None):
    """``(N, C)`` sums of ``x (N, C, h, w)`` over its pixels (in ``dtype``, default ``x``'s)."""
    _check4(x, "x")
    xp = get_array_module(x)
    return xp.sum(x, axis=tuple(range(2, x.ndim)), dtype=dtype or x.dtype, out=out)


def gap_finish(sums, count, dtype=None):
    """``sums / count`` (the global pixel count ``H*W``), in ``dtype`` (default ``sums``')."""
    y = sums / count
    return y if dtype is None else y.astype(dtype, copy=False)


def gap_bprop(dy, tile_hw, count, out=None):
    """``dx (N, C, h, w)`` for the tile of ``tile_hw = (h, w)`` pixels: ``dy[:, :, None, None] /
    count`` (every pixel of the global image contributes ``1/count`` of its mean). Into ``out``
    if given."""
    xp = get_array_module(dy)
    if out is None:
        out = xp.empty(tuple(dy.shape) + tuple(tile_hw), dtype=dy.dtype)
    out[...] = (dy / count)[(Ellipsis,) + (None,) * len(tile_hw)]
    return out


def global_avg_pool_fprop(x):
    """``y (N, C)``: the mean of ``x (N, C, H, W)`` over its pixels (a whole image)."""
    _check4(x, "x")
    return gap_finish(gap_partial(x), prod(x.shape[2:]))


def global_avg_pool_bprop(dy, x_shape, out=None):
    """``dx (N, C, H, W)`` of :func:`global_avg_pool_fprop` given ``dy (N, C)``."""
    return gap_bprop(dy, tuple(x_shape[2:]), prod(x_shape[2:]), out=out)
