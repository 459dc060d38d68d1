"""A run's thread plan: each rank's share of its node's cores for BLAS and distnet's kernels.

Glue between :mod:`distnet.comm.node` (how many ranks share this node, which cores they may
use: collective) and :mod:`distnet.ops.threads` (the pure plan, applied with threadpoolctl).
"""
from ..comm.node import node_share, world_for_plan
from ..ops.parallel import current_plan
from ..ops.threads import apply_plan, blas_threads, thread_plan


def plan_threads(world=None, backend=None, env=None):
    """This rank's :class:`~distnet.ops.threads.ThreadPlan` (not applied). Collective over
    ``world`` (a communicator, a ``SerialComm`` or None for a process without MPI).
    ``backend`` supplies the ``threads`` key; ``env`` defaults to ``os.environ``."""
    node = node_share(world)
    return thread_plan(node.node_cores, node.ranks, own_cores=node.own_cores, env=env,
                       key=None if backend is None else backend.threads)


def setup_threads(world=None, backend=None, env=None):
    """:func:`plan_threads`, applied to this process (BLAS libraries and kernel threads);
    returns the plan. Collective over ``world``."""
    return apply_plan(plan_threads(world, backend, env))


def threads_summary(use_mpi=False):
    """``distnet info``'s ``threads`` row: the plan a run applied in this process, else the one
    it would apply here, and the BLAS threads threadpoolctl sees now. Never raises, and never
    communicates once MPI runs with several ranks (a run directory's record is written by rank
    0 alone: a collective there would wait for ranks that never come); ``use_mpi`` lets a
    process without MPI start it to ask about its node (``distnet info``), and under mpiexec
    makes the plan the ranks' (collective: every rank of the world must ask)."""
    try:
        plan, applied = current_plan(), True
        if plan is None:
            world = world_for_plan(use_mpi)
            if world is not None and world.Get_size() > 1 and not use_mpi:
                world = None            # this process alone: no collective (use_mpi: every rank asks)
            plan, applied = plan_threads(world), False
        now = ", ".join(f"{lib} {n}" for lib, n in blas_threads()) or "no BLAS library found"
        text = plan.describe()[len("threads "):]
        return f"{text}; BLAS threads now: {now}" + ("" if applied else " (a run applies the plan)")
    except Exception as e:  # noqa: BLE001 - a report must not fail
        return f"unknown ({type(e).__name__}: {e})"
