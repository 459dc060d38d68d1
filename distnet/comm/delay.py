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

_state = {"delay": None}


def comm_delay():
    """Seconds added to every gradient Allreduce (0: none)."""
    if _state["delay"] is None:
        try:
            _state["delay"] = max(0.0, float(os.environ.get("DISTNET_COMM_DELAY", "0") or 0))
        except ValueError:
            _state["delay"] = 0.0
    return _state["delay"]


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
