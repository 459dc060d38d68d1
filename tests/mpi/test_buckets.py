"""BucketReducer: gradients added layer by layer, sums started bucket by bucket, equal to one
blocking Allreduce of everything (bitwise on 1-2 ranks, to rounding on more)."""
import numpy as np
import pytest

from distnet.comm import SerialComm, allreduce_sum
from distnet.comm.buckets import BucketReducer

MPI_SIZES = (1, 2, 3, 4)


def _layers(rank, dtype):
    rng = np.random.RandomState(11 + rank)
    shapes = [[(20, 1, 5, 5), (20,)], [(50, 20, 5, 5), (50,)], [(500, 800)], [(10, 500), (10,)]]
    return [[(rng.standard_normal(s) * 10.0 ** rng.uniform(-3, 3, s)).astype(dtype) for s in layer]
            for layer in shapes]


@pytest.mark.parametrize("bucket_bytes", [0, 40_000, 1 << 30], ids=["per-layer", "40KB", "one"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("host_staging", [False, True], ids=["direct", "staged"])
def test_buckets_equal_one_allreduce(comm, bucket_bytes, dtype, host_staging):
    ref = _layers(comm.rank, dtype)
    allreduce_sum([a for layer in ref for a in layer], comm, host_staging, kind="allreduce_grad")
    got = _layers(comm.rank, dtype)
    loss = np.array([float(comm.rank + 1)])
    r = BucketReducer(host_staging, bucket_bytes)
    for layer in reversed(got):                       # the backward, top layer first
        r.add(layer, comm)
    r.add([loss], comm)                              # another dtype in float32 runs
    r.add([np.ones(3)], SerialComm("one rank"))      # skipped
    r.finish()
    assert r.in_flight == 0
    assert loss[0] == comm.size * (comm.size + 1) / 2
    for lr, lg in zip(ref, got):
        for a, b in zip(lr, lg):
            if comm.size <= 2:
                np.testing.assert_array_equal(a, b)
            else:
                tol = 1e-5 if dtype == np.float32 else 1e-13
                np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(a).max())
