"""CIFAR-10 batches, the restricted unpickler, and the HDF5 dataset."""
import os
import pickle
import warnings

import h5py
import numpy as np
import pytest

from distnet.datasets import CIFAR10, HDF5Dataset
from distnet.data import safe_pickle
from distnet.errors import ConfigError, DataError
from distnet.geometry.partition import Box, grid_coords, tile_of


# ----------------------------------------------------------------------------- CIFAR-10

def make_cifar(root, n=6, seed=0, protocol=2):
    """Synthetic CIFAR-10 batches (python-2 style: bytes keys); returns (xtr, ytr, xte, yte)."""
    rng = np.random.RandomState(seed)
    folder = os.path.join(root, "CIFAR10", "cifar-10-batches-py")
    os.makedirs(folder, exist_ok=True)
    xs, ys = [], []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.randint(0, 256, (n, 3072)).astype(np.uint8)
        labels = [int(v) for v in rng.randint(0, 10, n)]
        batch = {b"batch_label": name.encode(), b"labels": labels, b"data": data,
                 b"filenames": [b"img%d.png" % i for i in range(n)]}
        with open(os.path.join(folder, name), "wb") as f:
            pickle.dump(batch, f, protocol=protocol)
        xs.append(data.reshape(n, 3, 32, 32))
        ys.append(np.array(labels))
    return np.concatenate(xs[:5]), np.concatenate(ys[:5]), xs[5], ys[5]


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar_load(tmp_path, protocol):
    xtr, ytr, xte, yte = make_cifar(str(tmp_path), protocol=protocol)
    ds = CIFAR10(repo_path=str(tmp_path))
    out = ds.load()
    assert out["train"][0].shape == (30, 3, 32, 32)
    np.testing.assert_array_equal(out["train"][0], xtr / np.float32(255))
    np.testing.assert_array_equal(out["train"][1], ytr)
    np.testing.assert_array_equal(out["test"][0], xte / np.float32(255))
    tile = tile_of((32, 32), (2, 3), (1, 2))
    part = ds.load(tile=tile)
    np.testing.assert_array_equal(part["test"][0], out["test"][0][:, :, tile.y0:tile.y1, tile.x0:tile.x1])


def test_cifar_sample_pct(tmp_path):
    xtr, ytr, _, _ = make_cifar(str(tmp_path), n=20)
    out = CIFAR10(repo_path=str(tmp_path), sample_pct=10).load(seed=2)
    keep = np.random.RandomState(2).permutation(100)[:10]
    np.testing.assert_array_equal(out["train"][1], ytr[keep])


def test_cifar_missing_files(tmp_path):
    make_cifar(str(tmp_path))
    os.unlink(tmp_path / "CIFAR10" / "cifar-10-batches-py" / "data_batch_3")
    with pytest.raises(DataError) as e:
        CIFAR10(repo_path=str(tmp_path)).load()
    assert "data_batch_3" in str(e.value) and "cifar-10-python.tar.gz" in str(e.value)
    assert "data_batch_2" not in str(e.value)


def test_cifar_bad_batch(tmp_path):
    make_cifar(str(tmp_path))
    path = tmp_path / "CIFAR10" / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(DataError, match=r"\(n, 3072\)"):
        CIFAR10(repo_path=str(tmp_path)).load()
    path.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(DataError, match="not a CIFAR-10 batch"):
        CIFAR10(repo_path=str(tmp_path)).load()


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_cifar_batch_is_refused(tmp_path):
    make_cifar(str(tmp_path))
    marker = tmp_path / "pwned"
    path = tmp_path / "CIFAR10" / "cifar-10-batches-py" / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": _Evil(marker), b"labels": []}, protocol=2))
    with pytest.raises(DataError, match=r"refusing to unpickle (posix|nt|os)\.system from .*data_batch_1"):
        CIFAR10(repo_path=str(tmp_path)).load()
    assert not marker.exists()


# ----------------------------------------------------------------------------- safe_pickle

class _Reduce:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


@pytest.mark.parametrize("fn,args", [(eval, ("1+1",)), (getattr, ("abc", "upper")),
                                     (__import__, ("os",)), (np.load, ("x.npy",))])
def test_safe_pickle_refuses_other_globals(fn, args):
    with pytest.raises(DataError, match="refusing to unpickle"):
        safe_pickle.loads(pickle.dumps(_Reduce(fn, args)))


def test_safe_pickle_codecs_only_latin1():
    import _codecs
    with pytest.raises(DataError):
        safe_pickle.loads(pickle.dumps(_Reduce(_codecs.encode, ("abc", "rot13")), protocol=2))


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_safe_pickle_admits_containers_and_arrays(protocol):
    obj = {"a": [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros(3, np.int64)[::2]],
           "b": (1, 2.5, None, True, "s", b"raw"), "c": np.int64(7), "d": np.float32(0.5),
           "e": np.dtype("float64")}
    back = safe_pickle.loads(pickle.dumps(obj, protocol=protocol), encoding="ASCII")
    np.testing.assert_array_equal(back["a"][0], obj["a"][0])
    np.testing.assert_array_equal(back["a"][1], obj["a"][1])
    assert back["b"] == obj["b"] and back["c"] == 7 and back["e"] == np.float64


def test_safe_pickle_numpy_core_names_load_without_warning():
    data = pickle.dumps(np.arange(4, dtype=np.uint8), protocol=2)
    old = data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")   # a numpy-1.x file
    assert old != data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(safe_pickle.loads(old), np.arange(4))


def test_safe_pickle_damaged(tmp_path):
    data = pickle.dumps({"x": np.arange(100)})
    with pytest.raises(DataError, match="cannot unpickle"):
        safe_pickle.loads(data[:40])
    with pytest.raises(DataError, match="cannot read"):
        safe_pickle.load(str(tmp_path / "absent.pkl"))


# ----------------------------------------------------------------------------- HDF5

def make_h5(path, n=(30, 12), shape=(2, 9, 7), dtype=np.float32, nclasses=None, seed=0):
    rng = np.random.RandomState(seed)
    arrays = {}
    with h5py.File(path, "w") as f:
        for split, m in zip(("train", "test"), n):
            x = (rng.rand(m, *shape) * 100).astype(dtype)
            y = rng.randint(0, 5, m)
            f[f"{split}/x"], f[f"{split}/y"] = x, y
            arrays[split] = (x, y)
        if nclasses is not None:
            f.attrs["nclasses"] = nclasses
    return arrays


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float64])
def test_hdf5_tiles(tmp_path, dtype):
    path = str(tmp_path / "d.h5")
    arrays = make_h5(path, dtype=dtype)
    ds = HDF5Dataset(path=path, sample_pct=50, scale=1 if dtype == np.uint8 else None)
    assert ds.image_shape == (2, 9, 7) and ds.nclasses == 5
    keep = np.random.RandomState(3).permutation(30)[:15]
    for coords in grid_coords((2, 3)):
        tile = tile_of((9, 7), (2, 3), coords)
        out = ds.load(tile=tile, seed=3)
        x, y = arrays["train"]
        sl = (slice(None), slice(None), slice(tile.y0, tile.y1), slice(tile.x0, tile.x1))
        np.testing.assert_array_equal(out["train"][0], x[keep][sl].astype(np.float32))  # scale 1
        np.testing.assert_array_equal(out["train"][1], y[keep])
        np.testing.assert_array_equal(out["test"][0], arrays["test"][0][sl].astype(np.float32))
        assert out["test"][1].dtype == np.int64


def test_hdf5_reads_only_the_hyperslab(tmp_path, monkeypatch):
    path = str(tmp_path / "d.h5")
    make_h5(path)
    seen = []
    original = h5py.Dataset.read_direct

    def spy(self, dest, source_sel=None, dest_sel=None):
        seen.append((self.name, source_sel))
        return original(self, dest, source_sel, dest_sel)

    monkeypatch.setattr(h5py.Dataset, "read_direct", spy)
    HDF5Dataset(path=path).load(tile=Box(3, 6, 2, 4))
    x_reads = [a for name, a in seen if name.endswith("/x")]
    assert x_reads and all(a[2:] == (slice(3, 6), slice(2, 4)) for a in x_reads)


def test_hdf5_header_and_errors(tmp_path):
    path = str(tmp_path / "d.h5")
    make_h5(path, nclasses=12)
    ds = HDF5Dataset(path="d.h5", repo_path=str(tmp_path))      # relative to repo_path
    assert ds.path == path and ds.nclasses == 12
    make_h5(path, nclasses=3)
    with pytest.raises(DataError, match="nclasses is 3"):
        HDF5Dataset(path=path).nclasses
    with h5py.File(path, "a") as f:
        del f["test/y"]
    with pytest.raises(DataError, match="test/y"):
        HDF5Dataset(path=path).image_shape
    with pytest.raises(DataError, match="does not exist"):
        HDF5Dataset(path=str(tmp_path / "none.h5")).load()
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    with pytest.raises(DataError, match="cannot open"):
        HDF5Dataset(path=str(tmp_path / "junk.h5")).image_shape
    with pytest.raises(ConfigError) as e:
        HDF5Dataset(path=None)
    assert e.value.key == "path"
    with h5py.File(path, "w") as f:
        f["train/x"], f["train/y"] = np.zeros((2, 1, 4, 4)), np.zeros(2, int)
        f["test/x"], f["test/y"] = np.zeros((2, 1, 5, 4)), np.zeros(2, int)
    with pytest.raises(DataError, match="test/x images"):
        HDF5Dataset(path=path).image_shape


def test_splits_stored_in_other_dtypes_are_refused(tmp_path):
    """uint8 train images with float test images (already in 0..1) went through the same scale:
    1/255, so the test split was all but zero and its error rate meaningless."""
    from distnet.datasets import NumpyDataset
    path = str(tmp_path / "d.h5")
    with h5py.File(path, "w") as f:
        f["train/x"], f["train/y"] = np.zeros((2, 1, 4, 4), np.uint8), np.zeros(2, int)
        f["test/x"], f["test/y"] = np.zeros((2, 1, 4, 4), np.float32), np.zeros(2, int)
    with pytest.raises(DataError, match=r"d.h5: test/x stores float32 values but train/x uint8: scale, "
                                        r"mean and std apply to every split alike"):
        HDF5Dataset(path=path, scale="1/255").image_shape
    for name, x in (("x", np.zeros((2, 1, 4, 4), np.uint8)), ("xt", np.zeros((2, 1, 4, 4)))):
        np.save(tmp_path / f"{name}.npy", x)
    np.save(tmp_path / "y.npy", np.zeros(2, int))
    with pytest.raises(DataError, match=r"xt.npy \(test\) stores float64 values but .*x.npy \(train\) uint8"):
        NumpyDataset(train_x=str(tmp_path / "x.npy"), train_y=str(tmp_path / "y.npy"),
                     test_x=str(tmp_path / "xt.npy"), test_y=str(tmp_path / "y.npy"), scale=1).image_shape
    from distnet.convert import convert       # it cast the float test images to uint8 (zeros)
    np.savez(tmp_path / "d.npz", x_train=np.zeros((4, 1, 4, 4), np.uint8), y_train=np.zeros(4, int),
             x_test=np.full((2, 1, 4, 4), 0.5), y_test=np.zeros(2, int))
    with pytest.raises(DataError, match=r"d.npz: test images are float64 but train images uint8"):
        convert(tmp_path / "d.npz", tmp_path / "o.h5")


def test_hdf5_layout_holes_are_one_line(tmp_path):
    """valid/x without valid/y (KeyError), a dangling link (KeyError) and a group where a dataset
    belongs (AttributeError) were tracebacks."""
    def make(path, change):
        with h5py.File(path, "w") as f:
            for s in ("train", "test"):
                f[f"{s}/x"], f[f"{s}/y"] = np.zeros((2, 1, 4, 4)), np.zeros(2, int)
            change(f)
        return str(path)
    cases = {"valid/y": lambda f: f.__setitem__("valid/x", np.zeros((2, 1, 4, 4))),
             "train/y": lambda f: (f.__delitem__("train/y"), f.__setitem__("train/y", h5py.SoftLink("/nowhere"))),
             "test/y ": lambda f: (f.__delitem__("test/y"), f.create_group("test/y"))}
    for i, (name, change) in enumerate(cases.items()):
        path = make(tmp_path / f"d{i}.h5", change)
        with pytest.raises(DataError, match=rf"d{i}.h5: {name.strip()} is missing or not a dataset"):
            HDF5Dataset(path=path).image_shape


@pytest.mark.parametrize("value", ["ten", 3.7, -1, [3, 4]])
def test_hdf5_nclasses_attribute_must_be_a_count(tmp_path, value):
    """'ten' and [3, 4] were ValueError / TypeError tracebacks, 3.7 was taken as 3."""
    path = str(tmp_path / "d.h5")
    with h5py.File(path, "w") as f:
        for s in ("train", "test"):
            f[f"{s}/x"], f[f"{s}/y"] = np.zeros((2, 1, 4, 4)), [0, 1]
        f.attrs["nclasses"] = value
    with pytest.raises(DataError, match=r"d.h5: the attribute nclasses must be a whole number >= 1, got"):
        HDF5Dataset(path=path).nclasses


def test_a_missing_data_file_names_the_key_and_its_yaml_line(tmp_path):
    """'HDF5 dataset file x_{rank}.h5 does not exist' gave neither the YAML line nor why: a data
    file path is one file for the job ({rank} is filled in serialized_path only)."""
    from distnet.config import load_experiment_text
    from tests.tiny import CNN, experiment
    for name, hint in (("gone.h5", False), ("x_{rank}of{size}.h5", True)):
        text = experiment(CNN, tmp_path / name).replace(f"path: {tmp_path / name}", f"path: '{tmp_path / name}'")
        line = next(i for i, ln in enumerate(text.splitlines(), 1) if "HDF5Dataset" in ln)
        exp = load_experiment_text(text)
        with pytest.raises(DataError) as e:
            exp.run()
        msg = str(e.value)
        want = f"<string>:{line}: key 'path': HDF5 dataset file {tmp_path / name} does not exist"
        assert msg.startswith(want), msg
        assert ("filled in serialized_path only" in msg) == hint, msg
    from distnet.datasets import NumpyDataset
    np.save(tmp_path / "x.npy", np.zeros((2, 1, 3, 3)))
    np.save(tmp_path / "y.npy", np.zeros(2, int))
    ds = NumpyDataset(train_x=str(tmp_path / "x.npy"), train_y=str(tmp_path / "y.npy"),
                      test_x=str(tmp_path / "x.npy"), test_y=str(tmp_path / "y_<rank>.npy"))
    with pytest.raises(DataError, match=r"key 'test_y': data file .*y_<rank>.npy does not exist: \{rank\}"):
        ds.load()


@pytest.mark.parametrize("labels,hint", [
    (np.array([0., 1, 2, 0]), r"float64 \(4,\): whole numbers stored as floats; store y.astype\(np.int64\)"),
    (np.eye(3)[[0, 1, 2, 0]], r"float64 \(4, 3\): one-hot rows; store the class indices, y.argmax\(1\)"),
    (np.array([[0], [1], [2], [0]]), r"int64 \(4, 1\): a column of labels; store y.ravel\(\)"),
    (np.array(["cat", "dog", "eel", "cat"]), r"<U3 \(4,\): class names; store each label's index"),
])
def test_labels_that_are_not_class_indices_say_what_they_look_like(tmp_path, labels, hint):
    """Labels as a pandas / Keras pipeline leaves them: the error says how to store them; class
    names were a numpy UFuncTypeError traceback from NumpyDataset."""
    from distnet.datasets import NumpyDataset
    from distnet.convert import convert
    np.save(tmp_path / "x.npy", np.zeros((4, 1, 3, 3), np.float32))
    np.save(tmp_path / "y.npy", labels)
    ds = NumpyDataset(train_x=str(tmp_path / "x.npy"), train_y=str(tmp_path / "y.npy"),
                      test_x=str(tmp_path / "x.npy"), test_y=str(tmp_path / "y.npy"), scale=1)
    with pytest.raises(DataError, match=r"x.npy \(train\): labels must be 4 integers, got " + hint):
        ds.load()
    with pytest.raises(DataError, match=r"y.npy: train labels must be 4 integers, got " + hint):
        convert(tmp_path / "x.npy", tmp_path / "o.h5", labels=tmp_path / "y.npy")
    with h5py.File(tmp_path / "h.h5", "w") as f:
        for s in ("train", "test"):
            f[f"{s}/x"] = np.zeros((4, 1, 3, 3), np.float32)
            f[f"{s}/y"] = labels.astype("S") if labels.dtype.kind == "U" else labels
    with pytest.raises(DataError, match=r"h.h5: train/y must be 4 integers, got " + hint.replace("<U3", "|S3")):
        HDF5Dataset(path=str(tmp_path / "h.h5")).nclasses


def test_hdf5_images_of_three_axes_say_how_to_store_them(tmp_path):
    with h5py.File(tmp_path / "n3.h5", "w") as f:
        for s in ("train", "test"):
            f[f"{s}/x"], f[f"{s}/y"] = np.zeros((4, 5, 5), np.uint8), [0, 1, 0, 1]
    with pytest.raises(DataError, match=r"n3.h5: train/x must be a numeric \(N, C, H, W\) array, got uint8 "
                                        r"\(4, 5, 5\); for \(N, H, W\) images of one channel, store x\[:, None\]"):
        HDF5Dataset(path=str(tmp_path / "n3.h5")).image_shape
