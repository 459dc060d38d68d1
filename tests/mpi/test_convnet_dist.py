"""The promise, tested: a ConvnetDist trained on tiles over a process grid ends with the same
weights (sliced where sharded), the same per-epoch costs and the same error rates as the
single-process Convnet trained on whole images — float64, to 1e-10 relative.

Every rank builds the same global data (same seed) and runs the single-process oracle itself.
"""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet.layers import (AveragePoolingLayer, ConvLayer, L2PoolingLayer, FullyConnectedLayer,
                            FullyConnectedNoBiasLayer, MaxPoolingLayer)
from distnet.models import Model
from distnet.ops.activations import Logistic, RectLin, Tanh

MPI_SIZES = (1, 2, 3, 4, 6, 9)

N, C, H, W, K = 23, 2, 13, 12, 3  # 23 images in batches of 5: the last batch is short
GRIDS = [(1, 1), (1, 2), (2, 1), (1, 3), (3, 1), (2, 2), (1, 4), (2, 3), (3, 2), (3, 3)]
WI = {"type": "uniform", "low": -0.3, "high": 0.3}


def net_padded_strided():
    """Conv 3x3 pad 1 -> max pool 2x2 s2 -> conv 3x3 s1 -> FC tanh -> FC(bias) logistic."""
    Conv, Pool, FC, FCb = (ConvLayer, MaxPoolingLayer, FullyConnectedNoBiasLayer, FullyConnectedLayer)
    return [Conv(nofm=3, fshape=3, padding=1, weight_init=WI, learning_rate=0.1),
            Pool(fshape=2, stride=2),
            Conv(nofm=4, fshape=3, weight_init=WI, learning_rate=0.1),
            FC(nout=6, weight_init=WI, learning_rate=0.1, activation=Tanh()),
            FCb(nout=K, weight_init=dict(WI, bias_init=0.1), learning_rate=0.1, activation=Logistic())]


def net_rect_pools():
    """Conv 5x3 stride (2,1) pad (2,1) -> L2 pool 3x3 s1 -> avg pool 2x2 s1 pad 1 -> FC(bias)."""
    Conv, L2, Avg, FCb = (ConvLayer, L2PoolingLayer, AveragePoolingLayer, FullyConnectedLayer)
    return [Conv(nofm=3, fshape=[5, 3], stride=[2, 1], padding=[2, 1], weight_init=WI, learning_rate=0.05),
            L2(fshape=3, stride=1),
            Avg(fshape=2, stride=1, padding=1),
            FCb(nout=K, weight_init=WI, learning_rate=0.05, activation=RectLin())]


def net_padded_maxpool():
    """Conv 3x3 -> max pool 3x3 s2 pad 1 (-inf padding) -> FC(bias) logistic."""
    Conv, Pool, FCb = (ConvLayer, MaxPoolingLayer, FullyConnectedLayer)
    return [Conv(nofm=3, fshape=3, weight_init=WI, learning_rate=0.1),
            Pool(fshape=3, stride=2, padding=1),
            FCb(nout=K, weight_init=WI, learning_rate=0.1, activation=Logistic())]


NETS = {"padded_strided": net_padded_strided, "rect_pools": net_rect_pools,
        "padded_maxpool": net_padded_maxpool}


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(42)
    return rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)


def train(layers, model_cls, topo, x, labels, epochs=2, batch_size=5, rng_seed=3, shape=(C, H, W), nclasses=K):
    """``(model, epoch costs, predictions of x)`` of a model for global images ``shape`` trained
    on ``x`` (all of them, or this rank's tile of them for a dist model) with momentum 0.5: the oracle and the run under test
    are this same call on the same global data."""
    model = model_cls(layers=layers, num_epochs=epochs, batch_size=batch_size, shuffle=True,
                      momentum={"type": "constant", "coef": 0.5})
    model.infer_shapes(shape)
    model.configure(Numpy64(rng_seed=rng_seed), topo)
    model.init_params()
    costs = model.fit(x, labels, nclasses)
    return model, costs, model.predict(x)


def grid_params(grids=GRIDS):
    """``grids`` as parameters marked with the rank count each needs."""
    return [pytest.param(g, id=f"{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(g[0] * g[1])) for g in grids]


@pytest.mark.parametrize("net", list(NETS))
@pytest.mark.parametrize("grid", grid_params())
def test_dist_training_equals_single_process(topologies, data, grid, net):
    x, labels = data
    topo = topologies(grid)
    ref, ref_costs, ref_out = train(NETS[net](), Model, Topology.serial(), x, labels)
    t = tile_of((H, W), topo.grid, topo.coords)
    dist, costs, out = train(NETS[net](), Model, topo, x[:, :, t.y0:t.y1, t.x0:t.x1], labels)

    np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
    np.testing.assert_allclose(out, ref_out, rtol=1e-10, atol=1e-12)
    for lr, ld in zip(ref.layers, dist.layers):
        for pr, pd in zip(lr.params(), ld.params()):
            want = pr.value[:, ld.cols] if pd.sharded else pr.value
            np.testing.assert_allclose(pd.value, want, rtol=1e-10, atol=1e-13, err_msg=pd.name)


@pytest.mark.parametrize("grid", grid_params())
def test_initial_weights_are_the_global_draw_sliced(topologies, grid):
    topo = topologies(grid)
    ref = Model(layers=net_padded_strided(), num_epochs=0)
    dist = Model(layers=net_padded_strided(), num_epochs=0)
    for model, tp in ((ref, Topology.serial()), (dist, topo)):
        model.infer_shapes((C, H, W))
        model.configure(Numpy64(rng_seed=9), tp)
        model.init_params()
    fc_ref, fc = ref.layers[3], dist.layers[3]
    cols = fc.cols if fc.cols is not None else np.arange(fc_ref.W.shape[1])  # 1x1: not sharded
    np.testing.assert_array_equal(fc.W, fc_ref.W[:, cols])
    np.testing.assert_array_equal(dist.layers[0].W, ref.layers[0].W)
    # the column shards of all ranks tile the feature vector exactly once
    counts = np.zeros(fc_ref.W.shape[1], int)
    counts[cols] = 1
    total = topo.spatial.allreduce(counts)
    assert (total == 1).all()


def _pool_layer(cls, topo, **keys):
    from distnet.layers.base import SPATIAL, LayerContext
    layer = cls(**keys)
    layer.infer_shape((C, H, W))
    ctx = LayerContext(Numpy64(), topo, 0)
    layer.bind(ctx)
    layer.configure(SPATIAL, ctx)
    return layer


@pytest.mark.parametrize("keys", [dict(fshape=3, stride=2, padding=1),
                                  dict(fshape=[2, 3], stride=[1, 2], padding=[1, 2])],
                         ids=["3x3s2p1", "2x3s1x2p1x2"])
@pytest.mark.parametrize("grid", grid_params())
def test_padded_maxpool_on_negative_values(topologies, grid, keys):
    """Max pooling's padding is -inf on every rank: on all-negative images a border window gives
    the max of its real pixels (the halo exchange fills zeros outside the image; those must not
    win either), forward and backward, equal to the single-process layer and to a naive loop."""
    topo = topologies(grid)
    x = np.random.RandomState(7).standard_normal((4, C, H, W)) - 10.0
    ref = _pool_layer(MaxPoolingLayer, Topology.serial(), **keys)
    dist = _pool_layer(MaxPoolingLayer, topo, **keys)
    y_ref = ref.fprop(x)
    (fh, fw), (sy, sx), (py, px) = ref.fshape, ref.stride, ref.padding
    xp = np.pad(x, ((0, 0), (0, 0), (py, py), (px, px)), constant_values=-np.inf)
    naive = np.array([[[[xp[b, c, i * sy:i * sy + fh, j * sx:j * sx + fw].max()
                         for j in range(y_ref.shape[3])] for i in range(y_ref.shape[2])]
                       for c in range(C)] for b in range(4)])
    np.testing.assert_array_equal(y_ref, naive)
    assert (y_ref < -5).all()
    own, out = dist.plan.own, dist.plan.out_tile
    y = dist.fprop(np.ascontiguousarray(x[:, :, own.y0:own.y1, own.x0:own.x1]))
    np.testing.assert_array_equal(y, y_ref[:, :, out.y0:out.y1, out.x0:out.x1])
    dy = np.random.RandomState(8).standard_normal(y_ref.shape)
    dx_ref = ref.bprop(dy)
    dx = dist.bprop(np.ascontiguousarray(dy[:, :, out.y0:out.y1, out.x0:out.x1]))
    np.testing.assert_allclose(dx, dx_ref[:, :, own.y0:own.y1, own.x0:own.x1], rtol=1e-12, atol=1e-14)
