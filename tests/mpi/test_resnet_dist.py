"""A residual graph distributed exactly: a small ResNet — conv stem, batch norm, an
identity block (AddLayer), a stride-2 block with a 1x1/2 projection shortcut, a concatenation
branch, global average pooling, FC logits, softmax cross-entropy, Adam — trained in float64 on
spatial grids 1x2, 2x1, 2x2, 1x3, 2x3, 3x3, with and without data replicas, gives the
single-process costs (1e-10 relative), weights, batch-norm running statistics, outputs and
error rates. Each window layer on a branch exchanges its own halos; additions and
concatenations are local on the tiles."""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet.layers import AddLayer, ConcatLayer, ConvLayer, FullyConnectedLayer
from distnet.layers.batchnorm import BatchNormLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.models import Model
from distnet.ops.activations import RectLin
from distnet.ops.costs import SoftmaxCrossEntropy
from distnet.optim.rules import Adam

MPI_SIZES = (2, 3, 4, 6, 9)
MPI_TIMEOUT = 600

N, C, H, W, K = 13, 2, 12, 9, 3      # 13 images in batches of 5 (the last has 3)
WI = {"type": "normal", "scale": 0.4}
# (grid, data replicas)
CASES = [((1, 2), 1), ((2, 1), 1), ((2, 2), 1), ((1, 3), 1), ((2, 3), 1), ((3, 3), 1),
         ((1, 2), 2), ((2, 1), 2), ((1, 3), 2), ((3, 1), 3)]


def resnet():
    Conv, BN, GAP, FC = (ConvLayer, BatchNormLayer, GlobalAveragePoolingLayer, FullyConnectedLayer)
    relu = RectLin
    return [
        Conv(name="stem", nofm=3, fshape=3, padding=1, weight_init=WI),
        BN(name="stem_bn", activation=relu()),
        Conv(name="b1c1", nofm=3, fshape=3, padding=1, weight_init=WI),
        BN(name="b1n1", activation=relu()),
        Conv(name="b1c2", nofm=3, fshape=3, padding=1, weight_init=WI),
        BN(name="b1n2"),
        AddLayer(name="b1", inputs=["b1n2", "stem_bn"], activation=relu()),
        Conv(name="b2c1", nofm=4, fshape=3, stride=2, padding=1, weight_init=WI),
        BN(name="b2n1", activation=relu()),
        Conv(name="b2c2", nofm=4, fshape=3, padding=1, weight_init=WI),
        BN(name="b2n2"),
        Conv(name="b2s", inputs=["b1"], nofm=4, fshape=1, stride=2, weight_init=WI),
        BN(name="b2sn"),
        AddLayer(name="b2", inputs=["b2n2", "b2sn"], activation=relu()),
        Conv(name="side", inputs=["b1"], nofm=2, fshape=[3, 2], stride=2, padding=1, weight_init=WI),
        ConcatLayer(name="cat", inputs=["b2", "side"]),
        GAP(name="gap"),
        FC(name="out", nout=K, weight_init=WI)]


def keys():
    return dict(num_epochs=2, batch_size=5, shuffle=True, cost=SoftmaxCrossEntropy(),
                learning_rule=Adam(learning_rate=0.02))


def train(model, topo, x, labels):
    model.infer_shapes((C, H, W))
    model.configure(Numpy64(rng_seed=3), topo)
    model.init_params()
    costs = model.fit(x, labels, K)
    return costs, model.misclass_rate(x, labels)


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(7)
    labels = rng.randint(0, K, N)
    x = rng.standard_normal((N, C, H, W))
    x[:, 0, :4, :4] += (labels == 0)[:, None, None]
    return x, labels


@pytest.fixture(scope="module")
def reference(data):
    x, labels = data
    model = Model(layers=resnet(), **keys())
    costs, rate = train(model, Topology.serial(), x, labels)
    with model.evaluating():
        out = model.fprop(x)
    return model, costs, rate, out


def _cases():
    out = []
    for grid, d in CASES:
        n = grid[0] * grid[1] * d
        if n in MPI_SIZES:
            out.append(pytest.param(grid, d, id=f"{grid[0]}x{grid[1]}-data{d}", marks=pytest.mark.mpi_size(n)))
    return out


@pytest.mark.parametrize("grid, ndata", _cases())
def test_resnet_on_a_grid_equals_single_process(comm, data, reference, grid, ndata):
    x, labels = data
    ref, ref_costs, ref_rate, ref_out = reference
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        t = tile_of((H, W), topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        model = Model(layers=resnet(), **keys())
        costs, rate = train(model, topo, xt, labels)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        rel = max(abs(a - b) / abs(b) for a, b in zip(costs, ref_costs))
        print(f"RESNET grid {grid[0]}x{grid[1]} data {ndata}: max relative cost diff {rel:.2e}, "
              f"error rate {rate} (one process {ref_rate})")
        assert rate == ref_rate
        if ndata == 1:
            with model.evaluating():
                np.testing.assert_allclose(model.fprop(xt), ref_out, rtol=1e-10, atol=1e-12)
        for lr, ld in zip(ref.layers, model.layers):
            for pr, pd in zip(lr.params() + lr.buffers(), ld.params() + ld.buffers()):
                want = pr.value[:, ld.cols] if pd.sharded else pr.value
                np.testing.assert_allclose(pd.value, want, rtol=1e-10, atol=1e-13, err_msg=pd.name)
    finally:
        topo.free()
