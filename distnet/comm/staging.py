"""How message buffers reach MPI: directly, or staged through host mirrors.

An MPI call reads and writes memory through a pointer. numpy arrays are host memory: MPI gets
them as they are. A device array (cupy) can go straight to MPI only if the MPI library is
CUDA-aware (``cuda_aware_mpi: True`` in the GPU backend); otherwise every message is *staged*:

* send: the packed device buffer is copied into its pinned host mirror (asynchronously on the
  current stream, all messages of a call queued before one synchronisation), and MPI sends the
  mirror;
* receive: MPI receives into the mirror; after the wait the mirror is copied back into the device
  buffer (queued, then one synchronisation, so the mirror may be received into again).

Direct device buffers need one synchronisation too: MPI must not read a buffer before the kernels
that packed it have finished, nor overwrite one that kernels of the previous call still read.

Pinned (page-locked) mirrors make the copies fast and asynchronous; they are allocated once per
buffer set (:class:`MessageBuffers`) and reused. numpy arrays may be staged too (plain host
mirrors): nothing needs it, but the tests use it to check the staged code path on any machine.

This module never does arithmetic and never calls MPI; the caller posts the messages.
"""
import numpy as np

from ..backend import get_array_module


def _is_device(xp):
    return xp is not np


def synchronize(xp):
    """Wait until the kernels queued on ``xp``'s current stream have finished (no-op for numpy)."""
    if _is_device(xp):
        xp.cuda.get_current_stream().synchronize()


def host_mirror(a):
    """An uninitialised host array with ``a``'s shape and dtype: pinned memory when ``a`` is a
    device array (fast, asynchronous copies), plain numpy otherwise."""
    xp = get_array_module(a)
    if not _is_device(xp) or a.nbytes == 0:
        return np.empty(a.shape, dtype=a.dtype)
    mem = xp.cuda.alloc_pinned_memory(a.nbytes)   # what cupyx.empty_pinned does
    return np.frombuffer(mem, dtype=a.dtype, count=a.size).reshape(a.shape)


def _to_host(xp, a, host):
    try:
        xp.asnumpy(a, out=host, blocking=False)
    except TypeError:   # cupy < 13 has no `blocking`: a synchronous copy
        a.get(out=host)


class MessageBuffers:
    """The packed message buffers of one call site and, when staged, their host mirrors.

    arrays : list of C-contiguous ``xp`` arrays of one array module, one per message, reused by
        every call (e.g. a GlobalArray's ghost buffers ``(B, C, bh, bw)``).
    stage : True -> MPI reads and writes host mirrors of ``arrays``; False -> MPI gets
        ``arrays`` themselves (numpy, or device arrays with a CUDA-aware MPI).

    Per call: pack ``arrays`` -> send :meth:`outgoing`; or receive into :meth:`incoming` -> wait
    -> :meth:`arrived` -> unpack ``arrays``. A set used in place (Allreduce) does
    ``outgoing`` -> the collective on those buffers -> ``arrived``.
    """

    def __init__(self, arrays, stage):
        self.arrays = list(arrays)
        self.xp = get_array_module(*self.arrays)
        self.mirrors = [host_mirror(a) for a in self.arrays] if stage else None

    def outgoing(self):
        """The buffers MPI sends from, once ``arrays`` hold the packed messages."""
        if self.mirrors is None:
            synchronize(self.xp)
            return self.arrays
        if _is_device(self.xp):
            for a, m in zip(self.arrays, self.mirrors):
                _to_host(self.xp, a, m)
            synchronize(self.xp)
        else:
            for a, m in zip(self.arrays, self.mirrors):
                m[...] = a
        return self.mirrors

    def incoming(self):
        """The buffers MPI receives into (call :meth:`arrived` after the receives complete)."""
        if self.mirrors is None:
            synchronize(self.xp)   # earlier kernels may still read the device buffers
            return self.arrays
        return self.mirrors

    def arrived(self):
        """Bring received (or reduced) staged messages into ``arrays``; returns ``arrays``."""
        if self.mirrors is not None:
            if _is_device(self.xp):
                stream = self.xp.cuda.get_current_stream()
                for a, m in zip(self.arrays, self.mirrors):
                    a.set(m, stream=stream)   # queued; pinned memory makes it asynchronous
                synchronize(self.xp)   # the mirrors may be received into again
            else:
                for a, m in zip(self.arrays, self.mirrors):
                    a[...] = m
        return self.arrays
