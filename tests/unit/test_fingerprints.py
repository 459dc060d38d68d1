"""Data fingerprints: every dataset kind says what its ranks must read alike, and the comparison
over ranks names the ranks whose copy differs (a few, then a count), with one gather to rank 0.

The multi-rank and two-node runs (tests/mpi/test_data_warnings.py, tests/test_cli_two_nodes.py, tests/test_cli_two_nodes_data.py)
compare real copies; here the fingerprints of copies made to differ in one value, and the
verdict over many ranks with a stand-in communicator."""
import os
import pickle

import h5py
import numpy as np
import pytest

from distnet.comm.abort import RemoteError
from distnet.datasets import CIFAR10, MNIST, HDF5Dataset, NumpyDataset
from distnet.data.fingerprints import fingerprint_differences, same_data, sampled_rows
from distnet.data.sequences import write_numbers
from distnet.datasets.sequences import SequenceDataset
from distnet.errors import DataError
from tests.tiny import write_data
from tests.unit.test_datasets import make_mnist


def _changed(before, after):
    return fingerprint_differences(after, before)


def test_mnist_fingerprint_sees_one_label(tmp_path):
    make_mnist(str(tmp_path))
    ds = MNIST(repo_path=str(tmp_path))
    before = ds.fingerprint()
    assert before == MNIST(repo_path=str(tmp_path)).fingerprint()
    path = tmp_path / "MNIST" / "train-labels-idx1-ubyte"
    raw = bytearray(path.read_bytes())
    raw[8 + 17] = (raw[8 + 17] + 1) % 10
    path.write_bytes(bytes(raw))
    assert _changed(before, ds.fingerprint()) == ["other train-labels-idx1-ubyte"]


def test_cifar10_fingerprint_sees_one_pixel(tmp_path):
    folder = tmp_path / "CIFAR10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.RandomState(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": rng.randint(0, 256, (4, 3072)).astype(np.uint8),
                         b"labels": list(rng.randint(0, 10, 4))}, f)
    ds = CIFAR10(repo_path=str(tmp_path))
    before = ds.fingerprint()
    with open(folder / "data_batch_3", "rb") as f:
        batch = pickle.load(f)
    batch[b"data"][2, 100] ^= 1
    with open(folder / "data_batch_3", "wb") as f:
        pickle.dump(batch, f)
    assert _changed(before, ds.fingerprint()) == ["other data_batch_3"]


def test_hdf5_fingerprint_sees_labels_sampled_pixels_and_shapes(tmp_path):
    """Converted image folders are HDF5 files of this layout (``distnet data convert``)."""
    path = tmp_path / "d.h5"
    write_data(path, n_train=100)
    ds = HDF5Dataset(path=str(path), scale=1)
    before = ds.fingerprint()
    sampled = int(sampled_rows(100)[5])
    with h5py.File(path, "a") as f:
        x = f["train/x"][...]
        x[sampled, 0, 3, 2] += 1.0
        f["train/x"][...] = x
        y = f["test/y"][...]
        y[4] = (y[4] + 1) % 3
        f["test/y"][...] = y
    assert _changed(before, HDF5Dataset(path=str(path), scale=1).fingerprint()) == [
        "other test labels", "other train images"]
    write_data(path, n_train=99)
    assert "train images (99, 1, 12, 10) float64, not (100, 1, 12, 10) float64" in _changed(
        before, HDF5Dataset(path=str(path), scale=1).fingerprint())


def test_npy_fingerprint(tmp_path):
    rng = np.random.RandomState(1)
    arrays = {"train_x": rng.rand(40, 1, 6, 5), "train_y": rng.randint(0, 3, 40),
              "test_x": rng.rand(10, 1, 6, 5), "test_y": rng.randint(0, 3, 10)}
    for k, a in arrays.items():
        np.save(tmp_path / f"{k}.npy", a)
    ds = NumpyDataset(**{k: str(tmp_path / f"{k}.npy") for k in arrays})
    before = ds.fingerprint()
    arrays["train_y"][0] = (arrays["train_y"][0] + 1) % 3
    np.save(tmp_path / "train_y.npy", arrays["train_y"])
    ds = NumpyDataset(**{k: str(tmp_path / f"{k}.npy") for k in arrays})
    assert _changed(before, ds.fingerprint()) == ["other train labels"]


def test_sequence_fingerprint(tmp_path):
    path = str(tmp_path / "s.h5")
    write_numbers(path, digits=2, n_train=20, n_test=10, seed=0)
    before = SequenceDataset(path=path).fingerprint()
    assert before == SequenceDataset(generate="numbers", digits=2, n_train=20, n_test=10).fingerprint()
    write_numbers(path, digits=2, n_train=20, n_test=10, seed=1)
    changed = _changed(before, SequenceDataset(path=path).fingerprint())
    assert changed and all(c.startswith(("other train", "other test")) for c in changed)


class _Ranks:
    """Rank 0 of a job whose ranks hold ``prints`` (one fingerprint per rank): gather hands rank 0
    all of them, bcast returns rank 0's verdict."""

    def __init__(self, prints):
        self.prints = prints

    def Get_size(self):
        return len(self.prints)

    def Get_rank(self):
        return 0

    def gather(self, mine, root=0):
        return [mine] + self.prints[1:]

    def bcast(self, value, root=0):
        return value


def test_the_verdict_names_a_few_ranks_and_counts_the_rest():
    good, bad = [("train labels", "8", 1)], [("train labels", "8", 2)]
    prints = [good] * 10 + [bad] * 990
    with pytest.raises(DataError) as e:
        same_data(good, _Ranks(prints), "data.h5")
    assert str(e.value).startswith("data.h5: rank(s) 10, 11, 12, 13, 14, 15, 16, 17 and 982 more read data "
                                   "that differ from rank 0's (rank 10: other train labels)")
    assert e.value.rank == 10
    same_data(good, _Ranks([good] * 1000), "data.h5")        # the same everywhere: nothing


def test_remote_errors_of_many_ranks_stay_one_short_line():
    failures = [(r, "MissingDataError: data.h5 does not exist") for r in range(2, 6)]
    text = str(RemoteError(failures, count=4000))
    assert text == ("failed on 4000 other rank(s): rank 2, 3, 4, 5: MissingDataError: data.h5 does not exist; "
                    "and 3996 more")
    assert str(RemoteError([(3, "ValueError: x")])) == "failed on 1 other rank(s): rank 3: ValueError: x"


def test_stalled_ranks_of_a_large_job():
    from distnet.comm.watchdog import stalled_ranks
    waiting = {"phase": "training", "entered": 1, "step": 5, "where": (0, 3),
               "place": "distnet/comm/reduce.py:40 (allreduce)", "in_comm": True}
    table = {r: (0.1, waiting) for r in range(2000)}
    for r in range(100, 200):
        table[r] = (50.0, waiting)
    ranks, text = stalled_ranks(table, 30, [f"node{r // 8}" for r in range(2000)])
    assert ranks == list(range(100, 200))
    assert text.startswith("rank 100 on node12 (in training; no heartbeat for 50 s") and text.endswith(" and 96 more")
    assert text.count("rank ") == 4


def test_files_of_a_dataset_are_named_by_their_folder(tmp_path):
    make_mnist(str(tmp_path))

    class One:                                      # a communicator of two ranks whose rank 1 differs
        def Get_size(self):
            return 2

        def Get_rank(self):
            return 0

        def gather(self, mine, root=0):
            return [mine, mine[:-1]]

        def bcast(self, value, root=0):
            return value
    with pytest.raises(DataError, match=r"^the 4 files in .*MNIST: rank\(s\) 1 read data that differ from rank "
                                        r"0's \(rank 1: t10k-labels-idx1-ubyte missing\)"):
        MNIST(repo_path=str(tmp_path)).check_same_data(One())
    assert os.path.isdir(tmp_path / "MNIST")
