"""Cutting a world of ranks into ``data x pipe x`` a spatial grid (``Py x Px``, ``Pz x Py x Px``,
any number of axes): the one grid resolver (pure, no MPI).

:func:`resolve_layout` decides, from the world size and an experiment's keys, how many data
replicas and pipeline stages there are and which spatial grid cuts the images. ``distnet run``
(through :meth:`~distnet.comm.topology.Topology.from_world`), ``distnet show`` and ``distnet
plan`` all call it, so what they report is what a run does.

Planes: the arrays the spatial grid must cut, each a shape of as many lengths as the grid has
axes (``(H, W)``, ``(D, H, W)``), optionally followed by a label that messages name
(``(H, W, "the output of layer 'conv2'")``). Their number of axes is the grid's.

Grid choice (:func:`choose_grid`): among the grids of the spatial rank count that cut every
plane into non-empty tiles (each length >= its grid side), take the most cubic one: the smallest
largest side, then the smallest next side, and so on (``2x2x4`` before ``1x4x4``). Of grids
that are permutations of each other, a 2-D one keeps ``Py <= Px`` (distnet's rule from the
start, so every 2-D run keeps its grid), and one of 3 or more axes cuts the slowest axes most
(``Pz >= Py >= Px``): a halo between two ranks that differ in the slowest coordinate is a
slab of whole contiguous rows and planes, the cheapest to pack (docs/parallelism.md#halos-in-n-dimensions).

:class:`GridPosition` is one rank's place in such a layout; a layer's placement
(:mod:`distnet.layers.placement`) is a pure function of it, so any rank's placement can be
computed on one process.
"""
from dataclasses import dataclass
from math import prod

from ..errors import TopologyError
from .partition import array_noun, axis_noun, coords_of, one_of_each, shape_text


# ---------------------------------------------------------------------------------------------
# Planes and factorisations of the spatial rank count
# ---------------------------------------------------------------------------------------------

def plane_shape(plane):
    """``(shape, label)`` of a plane: its lengths and its trailing label (None without one)."""
    plane = tuple(plane)
    if plane and isinstance(plane[-1], str):
        return plane[:-1], plane[-1]
    return plane, None


def planes_ndim(planes, default=2):
    """The number of axes of ``planes`` (``default`` when there are none); a
    :class:`TopologyError` if they differ."""
    dims = {len(plane_shape(p)[0]) for p in planes or ()}
    if len(dims) > 1:
        raise TopologyError(f"the spatial arrays of one run must have the same number of axes, "
                            f"got {sorted(dims)}")
    return dims.pop() if dims else default


def _divisors(n):
    """Divisors of ``n``, ascending (``O(sqrt n)``)."""
    low, high = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            low.append(d)
            if d * d != n:
                high.append(n // d)
        d += 1
    return low + high[::-1]


def factorizations(n, ndim=2, caps=None):
    """All grids of ``ndim`` sides whose product is ``n``, in lexicographic order (first side
    ascending): ``(Py, Px)`` pairs for ``ndim=2``, ``(Pz, Py, Px)`` for 3. ``caps``: the largest
    side allowed on each axis (None: any), which prunes the search for huge ``n``."""
    if n < 1:
        raise TopologyError(f"a process grid needs at least 1 rank, got {n}")
    caps = caps or (n,) * ndim
    if ndim == 1:
        return [(n,)] if n <= caps[0] else []
    return [(d,) + rest for d in _divisors(n) if d <= caps[0]
            for rest in factorizations(n // d, ndim - 1, caps[1:])]


def factor_pairs(n):
    """All ``(Py, Px)`` with ``Py * Px == n``, ``Py`` ascending (``O(sqrt n)``)."""
    return factorizations(n, 2)


def _grid_order(grid):
    """Sort key: most cubic first (sides compared from the largest down), then, among
    permutations, ``Py <= Px`` in 2-D and ``Pz >= Py >= Px`` from 3 axes on."""
    grid = tuple(grid)
    orientation = grid if len(grid) <= 2 else tuple(-p for p in grid)
    return tuple(sorted(grid, reverse=True)), orientation


def grid_failure(grid, planes):
    """``None`` if ``grid`` cuts every plane into non-empty tiles, else a phrase saying which
    plane fails and why (e.g. ``"plane 5x28: 5 rows < 6"``). A plane may carry a label as a
    last item (``(H, W, "the output of layer 'conv2'")``), which the phrase then names."""
    for plane in planes or ():
        shape, label = plane_shape(plane)
        what = f"{array_noun(len(shape))} {shape_text(shape)}" + (f" ({label})" if label else "")
        if len(shape) != len(grid):
            return f"{what}: {len(shape)} axes, the grid {len(grid)}"
        for axis, (n, p) in enumerate(zip(shape, grid)):
            if n < p:
                return f"{what}: {n} {axis_noun(len(shape), axis, n)} < {p}"
    return None


def valid_grids(nranks, planes=(), ndim=None):
    """All grids of ``nranks`` ranks that cut every plane in ``planes`` into non-empty tiles,
    best first (the order :func:`choose_grid` picks from); ``ndim`` axes (default: the planes',
    2 without planes)."""
    ndim = ndim or planes_ndim(planes)
    shapes = [plane_shape(p)[0] for p in planes or ()]
    caps = [min([s[a] for s in shapes if len(s) == ndim], default=nranks) for a in range(ndim)]
    return sorted((g for g in factorizations(nranks, ndim, caps) if grid_failure(g, planes) is None),
                  key=_grid_order)


def working_sizes(planes=(), limit=64, ndim=None):
    """Spatial rank counts ``1 <= n <= limit`` for which some grid fits every plane."""
    return [n for n in range(1, limit + 1) if valid_grids(n, planes, ndim)]


def _fmt_grids(grids):
    return ", ".join(shape_text(g) for g in grids) or "none"


#: Rank counts listed in full in error messages; beyond, only the nearest working sizes.
_LISTED = 64


def _suggest_sizes(nranks, planes, replicas, ndim=None):
    """Text listing the world sizes that would work, around ``nranks`` spatial ranks: every
    working count up to ``max(16, 2 * nranks)`` for small runs; for large ones those up to
    :data:`_LISTED` and the nearest working counts below and above ``nranks`` (a few divisor
    searches, not one per count: fast for any ``nranks``)."""
    limit = max(16, 2 * nranks)
    sizes = working_sizes(planes, limit=min(limit, _LISTED), ndim=ndim)
    if limit > _LISTED:
        near = []
        for step in (-1, 1):
            n, tries = nranks + step, 0
            while _LISTED < n and tries < 256 and not valid_grids(n, planes, ndim):
                n, tries = n + step, tries + 1
            if n > _LISTED and tries < 256:
                near.append(n)
        sizes += sorted(near)
    return ", ".join(str(n * replicas) for n in sizes)


def choose_grid(nranks, planes=(), ndim=None):
    """The grid distnet uses for ``nranks`` spatial ranks (see the module docstring): of the
    planes' number of axes, or ``ndim`` (2 without planes).

    Raises :class:`TopologyError` naming, for each grid, the plane that fails, and the rank
    counts that would work.
    """
    grids = valid_grids(nranks, planes, ndim)
    if grids:
        return grids[0]
    raise TopologyError(no_grid_message(nranks, planes, ndim=ndim))


def no_grid_message(nranks, planes, data=1, pipe=1, ndim=None):
    """Why no grid of ``nranks`` spatial ranks fits ``planes``, with the sizes that would."""
    ndim = ndim or planes_ndim(planes)
    fails = "; ".join(f"{shape_text(g)} fails on {grid_failure(g, planes)}"
                      for g in sorted(factorizations(nranks, ndim), key=_grid_order)[:8])
    replicas = data * pipe
    head = f"no process grid of {nranks} spatial ranks"
    if replicas > 1:
        head = (f"the run has {nranks * replicas} ranks = data {data} x pipe {pipe} x {nranks} "
                f"spatial, and {head}")
    what = "world sizes" if replicas > 1 else "rank counts"
    return (f"{head} cuts every plane into non-empty tiles ({fails}). "
            f"{what.capitalize()} that work: {_suggest_sizes(nranks, planes, replicas, ndim)}")


#: How a grid of 1, 2, 3 axes is written.
_SIDES = {1: "[Px]", 2: "[Py, Px]", 3: "[Pz, Py, Px]"}


def _parse_grid(grid):
    """``grid`` as a tuple of positive ints, one per axis."""
    try:
        grid = tuple(int(g) for g in grid)
    except (TypeError, ValueError):
        raise TopologyError(f"grid must be integers, one per spatial axis ([Py, Px], or "
                            f"[Pz, Py, Px] for volumes), got {grid!r}") from None
    if not grid or min(grid) < 1:
        raise TopologyError(f"grid must be positive integers, one per spatial axis ([Py, Px], "
                            f"or [Pz, Py, Px] for volumes), got {grid!r}")
    return grid


def check_grid(grid, nranks, planes=(), replicas=1):
    """Validate a user-given ``grid`` for ``nranks`` spatial ranks; returns it as a tuple.

    ``replicas = data * pipe`` only enters the messages (world size = replicas * nranks).
    """
    grid = _parse_grid(grid)
    ndim = planes_ndim(planes, default=len(grid))
    if len(grid) != ndim:
        raise TopologyError(f"grid {shape_text(grid)} has {len(grid)} axes, but the arrays it must "
                            f"cut have {ndim} ({grid_failure(grid, planes)}): give "
                            f"{_SIDES.get(ndim, 'one side per axis')}")
    world = nranks * replicas
    ranks = prod(grid)
    fit = f"Grids of {nranks} spatial ranks that fit: {_fmt_grids(valid_grids(nranks, planes, ndim))}"
    if ranks != nranks:
        need = ranks * replicas
        reps = f" x {replicas} data/pipe replicas" if replicas > 1 else ""
        keep = ""
        if world % ranks == 0 and world // ranks > 1:   # the grid fits with more replicas
            k = world // ranks
            keep = (f"; or keep grid {shape_text(grid)} with data: {k} ({k} replicas x {ranks} = {world} ranks)"
                    if replicas == 1 else f"; or keep grid {shape_text(grid)} with data x pipe = {k}")
        raise TopologyError(
            f"grid {shape_text(grid)}{reps} needs {need} ranks, but the run has {world}. {fit}{keep}")
    why = grid_failure(grid, planes)
    if why is not None:
        raise TopologyError(
            f"grid {shape_text(grid)} cannot cut {why}: every rank must own at least "
            f"{one_of_each(ndim)}. Grids of {nranks} ranks that fit: "
            f"{_fmt_grids(valid_grids(nranks, planes, ndim))}; "
            f"spatial rank counts that work: {_suggest_sizes(nranks, planes, 1, ndim)}")
    return grid


# ---------------------------------------------------------------------------------------------
# The resolver
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GridLayout:
    """How a world is cut: ``size = data * pipe * prod(grid)`` ranks (``grid``: ``(Py, Px)``,
    ``(Pz, Py, Px)``, ...)."""

    data: int
    pipe: int
    grid: tuple

    @property
    def nspatial(self):
        return prod(self.grid)

    @property
    def size(self):
        return self.data * self.pipe * self.nspatial

    def position(self, rank):
        """The :class:`GridPosition` of world rank ``rank``
        (``rank = ((d * pipe + p) * Py + iy) * Px + ix``; the spatial coordinates row-major in
        any number of axes)."""
        d, rest = divmod(rank, self.pipe * self.nspatial)
        p, s = divmod(rest, self.nspatial)
        return GridPosition(self.grid, coords_of(self.grid, s), self.data, self.pipe, d, p)

    def __str__(self):
        return f"data {self.data} x pipe {self.pipe} x grid {shape_text(self.grid)}"


@dataclass(frozen=True)
class GridPosition:
    """One rank's place in a :class:`GridLayout`: the spatial grid and its coordinates there
    (``(iy, ix)``, ``(iz, iy, ix)``), and its index along the data and pipe axes.
    ``GridPosition()`` is the one-process run of a 2-D model."""

    grid: tuple = (1, 1)
    coords: tuple = (0, 0)
    ndata: int = 1
    npipe: int = 1
    data_index: int = 0
    pipe_index: int = 0

    @property
    def nspatial(self):
        return prod(self.grid)

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
    grid : the experiment's ``grid`` (``[Py, Px]``, ``[Pz, Py, Px]``) or None to
        :func:`choose_grid` one.
    planes : every ``(H, W[, label])`` plane (``(D, H, W[, label])`` volume) the spatial grid
        must cut (``model.planes()``); the grid has their number of axes.

    Without ``dist_flag`` the grid is 1x1 (1x1x1 for volumes) and the run has ``data x pipe``
    ranks. Raises :class:`TopologyError` naming the sizes that would work.
    """
    _positive("data", data)
    _positive("pipe", pipe)
    if nranks < 1:
        raise TopologyError(f"a run needs at least 1 rank, got {nranks}")
    planes = [tuple(p) for p in (planes or ())]
    whole = (1,) * planes_ndim(planes)     # the grid of one tile
    if not dist_flag and data == 1 and pipe == 1:
        if nranks > 1:
            # said alike to `mpiexec -n 4 distnet run` and to `distnet plan -n 4`, launched on one
            raise TopologyError(f"this experiment has dist_flag: False: it runs on one process, not on "
                                f"{nranks} ranks; run it on one (without mpiexec; plan: -n 1), or distribute it "
                                "(`distnet distribute`), or add data replicas (`data: N`)")
        return GridLayout(1, 1, whole)
    if dist_flag and dist_mode == "datapar":
        if data == 1:  # whole images; every rank of a pipeline stage is a replica
            if nranks % pipe:
                raise TopologyError(f"{nranks} ranks cannot hold pipe={pipe} stages; use a multiple "
                                    f"of {pipe}")
            return GridLayout(nranks // pipe, pipe, whole)
        grid = whole
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
        return GridLayout(data, pipe, whole)
    if grid is None:
        if not valid_grids(nspatial, planes):
            raise TopologyError(no_grid_message(nspatial, planes, data, pipe))
        grid = choose_grid(nspatial, planes)
    else:
        grid = check_grid(grid, nspatial, planes, replicas)
    return GridLayout(data, pipe, grid)
