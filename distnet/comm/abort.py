"""Failure handling for multi-rank runs: one rank's error must end the whole run, never leave the
other ranks waiting forever in a collective.

* :func:`install_abort_hook`: an uncaught exception on any rank prints ``[rank R] Type: message``
  and calls ``comm.Abort(1)``, which ends every rank (idea: chainermn's ``global_except_hook``).
* :func:`add_abort_listener`: callbacks told the failure's record (:func:`failure_record`: the
  rank it is about, its host and phase, the status and the message) right before this rank
  aborts the job (the CLI records it in the run directory).
* :func:`abort_job`: the one way out used by the hook, the signal handlers and the watchdog.
* :func:`start_failure_relay`: a failing rank's report reaches rank 0's listeners before the job
  ends, so the run record on rank 0's node says why even when another node failed.
* :func:`run_collectively`: run a step that may fail on some ranks only (reading a file, checking a
  config) and make every rank agree on the outcome, so they either all go on or all raise.
"""
import os
import sys
import threading
import time
import traceback

from ..errors import ConfigError, DistnetError

_state = {"comm": None, "orig": None, "orig_thread": None}
_listeners = []
_abort_lock = threading.Lock()


def _debug():
    return os.environ.get("DISTNET_DEBUG", "") not in ("", "0")


def add_abort_listener(fn):
    """Call ``fn(record)`` (a :func:`failure_record`) before this rank aborts the job. Exceptions
    of ``fn`` are ignored. Returns ``fn``."""
    _listeners.append(fn)
    return fn


def failure_record(rank, status, message, host=None, phase=None, noticed_by=None):
    """What a failure record says (``run.json``'s ``failures``, the abort listeners' argument):
    ``{"rank", "host", "phase", "status", "error"}`` (``status``: ``failed``, ``interrupted`` or
    ``preempted``), and ``noticed_by`` when another rank than ``rank`` tells it (the watchdog
    names the rank that stalled). ``host`` and ``phase`` default to this process's."""
    from .launcher import host_name
    from .phase import current
    record = {"rank": rank, "host": host or host_name(), "phase": phase or current(), "status": status,
              "error": message}
    if noticed_by is not None and noticed_by != rank:
        record["noticed_by"] = noticed_by
    return record


def _tell_listeners(record):
    for fn in list(_listeners):
        try:
            fn(record)
        except Exception:  # noqa: BLE001 - a record that cannot be written must not stop the abort
            pass


def abort_job(comm, message, code=1, status="failed", detail="", hint=True, tb_hint=True, about=None):
    """Print ``[rank R] message`` (and, with ``hint``, ``[rank R] aborting all N ranks``), tell
    the listeners, and ``comm.Abort(code)``: ends every rank of the job. Safe from any thread;
    the first caller of a process does it, later ones wait. Never returns.

    about : ``{"rank", "host", "phase"}`` of the rank the failure is about when it is another
        one's (the watchdog's verdict); default this rank's own."""
    rank = comm.Get_rank()
    if not _abort_lock.acquire(timeout=10):
        return
    try:
        try:
            if detail:
                sys.stderr.write(detail)
            if comm.Get_size() == 1:
                sys.stderr.write(f"distnet: {message}\n")
            else:
                sys.stderr.write(f"[rank {rank}] {message}\n")
                if hint:
                    sys.stderr.write(f"[rank {rank}] aborting all {comm.Get_size()} ranks"
                                     f"{'' if _debug() or not tb_hint or status != 'failed' else ' (DISTNET_DEBUG=1 shows the traceback)'}\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - stderr may be gone; abort anyway
            pass
        about = dict(about or {})
        record = failure_record(about.get("rank", rank), status, message, about.get("host"), about.get("phase"),
                                noticed_by=rank)
        _tell_listeners(record)
        _relay_to_root(rank, record)
        # Give the launcher a moment to forward this message before Abort kills the job.
        time.sleep(0.5)
    finally:
        try:
            comm.Abort(code)
        finally:  # Abort does not return; should it (the job already going down), end anyway
            os._exit(code)


# -- the failure relay: a failing rank tells rank 0 before it aborts the job -------------------

_RELAY_TAG = 7302
#: How long a failing rank waits for rank 0 to confirm that it recorded the failure.
RELAY_WAIT = 3.0
#: How often rank 0's relay thread looks for reports.
RELAY_POLL = 0.1
_relay = {"comm": None, "stop": None, "thread": None}


def start_failure_relay(comm):
    """Make every rank's abort reach rank 0's abort listeners (the run directory on rank 0's
    node, which other nodes cannot see). Collective over ``comm`` (``Dup``: a private
    communicator). Rank 0 runs a daemon thread that looks for reports every :data:`RELAY_POLL`
    seconds (one ``improbe``: nothing else), tells its listeners the record of
    the failing rank and confirms; a failing rank > 0 sends its report in :func:`abort_job` and
    waits at most :data:`RELAY_WAIT` seconds for the confirmation (rank 0 may be stopped) before
    it ends the job. One message per failing rank: O(1) per interval at rank 0 when all is well.
    Stopped by :func:`stop_failure_relay` (also at exit, before MPI finalises)."""
    if comm.Get_size() == 1 or _relay["comm"] is not None:
        return
    from mpi4py import MPI
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:   # the same answer on every rank: all skip the Dup
        return
    import atexit
    _relay["comm"] = comm.Dup()
    if comm.Get_rank() == 0:
        stop = _relay["stop"] = threading.Event()
        thread = _relay["thread"] = threading.Thread(target=_relay_loop, args=(_relay["comm"], stop),
                                                     daemon=True, name="distnet-failure-relay")
        thread.start()
    atexit.register(stop_failure_relay)


def stop_failure_relay():
    """End rank 0's relay thread (every rank: forget the relay). Not collective."""
    stop, thread = _relay["stop"], _relay["thread"]
    if stop is not None:
        stop.set()
        thread.join(timeout=2 * RELAY_POLL + 1)
    _relay.update(comm=None, stop=None, thread=None)


def _relay_loop(comm, stop):
    while not stop.wait(RELAY_POLL):
        try:
            while True:
                msg = comm.improbe(tag=_RELAY_TAG)
                if msg is None:
                    break
                rank, record = msg.recv()
                _tell_listeners(record)
                comm.isend(True, dest=rank, tag=_RELAY_TAG + 1)
        except Exception:  # noqa: BLE001 - MPI is going down: the failing rank aborts anyway
            return


def _relay_to_root(rank, record):
    """On a rank > 0 with a relay: send rank 0 this abort's record and wait (bounded) until it
    was recorded there."""
    comm = _relay["comm"]
    if comm is None or rank == 0:
        return
    try:
        comm.isend((rank, record), dest=0, tag=_RELAY_TAG)
        done = comm.irecv(source=0, tag=_RELAY_TAG + 1)
        deadline = time.monotonic() + RELAY_WAIT
        while time.monotonic() < deadline:
            if done.Test():
                return
            time.sleep(0.01)
    except Exception:  # noqa: BLE001 - a report that cannot be sent must not stop the abort
        pass


def _report_and_abort(comm, exc_type, exc, tb, where=""):
    if issubclass(exc_type, KeyboardInterrupt):
        abort_job(comm, f"interrupted (KeyboardInterrupt){where}", code=130, status="interrupted")
        return
    detail = "".join(traceback.format_exception(exc_type, exc, tb)) if _debug() else ""
    abort_job(comm, f"{exc_type.__name__}: {exc}{where}", code=1, detail=detail)


def _hook(exc_type, exc, tb):
    comm = _state["comm"]
    if comm is None or comm.Get_size() == 1:
        (_state["orig"] or sys.__excepthook__)(exc_type, exc, tb)
        return
    _report_and_abort(comm, exc_type, exc, tb)


def _thread_hook(args):
    comm = _state["comm"]
    if comm is None or comm.Get_size() == 1 or args.exc_type is SystemExit:
        (_state["orig_thread"] or threading.__excepthook__)(args)
        return
    name = getattr(args.thread, "name", "?")
    _report_and_abort(comm, args.exc_type, args.exc_value, args.exc_traceback,
                      where=f" (in thread {name})")


def install_abort_hook(comm):
    """Make an uncaught exception on this rank abort every rank of ``comm``'s job.

    comm : the world communicator (mpi4py ``Comm`` or ``SerialComm``). With size 1 the usual
        traceback is printed and nothing is aborted. Calling again replaces the communicator.
    Covers the main thread (``sys.excepthook``) and other threads (``threading.excepthook``).
    """
    if _state["orig"] is None:
        _state["orig"] = sys.excepthook
        _state["orig_thread"] = threading.excepthook
    _state["comm"] = comm
    sys.excepthook = _hook
    threading.excepthook = _thread_hook


def uninstall_abort_hook():
    """Restore the hooks that were in place before :func:`install_abort_hook`."""
    if _state["orig"] is not None:
        sys.excepthook = _state["orig"]
        threading.excepthook = _state["orig_thread"]
    _state.update(comm=None, orig=None, orig_thread=None)


#: At most this many failing ranks (and their messages) are named in one error; the rest are counted.
NAMED_FAILURES = 4


class RemoteError(DistnetError):
    """Raised on the ranks where a collectively-run step succeeded while other ranks failed.

    ``failures``: list of ``(rank, "Type: message")`` of the ranks that failed. ``exit_code``:
    that of the lowest failing rank's error (what that rank exits with).
    """

    def __init__(self, failures, exit_code=1, count=None):
        self.failures = failures
        self.exit_code = exit_code
        self.count = len(failures) if count is None else count
        groups = {}     # ranks that failed alike, said once
        for r, m in failures[:NAMED_FAILURES]:
            groups.setdefault(m, []).append(r)
        text = "; ".join(f"rank {', '.join(map(str, rs))}: {m}" for m, rs in groups.items())
        more = self.count - min(len(failures), NAMED_FAILURES)
        super().__init__(f"failed on {self.count} other rank(s): {text}" + (f"; and {more} more" if more > 0 else ""))


def _config_place(error):
    """``(where, key, bare message)`` of a :class:`ConfigError` that names its place in the
    experiment file, else None."""
    if isinstance(error, ConfigError) and error.where:
        return (error.where, error.key, error.bare_message)
    return None


def run_collectively(fn, comm, *args, **kwargs):
    """``fn(*args, **kwargs)`` on every rank of ``comm``, with one agreed outcome.

    If every rank succeeds, returns this rank's result. If any rank raises, every rank raises:
    the failing ranks re-raise their own exception, the others :class:`RemoteError` naming the
    failed ranks and their messages. Collective over ``comm`` (one ``gather`` of a small
    object to rank 0, one ``bcast`` of a bounded verdict back: O(P) at rank 0, the first
    :data:`NAMED_FAILURES` failing ranks named and the rest counted). ``fn`` itself must not
    call collectives that a failing rank could skip: use this for
    local steps (reading files, validating input) whose failure would otherwise desynchronise
    the ranks. Every rank's error gets the ``exit_code`` of the lowest failing rank's
    (:class:`DistnetError`'s, else 1), so that the job's exit status does not depend on which
    rank ends it first; ranks failing with a :class:`ConfigError` at the same file:line and key
    as the lowest failing rank raise that rank's message (one error of the job, one text).
    """
    try:
        result, error = fn(*args, **kwargs), None
    except Exception as e:  # noqa: BLE001 - re-raised below, on every rank
        result, error = None, e
    if comm.Get_size() == 1:
        if error is not None:
            raise error
        return result
    mine = None if error is None else (f"{type(error).__name__}: {error}",
                                       error.exit_code if isinstance(error, DistnetError) else 1,
                                       _config_place(error))
    # rank 0 gathers the outcomes and sends back one verdict of bounded size (the first failing
    # ranks, their count, the lowest one's exit code and place): O(P) at rank 0, O(1) elsewhere
    outcomes = comm.gather(mine, root=0)
    verdict = None
    if outcomes is not None:
        failed = [(r, m) for r, m in enumerate(outcomes) if m is not None]
        if failed:
            verdict = ([(r, m[0]) for r, m in failed[:NAMED_FAILURES]], len(failed), failed[0][1][1], failed[0][1][2])
    verdict = comm.bcast(verdict, root=0)
    if error is not None:
        code, first = verdict[2], verdict[3]
        place = _config_place(error)
        if place is not None and first is not None and place[:2] == first[:2] and place[2] != first[2]:
            # one setting of the file that each rank found in its own tile (a scale that overflows
            # its values): the job's error, said alike on every rank, in the lowest rank's words
            error = ConfigError(first[2], *place[:2])
        if isinstance(error, DistnetError) and error.exit_code != code:
            error.exit_code = code      # another rank's error came first: exit as that rank does
        raise error
    if verdict is not None:
        raise RemoteError(verdict[0], verdict[2], count=verdict[1])
    return result
