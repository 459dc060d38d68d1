"""Optimiser steps in one launch per parameter, on a device: SGD (momentum, Nesterov) and Adam,
each with L2 or decoupled weight decay.

The array-module code of :mod:`distnet.optim.sgd` and :mod:`distnet.optim.adam` makes one launch
per arithmetic step (up to 9 for SGD with momentum and L2, 14 for Adam) for every parameter
array, every step. Each kernel here does the same operations on one element per thread, in the
same order and with the same roundings (scalars in the parameter's dtype, as numpy applies
Python floats to an array; no contraction into fused multiply-adds: see
:mod:`distnet.ops.cuda.launch`, whose launch convention they follow), so it gives the
array-module code's bits. ``g`` is left holding what the array-module code leaves there (it is
scratch for the caller either way).
"""
import math

from ..ops.cuda.launch import Kernel

SGD = Kernel("distnet_sgd_step", r"""
extern "C" __global__ void distnet_sgd_step(
        const long long n, T* w, T* g, T* v, const T lr, const T mu, const T wd, const T keep,
        const long long has_v, const long long nesterov, const long long l2, const long long decoupled) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        T W = w[i], G = g[i];
        if (decoupled) W = W * keep;                 // w *= 1 - lr * wd
        else if (l2) { const T d = wd * W; G = G + d; }   // g += wd * w
        G = G * lr;                                  // g *= lr
        if (!has_v) { W = W - G; }
        else {
            T V = v[i] * mu;
            V = V - G;                               // v = mu v - lr g
            if (nesterov) { W = W - G; G = V * mu; W = W + G; }
            else W = W + V;
            v[i] = V;
        }
        w[i] = W;
        g[i] = G;
    }
}
""")

ADAM = Kernel("distnet_adam_step", r"""
extern "C" __global__ void distnet_adam_step(
        const long long n, T* w, T* g, T* m, T* v, const T beta1, const T beta2, const T wd,
        const T keep, const T inv_sqrt_bc2, const T eps, const T step_size,
        const long long l2, const long long decoupled) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        T W = w[i], G = g[i];
        if (decoupled) W = W * keep;
        else if (l2) { const T d = wd * W; G = G + d; }
        T M = m[i];
        M = M - G; M = M * beta1; M = M + G;         // m = beta1 m + (1 - beta1) g
        G = G * G;
        T V = v[i];
        V = V - G; V = V * beta2; V = V + G;         // v = beta2 v + (1 - beta2) g^2
        G = sqrt(V);
        G = G * inv_sqrt_bc2;
        G = G + eps;                                 // sqrt(v_hat) + eps
        G = M / G;
        G = G * step_size;                           // lr m_hat / (sqrt(v_hat) + eps)
        W = W - G;
        m[i] = M; v[i] = V; w[i] = W; g[i] = G;
    }
}
""")


def sgd_step(w, g, v, lr, mu, nesterov, weight_decay, decoupled):
    """:func:`distnet.optim.sgd.sgd_step` (``weight_decay`` 0: :func:`distnet.optim.sgd.sgd_update`)
    in one launch; ``v`` None: no momentum."""
    SGD(w.size, w, g, g if v is None else v, float(lr), float(mu), float(weight_decay),
        1.0 - lr * weight_decay, int(v is not None), int(bool(nesterov)),
        int(bool(weight_decay) and not decoupled), int(bool(weight_decay) and decoupled))


def adam_step(w, g, m, v, lr, beta1, beta2, eps, weight_decay, decoupled, bc1, bc2):
    """:func:`distnet.optim.adam.adam_step` in one launch (``bc1``, ``bc2``: the bias corrections
    ``1 - beta^t``)."""
    ADAM(w.size, w, g, m, v, float(beta1), float(beta2), float(weight_decay),
         1.0 - lr * weight_decay, 1.0 / math.sqrt(bc2), float(eps), lr / bc1,
         int(bool(weight_decay) and not decoupled), int(bool(weight_decay) and decoupled))
