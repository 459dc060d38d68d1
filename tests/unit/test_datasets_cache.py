"""serialized_path caches: placeholders, hits, stale metadata, corrupt files, atomic writes."""
import json
import logging
import os
import pickle
import re
import shutil

import h5py
import numpy as np
import pytest

from distnet.data import cache, idx
from distnet.data.cache import fill_placeholders
from distnet.datasets import MNIST, HDF5Dataset
from distnet.errors import ConfigError, DataError
from distnet.geometry.partition import Box, tile_of

NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
LOGGER = "distnet.data.cache"
FIELDS = ("format_version", "dataset", "sources", "sample_pct", "seed", "dtype", "tile", "grid",
          "plane", "rank", "size")


def make_mnist(root, n_train=40, n_test=10, seed=0):
    rng = np.random.RandomState(seed)
    arrays = (rng.randint(0, 256, (n_train, 28, 28)), rng.randint(0, 10, n_train),
              rng.randint(0, 256, (n_test, 28, 28)), rng.randint(0, 10, n_test))
    for name, arr in zip(NAMES, arrays):
        idx.write_idx(os.path.join(root, "MNIST", name), arr.astype(np.uint8))


@pytest.fixture
def data_dir(tmp_path):
    make_mnist(str(tmp_path / "data"))
    return str(tmp_path / "data")


def no_reads(monkeypatch):
    """Make any read of the source fail, to prove a load came from the cache."""
    def boom(self):
        raise AssertionError("the source was read")
    monkeypatch.setattr(MNIST, "file_sources", boom)


def assert_same(a, b):
    assert set(a) == set(b)
    for split in a:
        np.testing.assert_array_equal(a[split][0], b[split][0])
        assert a[split][0].dtype == b[split][0].dtype
        np.testing.assert_array_equal(a[split][1], b[split][1])


def leftovers(folder):
    return [n for n in os.listdir(folder) if n.endswith(".tmp")]


# ----------------------------------------------------------------------------- placeholders

@pytest.mark.parametrize("path,rank,size,expected", [
    ("c_{rank}.h5", 3, 4, "c_3.h5"),
    ("c_{rank}of{size}.h5", 1, 16, "c_1of16.h5"),
    ("c_<rank>of<size>.pkl", 2, 4, "c_2of4.pkl"),
    ("c/<size>/{rank:03d}.h5", 5, 8, "c/8/005.h5"),
    ("c_{{x}}_{rank}.h5", 0, 2, "c_{x}_0.h5"),
    ("plain.h5", 0, 1, "plain.h5"),
    ("c_{size}.h5", 0, 1, "c_1.h5"),
])
def test_fill_placeholders(path, rank, size, expected):
    assert fill_placeholders(path, rank, size) == expected


def test_fill_placeholders_errors():
    with pytest.raises(ConfigError, match=r"add \{rank\}") as e:
        fill_placeholders("same.h5", 0, 4)
    assert e.value.key == "serialized_path"
    with pytest.raises(ConfigError, match="rank placeholder"):
        fill_placeholders("c_{size}.h5", 1, 4)             # {size} alone still collides
    with pytest.raises(ConfigError, match=r"\{foo\}"):
        fill_placeholders("c_{foo}_{rank}.h5", 0, 2)
    with pytest.raises(ConfigError, match="placeholder"):
        fill_placeholders("c_{rank.h5", 0, 2)


def test_load_without_rank_placeholder_on_many_ranks(data_dir, tmp_path):
    ds = MNIST(repo_path=data_dir, serialized_path=str(tmp_path / "c.h5"))
    with pytest.raises(ConfigError, match="add"):
        ds.load(rank=0, size=2, grid=(1, 2), tile=tile_of((28, 28), (1, 2), (0, 0)))


# ----------------------------------------------------------------------------- hits

@pytest.mark.parametrize("ext", [".h5", ".hdf5", ".pkl"])
def test_cache_written_then_hit(data_dir, tmp_path, monkeypatch, caplog, ext):
    path = str(tmp_path / "cache" / "deep" / ("m_{rank}of{size}" + ext))
    tile = tile_of((28, 28), (2, 2), (1, 0))
    kw = dict(tile=tile, seed=2, rank=2, size=4, grid=(2, 2))
    fresh = MNIST(repo_path=data_dir, sample_pct=50).load(**kw)
    first = MNIST(repo_path=data_dir, sample_pct=50, serialized_path=path).load(**kw)
    assert_same(first, fresh)
    written = fill_placeholders(path, 2, 4)
    assert os.path.isfile(written) and not leftovers(os.path.dirname(written))
    no_reads(monkeypatch)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        again = MNIST(repo_path=data_dir, sample_pct=50, serialized_path=path).load(**kw)
    assert_same(again, fresh)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("loaded dataset cache" in r.getMessage() for r in caplog.records)


def test_h5_cache_has_the_documented_layout(data_dir, tmp_path):
    path = str(tmp_path / "c.h5")
    out = MNIST(repo_path=data_dir, serialized_path=path).load(tile=Box(0, 14, 7, 28), grid=(2, 1))
    with h5py.File(path, "r") as f:
        meta = {k.split(".", 1)[1]: json.loads(v) for k, v in f.attrs.items() if k.startswith("distnet_cache.")}
        assert f.attrs["distnet_cache_checksum"].startswith("crc32:")
    assert set(meta) == set(FIELDS)
    assert meta["tile"] == [0, 14, 7, 28] and meta["grid"] == [2, 1] and meta["plane"] == [28, 28]
    assert meta["dataset"] == "MNIST" and meta["dtype"] == "float32"
    assert [os.path.basename(s["path"]) for s in meta["sources"]] == list(NAMES)
    again = HDF5Dataset(path=path).load()          # the cache is itself an HDF5Dataset file
    assert_same(again, out)


def test_pkl_cache_is_a_plain_dict(data_dir, tmp_path):
    path = str(tmp_path / "c.pkl")
    out = MNIST(repo_path=data_dir, serialized_path=path).load()
    with open(path, "rb") as f:
        obj = pickle.load(f)
    assert set(obj) == {"distnet_cache", "distnet_cache_checksum", "train", "test"}
    np.testing.assert_array_equal(obj["train"]["x"], out["train"][0])


# ----------------------------------------------------------------------------- stale

def _copy_rank0_cache_to_rank1(path_pattern):
    shutil.copy(fill_placeholders(path_pattern, 0, 2), fill_placeholders(path_pattern, 1, 2))


STALE = {
    # field: (kwargs of the first load, kwargs of the second, MNIST keys of the second)
    "sample_pct": ({}, {}, {"sample_pct": 50}),
    "seed": ({"seed": 0}, {"seed": 1}, {}),
    "dtype": ({}, {"dtype": np.float64}, {}),
    "tile": ({"tile": Box(0, 14, 0, 28)}, {"tile": Box(0, 14, 0, 14)}, {}),
    "grid": ({"grid": (2, 1)}, {"grid": (1, 2)}, {}),
    "size": ({"rank": 0, "size": 2}, {"rank": 0, "size": 4}, {}),
}


@pytest.mark.parametrize("ext", [".h5", ".pkl"])
@pytest.mark.parametrize("field", sorted(STALE) + ["rank", "sources", "repo_path"])
def test_stale_cache_is_rebuilt_and_the_warning_says_why(data_dir, tmp_path, caplog, field, ext):
    path = str(tmp_path / ("c_{rank}" + ext))
    first_kw, second_kw, keys = STALE.get(field, ({"rank": 0, "size": 2}, {"rank": 0, "size": 2}, {}))
    first_kw.setdefault("rank", 0), first_kw.setdefault("size", 2)
    second_kw.setdefault("rank", 0), second_kw.setdefault("size", 2)
    MNIST(repo_path=data_dir, sample_pct=25, serialized_path=path).load(**first_kw)
    repo = data_dir
    if field == "rank":                     # a user copied rank 0's file to rank 1's name
        _copy_rank0_cache_to_rank1(path)
        second_kw["rank"] = 1
    elif field == "sources":                # the data changed after the cache was written
        make_mnist(data_dir, n_train=41, seed=1)
    elif field == "repo_path":              # the same file names in another folder
        repo = str(tmp_path / "other")
        make_mnist(repo, seed=2)
    keys = {"sample_pct": 25, **keys}
    ds = MNIST(repo_path=repo, serialized_path=path, **keys)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = ds.load(**second_kw)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    msg = warnings[0]
    assert "written for another run" in msg and "rebuilding" in msg
    differing = "sources" if field == "repo_path" else field
    mentioned = {f for f in FIELDS if re.search(rf"(\(|; ){f}: ", msg)}
    assert mentioned == {differing}, msg
    if field == "sources":
        assert "changed (size" in msg
    if field == "repo_path":
        assert "is new" in msg and "no longer used" in msg
    # the rebuilt data equal a cache-free load, and the file now holds the new run
    fresh = MNIST(repo_path=repo, **keys).load(**second_kw)
    assert_same(out, fresh)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert_same(ds.load(**second_kw), fresh)
    assert not caplog.records
    assert not leftovers(str(tmp_path))


@pytest.mark.parametrize("field,value", [("format_version", 0), ("dataset", "CIFAR10")])
def test_stale_format_version_or_class(data_dir, tmp_path, caplog, field, value):
    path = str(tmp_path / "c.h5")
    MNIST(repo_path=data_dir, serialized_path=path).load()
    with h5py.File(path, "a") as f:
        f.attrs["distnet_cache." + field] = json.dumps(value)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        MNIST(repo_path=data_dir, serialized_path=path).load()
    assert f"{field}: cached {value!r}" in caplog.text and "rebuilding" in caplog.text


def test_missing_source_is_an_error_even_with_a_cache(data_dir, tmp_path):
    path = str(tmp_path / "c.h5")
    MNIST(repo_path=data_dir, serialized_path=path).load()
    os.unlink(os.path.join(data_dir, "MNIST", NAMES[0]))
    with pytest.raises(DataError, match=NAMES[0]):
        MNIST(repo_path=data_dir, serialized_path=path).load()


# ----------------------------------------------------------------------------- damaged

@pytest.mark.parametrize("ext", [".h5", ".pkl"])
@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_cache_is_rebuilt(data_dir, tmp_path, caplog, ext, damage):
    path = str(tmp_path / ("c" + ext))
    good = MNIST(repo_path=data_dir, serialized_path=path).load()
    data = open(path, "rb").read()
    damaged = {"garbage": b"\x00garbage" * 10, "truncated": data[: len(data) // 2], "empty": b""}
    open(path, "wb").write(damaged[damage])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = MNIST(repo_path=data_dir, serialized_path=path).load()
    assert "unusable" in caplog.text and "rebuilding" in caplog.text
    assert_same(out, good)
    assert open(path, "rb").read() != damaged[damage]
    cache.read_cache(path)                                   # readable again


def test_cache_arrays_disagreeing_with_metadata_are_rebuilt(data_dir, tmp_path, caplog):
    path = str(tmp_path / "c.h5")
    good = MNIST(repo_path=data_dir, serialized_path=path).load()
    with h5py.File(path, "a") as f:
        del f["train/x"]
        f["train/x"] = np.zeros((40, 1, 28, 28), np.float64)    # dtype says float32
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = MNIST(repo_path=data_dir, serialized_path=path).load()
    assert "do not match" in caplog.text
    assert_same(out, good)


@pytest.mark.parametrize("ext", [".h5", ".pkl"])
@pytest.mark.parametrize("tamper", ["labels", "nan pixels", "label -3", "no checksum"])
def test_tampered_cache_with_intact_metadata_is_rebuilt(data_dir, tmp_path, caplog, ext, tamper):
    """Arrays changed in place (metadata, shapes and dtypes intact) are detected by the
    content checksum; the cache is rebuilt from the sources with a warning."""
    path = str(tmp_path / f"c{ext}")
    good = MNIST(repo_path=data_dir, serialized_path=path).load()
    meta, data = cache.read_cache(path)
    (x, y), test = data["train"], data["test"]
    x, y = x.copy(), y.copy()
    if tamper == "labels":
        y[:5] = (y[:5] + 1) % 10
    elif tamper == "nan pixels":
        x[3, 0, 4, 4] = np.nan
    elif tamper == "label -3":
        y[0] = -3
    data = {"train": (x, y), "test": test}
    if ext == ".h5":
        with h5py.File(path, "a") as f:
            f["train/x"][...] = x
            f["train/y"][...] = y
            if tamper == "no checksum":
                del f.attrs["distnet_cache_checksum"]
    else:
        with open(path, "rb") as f:
            obj = pickle.load(f)
        obj["train"] = {"x": x, "y": y}
        if tamper == "no checksum":
            del obj["distnet_cache_checksum"]
        with open(path, "wb") as f:
            pickle.dump(obj, f)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = MNIST(repo_path=data_dir, serialized_path=path).load()
    words = "no content checksum" if tamper == "no checksum" else "arrays were changed after it was written"
    assert words in caplog.text and "rebuilding it" in caplog.text
    assert_same(out, good)
    cache._check_checksum(path, cache.read_cache(path)[1], cache._read(path)[2])   # whole again


def test_content_checksum_sees_values_shapes_and_dtypes():
    x, y = np.zeros((2, 1, 2, 2), np.float32), np.zeros(2, np.int64)
    base = cache.content_checksum({"train": (x, y), "test": (x, y)})
    assert base == cache.content_checksum({"train": (x.copy(), y.copy()), "test": (x, y)})
    assert base != cache.content_checksum({"train": (x.reshape(2, 1, 4, 1), y), "test": (x, y)})
    assert base != cache.content_checksum({"train": (x.astype(np.float64), y), "test": (x, y)})
    y2 = y.copy()
    y2[1] = 1
    assert base != cache.content_checksum({"train": (x, y2), "test": (x, y)})


def test_malicious_pkl_cache_is_refused_and_replaced(data_dir, tmp_path, caplog):
    path = str(tmp_path / "c.pkl")
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with open(path, "wb") as f:
        pickle.dump({"distnet_cache": Evil()}, f)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        MNIST(repo_path=data_dir, serialized_path=path).load()
    assert "refusing to unpickle" in caplog.text
    assert not marker.exists()
    assert cache.read_cache(path)[0]["dataset"] == "MNIST"


# ----------------------------------------------------------------------------- writing

def test_failed_write_leaves_no_file(tmp_path):
    path = str(tmp_path / "c.pkl")
    data = {"train": (np.zeros((1, 1, 2, 2), np.float32), np.zeros(1, np.int64))}
    with pytest.raises(Exception):
        cache.write_cache(path, {"x": 1}, {"train": (lambda: 0, data["train"][1])})
    assert os.listdir(tmp_path) == []


def test_failed_build_writes_nothing(data_dir, tmp_path, monkeypatch):
    path = str(tmp_path / "out" / "c.h5")

    def boom(self):
        raise DataError("source broke")
    monkeypatch.setattr(MNIST, "file_sources", boom)
    with pytest.raises(DataError, match="source broke"):
        MNIST(repo_path=data_dir, serialized_path=path).load()
    assert not os.path.exists(path)


def test_unwritable_cache_warns_and_returns_data(data_dir, tmp_path, caplog):
    (tmp_path / "file").write_text("not a folder")
    path = str(tmp_path / "file" / "c.h5")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = MNIST(repo_path=data_dir, serialized_path=path).load()
    assert "could not write" in caplog.text
    assert out["train"][0].shape == (40, 1, 28, 28)


def test_a_stale_temporary_of_a_killed_write_is_removed_even_when_the_cache_is_used(data_dir, tmp_path):
    import subprocess
    import sys
    from distnet import fileio
    path = str(tmp_path / "c.h5")
    MNIST(repo_path=data_dir, serialized_path=path).load()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".c.h5.{fileio._host()}.{dead.pid}.abc.tmp"
    stale.write_bytes(b"half")
    MNIST(repo_path=data_dir, serialized_path=path).load()
    assert not stale.exists() and leftovers(tmp_path) == []


def test_a_full_disk_is_a_one_line_warning(data_dir, tmp_path, caplog, monkeypatch):
    """h5py's ENOSPC error spans two lines (its errno, time, file descriptor, buffer address...)."""
    import errno
    from distnet.data import cache

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "Can't close file (file write failed: time = ...\n, filename = ...)")
    monkeypatch.setattr(cache, "write_cache", full)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        MNIST(repo_path=data_dir, serialized_path=str(tmp_path / "c.h5")).load()
    assert caplog.records[-1].getMessage() == (f"could not write dataset cache {tmp_path / 'c.h5'} (No space "
                                               "left on device); continuing without it")


@pytest.mark.parametrize("in_memory", [True, False])
def test_a_file_that_is_no_cache_is_never_overwritten(tmp_path, in_memory):
    """serialized_path naming the dataset file itself (or any HDF5 file without cache metadata)
    replaced it with a cache after a warning: the user's data was gone."""
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        for s in ("train", "test"):
            f[f"{s}/x"], f[f"{s}/y"] = np.zeros((4, 1, 3, 3), np.float32), [0, 1, 0, 1]
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=r"d.h5 is the dataset's own file"):
        HDF5Dataset(path=str(path), serialized_path=str(path), in_memory=in_memory).load()
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["results"] = np.arange(3)
    mine = other.read_bytes()
    with pytest.raises(DataError, match=r"other.h5 exists and is not a distnet dataset cache: remove it"):
        HDF5Dataset(path=str(path), serialized_path=str(other), in_memory=in_memory).load()
    assert path.read_bytes() == before and other.read_bytes() == mine
