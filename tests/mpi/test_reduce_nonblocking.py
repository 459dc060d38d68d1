"""allreduce_sum_start / PendingSum.wait against the blocking allreduce_sum: the same sums
(bitwise on this MPI: same buffer, same operation), several buckets in flight at once (some of
one size), in place into the same arrays, staged or not; and the injected delay."""
import numpy as np
import pytest

from distnet.comm import allreduce_sum, allreduce_sum_start
from distnet.comm.delay import injected_delay
from distnet.comm.reduce import progress

MPI_SIZES = (1, 2, 3, 4)

staging = pytest.mark.parametrize("host_staging", [False, True], ids=["direct", "staged"])


def _buckets(rank, dtype):
    """Gradient buckets as a model would make them: several arrays each, two of equal size, and
    one bucket of a single contiguous array. Values spread over 6 decades (rounding shows)."""
    rng = np.random.RandomState(7 + rank)
    shapes = [[(20, 1, 5, 5), (20,)], [(50, 20, 5, 5), (50,)], [(6, 7), (3,)], [(6, 7), (3,)], [(1000,)]]
    return [[(rng.standard_normal(s) * 10.0 ** rng.uniform(-3, 3, s)).astype(dtype) for s in b]
            for b in shapes]


@staging
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nonblocking_equals_blocking(comm, dtype, host_staging):
    blocking, nonblocking = _buckets(comm.rank, dtype), _buckets(comm.rank, dtype)
    for b in blocking:
        allreduce_sum(b, comm, host_staging, kind="allreduce_grad")
    ids = [[id(a) for a in b] for b in nonblocking]
    pending = []
    for b in nonblocking:                       # started one after another, as a backward would
        pending.append(allreduce_sum_start(b, comm, host_staging))
        progress()
    for p in reversed(pending):                 # waited in any order
        p.wait()
    for p in pending:
        assert p.wait() is p.arrays             # idempotent
    for b, nb, i in zip(blocking, nonblocking, ids):
        assert [id(a) for a in nb] == i         # in place, same objects
        for x, y in zip(b, nb):
            np.testing.assert_array_equal(x, y)
    everyone = comm.allgather(nonblocking[1][0])
    for other in everyone:
        np.testing.assert_array_equal(other, everyone[0])


def test_buffers_are_reused_across_steps(comm):
    from distnet.comm import reduce
    for step in range(3):
        bs = _buckets(comm.rank, np.float32)
        expect = _buckets(comm.rank, np.float32)
        for b in expect:
            allreduce_sum(b, comm, kind="allreduce_grad")
        for p in [allreduce_sum_start(b, comm) for b in bs]:
            p.wait()
        for b, e in zip(bs, expect):
            for x, y in zip(b, e):
                np.testing.assert_array_equal(x, y)
        if step == 0:
            pools = {k: len(v) for k, v in reduce._FREE.items()}
    assert {k: len(v) for k, v in reduce._FREE.items()} == pools   # no growth after step 1


def test_injected_delay_keeps_the_sums(comm):
    """The benchmark mode changes timing only (no timing is asserted here)."""
    a, b = np.ones(10), np.full(7, 2.0, dtype=np.float32)
    with injected_delay(0.01):
        allreduce_sum([a], comm, kind="allreduce_grad")
        p = allreduce_sum_start([b], comm)
        p.wait()
    np.testing.assert_array_equal(a, comm.size)
    np.testing.assert_array_equal(b, 2.0 * comm.size)
