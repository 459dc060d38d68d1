"""The process grid of a run: ``world = data x pipe x Py x Px`` (``x Pz x Py x Px`` for volumes,
any number of spatial axes) and its sub-communicators.

Rank layout (world rank, row-major with the spatial grid fastest, so the ranks that exchange
halos every layer are neighbours in the launcher's numbering, usually on the same node)::

    world_rank = ((d * pipe + p) * Py + iy) * Px + ix
    world_rank = (((d * pipe + p) * Pz + iz) * Py + iy) * Px + ix      (3-D)

Sub-communicators, made once per run by :meth:`Topology.from_world`:

============  ===========================================  =========================================
``spatial``   ranks with the same ``(d, p)``; Cartesian      halo exchange (``GlobalArray``)
              ``(Py, Px)`` or ``(Pz, Py, Px)``, non-periodic,
              cart rank row-major (iy*Px+ix in 2-D)
``data``      ranks with the same ``p`` and spatial coords   (data replicas of one tile)
``pipe``      ranks with the same ``d`` and spatial coords   pipeline send/recv between stages
``grad``      ranks with the same ``p`` (spatial x data)     Allreduce of replicated-weight gradients
============  ===========================================  =========================================

How the world is cut (replicas, stages, grid choice) is decided by the pure resolver
:func:`~distnet.geometry.grid.resolve_layout`; this module only builds the communicators of a
:class:`~distnet.geometry.grid.GridLayout`. It imports mpi4py only inside its methods.
"""
from math import prod

from ..geometry.grid import (GridLayout, GridPosition, check_grid, choose_grid, factor_pairs,
                             grid_failure, resolve_layout, valid_grids, working_sizes)
from ..geometry.partition import coords_of, shape_text
from .serial import SerialComm

__all__ = ["Topology", "check_grid", "choose_grid", "factor_pairs", "grid_failure", "valid_grids",
           "working_sizes"]


# ---------------------------------------------------------------------------------------------
# Topology
# ---------------------------------------------------------------------------------------------

class Topology:
    """Where this process sits in ``world = data x pipe x`` spatial grid, with one communicator
    per axis.

    Attributes
    ----------
    world : the world communicator (mpi4py ``Comm`` or :class:`SerialComm`).
    spatial : Cartesian communicator of my spatial grid (halo exchange), as many axes as it.
    data, pipe : communicators along the data-replica and pipeline axes.
    grad : spatial x data, the ranks that hold the same replicated parameters.
    grid : ``(Py, Px)`` (``(Pz, Py, Px)``, ...); coords : my ``(iy, ix)`` (``(iz, iy, ix)``, ...).
    data_index, pipe_index, ndata, npipe : my position along / length of the two other axes.
    rank, size, is_root : world rank, world size, ``rank == 0``.
    """

    def __init__(self, world, spatial, data, pipe, grad, grid, coords, data_index=0, pipe_index=0,
                 ndata=1, npipe=1):
        self.world = world
        self.spatial = spatial
        self.data = data
        self.pipe = pipe
        self.grad = grad
        self.grid = tuple(grid)
        self.coords = tuple(coords)
        self.data_index = data_index
        self.pipe_index = pipe_index
        self.ndata = ndata
        self.npipe = npipe
        self.rank = world.Get_rank()
        self.size = world.Get_size()
        self.is_root = self.rank == 0

    @property
    def nspatial(self):
        """Number of ranks in one spatial grid, ``Py * Px`` (the product of its sides)."""
        return prod(self.grid)

    @classmethod
    def serial(cls, ndim=2):
        """The one-process topology of ``ndim`` spatial axes: every communicator a
        :class:`SerialComm` (no mpi4py)."""
        return cls(SerialComm("world"), SerialComm("spatial", ndim), SerialComm("data"),
                   SerialComm("pipe"), SerialComm("grad"), (1,) * ndim, (0,) * ndim)

    @classmethod
    def from_world(cls, grid=None, data=1, pipe=1, planes=None, world=None):
        """Build the topology of the current MPI run (collective over ``world``).

        grid : ``(Py, Px)`` (``(Pz, Py, Px)``) or None to choose one that fits ``planes``.
        data, pipe : replica / pipeline-stage counts; ``world size = data * pipe * prod(grid)``.
        planes : ``(H, W)`` (``(D, H, W)``) of every spatial array the grid must cut (inputs and
            outputs of each spatial layer); each tile must own at least one index per axis.
        world : communicator to split (default ``MPI.COMM_WORLD``; tests pass sub-communicators).

        The sizes are checked by :func:`~distnet.geometry.grid.resolve_layout` (a spatially
        distributed run); raises :class:`TopologyError` (on every rank alike) if they do not fit.
        """
        world = cls.world_comm(world)
        layout = resolve_layout(world.Get_size(), dist_flag=True, data=data, pipe=pipe, grid=grid,
                                planes=planes)
        return cls.from_layout(layout, world)

    @staticmethod
    def world_comm(world=None):
        """``world``, or MPI's world communicator (imports mpi4py: initialises MPI). A process
        that no launcher started and that finds no MPI library (distnet installed without the
        ``mpich`` extra on a machine without MPI) is a world of one: a :class:`SerialComm`."""
        if world is None:
            try:
                from mpi4py import MPI  # lazily: importing distnet must not initialise MPI
            except (ImportError, RuntimeError):     # mpi4py's binary wheel found no libmpi
                from .launcher import launcher_world_size
                if launcher_world_size()[0] > 1:
                    raise
                from .serial import SerialComm
                return SerialComm()
            world = MPI.COMM_WORLD
        return world

    @classmethod
    def from_layout(cls, layout, world=None):
        """The communicators of ``layout`` (a :class:`GridLayout` whose ``size`` is the size of
        ``world``, default ``MPI.COMM_WORLD``). Collective over ``world``."""
        world = cls.world_comm(world)
        size, rank = world.Get_size(), world.Get_rank()
        assert layout.size == size, (layout, size)
        grid, data, pipe, nspatial = layout.grid, layout.data, layout.pipe, layout.nspatial
        d, rest = divmod(rank, pipe * nspatial)
        p, s = divmod(rest, nspatial)
        # Split is collective over world: every rank calls each one, in the same order.
        flat = world.Split(color=d * pipe + p, key=s)
        spatial = flat.Create_cart(dims=list(grid), periods=[False] * len(grid), reorder=False)
        flat.Free()
        data_comm = world.Split(color=p * nspatial + s, key=d)
        pipe_comm = world.Split(color=d * nspatial + s, key=p)
        grad = world.Split(color=p, key=d * nspatial + s)
        coords = tuple(spatial.Get_coords(spatial.Get_rank()))
        assert coords == coords_of(grid, s), (coords, s, grid)
        return cls(world, spatial, data_comm, pipe_comm, grad, grid, coords, data_index=d,
                   pipe_index=p, ndata=data, npipe=pipe)

    @property
    def layout(self):
        """The :class:`GridLayout` of the run."""
        return GridLayout(self.ndata, self.npipe, self.grid)

    @property
    def position(self):
        """This rank's :class:`GridPosition` (what layer placements are computed from)."""
        return GridPosition(self.grid, self.coords, self.ndata, self.npipe, self.data_index,
                            self.pipe_index)

    def comm(self, name):
        """The sub-communicator ``name``: ``spatial``, ``data``, ``pipe`` or ``grad``."""
        if name not in ("spatial", "data", "pipe", "grad"):
            raise ValueError(f"no communicator {name!r}")
        return getattr(self, name)

    def local_rank(self):
        """This rank's index among the ranks on its node (a shared-memory split of ``world``,
        collective over ``world``); 0 in a serial run. GPU backends pick their device by it."""
        if isinstance(self.world, SerialComm):
            return 0
        from mpi4py import MPI
        node = self.world.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            return node.Get_rank()
        finally:
            node.Free()

    def free(self):
        """Free the sub-communicators (not ``world``). Collective over each of them."""
        for name in ("spatial", "data", "pipe", "grad"):
            comm = self.comm(name)
            if comm is not None and not isinstance(comm, SerialComm):
                comm.Free()
            setattr(self, name, None)

    def __repr__(self):
        return (f"Topology(rank {self.rank}/{self.size}: data {self.data_index}/{self.ndata}, "
                f"pipe {self.pipe_index}/{self.npipe}, grid {shape_text(self.grid)} at {self.coords})")
