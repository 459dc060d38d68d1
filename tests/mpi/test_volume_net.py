"""A small 3-D net (conv, max pool, batch norm, conv, a residual addition, a channel
concatenation, dropout, global average pooling and an FC layer straight after a spatial layer)
on volumes cut by a ``Pz x Py x Px`` grid equals the one-process run in float64: 2x2x2 (8
ranks), 3x2x1 (6 ranks, uneven tiles), 1x1x4 and 2 data replicas x 2x1x1 (4 ranks); as a
classifier and as a regression of float targets per volume (MeanSquared). One launch per world
size trains, evaluates and gathers every weight."""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet import layers as L
from distnet.layers.batchnorm import BatchNormLayer
from distnet.layers.dropout import DropoutLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.models import Model
from distnet.ops.activations import RectLin, Tanh
from distnet.experiments.regression_metrics import regression_split_metrics
from distnet.ops.costs import MeanSquared, SoftmaxCrossEntropy
from distnet.optim.rules import GradientDescent
from tests.mpi.test_random_nets import assert_same_run

MPI_SIZES = (4, 6, 8)
MPI_TIMEOUT = 300

K = 3
WI = {"type": "uniform", "low": -0.4, "high": 0.4}
SHAPE = (2, 6, 5, 8)                  # (C, D, H, W)
LAYOUTS = {4: [((1, 1, 4), 1), ((2, 1, 1), 2)], 6: [((3, 2, 1), 1)], 8: [((2, 2, 2), 1)]}


def layers():
    """The net as a graph: ``inputs`` name the layers each one reads."""
    def node(layer, name, *inputs):
        layer.name, layer.inputs = name, list(inputs) or None
        return layer
    return [node(L.ConvLayer(nofm=3, fshape=[3, 2, 3], padding=1, weight_init=WI, activation=RectLin()), "c1"),
            node(L.MaxPoolingLayer(fshape=2, stride=[2, 1, 2], padding=[0, 1, 0]), "pool"),
            node(BatchNormLayer(activation=Tanh()), "bn"),
            node(L.ConvLayer(nofm=3, fshape=3, padding=1, weight_init=WI, activation=Tanh()), "c2"),
            node(L.AddLayer(), "res", "c2", "bn"),
            node(L.ConcatLayer(), "cat", "res", "pool"),
            node(DropoutLayer(p=0.25), "drop", "cat"),
            node(L.AveragePoolingLayer(fshape=[1, 2, 1], stride=1, padding=[0, 1, 0]), "avg", "drop"),
            node(GlobalAveragePoolingLayer(), "gap", "avg"),
            node(L.FullyConnectedNoBiasLayer(nout=K, weight_init=WI), "head1", "gap"),
            node(L.FullyConnectedNoBiasLayer(nout=K, weight_init=WI), "head2", "cat"),
            node(L.AddLayer(), "logits", "head1", "head2")]


def fit(topo, x, labels, cost=None):
    model = Model(layers=layers(), num_epochs=2, batch_size=4, shuffle=True, cost=cost or SoftmaxCrossEntropy(),
                  learning_rule=GradientDescent(learning_rate=0.02, momentum={"type": "constant", "coef": 0.9}))
    model.infer_shapes(SHAPE)
    model.configure(Numpy64(rng_seed=1), topo)
    model.init_params()
    return model, model.fit(x, labels, K)


@pytest.mark.parametrize("regress", [False, True])
@pytest.mark.parametrize("case", range(2))
def test_volume_net_equals_one_process(comm, case, regress):
    """Classes (softmax cross-entropy), or float targets per volume (regression: MeanSquared,
    and its split metrics, MSE and MAE per target, equal to the one process's)."""
    layouts = LAYOUTS[comm.Get_size()]
    if case >= len(layouts):
        pytest.skip("one layout at this world size")
    grid, ndata = layouts[case]
    rng = np.random.RandomState(3)
    x, labels = rng.standard_normal((10,) + SHAPE), rng.randint(0, K, 10)
    if regress:
        labels = rng.uniform(-1, 1, (10, K)).astype(np.float32)
    cost = MeanSquared() if regress else None
    ref, ref_costs = fit(Topology.serial(3), x, labels, cost)
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        t = tile_of(SHAPE[1:], topo.grid, topo.coords)
        xt = x[(slice(None), slice(None)) + tuple(slice(a, b) for a, b in t.spans)]
        model, costs = fit(topo, xt, labels, cost)
        assert_same_run(model, costs, topo, xt, ref, ref_costs, x, labels)
        if regress:
            got, want = regression_split_metrics(model, xt, labels), regression_split_metrics(ref, x, labels)
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-10, err_msg=k)
    finally:
        topo.free()
