"""The layers of a decoder (dense prediction, a U-Net's upward path): ``DeconvLayer``
(transposed convolution), ``UpsampleLayer`` (nearest or linear) and ``CropLayer`` (a box of a
map: a skip connection cropped to its decoder map).

Each is a window layer whose rules are the decoder's (:mod:`distnet.geometry.upsampling`,
:class:`~distnet.geometry.Crop`): its output is cut by ``tile_of`` like every activation, its
chunk is what its output tile reads, and the chunk exchange brings that from whichever ranks own
it (a halo, and a redistribution where the output is cut at other places than the input); the
backward sends the chunk gradient's ghost parts back and adds them there. The math runs on the
chunk (:mod:`distnet.ops.decoder`, told by a :class:`~distnet.ops.decoder.Section` where the
chunk and the output tile lie), so every grid, uneven tiles included, computes the
single-process numbers. The ops, the rules and the layers take any number of spatial axes, as
the window layers do: images ``(C, H, W)`` and volumes ``(C, D, H, W)``; a key of one size
per axis (``fshape``, ``stride``, ``padding``, ``output_padding``, ``factor``) is an int on
every axis or a list of one per axis, ``margins`` a list of one entry per axis.
"""
from math import prod

from ..config.types import WEIGHT_INIT, NonNegative, NonNegativeShape, PositiveInt, PositiveShape
from ..geometry import Crop, LinearUpsample, NearestUpsample, TransposedWindow
from ..ops.decoder import (Section, conv_transpose_bprop, conv_transpose_fprop, linear_bprop,
                           linear_fprop, nearest_bprop, nearest_fprop, temporaries)
from .add import activated
from .params import check_weight_init, gen_weights
from .placement import OVER_GRAD, ParamPlacement
from .spatial import WindowLayer, _axes, _text


class DecoderLayer(WindowLayer):
    """A window layer with a decoder rule per spatial axis (:meth:`rules`): the rules give the
    output plane and the halo plan; the layer computes its output tile from its chunk, placed by
    ``self.section``. Its keys of one size per axis (``_given``) are broadcast to the input's
    axes as the window layers' are (:meth:`~WindowLayer.broadcast_keys`)."""

    #: The key an error of the rules points at.
    rules_key = None

    # The keys of every layer, and nifm / ifmshape, but not the sliding window's (fshape, stride,
    # padding): the YAML keys are read off the constructors up the classes (config.builder), and
    # a decoder layer has its own (DeconvLayer sets the window's after this).
    def __init__(self, nifm=None, ifmshape=None, name=None, pos=None, batch_size=None, stage=None, inputs=None,
                 tower=None):
        super().__init__(1, 1, 0, nifm, ifmshape, name=name, pos=pos, batch_size=batch_size, stage=stage,
                         inputs=inputs, tower=tower)
        self._given = {}

    def given(self, **keys):
        """Keep ``keys`` as given (broadcast when the input's axes are known); until then each
        as sizes of an image."""
        self._given.update(keys)
        for key, value in keys.items():
            setattr(self, key, _axes(value, 2))

    def setup(self, ctx):
        super().setup(ctx)
        self.section = Section.of_plan(self.plan)

    def describe(self):
        return f"{self.name}: {self.in_shape} -> {self.out_shape}"


class DeconvLayer(DecoderLayer):
    """Transposed convolution (PyTorch's ``ConvTranspose2d`` / ``ConvTranspose3d`` without bias;
    alias ``ConvTransposeLayer``): input pixel ``(i, j)`` adds ``W[c, k] * x[c, i, j]`` into the
    outputs ``(i*sy + u - py, j*sx + v - px)`` for every tap ``(u, v)`` of the ``fshape``
    filter (likewise per axis on volumes). Output ``(H - 1)*sy + fh - 2*py + oy`` rows
    (likewise on every axis). ``W`` has shape ``(nifm, nofm, *f)`` (PyTorch's layout: ``(C, K,
    fh, fw)``, ``(C, K, fd, fh, fw)``), drawn as the ConvLayer of its adjoint convolution
    (``nofm`` maps to ``nifm``) draws its filters. Keys: ``nofm``, ``fshape``, ``stride``,
    ``padding`` (outputs dropped at each side), ``output_padding`` (each smaller than its
    stride: outputs added at the end, as PyTorch's), each an int (every axis) or one per axis;
    ``weight_init``, ``learning_rate``, ``activation`` (optional), ``nifm`` / ``ifmshape``
    (checked if given). On a process grid each rank computes its output tile from the input
    pixels whose taps reach it; the filters are replicated and their gradient, a partial sum
    over this rank's output pixels, is summed over ``Topology.grad``."""

    config_types = {"nofm": PositiveInt, "weight_init": WEIGHT_INIT, "learning_rate": NonNegative,
                    "activation": ("obj", "activation"), "output_padding": NonNegativeShape}
    rules_key = "fshape"

    def __init__(self, nofm, fshape, weight_init, learning_rate=None, stride=1, padding=0, output_padding=0,
                 nifm=None, ifmshape=None, activation=None, **common):
        super().__init__(nifm, ifmshape, **common)
        self.given(fshape=fshape, stride=stride, padding=padding, output_padding=output_padding)
        self.nofm = nofm
        self.weight_init = check_weight_init(weight_init)
        self.learning_rate = learning_rate
        self.activation = activation
        self.W = None

    def rules(self, plane):
        if any(o >= s for o, s in zip(self.output_padding, self.stride)):
            raise self.error(f"output_padding {list(self.output_padding)} must be smaller than the stride "
                             f"{list(self.stride)}", "output_padding")
        return tuple(TransposedWindow(f, s, p, p, o)
                     for f, s, p, o in zip(self.fshape, self.stride, self.padding, self.output_padding))

    def out_channels(self, nifm):
        return self.nofm

    def place_params(self, plan, position):
        """``W (C, K, *f)`` replicated; its gradient is summed over ``grad``."""
        shape = (self.in_shape[0], self.nofm) + tuple(self.fshape)
        return (ParamPlacement(f"{self.name}.W", shape, shape, Ellipsis, OVER_GRAD),)

    def macs(self, plan):
        return self.in_shape[0] * self.nofm * prod(self.fshape) * plan.chunk.size

    def work_arrays(self, plan):
        """Forward: the input's columns and the products before they are folded into the
        output (:func:`~distnet.ops.decoder.conv_transpose_fprop`); backward: the output
        gradient on the whole uncropped grid."""
        x, y = self.in_shape[0] * plan.chunk.size, self.nofm * plan.out_tile.size
        return [dict(name="columns", elements=x + y, kept=False, phase="forward"),
                dict(name="dfull", elements=y, kept=False)]

    def draw_params(self, rng):
        C, f, K = self.in_shape[0], tuple(self.fshape), self.nofm
        return [gen_weights(rng, (K * prod(f), C), self.weight_init, self.dtype).T.reshape((C, K) + f)]

    def params_ready(self):
        self.W = self._params[0].value

    def fprop(self, x):
        """``x (B, C, *s)`` on my input tile -> ``(B, K, *so)`` on my output tile."""
        self._xc = self._chunk_planned(x)
        z = conv_transpose_fprop(self._xc, self.W, self.stride, _sym(self.padding), section=self.section)
        return activated(self, z)

    def bprop(self, delta, need_input_grad=True):
        dz = delta if self.activation is None else self.activation.bprop(self._z, self._y, delta)
        dxc, dw = conv_transpose_bprop(self._xc, self.W, dz, self.stride, _sym(self.padding),
                                       section=self.section, need_dx=need_input_grad)
        self._params[0].grad[...] = dw
        return self._grad_planned(dxc) if need_input_grad else None

    def describe(self):
        act = f"  activation={self.activation.name}" if self.activation is not None else ""
        return (f"{super().describe()}  f={_text(self.fshape)} s={_text(self.stride)} "
                f"p={_text(self.padding)} op={_text(self.output_padding)}{act}")


#: ``mode`` -> (rule of one axis for a factor and an input length, forward op, backward op).
_MODES = {"nearest": (lambda f, n: NearestUpsample(f), nearest_fprop, nearest_bprop),
          "linear": (LinearUpsample, linear_fprop, linear_bprop)}


class UpsampleLayer(DecoderLayer):
    """Upsampling by an integer ``factor`` (an int on every axis, or one per axis: ``[fy, fx]``,
    ``[fz, fy, fx]``), each map on its own: ``mode: nearest`` (output ``o`` copies input
    ``floor(o / f)``) or ``mode: linear`` (bilinear on images, trilinear on volumes, PyTorch's
    ``align_corners=False``: the border repeats its last input). No weights. On a process grid
    each rank computes its output tile from the inputs it reads (linear: one more input at each
    side of the tile along each axis)."""

    config_types = {"factor": PositiveShape, "mode": str}
    rules_key = "factor"

    def __init__(self, factor, mode="nearest", nifm=None, ifmshape=None, **common):
        super().__init__(nifm, ifmshape, **common)
        if mode not in _MODES:
            raise self.error(f"mode must be one of {', '.join(_MODES)}, got {mode!r}", "mode")
        self.given(factor=factor)
        self.mode = mode
        _, self._fprop, self._bprop = _MODES[mode]

    def rules(self, plane):
        return tuple(_MODES[self.mode][0](f, n) for f, n in zip(self.factor, plane))

    def work_arrays(self, plan):
        """The upsampling's temporaries (:func:`~distnet.ops.decoder.temporaries`)."""
        forward, backward = temporaries(self.mode, self.in_shape[0] * plan.out_tile.size, self.factor)
        return [dict(name="forward", elements=forward, kept=False, phase="forward"),
                dict(name="backward", elements=backward, kept=False)]

    def fprop(self, x):
        xc = self._chunk_planned(x)
        self._xc_shape = xc.shape
        return self._fprop(xc, self.factor, self.section)

    def bprop(self, delta, need_input_grad=True):
        if not need_input_grad:
            return None
        return self._grad_planned(self._bprop(delta, self.factor, self._xc_shape, self.section))

    def describe(self):
        return f"{super().describe()}  {self.mode} x{_text(self.factor)}"


class CropLayer(DecoderLayer):
    """A box of each map: ``margins``, one entry per spatial axis (``[[top, bottom], [left,
    right]]`` on images, ``[[front, back], [top, bottom], [left, right]]`` on volumes; an int
    entry is the same at both ends: ``[rows, cols]``), the positions dropped at each side (a
    negative margin pads with zeros); or, without ``margins`` and with two ``inputs`` ``[map,
    reference]``, the map cropped to the reference's size, centred (``(H - h) // 2`` rows
    dropped at the top, the odd one at the bottom, likewise on every axis: a U-Net's skip
    connection cropped to its decoder map before a ConcatLayer). The reference gives only its
    size (its gradient is zero). On a process grid the chunk exchange moves the positions that
    the crop shifts across tile boundaries."""

    config_types = {"margins": list}
    rules_key = "margins"

    def __init__(self, margins=None, nifm=None, ifmshape=None, **common):
        super().__init__(nifm, ifmshape, **common)
        self.margins = None if margins is None else _margins(self, margins)
        self.multi_input = margins is None
        if (margins is None) != (self.inputs is not None and len(self.inputs) == 2):
            raise self.error("give either margins, or two inputs [map, reference] (a centred crop of the "
                             "map to the reference's size)", "margins" if margins is not None else "inputs")

    def infer_shape(self, in_shape):
        if self.multi_input:
            in_shape, ref = in_shape
            if len(ref) != len(in_shape):
                raise self.error(f"the reference '{self.inputs[1]}' must be image-like as "
                                 f"'{self.inputs[0]}' is", "inputs")
            self._target, self.in_shapes = tuple(ref[1:]), [tuple(in_shape), tuple(ref)]
        return super().infer_shape(in_shape)

    def rules(self, plane):
        if self.margins is None:
            return tuple(Crop.center(n, m) for n, m in zip(plane, self._target))
        if len(self.margins) != len(plane):
            raise self.error(f"margins must have one entry per spatial axis, but it has {len(self.margins)} "
                             f"and the input has {len(plane)} spatial axes", "margins")
        return tuple(Crop(lo, hi) for lo, hi in self.margins)

    def place(self, layout, position):
        if self.multi_input:
            if len(set(layout)) > 1:
                raise self.error(f"its inputs must have one layout, but they have {', '.join(layout)}", "inputs")
            layout = layout[0]
        return super().place(layout, position)

    def fprop(self, x):
        """My tile of the cropped map: exactly the chunk my output tile reads."""
        if self.multi_input:
            x, ref = x
            self._ref = (ref.shape, ref.dtype)
        return self.input.exchange(x)

    def bprop(self, delta, need_input_grad=True):
        if not need_input_grad:
            return None
        dx = self.input.exchange_adjoint(delta)
        if not self.multi_input:
            return dx
        shape, dtype = self._ref
        return [dx, self.xp.zeros(shape, dtype=dtype)]

    def describe(self):
        return f"{super().describe()}  crop {[[w.lo, w.hi] for w in self.windows]}"


def _margins(layer, margins):
    """``margins`` as a pair ``(lo, hi)`` per axis (an int entry: the same at both ends), or the
    layer's error."""
    def integer(v):
        return isinstance(v, int) and not isinstance(v, bool)
    if margins and all(integer(m) or (isinstance(m, list) and len(m) == 2 and all(map(integer, m)))
                       for m in margins):
        return tuple((m, m) if integer(m) else tuple(m) for m in margins)
    raise layer.error(f"margins must be one entry per spatial axis, each an integer or [before, after] "
                      f"(e.g. [rows, cols], [[top, bottom], [left, right]]), got {margins!r}", "margins")


def _sym(pair):
    """Symmetric padding per axis as ``(lo, hi)`` pairs."""
    return tuple((p, p) for p in pair)

