"""The per-pixel softmax chains of the per-pixel costs (:mod:`distnet.ops.pixel_softmax`), one
launch each: the cross-entropy's terms and gradient, the masked softmax of the Dice sums and
the Dice gradient.

The array code takes about ten operations for each (the row maximum, the shifted exponentials,
their sum, the division or logarithm, the class gather and the masks). Here one thread owns one
pixel ``(b, s)`` of logits ``z (B, K, S)`` (C order, the spatial axes flattened to ``S``) and
its label ``t[b, s]`` (int64), loops over the ``K`` classes in order (the maximum as numpy's,
a NaN propagating; the sum of the exponentials from class 0 up, as numpy adds along the class
axis) and writes its pixel's outputs, so every output element has one writer and the results
are the array code's except where the device's ``exp`` and ``log`` round differently. A label
equal to ``ignore`` is not labelled; a label outside ``[0, K)`` (which the datasets refuse)
reads no memory and counts as not labelled.
"""
from ...backend import get_array_module
from .launch import Kernel, source

_PIXEL = r"""
const long long b = i / S, s = i - b * S;
const T* zi = z + b * K * S + s;
const long long c = t[i];
const bool ok = c != ignore && c >= 0 && c < K;
T m = zi[0];
for (long long k = 1; k < K; ++k) {
    const T v = zi[k * S];
    if (v > m || v != v) m = (m != m) ? m : v;   // numpy's maximum: a NaN stays
}
T sum = 0;
for (long long k = 0; k < K; ++k) sum += exp(zi[k * S] - m);
"""

CE_TERMS = Kernel("distnet_pixel_ce_terms", source(
    "distnet_pixel_ce_terms", ("const T* z", "const long long* t", "const T* w", "T* out", "K", "S", "ignore"),
    (_PIXEL, r"""
        if (!ok) { out[i] = 0; continue; }
        const T lse = log(sum) + m;
        out[i] = (lse - zi[c * S]) * w[c];
    """)))

CE_GRAD = Kernel("distnet_pixel_ce_grad", source(
    "distnet_pixel_ce_grad", ("const T* z", "const long long* t", "const T* coef", "T* dz", "K", "S", "ignore"),
    (_PIXEL, r"""
        const T cp = ok ? coef[c] : (T)0;
        for (long long k = 0; k < K; ++k) {
            const T p = exp(zi[k * S] - m) / sum;
            dz[b * K * S + k * S + s] = (p - (T)(ok && k == c)) * cp;
        }
    """)))

MASKED_SOFTMAX = Kernel("distnet_pixel_masked_softmax", source(
    "distnet_pixel_masked_softmax", ("const T* z", "const long long* t", "T* p", "K", "S", "ignore"),
    (_PIXEL, r"""
        for (long long k = 0; k < K; ++k) {
            const T pk = exp(zi[k * S] - m) / sum;
            p[b * K * S + k * S + s] = pk * (T)ok;
        }
    """)))

DICE_GRAD = Kernel("distnet_pixel_dice_grad", source(
    "distnet_pixel_dice_grad", ("const T* z", "const long long* t", "const T* alpha", "const T* beta", "T* dz",
                                "K", "S", "ignore", "rows"),
    (_PIXEL, r"""
        const T* a = alpha + (rows == 1 ? 0 : b) * K;
        const T* be = beta + (rows == 1 ? 0 : b) * K;
        T dot = 0;                                   // sum_k dp_k p_k, class 0 first
        for (long long k = 0; k < K; ++k) {
            const T p = exp(zi[k * S] - m) / sum;
            const T dp = (a[k] * (T)(ok && k == c) + be[k]) * (T)ok;
            dot = k == 0 ? dp * p : dot + dp * p;
        }
        for (long long k = 0; k < K; ++k) {
            const T p = exp(zi[k * S] - m) / sum;
            const T dp = (a[k] * (T)(ok && k == c) + be[k]) * (T)ok;
            dz[b * K * S + k * S + s] = p * (dp - dot);
        }
    """)))


def _flat(z):
    """``(K, S)``: classes and pixels per image of ``z (B, K, *S)``."""
    K = z.shape[1]
    return K, (z.size // (z.shape[0] * K)) if z.shape[0] * K else 0


def ce_terms(z, t, w, ignore):
    K, S = _flat(z)
    out = get_array_module(z).empty(t.shape, dtype=z.dtype)
    CE_TERMS(t.size, z, t, w, out, K, S, ignore)
    return out


def ce_grad(z, t, coef, ignore):
    K, S = _flat(z)
    dz = get_array_module(z).empty(z.shape, dtype=z.dtype)
    CE_GRAD(t.size, z, t, coef, dz, K, S, ignore)
    return dz


def masked_softmax(z, t, ignore):
    K, S = _flat(z)
    p = get_array_module(z).empty(z.shape, dtype=z.dtype)
    MASKED_SOFTMAX(t.size, z, t, p, K, S, ignore)
    return p


def dice_grad(z, t, alpha, beta, ignore):
    K, S = _flat(z)
    dz = get_array_module(z).empty(z.shape, dtype=z.dtype)
    DICE_GRAD(t.size, z, t, alpha, beta, dz, K, S, ignore, alpha.shape[0])
    return dz

