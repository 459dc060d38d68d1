"""allreduce_sum / allreduce_scalars over COMM_WORLD and over sub-communicators."""
import numpy as np
import pytest

from distnet.comm import SerialComm, Topology, allreduce_scalars, allreduce_sum
from distnet.errors import TopologyError

MPI_SIZES = (1, 2, 3, 4)


def _parts(rank, dtype):
    """This rank's contributions: arrays of several shapes, a pure function of the rank."""
    rng = np.random.RandomState(100 + rank)
    return [rng.standard_normal(s).astype(dtype) for s in [(3, 4), (5,), (2, 3, 2), (1,)]]


staging = pytest.mark.parametrize("host_staging", [False, True], ids=["direct", "staged"])


@staging
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_allreduce_sum_matches_global_sum(comm, dtype, host_staging):
    arrays = _parts(comm.rank, dtype)
    ids = [id(a) for a in arrays]
    out = allreduce_sum(arrays, comm, host_staging)
    expect = [sum(parts) for parts in zip(*(_parts(r, dtype) for r in range(comm.size)))]
    assert [id(a) for a in out] == ids  # reduced in place, same objects
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for a, e in zip(arrays, expect):
        assert a.dtype == dtype and a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


@staging
def test_allreduce_sum_identical_on_every_rank(comm, host_staging):
    a = _parts(comm.rank, np.float64)[0]
    allreduce_sum([a], comm, host_staging)
    everyone = comm.allgather(a)
    for other in everyone:
        np.testing.assert_array_equal(other, everyone[0])


@staging
def test_allreduce_sum_non_contiguous_and_empty(comm, host_staging):
    base = np.arange(24, dtype=np.float64).reshape(4, 6) * (comm.rank + 1)
    view = base[:, ::2]  # non-contiguous view: written back through the view
    allreduce_sum([view], comm, host_staging)
    tri = comm.size * (comm.size + 1) // 2
    np.testing.assert_array_equal(view, np.arange(24.0).reshape(4, 6)[:, ::2] * tri)
    np.testing.assert_array_equal(base[:, 1::2], np.arange(24.0).reshape(4, 6)[:, 1::2] * (comm.rank + 1))
    assert allreduce_sum([], comm) == []


def test_allreduce_sum_rejects_mixed_dtypes(comm):
    with pytest.raises(ValueError, match="one dtype"):
        allreduce_sum([np.zeros(2), np.zeros(2, np.float32)], comm if comm.size > 1 else _Two())


class _Two(SerialComm):
    """A 'size 2' communicator so the dtype check is reached in the 1-rank run."""

    def Get_size(self):
        return 2


def test_allreduce_scalars(comm):
    out = allreduce_scalars([comm.rank, 1, 0.5], comm)
    assert out == [comm.size * (comm.size - 1) / 2, float(comm.size), 0.5 * comm.size]
    assert allreduce_scalars([], comm) == []


def test_grad_comm_of_topology(comm):
    """Over Topology.grad (spatial x data) the sum covers exactly the ranks of one pipeline stage."""
    pipe = 2 if comm.size % 2 == 0 else 1
    topo = Topology.from_world(pipe=pipe, world=comm)
    try:
        a = np.array([float(comm.rank)])
        allreduce_sum([a], topo.grad)
        stage = [r for r in range(comm.size) if (r // topo.nspatial) % pipe == topo.pipe_index]
        assert a[0] == sum(stage)
    finally:
        topo.free()


@pytest.mark.parametrize("data,pipe", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_topology_subcommunicators(comm, data, pipe):
    """Each sub-communicator holds exactly the world ranks the layout formula says, in order."""
    if comm.size % (data * pipe):
        with pytest.raises(TopologyError, match="does not divide"):
            Topology.from_world(data=data, pipe=pipe, world=comm)
        return
    topo = Topology.from_world(data=data, pipe=pipe, world=comm)
    try:
        S = topo.nspatial
        d, p = topo.data_index, topo.pipe_index
        s = topo.coords[0] * topo.grid[1] + topo.coords[1]
        assert comm.rank == (d * pipe + p) * S + s
        assert topo.spatial.Get_topo()[0] == list(topo.grid) and topo.spatial.Get_rank() == s

        def members(c):
            return c.allgather(comm.rank)

        assert members(topo.spatial) == [(d * pipe + p) * S + i for i in range(S)]
        assert members(topo.data) == [(k * pipe + p) * S + s for k in range(data)]
        assert members(topo.pipe) == [(d * pipe + k) * S + s for k in range(pipe)]
        assert members(topo.grad) == [(k * pipe + p) * S + i for k in range(data) for i in range(S)]
    finally:
        topo.free()


def test_local_rank_counts_ranks_on_this_node(comm):
    """All ranks of these tests run on one machine: local ranks are 0..size-1 (GPU choice)."""
    from distnet.comm import Topology
    topo = Topology.from_world(world=comm)
    try:
        assert sorted(comm.allgather(topo.local_rank())) == list(range(comm.Get_size()))
    finally:
        topo.free()
    assert Topology.serial().local_rank() == 0
