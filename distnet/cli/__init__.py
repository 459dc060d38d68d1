"""The command line (``distnet``: the group in :mod:`.main`, one module per command, the MPI job
handling they share in :mod:`.job`).

Imported by the ``distnet`` command (not by a library user or a test), this module first makes
Ctrl-C and SIGTERM end the process quietly: one line ``distnet: interrupted by SIGINT`` and exit
status 128 + the signal, instead of a ``KeyboardInterrupt`` traceback from deep inside an import
on every rank. ``distnet run`` replaces these handlers with its own once MPI is up
(:mod:`distnet.comm.signals`); the other commands keep them.
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


def _is_the_command(argv0):
    """Whether ``argv0`` is the ``distnet`` script or ``python -m distnet``."""
    name = os.path.basename(argv0)
    return name == "distnet" or (name == "__main__.py" and os.path.basename(os.path.dirname(argv0)) == "distnet")


if sys.argv and _is_the_command(sys.argv[0]):
    for _sig, _default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(_sig) is _default:      # an ignored SIGINT (a background job) stays ignored
            signal.signal(_sig, _quiet_exit)
