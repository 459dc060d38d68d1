"""A run's thread plan: each rank's share of its node's cores for BLAS and distnet's kernels.

Glue between :mod:`distnet.comm.node` (how many ranks share this node, which cores they may
use: collective) and :mod:`distnet.ops.threads` (the pure plan, applied with threadpoolctl).
"""
from ..comm.node import node_share
from ..ops.threads import apply_plan, thread_plan


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
