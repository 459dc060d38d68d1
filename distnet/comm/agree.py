"""Flags that every rank agrees on at the same training step without waiting for the others:
"a preemption signal reached some rank", "some rank's clock says a checkpoint is due", "some
rank's background save is still writing".

Before each step every rank hands :meth:`StepFlags.exchange` its own flags (small integers);
they go into a nonblocking ``Iallreduce(MAX)`` over a private duplicate of the world, and the
call returns the *previous* step's result, which that request has long delivered (the step in
between synchronised the ranks anyway). Every rank reads the same result at the same step, so
they decide alike, one step after the first rank raised a flag, for the cost of one tiny
nonblocking collective per step. :meth:`StepFlags.now` agrees at once (blocking), for the end
of an epoch. One process: the flags themselves, at once.
"""
import numpy as np


class StepFlags:
    """``count`` flags agreed over ``comm`` (the world; ``Dup`` is called on it, collective;
    None or one rank: no communication)."""

    def __init__(self, comm, count):
        self.count = count
        self.comm = comm.Dup() if comm is not None and comm.Get_size() > 1 else None
        self._pending = None
        #: How many calls of :meth:`exchange` later its flags come back agreed (0: one process).
        self.lag = 0 if self.comm is None else 1

    def _wait(self):
        """The result of the request in flight (zeros without one)."""
        if self._pending is None:
            return np.zeros(self.count, dtype=np.int64)
        req, _, out = self._pending
        req.Wait()
        self._pending = None
        return out

    def exchange(self, flags):
        """This step's ``flags`` in, the previous step's agreed flags (their maximum over the
        ranks) out, as a list of ints. Collective (nonblocking) over the communicator."""
        if self.comm is None:
            return [int(f) for f in flags]
        from mpi4py import MPI
        before = self._wait()
        send = np.asarray(flags, dtype=np.int64)
        out = np.empty_like(send)
        self._pending = (self.comm.Iallreduce(send, out, op=MPI.MAX), send, out)
        return [int(f) for f in before]

    def now(self, flags):
        """The flags agreed now (blocking): the maximum over the ranks of ``flags`` and of the
        request in flight. Collective over the communicator."""
        if self.comm is None:
            return [int(f) for f in flags]
        from mpi4py import MPI
        before = self._wait()
        out = np.empty(self.count, dtype=np.int64)
        self.comm.Allreduce(np.asarray(flags, dtype=np.int64), out, op=MPI.MAX)
        return [int(f) for f in np.maximum(before, out)]

    def close(self):
        """Complete the request in flight and free the communicator (collective)."""
        if self.comm is not None:
            self._wait()
            self.comm.Free()
            self.comm = None
