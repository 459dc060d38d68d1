"""Window layers on spatial activations ``(B, C, *S)`` (lines, images ``(B, C, H, W)`` or volumes
``(B, C, D, H, W)``): the geometry they share (kernel, stride, padding, halo plan: WindowLayer)
and ConvLayer (the pooling layers: :mod:`distnet.layers.pooling`).

A window layer computes its output tile from a *chunk*: its input tile plus what its windows read
beyond it. Its chunk exchange ``self.input`` builds it, as the layer's placement says
(:attr:`~distnet.layers.placement.HaloExchange.split`): on a grid of one tile a
:class:`~distnet.ops.padding.ZeroPadding` (the zero-padded image); when the process grid cuts the
array into several tiles a :class:`~distnet.comm.global_array.GlobalArray` over
``Topology.spatial`` (halo exchange and its adjoint), which fills the ghosts from the neighbours
and pads with zeros only outside the image. Both have the same ``exchange`` /
``exchange_adjoint(out=)`` interface, so the layers have one code path, and a layer returns the
gradient on its *own tile* either way (the adjoint sends the chunk gradient's ghost parts back to
their owners and adds them).
"""
from math import prod

import numpy as np

from ..backend import get_array_module
from ..config.builder import config_name
from ..config.types import WEIGHT_INIT, NonNegative, NonNegativeShape, PositiveInt, PositiveShape
from ..errors import GeometryError
from ..comm.global_array import GlobalArray
from ..comm.overlap import overlap_enabled
from ..geometry import Box, Window, output_plane, plan_halo
from ..geometry.overlap import border_boxes, early_output_box
from ..ops import conv
from ..ops.activations import RectLin
from ..ops.layout import chwn_order, from_chwn
from ..ops.parallel import parallel_map, run_split, shares, sub_workspace
from ..ops.padding import ZeroPadding
from ..ops.workspace import Workspace
from .base import BaseLayer
from .params import check_weight_init, gen_weights
from .placement import OVER_GRAD, SPATIAL, HaloExchange, Layout, ParamPlacement, Placement, WorkArray


class WindowLayer(BaseLayer):
    """Keys: ``fshape`` (int or one size per spatial axis: [fh, fw], [fd, fh, fw]), ``stride``
    (likewise), ``padding`` (likewise: zeros on each side of each axis; a distnet addition), and
    neon's ``nifm`` / ``ifmshape`` (optional: derived from the previous layer, checked if given).
    An int is the same on every axis of the input (2 for images, 3 for volumes); a list has one
    entry per axis."""

    config_types = {"nifm": PositiveInt, "ifmshape": PositiveShape, "fshape": PositiveShape,
                    "stride": PositiveShape, "padding": NonNegativeShape}
    #: The numbers of spatial axes the layer accepts (local filtering and LCN: images only).
    spatial_axes = (1, 2, 3)
    #: Forward chunk exchanges per step (LCN exchanges x, then s).
    exchanges_per_step = 1
    # ``reuse_buffers`` (BaseLayer) is off by default because a caller that keeps an output
    # across calls (a nonblocking send of micro-batch m while m+1 runs, a test comparing two
    # outputs) would see it change. Scratch memory that never leaves the layer (padded chunks,
    # im2col tiles, argmax) is always planned once, in :attr:`work`.

    def __init__(self, fshape, stride=1, padding=0, nifm=None, ifmshape=None, **common):
        super().__init__(**common)
        # as given (an int is broadcast to the input's axes by infer_shape); until then 2-D
        self._given = {"fshape": fshape, "stride": stride, "padding": padding, "dilation": 1}
        self.fshape, self.stride, self.padding = (_axes(v, 2) for v in (fshape, stride, padding))
        self.dilation = (1,) * len(self.fshape)
        self.nifm = nifm
        self.ifmshape = ifmshape if ifmshape is None or isinstance(ifmshape, int) else tuple(ifmshape)
        self.plan = self.input = None

    # -- shapes -------------------------------------------------------------------------------
    def out_channels(self, nifm):
        return nifm

    def infer_shape(self, in_shape):
        """Global output ``(K, *So)`` for a global input ``(C, *S)`` (``(C, H, W)``, ``(C, D, H,
        W)``); broadcasts the window keys to the input's axes and checks the YAML."""
        nd = len(in_shape) - 1
        if nd not in self.spatial_axes:
            if nd == 0:
                raise self.error(f"needs an image-like input (maps, rows, cols), but its input is a "
                                 f"vector of {in_shape[0]} features")
            raise self.error(f"needs an input of {' or '.join(map(str, self.spatial_axes))} spatial "
                             f"axes, but its input is {_text(in_shape[1:])}")
        C, S = in_shape[0], tuple(in_shape[1:])
        if self.nifm is not None and self.nifm != C:
            raise self.error(f"nifm is {self.nifm} but its input has {C} maps", "nifm")
        if self.ifmshape is not None and _axes(self.ifmshape, nd) != S:
            raise self.error(f"ifmshape is {_given_text(self.ifmshape)} but its input is {_text(S)}", "ifmshape")
        self.broadcast_keys(nd)
        try:
            self.windows = self.rules(S)
            So = output_plane(S, *self.windows)
        except GeometryError as e:
            raise self.error(f"{e} (input {_text(S)})", self.rules_key) from None
        self.in_shape, self.out_shape = tuple(in_shape), (self.out_channels(C),) + tuple(So)
        return self.out_shape

    #: The key an error of the window rules points at.
    rules_key = "fshape"

    def rules(self, plane):
        """One window rule per axis of the input ``plane`` (here the sliding window's)."""
        return tuple(Window(f, s, p, p, d) for f, s, p, d in zip(self.fshape, self.stride, self.padding, self.dilation))

    def broadcast_keys(self, nd):
        """The window keys as given, one size per axis of an input of ``nd`` spatial axes (an
        int on every axis; a list must have ``nd`` entries)."""
        for key, value in self._given.items():
            if isinstance(value, (tuple, list)) and len(value) != nd:
                raise self.error(f"{key} {_given_text(value)} has {len(value)} sizes, but the input "
                                 f"has {nd} spatial axes", key)
            setattr(self, key, _axes(value, nd))

    def planes(self):
        """The input and output arrays the process grid must cut into non-empty tiles, as
        ``(*S, label)`` (``(H, W, label)`` for images)."""
        name = self.name or config_name(self)
        return [(*self.in_shape[1:], f"the input of layer '{name}'"),
                (*self.out_shape[1:], f"the output of layer '{name}'")]

    def place(self, layout, position):
        """Input and output: spatial tiles; one chunk exchange (its halo plan: a halo exchange
        when the grid has several tiles, zero padding on one); parameters from
        :meth:`place_params`."""
        grid = position.grid
        try:
            plan = plan_halo(self.in_shape[1:], *self.windows, grid, position.coords)
        except GeometryError as e:
            raise self.error(str(e)) from None
        C = self.in_shape[0]
        return Placement(Layout.of(SPATIAL, self.in_shape, position), Layout.of(SPATIAL, self.out_shape, position),
                         params=self.place_params(plan, position),
                         halos=(HaloExchange(plan, C, self.exchanges_per_step, self.windows,
                                             split=prod(grid) > 1),),
                         chunk_shape=(C,) + plan.chunk.shape, macs=self.macs(plan),
                         work=tuple(WorkArray(**a) for a in self.work_arrays(plan)))

    def place_params(self, plan, position):
        """The :class:`ParamPlacement` of each parameter (window layers without weights: none)."""
        return ()

    def work_arrays(self, plan):
        """The scratch of a training step on the tile of ``plan`` as its ops size it
        (:class:`~distnet.layers.placement.WorkArray` fields; none by default)."""
        return []

    def _chunk_gradient(self, plan):
        """The input gradient of the whole chunk, kept in the workspace (``dxc``; the tile's,
        summed from it by the halo's adjoint, is the new array the backward returns)."""
        return [dict(name="dxc", elements=self.in_shape[0] * plan.chunk.size, input_gradient=True)]

    def macs(self, plan):
        """Multiply-adds per sample of the forward pass on this rank (0: memory-bound layers)."""
        return 0

    def setup(self, ctx):
        """The chunk exchange of the placement (:meth:`make_exchange`)."""
        self.plan = self.placement.halos[0].plan
        self.input = self.make_exchange(ctx)
        self._split = None

    # -- overlap: the interior of the output tile while the halo is in flight ---------------------
    def _overlap_split(self):
        """The output tile cut for an overlapped exchange (``DISTNET_OVERLAP``,
        :mod:`distnet.comm.overlap`): ``(bands, borders)``, boxes relative to ``plan.out_tile``.
        ``bands``: the whole tile in full-width row bands, computed while the ghosts are in
        flight (MPI is given a chance to progress the messages between two bands); the outputs
        of the ``borders`` (:func:`~distnet.geometry.overlap.border_boxes`: the tile minus
        :func:`~distnet.geometry.overlap.early_output_box`, the outputs whose windows read a
        ghost pixel) come out wrong there and are computed again once the ghosts arrived. Full
        bands keep the kernels' large GEMMs and read the chunk in place; the borders are a thin
        frame. None when the split does not pay: one process (no messages), no halo, a tile of
        fewer than :data:`OVERLAP_MIN_OUTPUTS` pixels, or a border frame larger than
        ``1 - OVERLAP_MIN_FRACTION`` of the tile."""
        if self._split is None:
            self._split = False
            plan = self.plan
            if (plan.ndim == 2 and not self.input.zero_padding_only and not self._no_halo()
                    and plan.recvs):
                t = plan.out_tile
                early = early_output_box(plan, *self.windows)
                if (t.size >= OVERLAP_MIN_OUTPUTS and not early.is_empty()
                        and early.size >= OVERLAP_MIN_FRACTION * t.size):
                    h, w = t.shape
                    n = max(1, min(OVERLAP_BANDS, h))
                    cuts = [h * k // n for k in range(n + 1)]
                    bands = [Box(a, b, 0, w) for a, b in zip(cuts, cuts[1:]) if b > a]
                    borders = [Box(b.y0 - t.y0, b.y1 - t.y0, b.x0 - t.x0, b.x1 - t.x0)
                               for b in border_boxes(t, early)]
                    self._split = (bands, borders)
        return self._split or None

    def _overlapped_chunk(self, x, compute):
        """The chunk exchange of ``x`` overlapped with ``compute(chunk, box, k)`` of each box of
        :meth:`_overlap_split` (``k``: the box's number, for its own scratch space): the bands
        while the ghosts are in flight (the chunk's ghost pixels still hold the last step's
        values, or zeros: only border outputs read them), the borders after them, which
        overwrites those outputs. Returns the chunk (planned in :attr:`work`, as
        :meth:`_chunk_planned`). Collective over my halo peers."""
        bands, borders = self._overlap_split()
        shape = tuple(x.shape[:2]) + self.plan.chunk.shape
        ex = self.input.exchange_begin(x, out=self.work.get("chunk", shape, x.dtype, like=x, zeroed=True))
        for k, box in enumerate(bands):
            compute(ex.chunk, box, k)
            ex.test()                       # MPICH progresses messages only inside MPI calls
        chunk = ex.finish()
        for k, box in enumerate(borders, len(bands)):
            compute(chunk, box, k)
        return chunk

    def _input_box(self, box):
        """The chunk slice ``(rows, cols)`` that the outputs of ``box`` (relative to the output
        tile) read."""
        (fh, fw), (sy, sx) = self.fshape, self.stride
        return (slice(box.y0 * sy, (box.y1 - 1) * sy + fh), slice(box.x0 * sx, (box.x1 - 1) * sx + fw))

    def make_exchange(self, ctx):
        """This layer's chunk exchange (``exchange`` / ``exchange_adjoint``): the halo exchange
        over ``Topology.spatial`` (tag: the layer's index) when the grid cuts the plane, else
        zero padding."""
        if self.placement.halos[0].split:
            return GlobalArray(self.plan, ctx.topology.spatial, tag=ctx.index,
                               host_staging=ctx.backend.host_staging)
        return ZeroPadding(self.plan)

    # -- the seam between math and communication -----------------------------------------------
    def _chunk(self, x):
        """``x (B, C, h, w)`` on my input tile -> the chunk ``(B, C, hc, wc)`` my outputs read."""
        return self.input.exchange(x)

    def _input_grad(self, g_chunk):
        """Adjoint of :meth:`_chunk`: chunk gradient -> gradient on my input tile."""
        return self.input.exchange_adjoint(g_chunk)

    # -- planned buffers ----------------------------------------------------------------------
    @property
    def work(self):
        """This layer's :class:`~distnet.ops.workspace.Workspace` (scratch planned once)."""
        ws = self.__dict__.get("_ws")
        if ws is None:
            ws = self._ws = Workspace()
        return ws

    def _out(self, name, shape, dtype, like, chwn=False):
        """An array the layer returns: its own reused buffer under :attr:`reuse_buffers`, else new.
        ``chwn``: ``(B, C, H, W)``-indexed but held in ``(C, H, W, B)`` memory, the layout
        the small-image kernels write without a transpose copy (consumers index it as usual)."""
        if chwn:
            n = len(shape)
            memory = tuple(shape[a] for a in chwn_order(n))
            return self._out(name, memory, dtype, like).transpose(from_chwn(n))
        if self.reuse_buffers:
            return self.work.get(name, shape, dtype, like=like)
        return get_array_module(like).empty(shape, dtype=dtype)

    def _work_out(self, name, shape, dtype, like, chwn=False):
        """A buffer of :attr:`work` of ``shape``, in CHWN memory if ``chwn`` (see :meth:`_out`)."""
        if chwn:
            n = len(shape)
            memory = tuple(shape[a] for a in chwn_order(n))
            return self.work.get(name, memory, dtype, like=like).transpose(from_chwn(n))
        return self.work.get(name, shape, dtype, like=like)

    def _no_halo(self):
        """True when my chunk is exactly my tile and no rank exchanges anything with me for
        this layer (e.g. non-overlapping pooling whose windows the tiles cut evenly): the
        exchange and its adjoint are then identities and nothing is copied."""
        plan = self.plan
        return plan.own == plan.chunk and not plan.recvs and not plan.sends

    def _chunk_planned(self, x, name="chunk"):
        """:meth:`_chunk` into a buffer of :attr:`work` (valid until the next call), zero outside
        the image (written once, at allocation). Without any halo, ``x`` itself."""
        if self._no_halo():
            return x
        shape = tuple(x.shape[:2]) + self.plan.chunk.shape
        return self.input.exchange(x, out=self.work.get(name, shape, x.dtype, like=x, zeroed=True))

    def _grad_planned(self, g_chunk):
        """:meth:`_input_grad` of a chunk gradient held in :attr:`work`; the result is a new
        array or (:attr:`reuse_buffers`) this layer's own buffer (``g_chunk`` itself when
        there is no halo)."""
        plan = self.plan
        if self._no_halo():
            return g_chunk if self.reuse_buffers else g_chunk.copy()
        out = None
        if self.reuse_buffers:   # in place: my tile's part of the chunk gradient (a view)
            shape = tuple(g_chunk.shape[:2]) + plan.own.shape
            out = (g_chunk[(Ellipsis,) + plan.own.relative_to(plan.chunk)]
                   if plan.interior == plan.own else self.work.get("dx", shape, g_chunk.dtype, like=g_chunk))
        return self.input.exchange_adjoint(g_chunk, out=out)

    def _own_crop(self):
        """``((before, after), ...)`` per axis (``((top, bottom), (left, right))`` in 2-D): the
        positions of my chunk around my own tile, or None
        if the tile is not inside the chunk or the chunk takes more than zero padding (a halo
        exchange needs the whole chunk gradient for its adjoint)."""
        if not self.input.zero_padding_only:
            return None
        own, ch = self.plan.own, self.plan.chunk
        crop = tuple((o0 - c0, c1 - o1) for (o0, o1), (c0, c1) in zip(own.spans, ch.spans))
        return crop if min(min(p) for p in crop) >= 0 else None

    def describe(self):
        dil = f" d={_text(self.dilation)}" if max(self.dilation) > 1 else ""
        return (f"{super().describe()}  f={_text(self.fshape)} s={_text(self.stride)} "
                f"p={_text(self.padding)}{dil}")


#: The interior/border split of an overlapped halo exchange is used when the interior (the outputs
#: that read no ghost pixel) is at least this fraction of the output tile.
OVERLAP_MIN_FRACTION = 0.5
#: ... and the output tile has at least this many pixels: on small tiles the smaller GEMMs of the
#: split cost more than the exchange they hide (measured, benchmarks/README.md "Overlap": MNIST's
#: 24x12 conv tile forward 1.11x slower split; bigimage's 256x128 tile 0.97x).
OVERLAP_MIN_OUTPUTS = 4096
#: The interior is computed in this many row bands, MPI progressing the messages between them.
OVERLAP_BANDS = 2


class ConvLayer(WindowLayer):
    """neon's ``ConvLayer``: cross-correlation of ``nofm`` filters ``(C, *f)`` (``(C, fh, fw)``;
    ``(C, fd, fh, fw)`` on volumes), no bias. ``W`` has shape ``(nofm, C, *f)``, drawn as
    neon's ``(C*prod(f), nofm)`` array and transposed so that the numbers equal neon's. Keys:
    ``nofm``, ``weight_init``, ``learning_rate``, the window keys, ``dilation`` (int or one per
    axis, default 1: the step between two taps), and ``activation`` (a distnet addition: an activation
    object such as ``!obj:distnet.activations.RectLin {}`` applied to the conv output; default
    none, neon's behaviour; a RectLin is fused into the conv's output write). On a process grid
    each rank computes its output tile; the filters are replicated and their gradient, a partial
    sum over this rank's output pixels, is summed over ``Topology.grad``."""

    config_types = {"nofm": PositiveInt, "weight_init": WEIGHT_INIT, "learning_rate": NonNegative,
                    "activation": ("obj", "activation"), "dilation": PositiveShape}

    def __init__(self, nofm, fshape, weight_init, learning_rate=None, stride=1, padding=0, nifm=None,
                 ifmshape=None, activation=None, dilation=1, **common):
        super().__init__(fshape, stride, padding, nifm, ifmshape, **common)
        self._given["dilation"] = dilation
        self.dilation = _axes(dilation, len(self.fshape))
        self.nofm = nofm
        self.weight_init = check_weight_init(weight_init)
        self.learning_rate = learning_rate
        self.activation = activation
        self.W = None

    def out_channels(self, nifm):
        return self.nofm

    def place_params(self, plan, position):
        """``W (K, C, *f)`` replicated; its gradient is a partial sum over my output pixels,
        summed over ``grad`` (spatial x data ranks)."""
        shape = (self.nofm, self.in_shape[0]) + tuple(self.fshape)
        return (ParamPlacement(f"{self.name}.W", shape, shape, Ellipsis, OVER_GRAD),)

    def macs(self, plan):
        return self.nofm * self.in_shape[0] * prod(self.fshape) * plan.out_tile.size

    def work_arrays(self, plan):
        """The conv kernels' workspace on the chunk (:func:`~distnet.ops.conv.workspace_arrays`),
        the data gradient's part only when it is computed; with several tiles the chunk's
        gradient (``dxc``); an activation other than ReLU keeps its input (``z``)."""
        relu, C = self._fused_relu(), self.in_shape[0]
        arrays = conv.workspace_arrays((1, C) + plan.chunk.shape, (self.nofm, C) + tuple(self.fshape),
                                       self.stride, relu, self._dil())
        if plan.recvs or plan.sends:    # one tile: the conv writes the tile's gradient itself
            arrays += self._chunk_gradient(plan)
        if self.activation is not None and not relu:
            arrays.append(dict(name="z", elements=self.nofm * plan.out_tile.size))
        return arrays

    def draw_params(self, rng):
        C, f, K = self.in_shape[0], self.fshape, self.nofm
        w = gen_weights(rng, (C * prod(f), K), self.weight_init, self.dtype)
        return [w.T.reshape((K, C) + tuple(f))]

    def _dil(self):
        """The conv ops' ``dilation`` argument (None: 1 on every axis)."""
        return None if max(self.dilation) == 1 else self.dilation

    def params_ready(self):
        self.W = self._params[0].value

    def _fused_relu(self):
        return type(self.activation) is RectLin

    def fprop(self, x):
        """``x (B, C, *s)`` on my input tile -> ``(B, K, *so)`` on my output tile (after the
        activation, if any)."""
        # One process, tile inside its chunk: the conv pads one image at a time (no padded copy).
        self._pad = self._own_crop()
        shape = (x.shape[0], self.nofm) + self.plan.out_tile.shape
        act, relu = self.activation, self._fused_relu()
        if (self._pad is None and self._dil() is None and overlap_enabled("halo")
                and self._overlap_split()):
            # the tile while the halo is in flight, then the borders again: the same dot products
            # (the boxes write into NCHW memory: the split is for large tiles, never CHWN ones)
            self._chwn = False
            out = (self._out("y", shape, x.dtype, x) if act is None or relu
                   else self.work.get("z", shape, x.dtype, like=x))
            self._xc = self._overlapped_chunk(x, lambda xc, box, k: self._conv_box(xc, box, k, out, relu))
            z = out
        else:
            self._xc = xc = x if self._pad is not None else self._chunk_planned(x)
            self._chwn = conv.output_chwn(xc.shape, self.W.shape, self.stride, get_array_module(xc), self._pad,
                                          self._dil())
            out = (self._out("y", shape, xc.dtype, xc, self._chwn) if act is None or relu
                   else self.work.get("z", shape, xc.dtype, like=xc))
            z = conv.conv_fprop(xc, self.W, self.stride, relu=relu, work=self.work, pad=self._pad, out=out,
                                dilation=self._dil())
        if act is None or relu:
            self._y = z
            return z
        self._z, self._y = z, act.fprop(z)
        return self._y

    def _conv_box(self, xc, box, k, out, relu):
        """The outputs of ``box`` (relative to the output tile) from the chunk ``xc`` into
        ``out``, with box ``k``'s own scratch space. A full-width band is read in place; for the
        flat kernel a box whose rows are not one after the other (a border strip) is copied
        into that space first (the im2col kernels read any strides)."""
        rows, cols = self._input_box(box)
        sub = xc[:, :, rows, cols]
        work = self.work
        if (conv.use_flat(sub.shape, self.W.shape, self.stride, get_array_module(sub))
                and not conv.is_flat_readable(sub)):
            sub = work.get(f"box{k}.x", sub.shape, sub.dtype, like=sub)
            sub[...] = xc[:, :, rows, cols]
        conv.conv2d_fprop(sub, self.W, self.stride, relu=relu, work=sub_workspace(work, f"box{k}."),
                          out=out[:, :, box.y0:box.y1, box.x0:box.x1])

    def bprop(self, delta, need_input_grad=True):
        """``delta`` = dL/d(output) -> gradient on my input tile (or None); sets ``W``'s grad."""
        xp, act, ws = get_array_module(delta), self.activation, self.work
        relu_y = None
        if self._fused_relu() and conv.fuses_relu_grad(self._xc, self.W, self.stride, self._pad,
                                                       dilation=self._dil()):
            relu_y, dz = self._y, delta   # the conv kernel applies [y > 0] as it reads delta
        elif self._fused_relu():      # dz = delta * [y > 0]  (y > 0 exactly where z > 0)
            # reuse_buffers: delta is the next layer's buffer, dead after this call: overwrite it
            dz = delta if self.reuse_buffers else ws.get("dz", delta.shape, delta.dtype, like=delta)
            y = self._y
            if xp is not np:          # device: two kernels over the whole batch, not 2 per image
                mask = ws.get("mask", delta.shape, "bool", like=delta)
                xp.multiply(delta, xp.greater(y, 0, out=mask), out=dz)
            elif conv.is_chwn(y):     # CHWN output: by channel blocks, not by image
                run_split(lambda c: xp.multiply(delta[:, c], y[:, c] > 0, out=dz[:, c]),
                          y.shape[1], xp, size=y.size)
            else:
                def relu_grad(share):    # one image at a time: the mask is one image's size
                    s, images = share
                    mask = ws.get(f"mask{s}", delta.shape[1:], "bool", like=delta)
                    for b in images:
                        xp.multiply(delta[b], xp.greater(y[b], 0, out=mask), out=dz[b])
                parallel_map(relu_grad, shares(delta.shape[0], xp), xp)
        elif act is not None:
            dz = act.bprop(self._z, self._y, delta)
        else:
            dz = delta
        if self._pad is not None:     # one process: the gradient of my tile only
            dx_shape = tuple(self._xc.shape[:2]) + self.plan.own.shape
            dx, dw = conv.conv_bprop(self._xc, self.W, dz, self.stride, need_dx=need_input_grad,
                                     pad=self._pad, work=ws, relu_y=relu_y, dilation=self._dil(),
                                       dx_out=self._out("dx", dx_shape, dz.dtype, dz, self._chwn)
                                       if need_input_grad else None)
            self._params[0].grad[...] = dw
            return dx
        dxc, dw = conv.conv_bprop(self._xc, self.W, dz, self.stride, need_dx=need_input_grad,
                                  work=ws, relu_y=relu_y, dilation=self._dil(), dx_out=ws.get("dxc", self._xc.shape, dz.dtype, like=dz)
                                    if need_input_grad else None)
        self._params[0].grad[...] = dw
        return self._grad_planned(dxc) if need_input_grad else None

    def describe(self):
        act = f"  activation={self.activation.name}" if self.activation is not None else ""
        return f"{super().describe()}{act}"


def _axes(v, nd):
    """A window key as sizes per axis: a list as it is, an int on each of ``nd`` axes."""
    return tuple(int(a) for a in v) if isinstance(v, (tuple, list)) else (int(v),) * nd


def _text(sizes):
    """``3x3x3``: sizes per axis as ``distnet show`` writes them."""
    return "x".join(map(str, sizes))


def _given_text(value):
    return str(list(value)) if isinstance(value, (tuple, list)) else str(value)
