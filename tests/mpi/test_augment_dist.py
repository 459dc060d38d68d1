"""Augmented training on 4 ranks equals the one-process run: the tiny CNN with random crop
(padding 2, reflect, and padding 3 with a constant fill) and flips, on a 2x2 grid and on 2 data
replicas x a 1x2 grid, in memory and streamed (also with ``read: root``: the ranks get the reach of
their tile from rank 0), against the one-process in-memory run of the same
YAML (float64: costs to 1e-10, every gathered weight and velocity to 1e-10, identical error
rates). Each rank gathers its tile's pixels from the reach it loaded; no rank draws differently."""
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment_text
from distnet.models.global_params import gather_params
from tests.tiny import CNN, experiment, write_data

MPI_SIZES = (4,)

AUGMENTS = {"reflect-hflip": "{crop: {padding: 2, mode: reflect}, flip: horizontal}",
            "fill-both": "{crop: {padding: 3, fill: 0.25}, flip: both}"}


@pytest.fixture(scope="module")
def data_path(comm, tmp_path_factory):
    path = None
    if comm.rank == 0:
        path = str(write_data(tmp_path_factory.mktemp("augment") / "d.h5"))
    return comm.bcast(path)


def _text(path, dist, augment, in_memory, read="every"):
    text = experiment(CNN, path, dist=dist).replace(
        "HDF5Dataset {", f"HDF5Dataset {{augment: {augment}, in_memory: {in_memory}, read: {read}, ")
    return text.replace("FitPredictErrorExperiment {", "FitPredictErrorExperiment { eval_every: 1,", 1)


CASES = [pytest.param(1, (2, 2), "every", id="grid2x2"), pytest.param(2, (1, 2), "every", id="data2-grid1x2"),
         pytest.param(1, (2, 2), "root", id="grid2x2-read-root")]


@pytest.mark.parametrize("augment", sorted(AUGMENTS))
@pytest.mark.parametrize("in_memory", ["true", "false"])
@pytest.mark.parametrize("ndata,grid,read", CASES)
def test_augmented_ranks_equal_one_process(comm, data_path, ndata, grid, read, in_memory, augment):
    ref_exp = load_experiment_text(_text(data_path, False, AUGMENTS[augment], "true"))
    serial = Topology.serial()
    ref = ref_exp.run(topology=serial)
    want = gather_params(ref_exp.model, serial)
    exp = load_experiment_text(_text(data_path, True, AUGMENTS[augment], in_memory, read))
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        res = exp.run(topology=topo)
        got = gather_params(exp.model, topo)
    finally:
        topo.free()
    assert exp.dataset.mode == ("memory" if in_memory == "true" else "stream")
    np.testing.assert_allclose(res.epoch_costs, ref.epoch_costs, rtol=1e-10)
    assert (res.train_misclass, res.test_misclass) == (ref.train_misclass, ref.test_misclass)
    if comm.rank == 0:
        assert [p["name"] for p in got] == [p["name"] for p in want]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g["value"], w["value"], rtol=1e-10, atol=1e-13, err_msg=g["name"])
            assert (g["velocity"] is None) == (w["velocity"] is None)
            if w["velocity"] is not None:
                np.testing.assert_allclose(g["velocity"], w["velocity"], rtol=1e-10, atol=1e-13, err_msg=g["name"])
    comm.Barrier()


def test_tiles_of_an_epoch_are_the_one_process_images_cut(comm, data_path):
    """Every rank's training tiles in epoch 3 are the one-process augmented images cut to its tile
    (before any training: the data alone, on the 2x2 grid)."""
    ds = load_experiment_text(_text(data_path, True, AUGMENTS["reflect-hflip"], "true")).dataset
    whole = load_experiment_text(_text(data_path, False, AUGMENTS["reflect-hflip"], "true")).dataset
    topo = Topology.from_world(grid=(2, 2), world=comm)
    try:
        tile = ds.rank_tile(topo.grid, topo.coords)
        mine = ds.load(tile=tile, seed=5, dtype=np.float64, rank=topo.rank, size=topo.size, grid=topo.grid)
    finally:
        topo.free()
    ref = whole.load(seed=5, dtype=np.float64)
    rows = np.arange(len(mine["train"][1]))[::-1]
    for x in (mine["train"][0], ref["train"][0]):
        x.set_epoch(3)
    np.testing.assert_array_equal(mine["train"][0][rows],
                                  ref["train"][0][rows][:, :, tile.y0:tile.y1, tile.x0:tile.x1])
