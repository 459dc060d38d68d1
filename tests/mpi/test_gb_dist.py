"""GB layers and models distributed vs their single-process oracles (neon's design:
docs/neon-semantics.md#dist-layers, docs/neon-semantics.md#convnetdist-and-gbdist).

Every rank builds the GLOBAL data (same seed), runs the layer / model on the whole image as the
oracle, runs the same class on its tile, and compares its tile / weight slice / costs in
float64 (rtol 1e-10). One grid per world size: 1x1, 1x2, 2x2, 2x3, 3x3 (and, for the model,
2 data replicas x 1x1, 1x2, 1x3 at sizes 2, 4, 6). All collectives of a
test run before any comparison, and the comparison is collective (``mpi.assert_all``), so a
mismatch on one rank fails the test on every rank without a hang.
"""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology, allreduce_scalars
from distnet.layers import (SPATIAL, L2PoolingLayer, LayerContext, FullyConnectedNoBiasLayer, LCNLayer,
                            LocalFilteringLayer)
from distnet.layers.dropout import DropoutLayer
from distnet.models.gb import GB
from distnet.ops.activations import Logistic

MPI_SIZES = (1, 2, 4, 6, 9)
MPI_TIMEOUT = 120

GRIDS = [(1, 1), (1, 2), (2, 2), (2, 3), (3, 3)]
RTOL, ATOL = 1e-10, 1e-12
WI = {"type": "uniform", "low": -0.1, "high": 0.1}
PLANE = (13, 12)
B, C = 3, 2


def _grids():
    return pytest.mark.parametrize("grid", [
        pytest.param(g, id=f"{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(g[0] * g[1])) for g in GRIDS])


def ready(layer, in_shape, topo, index, seed=0):
    """infer_shape, bind, configure and init_params as MLP does (``index`` = message tag)."""
    layer.infer_shape(in_shape)
    ctx = LayerContext(Numpy64(), topo, index)
    layer.bind(ctx)
    layer.configure(SPATIAL, ctx)
    layer.init_params(np.random.RandomState(seed))
    return layer


def box(layer, which):
    """``plan.own`` (input tile) or ``plan.out_tile`` of a window layer."""
    return getattr(layer.plan, which)


def cut(a, b):
    """The tile ``b`` (a Box) of a global ``(..., H, W)`` array."""
    return np.ascontiguousarray(a[..., b.y0:b.y1, b.x0:b.x1])


def cut_w(w, b):
    """The filters ``w[:, y0:y1, x0:x1, :]`` of output tile ``b``."""
    return w[:, b.y0:b.y1, b.x0:b.x1, :]


class Checker:
    """Collects (name, actual, desired) and asserts them collectively at the end."""

    def __init__(self):
        self.bad = []

    def __call__(self, name, actual, desired, rtol=RTOL, atol=ATOL):
        a, d = np.asarray(actual, dtype=np.float64), np.asarray(desired, dtype=np.float64)
        if a.shape != d.shape:
            self.bad.append(f"{name}: shape {a.shape} != {d.shape}")
        elif not np.allclose(a, d, rtol=rtol, atol=atol):
            err = np.abs(a - d)
            self.bad.append(f"{name}: {np.count_nonzero(err > atol + rtol * np.abs(d))}/{a.size} "
                            f"differ, max abs {err.max():.3g}, max rel "
                            f"{(err / np.maximum(np.abs(d), 1e-300)).max():.3g}")

    def done(self, mpi):
        mpi.assert_all(not self.bad, "; ".join(self.bad))


# -- layers ----------------------------------------------------------------------------------------

LF_GEOMS = {"4x4": dict(fshape=4), "3x2s2x1p1": dict(fshape=[3, 2], stride=[2, 1], padding=[1, 1])}


@_grids()
@pytest.mark.parametrize("geom", list(LF_GEOMS))
def test_local_filtering_layer(mpi, topologies, grid, geom):
    topo = topologies(grid)
    kw = dict(nofm=3, weight_init=WI, learning_rate=0.1, **LF_GEOMS[geom])
    ref = ready(LocalFilteringLayer(**kw), (C,) + PLANE, Topology.serial(), 0, seed=4)
    dist = ready(LocalFilteringLayer(**kw), (C,) + PLANE, topo, 1, seed=4)
    rng = np.random.RandomState(11)
    x = rng.standard_normal((B, C) + PLANE)
    R = rng.standard_normal((B,) + ref.out_shape)
    own, out = box(dist, "own"), box(dist, "out_tile")
    y_ref, y = ref.fprop(x), dist.fprop(cut(x, own))
    dx_ref, dx = ref.bprop(R), dist.bprop(cut(R, out))
    check = Checker()
    check("W slice", dist.W, cut_w(ref.W, out), rtol=0, atol=0)
    check("fprop", y, cut(y_ref, out))
    check("bprop dx", dx, cut(dx_ref, own))
    check("bprop dW", dist.params()[0].grad, cut_w(ref.params()[0].grad, out))
    check.done(mpi)
    assert dist.params()[0].sharded == (grid != (1, 1))


@_grids()
@pytest.mark.parametrize("fshape", [3, [3, 5], 5])
def test_lcn_layer(mpi, topologies, grid, fshape):
    topo = topologies(grid)
    ref = ready(LCNLayer(fshape=fshape), (C,) + PLANE, Topology.serial(), 0)
    dist = ready(LCNLayer(fshape=fshape), (C,) + PLANE, topo, 2)
    rng = np.random.RandomState(12)
    x = rng.standard_normal((B, C) + PLANE)
    x[0, :, :, :4] = 0.0                       # a blank region (s == 0, d == 1)
    R = rng.standard_normal(x.shape)
    own = box(dist, "own")
    y_ref, y = ref.fprop(x), dist.fprop(cut(x, own))
    dx_ref, dx = ref.bprop(R), dist.bprop(cut(R, own))
    check = Checker()
    check("fprop", y, cut(y_ref, own))
    check("bprop", dx, cut(dx_ref, own))
    check.done(mpi)


@_grids()
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("geom", ["3x3", "3x3p1"])
def test_pretrain_step(mpi, topologies, grid, tied, geom):
    topo = topologies(grid)
    kw = dict(nofm=2, fshape=3, padding=1 if geom.endswith("p1") else 0, weight_init=WI,
              learning_rate=0.1, pretraining=True, pretrain_learning_rate=0.05, sparsity=0.2,
              tied_weights=tied)
    ref = ready(LocalFilteringLayer(**kw), (C,) + PLANE, Topology.serial(), 0, seed=6)
    ref_pool = ready(L2PoolingLayer(fshape=3), ref.out_shape, Topology.serial(), 1)
    dist = ready(LocalFilteringLayer(**kw), (C,) + PLANE, topo, 3, seed=6)
    pool = ready(L2PoolingLayer(fshape=3), dist.out_shape, topo, 4)
    ref.pretrain_mode(ref_pool)
    dist.pretrain_mode(pool)
    rng = np.random.RandomState(13)
    own, out = box(dist, "own"), box(dist, "out_tile")
    costs, costs_ref = [], []
    for step in range(2):
        x = rng.rand(B, C, *PLANE)
        costs_ref.append(ref.pretrain_step(x))
        costs.append(allreduce_scalars(dist.pretrain_step(cut(x, own)), topo.spatial))
    check = Checker()
    check("costs", costs, costs_ref)
    check("W", dist.W, cut_w(ref.W, out))
    check("V", dist.decoder.V, cut_w(ref.decoder.V, out))
    check.done(mpi)


# -- GB vs GBDist ----------------------------------------------------------------------------------

IMAGE = (1, 14, 15)
N, NCLASS = 10, 3


def gb_layers(dropout=False):
    """neon's [LF, L2, LCN] x 2, FC; ``dropout``: a dropout layer before each LF (the second
    LF's pretraining then runs a dropout layer below it)."""
    LF, L2, LCN, FC, DO = (LocalFilteringLayer, L2PoolingLayer, LCNLayer, FullyConnectedNoBiasLayer,
                            DropoutLayer)
    pre = dict(pretraining=True, pretrain_learning_rate=0.02, sparsity=0.1, weight_init=WI)
    drop1, drop2 = ([DO(p=0.3)], [DO(p=0.4)]) if dropout else ([], [])
    return [*drop1, LF(nofm=3, fshape=3, **pre), L2(fshape=3), LCN(fshape=3),  # 14x15 -> 12x13 -> 10x11
            *drop2, LF(nofm=2, fshape=3, padding=1, tied_weights=False, **pre),  # 10x11
            L2(fshape=2), LCN(fshape=[3, 5]),                                   # 9x10
            FC(nout=NCLASS, weight_init=WI, activation=Logistic())]


@_grids()
@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
def test_gb_model(mpi, topologies, grid, shuffle):
    """A few steps of pretraining and supervised training (top-only, then full)."""
    _compare_models(mpi, topologies(grid), shuffle)


@pytest.mark.parametrize("grid", [
    pytest.param(g, id=f"data2x{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(2 * g[0] * g[1]))
    for g in [(1, 1), (1, 2), (1, 3)]])
def test_gb_model_data_replicas(mpi, comm, grid):
    """Two data replicas (each takes its rows of every batch) x a spatial grid."""
    topo = Topology.from_world(grid=grid, data=2, world=comm)
    try:
        _compare_models(mpi, topo, shuffle=True, predict=False)
    finally:
        topo.free()


@pytest.mark.parametrize("grid", [
    pytest.param(g, id=f"{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(g[0] * g[1])) for g in [(1, 2), (2, 2)]])
def test_gb_model_with_dropout(mpi, topologies, grid):
    """Dropout below the pretrained layers: each pretraining step draws a new mask, the same
    units on every grid as on one process."""
    _compare_models(mpi, topologies(grid), shuffle=True, dropout=True)


@pytest.mark.mpi_size(4)
def test_gb_model_with_dropout_data_replicas(mpi, comm):
    """The same with 2 data replicas x a 1x2 grid: each replica takes its rows of the mask."""
    topo = Topology.from_world(grid=(1, 2), data=2, world=comm)
    try:
        _compare_models(mpi, topo, shuffle=True, predict=False, dropout=True)
    finally:
        topo.free()


def _compare_models(mpi, topo, shuffle, predict=True, dropout=False):
    kw = dict(num_epochs=2, batch_size=4, learning_rate=0.2, num_pretrain_epochs=1,
              num_initial_epochs=1, pretraining=True, shuffle=shuffle)
    rng = np.random.RandomState(14)
    x, labels = rng.rand(N, *IMAGE), rng.randint(0, NCLASS, N)
    models = []
    for cls, t in ((GB, Topology.serial()), (GB, topo)):
        m = cls(gb_layers(dropout), **kw)
        m.infer_shapes(IMAGE)
        m.configure(Numpy64(), t)
        m.init_params()
        models.append(m)
    ref, dist = models
    tile = box(dist.layers[dist.pretrained_layers()[0]], "own")   # the first layer with a plan
    costs_ref, costs = ref.fit(x, labels, NCLASS), dist.fit(cut(x, tile), labels, NCLASS)
    check = Checker()
    if predict:
        check("outputs", dist.predict(cut(x, tile)), ref.predict(x))
    else:
        check("misclass", dist.misclass_rate(cut(x, tile), labels), ref.misclass_rate(x, labels))
    check("pretrain costs", [c[2:] for c in dist.pretrain_costs], [c[2:] for c in ref.pretrain_costs])
    check("epoch costs", costs, costs_ref)
    for i in dist.pretrained_layers():
        check(f"layer {i} W", dist.layers[i].W, cut_w(ref.layers[i].W, box(dist.layers[i], "out_tile")))
    fc, fc_ref = dist.layers[-1], ref.layers[-1]
    check("FC W", fc.W, fc_ref.W if fc.cols is None else fc_ref.W[:, fc.cols])
    check.done(mpi)
    assert len(ref.pretrain_costs) == 2 and len(costs) == 2
