"""A data file or folder the experiment names that is not there: the error names the dataset's
YAML file:line and key, and for a relative path the current directory it was read from (the
usual slip: `distnet run ~/distnet/experiments/x.yaml` from another folder)."""
import os

import pytest

from distnet.config import load_experiment_text
from distnet.errors import DataError, MissingDataError

HEAD = """!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: !obj:distnet.backends.Numpy {rng_seed: 0},
"""
MODEL = """
  model: !obj:distnet.models.MLP {num_epochs: 1, batch_size: 10, learning_rate: 0.1,
    layers: [!obj:distnet.layers.LayerWithNoBias {nout: 10, weight_init: {type: uniform, low: -0.1, high: 0.1},
             activation: !obj:distnet.activations.Logistic {}}]}
}
"""

DATASETS = {
    "mnist": ("  datasets: [!obj:distnet.datasets.MNIST {repo_path: no_such_folder}],", "repo_path",
              "MNIST files missing in no_such_folder/MNIST"),
    "cifar10": ("  datasets: [!obj:distnet.datasets.CIFAR10 {repo_path: no_such_folder}],", "repo_path",
                "CIFAR-10 files missing in no_such_folder/CIFAR10"),
    "hdf5": ("  datasets: [!obj:distnet.datasets.HDF5Dataset {path: no_such.h5, scale: 1}],", "path",
             "HDF5 dataset file no_such.h5 does not exist"),
    "npz": ("  datasets: [!obj:distnet.datasets.NumpyDataset {path: no_such.npz}],", "path",
            "data file no_such.npz does not exist"),
    "npy": ("  datasets: [!obj:distnet.datasets.NumpyDataset {train_x: tx.npy, train_y: ty.npy,\n"
            "      test_x: sx.npy, test_y: sy.npy}],", "train_x", "data file tx.npy does not exist"),
}


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_missing_data_names_the_yaml_line_key_and_current_directory(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dataset, key, what = DATASETS[name]
    exp = load_experiment_text(HEAD + dataset + MODEL, "exp.yaml")
    with pytest.raises(DataError) as e:     # the run's first look at the data (check, then the files)
        exp.check()
        exp.dataset.source_files()
    assert isinstance(e.value, MissingDataError)
    assert str(e.value).startswith(f"exp.yaml:3: key '{key}': {what}"), str(e.value)
    assert str(e.value).endswith(f"(a relative path is read from the current directory, {os.getcwd()})")
    assert e.value.exit_code == 1


def test_an_absolute_path_needs_no_hint(tmp_path):
    dataset = f"  datasets: [!obj:distnet.datasets.HDF5Dataset {{path: {tmp_path}/no_such.h5, scale: 1}}],"
    exp = load_experiment_text(HEAD + dataset + MODEL, "exp.yaml")
    with pytest.raises(MissingDataError) as e:
        exp.check()
    assert str(e.value) == f"exp.yaml:3: key 'path': HDF5 dataset file {tmp_path}/no_such.h5 does not exist"
