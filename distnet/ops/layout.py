"""Batch-innermost ("CHWN") memory for arrays indexed ``(B, C, H, W)``.

The CPU kernels of the batch im2col convolution and of max pooling on small planes read and
write ``(B, C, H, W)``-indexed arrays held in ``(C, H, W, B)`` memory, as cuda-convnet and
neon's GPU kernels did: their copies and folds then move runs of ``B`` (or ``Wo*B``) contiguous
elements instead of single pixels. Such an array is still indexed as every other one; only its
strides differ, so any op accepts it, and the layers hand it on from layer to layer where the
next op reads it without a copy (:func:`distnet.ops.conv.output_chwn`,
:func:`distnet.ops.pooling.output_chwn`).
"""
from .workspace import scratch


def is_chwn(a):
    """Whether ``a`` (indexed ``(B, C, H, W)``) is held in batch-innermost ``(C, H, W, B)``
    memory."""
    return a.ndim == 4 and a.transpose(1, 2, 3, 0).flags.c_contiguous


def empty_chwn(shape, dtype, like=None, work=None, name=None):
    """A ``(B, C, H, W)``-indexed array in ``(C, H, W, B)`` memory (from ``work[name]`` if given)."""
    B, C, H, W = shape
    return scratch(work, name, (C, H, W, B), dtype, like=like).transpose(3, 0, 1, 2)
