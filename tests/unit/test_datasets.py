"""IDX files, MNIST, dataset keys, sample_pct and tile cutting."""
import gzip
import math
import os
import struct

import numpy as np
import pytest

from distnet.data import idx
from distnet.data.selection import sample_indices
from distnet.datasets import CIFAR10, MNIST
from distnet.errors import ConfigError, DataError
from distnet.geometry.partition import Box, grid_coords, tile_of

NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def make_mnist(root, n_train=50, n_test=20, gz=False, seed=0):
    """Random MNIST-format files in ``root/MNIST``; returns (xtr, ytr, xte, yte) as uint8."""
    rng = np.random.RandomState(seed)
    xtr = rng.randint(0, 256, (n_train, 28, 28)).astype(np.uint8)
    ytr = rng.randint(0, 10, n_train).astype(np.uint8)
    xte = rng.randint(0, 256, (n_test, 28, 28)).astype(np.uint8)
    yte = rng.randint(0, 10, n_test).astype(np.uint8)
    ext = ".gz" if gz else ""
    for name, arr in zip(NAMES, (xtr, ytr, xte, yte)):
        idx.write_idx(os.path.join(root, "MNIST", name + ext), arr)
    return xtr, ytr, xte, yte


# ----------------------------------------------------------------------------- IDX

@pytest.mark.parametrize("gz", [False, True])
def test_idx_round_trip(tmp_path, gz):
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = str(tmp_path / ("a.idx" + (".gz" if gz else "")))
    idx.write_idx(path, a)
    raw = gzip.open(path).read() if gz else open(path, "rb").read()
    assert raw == struct.pack(">iiii", 2051, 2, 3, 4) + a.tobytes()     # the documented layout
    np.testing.assert_array_equal(idx.read_idx(path, idx.IMAGES_MAGIC), a)


def test_idx_reads_hand_made_labels(tmp_path):
    path = tmp_path / "labels"
    path.write_bytes(struct.pack(">ii", 2049, 3) + bytes([7, 0, 9]))
    np.testing.assert_array_equal(idx.read_idx(str(path), idx.LABELS_MAGIC), [7, 0, 9])


def test_idx_bad_magic(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(struct.pack(">ii", 2049, 1) + b"\x01")
    with pytest.raises(DataError, match=r"magic number 2049, expected 2051"):
        idx.read_idx(str(path), idx.IMAGES_MAGIC)


def test_idx_truncated_names_file_and_byte_counts(tmp_path):
    path = str(tmp_path / "train-images-idx3-ubyte")
    idx.write_idx(path, np.zeros((5, 28, 28), np.uint8))
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-100])
    with pytest.raises(DataError) as e:
        idx.read_idx(path, idx.IMAGES_MAGIC)
    msg = str(e.value)
    assert path in msg and "truncated" in msg
    assert str(16 + 5 * 784) in msg and str(16 + 5 * 784 - 100) in msg
    open(path, "wb").write(data[:10])                                   # inside the header
    with pytest.raises(DataError, match="truncated"):
        idx.read_idx(path, idx.IMAGES_MAGIC)
    open(path, "wb").write(data + b"junk")
    with pytest.raises(DataError, match="longer than its header"):
        idx.read_idx(path, idx.IMAGES_MAGIC)


def test_idx_truncated_gzip(tmp_path):
    path = str(tmp_path / "x.gz")
    idx.write_idx(path, np.random.RandomState(0).randint(0, 256, (4, 28, 28)).astype(np.uint8))
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(DataError, match="x.gz"):
        idx.read_idx(path, idx.IMAGES_MAGIC)


# ----------------------------------------------------------------------------- MNIST

@pytest.mark.parametrize("gz", [False, True])
def test_mnist_load_whole_images(tmp_path, gz):
    xtr, ytr, xte, yte = make_mnist(str(tmp_path), gz=gz)
    out = MNIST(repo_path=str(tmp_path)).load()
    assert set(out) == {"train", "test"}
    x, y = out["train"]
    assert x.shape == (50, 1, 28, 28) and x.dtype == np.float32
    assert y.shape == (50,) and y.dtype == np.int64
    np.testing.assert_array_equal(x[:, 0], xtr.astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(y, ytr)
    np.testing.assert_array_equal(out["test"][0][:, 0], xte.astype(np.float32) / 255)
    np.testing.assert_array_equal(out["test"][1], yte)


def test_mnist_shape_known_without_files(tmp_path):
    m = MNIST(repo_path=str(tmp_path / "nothing-here"))
    assert m.image_shape == (1, 28, 28) and m.nclasses == 10 and m.plane == (28, 28)
    c = CIFAR10(repo_path=str(tmp_path / "nothing-here"))
    assert c.image_shape == (3, 32, 32) and c.nclasses == 10


def test_mnist_missing_files_message(tmp_path):
    with pytest.raises(DataError) as e:
        MNIST(repo_path=str(tmp_path)).load()
    msg = str(e.value)
    assert os.path.join(str(tmp_path), "MNIST") in msg
    assert all(n in msg for n in NAMES) and ".gz" in msg
    assert "distnet data mnist-sample" in msg and "MNIST site" in msg


def test_mnist_lists_only_the_missing_files(tmp_path):
    make_mnist(str(tmp_path))
    os.unlink(tmp_path / "MNIST" / NAMES[3])
    with pytest.raises(DataError) as e:
        MNIST(repo_path=str(tmp_path)).load()
    assert NAMES[3] in str(e.value) and NAMES[0] not in str(e.value)


def test_mnist_count_mismatch_and_bad_labels(tmp_path):
    make_mnist(str(tmp_path))
    idx.write_idx(str(tmp_path / "MNIST" / NAMES[1]), np.zeros(49, np.uint8))
    with pytest.raises(DataError, match="50 images but .* 49 labels"):
        MNIST(repo_path=str(tmp_path)).load()
    idx.write_idx(str(tmp_path / "MNIST" / NAMES[1]), np.full(50, 10, np.uint8))
    with pytest.raises(DataError, match="label 10"):
        MNIST(repo_path=str(tmp_path)).load()


def test_mnist_wrong_image_size(tmp_path):
    make_mnist(str(tmp_path))
    idx.write_idx(str(tmp_path / "MNIST" / NAMES[0]), np.zeros((50, 32, 32), np.uint8))
    with pytest.raises(DataError, match="32x32"):
        MNIST(repo_path=str(tmp_path)).load()


# ----------------------------------------------------------------------------- keys

@pytest.mark.parametrize("pct", [0, -1, 150, 100.5, True, "10", float("nan")])
def test_bad_sample_pct(tmp_path, pct):
    with pytest.raises(ConfigError) as e:
        MNIST(repo_path=str(tmp_path), sample_pct=pct)
    assert e.value.key == "sample_pct"


def test_other_bad_keys(tmp_path):
    with pytest.raises(ConfigError) as e:
        MNIST(repo_path=None)
    assert e.value.key == "repo_path"
    with pytest.raises(ConfigError) as e:
        MNIST(repo_path=str(tmp_path), serialized_path="cache.npz")
    assert e.value.key == "serialized_path"
    with pytest.raises(ConfigError) as e:
        MNIST(repo_path=str(tmp_path), dist_flag="yes")
    assert e.value.key == "dist_flag"
    m = MNIST(repo_path="~/data", sample_pct=None, backend="be", dist_flag=True)
    assert m.sample_pct == 100 and m.backend == "be" and not m.repo_path.startswith("~")


def test_dtype(tmp_path):
    xtr = make_mnist(str(tmp_path))[0]
    x = MNIST(repo_path=str(tmp_path)).load(dtype="float64")["train"][0]
    assert x.dtype == np.float64
    np.testing.assert_array_equal(x[:, 0], xtr / 255.0)
    with pytest.raises(ConfigError):
        MNIST(repo_path=str(tmp_path)).load(dtype=np.int32)


# ----------------------------------------------------------------------------- sample_pct

def test_sample_indices_semantics():
    np.testing.assert_array_equal(sample_indices(60000, 100, seed=5), np.arange(60000))
    keep = sample_indices(60000, 10, seed=3)
    assert len(keep) == 6000
    np.testing.assert_array_equal(keep, np.random.RandomState(3).permutation(60000)[:6000])
    assert not np.all(np.diff(keep) > 0)                  # shuffled order, not sorted back
    assert len(sample_indices(60000, 0.3, 0)) == 180      # exact decimal: 0.3 % of 60000
    assert len(sample_indices(60000, 1, 0)) == 600        # 1 means 1 % (unlike neon's 0.5)
    assert len(sample_indices(60000, 0.5, 0)) == 300      # 0.5 means 0.5 %
    assert len(sample_indices(50000, 2.7, 0)) == 1350     # not int()-truncated like neon's CIFAR
    assert len(sample_indices(10, 0.001, 0)) == 1         # at least one image
    assert len(sample_indices(7, 50, 0)) == math.floor(3.5)
    np.testing.assert_array_equal(sample_indices(1000, 30, 1), sample_indices(1000, 30, 1))
    assert not np.array_equal(sample_indices(1000, 30, 1), sample_indices(1000, 30, 2))


def test_sample_indices_equal_neons_shuffle_of_a_fresh_rng():
    np.random.seed(7)
    order = list(range(500))
    np.random.shuffle(order)                               # neon: shuffle of a python list
    np.testing.assert_array_equal(sample_indices(500, 20, 7), order[:100])


def test_mnist_sample_pct_load(tmp_path):
    xtr, ytr, xte, yte = make_mnist(str(tmp_path), n_train=200)
    out = MNIST(repo_path=str(tmp_path), sample_pct=10).load(seed=4)
    keep = np.random.RandomState(4).permutation(200)[:20]
    np.testing.assert_array_equal(out["train"][0][:, 0], xtr[keep] / np.float32(255))
    np.testing.assert_array_equal(out["train"][1], ytr[keep])
    assert out["test"][0].shape[0] == 20                   # test is never subsampled


# ----------------------------------------------------------------------------- tiles

@pytest.mark.parametrize("grid", [(1, 1), (2, 2), (2, 3), (3, 1), (4, 4)])
def test_tiles_equal_slices_of_the_full_array(tmp_path, grid):
    make_mnist(str(tmp_path))
    ds = MNIST(repo_path=str(tmp_path), sample_pct=40)
    full = ds.load(seed=1)
    for coords in grid_coords(grid):
        tile = tile_of((28, 28), grid, coords)
        part = ds.load(tile=tile, seed=1)
        for split in ("train", "test"):
            np.testing.assert_array_equal(part[split][0],
                                          full[split][0][:, :, tile.y0:tile.y1, tile.x0:tile.x1])
            np.testing.assert_array_equal(part[split][1], full[split][1])   # labels never split
            assert part[split][0].flags.c_contiguous


def test_bad_tile(tmp_path):
    make_mnist(str(tmp_path))
    ds = MNIST(repo_path=str(tmp_path))
    for box in (Box(0, 29, 0, 28), Box(-1, 5, 0, 5), Box(3, 3, 0, 5)):
        with pytest.raises(DataError, match="28x28"):
            ds.load(tile=box)
    with pytest.raises(TypeError):
        ds.load(tile=(0, 14, 0, 14))
