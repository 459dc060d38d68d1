"""Signals: Ctrl-C ends a run promptly on every rank; a preemption signal (SIGUSR1, SIGTERM)
ends it after one checkpoint that every rank agrees on.

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

**Preemption** (:func:`preempt_on`, called by ``distnet run`` once it knows the experiment's
``checkpoint.on_signal``; Slurm's ``--signal=USR1@SECONDS`` or its SIGTERM before a kill): such
a signal does not end the run at once. In training (:data:`~distnet.comm.phase.TRAINING`) it
sets a flag that the training loop reads before every step (:func:`preemption_requested`); the
ranks agree on it (:mod:`.agree`), write one checkpoint and leave with :class:`Preempted`
(exit status :data:`PREEMPTED`). Before training (start-up, data loading, GB's pretraining)
there is nothing new to save: the job ends at once with the same status. After training (the
final checkpoint and error rates) the run finishes. A second signal, or :data:`grace
<_preempt>` seconds without the job ending, ends it at once (``128 + signal``): saves are
atomic, so the previous checkpoint stays whole.

Ctrl-C in a terminal sends SIGINT to every process of the foreground group (mpiexec and all
ranks); ``kill -TERM`` may reach only mpiexec (hydra forwards it to the ranks) or only one
rank: in every case the first rank that sees the signal ends the whole job (a preemption
signal: the ranks agree at the next step).
"""
import signal
import socket
import sys
import threading

from ..log import rank_file_line
from . import phase
from .abort import abort_job

SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1"))
                if s is not None)
#: The exit status of a run that a preemption signal ended: after its checkpoint, or before
#: training (nothing new to save). Distinct from the failures (1, 2) and ``128 + signal``;
#: ``EX_TEMPFAIL`` of sysexits.h ("try again later"), what a job script tests to requeue.
PREEMPTED = 75

_state = {"installed": False, "sock": None, "thread": None, "comm": None}
#: signals: those that ask for a checkpoint; grace: seconds from the first one to ending at
#: once; requested: the signal seen (this process); timer: the grace timer.
_preempt = {"signals": frozenset(), "grace": None, "requested": None, "timer": None}


class Interrupted(BaseException):
    """A signal asked a one-process run to stop. ``signum``; ``name`` (``"SIGINT"``);
    ``exit_code`` (``128 + signum``, what a shell reports for a process ended by the signal)."""

    def __init__(self, signum):
        self.signum = int(signum)
        self.name = signal.Signals(self.signum).name
        self.exit_code = 128 + self.signum
        super().__init__(f"interrupted by {self.name}")


class Preempted(BaseException):
    """A preemption signal ended the run, on every rank at the same point: ``signum``,
    ``name``, ``checkpoint`` (the path written, None when nothing new was saved), ``where``
    (words: ``after epoch 2, batch 17``); ``exit_code`` :data:`PREEMPTED`."""

    exit_code = PREEMPTED

    def __init__(self, signum, checkpoint=None, where=None):
        self.signum, self.name = int(signum), signal.Signals(int(signum)).name
        self.checkpoint, self.where = checkpoint, where
        saved = (f"checkpoint {checkpoint} written {where}" if checkpoint else
                 f"no new checkpoint ({where or 'before training'})")
        super().__init__(f"preempted by {self.name}: {saved}")


def preempt_on(signals, grace, comm=None):
    """From now on the signal numbers ``signals`` ask for a checkpoint instead of ending the run
    at once (module docstring); ``grace`` seconds (None: no limit) after the first one, the
    job ends at once. ``comm``: the world (None: one process)."""
    _preempt.update(signals=frozenset(int(s) for s in signals), grace=grace, requested=None)
    _state["comm"] = comm


def preemption_requested():
    """The signal number of a preemption signal this process received (None: none)."""
    return _preempt["requested"]


def preemption_done():
    """The run ended after a preemption signal (or finished anyway): the grace timer stops."""
    timer = _preempt["timer"]
    if timer is not None:
        timer.cancel()
    _preempt.update(timer=None)


def _world():
    from .serial import SerialComm
    return _state["comm"] or SerialComm("world")


def _on_preemption(signum):
    """A preemption signal arrived (main thread on one process, the watcher thread on several):
    the decision of the module docstring. Returns what the main thread of one process raises
    (None: nothing)."""
    name, now = signal.Signals(signum).name, phase.current()
    if _preempt["requested"] is not None:
        return _end(signum, f"a second {name}: ending at once (the last complete checkpoint is whole)")
    _preempt["requested"] = signum
    if now not in phase.TRAINING and now in phase.PHASES[:phase.PHASES.index("training")]:
        return _end(signum, f"preempted by {name} in {now}, before training: no new checkpoint (a resumed "
                            "run continues from the last one)", code=PREEMPTED, status="preempted",
                    error=Preempted(signum, where=f"in {now}"))
    grace = _preempt["grace"]
    what = ("a checkpoint after this step, then exit " + str(PREEMPTED) if now in phase.TRAINING
            else "finishing the run") + (f" (at most {grace:g} s)" if grace else "")
    rank_file_line(f"{name}: {what}")
    if _world().Get_rank() == 0:       # one line per job, not one per rank the signal reached
        sys.stderr.write(f"{'[rank 0] ' if _world().Get_size() > 1 else ''}distnet: {name}: {what}\n")
        sys.stderr.flush()
    if grace:
        timer = _preempt["timer"] = threading.Timer(grace, _end, (signum, (
            f"{name}: the run did not end within the grace time of {grace:g} s; ending at once (the last "
            "complete checkpoint is whole)")))
        timer.daemon = True
        timer.start()
    return None


def _end(signum, message, code=None, status="interrupted", error=None):
    """End the job now: on several ranks (or from a timer) through :func:`abort_job`; on one
    process in the main thread, the exception to raise (``error``, else :class:`Interrupted`)."""
    one = _world().Get_size() == 1 and threading.current_thread() is threading.main_thread()
    if one:
        return error if error is not None else Interrupted(signum)
    abort_job(_world(), message, code=128 + signum if code is None else code, status=status, hint=True,
              tb_hint=False)


def _raise_interrupted(signum, frame):
    if signum in _preempt["signals"]:
        error = _on_preemption(signum)
        if error is not None:
            raise error
        return
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
            if signum in _preempt["signals"]:
                _on_preemption(signum)
            elif signum in SIGNALS and signum != getattr(signal, "SIGUSR1", None):
                name = signal.Signals(signum).name
                abort_job(comm, f"interrupted by {name}", code=128 + signum, status="interrupted")
                return


def install_signal_handlers(comm=None):
    """Make SIGINT / SIGTERM / SIGHUP end the run as the module docstring says (SIGUSR1 is
    left alone until :func:`preempt_on` names it). Call from the main thread, after MPI is
    initialised. ``comm``: the world communicator (None: one process)."""
    _state["comm"] = comm
    if comm is None or comm.Get_size() == 1:
        for s in SIGNALS:
            if s != getattr(signal, "SIGUSR1", None):
                signal.signal(s, _raise_interrupted)
        _state["installed"] = True
        return
    if _state["sock"] is not None:
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for s in SIGNALS:
        if s != getattr(signal, "SIGUSR1", None):
            signal.signal(s, _ignore)
    _state.update(installed=True, sock=(reader, writer))
    thread = threading.Thread(target=_watch, args=(reader, comm), daemon=True, name="distnet-signals")
    thread.start()
    _state["thread"] = thread


def handle_preemption_signals(signals):
    """Catch the signals ``signals`` (numbers; SIGUSR1 is not caught until named here): on one
    process with the preemption handler, on several through the watcher thread. Main thread."""
    several = _state["sock"] is not None
    for s in signals:
        signal.signal(s, _ignore if several else _raise_interrupted)


def restore_default_handlers():
    """Back to Python's defaults (SIGINT raises KeyboardInterrupt), and no preemption pending
    (its grace timer stopped, even where no handler was installed); for tests."""
    preemption_done()
    _preempt.update(signals=frozenset(), requested=None)
    if not _state["installed"]:
        return
    for s in SIGNALS:
        signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)
    if _state["sock"] is not None:
        signal.set_wakeup_fd(-1)
        for sock in _state["sock"]:
            sock.close()
    _state.update(installed=False, sock=None, thread=None, comm=None)
