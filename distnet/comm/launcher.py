"""Launchers: which one started this process (:func:`detect_launch`, read from its environment
before MPI starts: MPICH's, Intel MPI's and Open MPI's ``mpiexec``, ``srun`` with each MPI
plugin), the refusal of a launch that MPI does not join into one world; and starting MPI jobs
from Python (``distnet compare``, the multi-rank test launcher): where ``mpiexec`` is, and the
environment that keeps oversubscribed runs fast. Pure functions of the environment."""
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from typing import Optional

# MPICH (ch4) waits by polling: with more ranks than cores the waiting ranks starve the working
# ones. These make a waiting rank yield between polls (9 ranks relaying on 2 cores: 3.5 s -> 1.15 s
# for 0.81 s of work); other MPI implementations ignore them.
MPICH_YIELD_ENV = {
    "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1",
    "MPIR_CVAR_POLLS_BEFORE_YIELD": "1",
}
# One BLAS thread per rank unless the user says otherwise: ranks already fill the cores.
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


#: Slurm's step ids that are not a job step of ``srun`` (the batch script, the interactive step,
#: the extern step: ``0xfffffffb``, ``0xfffffffa``, ``0xfffffffc`` and their kin).
_NOT_A_STEP = 4294967290


@dataclass(frozen=True)
class Launch:
    """How a launcher started this process, read from its environment before MPI starts.

    name : the launcher in words (``"srun --mpi=pmix"``, ``"Open MPI's mpiexec"``).
    size : the processes it started in all; rank : this one's index (None: not announced).
    variable : the variable that says ``size``; fix : what to do when MPI sees this process alone.
    """
    name: str
    size: int
    rank: Optional[int]
    variable: str
    fix: str


def _int(env, *names):
    for name in names:
        value = str(env.get(name, "")).strip()
        if value.isdigit():
            return int(value), name
    return None, None


def _slurm_step(env):
    """``(tasks, variable)`` of the ``srun`` job step this process is a task of; ``(None, None)``
    outside a step (no Slurm, or ``salloc`` / the batch script: an allocation, not a step)."""
    step, _ = _int(env, "SLURM_STEP_ID", "SLURM_STEPID")
    if step is None or step >= _NOT_A_STEP:
        return None, None
    return _int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")


_OWN_MPIEXEC = ("the mpiexec that started it belongs to another MPI library than the one mpi4py uses "
                "({library}): launch with distnet's own ({mpiexec}), or install an mpi4py built "
                "against this MPI (docs/cluster.md, 'The site's MPI')")


def detect_launch(env=None):
    """The :class:`Launch` that started this process, from ``env`` (default ``os.environ``), or
    None: a plain process (also one started inside a Slurm allocation without ``srun``). Pure.

    Recognised: Open MPI's ``mpiexec`` (``OMPI_COMM_WORLD_*``), MPICH's and Intel MPI's Hydra
    ``mpiexec`` (``PMI_SIZE``/``PMI_RANK``, Intel's ``I_MPI_*``), ``srun --mpi=pmi2`` (``PMI_*``
    in a job step), ``srun --mpi=pmix`` (``PMIX_RANK``; the size from the step's
    ``SLURM_STEP_NUM_TASKS``: PMIx announces none) and ``srun --mpi=none`` (a step's
    ``SLURM_PROCID`` alone)."""
    env = os.environ if env is None else env
    tasks, tasks_var = _slurm_step(env)
    size, var = _int(env, "PMI_SIZE")
    if size is not None:
        rank = _int(env, "PMI_RANK")[0]
        if tasks is not None and "MPI_LOCALNRANKS" not in env:
            return Launch("srun --mpi=pmi2", size, rank, var,
                          "mpi4py's MPI ({library}) did not join Slurm's PMI-2 job: install an mpi4py "
                          "built against the site's MPI (docs/cluster.md, 'The site's MPI'), or start "
                          "the job with mpiexec")
        intel = any(k.startswith("I_MPI_") for k in env)
        return Launch("Intel MPI's mpiexec" if intel else "MPICH's mpiexec (Hydra)", size, rank, var,
                      _OWN_MPIEXEC)
    size, var = _int(env, "OMPI_COMM_WORLD_SIZE")
    if size is not None:
        return Launch("Open MPI's mpiexec", size, _int(env, "OMPI_COMM_WORLD_RANK")[0], var, _OWN_MPIEXEC)
    rank, _ = _int(env, "PMIX_RANK")
    if rank is not None:
        size, var = _int(env, "PMIX_SIZE")
        if size is None:
            size, var = (tasks, tasks_var) if tasks is not None else (rank + 1, "PMIX_RANK")
        name = "srun --mpi=pmix" if tasks is not None else "a PMIx launcher"
        return Launch(name, size, rank, var,
                      "mpi4py's MPI ({library}) does not take its job from PMIx: use srun "
                      "--mpi=pmi2, or install an mpi4py built against the site's PMIx-enabled MPI "
                      "(docs/cluster.md, 'The site's MPI')")
    if tasks is not None:
        return Launch("srun without an MPI plugin (--mpi=none)", tasks,
                      _int(env, "SLURM_PROCID")[0], tasks_var,
                      "srun started separate processes that MPI cannot join (each would train the "
                      "whole job alone): give srun --mpi=pmi2 (or --mpi=pmix with an MPI built for "
                      "PMIx; `srun --mpi=list` names what this Slurm offers)")
    return None


#: Variables in which launchers name the host a process runs on, as the launcher calls it (Hydra's
#: ``-hosts`` names, Slurm's node names): what a record of a lost node should say.
HOST_VARS = ("PMI_HOSTNAME", "SLURMD_NODENAME", "OMPI_MCA_orte_hostname")


def host_name(env=None):
    """The host this process runs on, as its launcher names it (:data:`HOST_VARS`), else the
    machine's name. Pure but for ``socket.gethostname``."""
    env = os.environ if env is None else env
    return next((env[v] for v in HOST_VARS if env.get(v)), None) or socket.gethostname()


def launcher_world_size(env=None):
    """``(size, variable)``: the number of ranks a launcher announces in ``env`` (default
    ``os.environ``, :func:`detect_launch`) and the variable that says so; ``(1, None)`` without
    a launcher. Pure."""
    launch = detect_launch(env)
    return (launch.size, launch.variable) if launch is not None else (1, None)


def launcher_mismatch(mpi_size, mpi_library, env=None):
    """The error message when a launcher announced several processes (``env``) but MPI sees
    ``mpi_size`` == 1 (every process would train the whole job alone, each with its own run
    directory): names the launcher and the fix (``mpi_library``: MPI's version line). ``None``
    when they agree. Pure."""
    launch = detect_launch(env)
    if launch is None or launch.size <= 1 or mpi_size != 1:
        return None
    who = f"process {launch.rank} of {launch.size}" if launch.rank is not None else f"one of {launch.size} processes"
    fix = launch.fix.format(library=mpi_library, mpiexec=mpiexec_path() or "the mpiexec of its virtualenv")
    return f"launched by {launch.name} as {who} ({launch.variable}={launch.size}), but MPI sees this process alone: {fix}"


def _ranges(numbers):
    numbers, out = sorted(numbers), []
    for n in numbers:
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def split_launch_refusal(world_size, procids, env=None):
    """The error message when this MPI world holds only some of the tasks of the ``srun`` step
    that started it (``procids``: every rank's ``SLURM_PROCID``, None outside a step), else
    None. Pure.

    ``srun -n 2 mpiexec -n 2 distnet run`` (a launch inside a launch) starts two ``mpiexec``
    jobs that each train the whole experiment; a world that MPI joined from fewer tasks than
    the step started leaves the others to train alone. (``mpiexec`` inside an allocation that
    starts its proxies through Slurm is one world holding every task: fine.)"""
    env = os.environ if env is None else env
    tasks, var = _slurm_step(env)
    seen = {p for p in procids if p is not None}
    if tasks is None or not seen or len(seen) >= tasks:
        return None
    missing = _ranges(set(range(tasks)) - seen)
    launch = detect_launch(env)
    if launch is not None and launch.name.endswith(("(Hydra)", "mpiexec")):
        return (f"launched by {launch.name} inside task {_ranges(seen)} of an srun step of {tasks} tasks ({var}={tasks}): "
                f"srun started {tasks} copies of this job (a launch inside a launch), each training alone; start the "
                f"ranks with srun alone (srun --mpi=pmi2 -n N distnet run ...), or with mpiexec alone in the "
                f"allocation (no srun around it)")
    return (f"MPI joined {world_size} rank(s) from task(s) {_ranges(seen)} of the srun step's {tasks} ({var}={tasks}): "
            f"task(s) {missing} would train the job separately; launch srun with an MPI plugin that joins every task "
            f"(srun --mpi=pmi2, `srun --mpi=list`), or start {world_size} task(s) (srun -n {world_size})")


def pmix_refusal(env=None):
    """The error message, before MPI starts, for a launch through PMIx (``srun --mpi=pmix``, Open
    MPI 5's ``mpirun``: ``PMIX_*`` in the environment) of a job whose mpi4py uses the pip
    ``mpich`` wheel: that MPICH speaks PMI-1/2 only, and its ``MPI_Init`` aborts with a wall of
    its internals under PMIx. None otherwise."""
    env = os.environ if env is None else env
    launch = detect_launch(env)
    if launch is None or launch.size <= 1 or not any(k in env for k in ("PMIX_RANK", "PMIX_NAMESPACE")):
        return None
    from .mpi_info import pip_mpich_in_use
    if not pip_mpich_in_use():
        return None
    return launcher_mismatch(1, "the pip mpich wheel", env)


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
