"""The thread plan under mpiexec: the node split counts this node's ranks, and each rank's BLAS
(as threadpoolctl reports it) runs the planned number of threads."""
import pytest

from distnet.comm.node import node_share, own_cores
from distnet.experiments.threads import plan_threads, setup_threads
from distnet.ops import parallel
from distnet.ops.threads import blas_threads

MPI_SIZES = (1, 2, 4)


def test_node_share_counts_the_ranks_of_this_node(comm):
    node = node_share(comm)
    assert node.ranks == comm.size            # the test job runs on one machine
    assert sorted(comm.allgather(node.local_rank)) == list(range(comm.size))
    assert node.own_cores == len(own_cores()) and node.node_cores >= node.own_cores


@pytest.mark.parametrize("env,expect", [
    ({}, None),                                   # no variables: cores / ranks
    ({"OPENBLAS_NUM_THREADS": "1"}, 1),           # the user's variable wins
    ({"OMP_NUM_THREADS": "2"}, 2),
], ids=["share", "openblas-var", "omp-var"])
def test_each_rank_runs_the_planned_blas_threads(comm, mpi, env, expect, restore_threads):
    mpi.skip_unless(bool(parallel._state["blas"]), "no BLAS library found by threadpoolctl")
    node = node_share(comm)
    plan = setup_threads(comm, env=env)
    if expect is None:
        expect = max(1, min(node.own_cores, node.node_cores // node.ranks))
    reported = [n for _, n in blas_threads()]
    mpi.assert_all(plan.blas == expect and reported and all(n == expect for n in reported),
                   f"plan {plan}, expected {expect}, threadpoolctl reports {blas_threads()}")
    assert parallel.kernel_threads() == expect


def test_backend_key_wins(comm, mpi, restore_threads):
    from distnet.backend import Numpy
    plan = plan_threads(comm, Numpy(threads=1), env={"OPENBLAS_NUM_THREADS": "2"})
    assert plan.blas == 1 and plan.source == "backend key threads: 1"
