"""RBM and DBN on data replicas vs the single-process oracle (docs/neon-semantics.md#rbm-and-dbn).

Every rank builds the GLOBAL data (same seed) and trains the serial model on all of it as the
oracle, then the same model on ``Topology.from_world(data=N)``, where each replica trains on its
rows of every global minibatch (uneven shares, and a short last batch of one row for all the
replicas: some replicas get none). Weights, logged costs, the test reconstruction cost and the features must
agree in float64 up to the order of the Allreduce's sums; the comparison is collective
(``mpi.assert_all``), so a mismatch on one rank fails on every rank without a hang.
"""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.layers.rbm import RBMLayer
from distnet.models.rbm import DBN, RBM
from distnet.ops.activations import Logistic

MPI_SIZES = (2, 3, 4)
MPI_TIMEOUT = 120

RTOL, ATOL = 1e-10, 1e-12
WI = {"type": "normal", "loc": 0.0, "scale": 0.2}
N, SHAPE = 19, (1, 3, 4)          # batches of 6: 6, 6, 6 and 1 row


def _layers(kind):
    if kind == "rbm":
        return [RBMLayer(name="r", nout=7, cd_steps=2, weight_init=WI, activation=Logistic())]
    return [RBMLayer(name="a", nout=6, weight_init=WI, activation=Logistic()),
            RBMLayer(name="b", nout=5, weight_init=WI, activation=Logistic())]


def _model(kind, topo, shuffle):
    cls = RBM if kind == "rbm" else DBN
    m = cls(_layers(kind), num_epochs=2, batch_size=6, learning_rate=0.05, shuffle=shuffle)
    m.infer_shapes(SHAPE)
    m.configure(Numpy64(rng_seed=7), topo)
    m.init_params()
    return m


@pytest.mark.parametrize("kind", ["rbm", "dbn"])
@pytest.mark.parametrize("shuffle", [False, True], ids=["in-order", "shuffled"])
def test_data_replicas_equal_one_process(mpi, comm, kind, shuffle):
    rng = np.random.RandomState(5)
    x, test = rng.rand(N, *SHAPE), rng.rand(9, *SHAPE)
    ref = _model(kind, Topology.serial(), shuffle)
    costs_ref = ref.fit(x, None)
    topo = Topology.from_world(grid=(1, 1), data=comm.Get_size(), world=comm)
    try:
        dist = _model(kind, topo, shuffle)
        costs = dist.fit(x, None)
        recon, recon_ref = dist.reconstruction_error(test), ref.reconstruction_error(test)
        feats, feats_ref = dist.predict(test), ref.predict(test)
    finally:
        topo.free()
    ok = (np.allclose(costs, costs_ref, rtol=RTOL, atol=0) and len(costs) == ref.num_epochs
          and np.isclose(recon, recon_ref, rtol=RTOL, atol=0)
          and np.allclose(feats, feats_ref, rtol=RTOL, atol=ATOL)
          and all(np.allclose(a.W, b.W, rtol=RTOL, atol=ATOL) and np.allclose(a.b, b.b, rtol=RTOL, atol=ATOL)
                  for a, b in zip(dist.layers, ref.layers))
          and not np.allclose(dist.layers[0].W, _model(kind, Topology.serial(), shuffle).layers[0].W))
    mpi.assert_all(ok, f"{kind}: costs {costs} vs {costs_ref}, reconstruction {recon} vs {recon_ref}")
