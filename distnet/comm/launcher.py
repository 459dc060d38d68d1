"""Starting MPI jobs from Python (``distnet compare``, the multi-rank test launcher): where
``mpiexec`` is, and the environment that keeps oversubscribed runs fast."""
import os
import shutil
import sys

# MPICH (ch4) waits by polling: with more ranks than cores the waiting ranks starve the working
# ones. These make a waiting rank yield between polls (9 ranks relaying on 2 cores: 3.5 s -> 1.15 s
# for 0.81 s of work); other MPI implementations ignore them.
MPICH_YIELD_ENV = {
    "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1",
    "MPIR_CVAR_POLLS_BEFORE_YIELD": "1",
}
# One BLAS thread per rank unless the user says otherwise: ranks already fill the cores.
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


#: Variables in which launchers announce how many ranks they started in all (MPICH/Hydra and
#: Slurm's PMI, Open MPI, PMIx, MPICH's node-local count last).
WORLD_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE")
#: Variables in which launchers announce this process's rank.
WORLD_RANK_VARS = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")


def launcher_world_size(env=None):
    """``(size, variable)``: the number of ranks a launcher announces in ``env`` (default
    ``os.environ``) and the variable that says so; ``(1, None)`` without a launcher. Pure."""
    env = os.environ if env is None else env
    for var in WORLD_SIZE_VARS:
        if str(env.get(var, "")).isdigit():
            return int(env[var]), var
    return 1, None


def launcher_mismatch(mpi_size, mpi_library, env=None):
    """The error message when a launcher announced several ranks (``env``) but MPI sees
    ``mpi_size`` == 1: the ``mpiexec`` belongs to another MPI library than mpi4py's
    (``mpi_library``: its version line), so every process started alone and would train the
    whole job by itself. ``None`` when they agree. Pure."""
    env = os.environ if env is None else env
    size, var = launcher_world_size(env)
    if size <= 1 or mpi_size != 1:
        return None
    rank = next((env[v] for v in WORLD_RANK_VARS if str(env.get(v, "")).isdigit()), None)
    who = f"process {rank} of {size}" if rank is not None else f"one of {size} processes"
    return (f"launched as {who} ({var}={size}), but MPI sees this process alone: the mpiexec that "
            f"started it belongs to another MPI library than the one mpi4py uses ({mpi_library}). "
            f"Launch with distnet's own: {mpiexec_path() or 'the mpiexec of its virtualenv'} "
            f"(activate the virtualenv first, or call that path)")


#: Variables in which launchers announce how many ranks they started on this node.
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE",
                   "SLURM_NTASKS_PER_NODE")


def oversubscribed_env(env=None, cores=None):
    """The MPICH yield settings (:data:`MPICH_YIELD_ENV`) to add to ``env`` (default
    ``os.environ``) before MPI starts, when the launcher put more ranks on this node than the
    node has cores (``cores``: default the cores this process may use), and the user set none
    of them; else ``{}``. Pure."""
    env = os.environ if env is None else env
    local = next((int(env[k]) for k in LOCAL_SIZE_VARS if str(env.get(k, "")).isdigit()), 0)
    if cores is None:
        from .node import own_cores
        cores = len(own_cores())
    if local <= cores:
        return {}
    return {k: v for k, v in MPICH_YIELD_ENV.items() if k not in env}


def prepare_mpi_env():
    """Apply :func:`oversubscribed_env` to this process's environment; call it before mpi4py
    initialises MPI (MPICH reads the variables in ``MPI_Init``). A plain ``mpiexec -n 4`` on 2
    cores then waits by yielding, as ``distnet compare`` and the tests launch it."""
    os.environ.update(oversubscribed_env())


def mpiexec_path():
    """The launcher beside this Python (the pip ``mpich`` package installs it there), else PATH."""
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return local if os.path.exists(local) else shutil.which("mpiexec")


def launch_env(nranks, base=None, threads=None):
    """``base`` (default ``os.environ``) plus the settings above; the user's own values win.

    threads : BLAS threads per process (``OPENBLAS/OMP/MKL_NUM_THREADS``); default 1 when
        ``nranks > 1``, unset (the run's own thread plan) for one process."""
    env = dict(os.environ if base is None else base)
    extra = dict(MPICH_YIELD_ENV)
    if threads is not None:
        extra.update({k: str(int(threads)) for k in THREAD_ENV})
    elif nranks > 1:
        extra.update(THREAD_ENV)
    for k, v in extra.items():
        env.setdefault(k, v)
    return env
