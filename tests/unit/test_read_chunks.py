"""The chunking of read: root / node (no MPI): the chunk plan, the reader's side of
scatter_rows against a recording communicator (every message and every read within the bound,
every rank's tile complete), the held tiles answering reads as the file would, the keys."""
import numpy as np
import pytest

from distnet.comm.scatter_rows import bounding_box, chunk_rows, scatter_rows
from distnet.data.header import HeldSource
from distnet.data.reading import parse_chunk_mb, parse_read
from distnet.errors import ConfigError, DataError
from distnet.geometry.partition import Box


@pytest.mark.parametrize("n,row,chunk", [(100, 10, 35), (7, 1000, 10), (0, 5, 5), (64, 8, 512), (5, 3, 3)])
def test_chunk_plan_covers_every_row_within_the_bound(n, row, chunk):
    plan = chunk_rows(n, row, chunk)
    rows = [r for a, b in plan for r in range(a, b)]
    assert rows == list(range(n))
    for a, b in plan:
        assert b > a
        assert (b - a) * row <= chunk or b - a == 1    # one row larger than the bound goes alone


def test_chunk_plan_refuses_a_bound_below_one_byte():
    with pytest.raises(ValueError):
        chunk_rows(3, 1, 0)


class RecordingRoot:
    """Rank 0 of a group of ``len(boxes)`` ranks whose tiles are ``boxes``: records the sends."""

    def __init__(self, boxes):
        self.boxes, self.sent, self.told = boxes, [], []

    def Get_rank(self):
        return 0

    def Get_size(self):
        return len(self.boxes)

    def allgather(self, mine):
        return [mine] + self.boxes[1:]

    def bcast(self, obj, root=0):
        self.told.append(obj)
        return obj

    def Send(self, buf, dest, tag):
        self.sent.append((dest, buf.copy()))


def test_reader_sends_each_rank_its_tile_in_bounded_messages():
    rng = np.random.RandomState(0)
    data = rng.randint(0, 256, (50, 3, 8, 6)).astype(np.uint8)
    boxes = [(0, 4, 0, 3), (0, 4, 3, 6), (4, 8, 0, 6), None]     # rank 3 has a cache: asks nothing
    comm = RecordingRoot(boxes)
    reads, chunk, stats = [], 200, {}

    def read(a, b, big):
        reads.append(data[a:b, :, big[0]:big[1], big[2]:big[3]].nbytes)
        return data[a:b, :, big[0]:big[1], big[2]:big[3]]
    mine = scatter_rows(comm, read, 50, 3, np.uint8, boxes[0], chunk_bytes=chunk, stats=stats)
    np.testing.assert_array_equal(mine, data[:, :, 0:4, 0:3])
    assert max(reads) <= chunk and len(reads) == len(chunk_rows(50, 3 * 8 * 6, chunk))
    assert all(t is None for t in comm.told)            # every read reported a success
    assert {d for d, _ in comm.sent} == {1, 2}
    for r in (1, 2):
        y0, y1, x0, x1 = boxes[r]
        got = np.concatenate([b for d, b in comm.sent if d == r])
        np.testing.assert_array_equal(got, data[:, :, y0:y1, x0:x1])
    assert max(b.nbytes for _, b in comm.sent) <= chunk == 200
    assert stats["bytes"] == sum(b.nbytes for _, b in comm.sent) and stats["max_message"] <= chunk


def test_a_failed_read_is_told_before_it_is_raised():
    comm = RecordingRoot([(0, 2, 0, 2), (0, 2, 0, 2)])

    def read(a, b, big):
        if a > 0:
            raise DataError("disk gone")
        return np.zeros((b - a, 1, 2, 2))
    with pytest.raises(DataError, match="disk gone"):
        scatter_rows(comm, read, 10, 1, np.float64, (0, 2, 0, 2), chunk_bytes=64)
    assert comm.told[0] is None and isinstance(comm.told[-1], DataError)


def test_bounding_box():
    assert bounding_box([(0, 4, 2, 3), (3, 8, 0, 1)]) == (0, 8, 0, 3)


def test_held_tile_answers_as_the_file():
    data = np.arange(10 * 2 * 6 * 5).reshape(10, 2, 6, 5)
    rows, box = np.array([1, 4, 5, 8]), Box(1, 5, 0, 4)
    held = HeldSource(("f.h5", (10, 2, 6, 5), data.dtype.str, np.arange(10)), "train",
                      data[rows][:, :, 1:5, 0:4], rows, box)
    tile = Box(2, 4, 1, 3)
    np.testing.assert_array_equal(held.read([4, 8], tile), data[[4, 8]][:, :, 2:4, 1:3])
    out = held.read([1, 5], tile, positions=[1, 0])
    np.testing.assert_array_equal(out, data[[5, 1]][:, :, 2:4, 1:3])
    with pytest.raises(DataError, match="rows outside"):
        held.read([2], tile)
    with pytest.raises(DataError, match="outside the part"):
        held.read([1], Box(0, 2, 0, 2))


def test_keys():
    assert parse_read(None) == "every" and parse_read(" Root ") == "root" and parse_read("node") == "node"
    with pytest.raises(ConfigError, match="every, root, node"):
        parse_read("rank0")
    assert parse_chunk_mb(1) == 2**20
    with pytest.raises(ConfigError, match="positive"):
        parse_chunk_mb(0)


def test_a_bad_read_value_names_the_yaml_line(tmp_path):
    from distnet.config import load_experiment_text
    from tests.tiny import CNN, experiment, write_data
    text = experiment(CNN, write_data(tmp_path / "d.h5")).replace("HDF5Dataset {", "HDF5Dataset {read: rank0, ")
    with pytest.raises(ConfigError, match=r":3: key 'read': must be one of every, root, node"):
        load_experiment_text(text)


def test_one_process_reads_for_itself(tmp_path):
    """read: root in a run of one process (no MPI): the same arrays as read: every."""
    from distnet.datasets import HDF5Dataset
    from tests.tiny import write_data
    path = write_data(tmp_path / "d.h5")
    every = HDF5Dataset(path=str(path)).load(dtype=np.float64)
    root = HDF5Dataset(path=str(path), read="root").load(dtype=np.float64)
    for split in every:
        np.testing.assert_array_equal(root[split][0], every[split][0])
        np.testing.assert_array_equal(root[split][1], every[split][1])
