"""The metrics of the evaluated splits (cost, error rate, top-k error rate, per-class accuracy,
confusion matrix) and the checkpoint policy's decisions on several ranks equal those of the
one-process run of the same global data: the counts exactly (integers summed over the data
replicas), the costs to 1e-10 (float64, summation order)."""

import numpy as np
import pytest

from tests.tiny import CNN, experiment, run_recorded, write_data

MPI_SIZES = (2, 4)
COUNTED = ("misclass", "top2_misclass", "class_accuracy", "confusion")


@pytest.fixture(scope="module")
def data_path(comm, tmp_path_factory):
    path = None
    if comm.rank == 0:
        path = str(write_data(tmp_path_factory.mktemp("metrics") / "data.h5", n_train=44, n_test=14, seed=3))
    return comm.bcast(path)


def _text(path, dist):
    text = experiment(CNN, path, dist=dist).replace("HDF5Dataset {", "HDF5Dataset {valid_fraction: 0.25, ")
    return text.replace("FitPredictErrorExperiment {", "FitPredictErrorExperiment { eval_every: 1, top_k: 2, "
                        "checkpoint: {monitor: valid_cost, patience: 2, min_delta: 0.001},", 1)


def _layouts(size):
    if size == 2:
        return [(1, (1, 2)), (2, (1, 1))]
    return [(1, (2, 2)), (2, (1, 2)), (4, (1, 1))]


def test_metrics_and_policy_on_ranks_equal_one_process(comm, data_path):
    _, ref_res, ref_hist = run_recorded(_text(data_path, False))
    assert {"valid_confusion", "test_top2_misclass", "train_class_accuracy"} <= set(ref_hist[0])
    for ndata, grid in _layouts(comm.size):
        _, res, hist = run_recorded(_text(data_path, True), grid, ndata, comm)
        assert [r["epoch"] for r in hist] == [r["epoch"] for r in ref_hist]
        for mine, theirs in zip(hist, ref_hist):
            for split in ("train", "valid", "test"):
                for name in COUNTED:
                    assert mine[f"{split}_{name}"] == theirs[f"{split}_{name}"], (ndata, grid, split, name)
                np.testing.assert_allclose(mine[f"{split}_cost"], theirs[f"{split}_cost"], rtol=1e-10)
            assert (mine.get("best"), mine.get("since_best"), mine.get("stop")) == \
                (theirs.get("best"), theirs.get("since_best"), theirs.get("stop"))
        assert res.best_epoch["epoch"] == ref_res.best_epoch["epoch"] and res.stop == ref_res.stop
        assert np.sum(hist[-1]["test_confusion"]) == 14     # every test image counted once
