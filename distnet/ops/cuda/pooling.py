"""Pooling kernels: max (with its argmax), average and L2 pooling, forward and backward, one
launch each.

:mod:`distnet.ops.pooling` loops over the ``fh*fw`` window offsets with a few array operations
per offset (and copies between NCHW and batch-innermost memory around them). Here:

* a **forward** thread computes one output element ``(b, c, i, j)``, scanning its window row by
  row in the numpy code's order: max pooling keeps the first maximum (a later value replaces it
  only if strictly greater; a NaN becomes the maximum without moving the index, as numpy's
  ``maximum``/``greater`` pair does); average and L2 pooling add the window's terms in order;
* a **backward** thread computes one input element ``(b, c, y, x)``, gathering the outputs whose
  windows cover it (for max pooling: the terms ``dy * (argmax == its offset)``) in increasing
  offset order ``u*fw + v``, the order of the numpy code's tap-by-tap adds, starting from 0.

The kernels are compiled without fused multiply-adds (:mod:`~distnet.ops.cuda.launch`), so every
product is rounded on its own, as numpy rounds it, and results (float32 and float64) equal the
numpy code's bit for bit. Arrays are read and written through their strides
(:func:`~distnet.ops.cuda.launch.strided`): NCHW, batch-innermost memory or a view of a larger
buffer, no copies. Shapes are ``(B, C, H, W)`` inputs and ``(B, C, Ho, Wo)`` outputs.
"""
import numpy as np

from .launch import Kernel, element_strides, source, strided, strides_of
from .windows import PLANE, covering, item

#: A thread's output element (b, c, i, j) or input element (b, c, py, px), in the array's memory
#: order (:func:`~distnet.ops.cuda.windows.item`).
_OUTPUT_ITEM = item("e", ("i", "j"), ("Ho", "Wo"), "b", "c", batch_inner="batch_inner")
_INPUT_ITEM = item("e", ("py", "px"), ("H", "W"), "b", "c", batch_inner="batch_inner")
_WINDOW = ("fh", "fw", "sy", "sx")


def _forward(name, arrays, scalars, body, strides="xy"):
    """A forward kernel: one thread per output element ``(b, c, i, j)`` of ``(B, C, Ho, Wo)``
    (its decoding, then ``body``), the window ``fh x fw`` at stride ``(sy, sx)``; the element
    strides of the arrays named by the letters of ``strides`` follow the ``scalars``."""
    params = arrays + ("B", "C", "Ho", "Wo") + _WINDOW + scalars + \
        tuple(n for a in strides for n in strides_of(a))
    return source(name, params, (_OUTPUT_ITEM, body), item="e")


def _backward(name, arrays, scalars, before, gather, after, strides, flat=None):
    """A backward kernel: one thread per input element ``(b, c, py, px)`` of ``(B, C, H, W)``;
    ``before``, then ``gather`` for every output window ``(i, j)`` covering it through tap
    ``(u, v)`` (``flat``: the name of the tap's index ``u*fw + v``), then ``after``."""
    params = arrays + ("B", "C", "H", "W", "Ho", "Wo") + _WINDOW + scalars + \
        tuple(n for a in strides for n in strides_of(a))
    loop = covering(gather, ("py", "px"), **PLANE, flat=flat)
    return source(name, params, (_INPUT_ITEM, before, loop, after), item="e")


_MAX_STEP = r"""
// One step of numpy's running maximum (greater, then maximum): a strictly greater value
// replaces the maximum and its index, so the first maximum stays; a NaN replaces the maximum
// but not the index (greater is false, maximum propagates NaN), and nothing replaces a NaN.
__device__ void distnet_max_step(T* m, long long* k, const T s, const long long ks) {
    if (s > *m) { *m = s; *k = ks; }
    else if (s != s) { *m = s; }
}
"""

_MAXPOOL_FPROP = _MAX_STEP + _forward("NAME", ("T* y", "IDX* arg", "const T* x"), (
    "y0", "y1", "x0", "x1", "const T lowest", "rows_first", "batch_inner"), r"""
        const T* base = x + b * xb + c * xc;
        T m = lowest;               // the window's maximum so far
        long long k = 0;            // the offset u*fw + v of its first occurrence
        for (long long u = 0; u < fh; ++u) {
            const long long py = i * sy + u;
            T r = lowest;           // rows_first: this row's maximum and its offset
            long long kr = u * fw;
            for (long long v = 0; v < fw; ++v) {
                const long long px = j * sx + v;
                // outside [y0, y1) x [x0, x1): padding, which never wins
                const T s = (py >= y0 && py < y1 && px >= x0 && px < x1) ? base[py * xh + px * xw]
                                                                         : lowest;
                if (rows_first) distnet_max_step(&r, &kr, s, u * fw + v);
                else distnet_max_step(&m, &k, s, u * fw + v);
            }
            // rows_first (the numpy code's large-plane order): row maxima, then the rows in order
            if (rows_first && u == 0) { m = r; k = kr; }
            else if (rows_first) distnet_max_step(&m, &k, r, kr);
        }
        y[b * yb + c * yc + i * yh + j * yw] = m;
        arg[b * ab + c * ac + i * ah + j * aw] = (IDX)k;""", strides="xya")

# Disjoint windows: the numpy code writes dy * mask (no sum); overlapping ones add up from 0.
_MAXPOOL_BPROP = _backward("NAME", ("T* dx", "const T* dy", "const IDX* arg"), ("batch_inner",), """
        const bool disjoint = sy >= fh && sx >= fw;
        const T* g = dy + b * gb + c * gc;
        const IDX* a = arg + b * ab + c * ac;
        T acc = 0;""", """
        const T t = g[i * gh + j * gw] * (T)(a[i * ah + j * aw] == k);
        acc = disjoint ? t : acc + t;""", """
        dx[b * xb + c * xc + py * xh + px * xw] = acc;""", "xga", flat="k")


def _indexed(template, name, idx_type):
    return Kernel(name, template.replace("NAME", name).replace("IDX", idx_type))


#: argmax dtype -> kernel (the argmax is uint8 for windows of up to 256 elements, else int32)
MAXPOOL_FPROP = {np.dtype(np.uint8): _indexed(_MAXPOOL_FPROP, "distnet_maxpool_fprop_u8", "unsigned char"),
                 np.dtype(np.int32): _indexed(_MAXPOOL_FPROP, "distnet_maxpool_fprop_i32", "int")}
MAXPOOL_BPROP = {np.dtype(np.uint8): _indexed(_MAXPOOL_BPROP, "distnet_maxpool_bprop_u8", "unsigned char"),
                 np.dtype(np.int32): _indexed(_MAXPOOL_BPROP, "distnet_maxpool_bprop_i32", "int")}

AVGPOOL_FPROP = Kernel("distnet_avgpool_fprop", _forward(
    "distnet_avgpool_fprop", ("T* y", "const T* x"), ("const T scale", "batch_inner"), r"""
        const T* w = x + b * xb + c * xc + i * sy * xh + j * sx * xw;
        T acc = w[0];               // the numpy code copies the first element, then adds
        for (long long u = 0; u < fh; ++u)
            for (long long v = 0; v < fw; ++v)
                if (u || v) acc += w[u * xh + v * xw];
        y[b * yb + c * yc + i * yh + j * yw] = acc * scale;"""))

AVGPOOL_BPROP = Kernel("distnet_avgpool_bprop", _backward(
    "distnet_avgpool_bprop", ("T* dx", "const T* dy"), ("const T scale", "batch_inner"), """
        const T* g = dy + b * gb + c * gc;
        T acc = 0;""", """
        acc += g[i * gh + j * gw] * scale;""", """
        dx[b * xb + c * xc + py * xh + px * xw] = acc;""", "xg"))

L2POOL_FPROP = Kernel("distnet_l2pool_fprop", _forward(
    "distnet_l2pool_fprop", ("T* y", "const T* x"), ("batch_inner",), r"""
        const T* w = x + b * xb + c * xc + i * sy * xh + j * sx * xw;
        T acc = 0;
        for (long long u = 0; u < fh; ++u)
            for (long long v = 0; v < fw; ++v) {
                const T s = w[u * xh + v * xw];
                acc += s * s;
            }
        y[b * yb + c * yc + i * yh + j * yw] = sqrt(acc);"""))

# The sum over the windows that read the pixel of dy / yhat (an all-zero window: no NaN).
L2POOL_BPROP = Kernel("distnet_l2pool_bprop", _backward(
    "distnet_l2pool_bprop", ("T* dx", "const T* x", "const T* y", "const T* dy"),
    ("batch_inner",), """
        const T* yo = y + b * yb + c * yc;
        const T* g = dy + b * gb + c * gc;
        T acc = 0;""", """
        const T yv = yo[i * yh + j * yw];
        acc += g[i * gh + j * gw] / (yv == 0 ? (T)1 : yv);""", """
        dx[b * ob + c * oc + py * oh + px * ow] = x[b * xb + c * xc + py * xh + px * xw] * acc;""",
    "oxyg"))


def _batch_inner(a):
    """Whether ``a (B, C, H, W)`` is walked batch innermost (its memory order)."""
    return int(a.strides[0] == a.itemsize and a.shape[0] > 1)


def maxpool_fprop(x, y, argmax, fshape, stride, inside, rows_first):
    """``y``, ``argmax`` ``(B, C, Ho, Wo)`` (any strides; ``argmax`` uint8 or int32) = the max of
    every window of ``x (B, C, H, W)`` (any strides) and the offset ``u*fw + v`` of its first
    maximum. ``inside = (y0, y1, x0, x1)``: positions of ``x`` outside it are padding, read as
    -inf (``x`` is not written). ``rows_first``: compare row maxima, as the numpy code's
    large-plane path does (it differs from the plain row-major scan only in which index a window
    holding NaN reports)."""
    B, C, Ho, Wo = y.shape
    MAXPOOL_FPROP[argmax.dtype](
        y.size, strided(y), strided(argmax), strided(x), B, C, Ho, Wo, *map(int, fshape),
        *map(int, stride), *map(int, inside), -float("inf"), int(rows_first), _batch_inner(y),
        *element_strides(x), *element_strides(y), *element_strides(argmax))
    return y, argmax


def maxpool_bprop(dy, argmax, dx, fshape, stride):
    """``dx (B, C, H, W)`` (any strides) = every ``dy (B, C, Ho, Wo)`` element sent to its
    window's argmax pixel (``argmax`` as :func:`maxpool_fprop` wrote it); overlapping windows add
    up; pixels no window picks get 0. Returns ``dx``."""
    B, C, H, W = dx.shape
    Ho, Wo = dy.shape[2:]
    MAXPOOL_BPROP[argmax.dtype](
        dx.size, strided(dx), strided(dy), strided(argmax), B, C, H, W, Ho, Wo, *map(int, fshape),
        *map(int, stride), _batch_inner(dx), *element_strides(dx), *element_strides(dy),
        *element_strides(argmax))
    return dx


def avgpool_fprop(x, y, fshape, stride):
    """``y (B, C, Ho, Wo)`` = the mean of every ``fh*fw`` window of ``x (B, C, H, W)`` (sum in
    row-major order, times ``1/(fh*fw)``). Returns ``y``."""
    B, C, Ho, Wo = y.shape
    fh, fw = map(int, fshape)
    AVGPOOL_FPROP(y.size, strided(y), strided(x), B, C, Ho, Wo, fh, fw, *map(int, stride),
                  1.0 / (fh * fw), _batch_inner(y), *element_strides(x), *element_strides(y))
    return y


def avgpool_bprop(dy, dx, fshape, stride):
    """``dx (B, C, H, W)`` = ``dy (B, C, Ho, Wo) / (fh*fw)`` summed over the windows covering each
    pixel. Returns ``dx``."""
    B, C, H, W = dx.shape
    Ho, Wo = dy.shape[2:]
    fh, fw = map(int, fshape)
    AVGPOOL_BPROP(dx.size, strided(dx), strided(dy), B, C, H, W, Ho, Wo, fh, fw, *map(int, stride),
                  1.0 / (fh * fw), _batch_inner(dx), *element_strides(dx), *element_strides(dy))
    return dx


def l2pool_fprop(x, y, fshape, stride):
    """``y (B, C, Ho, Wo)`` = ``sqrt`` of the sum of squares of every window of ``x``. Returns
    ``y``."""
    B, C, Ho, Wo = y.shape
    L2POOL_FPROP(y.size, strided(y), strided(x), B, C, Ho, Wo, *map(int, fshape), *map(int, stride),
                 _batch_inner(y), *element_strides(x), *element_strides(y))
    return y


def l2pool_bprop(x, y, dy, dx, fshape, stride):
    """``dx (B, C, H, W)`` = ``x`` times the sum, over the windows covering each pixel, of
    ``dy / yhat`` (``yhat = y``, or 1 where ``y == 0``). Returns ``dx``."""
    B, C, H, W = dx.shape
    Ho, Wo = dy.shape[2:]
    L2POOL_BPROP(dx.size, strided(dx), strided(x), strided(y), strided(dy), B, C, H, W, Ho, Wo,
                 *map(int, fshape), *map(int, stride), _batch_inner(dx), *element_strides(dx),
                 *element_strides(x), *element_strides(y), *element_strides(dy))
    return dx
