"""The geometry of a conv call, shared by every algorithm: argument checks, padding, the crop of
the input gradient. Any number of spatial axes: ``x (B, C, *spatial)``, ``w (K, C, *filter)``,
``stride`` and ``dilation`` one int per axis, ``pad`` / ``crop`` one ``(before, after)`` pair
per axis."""
from ...errors import GeometryError
from ..parallel import copyto as pcopyto
from ..windows import output_shape


def dilation_of(dilation, nd):
    """``dilation`` as an int per axis (None: 1 on every axis)."""
    return (1,) * nd if dilation is None else tuple(int(d) for d in dilation)


def check(x, w, stride, pad=None, dilation=None):
    """Validate the shapes of a conv call; return the output's spatial shape (``(Ho, Wo)`` in
    2-D)."""
    nd = x.ndim - 2
    if not 1 <= nd <= 3 or w.ndim != x.ndim or x.shape[1] != w.shape[1] or len(stride) != nd:
        raise GeometryError(f"conv: x {x.shape} (B, C, *spatial) and w {w.shape} (K, C, *filter) do not "
                            f"match (stride {tuple(stride)})")
    spatial = padded_shape(x.shape, pad)
    out = output_shape(spatial, w.shape[2:], stride, dilation)
    if min(out) < 1 or min(stride) < 1 or min(dilation_of(dilation, nd)) < 1:
        raise GeometryError(f"conv: filter {tuple(w.shape[2:])} with stride {tuple(stride)} "
                            f"gives no output on an input of {tuple(spatial)}")
    return out


def norm_pad(pad):
    """``pad = ((before, after), ...)`` (one pair per spatial axis; in 2-D ``((top, bottom),
    (left, right))``) as ints, or None for no padding."""
    if pad is None:
        return None
    pad = tuple(tuple(int(v) for v in p) for p in pad)
    return None if all(p == (0, 0) for p in pad) else pad


def padded_shape(x_shape, pad):
    """The spatial shape of an input of ``x_shape (B, C, *spatial)`` after the padding ``pad``."""
    if pad is None:
        return tuple(x_shape[2:])
    return tuple(n + lo + hi for n, (lo, hi) in zip(x_shape[2:], pad))


def crop_into(dx, crop, dx_out, xp):
    """``dx (B, C, *spatial)`` without ``crop = ((before, after), ...)``, copied into
    ``dx_out`` (made C-contiguous when None), by channel shares on the kernel threads."""
    dx = dx[(slice(None), slice(None)) + tuple(slice(lo, n - hi) for n, (lo, hi) in zip(dx.shape[2:], crop))]
    if dx_out is None:
        dx_out = xp.empty(dx.shape, dtype=dx.dtype)
    pcopyto(dx_out, dx, axis=1)
    return dx_out


def keeps_all(crop):
    """Whether ``crop`` removes nothing."""
    return all(tuple(c) == (0, 0) for c in crop)
