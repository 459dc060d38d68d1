"""Data parallelism, alone and composed with the spatial split (neon's ``halodatapar``):
D replicas at global batch B end with the same weights, costs and error rates as one process at
batch B (float64), and the replicas' parameters stay identical after every step."""
import numpy as np
import pytest

from tests.mpi.test_convnet_dist import C, H, K, W, N, net_padded_strided, train
from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet.models import Model

MPI_SIZES = (2, 3, 4, 6)

# (data replicas, spatial grid); N = 23 images in batches of 5: the last batch (3 rows) leaves a
# replica with nothing to do when D > 3.
CASES = [(2, (1, 1)), (3, (1, 1)), (4, (1, 1)), (2, (2, 1)), (2, (1, 2)), (3, (1, 2)), (2, (1, 3))]


def _cases():
    return [pytest.param(d, g, id=f"data{d}-grid{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(d * g[0] * g[1]))
            for d, g in CASES]


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(42)
    return rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)


@pytest.mark.parametrize("ndata,grid", _cases())
def test_replicas_equal_single_process(comm, data, ndata, grid):
    x, labels = data
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        ref, ref_costs, _ = train(net_padded_strided(), Model, Topology.serial(), x, labels)
        t = tile_of((H, W), topo.grid, topo.coords)
        dist_layers = net_padded_strided()
        model, costs, _ = train(dist_layers, Model, topo, x[:, :, t.y0:t.y1, t.x0:t.x1], labels)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        assert model.misclass_rate(x[:, :, t.y0:t.y1, t.x0:t.x1], labels) == ref.misclass_rate(x, labels)
        for lr, ld in zip(ref.layers, model.layers):
            for pr, pd in zip(lr.params(), ld.params()):
                want = pr.value[:, ld.cols] if pd.sharded else pr.value
                np.testing.assert_allclose(pd.value, want, rtol=1e-10, atol=1e-13, err_msg=pd.name)
                # bitwise identical on every data replica of this tile
                copies = topo.data.allgather(np.asarray(pd.value))
                for c in copies[1:]:
                    np.testing.assert_array_equal(c, copies[0])
    finally:
        topo.free()
