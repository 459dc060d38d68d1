"""Convolution (cross-correlation, no flip, no bias) of images, volumes or lines ``(B, C,
*spatial)`` on an already padded chunk, or on an unpadded input with the padding done here; any
stride and dilation per axis.

Five algorithms compute the same numbers (up to the summation order of their GEMMs); one module
each, and :mod:`.choose` picks one per call (:func:`conv_fprop`, :func:`conv_bprop`; the 2-D
names ``conv2d_fprop`` / ``conv2d_bprop`` are the same functions):

* :mod:`.pointwise`: an unpadded 1x1 filter, one GEMM per image, no patch matrix.
* :mod:`.flat` (**flat-shift tiles**, CPU, stride 1 on rows at least 64 pixels wide): an image
  read as the matrix ``(C, H*W)``, so a tile's im2col is contiguous row copies into a buffer
  that stays in a core's cache; backward in one pass over the images, the input gradient a
  "full" correlation with the flipped filters; ReLU fused both ways.
* :mod:`.tiled` (**tiled batch im2col**, CPU, small images and strides): the batch im2col
  layout of :mod:`.im2col` (patch elements by rows, output positions with the batch innermost
  by columns, so the output *is* CHWN memory), walked in cache-sized tiles of output rows by
  each kernel thread.
* :mod:`.whole` (**whole-batch im2col**, device): the same layout built for the whole batch,
  one GEMM, the fold in one launch.
* :mod:`.blocked` (**blocked im2col**, device, large images): the whole-batch algorithm in
  blocks of output rows, whose size comes from the device's free memory, so that a 512x512
  layer does not need ``C*fh*fw`` times its input in device memory.

``w (K, C, fh, fw)`` is read as ``w2 (K, C*fh*fw)`` without a copy. Only ``xp`` functions are
used; the input dtype is kept (float32 stays float32). Scratch memory comes from an optional
:class:`~distnet.ops.workspace.Workspace` (``work``), so a training loop allocates it once.
The CPU's algorithms read and write batch-innermost (CHWN) arrays without a copy
(:func:`output_chwn`, :func:`empty_chwn`, :mod:`distnet.ops.layout`).
"""
from ..layout import empty_chwn, is_chwn
from .choose import (conv2d_bprop, conv2d_fprop, conv_bprop, conv_fprop, fuses_relu_grad, output_chwn,
                     use_flat, workspace_arrays)
from .flat import flat_readable, is_flat_readable
from .im2col import im2col

__all__ = ["conv_fprop", "conv_bprop", "conv2d_fprop", "conv2d_bprop", "use_flat", "output_chwn", "fuses_relu_grad", "is_chwn",
           "empty_chwn", "im2col", "is_flat_readable", "flat_readable", "workspace_arrays"]
