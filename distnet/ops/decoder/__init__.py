"""The ops of a decoder, for any number of spatial axes (1, 2, 3), forward and backward side by
side, on a *chunk* (a rank's tile plus the halo its outputs read) as on a whole input:

* :mod:`.transposed_conv`: transposed convolution, the adjoint of a convolution (any kernel,
  stride, padding and output padding);
* :mod:`.upsample`: upsampling by an integer factor per axis, nearest and linear (PyTorch's
  ``align_corners=False``: bilinear in 2-D, trilinear in 3-D);
* :mod:`.crop`: a box of the input (zero padding where it reaches past it), and its adjoint.

A :class:`~.section.Section` says which part of the global computation a call does: where the
chunk lies in the global input and which global outputs the call computes (a rank's output tile),
so that a tile computed from its chunk equals the same tile of the whole computation.
"""
from .crop import crop, crop_bprop
from .section import Section
from .transposed_conv import conv_transpose_bprop, conv_transpose_fprop
from .upsample import linear_bprop, linear_fprop, nearest_bprop, nearest_fprop, temporaries

__all__ = ["Section", "conv_transpose_bprop", "conv_transpose_fprop", "crop", "crop_bprop",
           "linear_bprop", "linear_fprop", "nearest_bprop", "nearest_fprop", "temporaries"]
