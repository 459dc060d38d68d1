"""Local contrast normalisation kernels: the weighted local mean, its adjoint and the divisive
stage's per-pixel factors, one launch each.

:func:`distnet.ops.lcn.lcn_mean` adds one filter tap's slab at a time (``fh*fw`` array
operations, 81 for neon's 9x9 filter, and as many again for the adjoint). Here:

* :data:`MEAN`: one thread per output pixel ``(b, r, q)`` sums its taps filter row by row, each
  tap's channel sum first when every channel shares one map (numpy sums the channels once, then
  the taps), else each tap's weighted channel sum: the order of the numpy code. With
  ``divisor`` it reads squares and returns neon's divisor ``sqrt(mean)`` (1 where 0), so the
  divisive forward needs no squared copy of its chunk, no mask and no host wait.
* :data:`MEAN_ADJOINT`: a gather, one thread per chunk element ``(b, c, y, x)``, adding the
  outputs whose windows read it in the order the numpy code scatters them (filter row by row),
  optionally times a factor array (the divisive backward's ``* s_chunk``).
* :data:`DIVISIVE_GAIN`: one thread per pixel, ``-(sum_c e*s) / d^3``: the divisive backward's
  per-pixel weight of the path through ``d``.

Compiled without fused multiply-adds (:data:`~distnet.ops.cuda.launch.COMPILE_OPTIONS`), with
CUDA's IEEE-rounded square root and division, the kernels give the numpy code's bits, float64
and float32.
"""
import numpy as np

from ...backend import get_array_module
from .launch import Kernel, element_strides, source, strided, strides_of
from .windows import covering, item

#: Work item i of a (B, 1, h, wd) map: its batch and pixel.
_PIXEL = item("i", ("r", "q"), ("h", "wd"), "b")

MEAN = Kernel("distnet_lcn_mean", source("distnet_lcn_mean", (
    "T* m", "const T* x", "const T* w", "C", "h", "wd", "fh", "fw", "shared", "divisor")
    + strides_of("x"),
    (_PIXEL, r"""
        const T* window = x + b * xb + r * xh + q * xw;
        T acc = 0;
        for (long long a = 0; a < fh; ++a) {
            for (long long k = 0; k < fw; ++k) {
                const T* p = window + a * xh + k * xw;
                T tap = 0;
                for (long long c = 0; c < C; ++c) {
                    const T v = divisor ? p[c * xc] * p[c * xc] : p[c * xc];
                    // one map: the channel sum, weighted once; else each channel's own weight
                    tap += shared ? v : w[(c * fh + a) * fw + k] * v;
                }
                acc += shared ? w[a * fw + k] * tap : tap;
            }
        }
        if (divisor) {
            acc = sqrt(acc);
            if (acc == 0) acc = 1;      // neon's rule: no epsilon, 1 exactly where the mean is 0
        }
        m[i] = acc;""")))

# The output pixels (r, q) whose window reads chunk pixel (y, x) through tap (a, k), stride 1.
MEAN_ADJOINT = Kernel("distnet_lcn_mean_adjoint", source("distnet_lcn_mean_adjoint", (
    "T* out", "const T* gm", "const T* w", "const T* factor", "C", "Hc", "Wc", "fh", "fw", "shared",
    "times"), (
        item("i", ("y", "x"), ("Hc", "Wc"), "b", "c"),
        "const long long h = Hc - fh + 1, wd = Wc - fw + 1;",
        "const T* g = gm + b * h * wd;",
        "const T* wmap = w + (shared ? 0 : c) * fh * fw;",
        "T acc = 0;",
        covering("acc += wmap[a * fw + k] * g[r * wd + q];", ("y", "x"), ("fh", "fw"), ("1", "1"),
                 ("h", "wd"), ("r", "q"), ("a", "k")),
        "out[i] = times ? acc * factor[i] : acc;")))

DIVISIVE_GAIN = Kernel("distnet_lcn_divisive_gain", source("distnet_lcn_divisive_gain", (
    "T* gm", "const T* e", "const T* s", "const T* d", "C", "h", "wd")
    + strides_of("e") + strides_of("s"),
    (_PIXEL, r"""
        const T* ep = e + b * eb + r * eh + q * ew;
        const T* sp = s + b * sb + r * sh + q * sw;
        T acc = 0;
        for (long long c = 0; c < C; ++c) acc += ep[c * ec] * sp[c * sc];
        const T di = d[i];
        gm[i] = -(acc / (di * di * di));""")))


def _contiguous(xp, a, dtype):
    """``a`` as a C-contiguous ``xp`` array of ``dtype``; no device call when it is one already
    (a small host filter, which the tap-by-tap code accepts too, is copied to the device)."""
    if get_array_module(a) is not xp:
        return xp.asarray(np.ascontiguousarray(a, dtype=dtype))
    if a.dtype == dtype and a.flags.c_contiguous:
        return a
    return xp.ascontiguousarray(a, dtype=dtype)


def _cast(a, dtype):
    return a if a.dtype == dtype else a.astype(dtype)


def mean(w, x_chunk, h, wd, divisor=False):
    """:func:`distnet.ops.lcn.lcn_mean` of ``x_chunk (B, C, Hc, Wc)`` (any strides) with ``w
    (1 or C, fh, fw)``: ``(B, 1, h, wd)``, ``h = Hc - fh + 1``, ``wd = Wc - fw + 1`` (checked by
    the caller), in one launch. ``divisor``: the mean of ``x_chunk**2``, then ``sqrt``, with 1
    where that is 0 (the divisive stage's ``d``)."""
    xp = get_array_module(x_chunk)
    dtype = np.result_type(w.dtype, x_chunk.dtype)
    w, x_chunk = _contiguous(xp, w, dtype), _cast(x_chunk, dtype)
    B, C = x_chunk.shape[:2]
    fh, fw = w.shape[1:]
    m = xp.empty((B, 1, h, wd), dtype=dtype)
    MEAN(m.size, m, strided(x_chunk), w, C, h, wd, fh, fw, int(w.shape[0] == 1), int(divisor),
         *element_strides(x_chunk))
    return m


def mean_adjoint(w, gm, chunk_shape, factor=None):
    """:func:`distnet.ops.lcn.lcn_mean_adjoint` in one launch: ``gm (B, 1, h, wd)`` -> the chunk
    gradient ``chunk_shape = (B, C, Hc, Wc)``, times ``factor`` (an array of that shape) if
    given."""
    xp = get_array_module(gm)
    dtype = np.result_type(w.dtype, gm.dtype)
    w, gm = _contiguous(xp, w, dtype), _contiguous(xp, gm, dtype)
    out = xp.empty(tuple(chunk_shape), dtype=dtype)
    if factor is not None:
        factor = _contiguous(xp, factor, dtype)
    B, C, Hc, Wc = out.shape
    fh, fw = w.shape[1:]
    MEAN_ADJOINT(out.size, out, gm, w, out if factor is None else factor, C, Hc, Wc, fh, fw,
                 int(w.shape[0] == 1), int(factor is not None))
    return out


def divisive_gain(e, s_tile, d):
    """``-(sum_c e * s_tile) / d**3`` ``(B, 1, h, wd)`` for ``e``, ``s_tile (B, C, h, wd)`` (any
    strides) and ``d (B, 1, h, wd)``, in one launch."""
    xp = get_array_module(e)
    dtype = np.result_type(e.dtype, s_tile.dtype, d.dtype)
    e, s_tile, d = _cast(e, dtype), _cast(s_tile, dtype), _contiguous(xp, d, dtype)
    B, C, h, wd = e.shape
    gm = xp.empty((B, 1, h, wd), dtype=dtype)
    DIVISIVE_GAIN(gm.size, gm, strided(e), strided(s_tile), d, C, h, wd, *element_strides(e),
                  *element_strides(s_tile))
    return gm
