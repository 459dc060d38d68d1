"""The watchdog: end the job when it makes no progress for too long, naming the rank that stalled,
its host and its phase (``distnet run --watchdog SECONDS``, or the experiment key
``watchdog: SECONDS``).

Without it, a rank that stops (``SIGSTOP``, a swapped-out, frozen or lost node, an endless
loop) leaves every other rank spinning in its next collective forever.

Design (one daemon thread per rank, MPI only on a private duplicate of the world communicator,
and only non-blocking calls there, so the thread can always decide):

* **Progress.** Every rank counts what it gets done (:mod:`.phase`): each phase it enters
  (start-up, data loading, training, evaluation, checkpoint, ...), each training step
  (:meth:`Watchdog.progress`), each chunk of data it streams or hashes, each array of a
  checkpoint. The watchdog covers the whole run, from the moment every rank has rank 0's
  experiment to the end of the final checkpoint.
* **Heartbeats.** Every ``interval`` seconds (``min(1, SECONDS / 4)``) the thread of every rank
  sends rank 0 a small message: its host, phase, progress counters, step, epoch and batch, and
  *where its main thread is* (the innermost distnet frame, from :func:`sys._current_frames`:
  ``comm/...`` means it waits for other ranks, anything else means it computes). Rank 0 answers
  each rank with one small message (it is alive). That is ``2 (P - 1)`` messages of constant size
  per interval and O(P) work at rank 0. Never more than one unanswered send per destination, so a
  stopped rank costs nothing.
* **Deciding.** Rank 0 notes when each rank's counters last moved. When no rank has moved for
  SECONDS, the job has stalled, and rank 0 names who: ranks silent for three intervals or more
  (stopped, frozen or lost: a stopped process sends nothing, its threads stop too); else ranks
  behind the others (an earlier phase, or fewer steps); else ranks that are not waiting in
  communication while the others are (busy: an endless loop). It ends the job with
  :func:`~distnet.comm.abort.abort_job`: ``[rank 0] watchdog: no progress for S s (limit L s)
  in training at epoch E, batch B; stalled: rank Q on HOST (in PHASE; ...)``; the failure record
  names rank Q, its host and phase (``run.json``'s ``failed_rank``), and every rank ends. A rank
  that hears nothing from rank 0 for SECONDS (plus two intervals) names rank 0 instead.
* **Ending cleanly.** :meth:`Watchdog.close` (every rank at the same point) stops the threads
  and receives every heartbeat still in flight, so MPI finalises with no message unreceived
  (UCX warns of each one).

Choose SECONDS above the longest stretch in which no rank gets anything done: a training step,
one split's evaluation, reading a rank's tile from its files, the epoch's checkpoint.
"""
import os
import sys
import threading
import time

from . import phase
from .abort import abort_job

_TAG = 7301
_COMM_DIR = os.sep + "comm" + os.sep


def _main_thread_place():
    """``"path:line (function)"`` of the innermost distnet frame of the main thread, and whether
    it is in :mod:`distnet.comm` (waiting for other ranks)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        path = frame.f_code.co_filename
        if os.sep + "distnet" + os.sep in path and not path.endswith("watchdog.py"):
            short = path[path.rindex(os.sep + "distnet" + os.sep) + 1:]
            return f"{short}:{frame.f_lineno} ({frame.f_code.co_name})", _COMM_DIR in path
        frame = frame.f_back
    return "outside distnet", False


def _moved(state):
    """What changes when a rank gets something done (its phases entered and its ticks)."""
    return None if state is None else (state["entered"], state["ticks"])


class Watchdog:
    """See the module docstring. ``comm``: the world communicator (``Dup`` and one ``gather``
    of the host names are called on it: collective, every rank must create its watchdog at the
    same point; None or a world of one: this process alone). ``seconds`` > 0."""

    def __init__(self, comm, seconds, interval=None, clock=time.monotonic):
        from .launcher import host_name
        self.world = comm
        self.rank, self.size = (comm.Get_rank(), comm.Get_size()) if comm is not None else (0, 1)
        self.comm = comm.Dup() if self.size > 1 else None
        self.host = host_name()
        #: Rank 0: every rank's host (named in the verdict even for a rank never heard).
        self.hosts = self.comm.gather(self.host, root=0) if self.comm is not None else [self.host]
        self.seconds = float(seconds)
        self.interval = interval or min(1.0, self.seconds / 4)
        self.clock = clock
        now = clock()
        self.step, self.where = 0, None
        # rank 0: every rank's last heartbeat (when, what) and when its counters last moved;
        # another rank: rank 0's only
        ranks = range(self.size) if self.rank == 0 else (0,)
        self.heard = {r: now for r in ranks}
        self.moved = {r: now for r in ranks}
        self.state = {r: None for r in ranks}
        self.sent, self.received = {}, {r: 0 for r in range(self.size)}
        self._pending = {}
        self._stop = threading.Event()
        self._thread = None

    # -- the main thread's side -----------------------------------------------------------

    def progress(self, epoch=None, batch=None):
        """A training step begins (or an epoch ended): progress, and where the run is."""
        self.step += 1
        self.where = (epoch, batch)
        phase.tick()

    def start(self):
        self._thread = threading.Thread(target=self._loop, daemon=True, name="distnet-watchdog")
        self._thread.start()
        return self

    def stop(self):
        """Stop this rank's thread (not collective: a run that fails stops it on its own)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def close(self):
        """End the watchdog on every rank (collective over its communicator: every rank calls it
        at the same point, the end of a run): the threads stop, then each rank receives the
        heartbeats still on their way to it, so none is left unreceived when MPI finalises."""
        self.stop()
        comm, self.comm = self.comm, None
        if comm is None:
            return
        if self.rank == 0:      # what each rank sent rank 0, and what rank 0 sent each
            owed = comm.gather(0, root=0)
            comm.scatter([self.sent.get(r, 0) for r in range(self.size)], root=0)
        else:
            comm.gather(self.sent.get(0, 0), root=0)
            owed = [comm.scatter(None, root=0)] + [0] * (self.size - 1)
        for r in range(self.size):
            for _ in range(int(owed[r] or 0) - self.received[r]):
                comm.recv(source=r, tag=_TAG)
        for req in self._pending.values():
            req.wait()
        comm.Free()

    # -- the thread ---------------------------------------------------------------------------

    def _mine(self):
        place, in_comm = _main_thread_place()
        name, entered, ticks = phase.snapshot()
        return {"rank": self.rank, "host": self.host, "phase": name, "entered": entered, "ticks": ticks, "step": self.step,
                "where": self.where, "place": place, "in_comm": in_comm}

    def _send(self, dest, payload):
        req = self._pending.get(dest)
        if req is not None and not req.Test():
            return  # the last one is not delivered yet (a stopped receiver): send nothing more
        self._pending[dest] = self.comm.isend(payload, dest=dest, tag=_TAG)
        self.sent[dest] = self.sent.get(dest, 0) + 1

    def _note(self, r, state, now):
        if _moved(state) != _moved(self.state[r]):
            self.moved[r] = now
        self.state[r] = state

    def _exchange(self, now):
        if self.rank == 0:
            self.heard[0] = now
            self._note(0, self._mine(), now)
        while True:
            msg = self.comm.improbe(tag=_TAG)
            if msg is None:
                break
            payload = msg.recv()
            sender = payload["rank"]
            self.received[sender] += 1
            self.heard[sender] = now
            if self.rank == 0:
                self._note(sender, payload, now)
            else:
                self.state[0] = payload
        if self.rank == 0:
            for r in range(1, self.size):
                self._send(r, self._mine())
        else:
            self._send(0, self._mine())

    def table(self, now):
        """Rank 0: ``{rank: (seconds since heard, state or None)}`` of every rank."""
        return {r: (now - self.heard[r], self.state[r]) for r in range(self.size)}

    def _loop(self):
        while not self._stop.wait(self.interval):
            now = self.clock()
            try:
                if self.comm is not None:
                    self._exchange(now)
                elif self.size == 1:
                    self._note(0, self._mine(), now)
            except Exception:  # noqa: BLE001 - MPI is going down; the main thread will say why
                return
            verdict = self.verdict(now)
            if verdict is not None:
                message, about = verdict
                abort_job(self.world, message, code=1, status="failed", tb_hint=False, about=about)
                return

    def verdict(self, now):
        """``(message, about)`` when the job has stalled (rank 0, one process) or rank 0 fell
        silent (another rank), else None; ``about``: the stalled rank's record (rank, host, phase)."""
        if self.rank > 0:
            silent = now - self.heard[0]
            if silent <= self.seconds + 2 * self.interval:
                return None
            state = self.state[0] or {}
            return (f"{self._head(silent, state)}; stalled: rank 0 on {self.hosts[0] if self.hosts else state.get('host', '?')} "
                    f"(no heartbeat for {silent:.0f} s: stopped, lost, or hung outside Python)",
                    {"rank": 0, "host": state.get("host"), "phase": state.get("phase")})
        still = now - max(self.moved.values())
        if still <= self.seconds:
            return None
        if self.size == 1:
            mine = self._mine()
            return f"{self._head(still, mine)}; stalled: this process, in {mine['place']}", None
        ranks, words = stalled_ranks(self.table(now), min(self.seconds, SILENT_BEATS * self.interval), self.hosts)
        first = self.state.get(ranks[0]) if ranks else None
        about = {"rank": ranks[0], "host": self.hosts[ranks[0]],
                 "phase": (first or {}).get("phase", "start-up")} if ranks else None
        return f"{self._head(still, self.state[0] or self._mine())}; stalled: {words}", about

    def _head(self, seconds, state):
        """``watchdog: no progress for S s (limit L s) in PHASE[ at epoch E, batch B]``."""
        where = state.get("where") or (None, None)
        at = f" at epoch {where[0]}, batch {where[1]}" if state.get("phase") == "training" and where[0] is not None else ""
        return (f"watchdog: no progress for {seconds:.0f} s (limit {self.seconds:g} s) in "
                f"{state.get('phase', 'start-up')}{at}")


#: A rank not heard for this many heartbeat intervals when the job has stalled is silent
#: (stopped or lost): a live rank's thread sends one every interval, busy or waiting, so one
#: that stopped a moment after its last heartbeat is not taken for a busy one.
SILENT_BEATS = 3
#: At most this many ranks are described in a verdict; the rest are counted.
NAMED_RANKS = 4


def _some(ranks, describe):
    text = ", ".join(describe(r) for r in ranks[:NAMED_RANKS])
    return text + (f" and {len(ranks) - NAMED_RANKS} more" if len(ranks) > NAMED_RANKS else "")


def _at(s):
    where = s.get("where") or ("?", "?")
    return f"step {s['step']}, epoch {where[0]}, batch {where[1]}"


def stalled_ranks(table, seconds, hosts=None):
    """``(ranks, words)``: which ranks stalled and what they did, the first :data:`NAMED_RANKS`
    described and the rest counted, from ``{rank: (seconds since heard, state or None)}``
    (a state: the heartbeat's ``host``, ``phase``, ``entered``, ``step``, ``where``, ``place``,
    ``in_comm``; ``hosts``: every rank's host): silent ones first (not heard for more than
    ``seconds``), else those behind (an earlier phase, or fewer steps), else the busy ones."""
    def name(r):
        host = (hosts[r] if hosts else None) or (table[r][1] or {}).get("host")
        return f"rank {r} on {host}" if host else f"rank {r}"
    silent = [r for r, (age, _) in sorted(table.items()) if age > seconds]
    if silent:
        def quiet(r):
            s = table[r][1]
            was = f"in {s['phase']}; " if s else "never heard; "
            return f"{name(r)} ({was}no heartbeat for {table[r][0]:.0f} s: stopped, lost, or hung outside Python)"
        return silent, _some(silent, quiet)
    known = {r: s for r, (_, s) in table.items() if s is not None}
    if not known:
        return [], "unknown (no heartbeats heard)"
    top = max((s["entered"], s["step"]) for s in known.values())
    behind = [r for r, s in sorted(known.items()) if (s["entered"], s["step"]) < top]
    if behind:
        ahead = next(s for s in known.values() if (s["entered"], s["step"]) == top)

        def late(r):
            s = known[r]
            if s["phase"] != ahead["phase"] or s["entered"] != ahead["entered"]:
                return f"{name(r)} (in {s['phase']} while others reached {ahead['phase']}; in {s['place']})"
            return f"{name(r)} (at {_at(s)}, while others reached step {top[1]}; in {s['place']})"
        return behind, _some(behind, late)
    busy = [r for r, s in sorted(known.items()) if not s["in_comm"]]
    if busy and len(busy) < len(known):
        return busy, _some(busy, lambda r: f"{name(r)} (busy in {known[r]['place']} while the others wait in "
                                           "communication)")
    return [], "no single rank: " + _some(sorted(known), lambda r: f"{name(r)} in {known[r]['place']}").replace(", ", "; ")
