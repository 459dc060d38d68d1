"""The large-image kernels under a process grid: a ConvnetDist whose convs take the flat-shift
kernel (both tile im2col layouts, several tiles per image, the fused ReLU and its gradient)
and whose max pooling takes the NCHW path, trained on tiles of uneven grids, ends with the
same weights, costs and outputs as the single-process Convnet on whole images (float64, to
1e-10 relative): every output pixel is the same sum whatever tile a rank computes.

The kernel thresholds are lowered so that small images take the large-image paths.
"""
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet.layers import ConvLayer, FullyConnectedNoBiasLayer, MaxPoolingLayer
from distnet.models import Model
from distnet.ops import maxpool_nchw, parallel, pooling
from distnet.ops.conv import choose, flat
from distnet.ops.activations import Logistic, RectLin
from tests.mpi.test_convnet_dist import grid_params, train

MPI_SIZES = (1, 2, 3, 4, 6)

N, C, H, W, K = 12, 2, 14, 17, 3   # 12 images in batches of 4
GRIDS = [(1, 1), (1, 2), (2, 1), (1, 3), (3, 1), (2, 2), (2, 3), (3, 2)]
WI = {"type": "uniform", "low": -0.3, "high": 0.3}
FIT = {"batch_size": 4, "rng_seed": 5, "shape": (C, H, W), "nclasses": K}


def net():
    """conv 3x3(12, pad 1)+ReLU [full tile im2col: 2 channels] -> conv 3x3(12, pad 1)+ReLU
    [shifted rows] -> max pool 2 -> conv 3x3(5, pad 1)+ReLU [shifted rows] -> FC logistic."""
    Conv, Pool, FC = (ConvLayer, MaxPoolingLayer, FullyConnectedNoBiasLayer)
    return [Conv(nofm=12, fshape=3, padding=1, weight_init=WI, learning_rate=0.05, activation=RectLin()),
            Conv(nofm=12, fshape=3, padding=1, weight_init=WI, learning_rate=0.05, activation=RectLin()),
            Pool(fshape=2, stride=2),
            Conv(nofm=5, fshape=3, padding=1, weight_init=WI, learning_rate=0.05, activation=RectLin()),
            FC(nout=K, weight_init=WI, learning_rate=0.05, activation=Logistic())]


@pytest.fixture(autouse=True)
def large_image_paths(monkeypatch):
    monkeypatch.setattr(choose, "FLAT_MIN_WIDTH", 1)   # every tile, however narrow
    monkeypatch.setattr(choose, "FLAT_MAX_WASTE", 1.0)
    monkeypatch.setattr(flat, "TILE_BYTES", 3000)          # a few output rows per tile
    monkeypatch.setattr(pooling, "NCHW_MIN_PLANE", 0)
    monkeypatch.setattr(maxpool_nchw, "NCHW_BLOCK_BYTES", 2 * 8 * 8 * 8)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("grid", grid_params(GRIDS))
def test_flat_kernels_dist_equals_single_process(topologies, grid, threads, monkeypatch):
    parallel.kernel_threads()
    if threads > 1 and not parallel._state["blas"]:
        pytest.skip("no BLAS library found by threadpoolctl: kernel threading is off")
    monkeypatch.setitem(parallel._state, "threads", threads)
    rng = np.random.RandomState(11)
    x, labels = rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)
    topo = topologies(grid)
    layouts = []
    real = flat.TileCols.__init__

    def spy(self, *a, **k):          # which tile im2col layouts ran (both must)
        real(self, *a, **k)
        layouts.append(self.shifts)
    monkeypatch.setattr(flat.TileCols, "__init__", spy)
    ref, ref_costs, ref_out = train(net(), Model, Topology.serial(), x, labels, **FIT)
    assert set(layouts) == {True, False}
    t = tile_of((H, W), topo.grid, topo.coords)
    layouts.clear()
    dist, costs, out = train(net(), Model, topo, x[:, :, t.y0:t.y1, t.x0:t.x1], labels, **FIT)
    assert set(layouts) == {True, False}

    np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
    np.testing.assert_allclose(out, ref_out, rtol=1e-10, atol=1e-12)
    for lr, ld in zip(ref.layers, dist.layers):
        for pr, pd in zip(lr.params(), ld.params()):
            want = pr.value[:, ld.cols] if pd.sharded else pr.value
            np.testing.assert_allclose(pd.value, want, rtol=1e-10, atol=1e-13, err_msg=pd.name)
