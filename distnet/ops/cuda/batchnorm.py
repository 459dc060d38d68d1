"""Batch normalisation's elementwise passes in one launch each: the forward normalisation
(``xhat`` and ``y`` together) and the training-mode input gradient.

The array-module code of :mod:`distnet.ops.batchnorm` makes about ten launches for each (casts
and reshapes of the per-channel vectors, then one per arithmetic step over the activations).
Here the per-channel vectors are cast once (tiny arrays) and one thread per element does the
arithmetic in the array code's order and roundings, so the results are its bits. The arrays
may be NCHW or CHWN (batch innermost) views: each thread walks the elements in the memory order
of ``x`` and indexes every array through its own strides.
"""
from .launch import Kernel, element_strides, strided

# The parameters after each kernel's own (x's four axes in memory order, the channel axis's
# position, the element strides of x and of two more arrays) and the loop that finds, for element
# e, the arrays' offsets (ox, o1, o2) and the channel c.
_LAYOUT = r"""
        const long long d0, const long long d1, const long long d2, const long long d3,
        const long long caxis,
        const long long x0, const long long x1, const long long x2, const long long x3,
        const long long y0, const long long y1, const long long y2, const long long y3,
        const long long h0, const long long h1, const long long h2, const long long h3) {
    const long long dims[4] = {d0, d1, d2, d3};
    const long long sx[4] = {x0, x1, x2, x3}, s1[4] = {y0, y1, y2, y3}, s2[4] = {h0, h1, h2, h3};
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)blockDim.x * gridDim.x) {
    // element e of x's memory order -> offsets of the arrays and the channel
    long long r = e, ox = 0, o1 = 0, o2 = 0, c = 0;
    for (int k = 3; k >= 0; --k) {
        const long long q = r % dims[k]; r /= dims[k];
        ox += q * sx[k]; o1 += q * s1[k]; o2 += q * s2[k];
        if (k == caxis) c = q;
    }
"""

FPROP = Kernel("distnet_bn_fprop", r"""
extern "C" __global__ void distnet_bn_fprop(
        const long long n, const T* x, T* y, T* xhat, const T* mean, const T* inv_std,
        const T* gamma, const T* beta,
""" + _LAYOUT + r"""
        T xh = x[ox] - mean[c];
        xh = xh * inv_std[c];
        T out = xh * gamma[c];
        out = out + beta[c];
        xhat[o2] = xh;
        y[o1] = out;
    }
}
""")

BPROP_DX = Kernel("distnet_bn_bprop_dx", r"""
extern "C" __global__ void distnet_bn_bprop_dx(
        const long long n, const T* dy, T* dx, const T* xhat, const T* mdy, const T* mdyx,
        const T* scale, const long long dy_first,
""" + _LAYOUT + r"""
        const T t = xhat[o2] * mdyx[c];
        T d = dy[ox];
        // the array code subtracts in this order when dx is dy itself, the other way otherwise
        if (dy_first) { d = d - mdy[c]; d = d - t; }
        else { d = d - t; d = d - mdy[c]; }
        dx[o1] = d * scale[c];
    }
}
""")


def mergeable(a):
    """Whether the kernels read ``a``: up to four axes, or a volume ``(N, C, D, H, W)`` whose
    depth and row axes merge into one (``D`` steps of ``H`` rows: NCDHW and batch-innermost
    memory), read as ``(N, C, D*H, W)``."""
    if a.ndim <= 4:
        return True
    st = element_strides(a)
    return a.ndim == 5 and (a.shape[2] == 1 or a.shape[3] == 1 or st[2] == a.shape[3] * st[3])


def _four(a):
    """``a``'s shape and element strides as four axes (``(N, C)`` as ``(N, C, 1, 1)``; a volume
    with its depth and row axes merged, :func:`mergeable`)."""
    shape, st = tuple(a.shape), tuple(element_strides(a))
    if a.ndim == 5:
        # a length-1 axis takes the other's stride: the merged axis steps like the longer one
        step = st[3] if a.shape[3] > 1 else st[2]
        shape, st = shape[:2] + (shape[2] * shape[3], shape[4]), st[:2] + (step, st[4])
    return (shape + (1, 1))[:4], (st + (0, 0))[:4]


def _layout(x, *others):
    """``(dims, caxis, strides...)``: ``x``'s four axes (an ``(N, C)`` array as ``(N, C, 1, 1)``,
    a volume as ``(N, C, D*H, W)``) in its memory order (largest stride first, so consecutive
    threads touch consecutive addresses of ``x``), the position of the channel axis among them,
    and every array's element strides in that axis order."""
    four = _four
    shape, sx = four(x)
    order = sorted(range(4), key=lambda k: (-abs(sx[k]), k))
    out = [tuple(shape[k] for k in order), order.index(1)]
    for a in (x,) + others:
        s = four(a)[1]
        out.append(tuple(s[k] for k in order))
    return out


def bn_fprop(x, mean, inv_std, gamma, beta, y, xhat):
    """``xhat = (x - mean) * inv_std``, ``y = xhat * gamma + beta`` into ``y`` and ``xhat``
    (shaped like ``x (N, C[, H, W])``, any strides); the ``(C,)`` vectors contiguous, in ``x``'s
    dtype."""
    dims, caxis, sx, sy, sh = _layout(x, y, xhat)
    FPROP(x.size, strided(x), strided(y), strided(xhat), mean, inv_std, gamma, beta, *dims, caxis,
          *sx, *sy, *sh)


def bn_bprop_dx(dy, xhat, mdy, mdyx, scale, dx):
    """``dx = (dy - xhat * mdyx - mdy) * scale`` (subtracting ``mdy`` first when ``dx`` is
    ``dy``, as the array code does) into ``dx``; ``(C,)`` vectors in ``dy``'s dtype."""
    dims, caxis, sx, sy, sh = _layout(dy, dx, xhat)
    BPROP_DX(dy.size, strided(dy), strided(dx), strided(xhat), mdy, mdyx, scale, int(dx is dy),
             *dims, caxis, *sx, *sy, *sh)
