"""Scratch buffers planned once and reused by every training step.

A layer owns one :class:`Workspace`; the ops it calls take their large temporaries (im2col
tiles, padded chunks, wide GEMM outputs) from it by name. A buffer is allocated the first time a
name is asked for with a given shape and dtype and handed back unchanged afterwards, so a steady
training loop allocates nothing large: no page faults, no kernel zero-fill per step.

Contract: the contents of a buffer are whatever its last user left there. ``zeroed=True`` asks
for zeros *at allocation only*; a caller that uses it promises that the parts it relies on
being zero (e.g. the padding border of a chunk) are never written. Buffers never escape the
op call that uses them unless the docstring of that op says so.
"""
import numpy as np

from ..backend import get_array_module


class Workspace:
    """Named scratch arrays, allocated on first use and then reused.

    ``get(name, shape, dtype, like=None, zeroed=False)`` returns the array registered under
    ``name`` if it has that shape, dtype and array module, else allocates (and registers) a
    new one. ``nbytes`` is the total size held (for memory reports).
    """

    def __init__(self):
        self._bufs = {}

    def get(self, name, shape, dtype, like=None, zeroed=False):
        xp = np if like is None else get_array_module(like)
        shape = tuple(int(s) for s in shape)
        dtype = np.dtype(dtype)
        a = self._bufs.get(name)
        if a is None or a.shape != shape or a.dtype != dtype or get_array_module(a) is not xp:
            a = xp.zeros(shape, dtype=dtype) if zeroed else xp.empty(shape, dtype=dtype)
            self._bufs[name] = a
        return a

    @property
    def nbytes(self):
        return sum(int(a.nbytes) for a in self._bufs.values())

    def clear(self):
        self._bufs.clear()

    def __getstate__(self):  # pickled layers (checkpoints, pipelines) carry no scratch memory
        return {"_bufs": {}}

    def __repr__(self):
        return f"Workspace({len(self._bufs)} buffers, {self.nbytes / 2**20:.1f} MiB)"


def scratch(work, name, shape, dtype, like=None, zeroed=False):
    """``work.get(...)`` or, without a workspace, a fresh array (``zeros`` if ``zeroed``)."""
    if work is not None:
        return work.get(name, shape, dtype, like=like, zeroed=zeroed)
    xp = np if like is None else get_array_module(like)
    return xp.zeros(shape, dtype=dtype) if zeroed else xp.empty(shape, dtype=dtype)
