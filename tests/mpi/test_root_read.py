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
    from distnet.models.checkpoint import read_checkpoint, save_checkpoint
    from tests.mpi.test_convnet_dist import C, H, K, W, N, net_padded_strided, train
    from distnet.models import Convnet
    rng = np.random.RandomState(3)
    x, labels = rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)
    model, _, _ = train(net_padded_strided(False), Convnet, Topology.serial(), x, labels)
    path = None
    if comm.rank == 0:
        path = str(tmp_path_factory.mktemp("ck") / "ck.h5")
        save_checkpoint(path, model, Topology.serial(), 0)
    mine = path if comm.rank == 0 else f"/nonexistent/rank{comm.rank}/ck.h5"
    ck = read_on_root(comm, lambda: read_checkpoint(mine))
    assert ck.epoch == 0 and len(ck.params) == len([p for layer in model.layers for p in layer.params()])
    for e, p in zip(ck.params, [p for layer in model.layers for p in layer.params()]):
        np.testing.assert_array_equal(e["value"], p.value)
    assert not os.path.exists(f"/nonexistent/rank{comm.rank}")
