"""Modern layers and optimisers distributed exactly: a network with batch norm (conv and FC
outputs), dropout, a stride-2 convolution, global average pooling, softmax cross-entropy and
Adam (cosine schedule with warm-up, clipping by global norm) or SGD with weight decay, trained
on tiles over a process grid and with data replicas, ends with the single-process numbers
(float64, 1e-10 relative): per-epoch costs, outputs (evaluation mode: running statistics),
error rates, every gathered weight, batch-norm running statistics and Adam moments. A checkpoint
written on the grid restores into the one-process model and continues identically.

Every rank builds the same global data (same seed) and runs the single-process oracle itself.
"""
import os

import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet.layers import ConvLayer, FullyConnectedLayer, FullyConnectedNoBiasLayer
from distnet.layers.batchnorm import BatchNormLayer
from distnet.layers.dropout import DropoutLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.models import Model
from distnet.models.checkpoint import apply_checkpoint, read_checkpoint, save_checkpoint
from distnet.models.global_params import gather_params
from distnet.ops.activations import Identity, RectLin
from distnet.ops.costs import SoftmaxCrossEntropy
from distnet.optim.rules import Adam, GradientDescent
from distnet.optim.schedules import CosineSchedule, LinearWarmup

MPI_SIZES = (1, 2, 3, 4, 6)

N, C, H, W, K = 13, 2, 9, 8, 3      # 13 images in batches of 5: the last batch is short
WI = {"type": "uniform", "low": -0.4, "high": 0.4}
# (data replicas, grid)
CASES = [(1, (1, 1)), (1, (1, 2)), (1, (2, 1)), (1, (2, 2)), (1, (1, 3)), (2, (1, 1)), (2, (1, 2)),
         (2, (2, 1)), (3, (1, 1)), (1, (2, 3)), (2, (1, 3))]


def net():
    Conv, BN, Drop, GAP, FC0, FC = (
        (ConvLayer, BatchNormLayer, DropoutLayer, GlobalAveragePoolingLayer, FullyConnectedNoBiasLayer,
         FullyConnectedLayer))
    # No bias before batch norm and no batch norm straight after another (without a
    # nonlinearity between): their gradients are zero in exact arithmetic, and Adam would turn
    # the rounding noise of such a zero into steps of the learning rate's size.
    layers = [Conv(nofm=4, fshape=3, padding=1, weight_init=WI),
              BN(activation=RectLin()),
              Drop(p=0.3),
              Conv(nofm=5, fshape=3, stride=2, padding=1, weight_init=WI),
              BN(momentum=0.2, activation=RectLin()),
              GAP(),
              FC0(nout=6, weight_init=WI),
              BN(activation=RectLin()),
              FC(nout=K, weight_init=dict(WI, bias_init=0.0), activation=Identity())]
    for i, layer in enumerate(layers):
        layer.name = f"l{i}"
    return layers


RULES = {
    "adam": lambda: Adam(learning_rate=0.02, schedule=[LinearWarmup(2), CosineSchedule(6)], schedule_unit="step",
                         max_grad_norm=0.5),
    "sgd_wd": lambda: GradientDescent(learning_rate=0.1, momentum={"type": "constant", "coef": 0.9},
                                      weight_decay=0.01),
}


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(7)
    return rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)


def build(dist, topo, rule, epochs=2, stages=None):
    model = (Model if dist else Model)(layers=net(), num_epochs=epochs, batch_size=5,
                                               cost=SoftmaxCrossEntropy(), learning_rule=RULES[rule](),
                                               stages=stages)
    model.infer_shapes((C, H, W))
    model.configure(Numpy64(rng_seed=5), topo)
    model.init_params()
    return model


def _cases():
    return [pytest.param(d, g, id=f"data{d}-grid{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(d * g[0] * g[1]))
            for d, g in CASES]


def _entries(model, topo, group="params"):
    e = gather_params(model, topo, group)
    return None if e is None else {x["name"]: x for x in e}


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("ndata,grid", _cases())
def test_modern_net_equals_single_process(comm, data, ndata, grid, rule):
    x, labels = data
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        ref = build(False, Topology.serial(), rule)
        ref_costs = ref.fit(x, labels, K)
        t = tile_of((H, W), topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        model = build(grid != (1, 1), topo, rule)
        costs = model.fit(xt, labels, K)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        assert model.misclass_rate(xt, labels) == ref.misclass_rate(x, labels)
        if ndata == 1:   # evaluation mode (running statistics), replicated outputs
            np.testing.assert_allclose(model.predict(xt), ref.predict(x), rtol=1e-9, atol=1e-12)
        for group in ("params", "buffers"):
            got, want = _entries(model, topo, group), _entries(ref, Topology.serial(), group)
            if topo.rank == 0:
                assert set(got) == set(want)
                for name, e in want.items():
                    np.testing.assert_allclose(got[name]["value"], e["value"], rtol=1e-9, atol=1e-12, err_msg=name)
                    assert set(got[name]["state"]) == set(e["state"]), name
                    for k, a in e["state"].items():
                        np.testing.assert_allclose(got[name]["state"][k], a, rtol=1e-8, atol=1e-12,
                                                   err_msg=f"{name} {k}")
    finally:
        topo.free()


@pytest.mark.parametrize("ndata,npipe,grid", [
    pytest.param(d, p, g, id=f"data{d}-pipe{p}-grid{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(d * p * g[0] * g[1]))
    for d, p, g in [(1, 2, (1, 1)), (1, 2, (1, 2)), (2, 2, (1, 1)), (1, 3, (1, 1))]])
def test_pipeline_stages_equal_single_process(comm, data, ndata, npipe, grid):
    """Batch norm, dropout and Adam on pipeline stages (one micro-batch) with spatial tiles and
    data replicas: the single-process costs, error rates and weights."""
    x, labels = data
    topo = Topology.from_world(grid=grid, data=ndata, pipe=npipe, world=comm)
    stages = [3] if npipe == 2 else [3, 6]
    try:
        ref = build(False, Topology.serial(), "adam", stages=stages)
        ref_costs = ref.fit(x, labels, K)
        t = tile_of((H, W), topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        model = build(True, topo, "adam", stages=stages)
        costs = model.fit(xt, labels, K)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        assert model.misclass_rate(xt, labels) == ref.misclass_rate(x, labels)
        got, want = _entries(model, topo, "buffers"), _entries(ref, Topology.serial(), "buffers")
        if topo.rank == 0:
            for name, e in want.items():
                np.testing.assert_allclose(got[name]["value"], e["value"], rtol=1e-9, atol=1e-12, err_msg=name)
    finally:
        topo.free()


@pytest.mark.parametrize("ndata,grid", [pytest.param(d, g, id=f"data{d}-grid{g[0]}x{g[1]}",
                                                     marks=pytest.mark.mpi_size(d * g[0] * g[1]))
                                        for d, g in [(1, (1, 2)), (1, (2, 2)), (2, (1, 2))]])
def test_checkpoint_resumes_on_one_process(comm, data, ndata, grid, shared_tmp):
    """Train one epoch on the grid, checkpoint (Adam moments, batch-norm running statistics,
    step count), restore into a one-process model, train on: equal to two epochs in one go."""
    x, labels = data
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        ref = build(False, Topology.serial(), "adam")
        ref_costs = ref.fit(x, labels, K)
        t = tile_of((H, W), topo.grid, topo.coords)
        model = build(True, topo, "adam", epochs=1)
        model.fit(x[:, :, t.y0:t.y1, t.x0:t.x1], labels, K)
        path = os.path.join(shared_tmp, f"resume-data{ndata}-{grid[0]}x{grid[1]}.h5")
        save_checkpoint(path, model, topo, epoch=0)
        comm.Barrier()
        ck = read_checkpoint(path)
        assert ck.meta["steps"] == 3 and len(ck.buffers) == 6
        assert sorted(ck.params[0]["state"]) == ["m", "v"]
        resumed = build(False, Topology.serial(), "adam")
        resume = apply_checkpoint(resumed, ck)
        assert resumed.steps == 3
        costs = resumed.fit(x, labels, K, resume=resume)
        np.testing.assert_allclose(costs, ref_costs[1:], rtol=1e-10)
        np.testing.assert_allclose(resumed.predict(x), ref.predict(x), rtol=1e-9, atol=1e-12)
    finally:
        topo.free()


def net_sharded():
    """Conv -> BN -> dropout -> FC straight after the tiles: the FC weights (and their Adam
    moments) are sharded by the tile's columns."""
    Conv, BN, Drop, FC = (ConvLayer, BatchNormLayer, DropoutLayer, FullyConnectedLayer)
    layers = [Conv(nofm=3, fshape=3, padding=1, weight_init=WI), BN(activation=RectLin()), Drop(p=0.25),
              FC(nout=K, weight_init=dict(WI, bias_init=0.0), activation=Identity())]
    for i, layer in enumerate(layers):
        layer.name = f"s{i}"
    return layers


def build_sharded(dist, topo, epochs):
    model = (Model if dist else Model)(layers=net_sharded(), num_epochs=epochs, batch_size=5,
                                               cost=SoftmaxCrossEntropy(), learning_rule=RULES["adam"]())
    model.infer_shapes((C, H, W))
    model.configure(Numpy64(rng_seed=9), topo)
    model.init_params()
    return model


@pytest.mark.parametrize("direction", ["grid_to_one", "one_to_grid"])
@pytest.mark.parametrize("grid", [pytest.param(g, id=f"grid{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(g[0] * g[1]))
                                  for g in [(1, 2), (2, 2), (1, 3)]])
def test_sharded_adam_state_checkpoint_across_grids(comm, data, grid, direction, shared_tmp):
    """Adam moments of column-sharded FC weights and batch-norm statistics gathered from the
    grid's tiles / sliced onto them: a resumed run equals the uninterrupted one."""
    x, labels = data
    topo = Topology.from_world(grid=grid, world=comm)
    try:
        t = tile_of((H, W), topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        ref = build_sharded(False, Topology.serial(), 2)
        ref_costs = ref.fit(x, labels, K)
        path = os.path.join(shared_tmp, f"sharded-{direction}-{grid[0]}x{grid[1]}.h5")
        if direction == "grid_to_one":
            first = build_sharded(True, topo, 1)
            first.fit(xt, labels, K)
            assert first.layers[3].params()[0].sharded
            save_checkpoint(path, first, topo, epoch=0)
            comm.Barrier()
            resumed, xr = build_sharded(False, Topology.serial(), 2), x
        else:
            if comm.Get_rank() == 0:
                first = build_sharded(False, Topology.serial(), 1)
                first.fit(x, labels, K)
                save_checkpoint(path, first, Topology.serial(), epoch=0)
            comm.Barrier()
            resumed, xr = build_sharded(True, topo, 2), xt
        resume = apply_checkpoint(resumed, read_checkpoint(path))
        costs = resumed.fit(xr, labels, K, resume=resume)
        np.testing.assert_allclose(costs, ref_costs[1:], rtol=1e-10)
        assert resumed.misclass_rate(xr, labels) == ref.misclass_rate(x, labels)
    finally:
        topo.free()


@pytest.mark.parametrize("ndata,npipe", [pytest.param(2, 2, id="data2-pipe2", marks=pytest.mark.mpi_size(4)),
                                         pytest.param(4, 1, id="data4", marks=pytest.mark.mpi_size(4))])
def test_a_replica_without_rows_takes_part(comm, data, ndata, npipe):
    """11 images in batches of 5: the last batch has 1 row, so a replica gets none; it still
    joins batch norm's statistics sum and the gradient sum (with nothing), on pipeline stages too."""
    x, labels = data[0][:11], data[1][:11]
    topo = Topology.from_world(grid=(1, 1), data=ndata, pipe=npipe, world=comm)
    stages = [3] if npipe == 2 else None
    try:
        ref = build(False, Topology.serial(), "adam", stages=stages)
        ref_costs = ref.fit(x, labels, K)
        model = build(True, topo, "adam", stages=stages)
        costs = model.fit(x, labels, K)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        assert model.misclass_rate(x, labels) == ref.misclass_rate(x, labels)
    finally:
        topo.free()
