"""The process grid of a run: ``world = data x pipe x Py x Px`` and its sub-communicators.

Rank layout (world rank, row-major with the spatial grid fastest, so the ranks that exchange
halos every layer are neighbours in the launcher's numbering, usually on the same node)::

    world_rank = ((d * pipe + p) * Py + iy) * Px + ix

Sub-communicators, made once per run by :meth:`Topology.from_world`:

============  ===========================================  =========================================
``spatial``   ranks with the same ``(d, p)``; 2-D Cartesian  halo exchange (``GlobalArray``)
              ``(Py, Px)``, non-periodic, cart rank = iy*Px+ix
``data``      ranks with the same ``(p, iy, ix)``            (data replicas of one tile)
``pipe``      ranks with the same ``(d, iy, ix)``            pipeline send/recv between stages
``grad``      ranks with the same ``p`` (spatial x data)     Allreduce of replicated-weight gradients
============  ===========================================  =========================================

Grid choice (:func:`choose_grid`): among the factorisations ``Py * Px`` of the spatial rank count
that cut every plane into non-empty tiles (``H >= Py`` and ``W >= Px`` for each ``(H, W)``), take
the most square one (smallest ``max(Py, Px)``), and of two mirror images the one with ``Py <= Px``
(rows of a tile stay long: contiguous memory runs in the halo packing).

This module imports mpi4py only inside :meth:`Topology.from_world`; the grid math is pure.
"""
from ..errors import TopologyError
from ..geometry.divisors import divisor_pairs, fitting_sizes
from .serial import SerialComm


# ---------------------------------------------------------------------------------------------
# Pure grid math (no MPI)
# ---------------------------------------------------------------------------------------------

def factor_pairs(n):
    """All ``(Py, Px)`` with ``Py * Px == n``, ``Py`` ascending."""
    if n < 1:
        raise TopologyError(f"a process grid needs at least 1 rank, got {n}")
    return divisor_pairs(n)


def _grid_order(grid):
    """Sort key: most square first, then ``Py <= Px`` before its mirror image."""
    py, px = grid
    return (max(py, px), py)


def grid_failure(grid, planes):
    """``None`` if ``grid`` cuts every plane into non-empty tiles, else a phrase saying which
    plane fails and why (e.g. ``"plane 5x28: 5 rows < 6"``). A plane may carry a label as a
    third item (``(H, W, "the output of layer 'conv2'")``), which the phrase then names."""
    py, px = grid
    for plane in planes or ():
        h, w = plane[:2]
        what = f"plane {h}x{w}" + (f" ({plane[2]})" if len(plane) > 2 else "")
        if h < py:
            return f"{what}: {h} row{'s' * (h != 1)} < {py}"
        if w < px:
            return f"{what}: {w} column{'s' * (w != 1)} < {px}"
    return None


def valid_grids(nranks, planes=()):
    """All grids ``(Py, Px)`` of ``nranks`` ranks that cut every ``(H, W)`` in ``planes`` into
    non-empty tiles, best first (the order :func:`choose_grid` picks from)."""
    return sorted((g for g in factor_pairs(nranks) if grid_failure(g, planes) is None),
                  key=_grid_order)


def _bounds(planes):
    """``(min H, min W)`` over ``planes`` (``None`` when there is none): the largest ``Py``
    and ``Px`` that cut every plane."""
    planes = list(planes or ())
    if not planes:
        return None, None
    return min(p[0] for p in planes), min(p[1] for p in planes)


def working_sizes(planes=(), limit=64):
    """Spatial rank counts ``1 <= n <= limit`` for which some grid fits every plane."""
    hmax, wmax = _bounds(planes)
    return fitting_sizes(hmax, wmax, limit, head=limit)


def _fmt_grid(grid):
    return f"{grid[0]}x{grid[1]}"


def _fmt_grids(grids):
    return ", ".join(_fmt_grid(g) for g in grids) or "none"


def _suggest_sizes(nranks, planes, replicas):
    """Text listing the world sizes that would work, around ``nranks`` spatial ranks."""
    hmax, wmax = _bounds(planes)
    head = 64
    sizes = fitting_sizes(hmax, wmax, max(16, 2 * nranks), near=nranks, head=head)
    text = ", ".join(str(n * replicas) for n in sizes if n <= head)
    near = [str(n * replicas) for n in sizes if n > head]
    return text + (f" (near {nranks * replicas}: {', '.join(near)})" if near else "")


def choose_grid(nranks, planes=()):
    """The grid ``(Py, Px)`` distnet uses for ``nranks`` spatial ranks (see the module docstring).

    Raises :class:`TopologyError` naming, for each factorisation, the plane that fails, and the
    rank counts that would work.
    """
    grids = valid_grids(nranks, planes)
    if grids:
        return grids[0]
    raise TopologyError(_no_grid_message(nranks, planes))


def _no_grid_message(nranks, planes, data=1, pipe=1):
    grids = sorted(factor_pairs(nranks), key=_grid_order)
    fails = "; ".join(f"{_fmt_grid(g)} fails on {grid_failure(g, planes)}" for g in grids[:6])
    if len(grids) > 6:
        fails += f"; and {len(grids) - 6} more grids"
    replicas = data * pipe
    head = f"no process grid of {nranks} spatial ranks"
    if replicas > 1:
        head = (f"the run has {nranks * replicas} ranks = data {data} x pipe {pipe} x {nranks} "
                f"spatial, and {head}")
    what = "world sizes" if replicas > 1 else "rank counts"
    return (f"{head} cuts every plane into non-empty tiles ({fails}). "
            f"{what.capitalize()} that work: {_suggest_sizes(nranks, planes, replicas)}")


def check_grid(grid, nranks, planes=(), replicas=1):
    """Validate a user-given ``grid`` for ``nranks`` spatial ranks; returns it as a tuple.

    ``replicas = data * pipe`` only enters the messages (world size = replicas * nranks).
    """
    try:
        grid = tuple(int(g) for g in grid)
    except (TypeError, ValueError):
        raise TopologyError(f"grid must be two integers (Py, Px), got {grid!r}") from None
    if len(grid) != 2 or min(grid) < 1:
        raise TopologyError(f"grid must be two positive integers (Py, Px), got {grid!r}")
    world = nranks * replicas
    if grid[0] * grid[1] != nranks:
        need = grid[0] * grid[1] * replicas
        reps = f" x {replicas} data/pipe replicas" if replicas > 1 else ""
        raise TopologyError(
            f"grid {_fmt_grid(grid)}{reps} needs {need} ranks, but the run has {world}. "
            f"Grids of {nranks} spatial ranks that fit: {_fmt_grids(valid_grids(nranks, planes))}")
    why = grid_failure(grid, planes)
    if why is not None:
        raise TopologyError(
            f"grid {_fmt_grid(grid)} cannot cut {why}: every rank must own at least one row and "
            f"one column. Grids of {nranks} ranks that fit: {_fmt_grids(valid_grids(nranks, planes))}; "
            f"spatial rank counts that work: {_suggest_sizes(nranks, planes, 1)}")
    return grid


# ---------------------------------------------------------------------------------------------
# Topology
# ---------------------------------------------------------------------------------------------

class Topology:
    """Where this process sits in ``world = data x pipe x Py x Px``, with one communicator per axis.

    Attributes
    ----------
    world : the world communicator (mpi4py ``Comm`` or :class:`SerialComm`).
    spatial : 2-D Cartesian communicator of my ``(Py, Px)`` grid (halo exchange).
    data, pipe : communicators along the data-replica and pipeline axes.
    grad : spatial x data, the ranks that hold the same replicated parameters.
    grid : ``(Py, Px)``; coords : my ``(iy, ix)``.
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
        """Number of ranks in one spatial grid, ``Py * Px``."""
        return self.grid[0] * self.grid[1]

    @classmethod
    def serial(cls):
        """The one-process topology: every communicator a :class:`SerialComm` (no mpi4py)."""
        return cls(SerialComm("world"), SerialComm("spatial"), SerialComm("data"),
                   SerialComm("pipe"), SerialComm("grad"), (1, 1), (0, 0))

    @classmethod
    def from_world(cls, grid=None, data=1, pipe=1, planes=None, world=None):
        """Build the topology of the current MPI run (collective over ``world``).

        grid : ``(Py, Px)`` or None to :func:`choose_grid` one that fits ``planes``.
        data, pipe : replica / pipeline-stage counts; ``world size = data * pipe * Py * Px``.
        planes : ``(H, W)`` of every spatial plane the grid must cut (inputs and outputs of each
            spatial layer); each tile must own at least one row and one column.
        world : communicator to split (default ``MPI.COMM_WORLD``; tests pass sub-communicators).

        Raises :class:`TopologyError` (on every rank alike) if the sizes do not fit.
        """
        if world is None:
            from mpi4py import MPI  # lazily: importing distnet must not initialise MPI
            world = MPI.COMM_WORLD
        planes = [tuple(p) for p in (planes or ())]
        size, rank = world.Get_size(), world.Get_rank()
        for name, n in (("data", data), ("pipe", pipe)):
            if not isinstance(n, int) or n < 1:
                raise TopologyError(f"{name} must be a positive integer, got {n!r}")
        replicas = data * pipe
        if size % replicas:
            raise TopologyError(
                f"the run has {size} ranks, which data={data} x pipe={pipe} does not divide; "
                f"use a multiple of {replicas} ranks, e.g. {replicas * (size // replicas + 1)}")
        nspatial = size // replicas
        if grid is None:
            if not valid_grids(nspatial, planes):
                raise TopologyError(_no_grid_message(nspatial, planes, data, pipe))
            grid = choose_grid(nspatial, planes)
        else:
            grid = check_grid(grid, nspatial, planes, replicas)

        d, rest = divmod(rank, pipe * nspatial)
        p, s = divmod(rest, nspatial)
        # Split is collective over world: every rank calls each one, in the same order.
        flat = world.Split(color=d * pipe + p, key=s)
        spatial = flat.Create_cart(dims=list(grid), periods=[False, False], reorder=False)
        flat.Free()
        data_comm = world.Split(color=p * nspatial + s, key=d)
        pipe_comm = world.Split(color=d * nspatial + s, key=p)
        grad = world.Split(color=p, key=d * nspatial + s)
        coords = tuple(spatial.Get_coords(spatial.Get_rank()))
        assert coords == divmod(s, grid[1]), (coords, s, grid)
        return cls(world, spatial, data_comm, pipe_comm, grad, grid, coords, data_index=d,
                   pipe_index=p, ndata=data, npipe=pipe)

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
            comm = getattr(self, name)
            if comm is not None and not isinstance(comm, SerialComm):
                comm.Free()
            setattr(self, name, None)

    def __repr__(self):
        return (f"Topology(rank {self.rank}/{self.size}: data {self.data_index}/{self.ndata}, "
                f"pipe {self.pipe_index}/{self.npipe}, grid {_fmt_grid(self.grid)} at {self.coords})")
