"""Streaming (StreamArray, per-minibatch reads with prefetch) gives the in-memory numbers exactly
(float64), for HDF5 and memory-mapped .npy, with sample_pct, a validation hold-out and scaling."""
import logging
import os
import re
import warnings

import h5py
import numpy as np
import pytest

from distnet.config import load_experiment_text
from distnet.data.stream import StreamArray
from distnet.datasets import HDF5Dataset, NumpyDataset
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


def test_an_npz_split_with_images_but_no_labels_is_refused(tmp_path):
    """NumpyDataset ignored x_valid without y_valid (no validation split, not a word)."""
    x = np.zeros((4, 1, 3, 3), np.float32)
    np.savez(tmp_path / "d.npz", x_train=x, y_train=[0, 1, 0, 1], x_test=x, y_test=[0, 1, 0, 1], x_valid=x)
    with pytest.raises(DataError, match=r"d.npz holds x_valid without y_valid"):
        NumpyDataset(path=str(tmp_path / "d.npz")).image_shape


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


def test_a_file_truncated_or_rewritten_while_streaming_is_an_error(tmp_path):
    """A truncated HDF5 file read as zeros (HDF5 fills past the end of a file) and the run went
    on; a truncated memory-mapped .npy killed the rank with SIGBUS."""
    path = write_uint8(tmp_path / "d.h5", n_train=200)
    x = HDF5Dataset(path=str(path), scale=1, in_memory=False).load()["train"][0]
    x.read(np.array([199]))
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(DataError, match=r"d.h5 changed while the run was reading it \(size \d+ -> \d+"):
        x.read(np.array([199]))
    rng = np.random.RandomState(0)
    for name in ("x", "y"):
        np.save(tmp_path / f"{name}.npy", rng.randint(0, 3, (200, 1, 64, 64) if name == "x" else 200))
    x = NumpyDataset(train_x=str(tmp_path / "x.npy"), train_y=str(tmp_path / "y.npy"), test_x=str(tmp_path / "x.npy"),
                     test_y=str(tmp_path / "y.npy"), scale=1, in_memory=False).load()["train"][0]
    x.read(np.array([199]))
    with open(tmp_path / "x.npy", "r+b") as fh:        # same size, other values: an edit in place
        fh.seek(-8, 2)
        fh.write(b"\x01" * 8)
    os.utime(tmp_path / "x.npy", ns=(1, 1))
    with pytest.raises(DataError, match=r"x.npy changed while the run was reading it"):
        x.read(np.array([199]))
    os.truncate(tmp_path / "x.npy", 4096)
    with pytest.raises(DataError, match=r"x.npy changed while the run was reading it"):
        x.read(np.array([199]))


def test_memory_per_rank(tmp_path):
    from distnet.data.memory import data_memory
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
    from distnet.data.memory import describe_memory
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


def test_a_tile_cache_without_room_streams_from_the_file(tmp_path, monkeypatch, caplog):
    """A cache_dir on a full disk once ended the run with h5py's multi-line write error (the
    in-memory cache already went on without its cache)."""
    import shutil
    from collections import namedtuple
    path = str(write_uint8(tmp_path / "d.h5"))
    tile = tile_of((12, 10), (2, 1), (1, 0))
    want = HDF5Dataset(path=path, scale=1, in_memory=True).load(tile=tile, dtype=np.float64)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 100, 100))
    ds = HDF5Dataset(path=path, scale=1, in_memory=False, cache_dir=str(tmp_path / "node"))
    with caplog.at_level(logging.WARNING, logger="distnet.data.tile_cache"):
        got = ds.load(tile=tile, dtype=np.float64, rank=1, size=2, grid=(2, 1))
    x = got["train"][0]
    np.testing.assert_array_equal(x[np.arange(len(x))], want["train"][0])
    assert "not writing tile cache" in caplog.text and "streaming from" in caplog.text
    assert not os.path.exists(tmp_path / "node")


def test_a_tile_cache_edited_behind_its_metadata_is_not_trusted(tmp_path, caplog):
    """Labels edited in a streaming tile cache (serialized_path / cache_dir) crashed training with
    an IndexError; a NaN written into it was reported as bad data ("clean the data") though the
    dataset file was fine."""
    path = tmp_path / "f.h5"
    rng = np.random.RandomState(0)
    with h5py.File(path, "w") as f:
        for s, n in (("train", 12), ("test", 4)):
            f[f"{s}/x"], f[f"{s}/y"] = rng.rand(n, 1, 6, 5), rng.randint(0, 3, n)
    cached = str(tmp_path / "tc.h5")
    want = HDF5Dataset(path=str(path), in_memory=True).load(dtype=np.float64)
    HDF5Dataset(path=str(path), in_memory=False, serialized_path=cached).load(dtype=np.float64)
    with h5py.File(cached, "a") as f:
        f["train/y"][3] = 7
        f["train/x"][2, 0, 0, 0] = np.nan
    with caplog.at_level(logging.WARNING, logger="distnet.data.reading"):
        got = HDF5Dataset(path=str(path), in_memory=False, serialized_path=cached).load(dtype=np.float64)
    for split in ("train", "test"):
        x, y = got[split]
        np.testing.assert_array_equal(y, want[split][1])
        np.testing.assert_array_equal(x[np.arange(len(y))], want[split][0])
    assert "tc.h5" in caplog.text and "rebuilding it" in caplog.text


def test_channels_last_images_get_a_warning(tmp_path, caplog):
    """An (N, H, W, C) file written by hand trained on C=H channels of HxW=WxC pixels, silently."""
    path = tmp_path / "nhwc.h5"
    with h5py.File(path, "w") as f:
        for s in ("train", "test"):
            f[f"{s}/x"], f[f"{s}/y"] = np.zeros((2, 16, 16, 3), np.float32), [0, 1]
    with caplog.at_level(logging.WARNING, logger="distnet.datasets.files"):
        HDF5Dataset(path=str(path)).check()
    assert "nhwc.h5: images of 16x16x3 (C, H, W) look like (N, H, W, C)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="distnet.datasets.files"):
        HDF5Dataset(path=str(write_uint8(tmp_path / "d.h5")), scale=1).check()
    assert caplog.text == ""


def test_streaming_a_split_compressed_in_one_chunk_gets_a_warning(tmp_path, caplog):
    """Every minibatch decompressed the whole split (HDF5's chunk cache holds 1 MiB): one epoch of
    3000 small images took 11x as long as from the converter's file, quadratic in the images."""
    path = tmp_path / "gz.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("train/x", data=np.zeros((400, 3, 32, 32), np.uint8), chunks=(400, 3, 32, 32),
                         compression="gzip")
        f["train/y"] = np.arange(400) % 2
        f["test/x"], f["test/y"] = np.zeros((4, 3, 32, 32), np.uint8), [0, 1, 0, 1]
    for in_memory in (True, False):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="distnet.datasets.files"):
            HDF5Dataset(path=str(path), scale=1, in_memory=in_memory).load()
        assert ("train/x is stored compressed in chunks of 400 images" in caplog.text) == (not in_memory)


def test_images_to_predict_must_be_stored_like_the_training_file(tmp_path):
    """uint8 images given to a model trained on a float file (already 0..1) went through its
    scale 1: pixels of 0..255 where the model knew 0..1, and predictions of nonsense."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        for s in ("train", "test"):
            f[f"{s}/x"], f[f"{s}/y"] = np.full((2, 1, 3, 3), 0.5, np.float32), [0, 1]
    ds = HDF5Dataset(path=str(path))
    np.testing.assert_array_equal(ds.prepare_images(np.full((1, 1, 3, 3), 0.5)), np.full((1, 1, 3, 3), 0.5))
    with pytest.raises(DataError, match=r"images to predict store uint8 values but .*f.h5 stores float32"):
        ds.prepare_images(np.zeros((1, 1, 3, 3), np.uint8))


@pytest.mark.parametrize("in_memory", [True, False])
@pytest.mark.parametrize("keys,key,value", [("scale: 1e308", "scale", "1e+308"),
                                            ("scale: 1, std: 1e-300", "std", "1e-300"),
                                            ("scale: 1e30, std: 1e-30", "std", "1e-30"),
                                            ("scale: 1e36, mean: -2e38", "mean", "-2e+38")])
def test_scaling_that_overflows_names_the_keys_not_the_file(tmp_path, keys, key, value, in_memory):
    """Finite uint8 pixels that scale / mean / std turn into inf or NaN: a ConfigError at the key's
    YAML line naming the key, not 'the file holds NaN or inf' (and no numpy overflow warning)."""
    path = write_uint8(tmp_path / "d.h5")
    text = _text(path, f"{keys}, in_memory: {str(in_memory).lower()}").replace("Numpy64 {", "Numpy {")
    exp = load_experiment_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # numpy's 'overflow encountered in cast' is noise here
        with pytest.raises(ConfigError) as e:
            exp.run()
    msg = str(e.value)
    assert f"key '{key}'" in msg and f"{key} {value}" in msg and "float32" in msg, msg
    assert "d.h5" in msg and "the data are fine" in msg and "holds NaN" not in msg, msg
    assert re.match(r"<string>:\d+:", msg), msg


def test_float_data_that_scale_overflows_is_not_called_nan_data(tmp_path):
    """Float data, finite in the file, with a scale that overflows: the same ConfigError; a file
    that does hold inf keeps its DataError (test_bad_data_errors_name_the_file)."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        for s in ("train", "test"):
            f[f"{s}/x"], f[f"{s}/y"] = np.full((4, 1, 3, 3), 1e30), [0, 1, 0, 1]
    for mode in (True, False):
        with pytest.raises(ConfigError, match=r"scale 1e\+20 turns .* into inf or NaN in float32"):
            HDF5Dataset(path=str(path), in_memory=mode, scale=1e20).load(dtype=np.float32)


def test_float64_data_beyond_float32_says_the_dtype_cannot_hold_them(tmp_path):
    """Finite float64 values above float32's range, no scale: the model's dtype is the cause."""
    path = tmp_path / "big.h5"
    with h5py.File(path, "w") as f:
        for s in ("train", "test"):
            f[f"{s}/x"], f[f"{s}/y"] = np.full((4, 1, 3, 3), 1e300), [0, 1, 0, 1]
    for mode in (True, False):
        with pytest.raises(ConfigError, match=r"big.h5 \(train\) holds finite values .* that float32 cannot "
                                              r"hold \(largest 3.4e\+38\): store them scaled"):
            HDF5Dataset(path=str(path), in_memory=mode).load(dtype=np.float32)


def test_images_to_predict_that_scaling_overflows(tmp_path):
    """Finite images to predict that the dataset's scale turns into inf: the ConfigError of the
    training data (predictions of inf / NaN otherwise, silently)."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        for s in ("train", "test"):
            f[f"{s}/x"], f[f"{s}/y"] = np.full((2, 1, 3, 3), 0.5, np.float32), [0, 1]
    ds = HDF5Dataset(path=str(path), scale=1e20)
    with pytest.raises(ConfigError, match=r"images to predict holds finite values \(1e\+30 .. 1e\+30 in image 1\) "
                                          r"but scale 1e\+20 turns them into inf or NaN in float32"):
        ds.prepare_images(np.array([1, 1e30])[:, None, None, None] * np.ones((2, 1, 3, 3)), np.float32)


def test_scaling_overflow_with_a_tile_cache_names_the_data_file(tmp_path):
    """Streamed through a tile cache: the message names the data file, not the cache."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        for s in ("train", "test"):
            f[f"{s}/x"], f[f"{s}/y"] = np.full((4, 1, 3, 3), 1e30), [0, 1, 0, 1]
    ds = HDF5Dataset(path=str(path), in_memory=False, scale=1e20, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match=r"f.h5 \(train\) holds finite values") as e:
        ds.load(dtype=np.float32)
    assert ".tile." not in str(e.value)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64])
@pytest.mark.parametrize("in_memory", [True, False])
def test_wide_integers_that_scaling_overflows_name_the_key_streamed_too(tmp_path, dtype, in_memory):
    """int32 / int64 data streamed were not checked (their type's range overflows any large
    scale): values a scale turns into inf went into training, and the first step said 'the
    cost became nan ... lower the learning rate or check the data'. Their values are checked
    now when the type's range overflows, so small values with the same scale still run."""
    def write(path, big):
        with h5py.File(path, "w") as f:
            for s, n in (("train", 12), ("test", 4)):
                x = np.arange(n * 12 * 10, dtype=dtype).reshape(n, 1, 12, 10) % 200
                if s == "test":
                    x[3, 0, 5, 5] = big
                f[f"{s}/x"], f[f"{s}/y"] = x, np.arange(n) % 3
        return path
    path = write(tmp_path / "wide.h5", 3_000_000_000 if dtype != np.int32 else 2_000_000_000)
    exp = load_experiment_text(_text(path, f"scale: 1e30, in_memory: {str(in_memory).lower()}")
                               .replace("Numpy64 {", "Numpy {"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError) as e:
            exp.run()
    msg = str(e.value)
    assert re.match(r"<string>:\d+: key 'scale': .*wide.h5 \(test\) holds finite values \(.* in image 3\) but "
                    r"scale 1e\+30 turns them into inf or NaN in float32", msg), msg
    ds = HDF5Dataset(path=str(write(tmp_path / "small.h5", 7)), scale=1e30, in_memory=in_memory)
    x = ds.load(dtype=np.float32)["test"][0]
    x = x if in_memory else x.materialize()
    assert np.isfinite(x).all() and x.max() == np.float32(199) * np.float32(1e30)


def test_a_valid_fraction_that_the_files_valid_split_overrides_is_said(tmp_path, caplog):
    """valid_fraction with a file holding valid/x, valid/y did nothing, without a word."""
    path = write_uint8(tmp_path / "v.h5", valid=4)
    text = _text(path, "scale: 1/255, valid_fraction: 0.2").replace("num_epochs: 4", "num_epochs: 1")
    exp = load_experiment_text(text)
    with caplog.at_level(logging.WARNING, logger="distnet"):
        exp.check()
        exp.check()
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "HDF5Dataset" in ln)
    assert caplog.text.count(f"<string>:{line}: key 'valid_fraction': 0.2 is not used: {path} holds a "
                             "validation split (valid/x, valid/y), which is used instead") == 1, caplog.text
