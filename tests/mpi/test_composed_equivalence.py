"""Compositions of the promise (dist == one process, float64) that the other modules do not reach:

* a checkpoint of a graph (residual addition, channel concatenation of a strided conv and a
  padded average pooling, batch norm, dropout, global average pooling, AdamW with a per-step
  warm-up x cosine schedule and clipping by global norm; reshuffled epochs, a short last batch)
  written on one layout resumes on ANOTHER layout (another grid and another replica count, not
  only one process) and ends where the uninterrupted one-process run ends: per-epoch costs, error
  rate, outputs, every gathered weight, the batch-norm running statistics and Adam's moments;
* a graph whose layers read one value twice (``ConcatLayer`` of ``[c, c]``, ``AddLayer`` of
  ``[input, input]``): the first step crashed with ``KeyError: 0`` (the value was dropped once
  per mention), on one process and on every grid;
* a model without any window layer (batch norm, dropout and a fully connected layer straight on
  the image tiles): its only plane is the input images', which the grid must cut.

Every rank builds the same global data and runs the single-process oracle itself.
"""
import os
import shutil
import tempfile

import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet.layers import AddLayer, AveragePoolingLayer, ConcatLayer, ConvLayer, FullyConnectedLayer
from distnet.layers.batchnorm import BatchNormLayer
from distnet.layers.dropout import DropoutLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.models import Model
from distnet.models.checkpoint import apply_checkpoint, read_checkpoint, save_checkpoint
from distnet.models.global_params import gather_params
from distnet.ops.activations import Identity, RectLin, Tanh
from distnet.ops.costs import SoftmaxCrossEntropy
from distnet.optim.rules import AdamW
from distnet.optim.schedules import CosineSchedule, LinearWarmup

MPI_SIZES = (4, 6)

N, C, H, W, K = 13, 2, 9, 8, 3      # 13 images in batches of 5: the last batch is short
WI = {"type": "uniform", "low": -0.4, "high": 0.4}


def _classes():
    return (ConvLayer, BatchNormLayer, DropoutLayer, AveragePoolingLayer,
             GlobalAveragePoolingLayer, FullyConnectedLayer)


def residual_graph():
    """conv -> BN ReLU -> conv 3x5 -> BN, + the first BN, ReLU -> dropout -> conv 3x3/2 ||
    avg pool 3x3/2 pad 1 of the sum -> concat -> BN tanh -> GAP -> FC logits."""
    Conv, BN, Drop, Avg, GAP, FC = _classes()
    return [Conv(name="c1", nofm=3, fshape=3, padding=1, weight_init=WI),
            BN(name="bn1", activation=RectLin()),
            Conv(name="c2", nofm=3, fshape=[3, 5], padding=[1, 2], weight_init=WI),
            BN(name="bn2", momentum=0.2),
            AddLayer(name="add", inputs=["bn2", "bn1"], activation=RectLin()),
            Drop(name="drop", p=0.3),
            Conv(name="c3", nofm=4, fshape=3, stride=2, padding=1, weight_init=WI),
            Avg(name="ap", inputs=["add"], fshape=3, stride=2, padding=1),
            ConcatLayer(name="cat", inputs=["c3", "ap"]),
            BN(name="bn3", activation=Tanh()),
            GAP(name="gap"),
            FC(name="out", nout=K, weight_init=dict(WI, bias_init=0.0), activation=Identity())]


def twice_graph():
    """x + x -> conv -> concat(c, c) -> BN -> FC: two layers that read one value twice."""
    Conv, BN, _, _, _, FC = _classes()
    return [AddLayer(name="twice_in", inputs=["input", "input"]),
            Conv(name="c", nofm=2, fshape=3, stride=[1, 2], padding=1, weight_init=WI, activation=Tanh()),
            ConcatLayer(name="twice", inputs=["c", "c"]),
            BN(name="bn"),
            FC(name="out", nout=K, weight_init=WI, activation=Identity())]


def no_window_net():
    """BN -> dropout -> FC(tanh) on the tiles -> FC logits: no window layer at all."""
    _, BN, Drop, _, _, FC = _classes()
    return [BN(name="bn", activation=RectLin()), Drop(name="drop", p=0.25),
            FC(name="fc", nout=5, weight_init=WI, activation=Tanh()),
            FC(name="out", nout=K, weight_init=WI, activation=Identity())]


def build(net, dist, topo, epochs=2):
    model = (Model if dist else Model)(
        layers=net(), num_epochs=epochs, batch_size=5, shuffle=True, cost=SoftmaxCrossEntropy(),
        learning_rule=AdamW(learning_rate=0.02, weight_decay=0.05, max_grad_norm=0.5,
                            schedule=[LinearWarmup(2), CosineSchedule(6)], schedule_unit="step"))
    model.infer_shapes((C, H, W))
    model.configure(Numpy64(rng_seed=5), topo)
    model.init_params()
    return model


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(11)
    return rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)


def tiles(x, topo):
    t = tile_of((H, W), topo.grid, topo.coords)
    return x[:, :, t.y0:t.y1, t.x0:t.x1]


def _entries(model, topo, group):
    e = gather_params(model, topo, group)
    return None if e is None else {x["name"]: x for x in e}


def assert_same_state(model, topo, ref):
    """Every gathered weight, buffer (BN running statistics) and optimiser state array of
    ``model`` equals ``ref``'s (checked on world rank 0; every rank gathers)."""
    for group in ("params", "buffers"):
        got, want = _entries(model, topo, group), _entries(ref, Topology.serial(), group)
        if topo.rank == 0:
            assert set(got) == set(want), group
            for name, e in want.items():
                np.testing.assert_allclose(got[name]["value"], e["value"], rtol=1e-9, atol=1e-12, err_msg=name)
                assert set(got[name]["state"]) == set(e["state"]), name
                for k, a in e["state"].items():
                    np.testing.assert_allclose(got[name]["state"][k], a, rtol=1e-8, atol=1e-12, err_msg=f"{name} {k}")


def assert_same_run(model, topo, costs, ref, ref_costs, x, labels):
    xt = tiles(x, topo)
    np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
    assert model.misclass_rate(xt, labels) == ref.misclass_rate(x, labels)
    if topo.ndata == 1:   # evaluation mode (running statistics), replicated outputs
        np.testing.assert_allclose(model.predict(xt), ref.predict(x), rtol=1e-9, atol=1e-12)
    assert_same_state(model, topo, ref)


def _layout_id(layout):
    d, (py, px) = layout
    return f"data{d}-grid{py}x{px}"


# (first layout, the layout that resumes): another grid and another replica count
RESUMES = [((1, (2, 2)), (2, (1, 2))), ((2, (2, 1)), (4, (1, 1))), ((4, (1, 1)), (1, (1, 4))),
           ((1, (2, 3)), (3, (2, 1))), ((2, (1, 3)), (1, (3, 2))), ((6, (1, 1)), (2, (3, 1)))]


@pytest.mark.parametrize("first,second", [
    pytest.param(a, b, id=f"{_layout_id(a)}-then-{_layout_id(b)}", marks=pytest.mark.mpi_size(a[0] * a[1][0] * a[1][1]))
    for a, b in RESUMES])
def test_checkpoint_resumes_on_another_layout(comm, data, first, second):
    """One epoch on ``first``, a checkpoint, the second epoch on ``second``: the one-process
    run's numbers, every weight, BN statistic and Adam moment."""
    x, labels = data
    ref = build(residual_graph, False, Topology.serial())
    ref_costs = ref.fit(x, labels, K)
    tmp = comm.bcast(tempfile.mkdtemp(prefix="distnet-composed-") if comm.Get_rank() == 0 else None)
    path = os.path.join(tmp, "ck.h5")
    try:
        (d1, g1), (d2, g2) = first, second
        topo = Topology.from_world(grid=g1, data=d1, world=comm)
        try:
            model = build(residual_graph, g1 != (1, 1), topo, epochs=1)
            np.testing.assert_allclose(model.fit(tiles(x, topo), labels, K), ref_costs[:1], rtol=1e-10)
            save_checkpoint(path, model, topo, epoch=0)
        finally:
            topo.free()
        comm.Barrier()
        topo = Topology.from_world(grid=g2, data=d2, world=comm)
        try:
            resumed = build(residual_graph, g2 != (1, 1), topo)
            resume = apply_checkpoint(resumed, read_checkpoint(path))
            assert resumed.steps == 3 and resumed.layers[1].params()[0].state is not None
            costs = resumed.fit(tiles(x, topo), labels, K, resume=resume)
            assert_same_run(resumed, topo, costs, ref, ref_costs[1:], x, labels)
        finally:
            topo.free()
    finally:
        comm.Barrier()
        if comm.Get_rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)


LAYOUTS = [pytest.param(d, g, id=_layout_id((d, g)), marks=pytest.mark.mpi_size(d * g[0] * g[1]))
           for d, g in [(1, (2, 2)), (2, (1, 2)), (4, (1, 1)), (1, (3, 2)), (2, (1, 3)), (3, (2, 1))]]


@pytest.mark.parametrize("net", [twice_graph, no_window_net], ids=["reads-twice", "no-window-layer"])
@pytest.mark.parametrize("ndata,grid", LAYOUTS)
def test_graphs_and_plain_tiles_equal_one_process(comm, data, ndata, grid, net):
    x, labels = data
    ref = build(net, False, Topology.serial())
    ref_costs = ref.fit(x, labels, K)
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        model = build(net, grid != (1, 1), topo)
        costs = model.fit(tiles(x, topo), labels, K)
        assert_same_run(model, topo, costs, ref, ref_costs, x, labels)
    finally:
        topo.free()
