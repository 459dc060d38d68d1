"""Everything that talks to MPI: process topology and sub-communicators, halo exchange and its
adjoint, gradient allreduce, abort handling, and a serial stand-in for one-process runs.

The only package that imports mpi4py, and only inside functions (``Topology.from_world``):
importing distnet never initialises MPI.
"""
from .buckets import BucketReducer
from .abort import RemoteError, install_abort_hook, run_collectively, uninstall_abort_hook
from .global_array import GlobalArray
from .reduce import PendingSum, allreduce_scalars, allreduce_sum, allreduce_sum_start
from .serial import IN_PLACE, SerialComm, in_place, is_serial
from .topology import Topology, choose_grid, valid_grids

__all__ = ["BucketReducer", "GlobalArray", "IN_PLACE", "PendingSum", "RemoteError", "SerialComm", "Topology", "allreduce_scalars",
           "allreduce_sum", "allreduce_sum_start", "choose_grid", "in_place", "install_abort_hook", "is_serial",
           "run_collectively", "uninstall_abort_hook", "valid_grids"]
