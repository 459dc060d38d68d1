"""Ctrl-C and SIGTERM end a run promptly and on every rank, never half of the ranks.

Why this is needed: Python turns SIGINT into ``KeyboardInterrupt`` only when the main thread
next runs Python code. A rank blocked in an MPI collective never does, and a rank that does
(and exits, e.g. through ``MPI_Finalize``) leaves the others spinning in their collective.

What :func:`install_signal_handlers` does:

* **one process** (no communicator, or size 1): SIGINT, SIGTERM and SIGHUP raise
  :class:`Interrupted` in the main thread (a ``BaseException``, like ``KeyboardInterrupt``); the
  CLI records it in the run directory, prints one line and exits ``128 + signal``. A second
  signal of the same kind gets the default action (ends the process at once).
* **several ranks**: the C-level handler of Python writes the signal number into a socket
  (:func:`signal.set_wakeup_fd`); a daemon thread reading that socket wakes up at once, even
  while the main thread is blocked inside MPI (mpi4py releases the GIL there), and ends the job
  with :func:`~distnet.comm.abort.abort_job` (``[rank R] interrupted by SIGINT``, the abort
  listeners record it, ``MPI_Abort(128 + signal)``). The Python-level handler of the main
  thread does nothing, so the main thread never unwinds into ``MPI_Finalize`` on its own.

Ctrl-C in a terminal sends SIGINT to every process of the foreground group (mpiexec and all
ranks); ``kill -TERM`` may reach only mpiexec (hydra forwards it to the ranks) or only one
rank: in every case the first rank that sees the signal aborts the whole job.
"""
import signal
import socket
import threading

from .abort import abort_job

SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP"))
                if s is not None)

_state = {"installed": False, "sock": None, "thread": None}


class Interrupted(BaseException):
    """A signal asked a one-process run to stop. ``signum``; ``name`` (``"SIGINT"``);
    ``exit_code`` (``128 + signum``, what a shell reports for a process ended by the signal)."""

    def __init__(self, signum):
        self.signum = int(signum)
        self.name = signal.Signals(self.signum).name
        self.exit_code = 128 + self.signum
        super().__init__(f"interrupted by {self.name}")


def _raise_interrupted(signum, frame):
    signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once
    raise Interrupted(signum)


def _ignore(signum, frame):
    """The main thread's handler in a multi-rank run: the watcher thread does the work."""


def _watch(sock, comm):
    while True:
        try:
            data = sock.recv(64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum in SIGNALS:
                name = signal.Signals(signum).name
                abort_job(comm, f"interrupted by {name}", code=128 + signum, status="interrupted")
                return


def install_signal_handlers(comm=None):
    """Make SIGINT / SIGTERM / SIGHUP end the run as the module docstring says. Call from the
    main thread, after MPI is initialised. ``comm``: the world communicator (None: one process)."""
    if comm is None or comm.Get_size() == 1:
        for s in SIGNALS:
            signal.signal(s, _raise_interrupted)
        _state["installed"] = True
        return
    if _state["sock"] is not None:
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for s in SIGNALS:
        signal.signal(s, _ignore)
    _state.update(installed=True, sock=(reader, writer))
    thread = threading.Thread(target=_watch, args=(reader, comm), daemon=True, name="distnet-signals")
    thread.start()
    _state["thread"] = thread


def restore_default_handlers():
    """Back to Python's defaults (SIGINT raises KeyboardInterrupt); for tests."""
    if not _state["installed"]:
        return
    for s in SIGNALS:
        signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)
    if _state["sock"] is not None:
        signal.set_wakeup_fd(-1)
        for sock in _state["sock"]:
            sock.close()
    _state.update(installed=False, sock=None, thread=None)
