"""A byte counter for what the comm layer sends, off by default and free when off.

``GlobalArray`` (halo exchange and its adjoint) and ``allreduce_sum`` call :func:`record` only
after checking the module-level flag ``TRAFFIC.enabled`` (one attribute read per message batch
when off). Benchmarks and tests switch it on with :func:`counting` and read per-kind totals:

* ``halo_fwd`` / ``halo_bwd``: bytes this rank *sent* in halo exchanges / adjoint exchanges
  (message payloads, the ghost boxes), keyed also by the layer's tag;
* ``allreduce_grad``: payload bytes this rank contributed to gradient Allreduces (the training
  step's buckets, ``allreduce_sum(..., kind="allreduce_grad")``; each rank
  contributes its whole flat bucket; what a ring or tree algorithm puts on the wire is about
  ``2 (P-1)/P`` times that);
* ``allreduce_act``: payload bytes of activation Allreduces (partial pre-activations of a
  sharded FC layer, vecpar input gradients).
"""
from collections import defaultdict
from contextlib import contextmanager


class Traffic:
    """Totals per kind (bytes, messages) and per ``(kind, tag)`` bytes."""

    def __init__(self):
        self.enabled = False
        self.reset()

    def reset(self):
        self.bytes = defaultdict(int)
        self.messages = defaultdict(int)
        self.by_tag = defaultdict(int)

    def record(self, kind, nbytes, messages=1, tag=None):
        self.bytes[kind] += int(nbytes)
        self.messages[kind] += int(messages)
        if tag is not None:
            self.by_tag[(kind, tag)] += int(nbytes)

    def snapshot(self):
        """``{"bytes": {kind: n}, "messages": {kind: n}, "by_tag": {"kind/tag": n}}`` (plain dicts)."""
        return {"bytes": dict(self.bytes), "messages": dict(self.messages),
                "by_tag": {f"{k}/{t}": n for (k, t), n in self.by_tag.items()}}


#: The process-wide counter.
TRAFFIC = Traffic()

@contextmanager
def counting(reset=True):
    """Count inside the ``with`` block (restores the previous on/off state after it)."""
    was = TRAFFIC.enabled
    if reset:
        TRAFFIC.reset()
    TRAFFIC.enabled = True
    try:
        yield TRAFFIC
    finally:
        TRAFFIC.enabled = was
