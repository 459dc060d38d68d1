"""gather_to_root: every rank's metadata and arrays (any shapes and dtypes, None entries) reach
the root in rank order, equal to what each rank built (the oracle: the same arrays rebuilt from
the rank number)."""
import numpy as np

from distnet.comm.collect import gather_to_root

MPI_SIZES = (1, 3)


def _arrays(rank):
    return [np.arange(rank + 2, dtype=np.float64) * (rank + 1), None,
            np.full((2, rank + 1), rank, dtype=np.float32), np.zeros((0, 3))]


def test_gather_to_root(comm, mpi):
    got = []
    gather_to_root(comm, {"rank": comm.rank}, _arrays(comm.rank),
                   lambda r, meta, arrays: got.append((r, meta, arrays)))
    if comm.rank != 0:
        mpi.assert_all(got == [], "a rank other than the root received")
        return
    mpi.assert_all([r for r, _, _ in got] == list(range(comm.size)), f"order {[r for r, _, _ in got]}")
    for r, meta, arrays in got:
        assert meta == {"rank": r}
        for a, want in zip(arrays, _arrays(r)):
            if want is None:
                assert a is None
            else:
                assert a.dtype == want.dtype and a.shape == want.shape
                np.testing.assert_array_equal(a, want)
