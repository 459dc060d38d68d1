"""Token embedding, per-time-step linear output and softmax cross-entropy over tokens that
ignores padding. Pure array code, no MPI.

Shapes: ``ids (B, T)`` integer token ids, ``W (V, E)`` embedding table, ``mask (B, T)`` (1.0 on
real tokens, 0.0 on padding).
"""
import numpy as np

from ..backend import get_array_module
from . import dispatch
from .softmax import log_softmax


def embed(ids, W):
    """``W[ids]`` -> ``(B, T, E)``."""
    return W[ids]


def embed_grad(ids, dy, V):
    """Gradient of the table: ``dW[v] = sum of dy[b, t] over ids[b, t] == v`` -> ``(V, E)``
    (numpy: a scatter-add; a device: a one-hot ``(B*T, V)`` matrix times ``dy``)."""
    xp = get_array_module(dy)
    flat = dy.reshape(-1, dy.shape[-1])
    if dispatch.scatter_adds(xp):
        dW = np.zeros((V, dy.shape[-1]), dtype=dy.dtype)
        np.add.at(dW, ids.reshape(-1), flat)
        return dW
    # a device: one-hot (B*T, V) times the gradients, a GEMM (no scatter-add needed)
    onehot = (ids.reshape(-1)[:, None] == xp.arange(V)[None, :]).astype(dy.dtype)
    return onehot.T @ flat


def linear_steps(x, W, b):
    """``x (B, T, H) @ W^T + b`` with ``W (V, H)``, ``b (V,)`` -> ``(B, T, V)``."""
    return x @ W.T + b


def linear_steps_backward(x, W, dz):
    """Gradients ``(dx (B, T, H), dW (V, H), db (V,))`` of :func:`linear_steps`."""
    V, H = W.shape
    return dz @ W, dz.reshape(-1, V).T @ x.reshape(-1, H), dz.sum(axis=(0, 1))


def token_xent(z, targets, mask):
    """Softmax cross-entropy of logits ``z (B, T, V)`` against ``targets (B, T)``, summed over the
    unmasked tokens. Returns ``(loss (float), dz (B, T, V))``: ``dz`` = d loss / d z, 0 on
    padding."""
    xp = get_array_module(z)
    B, T, V = z.shape
    logp = log_softmax(z.reshape(B * T, V))
    flat_t, flat_m = targets.reshape(-1), mask.reshape(-1)
    picked = logp[xp.arange(B * T), flat_t]
    loss = -(picked * flat_m).sum()
    dz = xp.exp(logp)
    dz[xp.arange(B * T), flat_t] -= 1.0
    dz *= flat_m[:, None]
    return loss, dz.reshape(B, T, V)
