"""Point-to-point transfers between pipeline stages on ``Topology.pipe`` (the ranks with the same
``(d, iy, ix)``; pipe rank == stage index).

A pipeline *boundary* joins the last layer of one segment (a run of consecutive layers on one
stage) to the first layer of the next segment, on another stage. Like chainermn's
``point_to_point_communication``, communication inside backprop has a backward that does the
reverse:

* :class:`Send` (the upstream end): ``forward`` sends an activation, ``backward`` receives its
  gradient;
* :class:`Recv` (the downstream end): ``forward`` receives the activation, ``backward`` sends the
  gradient back.

Everything is nonblocking (``Isend`` / ``Irecv``): a receive returns an :class:`Incoming` whose
``wait()`` gives the array, so a schedule can post all of a segment's receives before computing
(GPipe's overlap of stages); sends are kept, with their buffers, until
:meth:`PipeChannel.wait_sends`. Tags: boundary ``k`` uses ``2k`` forward and ``2k + 1`` backward;
messages of one boundary and direction match in the order they were sent (MPI's non-overtaking
rule), so every rank must post them in the same micro-batch order as its peer.

This module never imports mpi4py: requests come from the communicator.
"""
from ..backend import get_array_module
from .global_array import _waitall
from .staging import MessageBuffers


class Incoming:
    """A posted receive. ``wait()`` blocks until the array has arrived and returns it
    (later calls return it at once)."""

    def __init__(self, request, message):
        self._request = request
        self._message = message   # MessageBuffers of one array
        self.buf = message.arrays[0]

    def wait(self):
        if self._request is not None:
            self._request.Wait()
            self._request = None
            self._message.arrived()
        return self.buf


class PipeChannel:
    """Nonblocking sends and receives of arrays between the stages of one pipeline.

    comm : ``Topology.pipe`` (mpi4py communicator; rank ``s`` runs stage ``s``). Each call is
        point-to-point between this rank and one peer stage, never collective. Not used when the
        run has one stage (a :class:`~distnet.comm.serial.SerialComm` has no point-to-point).
    host_staging : True to send and receive pinned host mirrors of device arrays (an MPI that is not
        CUDA-aware: ``Backend.host_staging``).
    """

    def __init__(self, comm, host_staging=False):
        self.comm = comm
        self.host_staging = bool(host_staging)
        self._sends = []  # (request, buffers): they must live until the request completes

    def isend(self, a, stage, tag):
        """Start sending array ``a`` (any shape; copied if not C-contiguous) to ``stage``."""
        xp = get_array_module(a)
        message = MessageBuffers([xp.ascontiguousarray(a)], self.host_staging)
        self._sends.append((self.comm.Isend(message.outgoing()[0], dest=stage, tag=tag), message))

    def irecv(self, shape, dtype, xp, stage, tag):
        """Post a receive of a ``shape`` array of ``dtype`` (``xp`` array) from ``stage``."""
        message = MessageBuffers([xp.empty(shape, dtype=dtype)], self.host_staging)
        return Incoming(self.comm.Irecv(message.incoming()[0], source=stage, tag=tag), message)

    def wait_sends(self):
        """Complete every send started so far (then their buffers may be reused)."""
        _waitall([req for req, _ in self._sends])
        self._sends = []


class Send:
    """Upstream end of boundary ``index``: this stage's segment ends there and ``peer`` (the
    next segment's stage) continues. Shapes: activations ``(b, *features)`` of this rank's part
    (a spatial tile goes to the same ``(iy, ix)`` of the peer stage)."""

    def __init__(self, channel, peer, index):
        self.channel, self.peer = channel, peer
        self.fwd_tag, self.bwd_tag = 2 * index, 2 * index + 1

    def forward(self, y):
        """Send the segment output ``y`` to the next stage (nonblocking)."""
        self.channel.isend(y, self.peer, self.fwd_tag)

    def backward(self, shape, dtype, xp):
        """Post the receive of ``dL/dy`` (``shape`` = the shape of ``y``) -> :class:`Incoming`."""
        return self.channel.irecv(shape, dtype, xp, self.peer, self.bwd_tag)


class Recv:
    """Downstream end of boundary ``index``: this stage's segment starts there and takes its
    input from ``peer`` (the previous segment's stage)."""

    def __init__(self, channel, peer, index):
        self.channel, self.peer = channel, peer
        self.fwd_tag, self.bwd_tag = 2 * index, 2 * index + 1

    def forward(self, shape, dtype, xp):
        """Post the receive of the segment input (``shape``) -> :class:`Incoming`."""
        return self.channel.irecv(shape, dtype, xp, self.peer, self.fwd_tag)

    def backward(self, gx):
        """Send ``dL/dx`` of the segment input back to the previous stage (nonblocking)."""
        self.channel.isend(gx, self.peer, self.bwd_tag)
