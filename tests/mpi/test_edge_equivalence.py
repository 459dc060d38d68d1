"""Edge cases of the promise (dist == one process, float64) that the other modules do not reach:

* a data replica with no rows of a short last batch on a plane large enough for the NCHW max
  pooling kernel (>= ``pooling.NCHW_MIN_PLANE`` pixels, non-overlapping windows): the kernel
  must take an empty batch (it raised on the empty replica only, and the others hung);
* tiles of one or two pixels under windows much wider than a tile (5x5 and 7x7 windows on a
  4x5 image over 1x2, 2x2 and 4x1 grids: ghost pixels come from ranks beyond the neighbours), with
  LCN, local filtering, pooling whose stride differs from the window, and padding wider than
  the filter (a tile whose chunk is all padding);
* GB pretraining with a dropout layer below the pretrained layer, with data replicas: the
  layers below ran forward with no minibatch state (each replica drew the mask of its own
  rows as if they were the whole batch), so the pretrained filters and everything after
  differed from one process.

Every rank builds the same global data and runs the single-process oracle itself; the
distributed run's costs, error rates and gathered weights must equal it.
"""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet.layers import (AveragePoolingLayer, ConvLayer, L2PoolingLayer, FullyConnectedLayer, LCNLayer,
                            LocalFilteringLayer, MaxPoolingLayer)
from distnet.layers.dropout import DropoutLayer
from distnet.models import Model
from distnet.models.gb import GB
from distnet.models.global_params import gather_params
from distnet.ops import pooling
from distnet.ops.activations import Logistic, RectLin

MPI_SIZES = (2, 4)

WI = {"type": "uniform", "low": -0.3, "high": 0.3}


def _fit(layers_of, shape, x, labels, K, topo, model_class=Model, **keys):
    """Train ``layers_of()`` on ``x`` (this rank's tiles) with ``model_class``; returns the
    model, the per-epoch costs and the error rate."""
    model = model_class(layers=layers_of(), **keys)
    model.infer_shapes(shape)
    model.configure(Numpy64(rng_seed=3), topo)
    model.init_params()
    costs = model.fit(x, labels, K)
    return model, costs, model.misclass_rate(x, labels)


def _same_as_one_process(comm, layers_of, shape, x, labels, K, grid, ndata, **keys):
    """The distributed run on ``grid`` x ``ndata`` replicas equals the one-process run: costs
    (1e-10 relative), error rate, every gathered weight."""
    ref, ref_costs, ref_rate = _fit(layers_of, shape, x, labels, K, Topology.serial(), **keys)
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        t = tile_of(shape[1:], topo.grid, topo.coords)
        model, costs, rate = _fit(layers_of, shape, x[:, :, t.y0:t.y1, t.x0:t.x1], labels, K, topo, **keys)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        assert rate == ref_rate
        if isinstance(ref, GB):
            np.testing.assert_allclose([c[2:] for c in model.pretrain_costs], [c[2:] for c in ref.pretrain_costs],
                                       rtol=1e-10)
        got, want = gather_params(model, topo), gather_params(ref, Topology.serial())
        if topo.rank == 0:
            for g, w in zip(got, want):
                np.testing.assert_allclose(g["value"], w["value"], rtol=1e-10, atol=1e-13, err_msg=w["name"])
    finally:
        topo.free()


#: Data replicas alone and with a spatial grid: layouts where a replica can hold no rows.
REPLICA_LAYOUTS = [
    pytest.param((1, 1), 2, id="data2", marks=pytest.mark.mpi_size(2)),
    pytest.param((1, 2), 2, id="data2-grid1x2", marks=pytest.mark.mpi_size(4)),
    pytest.param((1, 1), 4, id="data4", marks=pytest.mark.mpi_size(4))]


def large_plane_net():
    """conv 3x3 pad 1 + ReLU -> max pool 2x2 (the NCHW kernel's shapes) -> FC."""
    Conv, Pool, FC = (ConvLayer, MaxPoolingLayer, FullyConnectedLayer)
    return [Conv(nofm=2, fshape=3, padding=1, weight_init=WI, activation=RectLin()),
            Pool(fshape=2, stride=2),
            FC(nout=3, weight_init=WI, activation=Logistic())]


@pytest.mark.parametrize("grid,ndata", REPLICA_LAYOUTS)
def test_replica_without_rows_on_a_large_plane(comm, grid, ndata):
    """5 images in batches of 4: the last batch has 1 row, so a replica holds none of it (and
    of the last predict batch). Each tile is 32x32 or larger, so max pooling takes its NCHW
    kernel on every rank, also on the empty batch."""
    shape = (1, 32, 32 * grid[1])
    assert shape[1] * shape[2] // grid[1] >= pooling.NCHW_MIN_PLANE
    rng = np.random.RandomState(11)
    x, labels = rng.standard_normal((5,) + shape), rng.randint(0, 3, 5)
    _same_as_one_process(comm, large_plane_net, shape, x, labels, 3, grid, ndata, num_epochs=2, batch_size=4,
                         learning_rate=0.05, momentum={"type": "constant", "coef": 0.5})


def tiny_tile_net():
    """LCN 7x7 -> conv 5x5 pad 2 + ReLU -> local filtering 5x3 pad (2, 1) -> max pool 3x3 s1 pad 1
    -> L2 pool 2x2 s(1, 2) pad 1 -> avg pool 1x1 s1 pad 3 (on the 4x1 grid the first output tile
    reads padding only) -> conv 1x1 pad 1 -> FC (bias)."""
    LCN, Conv, LF, Max, L2, Avg, FC = (
        (LCNLayer, ConvLayer, LocalFilteringLayer, MaxPoolingLayer, L2PoolingLayer,
         AveragePoolingLayer, FullyConnectedLayer))
    return [LCN(fshape=7),
            Conv(nofm=2, fshape=5, padding=2, weight_init=WI, activation=RectLin()),
            LF(nofm=2, fshape=[5, 3], padding=[2, 1], weight_init=WI),
            Max(fshape=3, stride=1, padding=1),
            L2(fshape=2, stride=[1, 2], padding=1),
            Avg(fshape=1, stride=1, padding=3),
            Conv(nofm=2, fshape=1, padding=1, weight_init=WI),
            FC(nout=3, weight_init=dict(WI, bias_init=0.1), activation=Logistic())]


@pytest.mark.parametrize("grid,ndata", [
    pytest.param((1, 2), 1, id="grid1x2", marks=pytest.mark.mpi_size(2)),
    pytest.param((2, 2), 1, id="grid2x2", marks=pytest.mark.mpi_size(4)),
    pytest.param((4, 1), 1, id="grid4x1", marks=pytest.mark.mpi_size(4)),
    pytest.param((2, 1), 2, id="data2-grid2x1", marks=pytest.mark.mpi_size(4))])
def test_tiny_tiles_and_wide_windows(comm, grid, ndata):
    """9 images of 1x4x5 in shuffled batches of 4, nesterov momentum: the one-process numbers."""
    shape = (1, 4, 5)
    rng = np.random.RandomState(5)
    x, labels = rng.standard_normal((9,) + shape), rng.randint(0, 3, 9)
    _same_as_one_process(comm, tiny_tile_net, shape, x, labels, 3, grid, ndata, num_epochs=2, batch_size=4,
                         shuffle=True, learning_rate=0.05, momentum={"type": "nesterov", "coef": 0.5})


def gb_dropout_below_net():
    """conv 3x3 pad 1 -> dropout 0.5 -> local filtering 3x3 (pretrained, the max pool after it
    its sparsity pool) -> max pool 2x2 s1 -> FC."""
    Conv, Drop, LF, Pool, FC = (
        (ConvLayer, DropoutLayer, LocalFilteringLayer, MaxPoolingLayer, FullyConnectedLayer))
    return [Conv(nofm=2, fshape=3, padding=1, weight_init=WI),
            Drop(p=0.5),
            LF(nofm=2, fshape=3, pretraining=True, pretrain_learning_rate=0.01, sparsity=0.1, weight_init=WI),
            Pool(fshape=2, stride=1),
            FC(nout=3, weight_init=WI, activation=Logistic())]


@pytest.mark.parametrize("grid,ndata", REPLICA_LAYOUTS)
def test_gb_pretraining_below_dropout_with_replicas(comm, grid, ndata):
    """10 images in batches of 4: pretraining costs, supervised costs, error rate and weights of
    one process."""
    shape = (1, 8, 7)
    rng = np.random.RandomState(2)
    x, labels = rng.standard_normal((10,) + shape), rng.randint(0, 3, 10)
    _same_as_one_process(comm, gb_dropout_below_net, shape, x, labels, 3, grid, ndata, model_class=GB,
                         num_epochs=2, num_pretrain_epochs=2, pretraining=True, batch_size=4, shuffle=True,
                         learning_rate=0.1, momentum={"type": "constant", "coef": 0.5})
