"""Cutting a world of ranks into ``data x pipe x Py x Px``: the one grid resolver (pure, no MPI).

:func:`resolve_layout` decides, from the world size and an experiment's keys, how many data
replicas and pipeline stages there are and which spatial grid cuts the images. ``distnet run``
(through :meth:`~distnet.comm.topology.Topology.from_world`), ``distnet show`` and ``distnet
plan`` all call it, so what they report is what a run does.

Grid choice (:func:`choose_grid`): among the factorisations ``Py * Px`` of the spatial rank count
that cut every plane into non-empty tiles (``H >= Py`` and ``W >= Px`` for each ``(H, W)``), take
the most square one (smallest ``max(Py, Px)``), and of two mirror images the one with ``Py <= Px``
(rows of a tile stay long: contiguous memory runs in the halo packing).

:class:`GridPosition` is one rank's place in such a layout; a layer's placement
(:mod:`distnet.layers.placement`) is a pure function of it, so any rank's placement can be
computed on one process.
"""
from dataclasses import dataclass

from ..errors import TopologyError


# ---------------------------------------------------------------------------------------------
# Factorisations of the spatial rank count
# ---------------------------------------------------------------------------------------------

def factor_pairs(n):
    """All ``(Py, Px)`` with ``Py * Px == n``, ``Py`` ascending (``O(sqrt n)``)."""
    if n < 1:
        raise TopologyError(f"a process grid needs at least 1 rank, got {n}")
    low, high = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            low.append((d, n // d))
            if d * d != n:
                high.append((n // d, d))
        d += 1
    return low + high[::-1]


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


def working_sizes(planes=(), limit=64):
    """Spatial rank counts ``1 <= n <= limit`` for which some grid fits every plane."""
    return [n for n in range(1, limit + 1) if valid_grids(n, planes)]


def _fmt_grid(grid):
    return f"{grid[0]}x{grid[1]}"


def _fmt_grids(grids):
    return ", ".join(_fmt_grid(g) for g in grids) or "none"


#: Rank counts listed in full in error messages; beyond, only the nearest working sizes.
_LISTED = 64


def _suggest_sizes(nranks, planes, replicas):
    """Text listing the world sizes that would work, around ``nranks`` spatial ranks: every
    working count up to ``max(16, 2 * nranks)`` for small runs; for large ones those up to
    :data:`_LISTED` and the nearest working counts below and above ``nranks`` (a few divisor
    searches, not one per count: fast for any ``nranks``)."""
    limit = max(16, 2 * nranks)
    sizes = working_sizes(planes, limit=min(limit, _LISTED))
    if limit > _LISTED:
        near = []
        for step in (-1, 1):
            n, tries = nranks + step, 0
            while _LISTED < n and tries < 256 and not valid_grids(n, planes):
                n, tries = n + step, tries + 1
            if n > _LISTED and tries < 256:
                near.append(n)
        sizes += sorted(near)
    return ", ".join(str(n * replicas) for n in sizes)


def choose_grid(nranks, planes=()):
    """The grid ``(Py, Px)`` distnet uses for ``nranks`` spatial ranks (see the module docstring).

    Raises :class:`TopologyError` naming, for each factorisation, the plane that fails, and the
    rank counts that would work.
    """
    grids = valid_grids(nranks, planes)
    if grids:
        return grids[0]
    raise TopologyError(no_grid_message(nranks, planes))


def no_grid_message(nranks, planes, data=1, pipe=1):
    """Why no grid of ``nranks`` spatial ranks fits ``planes``, with the sizes that would."""
    fails = "; ".join(f"{_fmt_grid(g)} fails on {grid_failure(g, planes)}"
                      for g in sorted(factor_pairs(nranks), key=_grid_order)[:8])
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
        ranks = grid[0] * grid[1]
        keep = ""
        if world % ranks == 0 and world // ranks > 1:   # the grid fits with more replicas
            k = world // ranks
            keep = (f"; or keep grid {_fmt_grid(grid)} with data: {k} ({k} replicas x {ranks} = {world} ranks)"
                    if replicas == 1 else f"; or keep grid {_fmt_grid(grid)} with data x pipe = {k}")
        raise TopologyError(
            f"grid {_fmt_grid(grid)}{reps} needs {need} ranks, but the run has {world}. "
            f"Grids of {nranks} spatial ranks that fit: {_fmt_grids(valid_grids(nranks, planes))}{keep}")
    why = grid_failure(grid, planes)
    if why is not None:
        raise TopologyError(
            f"grid {_fmt_grid(grid)} cannot cut {why}: every rank must own at least one row and "
            f"one column. Grids of {nranks} ranks that fit: {_fmt_grids(valid_grids(nranks, planes))}; "
            f"spatial rank counts that work: {_suggest_sizes(nranks, planes, 1)}")
    return grid


# ---------------------------------------------------------------------------------------------
# The resolver
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GridLayout:
    """How a world is cut: ``size = data * pipe * Py * Px`` ranks."""

    data: int
    pipe: int
    grid: tuple

    @property
    def nspatial(self):
        return self.grid[0] * self.grid[1]

    @property
    def size(self):
        return self.data * self.pipe * self.nspatial

    def position(self, rank):
        """The :class:`GridPosition` of world rank ``rank``
        (``rank = ((d * pipe + p) * Py + iy) * Px + ix``)."""
        d, rest = divmod(rank, self.pipe * self.nspatial)
        p, s = divmod(rest, self.nspatial)
        return GridPosition(self.grid, divmod(s, self.grid[1]), self.data, self.pipe, d, p)

    def __str__(self):
        return f"data {self.data} x pipe {self.pipe} x grid {_fmt_grid(self.grid)}"


@dataclass(frozen=True)
class GridPosition:
    """One rank's place in a :class:`GridLayout`: the spatial grid and its ``(iy, ix)`` there,
    and its index along the data and pipe axes. ``GridPosition()`` is the one-process run."""

    grid: tuple = (1, 1)
    coords: tuple = (0, 0)
    ndata: int = 1
    npipe: int = 1
    data_index: int = 0
    pipe_index: int = 0

    @property
    def nspatial(self):
        return self.grid[0] * self.grid[1]

    def comm_size(self, name):
        """Ranks of the sub-communicator ``name`` (``spatial``, ``data``, ``pipe``, ``grad``:
        see :class:`~distnet.comm.topology.Topology`) that this rank belongs to."""
        return {"spatial": self.nspatial, "data": self.ndata, "pipe": self.npipe,
                "grad": self.nspatial * self.ndata}[name]


def _positive(name, n):
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TopologyError(f"{name} must be a positive integer, got {n!r}")


def resolve_layout(nranks, *, dist_flag=False, dist_mode=None, data=1, pipe=1, grid=None, planes=()):
    """Cut ``nranks`` ranks into a :class:`GridLayout` as an experiment with these keys runs.

    dist_flag, dist_mode : the experiment's ``dist_flag`` and its dataset's ``dist_mode``
        (``halopar``, ``vecpar``, ``datapar``; None means ``halopar``).
    data, pipe : the experiment's ``data`` (replicas) and ``pipe`` (stages); ``dist_mode:
        datapar`` with ``data: 1`` makes every rank of a stage a replica (whole images).
    grid : the experiment's ``grid`` ``[Py, Px]`` or None to :func:`choose_grid` one.
    planes : every ``(H, W[, label])`` plane the spatial grid must cut (``model.planes()``).

    Without ``dist_flag`` the grid is 1x1 and the run has ``data x pipe`` ranks. Raises
    :class:`TopologyError` naming the sizes that would work.
    """
    _positive("data", data)
    _positive("pipe", pipe)
    if nranks < 1:
        raise TopologyError(f"a run needs at least 1 rank, got {nranks}")
    planes = [tuple(p) for p in (planes or ())]
    if not dist_flag and data == 1 and pipe == 1:
        if nranks > 1:
            raise TopologyError(f"this experiment has dist_flag: False but was launched on {nranks} "
                                "ranks; run it without mpiexec, or distribute it "
                                "(`distnet distribute`), or add data replicas (`data: N`)")
        return GridLayout(1, 1, (1, 1))
    if dist_flag and dist_mode == "datapar":
        if data == 1:  # whole images; every rank of a pipeline stage is a replica
            if nranks % pipe:
                raise TopologyError(f"{nranks} ranks cannot hold pipe={pipe} stages; use a multiple "
                                    f"of {pipe}")
            return GridLayout(nranks // pipe, pipe, (1, 1))
        grid = (1, 1)
    replicas = data * pipe
    if nranks % replicas:
        raise TopologyError(
            f"the run has {nranks} ranks, which data={data} x pipe={pipe} does not divide; "
            f"use a multiple of {replicas} ranks, e.g. {replicas * (nranks // replicas + 1)}")
    nspatial = nranks // replicas
    if not dist_flag:
        if nspatial != 1:
            raise TopologyError(f"this experiment has dist_flag: False: it runs on data x pipe = "
                                f"{replicas} rank(s), not {nranks}")
        return GridLayout(data, pipe, (1, 1))
    if grid is None:
        if not valid_grids(nspatial, planes):
            raise TopologyError(no_grid_message(nspatial, planes, data, pipe))
        grid = choose_grid(nspatial, planes)
    else:
        grid = check_grid(grid, nspatial, planes, replicas)
    return GridLayout(data, pipe, grid)
