"""Runs every ``tests/mpi/test_*.py`` module under ``mpiexec -n N`` for each N in the module's
``MPI_SIZES`` (a module-level tuple of ints, default ``(1, 2, 4)``; ``MPI_TIMEOUT`` seconds,
default 300), each (module, N) as its own test id, e.g. ``test_mpi_suite[test_reduce.py-n4]``.

Every rank runs pytest on the module (see ``tests/mpi/conftest.py`` for the lockstep harness).
The run is wrapped in ``timeout``, and a non-zero exit (a failed test, an abort, a timeout) fails
this test with the tail of the combined output.

Oversubscription (more ranks than cores, e.g. 9 ranks on 2 cores) is the normal case here, so
the environment comes from :func:`distnet.comm.launcher.launch_env`: MPICH waiting ranks sleep
(``MPIR_CVAR_ENABLE_HEAVY_YIELD=1``, ``MPIR_CVAR_POLLS_BEFORE_YIELD=1``) instead of busy-polling
the cores the working ranks need, and one BLAS thread per rank. Measured on a 2-core VM (MPICH 5.0
ch4; global_array n=9,6,4 + reduce n=4, three interleaved rounds on a shared machine): no settings
33-41 s, those two 23-25 s, plus CH4_PROGRESS_THROTTLE 24-30 s.
"""
import ast
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from distnet.comm.launcher import launch_env, mpiexec_path

ROOT = Path(__file__).resolve().parent.parent
MPI_DIR = ROOT / "tests" / "mpi"
DEFAULT_SIZES = (1, 2, 4)
DEFAULT_TIMEOUT = 300
TAIL_CHARS = 8000

def _module_setting(path, name, default):
    """A literal module-level assignment ``name = ...`` of ``path``, read without importing it."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    return default


def _cases():
    cases = []
    for path in sorted(MPI_DIR.glob("test_*.py")):
        for n in _module_setting(path, "MPI_SIZES", DEFAULT_SIZES):
            cases.append(pytest.param(path, int(n), id=f"{path.name}-n{n}"))
    return cases


def _mpiexec():
    """The mpiexec next to this interpreter (the venv's pip MPICH), else the one on PATH."""
    found = mpiexec_path()
    if found is None:
        pytest.fail("no mpiexec next to the interpreter or on PATH; install the `mpich` package")
    return found


def _env(nranks):
    """distnet's launch environment (MPICH waits by sleeping, one BLAS thread per rank: see
    :mod:`distnet.comm.launcher`), plus the harness switch and the repository on the path."""
    # A pytest that itself runs under mpiexec must not hand its own rank's PMI wiring to the
    # nested launcher.
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_LOCAL"))}
    env = launch_env(nranks, base)
    env["DISTNET_MPI_HARNESS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


@pytest.mark.parametrize("module,nranks", _cases())
def test_mpi_suite(module, nranks):
    limit = int(_module_setting(module, "MPI_TIMEOUT", DEFAULT_TIMEOUT))
    target = module.relative_to(ROOT) if ROOT in module.parents else module
    cmd = [_mpiexec(), "-n", str(nranks), sys.executable, "-m", "pytest", "-q",
           "-p", "no:cacheprovider", str(target)]
    if shutil.which("timeout"):
        cmd = ["timeout", "-k", "10", str(limit)] + cmd
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(nranks), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit + 30)  # backstop if `timeout` is missing or stuck
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        proc.returncode = 124
    text = out.decode(errors="replace")
    # 5 = pytest found nothing to run at this size (every test deselected by its mpi_size mark)
    if proc.returncode not in (0, 5):
        why = f"timed out after {limit} s" if proc.returncode in (124, 137) else \
            f"exited with status {proc.returncode}"
        pytest.fail(f"{' '.join(cmd)}\n{why}; last output:\n{text[-TAIL_CHARS:]}", pytrace=False)
