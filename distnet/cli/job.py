"""The job a command runs in: one process, or every rank of an ``mpiexec`` launch.

Every command that may run under mpiexec runs its body inside a :class:`Job`, which

* refuses a launch on several ranks for a command that writes files on one process
  (``one_process``: N ranks would write one file N times);
* under mpiexec, starts MPI and installs the abort hook (``world``), so that an uncaught exception
  on one rank ends every rank instead of leaving the others waiting in a collective (the idea of
  chainermn's ``global_except_hook``), and the signal handlers (``signals``: Ctrl-C and SIGTERM
  end every rank);
* agrees on the outcome of a step that may fail on some ranks only (:meth:`Job.collectively`);
* ends a failed command with one line ``distnet: error: ...`` and the exit status of the error
  (:func:`fail`), on every rank: under mpiexec the first rank to fail ends the whole job.

None of this starts MPI on one process: a one-process command never imports mpi4py here.
"""
import sys
from dataclasses import dataclass
from typing import Optional

import click

from ..errors import DistnetError


def world_rank():
    """This rank's index in a running multi-rank MPI world; None on one process (or before MPI
    is initialised)."""
    from ..comm.world import world_rank as rank
    return rank()


def launched_on_many():
    """Whether an MPI launcher started this process as one of several ranks (read from the
    launcher's environment, before MPI is initialised)."""
    from ..comm.launcher import launcher_world_size
    return launcher_world_size()[0] > 1


def fail(message, code=2):
    """``distnet: error: message`` and exit ``code`` (2: the user's configuration or command line,
    1: what running met: data, files, checkpoints; for a DistnetError pass its ``exit_code``,
    which says which); under mpiexec the whole job ends with it. Never returns."""
    if world_rank() is not None:  # end the whole job: a rank failing alone would leave the others waiting
        from ..comm.world import abort_world_job
        abort_world_job(f"distnet: error: {message}", code)
    click.echo(f"distnet: error: {message}", err=True)
    sys.exit(code)


def collectively(comm, fn):
    """``fn()`` on every rank of ``comm`` with one agreed outcome: its result, or the same error
    on every rank (:func:`distnet.comm.abort.run_collectively`; one allgather over ``comm``). One
    process (``comm`` None): just ``fn()``."""
    if comm is None:
        return fn()
    from ..comm.abort import run_collectively
    return run_collectively(fn, comm)


def one_line_warning(message, category, filename, lineno, line=None):
    """A Python warning as the user sees it (numpy's ``overflow encountered in matmul`` before
    the cost check stops a run): one line, no source line of distnet's code; under mpiexec
    prefixed with the rank (a ``warnings.formatwarning``)."""
    rank = world_rank()
    prefix = f"[rank {rank}] " if rank is not None else ""
    return f"{prefix}distnet: warning: {message} ({category.__name__})\n"


@dataclass(frozen=True)
class Failure:
    """How a command failed, for whoever records it (``distnet run``'s run directory).

    error : ``"Type: message"`` of the exception.
    line : what the command's log gets about it (None: nothing).
    status : ``"failed"``, ``"interrupted"`` or ``"preempted"``.
    rank : the rank that failed first when another rank did (a RemoteError), or that an error
        every rank raises is about (its ``rank``: data that differ there); None: this one.
    preempted : what a preemption did (the signal, the checkpoint written, where in training).
    """
    error: str
    line: Optional[str] = None
    status: str = "failed"
    rank: Optional[int] = None
    #: A preemption's ``{"signal", "checkpoint", "where"}`` (status ``"preempted"``).
    preempted: Optional[dict] = None


class Job:
    """A context manager around a command's body (module docstring).

    command : the command's name (``"data convert"``), for the refusal of ``one_process``.
    world : on entry, :meth:`start_world` (with ``signals``); else call it where the command
        wants MPI up.
    one_process : refuse to run under mpiexec (exit status 2).
    errors : ``(exception type, describe)`` pairs beyond DistnetError: ``describe(e)`` gives
        ``(message, exit code)`` of an exception of that type (``distnet run``'s out of memory).

    On leaving with a DistnetError (or one of ``errors``), every failure listener
    (:meth:`on_failure`) is told, then :func:`fail` ends the command (every rank, under mpiexec)
    with the error's message and ``exit_code``. With signal handlers, a signal
    (:class:`~distnet.comm.signals.Interrupted`) or Ctrl-C ends it with ``distnet: interrupted by
    SIGINT`` and ``128 + signal``; a preemption (:class:`~distnet.comm.signals.Preempted`, every
    rank at once, after its checkpoint) with its line on rank 0 and exit status 75. Any other exception is told to the listeners and goes on (under
    mpiexec the abort hook prints ``[rank R] Type: message`` and ends every rank). ``SystemExit``
    (a command that ended itself through :func:`fail`) goes through untold.
    """

    def __init__(self, command=None, *, world=False, signals=False, one_process=False, errors=()):
        self.command = command
        self.comm = None                # the world communicator under mpiexec, once started
        self._world, self._signals, self._one_process = world, signals, one_process
        self._errors = tuple(errors)
        self._interruptible = False
        self._listeners = []

    def __enter__(self):
        if self._one_process and launched_on_many():
            fail(f"distnet {self.command} runs on one process: run it without mpiexec", 2)
        if self._world:
            self.start_world(signals=self._signals)
        return self

    def start_world(self, signals=False):
        """Under mpiexec: initialise MPI and install the abort hook on ``MPI.COMM_WORLD`` (before
        anything can fail on one rank); with ``signals``, the signal handlers (one process too).
        An mpiexec of another MPI library (every process a world of one) ends with its one-line
        reason. Returns the world communicator, None on one process."""
        if launched_on_many():
            from ..comm.world import LauncherMismatch, install_world_abort_hook
            try:
                self.comm = install_world_abort_hook()
            except LauncherMismatch as e:   # every process alone: each says so and exits
                fail(str(e), e.exit_code)
        if signals:
            from ..comm.signals import install_signal_handlers
            install_signal_handlers(self.comm)
            self._interruptible = True
        return self.comm

    @property
    def rank0(self):
        """Whether this process writes and prints: rank 0 of the world, or the one process."""
        return world_rank() in (None, 0)

    def collectively(self, fn):
        """``fn()`` with one outcome on every rank of the world (:func:`collectively`)."""
        return collectively(self.comm, fn)

    def bcast(self, value):
        """Rank 0's ``value`` on every rank of a multi-rank run (pickled: small values; collective
        over the world); ``value`` as is on one process."""
        from ..comm.world import bcast_from_root
        return bcast_from_root(value)

    def experiment_text(self, path, overrides, extra=None):
        """``(text, overrides, extra)``: the experiment file as rank 0 read it, rank 0's ``--set``
        list and rank 0's ``extra`` (more of its command line that every rank follows: ``distnet
        run``'s options), on every rank (one broadcast over ``COMM_WORLD``). The file is needed
        on rank 0's node only, and ranks can never build different experiments from copies or
        command lines that differ; errors in it name the file and line alike on every rank. A
        file rank 0 cannot read is its ConfigError on every rank."""
        from ..config.yaml_loader import read_text
        from ..errors import ConfigError
        mine = None
        if self.rank0:
            try:
                mine = ("text", read_text(path), list(overrides), extra)
            except ConfigError as e:
                mine = ("error", e.bare_message, e.where, e.key)
        got = self.bcast(mine)
        if got[0] == "error":
            raise ConfigError(*got[1:])
        return got[1], tuple(got[2]), got[3]

    def load_experiment(self, path, overrides):
        """The experiment of :meth:`experiment_text` (rank 0's file and ``--set``), built on
        every rank."""
        from ..config import load_experiment
        text, overrides, _ = self.experiment_text(path, overrides)
        return load_experiment(path, overrides, text=text)

    def on_failure(self, fn):
        """Call ``fn(failure)`` (a :class:`Failure`) when the command fails, before it exits."""
        self._listeners.append(fn)
        return fn

    def _tell(self, failure):
        for fn in self._listeners:
            fn(failure)

    def __exit__(self, exc_type, exc, tb):
        if exc is None or isinstance(exc, SystemExit):
            return False
        if isinstance(exc, DistnetError):
            from ..comm.abort import RemoteError
            failures = exc.failures if isinstance(exc, RemoteError) else None   # the rank(s) that failed
            self._tell(Failure(f"{type(exc).__name__}: {exc}", f"distnet: error: {exc}",
                               rank=failures[0][0] if failures else exc.rank))
            fail(str(exc), exc.exit_code)   # the same on every rank (RemoteError: the failing rank's)
        for kind, describe in self._errors:
            if isinstance(exc, kind):
                message, code = describe(exc)
                self._tell(Failure(f"{kind.__name__}: {exc}"))
                fail(message, code)
        if self._interruptible:
            from ..comm.signals import Interrupted, Preempted, preemption_done
            if isinstance(exc, Preempted):   # every rank at the same point, after the checkpoint
                self._tell(Failure(str(exc), f"distnet: {exc}", "preempted", preempted={
                    "signal": exc.name, "checkpoint": exc.checkpoint, "where": exc.where}))
                preemption_done()
                if self.rank0:
                    click.echo(f"{'[rank 0] ' if world_rank() is not None else ''}distnet: {exc}; exit "
                               f"{exc.exit_code} (a run with --resume auto continues from the newest checkpoint)",
                               err=True)
                sys.exit(exc.exit_code)
            if isinstance(exc, (Interrupted, KeyboardInterrupt)):   # one process (ranks abort in their signal thread)
                name = exc.name if isinstance(exc, Interrupted) else "SIGINT"
                self._tell(Failure(f"interrupted by {name}", f"distnet: interrupted by {name}", "interrupted"))
                click.echo(f"distnet: interrupted by {name}", err=True)
                sys.exit(exc.exit_code if isinstance(exc, Interrupted) else 130)
        self._tell(Failure(f"{exc_type.__name__}: {exc}", f"{exc_type.__name__}: {exc}"))   # a bug
        return False
