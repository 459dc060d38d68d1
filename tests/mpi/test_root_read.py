"""read_on_root: only rank 0 reads (the others could not: their path does not exist), every rank
gets the result; a failure on rank 0 stops every rank. And a checkpoint restored when only rank 0
can read the file equals one read everywhere."""
import os

import numpy as np
import pytest

from distnet.comm import Topology
from distnet.comm.abort import RemoteError
from distnet.comm.root_read import read_on_root
from distnet.errors import CheckpointError

MPI_SIZES = (2, 4)


def test_read_on_root(comm, tmp_path_factory):
    path = None
    if comm.rank == 0:
        path = str(tmp_path_factory.mktemp("root") / "a.npy")
        np.save(path, np.arange(7.0))
    mine = path if comm.rank == 0 else f"/nonexistent/rank{comm.rank}/a.npy"
    got = read_on_root(comm, lambda: np.load(mine))
    np.testing.assert_array_equal(got, np.arange(7.0))

    def bad():
        raise CheckpointError(f"{mine}: no such file")

    with pytest.raises(CheckpointError if comm.rank == 0 else RemoteError, match="no such file"):
        read_on_root(comm, bad)


def test_checkpoint_only_rank0_reads(comm, tmp_path_factory):
    from distnet.config import load_experiment_text
    from distnet.models.checkpoint import read_checkpoint
    from tests.tiny import CNN, experiment, write_data
    path = None
    if comm.rank == 0:   # a one-process run writes the checkpoint on "rank 0's disk"
        d = tmp_path_factory.mktemp("ck")
        exp = load_experiment_text(experiment(CNN, write_data(d / "data.h5")).replace("num_epochs: 4", "num_epochs: 1"))
        exp.checkpoint_path = path = str(d / "ck.h5")
        exp.run(topology=Topology.serial())
    mine = path if comm.rank == 0 else f"/nonexistent/rank{comm.rank}/ck.h5"
    ck = read_on_root(comm, lambda: read_checkpoint(mine))
    assert ck.epoch == 0 and ck.params
    first = comm.bcast([e["value"] for e in ck.params] if comm.rank == 0 else None)
    for e, want in zip(ck.params, first):
        np.testing.assert_array_equal(e["value"], want)
    assert not os.path.exists(f"/nonexistent/rank{comm.rank}")
