"""Deliberate failures, for testing that one rank's error ends the whole job (never a hang).

``DISTNET_FAULT_INJECT=RANK:EPOCH[:BATCH]`` makes world rank ``RANK`` raise
:class:`InjectedFault` right before training step ``BATCH`` (default 0) of epoch ``EPOCH``,
while the other ranks go on into that step's collectives (halo exchanges, Allreduce) and
wait for it. The run must then end on every rank with a non-zero exit and this rank's message
(the abort hook, :mod:`distnet.comm.abort`). Unset (the default), nothing is installed.

``RANK:EPOCH:BATCH:hang`` makes that rank loop forever instead (in Python, busy), for testing
the watchdog (:mod:`distnet.comm.watchdog`).
"""
import os
import time

from .errors import ConfigError

ENV = "DISTNET_FAULT_INJECT"


class InjectedFault(RuntimeError):
    """The failure :data:`ENV` asks for (deliberately not a DistnetError: it stands for a bug)."""


def parse_fault(spec):
    """``"R:E[:B]"`` -> ``(rank, epoch, batch)``; ConfigError for anything else (a trailing
    ``:hang`` is taken off by :func:`fault_hook` before)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not all(p.strip().isdigit() for p in parts):
        raise ConfigError(f"{ENV}={spec!r}: expected RANK:EPOCH or RANK:EPOCH:BATCH (integers), "
                          "optionally followed by :hang", where="environment")
    rank, epoch, *rest = (int(p) for p in parts)
    return rank, epoch, rest[0] if rest else 0


def fault_hook(rank, environ=None):
    """A ``callable(epoch, batch, nbatches)`` that the training loop
    (:mod:`distnet.experiments.loop`) calls before every step: it raises (or hangs) on this rank
    at the requested step. None when :data:`ENV` is unset or names another rank."""
    spec = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not spec:
        return None
    hang = spec.endswith(":hang")
    r, e, b = parse_fault(spec[:-len(":hang")] if hang else spec)
    if r != rank:
        return None

    def hook(epoch, batch, nbatches):
        if epoch == e and batch == min(b, nbatches - 1):
            while hang:
                time.sleep(0.01)
            raise InjectedFault(f"fault injected by {ENV}={spec} on rank {rank} before epoch "
                                f"{epoch}, batch {batch}")

    return hook
