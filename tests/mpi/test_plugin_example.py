"""The shipped example plugin (``examples/plugin``, docs/extending.md): ``ScaleShiftLayer`` on a
process grid gives what it gives on one process (float64, 1e-10 relative): one class, which
distributes itself.

* the layer alone: every rank builds the global input, runs the single-process layer as the
  oracle, and compares its own tile of the output and of the input gradient, and the parameter
  gradients once summed over the communicator the layer names (tiles; whole images);
* in a model: a ConvnetDist with the layer between convolution and pooling trains to the
  same costs, outputs and weights as the Model, also with data replicas (the same layer
  list: no class changes).

The plugin is loaded from ``examples/plugin`` through ``sys.path`` (not pip-installed).
"""
import sys
from pathlib import Path

import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.comm.reduce import allreduce_sum
from distnet.geometry import tile_of
from distnet.layers import ConvLayer, FullyConnectedLayer, LayerContext, MaxPoolingLayer
from distnet.layers.base import REPLICATED, SPATIAL
from distnet.layers.params import OVER_DATA, OVER_GRAD
from distnet.models import Model
from distnet.ops.activations import Logistic

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "plugin"))
from distnet_example_plugin import ScaleShiftLayer  # noqa: E402

MPI_SIZES = (1, 2, 3, 4)

N, C, H, W, K = 13, 2, 9, 8, 3   # 13 images in batches of 5 (the last has 3)
WI = {"type": "uniform", "low": -0.3, "high": 0.3}
SCALE_INIT = {"type": "uniform", "low": 0.5, "high": 1.5, "bias_init": 0.1}
GRIDS = [(1, 1), (1, 2), (2, 1), (1, 3), (3, 1), (2, 2), (1, 4), (4, 1)]


def _grid_params():
    return [pytest.param(g, id=f"{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(g[0] * g[1])) for g in GRIDS]


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(7)
    return rng.standard_normal((N, C, H, W)), rng.randint(0, K, N), rng.standard_normal((N, C, H, W))


def _layer(cls, topo, layout=SPATIAL):
    layer = cls(weight_init=SCALE_INIT, learning_rate=0.1, name="ss")
    layer.infer_shape((C, H, W))
    ctx = LayerContext(Numpy64(rng_seed=1), topo, 0)
    layer.bind(ctx)
    assert layer.configure(layout, ctx) == layout
    layer.init_params(np.random.RandomState(11))
    return layer


def _oracle(x, delta):
    ref = _layer(ScaleShiftLayer, Topology.serial())
    y = ref.fprop(x)
    dx = ref.bprop(delta)
    return ref, y, dx


@pytest.mark.parametrize("grid", _grid_params())
def test_layer_on_tiles_equals_the_global_layer(topologies, data, grid):
    x, _, delta = data
    topo = topologies(grid)
    ref, y, dx = _oracle(x, delta)
    t = tile_of((H, W), topo.grid, topo.coords)
    tile = (slice(None), slice(None), slice(t.y0, t.y1), slice(t.x0, t.x1))
    layer = _layer(ScaleShiftLayer, topo)
    np.testing.assert_array_equal(layer.scale, ref.scale)   # replicated: the same global draw
    np.testing.assert_allclose(layer.fprop(x[tile]), y[tile], rtol=1e-12)
    np.testing.assert_allclose(layer.bprop(delta[tile]), dx[tile], rtol=1e-12)
    assert [p.reduce_over for p in layer.params()] == [OVER_GRAD, OVER_GRAD]
    grads = [p.grad.copy() for p in layer.params()]
    allreduce_sum(grads, topo.comm(layer.params()[0].reduce_over.comm))   # what the training step does
    for g, p in zip(grads, ref.params()):
        np.testing.assert_allclose(g, p.grad, rtol=1e-10, err_msg=p.name)


@pytest.mark.parametrize("grid", _grid_params())
def test_layer_on_whole_images_sums_over_data_replicas_only(topologies, data, grid):
    """A replicated input (whole images on every rank): the gradient is complete here."""
    x, _, delta = data
    ref, y, dx = _oracle(x, delta)
    layer = _layer(ScaleShiftLayer, topologies(grid), layout=REPLICATED)
    np.testing.assert_allclose(layer.fprop(x), y, rtol=1e-12)
    np.testing.assert_allclose(layer.bprop(delta), dx, rtol=1e-12)
    assert [p.reduce_over for p in layer.params()] == [OVER_DATA, OVER_DATA]
    for pd, pr in zip(layer.params(), ref.params()):
        np.testing.assert_allclose(pd.grad, pr.grad, rtol=1e-12)


def net():
    """Conv 3x3 pad 1 -> ScaleShift -> max pool 2x2 -> ScaleShift (default init) -> FC(bias)."""
    return [ConvLayer(nofm=3, fshape=3, padding=1, weight_init=WI, learning_rate=0.1),
            ScaleShiftLayer(weight_init=SCALE_INIT),
            MaxPoolingLayer(fshape=2, stride=2),
            ScaleShiftLayer(learning_rate=0.05),
            FullyConnectedLayer(nout=K, weight_init=WI, learning_rate=0.1, activation=Logistic())]


def train(model, topo, x, labels):
    model.infer_shapes((C, H, W))
    model.configure(Numpy64(rng_seed=3), topo)
    model.init_params()
    return model.fit(x, labels, K)


def _keys():
    return dict(num_epochs=2, batch_size=5, shuffle=True, learning_rate=0.2,
                momentum={"type": "constant", "coef": 0.5})


@pytest.fixture(scope="module")
def reference(data):
    x, labels, _ = data
    model = Model(layers=net(), **_keys())
    costs = train(model, Topology.serial(), x, labels)
    return model, costs, model.predict(x)


# (grid rows, data replicas): the grid is rows x (size / (rows * data))
MODELS = {"row": (1, 1), "col": (None, 1), "data2": (1, 2)}


def _model_cases():
    out = []
    for name, (_, d) in MODELS.items():
        sizes = [n for n in MPI_SIZES if n % d == 0]
        out.append(pytest.param(name, id=name, marks=pytest.mark.mpi_size(*sizes)))
    return out


@pytest.mark.parametrize("name", _model_cases())
def test_convnet_with_the_plugin_layer_equals_single_process(comm, data, reference, name):
    x, labels, _ = data
    ref, ref_costs, ref_out = reference
    rows, ndata = MODELS[name]
    nspatial = comm.Get_size() // ndata
    grid = (nspatial, 1) if rows is None else (1, nspatial)
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        t = tile_of((H, W), topo.grid, topo.coords)
        model = Model(layers=net(), **_keys())
        costs = train(model, topo, x[:, :, t.y0:t.y1, t.x0:t.x1], labels)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        if ndata == 1:
            np.testing.assert_allclose(model.predict(x[:, :, t.y0:t.y1, t.x0:t.x1]), ref_out,
                                       rtol=1e-10, atol=1e-12)
        for lr, ld in zip(ref.layers, model.layers):
            for pr, pd in zip(lr.params(), ld.params()):
                want = pr.value[:, ld.cols] if pd.sharded else pr.value
                np.testing.assert_allclose(pd.value, want, rtol=1e-10, atol=1e-13, err_msg=pd.name)
        assert not np.allclose(model.layers[3].scale, 1.0)   # the plugin layer did learn
    finally:
        topo.free()
