"""What this process is doing, in words: the job's *phase* (``start-up``, ``data loading``,
``training``, ...) and a progress counter that moves whenever the process gets something done.

The watchdog (:mod:`.watchdog`) reads both on every rank: a job whose ranks all stop moving
for too long has stalled, and the phase says where. The failure records (:mod:`.abort`) name
the phase a rank failed in, and the signal handlers (:mod:`.signals`) decide by it whether a
preemption signal can still be answered with a checkpoint. No MPI here: one state per process,
written by the main thread (and by a background save), read by the others; a torn read costs
at most one heartbeat's accuracy.
"""
import contextlib
import threading
import time

#: The phases of a run, in the order a run goes through them (a phase may come again: training
#: and evaluation alternate). ``pretraining`` is GB's layer-wise pretraining.
PHASES = ("start-up", "restore", "data loading", "pretraining", "training", "evaluation", "checkpoint",
          "final checkpoint", "final evaluation", "finishing")
#: The phases in which a preemption signal is answered with a checkpoint at the next step (or
#: the end of the epoch); before them there is nothing new to save, after them the run ends anyway.
TRAINING = ("training", "evaluation", "checkpoint")

_lock = threading.Lock()
_state = {"name": "start-up", "entered": 0, "ticks": 0, "stamp": time.monotonic()}
_listeners = []
_tick_listeners = []


def enter(name):
    """This process begins phase ``name`` (one of :data:`PHASES`): counts as progress."""
    assert name in PHASES, name
    with _lock:
        _state["name"] = name
        _state["entered"] += 1
    tick()
    for fn in list(_listeners):
        fn(name)


def tick():
    """Something got done (a step, a chunk of data, an array of a checkpoint): progress."""
    _state["ticks"] += 1
    _state["stamp"] = time.monotonic()
    if _tick_listeners:
        for fn in list(_tick_listeners):
            fn(_state["name"])


def current():
    """The phase this process is in."""
    return _state["name"]


def snapshot():
    """``(phase, phases entered so far, ticks)``: the phase count is the same on every rank at
    the same point of a run (every rank enters the same phases in the same order), the ticks are
    not (a reader ticks per chunk it sends)."""
    with _lock:
        return _state["name"], _state["entered"], _state["ticks"]


@contextlib.contextmanager
def phase(name):
    """Phase ``name`` for the ``with`` block, then back to the one before."""
    before = current()
    enter(name)
    try:
        yield
    finally:
        enter(before)


def on_enter(fn):
    """Call ``fn(name)`` whenever a phase begins (a per-rank log says so). Returns ``fn``."""
    _listeners.append(fn)
    return fn


def on_tick(fn):
    """Call ``fn(phase name)`` at every :func:`tick` (fault injection inside a phase). Returns ``fn``."""
    _tick_listeners.append(fn)
    return fn


def reset(name="start-up"):
    """Back to a fresh process's state (a new run in the same process: tests, scripts)."""
    with _lock:
        _state.update(name=name, entered=0, ticks=0, stamp=time.monotonic())
