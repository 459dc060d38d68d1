"""A layer's placement: everything about how one layer is distributed, as one immutable value.

Configuring a layer on a rank's :class:`~distnet.geometry.grid.GridPosition` yields a
:class:`Placement` (``layer.place(in_layout, position)``, a pure function: no MPI, no arrays), so
any rank's placement can be computed on one process. Everything that needs a distribution fact
reads it from there and nowhere else:

* initialisation slices each global parameter draw with :attr:`ParamPlacement.index`;
* checkpoints gather and restore every parameter in its global layout
  (:attr:`ParamPlacement.global_shape` / ``index``);
* the training step sums each gradient over :attr:`ParamPlacement.reduce_over` (one flat
  Allreduce per communicator and dtype: the gradient buckets);
* pipeline messages take their shapes from :attr:`Placement.out_layout`;
* ``distnet show`` / ``plan`` report tiles, chunks, halo bytes, Allreduce payloads and parameter
  counts from the placements of the ranks they describe.

Vocabulary (compare PyTorch DTensor's ``Replicate()`` / ``Shard(dim)`` / ``Partial()``):

============  =====================================================================================
layout kind   what each rank holds of an activation ``(B, ...)``
============  =====================================================================================
replicated    the whole activation (every rank the same)
spatial       its tile of every image plane ``(C, h, w)``, cut by :func:`~distnet.geometry.tile_of`
============  =====================================================================================

Parameters are replicated (``index`` is ``...``) or sharded (``index`` slices the global tensor:
FC columns of a tile, a vecpar block of FC columns, the filters of a locally connected output
tile); a vecpar FC layer's input is replicated and it takes its block of the features itself.
"""
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from ..geometry import tile_of


class LayoutKind(Enum):
    """How an activation is spread over the ranks of a spatial grid (the module docstring's
    table; PyTorch DTensor's ``Shard`` / ``Replicate``). Printed as its word (``spatial``)."""

    #: Every rank holds its tile (block partition on the process grid) of every image/channel.
    SPATIAL = "spatial"
    #: Every rank holds the whole activation.
    REPLICATED = "replicated"

    def __str__(self):
        return self.value


SPATIAL = LayoutKind.SPATIAL
REPLICATED = LayoutKind.REPLICATED


class GradientSum(Enum):
    """Who sums a parameter's gradient before the update (PyTorch DTensor's ``Partial``: the
    value on a rank is a partial sum until reduced over a communicator). :attr:`comm` names the
    :meth:`~distnet.comm.topology.Topology.comm` communicator (None: nothing sums it)."""

    #: The gradient is a partial sum over this rank's output pixels (conv filters shared by all
    #: tiles): spatial *and* data ranks sum it (``Topology.grad``).
    OVER_GRAD = "grad"
    #: The gradient is complete on this rank for its samples (sharded filters, FC columns): only
    #: data replicas sum it (``Topology.data``).
    OVER_DATA = "data"
    #: The gradient is already complete (global) on every rank that holds the parameter: the
    #: layer summed what it needed itself (batch norm's ``dgamma`` / ``dbeta`` come out of its
    #: backward Allreduce over ``grad``): the training step sums it over nothing.
    COMPLETE = None

    @property
    def comm(self):
        """The name of the communicator that sums the gradient (``grad``, ``data``), or None."""
        return self.value

    def __str__(self):
        return "complete" if self.value is None else self.value


OVER_GRAD = GradientSum.OVER_GRAD
OVER_DATA = GradientSum.OVER_DATA
COMPLETE = GradientSum.COMPLETE


def _require(value, kind, what):
    """``value`` if it is a member of the enum ``kind``; a TypeError naming ``what`` otherwise
    (a plugin that still passes the old strings or None learns it at once)."""
    if not isinstance(value, kind):
        names = ", ".join(m.name for m in kind)
        raise TypeError(f"{what} must be a {kind.__name__} ({names}), got {value!r}")
    return value


@dataclass(frozen=True)
class Layout:
    """How an activation is spread: ``kind`` (a :class:`LayoutKind`), its global shape (without
    the batch axis) and this rank's part of it."""

    kind: LayoutKind
    global_shape: tuple
    local_shape: tuple

    def __post_init__(self):
        _require(self.kind, LayoutKind, "a layout's kind")

    @classmethod
    def of(cls, kind, global_shape, position):
        """The layout ``kind`` of an activation of ``global_shape`` on ``position``."""
        shape = tuple(global_shape)
        if kind == SPATIAL and len(shape) == len(position.grid) + 1:
            return cls(kind, shape, (shape[0],) + tile_of(shape[1:], position.grid, position.coords).shape)
        return cls(kind, shape, shape)


@dataclass(frozen=True, eq=False)
class ParamPlacement:
    """One parameter: its ``global_shape``; ``index``, the numpy index of this rank's part in
    the global tensor (``G[index]`` has ``local_shape``; ``Ellipsis`` when replicated);
    ``reduce_over``, who sums its gradient (a :class:`GradientSum`: :data:`OVER_GRAD` or
    :data:`OVER_DATA`, a communicator of one rank sums nothing; :data:`COMPLETE`: the layer's
    backward already made it global, nothing sums it); ``sharded``: ranks of a
    spatial grid hold different parts. The same class describes a layer's *buffers*
    (:attr:`Placement.buffers`: state that is not trained, such as batch norm's running
    statistics; their ``reduce_over`` is :data:`COMPLETE`)."""

    name: str
    global_shape: tuple
    local_shape: tuple
    index: object = Ellipsis
    reduce_over: GradientSum = OVER_GRAD
    sharded: bool = False

    def __post_init__(self):
        _require(self.reduce_over, GradientSum, f"the reduce_over of parameter {self.name!r}")

    @property
    def size(self):
        """Elements of the global tensor."""
        return int(np.prod(self.global_shape))

    @property
    def local_size(self):
        """Elements on this rank."""
        return int(np.prod(self.local_shape))

    def local_part(self, global_value):
        """This rank's part of a global array (a contiguous copy)."""
        if self.index is Ellipsis:
            return np.ascontiguousarray(global_value)
        return np.ascontiguousarray(global_value[self.index])


@dataclass(frozen=True, eq=False)
class HaloExchange:
    """The chunk exchange of a window layer: the ``plan`` (:class:`~distnet.geometry.HaloPlan`:
    own tile, chunk, ghost boxes per peer) on ``channels`` maps, ``per_step`` times forward
    (LCN: twice, x then s) and as many adjoint exchanges backward (when the input gradient is
    needed). On a 1x1 grid it has no peers: the chunk is zero padding."""

    plan: object
    channels: int
    per_step: int = 1
    #: The ``(window_y, window_x)`` :class:`~distnet.geometry.Window` rules (``distnet show``
    #: computes the halo widths of every rank from them, :meth:`grid_costs` every rank's cost).
    windows: tuple = None
    #: True when the process grid cuts the plane into several tiles: the chunk comes from a
    #: :class:`~distnet.comm.global_array.GlobalArray` over ``Topology.spatial`` (collective over
    #: the rank's halo peers); False on one tile: zero padding, no communicator.
    split: bool = False

    def sent(self):
        """Elements per sample this rank sends in one forward exchange (``own ∩ chunk(peer)``)."""
        return self.channels * sum(t.box.size for t in self.plan.sends)

    def received(self):
        """Elements per sample this rank receives in one forward exchange (its ghost boxes);
        the adjoint sends them back."""
        return self.channels * sum(t.box.size for t in self.plan.recvs)

    def messages(self):
        """Messages this rank sends in one forward exchange (one per peer)."""
        return len(self.plan.sends)

    def grid_costs(self):
        """The same exchange on every rank of the grid (:class:`~distnet.layers.halo_costs.GridHalo`:
        what :meth:`sent`, :meth:`received` and :meth:`messages` give on each rank, as arrays)."""
        from .halo_costs import GridHalo
        return GridHalo(self.plan.in_plane, self.windows, self.plan.grid, self.channels)


@dataclass(frozen=True, eq=False)
class Collective:
    """An Allreduce of activations a layer does per step: ``per_sample`` elements per sample
    (plus ``per_step`` float64 elements independent of the batch: batch norm's per-channel sums)
    summed over the communicator ``over`` (``spatial`` or ``grad``), forward
    (``backward=False``) or backward. ``training_only``: evaluation skips it."""

    over: str
    per_sample: int
    backward: bool = False
    per_step: int = 0
    training_only: bool = False

    def payload(self, batch, itemsize, input_gradient=True):
        """Bytes this rank contributes to it in one training step on ``batch`` samples of
        ``itemsize``-byte numbers: the per-sample part (a backward one only when the input
        gradient is computed: not for a model's first layer) and the float64 statistics, which
        a layer's parameter gradients need either way."""
        rows = batch * itemsize * self.per_sample if input_gradient or not self.backward else 0
        return rows + 8 * self.per_step


@dataclass(frozen=True)
class WorkArray:
    """A scratch array of a layer's training step, as its op sizes it: ``elements`` per sample
    (``per_sample``) or in all, of ``itemsize`` bytes (None: the model's numbers). ``kept``: held
    from step to step (the layer's :class:`~distnet.ops.workspace.Workspace`, or state kept for
    the backward pass beyond :meth:`Placement.activation_bytes`); else a temporary alive only
    inside the layer's ``phase`` (``"forward"`` or ``"backward"``), freed when the call returns."""

    name: str
    elements: int = 0
    kept: bool = True
    per_sample: bool = True
    itemsize: int = None
    phase: str = "backward"
    #: Only there when the layer computes its input gradient (not for a model's first layer).
    input_gradient: bool = False
    #: A kernel's buffers sized in bytes: ``bytes_of(itemsize, images)`` gives them for the
    #: images one copy serves (per sample or in all as ``per_sample`` says), not ``elements``.
    bytes_of: object = None
    #: One kernel thread's buffers, the threads sharing out this many units of work per sample
    #: (images: 1; blocks of channels: their number): a copy per thread, at most one per unit;
    #: 0: one array.
    per_thread: int = 0

    def nbytes(self, batch, itemsize, threads=1):
        copies = max(1, min(threads, batch * self.per_thread)) if self.per_thread else 1
        if self.bytes_of is not None:
            size = self.bytes_of(itemsize, -(-batch // copies))
        else:
            size = int(self.elements) * (self.itemsize or itemsize)
        return size * (batch if self.per_sample else 1) * copies


@dataclass(frozen=True, eq=False)
class Placement:
    """The distribution of one layer on one rank (module docstring)."""

    in_layout: Layout
    out_layout: Layout
    params: tuple = ()
    #: :class:`ParamPlacement` of each buffer: state that is not trained but belongs to the
    #: model (batch norm's running mean / variance): initialised by the layer, stored in
    #: checkpoints in its global layout like a parameter, restored on any grid.
    buffers: tuple = ()
    halos: tuple = ()
    collectives: tuple = ()
    #: The input chunk ``(C, hc, wc)`` a window layer keeps per sample (tile + halo + padding).
    chunk_shape: tuple = None
    #: Multiply-adds per sample of the forward pass (x2 for FLOPs; backward: x2 more).
    macs: int = 0
    extra: dict = field(default_factory=dict)
    #: :class:`WorkArray` of the step on this rank: the workspace and temporaries its ops size.
    work: tuple = ()

    def param(self, name):
        """The :class:`ParamPlacement` called ``name`` (a parameter or a buffer)."""
        for p in self.params + self.buffers:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def param_count(self):
        """Elements of all global parameter tensors."""
        return sum(p.size for p in self.params)

    @property
    def local_param_count(self):
        """Elements of the parameters this rank holds."""
        return sum(p.local_size for p in self.params)

    @property
    def sharded(self):
        return any(p.sharded for p in self.params)

    # -- what one training step costs on this rank (the cost model, distnet.plan, sums these) --
    def gradient_payload(self, itemsize):
        """``{communicator: bytes}`` of this rank's parameter gradients summed over each of
        :data:`OVER_GRAD` and :data:`OVER_DATA` per step (its share of the gradient buckets)."""
        return {over: sum(p.local_size for p in self.params if p.reduce_over == over) * itemsize
                for over in (OVER_GRAD, OVER_DATA)}

    def activation_payload(self, batch, itemsize, input_gradient=True, over=None):
        """Bytes of this rank's activation Allreduces in one training step (only those over
        the communicator ``over`` when given): :meth:`Collective.payload` summed."""
        return sum(c.payload(batch, itemsize, input_gradient) for c in self.collectives
                   if over is None or c.over == over)

    def flops(self, batch, input_gradient=True):
        """Floating-point operations of one training step on ``batch`` samples: the forward
        multiply-adds (2 each), as many for the weight gradient and, with ``input_gradient``,
        for the input gradient."""
        return 2.0 * batch * self.macs * (3 if input_gradient else 2)

    def _io_elements(self):
        """``(input, output)`` elements per sample this rank's kernel reads and writes: a window
        layer's input chunk and output tile; another layer's input as its multiply-adds count it
        (a fully connected layer's input features; none for an element-wise layer, whose input
        is the previous layer's output) and its output."""
        out = int(np.prod(self.out_layout.local_shape))
        if self.chunk_shape is not None:
            return int(np.prod(self.chunk_shape)), out
        return (self.macs // out if out else 0), out

    def activation_bytes(self, batch, itemsize, io=None):
        """Bytes of activations this rank keeps for the backward pass: a window layer its
        output tile and input chunk, another layer its output and pre-activation. ``io``:
        ``(input, output)`` elements per sample of another rank of the layer instead (arrays
        of every rank's do)."""
        chunk, out = self._io_elements() if io is None else io
        return batch * itemsize * (out + (chunk if self.chunk_shape is not None else out))

    def workspace_bytes(self, batch, itemsize, input_gradient=True, threads=1):
        """Bytes of this rank's :attr:`work` arrays kept from step to step (those of the input
        gradient only with ``input_gradient``) with ``threads`` kernel threads."""
        return sum(a.nbytes(batch, itemsize, threads) for a in self.work
                   if a.kept and (input_gradient or not a.input_gradient))

    def transient_bytes(self, batch, itemsize, input_gradient=True):
        """Bytes of temporaries at this rank's peak inside the layer: the larger of its forward
        (its temporaries) and its backward (the output gradient it is given, the input gradient
        it makes when ``input_gradient``, and its temporaries)."""
        def phase(name):
            return sum(a.nbytes(batch, itemsize) for a in self.work if not a.kept and a.phase == name)
        out = int(np.prod(self.out_layout.local_shape)) if self.out_layout is not None else 0
        inputs = int(np.prod(self.in_layout.local_shape)) if input_gradient and self.in_layout is not None else 0
        grads = batch * itemsize * (out + inputs)
        return max(phase("forward"), grads + phase("backward"))

    def memory_traffic(self, batch, itemsize, input_gradient=True, io=None):
        """Bytes one training step moves through memory on this rank (the memory-bound part):
        a window layer reads its chunk and writes its output tile, forward and (with the input
        gradient) backward; another layer reads its input and writes its output. ``io``: as
        for :meth:`activation_bytes`."""
        inputs, out = self._io_elements() if io is None else io
        if self.chunk_shape is None:
            return 2.0 * batch * itemsize * (inputs + out)
        return 2.0 * batch * itemsize * (inputs + out) * (2 if input_gradient else 1)
