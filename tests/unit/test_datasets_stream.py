"""Streaming (StreamArray, per-minibatch reads with prefetch) gives the in-memory numbers exactly
(float64), for HDF5 and memory-mapped .npy, with sample_pct, a validation hold-out and scaling."""
import os

import h5py
import numpy as np
import pytest

from distnet.config import load_experiment_text
from distnet.datasets import HDF5Dataset, NumpyDataset, StreamArray
from distnet.errors import ConfigError, DataError
from distnet.geometry import tile_of
from tests.tiny import CNN, GB, experiment


def write_uint8(path, n_train=30, n_test=10, seed=0, valid=0):
    rng = np.random.RandomState(seed)
    with h5py.File(path, "w") as f:
        for split, n in (("train", n_train), ("test", n_test), ("valid", valid)):
            if n == 0:
                continue
            y = rng.randint(0, 3, n)
            x = rng.randint(0, 120, (n, 1, 12, 10)).astype(np.uint8)
            x[:, 0, :4, :4] += (100 * (y == 0)).astype(np.uint8)[:, None, None]
            f.create_dataset(f"{split}/x", data=x, chunks=(1, 1, 12, 10))
            f[f"{split}/y"] = y
        f.attrs["nclasses"] = 3
    return path


def _run(text):
    exp = load_experiment_text(text)
    return exp, exp.run()


def _text(path, keys, template=CNN):
    return experiment(template, path).replace("HDF5Dataset {", "HDF5Dataset {" + keys + ", ")


@pytest.mark.parametrize("keys", ["scale: 1/255", "scale: 0.00392156862745098, mean: 0.3, std: [0.2]",
                                  "scale: '1/255', sample_pct: 70, valid_fraction: 0.2"])
def test_streaming_equals_in_memory(tmp_path, keys):
    path = write_uint8(tmp_path / "d.h5")
    _, mem = _run(_text(path, keys + ", in_memory: true"))
    exp, stream = _run(_text(path, keys + ", in_memory: false"))
    assert exp.dataset.mode == "stream"
    assert stream.epoch_costs == mem.epoch_costs          # bit for bit (float64)
    assert stream.test_misclass == mem.test_misclass and stream.train_misclass == mem.train_misclass
    assert stream.valid_misclass == mem.valid_misclass


def test_streaming_gb_pretraining(tmp_path):
    path = write_uint8(tmp_path / "d.h5")
    exp_m, mem = _run(_text(path, "scale: 1/255, in_memory: true", GB))
    exp_s, stream = _run(_text(path, "scale: 1/255, in_memory: false", GB))
    assert stream.epoch_costs == mem.epoch_costs and exp_s.model.pretrain_costs == exp_m.model.pretrain_costs
    assert stream.test_misclass == mem.test_misclass


def test_stream_array_rows_and_prefetch(tmp_path):
    path = write_uint8(tmp_path / "d.h5", n_train=23)
    ds = HDF5Dataset(path=str(path), scale=0.5, in_memory=False)
    tile = tile_of((12, 10), (2, 2), (1, 0))
    full = HDF5Dataset(path=str(path), scale=0.5, in_memory=True).load(tile=tile, dtype=np.float64)
    data = ds.load(tile=tile, dtype=np.float64)
    x, y = data["train"]
    assert isinstance(x, StreamArray) and x.shape == full["train"][0].shape and len(x) == 23
    np.testing.assert_array_equal(y, full["train"][1])
    rng = np.random.RandomState(1)
    batches = [rng.permutation(23)[:7] for _ in range(5)] + [np.array([3, 3, 1])]  # repeats too
    x.schedule(batches)
    for b in batches:
        np.testing.assert_array_equal(x[b], full["train"][0][b])
    assert x.stats["prefetched"] == len(batches)
    for a in range(0, 23, 5):        # the evaluation loop: arange blocks, guessed ahead
        rows = np.arange(a, min(a + 5, 23))
        np.testing.assert_array_equal(x[rows], full["train"][0][rows])
    assert x.stats["prefetched"] > len(batches)
    x.close()


def test_npy_files_and_npz(tmp_path):
    rng = np.random.RandomState(0)
    arrays = {}
    for split, n in (("train", 20), ("test", 6)):
        arrays[split] = (rng.rand(n, 2, 5, 4).astype(np.float32), rng.randint(0, 4, n))
        np.save(tmp_path / f"{split}_x.npy", arrays[split][0])
        np.save(tmp_path / f"{split}_y.npy", arrays[split][1])
    np.savez(tmp_path / "d.npz", x_train=arrays["train"][0], y_train=arrays["train"][1],
             x_test=arrays["test"][0], y_test=arrays["test"][1])
    tile = tile_of((5, 4), (2, 1), (1, 0))
    a = NumpyDataset(repo_path=str(tmp_path), train_x="train_x.npy", train_y="train_y.npy",
                     test_x="test_x.npy", test_y="test_y.npy", in_memory=False, mean=[0.5, 0.25])
    b = NumpyDataset(path=str(tmp_path / "d.npz"), mean=[0.5, 0.25])
    assert a.image_shape == (2, 5, 4) and a.nclasses == b.nclasses
    da, db = a.load(tile=tile, dtype=np.float64), b.load(tile=tile, dtype=np.float64)
    assert a.mode == "stream" and b.mode == "memory"
    for split in ("train", "test"):
        np.testing.assert_array_equal(da[split][0][np.arange(len(da[split][1]))], db[split][0])
    want = arrays["train"][0][:, :, 3:5].astype(np.float64) - np.array([0.5, 0.25]).reshape(1, 2, 1, 1)
    np.testing.assert_array_equal(db["train"][0], want)


def test_scaling_keys_and_refusals(tmp_path):
    path = str(write_uint8(tmp_path / "d.h5"))
    with pytest.raises(ConfigError, match="scale: 0.00392156862745098") as e:
        HDF5Dataset(path=path).load()
    assert e.value.key == "scale"
    assert HDF5Dataset(path=path, scale="1/255").scale == 1 / 255
    for bad in ("1/0", "x", 0, True):
        with pytest.raises(ConfigError):
            HDF5Dataset(path=path, scale=bad)
    with pytest.raises(ConfigError, match="std"):
        HDF5Dataset(path=path, std=[1, 0])
    with pytest.raises(ConfigError, match="1 or 1 values"):
        HDF5Dataset(path=path, scale=1, mean=[1, 2]).load()
    with pytest.raises(ConfigError, match="in_memory"):
        HDF5Dataset(path=path, in_memory="sometimes")
    x = HDF5Dataset(path=path, scale=0.5, mean=1, std=2, in_memory=True).load(dtype=np.float64)["test"][0]
    with h5py.File(path) as f:
        raw = f["test/x"][()]
    np.testing.assert_array_equal(x, (raw.astype(np.float64) * 0.5 - 1) / 2)


def test_valid_fraction_split(tmp_path):
    path = str(write_uint8(tmp_path / "d.h5", n_train=40))
    ds = HDF5Dataset(path=path, scale=1, valid_fraction=0.25, in_memory=True)
    rows = ds.split_rows()
    assert len(rows["valid"]) == 10 and len(rows["train"]) == 30
    assert not set(rows["valid"]) & set(rows["train"])
    assert (np.diff(rows["valid"]) > 0).all() and (np.diff(rows["train"]) > 0).all()
    np.testing.assert_array_equal(HDF5Dataset(path=path, scale=1, valid_fraction=0.25).split_rows()["valid"],
                                  rows["valid"])          # fixed seed
    path2 = str(write_uint8(tmp_path / "v.h5", valid=7))
    assert len(HDF5Dataset(path=path2, scale=1, valid_fraction=0.5).split_rows()["valid"]) == 7  # the file's
    with pytest.raises(ConfigError, match="valid_fraction"):
        HDF5Dataset(path=path, valid_fraction=1.0)


def test_bad_data_errors_name_the_file(tmp_path):
    path = tmp_path / "nan.h5"
    with h5py.File(path, "w") as f:
        for s in ("train", "test"):
            x = np.zeros((4, 1, 3, 3))
            if s == "train":
                x[2, 0, 1, 1] = np.inf
            f[f"{s}/x"], f[f"{s}/y"] = x, [0, 1, 0, 1]
    for mode in (True, False):
        with pytest.raises(DataError, match=r"nan.h5 \(train\) holds NaN or inf values \(image 2\)"):
            HDF5Dataset(path=str(path), in_memory=mode).load()
    with h5py.File(path, "a") as f:
        del f["test/y"]
        f["test/y"] = [0, 1, 7, -1]
        f.attrs["nclasses"] = 2
    with pytest.raises(DataError, match=r"nan.h5: test/y has a label -1 out of range"):
        HDF5Dataset(path=str(path)).nclasses
    np.save(tmp_path / "x.npy", np.zeros((3, 1, 2, 2)))
    np.save(tmp_path / "y.npy", np.array([0, 1, -2]))
    with pytest.raises(DataError, match=r"y.npy.*label -2 is out of range|x.npy.*label -2"):
        NumpyDataset(train_x=str(tmp_path / "x.npy"), train_y=str(tmp_path / "y.npy"),
                     test_x=str(tmp_path / "x.npy"), test_y=str(tmp_path / "y.npy")).nclasses


def test_corrupt_chunk_names_the_file(tmp_path):
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        for s in ("train", "test"):
            x = np.full((4, 1, 8, 8), 7, np.uint8)
            f.create_dataset(f"{s}/x", data=x, chunks=(1, 1, 8, 8), fletcher32=True)
            f[f"{s}/y"] = [0, 1, 0, 1]
        offset = f["train/x"].id.get_chunk_info(2).byte_offset
    with open(path, "r+b") as fh:
        fh.seek(offset + 5)
        fh.write(b"\xff\xfe")
    ds = HDF5Dataset(path=str(path), scale=1, in_memory=False)
    x = ds.load()["train"][0]
    x[np.array([0, 1])]
    with pytest.raises(DataError, match=r"cannot read train/x of .*c.h5 \(images 2\.\.3\)"):
        x[np.array([2, 3])]
    with pytest.raises(DataError, match="c.h5"):
        HDF5Dataset(path=str(path), scale=1, in_memory=True).load()


def test_memory_per_rank(tmp_path):
    from distnet.datasets.memory import data_memory
    m = data_memory({"train": 2000, "test": 500}, 3, (128, 128), 4, 1, batch_size=32, ndata=2)
    assert m["memory"] == 2500 * (3 * 128 * 128 * 4 + 8)
    assert m["stream"] == 2500 * 16 + 16 * 3 * 128 * 128 * (4 * 4 + 1)
    big = data_memory({"train": 20000, "test": 5000}, 3, (128, 128), 4, 1, batch_size=32, ndata=2)
    assert big["memory"] == 10 * m["memory"] and big["stream"] < 1.2 * m["stream"]
    path = str(write_uint8(tmp_path / "d.h5", n_train=30, n_test=10))
    ds = HDF5Dataset(path=path, scale=1, valid_fraction=0.2)
    got = ds.memory_per_rank(tile=tile_of((12, 10), (2, 2), (0, 1)), batch_size=8, ndata=1,
                             dtype=np.float64)
    assert got == {**data_memory({"train": 24, "valid": 6, "test": 10}, 1, (6, 5), 8, 1, 8, 1),
                   "mode": "memory"}


def test_cache_dir_per_rank(tmp_path, monkeypatch):
    path = str(write_uint8(tmp_path / "d.h5"))
    tile = tile_of((12, 10), (2, 1), (1, 0))
    want = HDF5Dataset(path=path, scale=1, in_memory=True).load(tile=tile, dtype=np.float64)
    monkeypatch.setenv("DISTNET_CACHE_DIR", str(tmp_path / "node"))
    for mode in (False, True, False):       # build, build the other kind, reuse
        ds = HDF5Dataset(path=path, scale=1, in_memory=mode)
        got = ds.load(tile=tile, dtype=np.float64, rank=1, size=2, grid=(2, 1))
        x = got["train"][0]
        np.testing.assert_array_equal(x[np.arange(len(x))], want["train"][0])
    assert sorted(os.listdir(tmp_path / "node")) == ["d.rank1of2.h5", "d.tile.rank1of2.h5"]
    with h5py.File(tmp_path / "node" / "d.tile.rank1of2.h5") as f:
        assert f["train/x"].shape == (30, 1, 6, 10) and f["train/x"].dtype == np.uint8
    ds = HDF5Dataset(path=path, scale=1, in_memory=False, cache_dir=str(tmp_path / "other"))
    ds.load(tile=tile, rank=0, size=2)
    assert os.listdir(tmp_path / "other") == ["d.tile.rank0of2.h5"]     # the key wins over the variable


def test_describe_memory(tmp_path):
    from distnet.datasets import MNIST
    from distnet.datasets.memory import describe_memory
    path = str(write_uint8(tmp_path / "d.h5"))
    line = describe_memory(HDF5Dataset(path=path, scale=1, in_memory=False), tile_of((12, 10), (2, 2), (0, 0)),
                           batch_size=8, ndata=2, dtype="float64")
    assert line.startswith("data per rank: 0.0 MiB in memory, ") and line.endswith("(in_memory: false -> stream)")
    assert describe_memory(MNIST(repo_path=str(tmp_path))) == "data per rank: in memory (the whole split)"


@pytest.mark.parametrize("keys, key", [
    ("scale: 1, valid_fraction: 0.999", "valid_fraction"),              # holds out every image
    ("scale: 1, serialized_path: 'cache_{foo}.h5'", "serialized_path"),  # unknown placeholder
])
def test_dataset_errors_found_when_loading_name_the_yaml_line(tmp_path, keys, key):
    """Errors found only when the data is opened still name the dataset's file:line."""
    path = write_uint8(tmp_path / "d.h5", n_train=3)
    exp = load_experiment_text(_text(path, keys), "exp.yaml")
    with pytest.raises(ConfigError) as e:
        exp.run()
    assert e.value.key == key and e.value.where == "exp.yaml:3", str(e.value)
