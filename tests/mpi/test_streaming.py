"""Streaming data on 4 ranks equals the one-process run: an image folder (synthetic PNGs) converted
with ``distnet data convert``, trained with ``in_memory: false`` on a 2x2 grid and on 2 data
replicas x a 1x2 grid, each rank with its own node-local cache folder ($DISTNET_CACHE_DIR), against
the one-process in-memory run (float64: costs to 1e-10, identical error rates)."""
import os

import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment_text
from tests.tiny import CNN, experiment

MPI_SIZES = (4,)

Image = pytest.importorskip("PIL.Image")


def _images(root):
    rng = np.random.RandomState(0)
    for k, name in enumerate(("a", "b", "c")):
        os.makedirs(os.path.join(root, name))
        for i in range(14):
            a = rng.randint(0, 120, (12, 10, 3)).astype(np.uint8)
            a[4 * k:4 * k + 4] += 120
            Image.fromarray(a).save(os.path.join(root, name, f"{i}.png"))


@pytest.fixture(scope="module")
def converted(comm, tmp_path_factory):
    root = None
    if comm.rank == 0:
        from distnet.convert import convert
        root = str(tmp_path_factory.mktemp("data"))
        _images(os.path.join(root, "imgs"))
        convert(os.path.join(root, "imgs"), os.path.join(root, "d.h5"), valid_fraction=0.2, seed=1)
    return comm.bcast(root)


def _text(path, dist, keys):
    text = experiment(CNN, path, dist=dist).replace("HDF5Dataset {", "HDF5Dataset {scale: 1/255, " + keys)
    text = text.replace("num_epochs: 4", "num_epochs: 3")
    return text.replace("FitPredictErrorExperiment {", "FitPredictErrorExperiment { eval_every: 1,", 1)


@pytest.mark.parametrize("ndata,grid", [(1, (2, 2)), (2, (1, 2))], ids=["grid2x2", "data2-grid1x2"])
def test_streaming_ranks_equal_one_process(comm, converted, ndata, grid, monkeypatch):
    path = os.path.join(converted, "d.h5")
    ref = load_experiment_text(_text(path, False, "in_memory: true, ")).run(topology=Topology.serial())
    cache = os.path.join(converted, f"{ndata}-node{comm.rank}")       # a folder only this rank sees
    monkeypatch.setenv("DISTNET_CACHE_DIR", cache)
    exp = load_experiment_text(_text(path, True, "in_memory: false, "))
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        res = exp.run(topology=topo)
    finally:
        topo.free()
    assert exp.dataset.mode == "stream"
    np.testing.assert_allclose(res.epoch_costs, ref.epoch_costs, rtol=1e-10)
    assert (res.train_misclass, res.valid_misclass, res.test_misclass) == \
        (ref.train_misclass, ref.valid_misclass, ref.test_misclass)
    assert res.best_epoch["epoch"] == ref.best_epoch["epoch"] and res.best_epoch["split"] == "valid"
    assert os.listdir(cache) == [f"d.tile.rank{comm.rank}of4.h5"]      # this rank's tile cache only
    comm.Barrier()
