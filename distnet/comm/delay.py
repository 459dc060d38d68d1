"""An artificially slow transport, for benchmarks: every gradient Allreduce (``kind=
"allreduce_grad"`` in :mod:`distnet.comm.reduce`) takes ``delay``
seconds more, as if the network were slow, so that what overlap hides can be measured on one
machine.

``DISTNET_COMM_DELAY=0.005`` (read when a reduction runs, never at import) or
:func:`injected_delay` sets it. A blocking :func:`~distnet.comm.reduce.allreduce_sum` sleeps the
delay after its Allreduce; a nonblocking one (:func:`~distnet.comm.reduce.allreduce_sum_start`)
completes no earlier than ``delay`` seconds after it was started, so computation done meanwhile
hides the delay as it would hide a slow wire. Off (0) by default; the check costs one lookup.
"""
import os
import time
from contextlib import contextmanager

_state = {"delay": None, "halo": None, "per_mib": None}
_wire = {"free": 0.0}


def _read(key, var):
    if _state[key] is None:
        try:
            _state[key] = max(0.0, float(os.environ.get(var, "0") or 0))
        except ValueError:
            _state[key] = 0.0
    return _state[key]


def comm_delay():
    """Seconds added to every gradient Allreduce (0: none)."""
    return _read("delay", "DISTNET_COMM_DELAY")


def seconds_per_mib():
    """Seconds per MiB added to every gradient Allreduce (0: none)."""
    return _read("per_mib", "DISTNET_COMM_SECONDS_PER_MIB")


def blocking_delay(nbytes):
    """Seconds a blocking gradient Allreduce of ``nbytes`` sleeps after it (0: no injection)."""
    return comm_delay() + seconds_per_mib() * nbytes / 2**20


def wire_ready_at(started, nbytes):
    """When a nonblocking gradient Allreduce of ``nbytes`` started at ``started`` may complete:
    its bytes go on the wire after those of the sums before it, then the fixed delay (None: no
    injection)."""
    delay, rate = comm_delay(), seconds_per_mib()
    if not delay and not rate:
        return None
    end = max(started, _wire["free"]) + rate * nbytes / 2**20
    _wire["free"] = end
    return end + delay


@contextmanager
def injected_bandwidth(seconds_per_mib_):
    """Within the block, every gradient Allreduce takes ``seconds_per_mib_`` per MiB more."""
    before = _state["per_mib"]
    _state["per_mib"] = max(0.0, float(seconds_per_mib_))
    try:
        yield
    finally:
        _state["per_mib"] = before


def halo_delay():
    """Seconds a forward halo exchange takes at least (0: no delay)."""
    return _read("halo", "DISTNET_HALO_DELAY")


@contextmanager
def injected_halo_delay(seconds):
    """Within the block, every forward halo exchange takes at least ``seconds``."""
    before = _state["halo"]
    _state["halo"] = max(0.0, float(seconds))
    try:
        yield
    finally:
        _state["halo"] = before


@contextmanager
def injected_delay(seconds):
    """Within the block, every gradient Allreduce takes ``seconds`` more."""
    before = _state["delay"]
    _state["delay"] = max(0.0, float(seconds))
    try:
        yield
    finally:
        _state["delay"] = before


def sleep_until(t):
    """Sleep until ``time.perf_counter() >= t``."""
    left = t - time.perf_counter()
    if left > 0:
        time.sleep(left)
