"""Seq2Seq across ranks: the encoder and the decoder on two pipeline stages (the encoder's final
states and their gradients are point-to-point messages), with and without data replicas, give the
single-process numbers: per-epoch costs and every weight to 1e-10 relative (float64), the same
token and sequence accuracies.

Data: the number task with 1 .. 2 digits, 70 training sequences in batches of 16 (the last batch
has 6 rows, which 2 replicas split 3 + 3), reshuffled every epoch; dropout 0.2 between the 2 LSTM
layers of each stack; 6 epochs reach about 40% token and 8% sequence accuracy on the test split,
so the accuracies compared are not trivial.
"""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.datasets.sequences import SequenceDataset
from distnet.models.seq2seq import Seq2Seq

MPI_SIZES = (2, 4)

# name: (pipe, data, encoder_stage, decoder_stage)
CASES = {
    "pipe2": (2, 1, 0, 1),
    "pipe2-swapped": (2, 1, 1, 0),
    "data2": (1, 2, 0, 1),
    "pipe2-data2": (2, 2, 0, 1),
}


@pytest.fixture(scope="module")
def data():
    ds = SequenceDataset(generate="numbers", digits=2, n_train=70, n_test=20, seed=1)
    return ds.load(), len(ds.src_vocab), len(ds.tgt_vocab)


def _fit(topo, loaded, **keys):
    data, vs, vt = loaded
    model = Seq2Seq(num_epochs=6, embed=5, hidden=6, nlayers=2, batch_size=16, learning_rate=0.05,
                    dropout=0.2, **keys)
    model.configure(Numpy64(rng_seed=4), topo, vs, vt)
    costs = [model.fit_epoch(data["train"], e) for e in range(model.num_epochs)]
    return model, costs, model.evaluate(data["test"]), model.evaluate(data["train"])


@pytest.fixture(scope="module")
def reference(data):
    return _fit(Topology.serial(), data)


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=pytest.mark.mpi_size(p * d))
                                  for n, (p, d, _, _) in CASES.items()])
def test_seq2seq_equals_single_process(comm, data, reference, name):
    npipe, ndata, enc, dec = CASES[name]
    ref, ref_costs, ref_test, ref_train = reference
    topo = Topology.from_world(grid=(1, 1), data=ndata, pipe=npipe, world=comm)
    try:
        model, costs, test_acc, train_acc = _fit(topo, data, encoder_stage=enc, decoder_stage=dec)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        assert test_acc == ref_test and train_acc == ref_train
        if npipe == 2:   # each stage holds only its half
            assert all(k.startswith("enc." if topo.pipe_index == enc else "dec.") for k in model.params)
        got, want = model.gather_params(), ref.gather_params()
        assert sorted(got) == sorted(want)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-13, err_msg=k)
    finally:
        topo.free()


@pytest.mark.mpi_size(2)
def test_decoder_on_the_encoders_stage_is_refused(comm):
    from distnet.errors import ConfigError
    topo = Topology.from_world(grid=(1, 1), pipe=2, world=comm)
    try:
        with pytest.raises(ConfigError, match="decoder must be on the other stage"):
            Seq2Seq(encoder_stage=1, decoder_stage=1).configure(Numpy64(), topo, 14, 33)
    finally:
        topo.free()
