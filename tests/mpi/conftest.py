"""Harness for the multi-rank tests: every module here runs under ``mpiexec -n N`` with every rank
running pytest on the same module (``tests/test_mpi_suites.py`` launches them; by hand:
``mpiexec -n 4 .venv/bin/python -m pytest -q -p no:cacheprovider tests/mpi/test_x.py``).

What it provides
----------------
* fixture ``comm``: ``MPI.COMM_WORLD``, for the test's own communication.
* fixture ``mpi``: :class:`MPIHelper` with collective-safe ``skip_unless`` / ``assert_all``.
* marker ``mpi_size(n, ...)``: the test (or one ``pytest.param``) runs only at those world sizes;
  others are deselected at collection (free, unlike a skip, which costs a round of messages).
* Lockstep outcomes: after setup, call and teardown of every test, the ranks agree (on a private
  duplicate of COMM_WORLD, so the harness never matches a test's messages) on one outcome: a test
  fails everywhere if it failed anywhere, and rank 0's report shows the other ranks' failures.
  A setup failure on one rank stops the test body on every rank.
* No hangs: a rank that waits more than ``DISTNET_MPI_AGREE_TIMEOUT`` seconds (default 60) for the
  others to finish a test phase (they are stuck in a collective that the failing rank skipped)
  prints ``[rank R] <test>: ...`` to stderr and calls ``MPI_Abort``; uncaught exceptions and
  pytest internal errors abort too. All ranks must collect the same tests (checked).
* Quiet ranks: only rank 0 writes pytest's terminal report (``DISTNET_MPI_ALL_OUTPUT=1`` keeps all).

Outside mpiexec a normal ``pytest tests`` run does not collect this directory (the launcher runs
it); naming a file here explicitly runs it as a 1-rank (singleton MPI) run.
"""
import os
import sys
import time
import zlib
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_LAUNCH_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "DISTNET_MPI_HARNESS")
_state = {"active": None, "hcomm": None}


def _launched():
    return any(v in os.environ for v in _LAUNCH_VARS)


def _explicitly_asked(config):
    """True if a command-line path points into this directory."""
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def _active(config):
    if _state["active"] is None:
        _state["active"] = _launched() or _explicitly_asked(config)
    return _state["active"]


def _mpi():
    from mpi4py import MPI
    return MPI


def _world():
    return _mpi().COMM_WORLD


def _timeout():
    return float(os.environ.get("DISTNET_MPI_AGREE_TIMEOUT", "60"))


def _abort(message):
    rank = _world().Get_rank()
    sys.stderr.write(f"[rank {rank}] {message}\n[rank {rank}] calling MPI_Abort\n")
    sys.stderr.flush()
    _world().Abort(1)


def _agree_max(values, what):
    """Elementwise MAX of small ints over all ranks, on the harness communicator; aborts the job
    if the other ranks do not arrive within the timeout (they are stuck somewhere)."""
    import numpy as np
    MPI = _mpi()
    send = np.asarray(values, dtype=np.int64)
    recv = np.empty_like(send)
    req = _state["hcomm"].Iallreduce(send, recv, op=MPI.MAX)
    deadline = time.monotonic() + _timeout()
    pause = 0.0
    while not req.Test():
        if time.monotonic() > deadline:
            _abort(f"{what}: the other ranks did not arrive within {_timeout():.0f} s "
                   f"(DISTNET_MPI_AGREE_TIMEOUT); they are probably blocked in a collective this "
                   f"rank skipped")
        time.sleep(pause)  # sleep, not spin: ranks are oversubscribed on small machines
        pause = min(0.002, pause + 0.0001)
    return recv.tolist()


# -- session ---------------------------------------------------------------------------------------

def pytest_ignore_collect(collection_path, config):
    if _active(config):
        return None
    return True  # a plain `pytest tests` run: tests/test_mpi_suites.py launches these under mpiexec


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    config.addinivalue_line("markers", "mpi_size(n, ...): run only when the world size is one of n, ...")
    if not _active(config):
        return
    world = _world()
    _state["hcomm"] = world.Dup()  # harness messages never match the tests' own
    from distnet.comm.abort import install_abort_hook
    install_abort_hook(world)
    if world.Get_rank() != 0 and os.environ.get("DISTNET_MPI_ALL_OUTPUT", "") in ("", "0"):
        _silence_terminal(config)


def _silence_terminal(config):
    """Swap pytest's terminal reporter for one that writes to /dev/null (non-root ranks)."""
    from _pytest.terminal import TerminalReporter
    pm = config.pluginmanager
    old = pm.getplugin("terminalreporter")
    if old is None:
        return
    pm.unregister(old)
    pm.register(TerminalReporter(config, open(os.devnull, "w")), "terminalreporter")


def pytest_collection_modifyitems(config, items):
    """Deselect tests marked ``mpi_size(n, ...)`` whose sizes exclude this run's world size
    (decided at collection, identically on every rank, so the ranks stay in step for free)."""
    if not _active(config):
        return
    size = _world().Get_size()
    keep, drop = [], []
    for item in items:
        marks = list(item.iter_markers("mpi_size"))
        (keep if all(size in m.args for m in marks) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_internalerror(excrepr, excinfo):
    if _state["hcomm"] is not None and _world().Get_size() > 1:
        _abort(f"pytest internal error: {excinfo.typename}: {excinfo.value}")


def pytest_collection_finish(session):
    if _state["hcomm"] is None:
        return
    ids = "\n".join(item.nodeid for item in session.items)
    mine = [len(session.items), zlib.crc32(ids.encode()), session.testsfailed]
    agreed = _agree_max(mine + [-v for v in mine], "collection")  # max and -min at once
    if agreed != mine + [-v for v in mine]:
        _abort(f"ranks collected different tests (here: {len(session.items)} tests, "
               f"{session.testsfailed} collection errors); parametrisations must not depend on the rank")


# -- per test --------------------------------------------------------------------------------------

_PASSED, _SKIPPED, _FAILED = 0, 1, 2
_WORDS = {_PASSED: "passed", _SKIPPED: "skipped", _FAILED: "failed"}


def _code(report):
    return _FAILED if report.failed else _SKIPPED if report.skipped else _PASSED


def _short(report):
    """One line for a failed/skipped report: the crash message (``file:line: Type: msg``)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return f"{crash.path}:{crash.lineno}: {crash.message}"
    if isinstance(report.longrepr, tuple):  # skip: (file, line, reason)
        return str(report.longrepr[2])
    return str(report.longrepr).strip().splitlines()[-1] if report.longrepr else ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if _state["hcomm"] is None or _world().Get_size() == 1:
        return report
    code = _code(report)
    here = f"{item.nodeid} ({call.when}) {_WORDS[code]} here" + \
        (f" [{_short(report)}]" if code != _PASSED else "")
    any_failed, any_skipped, any_ran = _agree_max(
        [code == _FAILED, code == _SKIPPED, code != _SKIPPED], here)
    if not (any_failed or (any_skipped and any_ran)):
        return report
    # Something differs between ranks: every rank is here now, so a blocking gather is safe.
    me = _world().Get_rank()
    full = report.longreprtext[-4000:] if code == _FAILED else None
    outcomes = _state["hcomm"].allgather((code, _short(report) if code != _PASSED else "", full))
    by_text = {}
    for r, (c, short, _) in enumerate(outcomes):
        if c != _PASSED and r != me:
            by_text.setdefault(f"{_WORDS[c]}: {short}", []).append(r)
    lines = "\n".join(f"rank(s) {ranks} {text}" for text, ranks in by_text.items())
    if code == _FAILED:
        if lines:
            report.sections.append((f"other ranks ({call.when})", lines))
        return report
    # Passed or skipped here, failed (or ran while I skipped) elsewhere: fail here too, and show
    # the first failing rank's full report so rank 0's output alone explains the failure.
    first = next(((r, f) for r, (c, _, f) in enumerate(outcomes) if c == _FAILED), None)
    ran = [r for r, (c, _, _) in enumerate(outcomes) if c == _PASSED]
    detail = f"\n----- rank {first[0]} -----\n{first[1]}" if first else \
        f"rank(s) {ran} ran it: skip conditions must be the same on every rank (use the `mpi` " \
        f"fixture's skip_unless)"
    report.outcome = "failed"
    report.longrepr = f"[rank {me}] {_WORDS[code]} here ({call.when}), but on other ranks:\n{lines}{detail}"
    return report


# -- fixtures --------------------------------------------------------------------------------------

class MPIHelper:
    """Collective-safe helpers for tests; every method is collective over ``comm``."""

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    def skip_unless(self, condition, reason):
        """Skip on every rank unless ``condition`` holds on every rank."""
        if not self.comm.allreduce(bool(condition), op=_mpi().LAND):
            pytest.skip(reason)

    def assert_all(self, condition, message=""):
        """Assert ``condition`` on every rank; all ranks raise if it fails on any, naming those
        ranks, so the ranks stay in step for the communication that follows."""
        bad = self.comm.allgather(None if condition else str(message))
        failed = {r: m for r, m in enumerate(bad) if m is not None}
        if failed:
            raise AssertionError(f"failed on rank(s) {sorted(failed)}: " +
                                 "; ".join(f"[{r}] {m}" for r, m in failed.items()))


@pytest.fixture(scope="session")
def comm():
    """``MPI.COMM_WORLD`` (size 1 when this module runs without mpiexec)."""
    return _world()


@pytest.fixture(scope="session")
def mpi(comm):
    """:class:`MPIHelper` over ``comm``."""
    return MPIHelper(comm)


@pytest.fixture(scope="module")
def shared_tmp(comm, request):
    """A temporary folder every rank sees (made by world rank 0, its path broadcast; one per
    module, removed by rank 0 at its end). Collective over ``comm``."""
    import shutil
    import tempfile
    prefix = f"distnet-{request.module.__name__.rpartition('.')[2]}-"
    tmp = comm.bcast(tempfile.mkdtemp(prefix=prefix) if comm.Get_rank() == 0 else None, root=0)
    yield tmp
    comm.Barrier()
    if comm.Get_rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def topologies(comm):
    """``grid -> Topology`` over ``comm``, made once per grid and module (collective: every rank
    asks for the same grids in the same order); freed at the end of the module."""
    from distnet.comm import Topology
    made = {}
    yield lambda grid: made.setdefault(tuple(grid), Topology.from_world(grid=tuple(grid), world=comm))
    for topo in made.values():
        topo.free()
