"""Deliberate failures, for testing that one rank's error ends the whole job (never a hang), and
that the watchdog and the run record name a rank that stalls or a node that is lost.

``DISTNET_FAULT_INJECT=RANK:EPOCH[:BATCH]`` makes world rank ``RANK`` raise
:class:`InjectedFault` right before training step ``BATCH`` (default 0) of epoch ``EPOCH``,
while the other ranks go on into that step's collectives (halo exchanges, Allreduce) and
wait for it. The run must then end on every rank with a non-zero exit and this rank's message
(the abort hook, :mod:`distnet.comm.abort`). Unset (the default), nothing is installed.

``RANK:EPOCH:BATCH:hang`` makes that rank loop forever instead (in Python, busy), for testing
the watchdog (:mod:`distnet.comm.watchdog`).

``RANK:PHASE[:N]:ACTION`` acts when rank ``RANK`` enters its ``N``-th (default first) phase
``PHASE`` (:data:`~distnet.comm.phase.PHASES`, spaces written ``_``: ``start-up``,
``data_loading``, ``checkpoint`` ...); ``PHASE+K`` at the ``K``-th progress inside it instead
(``checkpoint+1``: once the save has written its first array): ``raise``, ``hang`` (a busy
loop), or ``stop`` (the process stops itself with SIGSTOP, as a frozen or lost node does: no
heartbeat, no reply).
"""
import os
import signal
import time

from .errors import ConfigError

ENV = "DISTNET_FAULT_INJECT"
ACTIONS = ("raise", "hang", "stop")


class InjectedFault(RuntimeError):
    """The failure :data:`ENV` asks for (deliberately not a DistnetError: it stands for a bug)."""


def _bad(spec):
    return ConfigError(f"{ENV}={spec!r}: expected RANK:EPOCH or RANK:EPOCH:BATCH (integers), optionally "
                       f"followed by :hang, or RANK:PHASE[:N]:{'|'.join(ACTIONS)}", where="environment")


def parse_fault(spec):
    """``"R:E[:B]"`` -> ``(rank, epoch, batch)``; ConfigError for anything else (a trailing
    ``:hang`` is taken off by :func:`fault_hook` before)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not all(p.strip().isdigit() for p in parts):
        raise _bad(spec)
    rank, epoch, *rest = (int(p) for p in parts)
    return rank, epoch, rest[0] if rest else 0


def parse_phase_fault(spec):
    """``"R:PHASE[+K][:N]:ACTION"`` -> ``(rank, phase, n, action, k)``, or None for a step fault
    (``R:E[:B][:hang]``); ConfigError for a phase or action that does not exist."""
    from .comm.phase import PHASES
    parts = spec.split(":")
    if len(parts) < 2 or parts[1].strip().isdigit():
        return None
    if len(parts) not in (3, 4) or not parts[0].isdigit() or parts[-1] not in ACTIONS:
        raise _bad(spec)
    name, _, inside = parts[1].replace("_", " ").partition("+")
    if name not in PHASES or (len(parts) == 4 and not parts[2].isdigit()) or (inside and not inside.isdigit()):
        raise _bad(spec)
    return int(parts[0]), name, int(parts[2]) if len(parts) == 4 else 1, parts[-1], int(inside or 0)


#: Seconds a ``stop`` fault waits before the process stops itself: a node that freezes inside a
#: phase has been in it a while, so its last heartbeat (at most a second apart) names that phase.
STOP_AFTER = 1.5


def _act(action, message):
    if action == "stop":
        time.sleep(STOP_AFTER)
        os.kill(os.getpid(), signal.SIGSTOP)
    while action in ("hang", "stop"):
        time.sleep(0.01)
    raise InjectedFault(message)


def install_phase_fault(rank, environ=None):
    """Arm a ``RANK:PHASE[:N]:ACTION`` fault of :data:`ENV` on this rank (``rank``: its world
    rank, as its launcher announced it); nothing for another rank or a step fault."""
    spec = (os.environ if environ is None else environ).get(ENV, "").strip()
    fault = parse_phase_fault(spec) if spec else None
    if fault is None or fault[0] != rank:
        return
    from .comm.phase import on_enter, on_tick
    _, name, n, action, inside = fault
    seen, ticks = [], []

    def listener(entered):
        if entered == name:
            seen.append(entered)
            if len(seen) == n and not inside:
                _act(action, f"fault injected by {ENV}={spec} on rank {rank} entering {name}")

    def ticked(now):
        if now == name and len(seen) == n:
            ticks.append(now)
            if len(ticks) == inside:
                _act(action, f"fault injected by {ENV}={spec} on rank {rank} in {name}")
    on_enter(listener)
    if inside:
        on_tick(ticked)


def fault_hook(rank, environ=None):
    """A ``callable(epoch, batch, nbatches)`` that the training loop
    (:mod:`distnet.experiments.loop`) calls before every step: it raises (or hangs) on this rank
    at the requested step. None when :data:`ENV` is unset, names another rank or a phase."""
    spec = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not spec or parse_phase_fault(spec) is not None:
        return None
    hang = spec.endswith(":hang")
    r, e, b = parse_fault(spec[:-len(":hang")] if hang else spec)
    if r != rank:
        return None

    def hook(epoch, batch, nbatches):
        if epoch == e and batch == min(b, nbatches - 1):
            _act("hang" if hang else "raise", f"fault injected by {ENV}={spec} on rank {rank} before epoch "
                                              f"{epoch}, batch {batch}")

    return hook
