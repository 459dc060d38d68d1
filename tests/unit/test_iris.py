"""neon's Iris data set: Fisher's numbers (checked by their famous column sums and the two
flowers the UCI copy gets wrong), neon's 30/10/10 split per species, and neon's two Iris files."""
import numpy as np

from distnet.config.registry import resolve
from distnet.datasets import Iris
from distnet.datasets.iris import SPECIES, measurements
from distnet.geometry.partition import Box


def test_fishers_numbers():
    x, y = measurements()
    assert x.shape == (150, 4) and y.tolist() == [0] * 50 + [1] * 50 + [2] * 50
    np.testing.assert_allclose(x.sum(axis=0), [876.5, 458.6, 563.7, 179.9], rtol=0, atol=1e-9)
    np.testing.assert_allclose(x.mean(axis=0), [5.8433, 3.0573, 3.758, 1.1993], atol=5e-5)
    # the setosa means of Fisher's table, and the two flowers that the UCI copy has wrong
    np.testing.assert_allclose(x[:50].mean(axis=0), [5.006, 3.428, 1.462, 0.246], atol=1e-12)
    np.testing.assert_array_equal(x[34], [4.9, 3.1, 1.5, 0.2])
    np.testing.assert_array_equal(x[37], [4.9, 3.6, 1.4, 0.1])
    assert len({tuple(r) for r in x}) == 149       # one virginica measured twice: 5.8 2.7 5.1 1.9
    np.testing.assert_array_equal(x[101], x[142])


def test_neons_split_and_keys():
    assert resolve("neon.datasets.iris.Iris")[0] is Iris
    ds = Iris(repo_path="/usr/local/data", sample_pct=100)
    data = ds.load(dtype=np.float64)
    x, y = measurements()
    (xtr, ytr), (xte, yte) = data["train"], data["test"]
    assert xtr.shape == (90, 4, 1, 1) and xte.shape == (30, 4, 1, 1)
    assert ytr.tolist() == [0] * 30 + [1] * 30 + [2] * 30 and yte.tolist() == [0] * 10 + [1] * 10 + [2] * 10
    np.testing.assert_array_equal(xtr[:, :, 0, 0], np.vstack([x[0:30], x[50:80], x[100:130]]))
    np.testing.assert_array_equal(xte[:, :, 0, 0], np.vstack([x[40:50], x[90:100], x[140:150]]))
    assert ds.class_names() == list(SPECIES) and ds.nclasses == 3
    assert Iris().load(tile=Box(0, 1, 0, 1))["train"][0].shape == (90, 4, 1, 1)   # repo_path optional


def test_sample_pct_subsamples_the_training_flowers():
    full = Iris().load(dtype=np.float64)["train"]
    part = Iris(sample_pct=50).load(seed=0, dtype=np.float64)["train"]
    assert len(part[1]) == 45
    keep = np.arange(90)
    np.random.RandomState(0).shuffle(keep)
    np.testing.assert_array_equal(part[0], full[0][keep[:45]])
