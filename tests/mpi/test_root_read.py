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

    with pytest.raises(CheckpointError, match="no such file"):   # the same user error on every rank
        read_on_root(comm, bad)

    def crash():
        raise ValueError("not a user error")

    with pytest.raises(ValueError if comm.rank == 0 else RemoteError, match="not a user error"):
        read_on_root(comm, crash)


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


def test_restore_checkpoint_when_only_rank0_can_read_it(comm, tmp_path_factory):
    """restore_checkpoint reads on world rank 0 only: the other ranks' path does not exist, and
    every rank's weights equal the checkpoint's (here 4 data replicas of a non-dist CNN)."""
    from distnet.config import load_experiment_text
    from distnet.models.checkpoint import read_checkpoint
    from distnet.models.restore_single import restore_checkpoint
    from tests.tiny import CNN, experiment, write_data
    d = data = path = None
    if comm.rank == 0:
        d = tmp_path_factory.mktemp("ck")
        data = write_data(d / "data.h5")
        exp = load_experiment_text(experiment(CNN, data).replace("num_epochs: 4", "num_epochs: 1"))
        exp.checkpoint_path = path = str(d / "ck.h5")
        exp.run(topology=Topology.serial())
    data, path = comm.bcast((str(data) if data else None, path))
    mine = path if comm.rank == 0 else f"/nonexistent/rank{comm.rank}/ck.h5"
    exp = load_experiment_text(experiment(CNN, data))
    topo = Topology.from_world(grid=(1, 1), data=comm.size, world=comm)
    exp.setup(topo)
    ck = restore_checkpoint(exp.model, mine, topo)
    want = comm.bcast([e["value"] for e in read_checkpoint(path).params] if comm.rank == 0 else None)
    got = [np.asarray(p.value) for layer in exp.model.layers for p in layer.params()]
    assert ck.epoch == 0 and len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
