"""read: root / node: the ranks that do not read get, from the reader, exactly the arrays they
would have loaded from the file themselves (read: every, the oracle), for every dataset kind;
they never open a file (their paths do not exist); chunks stay within read_chunk_mb."""
import pickle

import h5py
import numpy as np
import pytest

from distnet.comm.root_read import job_reader
from distnet.data.idx import write_idx
from distnet.data.stream import StreamArray
from distnet.datasets import CIFAR10, MNIST, HDF5Dataset, NumpyDataset
from distnet.geometry.partition import tile_of

MPI_SIZES = (2, 4)
CHUNK_MB = 0.002      # ~2 KiB: many chunks even for these small files


def _grid(size):
    return (2, size // 2) if size % 2 == 0 else (1, size)


def _folder(comm, tmp_path_factory):
    """A folder with files on rank 0; the other ranks get a path that does not exist."""
    real = str(tmp_path_factory.mktemp("data")) if comm.rank == 0 else None
    real = comm.bcast(real)
    return real, (real if comm.rank == 0 else f"/nonexistent/rank{comm.rank}")


def _write_hdf5(folder):
    rng = np.random.RandomState(1)
    with h5py.File(f"{folder}/d.h5", "w") as f:
        for split, n in (("train", 37), ("test", 11)):
            f[f"{split}/x"] = rng.randint(0, 256, (n, 2, 9, 7)).astype(np.uint8)
            f[f"{split}/y"] = rng.randint(0, 4, n)
        f.attrs["class_names"] = ["a", "b", "c", "d"]


def _write_npy(folder):
    rng = np.random.RandomState(2)
    for split, n in (("train", 29), ("test", 8)):
        np.save(f"{folder}/{split}_x.npy", rng.standard_normal((n, 1, 8, 6)))
        np.save(f"{folder}/{split}_y.npy", rng.randint(0, 3, n))


def _write_mnist(folder, gz):
    import os
    os.makedirs(f"{folder}/MNIST", exist_ok=True)
    rng = np.random.RandomState(3)
    ext = ".gz" if gz else ""
    for prefix, n in (("train", 23), ("t10k", 9)):
        write_idx(f"{folder}/MNIST/{prefix}-images-idx3-ubyte{ext}", rng.randint(0, 256, (n, 28, 28)).astype(np.uint8))
        write_idx(f"{folder}/MNIST/{prefix}-labels-idx1-ubyte{ext}", rng.randint(0, 10, n).astype(np.uint8))


def _write_cifar(folder):
    import os
    base = f"{folder}/CIFAR10/cifar-10-batches-py"
    os.makedirs(base, exist_ok=True)
    rng = np.random.RandomState(4)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, name in enumerate(names):
        n = 3 + i
        batch = {b"data": rng.randint(0, 256, (n, 3072)).astype(np.uint8), b"labels": list(rng.randint(0, 10, n))}
        with open(f"{base}/{name}", "wb") as f:
            pickle.dump(batch, f, protocol=2)


def _write_converted(folder):
    """An image folder converted by distnet data convert (train, valid, test; class names)."""
    import os

    from PIL import Image

    from distnet.convert.images import convert_image_folder
    rng = np.random.RandomState(5)
    for c in ("cat", "dog", "eel"):
        os.makedirs(f"{folder}/imgs/{c}")
        for i in range(7):
            Image.fromarray(rng.randint(0, 256, (9, 11, 3)).astype(np.uint8), "RGB").save(f"{folder}/imgs/{c}/{i}.png")
    convert_image_folder(f"{folder}/imgs", f"{folder}/c.h5", test_fraction=0.2, valid_fraction=0.2, seed=1)


KINDS = {
    "converted": (_write_converted, lambda p, **k: HDF5Dataset(path=f"{p}/c.h5", scale=1 / 255, **k)),
    "hdf5": (_write_hdf5, lambda p, **k: HDF5Dataset(path=f"{p}/d.h5", scale=1 / 255, **k)),
    "hdf5-sampled": (_write_hdf5, lambda p, **k: HDF5Dataset(path=f"{p}/d.h5", scale=1 / 255, sample_pct=60,
                                                              valid_fraction=0.25, **k)),
    "hdf5-streamed": (_write_hdf5, lambda p, **k: HDF5Dataset(path=f"{p}/d.h5", scale=1 / 255,
                                                               in_memory=False, **k)),
    "npy": (_write_npy, lambda p, **k: NumpyDataset(train_x=f"{p}/train_x.npy", train_y=f"{p}/train_y.npy",
                                                     test_x=f"{p}/test_x.npy", test_y=f"{p}/test_y.npy", **k)),
    "mnist": (lambda f: _write_mnist(f, False), lambda p, **k: MNIST(repo_path=p, sample_pct=50, **k)),
    "mnist-gz": (lambda f: _write_mnist(f, True), lambda p, **k: MNIST(repo_path=p, **k)),
    "cifar10": (_write_cifar, lambda p, **k: CIFAR10(repo_path=p, **k)),
}


def _dense(x):
    return x.materialize() if isinstance(x, StreamArray) else np.asarray(x)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("mode", ["root", "node"])
def test_reader_sends_what_the_file_holds(comm, tmp_path_factory, kind, mode):
    write, make = KINDS[kind]
    real, mine = _folder(comm, tmp_path_factory)
    if comm.rank == 0:
        write(real)
    comm.Barrier()
    grid = _grid(comm.size)
    coords = (comm.rank // grid[1], comm.rank % grid[1])
    oracle = make(real, dist_flag=True)             # every rank reads the file itself
    tile = tile_of(oracle.plane, grid, coords)
    want = oracle.load(tile=tile, seed=3, dtype=np.float64, rank=comm.rank, size=comm.size, grid=grid)
    # read: node here: one node, so rank 0 reads for all; the others' paths do not exist
    ds = make(mine, dist_flag=True, read=mode, read_chunk_mb=CHUNK_MB)
    assert ds.image_shape == oracle.image_shape and ds.nclasses == oracle.nclasses
    assert ds.class_names() == oracle.class_names()
    got = ds.load(tile=tile, seed=3, dtype=np.float64, rank=comm.rank, size=comm.size, grid=grid)
    assert list(got) == list(want)
    for split in want:
        np.testing.assert_array_equal(_dense(got[split][0]), _dense(want[split][0]))
        np.testing.assert_array_equal(got[split][1], want[split][1])
        assert got[split][1].dtype == want[split][1].dtype
    reader = job_reader(mode)
    if comm.rank == 0:       # the bound holds: no message above the chunk (one row is ~126..3072 B)
        chunk = int(CHUNK_MB * 2**20)
        assert reader.stats["messages"] > 0
        assert reader.stats["max_message"] <= chunk


def test_reader_failure_stops_every_rank(comm, tmp_path_factory):
    """A data file missing on the reader: every rank raises its error, none waits."""
    from distnet.errors import DataError
    real, mine = _folder(comm, tmp_path_factory)
    ds = HDF5Dataset(path=f"{mine}/missing.h5", read="root", dist_flag=True)
    with pytest.raises(DataError, match="missing.h5"):
        ds.image_shape


@pytest.mark.parametrize("in_memory", [True, False])
def test_caches_then_no_data(comm, tmp_path_factory, in_memory):
    """cache_dir: the first load fills every rank's cache (float arrays in memory mode; in
    streaming mode its tile cache, written from the stream a chunk at a time); a second load,
    the data file gone from the reader, gives the same arrays from the caches alone."""
    import os
    real, mine = _folder(comm, tmp_path_factory)
    if comm.rank == 0:
        _write_hdf5(real)
    comm.Barrier()
    grid = _grid(comm.size)
    coords = (comm.rank // grid[1], comm.rank % grid[1])

    def make(path):
        return HDF5Dataset(path=f"{path}/d.h5", scale=1 / 255, dist_flag=True, in_memory=in_memory,
                           read="root", read_chunk_mb=CHUNK_MB, cache_dir=f"{real}/cache")
    oracle = HDF5Dataset(path=f"{real}/d.h5", scale=1 / 255, dist_flag=True)
    tile = tile_of(oracle.plane, grid, coords)
    want = oracle.load(tile=tile, seed=3, dtype=np.float64, rank=comm.rank, size=comm.size, grid=grid)
    kwargs = dict(tile=tile, seed=3, dtype=np.float64, rank=comm.rank, size=comm.size, grid=grid)
    first = make(mine).load(**kwargs)
    kind = "" if in_memory else ".tile"
    assert os.path.isfile(f"{real}/cache/d{kind}.rank{comm.rank}of{comm.size}.h5")
    comm.Barrier()
    if comm.rank == 0:
        os.rename(f"{real}/d.h5", f"{real}/gone.h5")
    comm.Barrier()
    again = make(mine).load(**kwargs)
    for got in (first, again):
        for split in want:
            np.testing.assert_array_equal(_dense(got[split][0]), _dense(want[split][0]))
            np.testing.assert_array_equal(got[split][1], want[split][1])


def test_a_read_failing_half_way_stops_every_rank(comm, tmp_path_factory, monkeypatch):
    """The reader's file fails after the first chunk (a bad disk, a truncated copy): every rank
    raises the reader's error at that chunk; none waits for pixels."""
    from distnet.data.sources import H5Source
    from distnet.errors import DataError
    real, mine = _folder(comm, tmp_path_factory)
    if comm.rank == 0:
        _write_hdf5(real)
        calls, plain = [], H5Source.read

        def failing(self, rows, tile, positions=None, out=None):
            calls.append(1)
            if len(calls) > 1:
                raise DataError(f"cannot read {self.name}/x of {self.path}: disk gone")
            return plain(self, rows, tile, positions, out)
        monkeypatch.setattr(H5Source, "read", failing)
    comm.Barrier()
    ds = HDF5Dataset(path=f"{mine}/d.h5", scale=1 / 255, dist_flag=True, read="root", read_chunk_mb=CHUNK_MB)
    grid = _grid(comm.size)
    tile = ds.rank_tile(grid, (comm.rank // grid[1], comm.rank % grid[1]))
    with pytest.raises(DataError, match="disk gone"):
        ds.load(tile=tile, rank=comm.rank, size=comm.size, grid=grid)
