"""Warnings under mpiexec: a warning about what every rank reads alike (a data file's layout or
chunking, the experiment file's notes) comes once per job, from world rank 0, not once per rank; a
warning about one rank's own tile cache still comes from that rank."""
import logging
import os

import h5py
import numpy as np
import pytest

from distnet.config import load_experiment_text
from distnet.datasets import HDF5Dataset
from distnet.geometry import tile_of
from tests.tiny import CNN, experiment, write_data

MPI_SIZES = (2, 3)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def warnings_seen():
    """The warning texts the ``distnet`` loggers emit on this rank during the test."""
    handler = _Records()
    handler.distnet_keep = True         # a run's setup_logging keeps it
    logger = logging.getLogger("distnet")
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


def _write(path, shape, chunks=None, compression=None):
    rng = np.random.RandomState(0)
    with h5py.File(path, "w") as f:
        for split, n in (("train", 16), ("test", 8)):
            f.create_dataset(f"{split}/x", data=rng.randint(0, 256, (n,) + shape).astype(np.uint8),
                             chunks=chunks, compression=compression)
            f[f"{split}/y"] = rng.randint(0, 3, n)
        f.attrs["nclasses"] = 3


@pytest.fixture(scope="module")
def files(comm, tmp_path_factory):
    root = None
    if comm.rank == 0:
        root = str(tmp_path_factory.mktemp("data"))
        _write(os.path.join(root, "hwc.h5"), (12, 12, 3))                      # channels last
        _write(os.path.join(root, "chunked.h5"), (3, 256, 256), chunks=(8, 3, 256, 256),
               compression="gzip")                                          # 1.5 MiB chunks
    return comm.bcast(root)


def _count(messages, text):
    return sum(text in m for m in messages)


def test_layout_warning_once_per_job(comm, files, warnings_seen):
    ds = HDF5Dataset(path=os.path.join(files, "hwc.h5"), scale=1, dist_flag=True)
    ds.check()
    ds.check()      # `distnet run` checks before and at setup: still one line
    counts = comm.allgather(_count(warnings_seen, "look like (N, H, W, C)"))
    assert counts == [1] + [0] * (comm.size - 1)


def test_chunk_warning_once_per_job(comm, files, warnings_seen):
    ds = HDF5Dataset(path=os.path.join(files, "chunked.h5"), scale=1, dist_flag=True, in_memory=False)
    tile = tile_of((256, 256), (1, comm.size), (0, comm.rank))
    ds.load(tile=tile, rank=comm.rank, size=comm.size)
    counts = comm.allgather((_count(warnings_seen, "train/x is stored compressed in chunks of 8 images"),
                             _count(warnings_seen, "test/x is stored compressed in chunks of 8 images")))
    assert counts == [(1, 1)] + [(0, 0)] * (comm.size - 1)


def test_own_tile_cache_warning_on_every_rank(comm, files, warnings_seen, tmp_path_factory):
    """A warning about this rank's own cache file differs per rank: every rank prints its own."""
    folder = str(tmp_path_factory.mktemp(f"cache{comm.rank}"))
    ds = HDF5Dataset(path=os.path.join(files, "hwc.h5"), scale=1, dist_flag=True, in_memory=False,
                     cache_dir=folder)
    path = ds.cache_path(comm.rank, comm.size, "stream")
    with open(path, "w") as f:
        f.write("not HDF5")
    tile = tile_of((12, 3), (1, comm.size), (0, comm.rank))
    ds.load(tile=tile, rank=comm.rank, size=comm.size)
    assert _count(warnings_seen, f"tile cache {path} is unusable") == 1


def test_config_notes_once_per_job(comm, files, warnings_seen):
    """A note about the experiment file (a ``*_dtype`` key neon took and distnet ignores): every
    rank reads the file, rank 0 warns."""
    path = os.path.join(files, "tiny.h5")
    if comm.rank == 0:
        write_data(path)
    comm.barrier()
    text = experiment(CNN, path, dist=True).replace("num_epochs: 4,", "num_epochs: 1,")
    text = text.replace("nout: 5,", "nout: 5, weight_dtype: float32,", 1)
    assert "weight_dtype" in text
    load_experiment_text(text).run()
    counts = comm.allgather(_count(warnings_seen, "key 'weight_dtype' of"))
    assert counts == [1] + [0] * (comm.size - 1)


def test_not_caching_a_stream_warning_once_per_job(comm, files, warnings_seen):
    """serialized_path not HDF5 with streaming: a config choice every rank makes alike."""
    ds = HDF5Dataset(path=os.path.join(files, "hwc.h5"), scale=1, dist_flag=True, in_memory=False,
                     serialized_path=os.path.join(files, "c_{rank}.pkl"))
    ds.load(tile=tile_of((12, 3), (1, comm.size), (0, comm.rank)), rank=comm.rank, size=comm.size)
    counts = comm.allgather(_count(warnings_seen, "c_{rank}.pkl: streamed data is cached in HDF5 only"))
    assert counts == [1] + [0] * (comm.size - 1)


def test_ranks_reading_different_copies_of_the_data_stop_together(comm, files):
    """No shared file system: every node reads its own copy of the data file. A copy converted
    again (another seed: the same images in another order) on one node gave its ranks other
    images and labels, and the run trained on the mixture without a word."""
    from distnet.errors import DataError
    own = os.path.join(files, f"copy{comm.rank}.h5")
    write_data(own, seed=1 if comm.rank == 1 else 0)        # rank 1's node has another conversion
    comm.barrier()
    text = experiment(CNN, own, dist=True).replace("num_epochs: 4,", "num_epochs: 1,")
    with pytest.raises(DataError) as e:
        load_experiment_text(text).run()
    rank0_file = os.path.join(files, "copy0.h5")              # rank 0 says it, alike on every rank
    assert (f"{rank0_file}: rank(s) 1 read data that differ from rank 0's (rank 1: other test images; other test "
            "labels; other train images; other train labels): every rank must read the same file") in str(e.value)
    write_data(own, seed=0)                                  # the same file everywhere: no error
    comm.barrier()
    HDF5Dataset(path=own, scale=1, dist_flag=True).check_same_data(comm)
    with h5py.File(own, "a") as f:                           # one more image on the last rank
        if comm.rank == comm.size - 1:
            del f["test/x"], f["test/y"]
            f["test/x"], f["test/y"] = np.zeros((11, 1, 12, 10)), np.zeros(11, int)
    comm.barrier()
    with pytest.raises(DataError, match=rf"rank\(s\) {comm.size - 1} read data that differ from rank 0's "
                                        rf"\(rank {comm.size - 1}: test images \(11, 1, 12, 10\) float64, not "
                                        r"\(10, 1, 12, 10\) float64; test labels 11, not 10\)"):
        HDF5Dataset(path=own, scale=1, dist_flag=True).check_same_data(comm)
