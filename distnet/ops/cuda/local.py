"""Locally connected ("local filtering") kernels: every product of :mod:`distnet.ops.local` in one
launch, without a patch matrix.

The array-module code gathers the windows into a ``(Ho*Wo, F, B)`` patch matrix (several copies
and transposes), runs one small GEMM per output position and transposes the result back, and
folds the data gradient tap by tap: about ten launches per product and a patch matrix as large
as the input times ``fh*fw``. An untied layer's products are small per position (``K x F``
times ``F x B``), so here each is one direct kernel, one thread per output element, reading the
input through its strides (a chunk view needs no copy):

* :func:`apply`: ``y[b,k,i,j] = sum_f w[k,i,j,f] * x[b, c, i*sy+u, j*sx+v]`` (``f = (c, u, v)``
  in C order, added in that order): the forward pass, and the decoder's ``dJ/dh``;
* :func:`weight_grad`: ``dw[k,i,j,f] = sum_b g[b,k,i,j] * x[b, c, i*sy+u, j*sx+v]`` (batch
  order): the weight gradients of the encoder and the decoder;
* :func:`adjoint`: ``dx[b,c,y,x] = sum_(u,v) sum_k w[k,i,j,(c,u,v)] * g[b,k,i,j]`` over the
  windows ``(i, j) = ((y-u)/sy, (x-v)/sx)`` that read the pixel, taps in ``(u, v)`` order, each
  tap's sum over ``k`` formed first (a gather: the numpy code's ``dcols`` then its fold): the
  data gradient and the decoder's forward pass;
* :func:`normalize_rows`: every filter row scaled to unit L2 norm, one thread per row.

The sums run in a fixed order, so float64 results equal the numpy path's GEMMs up to their
summation order (``distnet/testing/backends.py``'s ``AGREEMENT``).
"""
from ...backend import get_array_module
from .launch import Kernel, element_strides, source, strided, strides_of
from .windows import PLANE, covering, item

_WINDOW = ("fh", "fw", "sy", "sx")
_X, _G, _W = strides_of("x"), strides_of("g", "bkij"), strides_of("w", "kijf")

# x (B, C, H, W) and w (K, Ho, Wo, F) are strided views; y is contiguous (B, K, Ho, Wo).
APPLY = Kernel("distnet_local_apply", source("distnet_local_apply", (
    "T* y", "const T* x", "const T* w", "C", "K", "Ho", "Wo") + _WINDOW + _X + _W, r"""
        const long long j = e % Wo, i = (e / Wo) % Ho, k = (e / (Wo * Ho)) % K, b = e / (Wo * Ho * K);
        const T* wr = w + k * wk + i * wi + j * wj;
        const T* xr = x + b * xb + (i * sy) * xh + (j * sx) * xw;
        T acc = 0;
        long long f = 0;
        for (long long c = 0; c < C; ++c)
            for (long long u = 0; u < fh; ++u)
                for (long long v = 0; v < fw; ++v, ++f)
                    acc += wr[f * wf] * xr[c * xc + u * xh + v * xw];
        y[e] = acc;""", item="e"))

# x (B, C, H, W) and g (B, K, Ho, Wo) are strided views; dw is contiguous (K, Ho, Wo, F),
# F = C*fh*fw in (c, u, v) order.
WEIGHT_GRAD = Kernel("distnet_local_weight_grad", source("distnet_local_weight_grad", (
    "T* dw", "const T* x", "const T* g", "B", "C", "K", "Ho", "Wo") + _WINDOW + _X + _G, r"""
        const long long F = C * fh * fw;
        const long long f = e % F, j = (e / F) % Wo, i = (e / (F * Wo)) % Ho, k = e / (F * Wo * Ho);
        const long long v = f % fw, u = (f / fw) % fh, c = f / (fw * fh);
        const T* xr = x + c * xc + (i * sy + u) * xh + (j * sx + v) * xw;
        const T* gr = g + k * gk + i * gi + j * gj;
        T acc = 0;
        for (long long b = 0; b < B; ++b)
            acc += gr[b * gb] * xr[b * xb];
        dw[e] = acc;""", item="e"))

# g (B, K, Ho, Wo) and w (K, Ho, Wo, F) are strided views; out is contiguous (B, C, H, W). The
# window (i, j) reads the pixel as its tap (c, u, v): that tap's sum over k, then the next tap.
ADJOINT = Kernel("distnet_local_adjoint", source("distnet_local_adjoint", (
    "T* out", "const T* g", "const T* w", "C", "H", "W", "K", "Ho", "Wo") + _WINDOW + _G + _W, (
        item("e", ("py", "px"), ("H", "W"), "b", "c"),
        "T acc = 0;",
        covering(r"""
        const T* wr = w + i * wi + j * wj + ((c * fh + u) * fw + v) * wf;
        const T* gr = g + b * gb + i * gi + j * gj;
        T tap = 0;
        for (long long k = 0; k < K; ++k)
            tap += wr[k * wk] * gr[k * gk];
        acc += tap;""", ("py", "px"), **PLANE),
        "out[e] = acc;"), item="e"))

# w: contiguous (rows, F), scaled in place.
NORMALIZE_ROWS = Kernel("distnet_local_normalize_rows", source("distnet_local_normalize_rows", (
    "T* w", "F"), r"""
        T* row = w + r * F;
        T s = 0;
        for (long long f = 0; f < F; ++f)
            s += row[f] * row[f];
        const T norm = sqrt(s);   // no epsilon: a zero row becomes NaN, as the numpy code's
        for (long long f = 0; f < F; ++f)
            row[f] = row[f] / norm;""", item="r"))


def apply(x, w, fshape, stride):
    """``y (B, K, Ho, Wo)`` (new, contiguous) = the locally connected product of ``x (B, C, H,
    W)`` and ``w (K, Ho, Wo, F)`` (any strides), valid windows: one launch."""
    xp = get_array_module(x)
    B, C = x.shape[:2]
    K, Ho, Wo, _ = w.shape
    y = xp.empty((B, K, Ho, Wo), dtype=x.dtype)
    APPLY(y.size, y, strided(x), strided(w), C, K, Ho, Wo, int(fshape[0]), int(fshape[1]),
          int(stride[0]), int(stride[1]), *element_strides(x), *element_strides(w))
    return y


def weight_grad(x, g, fshape, stride):
    """``dw (K, Ho, Wo, C*fh*fw)`` (new, contiguous), the batch sum of ``g (B, K, Ho, Wo)`` times
    the windows of ``x (B, C, H, W)`` (any strides): one launch."""
    xp = get_array_module(x)
    B, C = x.shape[:2]
    _, K, Ho, Wo = g.shape
    fh, fw = (int(s) for s in fshape)
    dw = xp.empty((K, Ho, Wo, C * fh * fw), dtype=x.dtype)
    WEIGHT_GRAD(dw.size, dw, strided(x), strided(g), B, C, K, Ho, Wo, fh, fw, int(stride[0]),
                int(stride[1]), *element_strides(x), *element_strides(g))
    return dw


def adjoint(g, w, x_shape, fshape, stride):
    """``out (B, C, H, W) = x_shape`` (new, contiguous): the adjoint of :func:`apply` with
    weights ``w (K, Ho, Wo, F)`` applied to ``g (B, K, Ho, Wo)`` (any strides); pixels no window
    reads are 0. One launch."""
    xp = get_array_module(g)
    B, C, H, W = (int(s) for s in x_shape)
    K, Ho, Wo, _ = w.shape
    out = xp.empty((B, C, H, W), dtype=g.dtype)
    ADJOINT(out.size, out, strided(g), strided(w), C, H, W, K, Ho, Wo, int(fshape[0]),
            int(fshape[1]), int(stride[0]), int(stride[1]), *element_strides(g),
            *element_strides(w))
    return out


def normalize_rows(w):
    """Scale every row ``w[..., :]`` of the C-contiguous ``w`` to unit L2 norm in place (one
    launch); returns ``w``."""
    F = w.shape[-1]
    NORMALIZE_ROWS(w.size // F if F else 0, w, F)
    return w
