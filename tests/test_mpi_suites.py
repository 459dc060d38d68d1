"""Runs every ``tests/mpi/test_*.py`` module under ``mpiexec -n N`` for each N in the module's
``MPI_SIZES`` (a module-level tuple of ints, default ``(1, 2, 4)``; ``MPI_TIMEOUT`` seconds,
default 300), each (module, N) as its own test id, e.g. ``test_mpi_suite[test_reduce.py-n4]``.

Every rank runs pytest on the module (see ``tests/mpi/conftest.py`` for the lockstep harness).
The run is wrapped in ``timeout``, and a non-zero exit (a failed test, an abort, a timeout) fails
this test with the tail of the combined output.

Oversubscription (more ranks than cores) is the normal case here, so the MPICH settings below
make waiting ranks sleep instead of busy-polling the CPU that the working rank needs.
"""
import ast
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MPI_DIR = ROOT / "tests" / "mpi"
DEFAULT_SIZES = (1, 2, 4)
DEFAULT_TIMEOUT = 300
TAIL_CHARS = 8000

# MPICH (ch4) waits by polling. With 9 ranks on 2 cores the waiting ranks starve the computing
# ones; these make a waiting rank nanosleep between polls (measured: see benchmarks notes in the
# comm report). They are ignored by other MPI implementations.
MPICH_ENV = {
    "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1",
    "MPIR_CVAR_POLLS_BEFORE_YIELD": "1",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1",
}


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
    sibling = Path(sys.executable).parent / "mpiexec"
    if sibling.exists():
        return str(sibling)
    found = shutil.which("mpiexec")
    if found is None:
        pytest.fail("no mpiexec next to the interpreter or on PATH; install the `mpich` package")
    return found


def _env():
    env = dict(os.environ)
    for key, value in MPICH_ENV.items():
        env.setdefault(key, value)  # a user's own setting wins
    env["DISTNET_MPI_HARNESS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


@pytest.mark.parametrize("module,nranks", _cases())
def test_mpi_suite(module, nranks):
    limit = int(_module_setting(module, "MPI_TIMEOUT", DEFAULT_TIMEOUT))
    cmd = [_mpiexec(), "-n", str(nranks), sys.executable, "-m", "pytest", "-q",
           "-p", "no:cacheprovider", str(module.relative_to(ROOT))]
    if shutil.which("timeout"):
        cmd = ["timeout", "-k", "10", str(limit)] + cmd
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit + 30)  # backstop if `timeout` is missing or stuck
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        proc.returncode = 124
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        why = f"timed out after {limit} s" if proc.returncode in (124, 137) else \
            f"exited with status {proc.returncode}"
        pytest.fail(f"{' '.join(cmd)}\n{why}; last output:\n{text[-TAIL_CHARS:]}", pytrace=False)
