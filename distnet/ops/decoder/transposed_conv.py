"""Transposed convolution (PyTorch's ``ConvTranspose``, no dilation, no groups, no bias) for any
number of spatial axes: the adjoint of a convolution.

``x (B, C, *n)``, ``w (C, K, *f)`` (PyTorch's layout: input maps first); input ``i`` and tap
``u`` add ``w[c, k, u] * x[b, c, i]`` into output ``o = i * s + u - pad_lo`` of ``y (B, K,
*out)``, ``out = (n - 1) * s + f - pad_lo - pad_hi + output_padding``. ``w`` read as
``(C, K, *f)`` is the weight of the convolution from ``K`` maps to ``C`` whose adjoint this is:

* forward = that convolution's data gradient: one GEMM ``w2.T @ x`` and the fold
  (:func:`distnet.ops.windows.fold`, one launch on a device) give the *full* output
  (``(n - 1) * s + f`` per axis, every tap of every input), which is then cropped to the outputs
  asked for (:func:`.crop.crop`: the padding, or output padding past the full output);
* data gradient = that convolution's forward, on the gradient put back in the full output
  (:func:`.crop.crop_bprop`);
* weight gradient = that convolution's weight gradient with ``x`` as its output gradient.

Both gradients are the conv package's (:mod:`distnet.ops.conv`), for any number of axes: it
reads a ``dy`` that is a view (a skip concatenation hands its inputs channel slices of its
gradient) as fast as a contiguous one, where a tensor product over the patch view of such a
slice copies it element by element (3-D, 16 maps at 64^3: 7x slower).

A :class:`~.section.Section` (default: the whole input) places the chunk ``x`` in the global
input and says which global outputs to compute; inputs outside the image are zeros in the chunk.
"""
from ...backend import get_array_module
from ...errors import GeometryError
from .. import conv
from ..parallel import matmul as pmatmul
from ..windows import fold, from_cols
from .crop import crop, crop_bprop
from .section import Section


def _pairs(padding, nd):
    """``padding`` as ``nd`` pairs ``(lo, hi)`` (an int per axis is symmetric; None: 0)."""
    if padding is None:
        return ((0, 0),) * nd
    return tuple((int(p), int(p)) if isinstance(p, int) else (int(p[0]), int(p[1])) for p in padding)


def output_shape(n, fshape, stride, padding=None, output_padding=None):
    """Global output shape ``(n - 1) * s + f - pad_lo - pad_hi + output_padding`` per axis."""
    nd = len(n)
    op = output_padding or (0,) * nd
    return tuple((a - 1) * s + f - lo - hi + p
                 for a, f, s, (lo, hi), p in zip(n, fshape, stride, _pairs(padding, nd), op))


def _margins(x_shape, w_shape, stride, padding, output_padding, section):
    """``(section, lo, hi)``: the crop of the chunk's full output to the section's outputs."""
    nd = len(x_shape) - 2
    if len(w_shape) != nd + 2 or x_shape[1] != w_shape[0] or len(stride) != nd:
        raise GeometryError(f"transposed convolution: x {tuple(x_shape)} (B, C, ...), w {tuple(w_shape)} "
                            f"(C, K, ...) and stride {tuple(stride)} do not match")
    pads = _pairs(padding, nd)
    if section is None:
        n = tuple(x_shape[2:])
        section = Section.whole(n, output_shape(n, w_shape[2:], stride, pads, output_padding))
    section.check(x_shape, "transposed convolution")
    lo, hi = [], []
    for a, n, f, s, (p, _), o0, m in zip(section.in_start, x_shape[2:], w_shape[2:], stride, pads,
                                         section.out_start, section.out_shape):
        lo.append(o0 - (a * s - p))                         # the full output starts at a*s - p
        hi.append((n - 1) * s + f - lo[-1] - m)
    return section, tuple(lo), tuple(hi)


def _full(x, w, stride):
    """Every tap of every input: ``(B, K, *((n - 1) * s + f))``, one GEMM and the fold."""
    xp = get_array_module(x, w)
    B, C, *n = x.shape
    K, f = w.shape[1], tuple(w.shape[2:])
    nd = len(n)
    xcols = xp.ascontiguousarray(xp.moveaxis(x, 0, -1)).reshape(C, -1)        # (C, *n, B)
    cols = pmatmul(w.reshape(C, -1).T, xcols)                                   # (K*F, N*B)
    cols = cols.reshape((K,) + f + tuple(n) + (B,)).transpose(from_cols(nd))   # (B, K, *n, *f)
    full = tuple((a - 1) * s + k for a, s, k in zip(n, stride, f))
    return fold(cols, (B, K) + full, stride)


def conv_transpose_fprop(x, w, stride, padding=None, output_padding=None, section=None):
    """``y (B, K, *out)``: the transposed convolution of ``x (B, C, *n)`` with ``w (C, K, *f)``
    at ``stride`` (one per axis), ``padding`` (an int or a pair ``(lo, hi)`` per axis: outputs
    dropped at each end) and ``output_padding`` (outputs added at the end); for the outputs of
    ``section`` if given (its ``out_shape``; ``output_padding`` is then the section's business)."""
    xp = get_array_module(x, w)
    section, lo, hi = _margins(x.shape, w.shape, stride, padding, output_padding, section)
    if 0 in x.shape[2:]:                   # no input reaches these outputs
        return xp.zeros((x.shape[0], w.shape[1]) + tuple(section.out_shape), dtype=x.dtype)
    return crop(_full(x, w, stride), lo, hi)


def conv_transpose_bprop(x, w, dy, stride, padding=None, output_padding=None, section=None,
                         need_dx=True):
    """Gradients of :func:`conv_transpose_fprop` given ``dy (B, K, *out)``: ``(dx, dw)``,
    ``dx (B, C, *n)`` (None unless ``need_dx``) and ``dw (C, K, *f)`` (a plain sum over the
    batch and positions)."""
    xp = get_array_module(x, w, dy)
    section, lo, hi = _margins(x.shape, w.shape, stride, padding, output_padding, section)
    if 0 in x.shape[2:]:
        return (xp.zeros(x.shape, dtype=x.dtype) if need_dx else None), xp.zeros(w.shape, dtype=w.dtype)
    dfull = crop_bprop(dy, lo, hi)         # (B, K, *((n - 1) * s + f))
    dw = conv.conv_bprop(dfull, w, x, stride, need_dx=False)[1]
    return (conv.conv_fprop(dfull, w, stride) if need_dx else None), dw
