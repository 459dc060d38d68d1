"""A 3-D U-Net-shaped graph on 7x9x8 volumes in float64 (a 'same' conv, max pooling, a conv with
batch norm, a decoder layer, the skip connection cropped to the decoder map, channel
concatenation, a conv; global average pooling and FC logits as the cost's input), on ``Pz x Py
x Px`` grids with uneven tiles and with data replicas: 2x2x2 (8 ranks), 3x2x1 (6) and 2
replicas x 1x1x2 (4), against the single-process model that every rank also runs:

* one step's forward and backward: every layer's output tile and input-gradient tile equal the
  same tile of the one-process step, every summed parameter gradient the one-process gradient;
* two epochs of training: the same costs, error rates, outputs, weights and batch-norm
  statistics.

The decoder layers: a transposed convolution (3x3x3, stride 2, padding 1, output padding 1),
trilinear upsampling by 2, and a chain of a crop that pads and cuts, trilinear upsampling by
[2, 1, 3] and a transposed convolution of per-axis kernel, stride and padding."""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet.layers import ConvLayer, CropLayer, DeconvLayer, FullyConnectedLayer, UpsampleLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.models import Model
from distnet.models.checkpoint import gather_params
from distnet.ops.activations import Identity, RectLin
from distnet.ops.costs import SoftmaxCrossEntropy
from distnet.optim.rules import GradientDescent
from tests.mpi.test_random_nets import assert_same_run
from tests.mpi.test_unet import assert_same, one_step
from tests.unet_net import unet

MPI_SIZES = (4, 6, 8)
MPI_TIMEOUT = 400

SHAPE = (2, 7, 9, 8)                     # (C, D, H, W)
K, N = 3, 5
WI = {"type": "uniform", "low": -0.4, "high": 0.4}
LAYOUTS = {4: ((1, 1, 2), 2), 6: ((3, 2, 1), 1), 8: ((2, 2, 2), 1)}
DECODERS = {
    "deconv": lambda: DeconvLayer(name="up", nofm=3, fshape=3, stride=2, padding=1, output_padding=1,
                                  weight_init=WI, activation=RectLin()),
    "linear": lambda: UpsampleLayer(name="up", factor=2, mode="linear"),
}


def crops():
    """7x9x8 -> crop that pads and cuts (8x7x8) -> trilinear x[2, 1, 3] (16x7x24) -> transposed
    conv f [2, 3, 1], s [1, 2, 3], p [0, 1, 0] (17x13x72) -> conv stride 3 -> GAP -> FC."""
    return [CropLayer(name="pad", margins=[[-1, 0], 1, [-1, 1]]),
            UpsampleLayer(name="up", factor=[2, 1, 3], mode="linear"),
            DeconvLayer(name="dc", nofm=2, fshape=[2, 3, 1], stride=[1, 2, 3], padding=[0, 1, 0],
                        weight_init=WI),
            ConvLayer(name="conv", nofm=2, fshape=3, stride=3, weight_init=WI, activation=RectLin()),
            GlobalAveragePoolingLayer(name="gap"),
            FullyConnectedLayer(name="fc", nout=K, weight_init=dict(WI, bias_init=0.0), activation=Identity())]


def build(decoder, topo):
    # the U-Net of the 2-D test, its first conv 'same' (7x9x8 -> pool 3x4x4 -> decoder 6x8x8)
    layers = crops() if decoder == "crops" else unet(decoder, DECODERS, padding=1)
    model = Model(layers=layers, num_epochs=2, batch_size=2,
                  cost=SoftmaxCrossEntropy(),
                  learning_rule=GradientDescent(learning_rate=0.2, momentum={"type": "constant", "coef": 0.5}))
    model.infer_shapes(SHAPE)
    model.configure(Numpy64(rng_seed=3), topo)
    model.init_params()
    return model


def my_part(a, shape, topo):
    """This rank's tile of a one-process activation ``a`` of global ``shape`` (vectors: all)."""
    if len(shape) != len(SHAPE):
        return a
    t = tile_of(shape[1:], topo.grid, topo.coords)
    return a[(slice(None), slice(None)) + tuple(slice(lo, hi) for lo, hi in t.spans)]


def _listed(a):
    return a if isinstance(a, list) else [a]


def check_step(topo, decoder, x, labels):
    ref, model = build(decoder, Topology.serial(3)), build(decoder, topo)
    rows, targets = model.replica_rows(np.arange(N)), np.eye(K)[labels]
    want = one_step(ref, x, targets, np.arange(N), N)
    got = one_step(model, my_part(x, SHAPE, topo), targets, rows, N)
    for layer in ref.layers:
        (y, dx), (gy, gdx) = want[layer.name], got[layer.name]
        assert_same(gy, my_part(y[rows], layer.out_shape, topo), f"{layer.name} output")
        shapes = getattr(layer, "in_shapes", [layer.in_shape])
        for k, (a, b, shape) in enumerate(zip(_listed(dx), _listed(gdx), shapes)):
            if a is not None:
                assert_same(b, my_part(a[rows], shape, topo), f"{layer.name} input gradient {k}")
    for (_, p), (_, q) in zip(ref.trained_params(), model.trained_params()):
        assert_same(q.grad, p.grad, f"{p.name} gradient")


def check_training(topo, decoder, x, labels):
    ref, model = build(decoder, Topology.serial(3)), build(decoder, topo)
    ref_costs = ref.fit(x, labels, K)
    xt = my_part(x, SHAPE, topo)
    assert_same_run(model, model.fit(xt, labels, K), topo, xt, ref, ref_costs, x, labels)
    got, want = gather_params(model, topo, "buffers"), gather_params(ref, Topology.serial(3), "buffers")
    if topo.rank == 0:
        for g, w in zip(got, want):
            assert_same(g["value"], w["value"], g["name"])


@pytest.mark.parametrize("check", [check_step, check_training], ids=["step", "training"])
@pytest.mark.parametrize("decoder", list(DECODERS) + ["crops"])
def test_unet3d_equals_one_process(comm, decoder, check):
    grid, ndata = LAYOUTS[comm.Get_size()]
    rng = np.random.RandomState(11)
    x, labels = rng.standard_normal((N,) + SHAPE), rng.randint(0, K, N)
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        check(topo, decoder, x, labels)
    finally:
        topo.free()
