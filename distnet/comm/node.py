"""Which ranks share this rank's node, and which cores they may run on.

The thread plan of a run (:mod:`distnet.ops.threads`) gives each rank its share of its node's
cores; this module finds the numbers it needs with one shared-memory split of the world
(``MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)``: the ranks that can share memory, i.e. one
node) and one allgather of the cores each of them may run on (``os.sched_getaffinity``).
"""
import os
from dataclasses import dataclass

from .serial import SerialComm


def own_cores():
    """The CPU ids this process may run on (its affinity mask; all of ``os.cpu_count()``
    where the platform has no affinity call)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class NodeShare:
    """This rank's place on its node.

    ranks : number of ranks on this node (of the communicator that was split).
    local_rank : this rank's index among them (0 .. ranks-1).
    node_cores : number of distinct cores any of them may run on (union of their affinities).
    own_cores : number of cores this rank may run on (its affinity: a launcher that binds ranks
        to cores makes it smaller than ``node_cores``).
    """
    ranks: int
    local_rank: int
    node_cores: int
    own_cores: int


def node_share(world=None):
    """:class:`NodeShare` of this rank in ``world`` (a communicator, a :class:`SerialComm`, or
    None for a process without MPI). Collective over ``world``: one ``Split_type`` and one
    ``allgather`` of the affinity sets (small: a list of ints per rank)."""
    mine = own_cores()
    if world is None or isinstance(world, SerialComm) or world.Get_size() == 1:
        return NodeShare(1, 0, len(mine), len(mine))
    from mpi4py import MPI
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        sets = node.allgather(sorted(mine))
        union = set().union(*map(set, sets))
        return NodeShare(node.Get_size(), node.Get_rank(), len(union), len(mine))
    finally:
        node.Free()


def world_for_plan(use_mpi):
    """``MPI.COMM_WORLD`` (initialising MPI) when ``use_mpi`` or when MPI already runs, else
    None (a process without MPI: one rank)."""
    import sys
    mpi = sys.modules.get("mpi4py.MPI")
    if use_mpi or (mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()):
        from mpi4py import MPI
        return MPI.COMM_WORLD
    return None


def node_members(world, member=True):
    """``(index, count)``: this rank's place among the ranks of its node for which ``member`` is
    true, and how many there are (a rank that is no member: its would-be index). Collective
    over ``world``: one ``Split_type`` and one ``allgather`` of a flag over the node."""
    if world is None or isinstance(world, SerialComm) or world.Get_size() == 1:
        return 0, int(bool(member))
    from mpi4py import MPI
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        flags = node.allgather(bool(member))
        return sum(flags[:node.Get_rank()]), sum(flags)
    finally:
        node.Free()
