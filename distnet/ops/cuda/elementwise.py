"""Elementwise chains of the activations and costs in one launch each: the logistic and its
gradient, the gradients of rectified-linear and tanh units, and the binary cross-entropy's
per-element terms and gradient.

Each is a few array operations in :mod:`distnet.ops.activations` / :mod:`distnet.ops.costs` (the
logistic five, the cross-entropy's loss nine): one thread per element does them in the same
order with the same roundings (no fused multiply-adds: :mod:`distnet.ops.cuda.launch`; clips and
selections that propagate NaN as numpy's do), so the results are the array code's bits except
where ``exp`` and ``log`` round differently on the device. Arrays of one shape, dtype and memory
layout (NCHW, batch-innermost: any dense layout) are read as flat buffers.
"""
import numpy as np

from ...backend import get_array_module
from .launch import Kernel, strided

_LOOP = r"""
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {"""

LOGISTIC = Kernel("distnet_logistic", r"""
extern "C" __global__ void distnet_logistic(const long long n, const T* z, T* y) {""" + _LOOP + r"""
        const T zi = z[i];
        const T e = exp(-fabs(zi));              // in (0, 1]: never overflows
        const T r = (T)1 / ((T)1 + e);
        y[i] = zi >= 0 ? r : e * r;
    }
}
""")

LOGISTIC_GRAD = Kernel("distnet_logistic_grad", r"""
extern "C" __global__ void distnet_logistic_grad(const long long n, const T* dy, const T* y, T* dz) {""" + _LOOP + r"""
        const T a = dy[i] * y[i];
        dz[i] = a * ((T)1 - y[i]);
    }
}
""")

TANH_GRAD = Kernel("distnet_tanh_grad", r"""
extern "C" __global__ void distnet_tanh_grad(const long long n, const T* dy, const T* y, T* dz) {""" + _LOOP + r"""
        const T yy = y[i] * y[i];
        dz[i] = dy[i] * ((T)1 - yy);
    }
}
""")

RECTLIN_GRAD = Kernel("distnet_rectlin_grad", r"""
extern "C" __global__ void distnet_rectlin_grad(const long long n, const T* z, const T* dy, T* dz) {""" + _LOOP + r"""
        const T zi = z[i];
        dz[i] = zi > 0 ? dy[i] : (zi != zi ? zi : (T)0);   // a NaN stays NaN
    }
}
""")

_CLIP = r"""
__device__ T distnet_clip(const T v, const T lo, const T hi) {
    return v < lo ? lo : (v > hi ? hi : v);      // NaN passes through, as numpy's clip
}
"""

CROSS_ENTROPY_TERMS = Kernel("distnet_cross_entropy_terms", _CLIP + r"""
extern "C" __global__ void distnet_cross_entropy_terms(
        const long long n, const T* y, const T* t, T* out, const T lo, const T hi) {""" + _LOOP + r"""
        const T yc = distnet_clip(y[i], lo, hi);
        const T nc = distnet_clip((T)1 - y[i], lo, hi);
        const T a = t[i] * log(yc);
        const T b = ((T)1 - t[i]) * log(nc);
        out[i] = a + b;
    }
}
""")

CROSS_ENTROPY_GRAD = Kernel("distnet_cross_entropy_grad", _CLIP + r"""
extern "C" __global__ void distnet_cross_entropy_grad(
        const long long n, const T* y, const T* t, T* out, const T lo, const T hi) {""" + _LOOP + r"""
        const T yi = y[i];
        const T v = yi * ((T)1 - yi);
        out[i] = (yi - t[i]) / distnet_clip(v, lo, hi);
    }
}
""")


def dense_alike(*arrays):
    """Whether the arrays share shape, float dtype and strides, and fill one dense block of
    memory starting at their first element (C order or a permutation of it: NCHW, CHWN), so an
    elementwise kernel may treat them as flat buffers."""
    a0 = arrays[0]
    if a0.dtype.kind != "f" or any(a.shape != a0.shape or a.dtype != a0.dtype or a.strides != a0.strides
                                   for a in arrays[1:]):
        return False
    if a0.flags.c_contiguous:
        return True
    if any(s <= 0 for s in a0.strides):
        return False
    order = sorted(range(a0.ndim), key=lambda k: -a0.strides[k])
    return a0.transpose(order).flags.c_contiguous


def _memory_order(a):
    return sorted(range(a.ndim), key=lambda k: -a.strides[k])


def launch(kernel, *inputs, scalars=()):
    """``kernel(n, *inputs, out, *scalars)`` over ``dense_alike`` inputs, ``out`` a new array of
    their layout (so that the flat indices agree); returns ``out``."""
    a = inputs[0]
    order = _memory_order(a)
    out = get_array_module(a).empty(tuple(a.shape[k] for k in order), dtype=a.dtype)
    out = out.transpose(tuple(np.argsort(order)))
    kernel(out.size, *(strided(x) for x in inputs), strided(out), *scalars)
    return out
