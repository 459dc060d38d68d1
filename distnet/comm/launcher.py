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
