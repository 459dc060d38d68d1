"""A distributed training step on device arrays waits for the device once, as on one process:
batch norm's global count (Allreduced over the tiles and replicas) and the clipping norm
(Allreduced over the world) stay on the device. The device-like backend with a CUDA-aware MPI
(no host staging, whose copies are waits by design) trains a net of convolution, LCN, batch
norm, dropout, global average pooling and FC layers with Adam and clipping on spatial tiles, on
data replicas, both, and on two pipeline stages of tiles; every rank's every step makes exactly
one wait (its loss), and the run equals the single-process numpy run (float64, 1e-10 relative)."""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet.layers import ConvLayer, FullyConnectedLayer, LCNLayer
from distnet.layers.batchnorm import BatchNormLayer
from distnet.layers.dropout import DropoutLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.models import Model
from distnet.ops.activations import RectLin
from distnet.ops.costs import SoftmaxCrossEntropy
from distnet.optim.rules import Adam
from distnet.testing import measure
from distnet.testing.devicelike import DeviceLike, xp

MPI_SIZES = (2, 4)
C, H, W, K, N = 2, 8, 9, 3, 11
WI = {"type": "uniform", "low": -0.3, "high": 0.3}


def layers():
    return [ConvLayer(nofm=3, fshape=3, padding=1, weight_init=WI), LCNLayer(fshape=[3, 5]),
            BatchNormLayer(activation=RectLin()), DropoutLayer(p=0.25), GlobalAveragePoolingLayer(),
            FullyConnectedLayer(nout=5, weight_init=WI), BatchNormLayer(),
            FullyConnectedLayer(nout=K, weight_init=WI)]


def fit(backend, topo, x, labels, **keys):
    model = Model(layers=layers(), num_epochs=2, batch_size=4, shuffle=True, cost=SoftmaxCrossEntropy(),
                  learning_rule=Adam(learning_rate=0.02, max_grad_norm=0.5), **keys)
    model.infer_shapes((C, H, W))
    model.configure(backend, topo)
    model.init_params()
    return model.fit(x, labels, K)


#: layout -> (Topology.from_world keys at world size n, model keys)
LAYOUTS = {"tiles": lambda n: (dict(grid=(1, n) if n == 2 else (2, 2)), {}),
           "replicas": lambda n: (dict(grid=(1, 1), data=n), {}),
           "both": lambda n: (dict(grid=(1, n // 2), data=2), {}),
           "stages": lambda n: (dict(grid=(1, n // 2), pipe=2), {"stages": [4]})}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_distributed_step_waits_once_and_equals_one_process(comm, mpi, layout, monkeypatch):
    rng = np.random.RandomState(5)
    x, labels = rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)
    ref = fit(Numpy64(rng_seed=3), Topology.serial(), x, labels)
    per_step = measure.waits_per_train_step(monkeypatch)
    saved = xp.cuda_aware_mpi
    world, keys = LAYOUTS[layout](mpi.size)
    topo = Topology.from_world(world=comm, **world)
    try:
        t = tile_of((H, W), topo.grid, topo.coords)
        backend = DeviceLike(rng_seed=3, dtype="float64", cuda_aware_mpi=True)
        costs = fit(backend, topo, x[:, :, t.y0:t.y1, t.x0:t.x1], labels, **keys)
    finally:
        topo.free()
        xp.cuda_aware_mpi = saved
    np.testing.assert_allclose(costs, ref, rtol=1e-10)
    assert per_step == [1] * 6      # 2 epochs of 3 batches (the last one short)
