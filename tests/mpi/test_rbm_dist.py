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
from distnet.layers import FullyConnectedLayer
from distnet.layers.rbm import RBMLayer
from distnet.models.rbm import DBN, RBM
from distnet.ops.activations import Logistic

MPI_SIZES = (2, 3, 4)
MPI_TIMEOUT = 120

RTOL, ATOL = 1e-10, 1e-12
WI = {"type": "normal", "loc": 0.0, "scale": 0.2}
NCLASS = 3
N, SHAPE = 19, (1, 3, 4)          # batches of 6: 6, 6, 6 and 1 row


def _layers(kind):
    if kind == "rbm":
        return [RBMLayer(name="r", nout=7, cd_steps=2, weight_init=WI, activation=Logistic())]
    out = [RBMLayer(name="a", nout=6, weight_init=WI, activation=Logistic()),
           RBMLayer(name="b", nout=5, weight_init=WI, activation=Logistic())]
    if kind == "dbn-finetune":
        out.append(FullyConnectedLayer(name="c", nout=NCLASS, weight_init=WI, activation=Logistic()))
    return out


def _model(kind, topo, shuffle):
    cls = RBM if kind == "rbm" else DBN
    extra = dict(finetune_epochs=2, momentum={"type": "constant", "coef": 0.5}) if kind == "dbn-finetune" else {}
    m = cls(_layers(kind), num_epochs=2, batch_size=6, learning_rate=0.05, shuffle=shuffle, **extra)
    m.infer_shapes(SHAPE)
    m.configure(Numpy64(rng_seed=7), topo)
    m.init_params()
    return m


@pytest.mark.parametrize("kind", ["rbm", "dbn", "dbn-finetune"])
@pytest.mark.parametrize("shuffle", [False, True], ids=["in-order", "shuffled"])
def test_data_replicas_equal_one_process(mpi, comm, kind, shuffle):
    rng = np.random.RandomState(5)
    x, test = rng.rand(N, *SHAPE), rng.rand(9, *SHAPE)
    labels, test_labels = rng.randint(0, NCLASS, N), rng.randint(0, NCLASS, 9)
    ref = _model(kind, Topology.serial(), shuffle)
    costs_ref = ref.fit(x, labels)
    topo = Topology.from_world(grid=(1, 1), data=comm.Get_size(), world=comm)
    try:
        dist = _model(kind, topo, shuffle)
        costs = dist.fit(x, labels)
        rates = (dist.misclass_rate(test, test_labels), ref.misclass_rate(test, test_labels)) \
            if kind == "dbn-finetune" else (0, 0)
        recon, recon_ref = dist.reconstruction_error(test), ref.reconstruction_error(test)
        feats, feats_ref = dist.predict(test), ref.predict(test)
        if dist.supervised:   # the classifier's outputs: each replica predicts its rows of every batch
            feats_ref = feats_ref[np.concatenate([dist.replica_rows(np.arange(i, min(i + 6, 9)))
                                                  for i in range(0, 9, 6)])]
    finally:
        topo.free()
    ok = (np.allclose(costs, costs_ref, rtol=RTOL, atol=0) and len(costs) == ref.num_epochs
          and rates[0] == rates[1]
          and np.isclose(recon, recon_ref, rtol=RTOL, atol=0)
          and np.allclose(feats, feats_ref, rtol=RTOL, atol=ATOL)
          and all(np.allclose(a.W, b.W, rtol=RTOL, atol=ATOL) and np.allclose(a.b, b.b, rtol=RTOL, atol=ATOL)
                  for a, b in zip(dist.layers, ref.layers))
          and (kind != "dbn-finetune" or len(costs) == 6)
          and not np.allclose(dist.layers[0].W, _model(kind, Topology.serial(), shuffle).layers[0].W))
    mpi.assert_all(ok, f"{kind}: costs {costs} vs {costs_ref}, reconstruction {recon} vs {recon_ref}")
