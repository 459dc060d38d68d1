"""Batch-innermost ("CHWN") memory for arrays indexed ``(B, C, H, W)`` (``(B, C, D, H, W)`` in
``(C, D, H, W, B)`` memory for volumes: any number of spatial axes).

The CPU kernels of the batch im2col convolution and of max pooling on small planes read and
write ``(B, C, H, W)``-indexed arrays held in ``(C, H, W, B)`` memory, as cuda-convnet and
neon's GPU kernels did: their copies and folds then move runs of ``B`` (or ``Wo*B``) contiguous
elements instead of single pixels. Such an array is still indexed as every other one; only its
strides differ, so any op accepts it, and the layers hand it on from layer to layer where the
next op reads it without a copy (:func:`distnet.ops.conv.output_chwn`,
:func:`distnet.ops.pooling.output_chwn`).
"""
from .workspace import scratch


def chwn_order(ndim):
    """The axes order taking a ``(B, C, *spatial)``-indexed array of ``ndim`` axes to its
    batch-innermost memory order ``(C, *spatial, B)``."""
    return tuple(range(1, ndim)) + (0,)


def from_chwn(ndim):
    """The inverse of :func:`chwn_order`: ``(C, *spatial, B)`` memory indexed ``(B, C, *spatial)``."""
    return (ndim - 1,) + tuple(range(ndim - 1))


def is_chwn(a):
    """Whether ``a`` (indexed ``(B, C, *spatial)``, one to three spatial axes) is held in
    batch-innermost ``(C, *spatial, B)`` memory."""
    return 3 <= a.ndim <= 5 and a.transpose(chwn_order(a.ndim)).flags.c_contiguous


def empty_chwn(shape, dtype, like=None, work=None, name=None, zeroed=False):
    """A ``(B, C, *spatial)``-indexed array in ``(C, *spatial, B)`` memory (from ``work[name]``
    if given; ``zeroed``: zeros at allocation, the workspace's contract)."""
    shape = tuple(shape)
    memory = shape[1:] + shape[:1]
    return scratch(work, name, memory, dtype, like=like, zeroed=zeroed).transpose(from_chwn(len(shape)))
