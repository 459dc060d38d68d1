"""The command line (``distnet``: the group in :mod:`.main`, one module per command, the MPI job
handling they share in :mod:`.job`).

Imported by the ``distnet`` command (not by a library user or a test), this module first makes
Ctrl-C and SIGTERM end the process quietly: one line ``distnet: interrupted by SIGINT`` and exit
status 128 + the signal, instead of a ``KeyboardInterrupt`` traceback from deep inside an import
on every rank. ``distnet run`` replaces these handlers with its own once MPI is up
(:mod:`distnet.comm.signals`); the other commands keep them.

``distnet run`` also keeps a preemption signal (SIGUSR1, Slurm's ``--signal=USR1@...``) that
arrives before it knows whether its experiment checkpoints on it (the imports, MPI's start, the
experiment read on rank 0 and sent): its default action would kill the rank and, with it, the
job. :func:`replay_deferred` delivers it once the run's handlers are in place, so a job
preempted at start-up ends like one preempted later before training (exit 75, requeued by its
script), or, where the experiment does not take that signal, as the signal would have ended it.
"""
import os
import signal
import sys


def _quiet_exit(signum, frame):
    """One line, then exit ``128 + signum``: one process through ``SystemExit`` (``finally``
    blocks run: a file being written is removed), a rank under mpiexec at once (exiting through
    MPI_Finalize could wait for ranks that were not signalled; mpiexec ends those)."""
    rank = os.environ.get("PMI_RANK")          # under mpiexec (MPICH's hydra sets it)
    try:
        os.write(2, f"{f'[rank {rank}] ' if rank else 'distnet: '}interrupted by "
                    f"{signal.Signals(signum).name}\n".encode())
    except OSError:
        pass
    if rank is None:
        signal.signal(signum, signal.SIG_DFL)   # a second signal ends the process at once
        raise SystemExit(128 + signum)
    os._exit(128 + signum)


_deferred = []


def _defer(signum, frame):
    """A preemption signal before the run's handlers: kept for :func:`replay_deferred`."""
    _deferred.append(signum)


def replay_deferred():
    """Deliver the signals :func:`_defer` kept, in order, now that ``distnet run``'s handlers are
    in place (main thread, every rank); a signal none of them takes gets its default action."""
    for s in DEFERRED:
        if signal.getsignal(s) is _defer:
            signal.signal(s, signal.SIG_DFL)
    pending = list(dict.fromkeys(_deferred))
    _deferred.clear()
    for s in pending:
        signal.raise_signal(s)


def _is_the_command(argv0):
    """Whether ``argv0`` is the ``distnet`` script or ``python -m distnet``."""
    name = os.path.basename(argv0)
    return name == "distnet" or (name == "__main__.py" and os.path.basename(os.path.dirname(argv0)) == "distnet")


def _command_name(argv):
    """The subcommand of a ``distnet`` command line (its first word that is not an option)."""
    return next((a for a in argv[1:] if not a.startswith("-")), None)


#: The preemption signals ``distnet run`` keeps until its handlers are in place.
DEFERRED = tuple(s for s in (getattr(signal, "SIGUSR1", None),) if s is not None)

if sys.argv and _is_the_command(sys.argv[0]):
    for _sig, _default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(_sig) is _default:      # an ignored SIGINT (a background job) stays ignored
            signal.signal(_sig, _quiet_exit)
    if _command_name(sys.argv) == "run":
        for _sig in DEFERRED:
            if signal.getsignal(_sig) is signal.SIG_DFL:
                signal.signal(_sig, _defer)
