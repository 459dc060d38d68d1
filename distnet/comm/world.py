"""The MPI world as the command line sees it: whether this is a multi-rank run and which rank
this is, rank 0's value on every rank, and ending every rank.

None of these starts MPI: they look at an mpi4py that the run already initialised (a one-process
run never imports it). The command line calls these instead of mpi4py (comm is the only package
that imports mpi4py: docs/design.md#layers-of-the-code).
"""
import os
import sys

from ..errors import DistnetError


def _running_world():
    """``MPI.COMM_WORLD`` of a running MPI with more than one rank, else None."""
    mpi = sys.modules.get("mpi4py.MPI")
    # vars(): a warning raised while mpi4py.MPI is still importing (its check of the launcher's
    # environment) finds the module without its functions yet
    is_initialized = vars(mpi).get("Is_initialized") if mpi is not None else None
    if is_initialized is not None and is_initialized() and not mpi.Is_finalized() \
            and mpi.COMM_WORLD.Get_size() > 1:
        return mpi.COMM_WORLD
    return None


def world_rank():
    """This rank's index in a running multi-rank MPI world; None on one process (or before MPI
    is initialised)."""
    world = _running_world()
    return world.Get_rank() if world is not None else None


def bcast_from_root(value):
    """Rank 0's ``value`` on every rank of a running multi-rank world (collective over
    ``COMM_WORLD``, pickled: small values only); ``value`` itself on one process."""
    world = _running_world()
    return value if world is None else world.bcast(value, root=0)


def abort_world_job(message, code):
    """Print ``[rank R] message``, record it (abort listeners) and end every rank of a running
    multi-rank world (:func:`~distnet.comm.abort.abort_job`); nothing on one process."""
    world = _running_world()
    if world is None:
        return
    from .abort import abort_job
    abort_job(world, message, code, hint=False)


class LauncherMismatch(DistnetError):
    """An ``mpiexec`` of another MPI library than mpi4py's started this process: MPI sees one
    rank where the launcher started several (exit status 2, like a usage error)."""

    exit_code = 2


def install_world_abort_hook():
    """:func:`~distnet.comm.abort.install_abort_hook` on ``MPI.COMM_WORLD`` (initialises MPI):
    an uncaught exception on any rank then ends every rank. Returns ``MPI.COMM_WORLD``. A
    launch that MPI did not join into one world is :class:`LauncherMismatch`: every process
    alone (:func:`~distnet.comm.launcher.launcher_mismatch`), or a world of only some of an srun
    step's tasks (:func:`~distnet.comm.launcher.split_launch_refusal`)."""
    from .launcher import launcher_mismatch, pmix_refusal, prepare_mpi_env
    refusal = pmix_refusal()    # MPI_Init itself would abort with a wall of MPICH's internals
    if refusal:
        raise LauncherMismatch(refusal)
    prepare_mpi_env()   # before MPI_Init: MPICH waits by yielding when ranks outnumber cores
    import warnings
    with warnings.catch_warnings():   # mpi4py's own warning about it: LauncherMismatch says more
        warnings.filterwarnings("ignore", message="suspicious MPI execution environment")
        from mpi4py import MPI

    from .abort import install_abort_hook
    world = MPI.COMM_WORLD
    mismatch = launcher_mismatch(world.Get_size(), " ".join(MPI.Get_library_version().splitlines()[0].split()))
    if mismatch:
        raise LauncherMismatch(mismatch)
    install_abort_hook(world)
    if world.Get_size() > 1:    # every rank says which srun task started it: one small allgather
        from .launcher import _int, split_launch_refusal
        split = split_launch_refusal(world.Get_size(), world.allgather(_int(os.environ, "SLURM_PROCID")[0]))
        if split:
            raise LauncherMismatch(split)
    return world


def gather_to_rank0(value):
    """Every rank's ``value`` (small, pickled) in rank order on rank 0 of a running multi-rank
    world, None on the others; ``[value]`` on one process. Collective over ``COMM_WORLD``."""
    world = _running_world()
    return [value] if world is None else world.gather(value, root=0)
