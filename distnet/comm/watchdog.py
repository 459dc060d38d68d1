"""The watchdog: end the job when training makes no progress for too long, naming the rank that
stalled (``distnet run --watchdog SECONDS``, or the experiment key ``watchdog: SECONDS``).

Without it, a rank that stops (``SIGSTOP``, a swapped-out or frozen node, an endless loop) leaves
every other rank spinning in its next collective forever.

Design (one daemon thread per rank, MPI only on a private duplicate of the world communicator,
and only non-blocking calls there, so the thread can always decide):

* **Progress.** The training loop calls :meth:`Watchdog.progress` before every step (the CLI's
  ``batch`` hook) and after every epoch: it stores a counter, the epoch and batch, and the time.
* **Heartbeats.** Every ``interval`` seconds (``min(1, SECONDS / 4)``) the thread of every rank
  sends rank 0 a small message: its step counter, its epoch and batch, *where its main thread
  is* (the innermost distnet frame, from :func:`sys._current_frames`: ``comm/...`` means it
  waits for other ranks, anything else means it computes) and whether its own stall clock ran
  out. Rank 0's thread answers every rank with one small message: that it is alive, and, to a
  rank whose clock ran out, rank 0's verdict of who stalled. That is ``2 (P - 1)`` messages of
  constant size per interval, O(P) work at rank 0 (the table of all ranks stays on rank 0).
  Never more than one unanswered send per destination, so a stopped rank costs nothing.
* **Deciding.** A rank whose own progress stamp is older than SECONDS decides who stalled:
  ranks silent for longer than SECONDS (stopped: a stopped process sends nothing, its threads
  stop too); else ranks whose step counter is behind the others'; else ranks
  that are not waiting in communication while the others are (busy: an endless loop). Rank 0,
  which hears everyone directly, decides first; the others wait ``2 * interval`` longer, use
  rank 0's verdict, and name rank 0 if rank 0 itself fell silent. The deciding rank ends the
  job with :func:`~distnet.comm.abort.abort_job`: ``[rank R] watchdog: no training progress for
  S s at epoch E, batch B; stalled: rank Q (...)``, the abort listeners record it, every rank
  ends.

The stall clock starts at the first step; setup, data loading and the final evaluation are not
watched. Choose SECONDS above the longest step plus what happens at the end of an epoch
(evaluation with ``eval_every``, a checkpoint write).
"""
import os
import sys
import threading
import time

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


class Watchdog:
    """See the module docstring. ``comm``: the world communicator (``Dup`` is called on it:
    collective, every rank must create its watchdog at the same point). ``seconds`` > 0."""

    def __init__(self, comm, seconds, interval=None, clock=time.monotonic):
        self.world = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.comm = comm.Dup() if self.size > 1 else None
        self.seconds = float(seconds)
        self.interval = interval or min(1.0, self.seconds / 4)
        self.clock = clock
        now = clock()
        self.step, self.where, self.stamp, self.armed = 0, None, now, False
        # rank 0: the last heartbeat time and state (step, where, place, in_comm) of every rank;
        # another rank: rank 0's only
        ranks = range(self.size) if self.rank == 0 else (0, self.rank)
        self.heard = {r: now for r in ranks}
        self.state = {r: None for r in ranks}
        self.verdict = None       # a rank > 0: rank 0's answer when this rank's clock ran out
        self._pending = {}
        self._stop = threading.Event()
        self._thread = None

    # -- the main thread's side -----------------------------------------------------------

    def progress(self, epoch=None, batch=None):
        """A step begins (or an epoch ended): restart the stall clock."""
        self.step += 1
        self.where = (epoch, batch)
        self.stamp = self.clock()
        self.armed = True

    def start(self):
        self._thread = threading.Thread(target=self._loop, daemon=True, name="distnet-watchdog")
        self._thread.start()
        return self

    def stop(self):
        self.armed = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- the thread ---------------------------------------------------------------------------

    def _mine(self):
        place, in_comm = _main_thread_place()
        return (self.step, self.where, place, in_comm)

    def _send(self, dest, payload):
        req = self._pending.get(dest)
        if req is not None and not req.Test():
            return  # the last one is not delivered yet (a stopped receiver): send nothing more
        self._pending[dest] = self.comm.isend((self.rank, payload), dest=dest, tag=_TAG)

    def _late(self, now):
        return self.armed and now - self.stamp > self.seconds

    def _exchange(self, now):
        mine = self._mine()
        self.state[self.rank], self.heard[self.rank] = mine, now
        asked = []
        while True:
            msg = self.comm.improbe(tag=_TAG)
            if msg is None:
                break
            sender, payload = msg.recv()
            self.heard[sender] = now
            if self.rank > 0:
                self.verdict = payload
            else:
                self.state[sender] = payload[1]
                if payload[0] == "late":
                    asked.append(sender)
        if self.rank == 0:
            verdict = stalled_ranks(self.table(now), self.seconds) if asked else None
            for r in range(1, self.size):
                self._send(r, verdict if r in asked else None)
        else:
            self._send(0, ("late" if self._late(now) else "ok", mine))

    def table(self, now):
        """Rank 0: ``{rank: (seconds since heard, state)}`` of every rank."""
        return {r: (now - self.heard[r], self.state[r]) for r in range(self.size)}

    def _loop(self):
        while not self._stop.wait(self.interval):
            now = self.clock()
            try:
                if self.comm is not None:
                    self._exchange(now)
            except Exception:  # noqa: BLE001 - MPI is going down; the main thread will say why
                return
            late = now - self.stamp
            grace = 0 if self.rank == 0 else 2 * self.interval
            if self.armed and late > self.seconds + grace:
                abort_job(self.world, self.diagnosis(now), code=1, status="failed", tb_hint=False)
                return

    def diagnosis(self, now):
        """The message of an abort: how long, where, and which rank(s) stalled."""
        epoch, batch = self.where or (None, None)
        head = (f"watchdog: no training progress for {now - self.stamp:.0f} s (limit {self.seconds:g} s) "
                f"at epoch {epoch}, batch {batch}")
        if self.size == 1:
            return f"{head}; stalled: this process, in {self._mine()[2]}"
        if self.rank == 0:
            return f"{head}; stalled: {stalled_ranks(self.table(now), self.seconds)}"
        silent0 = now - self.heard[0]
        if silent0 > self.seconds:
            return (f"{head}; stalled: rank 0 (no heartbeat for {silent0:.0f} s: stopped, or hung "
                    "outside Python)")
        return f"{head}; stalled: {self.verdict or 'unknown (rank 0 has not said yet)'}"


#: At most this many ranks are described in a verdict; the rest are counted.
NAMED_RANKS = 4


def _some(ranks, describe):
    text = ", ".join(describe(r) for r in ranks[:NAMED_RANKS])
    return text + (f" and {len(ranks) - NAMED_RANKS} more" if len(ranks) > NAMED_RANKS else "")


def stalled_ranks(table, seconds):
    """Which ranks stalled, in words (the first :data:`NAMED_RANKS` of them, the rest counted),
    from ``{rank: (seconds since heard, (step, (epoch, batch), place, in_comm) or None)}``: silent
    ones first, else those behind, else the busy ones."""
    silent = [r for r, (age, _) in sorted(table.items()) if age > seconds]
    if silent:
        return _some(silent, lambda r: f"rank {r} (no heartbeat for {table[r][0]:.0f} s: stopped, or hung "
                                       "outside Python)")
    known = {r: s for r, (_, s) in table.items() if s is not None}
    if not known:
        return "unknown (no heartbeats heard)"
    top = max(s[0] for s in known.values())
    behind = [r for r, s in sorted(known.items()) if s[0] < top]
    if behind:
        return _some(behind, lambda r: f"rank {r} (at step {known[r][0]}, epoch {known[r][1][0] if known[r][1] else '?'}, "
                                       f"batch {known[r][1][1] if known[r][1] else '?'}, while others reached step {top}; "
                                       f"in {known[r][2]})")
    busy = [r for r, s in sorted(known.items()) if not s[3]]
    if busy and len(busy) < len(known):
        return _some(busy, lambda r: f"rank {r} (busy in {known[r][2]} while the others wait in communication)")
    return "no single rank: " + _some(sorted(known), lambda r: f"rank {r} in {known[r][2]}").replace(", ", "; ")
