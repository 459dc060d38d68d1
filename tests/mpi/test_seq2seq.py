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


def _fit(topo, loaded, batch_size=16, **keys):
    data, vs, vt = loaded
    model = Seq2Seq(num_epochs=6, embed=5, hidden=6, nlayers=2, batch_size=batch_size, learning_rate=0.05,
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


@pytest.mark.parametrize("npipe,ndata,batch", [pytest.param(1, 4, 17, id="data4-batch17", marks=pytest.mark.mpi_size(4)),
                                               pytest.param(2, 2, 23, id="pipe2-data2-batch23",
                                                            marks=pytest.mark.mpi_size(4))])
def test_a_replica_without_rows_takes_part(comm, data, npipe, ndata, batch):
    """70 sequences in batches of 17 (23): the last batch has 2 rows (1), so some replicas get
    none; they still run their (empty) encoder and decoder and join the sums. The LSTM's backward
    raised 'cannot reshape array of size 0' there and the job aborted."""
    ref, ref_costs, ref_test, ref_train = _fit(Topology.serial(), data, batch_size=batch)
    topo = Topology.from_world(grid=(1, 1), data=ndata, pipe=npipe, world=comm)
    try:
        model, costs, test_acc, train_acc = _fit(topo, data, batch_size=batch)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        assert test_acc == ref_test and train_acc == ref_train
        got, want = model.gather_params(), ref.gather_params()
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-13, err_msg=k)
    finally:
        topo.free()


@pytest.mark.mpi_size(2)
@pytest.mark.parametrize("host_staging", [True, False], ids=["staged", "cuda-aware"])
def test_seq2seq_on_device_arrays_across_stages(comm, data, reference, host_staging):
    """The encoder/decoder split on a device backend (the device-like stand-in for cupy; its
    arrays refuse every implicit host crossing): the states and their gradients travel staged
    through host memory or as device buffers to a CUDA-aware MPI, and the run gives the numpy
    one-process numbers (float64 agreement of distnet.testing.backends)."""
    from distnet.testing.backends import assert_agree
    from distnet.testing.devicelike import DeviceLike
    data_, vs, vt = data
    ref, ref_costs, ref_test, _ = reference
    topo = Topology.from_world(grid=(1, 1), pipe=2, world=comm)
    try:
        model = Seq2Seq(num_epochs=6, embed=5, hidden=6, nlayers=2, batch_size=16, learning_rate=0.05,
                        dropout=0.2)
        model.configure(DeviceLike(rng_seed=4, dtype="float64", cuda_aware_mpi=not host_staging), topo, vs, vt)
        costs = [model.fit_epoch(data_["train"], e) for e in range(model.num_epochs)]
        assert_agree(costs, ref_costs, "float64")
        assert model.evaluate(data_["test"]) == ref_test
        got, want = model.gather_params(), ref.gather_params()
        for k in want:
            assert_agree(got[k], want[k], "float64", k)
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


# -- checkpoints ------------------------------------------------------------------------------

def _experiment(pipe, data, checkpoint=None, epochs=4):
    from distnet.experiments.seq2seq import Seq2SeqExperiment
    from distnet.optim.rules import Adam
    model = Seq2Seq(num_epochs=epochs, embed=5, hidden=6, nlayers=2, batch_size=16, dropout=0.2,
                    learning_rule=Adam(learning_rate=0.05, max_grad_norm=1.0))   # clipping fires
    ds = SequenceDataset(generate="numbers", digits=2, n_train=70, n_test=20, seed=1)
    exp = Seq2SeqExperiment(model, [ds], backend=Numpy64(rng_seed=4), data=data, pipe=pipe, eval_every=1,
                            logging={"level": 30})
    exp.checkpoint_path = checkpoint
    return exp


def _run(pipe, data, comm, checkpoint=None, resume=None, epochs=4):
    import logging
    exp = _experiment(pipe, data, checkpoint, epochs)
    topo = Topology.serial() if pipe * data == 1 else \
        Topology.from_world(grid=(1, 1), data=data, pipe=pipe, world=comm)
    try:
        result = exp.run(topology=topo, resume=resume)
        return result, exp.model.gather_params(), exp.model.steps
    finally:
        logging.getLogger("distnet").handlers.clear()
        topo.free()


# name: (pipe, data) of the run that writes the checkpoint, (pipe, data) of the one that resumes
RESUMES = {
    "pipe2": ((2, 1), (2, 1)),
    "pipe2-data2": ((2, 2), (2, 2)),
    "1proc-to-pipe2": ((1, 1), (2, 1)),
    "pipe2-data2-to-1proc": ((2, 2), (1, 1)),
}


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=pytest.mark.mpi_size(max(p * d, q * e)))
                                  for n, ((p, d), (q, e)) in RESUMES.items()])
def test_resume_equals_uninterrupted_run(comm, shared_tmp, name):
    """Train 4 epochs without a break, and 2 epochs + a checkpoint + a resumed run to 4 (on the
    layouts of ``RESUMES``): the same per-epoch costs, accuracies, steps and weights: bitwise
    against the uninterrupted run on the resuming layout when both runs use one layout; against
    the one-process run to 1e-10 relative (replicas add their gradients in another order). A one-process run
    resumes on every rank (each on its own)."""
    (wp, wd), (rp, rd) = RESUMES[name]
    ck = f"{shared_tmp}/{name}.h5"
    ref, ref_params, ref_steps = _run(1, 1, comm)
    full, full_params, _ = _run(rp, rd, comm)
    if (wp, wd) == (1, 1):      # written by one process: rank 0 writes, the others wait
        if comm.Get_rank() == 0:
            _run(1, 1, comm, checkpoint=ck, epochs=2)
        comm.Barrier()
    else:
        _run(wp, wd, comm, checkpoint=ck, epochs=2)
    got, params, steps = _run(rp, rd, comm, resume=ck)
    assert got.start_epoch == 2 and steps == ref_steps
    np.testing.assert_allclose(got.epoch_costs, ref.epoch_costs, rtol=1e-10)
    assert got.accuracy == ref.accuracy
    same = (wp, wd) == (rp, rd)
    for k in ref_params:
        if same:
            np.testing.assert_array_equal(params[k], full_params[k], err_msg=k)
        np.testing.assert_allclose(params[k], ref_params[k], rtol=1e-10, atol=1e-13, err_msg=k)
    if same:
        assert got.epoch_costs == full.epoch_costs
