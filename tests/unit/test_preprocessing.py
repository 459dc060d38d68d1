"""The training's preprocessing travels with the checkpoint (distnet.experiments.preprocessing):
the record a dataset gives, kept in /config of both checkpoint forms, compared with another
experiment's (every difference named with both values, or refused), and applied alone by
``prepare`` with the very operations of the dataset (the same bits)."""
import json

import h5py
import numpy as np
import pytest

from distnet.config import load_experiment_text
from distnet.errors import ConfigError, DataError
from distnet.experiments import preprocessing as pp
from distnet.models.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from distnet.models.sharded import read_state
from tests.tiny import CNN, experiment


def _data(path, x_dtype=np.uint8, names=("a", "b", "c")):
    rng = np.random.RandomState(0)
    with h5py.File(path, "w") as f:
        for split, n in (("train", 12), ("test", 6)):
            f[f"{split}/x"] = rng.randint(0, 255, (n, 1, 12, 10)).astype(x_dtype)
            f[f"{split}/y"] = np.arange(n) % 3
        f.attrs["class_names"] = list(names)
        f.attrs["channel_mean"], f.attrs["channel_std"] = [100.0], [50.0]
        f.attrs["image_recipe"] = json.dumps({"version": 1, "size": [12, 10], "resize": "pad", "channels": 1,
                                              "class_names": list(names)})
    return path


def _exp(path, keys="scale: 1/255, normalize: per_channel, "):
    return load_experiment_text(experiment(CNN, path).replace("HDF5Dataset {", "HDF5Dataset {" + keys))


def test_the_record_of_a_converted_data_set(tmp_path):
    record = _exp(_data(tmp_path / "d.h5")).dataset.preprocessing()
    assert record == {"dataset": "HDF5Dataset", "image_shape": [1, 12, 10], "stored_dtype": "uint8",
                      "divide_by_255": False, "scale": 1 / 255, "mean": [100 / 255], "std": [50 / 255],
                      "normalize": "per_channel", "class_names": ["a", "b", "c"],
                      "recipe": {"version": 1, "size": [12, 10], "resize": "pad", "channels": 1,
                                 "class_names": ["a", "b", "c"]},
                      "files": [str(tmp_path / "d.h5")]}
    assert json.loads(pp.preprocessing_text(_exp(tmp_path / "d.h5").dataset)) == record


def test_both_checkpoint_forms_keep_it(tmp_path):
    text = pp.preprocessing_text(_exp(_data(tmp_path / "d.h5")).dataset)
    write_checkpoint(tmp_path / "ck.h5", [], 3, config={"yaml": "y", "preprocessing": text})
    assert read_checkpoint(tmp_path / "ck.h5").config["preprocessing"] == text
    state = read_state(str(tmp_path / "ck.h5"))          # the training state alone, no arrays read
    assert state.config["preprocessing"] == text and state.params == [] and state.epoch == 3
    write_checkpoint(tmp_path / "old.h5", [], 0, config={"yaml": "y"})   # before records: none kept
    assert read_checkpoint(tmp_path / "old.h5").config["preprocessing"] == ""


def test_every_difference_is_named_with_both_values(tmp_path):
    training = _exp(_data(tmp_path / "d.h5")).dataset.preprocessing()
    other = _data(tmp_path / "o.h5", names=("a", "c", "b"))
    with h5py.File(other, "a") as f:
        f.attrs["channel_mean"] = [90.0]
    new = _exp(other, "scale: 1/255, mean: 0.5, ").dataset.preprocessing()
    diffs = pp.differences(training, new)
    assert [d[0] for d in diffs] == ["mean", "std", "class names"]
    text = pp.disagreement(diffs, training, new, "ck.h5")
    assert text == ("the experiment's preprocessing differs from the training's kept in checkpoint ck.h5: mean: "
                    f"training [0.392157] (normalize: per_channel of {tmp_path / 'd.h5'}), experiment [0.5]; std: "
                    f"training [0.196078] (normalize: per_channel of {tmp_path / 'd.h5'}), experiment none; class "
                    "names: training [\"a\", \"b\", \"c\"], experiment [\"a\", \"c\", \"b\"]")
    swapped = _exp(other).dataset.preprocessing()    # another file's statistics under the same keys
    assert [d[0] for d in pp.differences(training, swapped)] == ["mean", "class names"]
    assert pp.differences(training, training) == []


def _agreed(exp, training, choice):
    ck = Checkpoint("ck.h5", 0, [], config={"preprocessing": json.dumps(training)})
    return pp.agreed_preprocessing(exp, "ck.h5", ck, choice)


def test_a_disagreement_is_refused_unless_an_option_says_which(tmp_path):
    training = _exp(_data(tmp_path / "d.h5")).dataset.preprocessing()
    exp = _exp(tmp_path / "d.h5", "scale: 1/255, mean: 0.5, ")
    with pytest.raises(ConfigError, match=r"mean: training \[0.392157\] .* experiment \[0.5\].*--preprocessing "
                                          r"training \(the checkpoint's\) or --preprocessing experiment"):
        _agreed(exp, training, "check")
    kept = _agreed(exp, training, "experiment")
    assert kept.record["mean"] == [0.5] and kept.scaling is None and "using the experiment's" in kept.warning
    taken = _agreed(exp, training, "training")
    assert taken.record == training and taken.scaling == (1 / 255, [100 / 255], [50 / 255])
    exp.dataset.use_scaling(*taken.scaling)         # the dataset now scales as the training did
    assert exp.dataset.preprocessing()["mean"] == training["mean"]
    assert _agreed(_exp(tmp_path / "d.h5"), training, "check").warning is None
    shape = dict(training, image_shape=[3, 12, 10])
    with pytest.raises(ConfigError, match="no preprocessing option bridges that"):
        _agreed(exp, shape, "training")


def test_prepare_gives_the_bits_of_the_dataset(tmp_path):
    exp = _exp(_data(tmp_path / "d.h5"))
    record = exp.dataset.preprocessing()
    x = np.random.RandomState(1).randint(0, 255, (4, 1, 12, 10)).astype(np.uint8)
    for dtype in (np.float32, np.float64):
        np.testing.assert_array_equal(pp.prepare(record, x, dtype), exp.dataset.prepare_images(x, dtype))
    with pytest.raises(DataError, match="store float64 values but the training images were uint8"):
        pp.prepare(record, x.astype(np.float64), np.float32)
    mnist = {"image_shape": [1, 28, 28], "divide_by_255": True, "scale": None, "stored_dtype": None}
    np.testing.assert_array_equal(pp.prepare(mnist, x, np.float32), x.astype(np.float32) / np.float32(255))
