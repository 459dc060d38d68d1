"""The geometry of a conv call, shared by every algorithm: argument checks, padding, the crop of
the input gradient."""
from ...errors import GeometryError
from ..parallel import copyto as pcopyto
from ..windows import output_shape


def check(x, w, stride, pad=None):
    """Validate the shapes of a conv call; return ``(Ho, Wo)``."""
    if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1]:
        raise GeometryError(f"conv2d: x {x.shape} (B,C,H,W) and w {w.shape} (K,C,fh,fw) do not match")
    hw = padded_hw(x.shape, pad)
    Ho, Wo = output_shape(hw, w.shape[2:], stride)
    if Ho < 1 or Wo < 1 or min(stride) < 1:
        raise GeometryError(f"conv2d: filter {tuple(w.shape[2:])} with stride {tuple(stride)} "
                            f"gives no output on an input of {tuple(hw)}")
    return Ho, Wo


def norm_pad(pad):
    """``pad = ((top, bottom), (left, right))`` as ints, or None for no padding."""
    if pad is None:
        return None
    pad = tuple(tuple(int(v) for v in p) for p in pad)
    return None if pad == ((0, 0), (0, 0)) else pad


def padded_hw(x_shape, pad):
    """``(H, W)`` of an input of ``x_shape (B, C, H, W)`` after the padding ``pad``."""
    if pad is None:
        return tuple(x_shape[2:])
    (pt, pb), (pl, pr) = pad
    return (x_shape[2] + pt + pb, x_shape[3] + pl + pr)


def crop_into(dx, crop, dx_out, xp):
    """``dx (B, C, H, W)`` without ``crop = ((top, bottom), (left, right))``, copied into
    ``dx_out`` (made C-contiguous when None), by channel shares on the kernel threads."""
    (ct, cb), (cl, cr) = crop
    H, W = dx.shape[2:]
    dx = dx[:, :, ct:H - cb, cl:W - cr]
    if dx_out is None:
        dx_out = xp.empty(dx.shape, dtype=dx.dtype)
    pcopyto(dx_out, dx, axis=1)
    return dx_out


def keeps_all(crop):
    """Whether ``crop`` removes nothing."""
    return crop == ((0, 0), (0, 0))
