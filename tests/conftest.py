"""Test-session settings shared by every test module (also under mpiexec).

``distnet run`` records every run in a run directory, by default under ``./runs``; tests that
run the command without ``--run-dir`` get theirs in a temporary folder (``DISTNET_RUNS_DIR``),
removed at the end, instead of the checkout's ``runs/``.
"""
import logging
import os
import shutil
import tempfile

import pytest

from distnet.log import LOGGER_NAME
from distnet.ops import parallel
from distnet.testing.backends import BACKENDS

_made = []


def pytest_configure(config):
    if not os.environ.get("DISTNET_RUNS_DIR"):
        path = tempfile.mkdtemp(prefix="distnet-test-runs-")
        os.environ["DISTNET_RUNS_DIR"] = path
        _made.append(path)


def pytest_unconfigure(config):
    for path in _made:
        shutil.rmtree(path, ignore_errors=True)
        if os.environ.get("DISTNET_RUNS_DIR") == path:
            del os.environ["DISTNET_RUNS_DIR"]
    _made.clear()


# ---------------------------------------------------------------------------------- fixtures


@pytest.fixture(params=BACKENDS, ids=list(BACKENDS))
def backend_name(request):
    """Each array backend in turn: numpy, devicelike (numpy data with cupy's strictness), cupy
    (skipped by :func:`distnet.testing.backends.make_backend` where there is no GPU)."""
    return request.param


@pytest.fixture
def restore_logger():
    """Tests that run experiments (``exp.run()`` configures the distnet logger) give the other
    tests the logger back as it was."""
    logger = logging.getLogger(LOGGER_NAME)
    saved = (list(logger.handlers), logger.level, logger.propagate, list(logger.filters))
    yield
    logger.handlers[:], logger.filters[:] = saved[0], saved[3]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


@pytest.fixture
def restore_threads():
    """Put BLAS threads, kernel threads and the plan back after the test (a fresh pool)."""
    parallel.kernel_threads()
    before = {k: parallel._state[k] for k in ("threads", "plan")}
    blas = [c.get_num_threads() for c in parallel._state["blas"]]
    yield
    for c, n in zip(parallel._state["blas"], blas):
        c.set_num_threads(n)
    if parallel._state["pool"] is not None:
        parallel._state["pool"].shutdown()
    parallel._state.update(before, pool=None)
