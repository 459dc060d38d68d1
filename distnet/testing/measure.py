"""What the device-like module measures beyond its counters (``devicelike.counts``): the device
arrays a block of code allocates, and the device waits of every training step."""
import contextlib

from .devicelike import ndarray, xp


@contextlib.contextmanager
def allocations():
    """Record the bytes of every device array allocated inside the block (views excluded): a
    list that fills as the block runs."""
    sizes = []
    init = ndarray.__init__

    def recording(self, data):
        init(self, data)
        if data.flags.owndata:
            sizes.append(data.nbytes)
    ndarray.__init__ = recording
    try:
        yield sizes
    finally:
        ndarray.__init__ = init


def waits_per_call(monkeypatch, owner, name):
    """A list that receives the device waits (``syncs``) of every call of the method ``name`` of
    the class ``owner`` made while ``monkeypatch`` (pytest's fixture) is active, in order."""
    per_call = []
    method = getattr(owner, name)

    def counted(self, *args, **kwargs):
        before = xp.counts["syncs"]
        out = method(self, *args, **kwargs)
        per_call.append(xp.counts["syncs"] - before)
        return out
    monkeypatch.setattr(owner, name, counted)
    return per_call


def waits_per_train_step(monkeypatch):
    """:func:`waits_per_call` of ``Model.train_step``: the device waits of every training step."""
    from ..models import Model
    return waits_per_call(monkeypatch, Model, "train_step")
