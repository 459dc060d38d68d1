"""Tower networks (Chainer's ParallelMLP, 2 towers of 3 + 3 layers, summed exchanges at layers 3
and 6): one tower per rank, with and without data replicas, gives the single-process costs, weights
and error rate (float64, 1e-10 relative)."""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.models.towers import Towers

MPI_SIZES = (2, 4)
N, D, K = 50, 7, 4
CASES = {"towers2": (2, 1), "towers2-data2": (2, 2), "data2": (1, 2)}


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(3)
    return rng.standard_normal((N, D)), rng.randint(0, K, N)


def _fit(topo, x, y):
    m = Towers(nout=K, units=10, num_epochs=3, batch_size=12, learning_rate=0.2)
    m.configure(Numpy64(rng_seed=2), topo, D)
    return m, m.fit(x, y), m.misclass_rate(x, y)


@pytest.fixture(scope="module")
def reference(data):
    return _fit(Topology.serial(), *data)


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=pytest.mark.mpi_size(p * d))
                                  for n, (p, d) in CASES.items()])
def test_towers_equal_single_process(comm, data, reference, name):
    npipe, ndata = CASES[name]
    ref, ref_costs, ref_rate = reference
    topo = Topology.from_world(grid=(1, 1), data=ndata, pipe=npipe, world=comm)
    try:
        m, costs, rate = _fit(topo, *data)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        assert rate == ref_rate
        assert sorted(m.towers) == (m.mine)
        for k in m.mine:
            for half in ("first", "second"):
                for (W, b), (Wr, br) in zip(m.towers[k][half], ref.towers[k][half]):
                    np.testing.assert_allclose(W, Wr, rtol=1e-10, atol=1e-13)
                    np.testing.assert_allclose(b, br, rtol=1e-10, atol=1e-13)
    finally:
        topo.free()
