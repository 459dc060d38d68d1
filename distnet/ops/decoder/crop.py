"""Cropping: a box of the input, zero where the box reaches past it; and its adjoint."""
from ...backend import get_array_module
from ...errors import GeometryError


def crop(x, lo, hi):
    """``x (B, C, *n)`` without ``lo[d]`` positions at the start and ``hi[d]`` at the end of
    every spatial axis ``d``: ``y[..., o] = x[..., o + lo]``, shape ``(B, C, *(n - lo - hi))``.
    A negative ``lo`` or ``hi`` pads with zeros instead. Returns a new C-contiguous array."""
    xp = get_array_module(x)
    n = x.shape[2:]
    if not len(n) == len(lo) == len(hi):
        raise GeometryError(f"crop: {len(lo)} and {len(hi)} margins for an input of shape {tuple(x.shape)}")
    out_shape = tuple(m - a - b for m, a, b in zip(n, lo, hi))
    if min(out_shape, default=1) < 0:
        raise GeometryError(f"crop: margins {tuple(lo)} and {tuple(hi)} leave nothing of {tuple(x.shape)}")
    starts = [min(max(a, 0), m) for m, a in zip(n, lo)]
    src = tuple(slice(s, max(s, m - max(b, 0))) for s, m, b in zip(starts, n, hi))
    if min(lo, default=0) >= 0 and min(hi, default=0) >= 0:
        return xp.ascontiguousarray(x[(Ellipsis,) + src])
    out = xp.zeros(tuple(x.shape[:2]) + out_shape, dtype=x.dtype)
    dst = tuple(slice(max(-a, 0), max(-a, 0) + s.stop - s.start) for a, s in zip(lo, src))
    if all(s.stop > s.start for s in src):
        out[(Ellipsis,) + dst] = x[(Ellipsis,) + src]
    return out


def crop_bprop(dy, lo, hi):
    """Adjoint of :func:`crop` with the margins ``lo``, ``hi``: the gradient ``dy`` put back in
    place, zero where the crop dropped positions (and the padding's gradient dropped): the crop
    with the opposite margins."""
    return crop(dy, tuple(-a for a in lo), tuple(-b for b in hi))
