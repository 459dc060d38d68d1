"""The thread plan (distnet.ops.threads): a pure function of the node's cores, the ranks on the
node, the user's variables and the backend key; and its application through threadpoolctl."""
import numpy as np
import pytest

from distnet.backend import Numpy, Numpy64
from distnet.errors import ConfigError
from distnet.ops import parallel
from distnet.ops.threads import ThreadPlan, apply_plan, blas_threads, thread_plan


@pytest.mark.parametrize("cores,ranks,expect", [
    (2, 1, 2), (2, 2, 1), (2, 4, 1), (2, 6, 1), (16, 4, 4), (16, 3, 5), (64, 8, 8), (1, 1, 1),
])
def test_share_of_the_node(cores, ranks, expect):
    plan = thread_plan(cores, ranks, env={})
    assert (plan.blas, plan.kernel) == (expect, expect)
    assert f"{cores} core" in plan.source and f"/ {ranks} rank" in plan.source


def test_own_affinity_caps_the_share():
    # 16 cores, 2 ranks, but this rank is bound to 4 of them by the launcher
    assert thread_plan(16, 2, own_cores=4, env={}).blas == 4
    assert thread_plan(16, 8, own_cores=4, env={}).blas == 2


def test_user_variables_win_in_order():
    env = {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "5"}
    plan = thread_plan(16, 1, env=env)
    assert plan.blas == 5 and plan.source == "MKL_NUM_THREADS=5"
    plan = thread_plan(16, 1, env=dict(env, OPENBLAS_NUM_THREADS="1"))
    assert plan.blas == 1 and plan.source == "OPENBLAS_NUM_THREADS=1"
    assert thread_plan(16, 4, env={"OMP_NUM_THREADS": "6,2"}).blas == 6   # nested OpenMP
    # empty or invalid values are not a choice
    assert thread_plan(8, 2, env={"OPENBLAS_NUM_THREADS": "", "OMP_NUM_THREADS": "x"}).blas == 4
    # nor is a count no C int holds (threadpoolctl's ctypes call raised OverflowError)
    assert thread_plan(8, 2, env={"MKL_NUM_THREADS": "99999999999999999999"}).blas == 4
    assert thread_plan(8, 2, env={"DISTNET_KERNEL_THREADS": "99999999999999999999"}).kernel == 4


def test_backend_key_wins_over_variables():
    plan = thread_plan(2, 4, env={"OPENBLAS_NUM_THREADS": "1"}, key=3)
    assert plan.blas == 3 and plan.source == "backend key threads: 3"


def test_kernel_variable_sets_kernel_threads_alone():
    plan = thread_plan(8, 2, env={"DISTNET_KERNEL_THREADS": "1"})
    assert (plan.blas, plan.kernel) == (4, 1)
    assert "kernel threads 1" in plan.describe()


def test_describe():
    assert thread_plan(2, 2, env={}).describe() == "threads 1/rank (2 cores / 2 ranks on this node)"
    assert thread_plan(1, 1, env={}).describe() == "threads 1/rank (1 core / 1 rank on this node)"


def test_backend_threads_key():
    assert Numpy().threads is None and Numpy(threads=2).threads == 2 and Numpy64(threads=1).threads == 1
    with pytest.raises(ConfigError, match="threads must be a positive integer"):
        Numpy(threads=0)


@pytest.mark.parametrize("n", [1, 2])
def test_apply_plan_sets_blas_and_kernel_threads(n, restore_threads):
    if not parallel._state["blas"]:
        pytest.skip("no BLAS library found by threadpoolctl")
    apply_plan(ThreadPlan(n, n, "test"))
    assert {t for _, t in blas_threads()} == {n}
    assert parallel.kernel_threads() == n and parallel.current_plan().source == "test"
    a = np.random.default_rng(0).standard_normal((300, 300))
    np.testing.assert_allclose(parallel.matmul(a, a), a @ a, rtol=1e-12, atol=1e-10)


def test_compare_runs_both_sides_with_the_same_threads():
    from distnet.cli.compare import compare_threads
    from distnet.comm.launcher import launch_env
    from distnet.comm.node import own_cores
    plan = compare_threads(4, env={})
    assert plan.blas == max(1, len(own_cores()) // 4)
    for n in (1, 4):   # the one-process side and the 4-rank side get the same variables
        env = launch_env(n, base={}, threads=plan.blas)
        assert {env[k] for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")} == \
            {str(plan.blas)}
    # the user's own value is kept, on both sides alike
    assert compare_threads(4, env={"OPENBLAS_NUM_THREADS": "2"}).blas == 2
    assert launch_env(1, base={"OPENBLAS_NUM_THREADS": "2"}, threads=2)["OPENBLAS_NUM_THREADS"] == "2"


def test_mpich_yields_only_when_ranks_outnumber_cores():
    from distnet.comm.launcher import MPICH_YIELD_ENV, oversubscribed_env
    assert oversubscribed_env({"MPI_LOCALNRANKS": "4"}, cores=2) == MPICH_YIELD_ENV
    assert oversubscribed_env({"MPI_LOCALNRANKS": "2"}, cores=2) == {}
    assert oversubscribed_env({"OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, cores=4) == MPICH_YIELD_ENV
    assert oversubscribed_env({}, cores=1) == {}                      # not launched
    user = {"MPI_LOCALNRANKS": "4", "MPIR_CVAR_ENABLE_HEAVY_YIELD": "0"}
    assert "MPIR_CVAR_ENABLE_HEAVY_YIELD" not in oversubscribed_env(user, cores=2)
