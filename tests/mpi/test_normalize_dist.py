"""``normalize: per_channel`` on 4 ranks equals the one-process run: pictures of several aspect
ratios converted with ``--size`` and ``--resize crop``, trained in float64 with the per-channel
statistics of the whole training split applied to every rank's tile (in memory on a 2x2 grid,
streamed on 2 data replicas x a 1x2 grid), against the one-process run of the same file (costs
to 1e-10, identical error rates); and the statistics are the ones the numbers show."""
import os

import h5py
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment_text
from tests.tiny import CNN, experiment

MPI_SIZES = (4,)

Image = pytest.importorskip("PIL.Image")


def _pictures(root):
    rng = np.random.RandomState(3)
    for k, name in enumerate(("a", "b", "c")):
        os.makedirs(os.path.join(root, name))
        for i in range(12):
            h, w = ((12, 10), (18, 10), (12, 16))[i % 3]
            a = rng.randint(0, 100, (h, w, 3)).astype(np.uint8)
            a[:, :, k] += 120           # class k is bright in channel k: the channels differ
            Image.fromarray(a).save(os.path.join(root, name, f"{i}.png"))


@pytest.fixture(scope="module")
def converted(comm, tmp_path_factory):
    root = None
    if comm.rank == 0:
        from distnet.convert import convert
        root = str(tmp_path_factory.mktemp("norm"))
        _pictures(os.path.join(root, "imgs"))
        convert(os.path.join(root, "imgs"), os.path.join(root, "d.h5"), size="12x10", resize="crop",
                test_fraction=0.25, stratify=True, seed=2)
    return comm.bcast(root)


def _text(path, dist, keys):
    text = experiment(CNN, path, dist=dist).replace(
        "HDF5Dataset {", "HDF5Dataset {scale: 1/255, normalize: per_channel, " + keys)
    return text.replace("num_epochs: 4", "num_epochs: 3")


def test_the_statistics_are_those_of_the_train_split(comm, converted):
    with h5py.File(os.path.join(converted, "d.h5")) as f:
        x = f["train/x"][()].astype(np.float64)
        mean, std = f.attrs["channel_mean"], f.attrs["channel_std"]
    np.testing.assert_allclose(mean, x.mean(axis=(0, 2, 3)), rtol=1e-13)
    np.testing.assert_allclose(std, x.std(axis=(0, 2, 3)), rtol=1e-13)
    assert len(set(np.round(mean, 3))) == 3


@pytest.mark.parametrize("ndata,grid,keys", [(1, (2, 2), "in_memory: true, "), (2, (1, 2), "in_memory: false, ")],
                         ids=["grid2x2-memory", "data2-grid1x2-stream"])
def test_normalized_ranks_equal_one_process(comm, converted, ndata, grid, keys):
    path = os.path.join(converted, "d.h5")
    ref = load_experiment_text(_text(path, False, "in_memory: true, ")).run(topology=Topology.serial())
    plain = load_experiment_text(experiment(CNN, path).replace("HDF5Dataset {", "HDF5Dataset {scale: 1/255, ")
                                 .replace("num_epochs: 4", "num_epochs: 3")).run(topology=Topology.serial())
    assert not np.allclose(plain.epoch_costs, ref.epoch_costs)      # normalization did change the run
    exp = load_experiment_text(_text(path, True, keys))
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        res = exp.run(topology=topo)
    finally:
        topo.free()
    np.testing.assert_allclose(res.epoch_costs, ref.epoch_costs, rtol=1e-10)
    assert (res.train_misclass, res.test_misclass) == (ref.train_misclass, ref.test_misclass)
    comm.Barrier()
