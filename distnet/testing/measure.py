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


def waits_per_train_step(monkeypatch):
    """A list that receives the device waits (``syncs``) of every ``Model.train_step`` call
    made while ``monkeypatch`` (pytest's fixture) is active, in order."""
    from ..models import Model
    per_step = []
    train_step = Model.train_step

    def counted(self, *args, **kwargs):
        before = xp.counts["syncs"]
        loss = train_step(self, *args, **kwargs)
        per_step.append(xp.counts["syncs"] - before)
        return loss
    monkeypatch.setattr(Model, "train_step", counted)
    return per_step
