"""``GlobalArray``: the halo object of one spatial layer (neon's name), carrying out a
:class:`~distnet.geometry.HaloPlan` with nonblocking point-to-point messages, for any number of
spatial axes (arrays ``(B, C, *spatial)``: ``(B, C, h, w)`` in 2-D, ``(B, C, d, h, w)`` in 3-D).

* :meth:`GlobalArray.exchange` (= ``get_fprop_view``), PETSc ``globalToLocal``: my input tile
  ``(B, C, h, w)`` -> my chunk ``(B, C, Hc, Wc)``: own part copied, ghost parts received from
  their owners, zeros outside the image.
* :meth:`GlobalArray.exchange_adjoint` (= ``get_bprop_view``), PETSc ``localToGlobal(ADD_VALUES)``:
  a chunk gradient -> my tile's gradient: the ghost parts go back to their owners and are added
  there, the interior part is added, padding is dropped.

Summed over the ranks, ``<exchange(x), y> == <x, exchange_adjoint(y)>``.

Messages: one per peer and direction per call (each plan ``Transfer`` is one box: in 3-D a face,
an edge or a corner of the chunk, sent directly to the rank that needs it), packed into a
contiguous buffer; all receives are posted before any send, then ``Waitall``. No barriers. The
forward uses tag ``2*tag``, the adjoint ``2*tag + 1``: with one tag per layer no message of one
exchange can match a receive of another, even when ranks run ahead. Message buffers are allocated
once per ``(B, C, dtype, array module)`` and reused; device buffers go to MPI directly or staged
through pinned host mirrors (:mod:`distnet.comm.staging`).

This module never imports mpi4py: requests come from the communicator, and ``Waitall`` is reached
through the request's class.
"""
import time

from ..backend import get_array_module, same_view
from .delay import halo_delay, sleep_until
from .staging import MessageBuffers
from .traffic import TRAFFIC


def _waitall(requests):
    if requests:
        type(requests[0]).Waitall(requests)


class HaloRequest:
    """A forward halo exchange in flight (:meth:`GlobalArray.exchange_begin`), as an MPI request
    is a message in flight: :meth:`test` it, :meth:`finish` waits. (What a layer's exchange is,
    its plan and its cost, is its placement's :class:`~distnet.layers.placement.HaloExchange`.)

    chunk : the ``(B, C, Hc, Wc)`` chunk (``(B, C, *plan.chunk.shape)``), valid except at its
        ghost pixels until :meth:`finish`.
    """

    def __init__(self, ga, chunk, requests, ghost):
        self.chunk, self._ga, self._requests, self._ghost = chunk, ga, requests, ghost
        self.done = False
        self._started = time.perf_counter()

    def test(self):
        """Let MPI progress the messages (nonblocking); True once all have arrived."""
        if self.done or not self._requests:
            return True
        return bool(type(self._requests[0]).Testall(self._requests))

    def finish(self):
        """Wait for the ghosts, copy them into the chunk, return it. Idempotent."""
        if not self.done:
            _waitall(self._requests)
            delay = halo_delay() if self._requests else 0.0
            if delay:      # benchmarks: a slow transport (distnet.comm.delay)
                sleep_until(self._started + delay)
            for buf, where in zip(self._ghost.arrived(), self._ga._unpack):
                self.chunk[where] = buf
            self.done = True
        return self.chunk


class GlobalArray:
    """Halo exchange of one layer on the spatial communicator.

    plan : HaloPlan of this rank (``plan.coords`` must be my coordinates in ``comm``).
    comm : the spatial Cartesian communicator (``Topology.spatial``, as many axes as the plan) or a
        :class:`~distnet.comm.serial.SerialComm`. Every call below is collective over the ranks of
        ``comm`` that appear in my plan (point-to-point only, no global synchronisation).
    tag : this layer's tag; distinct layers sharing ``comm`` should use distinct tags.
    host_staging : True to hand MPI host mirrors of the message buffers (device arrays with an MPI that
        is not CUDA-aware: ``Backend.host_staging``); False hands the buffers themselves.
    """

    #: It exchanges messages (the one-process counterpart, :class:`~distnet.ops.padding.ZeroPadding`,
    #: only zero-pads, which lets a conv pad as it reads instead of building the chunk).
    zero_padding_only = False

    def __init__(self, plan, comm, tag=0, host_staging=False):
        self.plan = plan
        self.comm = comm
        self.tag = int(tag)
        self.host_staging = bool(host_staging)
        dims = tuple(comm.Get_topo()[0])
        if dims != tuple(plan.grid):
            raise ValueError(f"halo plan for a {plan.grid} grid used on a {dims} communicator")
        mine = tuple(comm.Get_coords(comm.Get_rank()))
        if mine != tuple(plan.coords):
            raise ValueError(f"halo plan of rank {plan.coords} used on rank {mine}")
        # Peer ranks, resolved once. recv_peers[i] owns plan.recvs[i]; send_peers[i] needs plan.sends[i].
        self._recv_peers = [comm.Get_cart_rank(t.peer) for t in plan.recvs]
        self._send_peers = [comm.Get_cart_rank(t.peer) for t in plan.sends]
        # Index tuples, made once: what each send takes from my tile, where each receive goes in
        # the chunk, and the interior's place in both.
        own, box = plan.own, plan.chunk
        self._pack = [(Ellipsis,) + t.box.relative_to(own) for t in plan.sends]
        self._unpack = [(Ellipsis,) + t.box.relative_to(box) for t in plan.recvs]
        inner = plan.interior
        self._inner = None if inner.is_empty() else \
            ((Ellipsis,) + inner.relative_to(box), (Ellipsis,) + inner.relative_to(own))
        self._inner_is_own = inner.shape == own.shape   # the adjoint writes all of my tile
        self._buffers = {}  # (B, C, dtype, xp name) -> (ghost, share) MessageBuffers

    # -- shapes ---------------------------------------------------------------------------------
    @property
    def local_shape(self):
        """``(h, w)`` of my input tile (``plan.own``; one length per spatial axis)."""
        return self.plan.own.shape

    @property
    def chunk_shape(self):
        """``(Hc, Wc)`` of my chunk (``plan.chunk``)."""
        return self.plan.chunk.shape

    @property
    def out_shape(self):
        """``(ho, wo)`` of my output tile (``plan.out_tile``)."""
        return self.plan.out_tile.shape

    def _check(self, a, expect, what):
        if a.ndim != 2 + len(expect) or tuple(a.shape[2:]) != tuple(expect):
            raise ValueError(f"{what} must have shape (B, C, {', '.join(str(n) for n in expect)}) "
                             f"on rank {self.plan.coords}, got {tuple(a.shape)}")

    def _bufs(self, a):
        """``(ghost, share)`` :class:`MessageBuffers` for arrays like ``a``: ``ghost.arrays[i]``
        has the shape of ``plan.recvs[i].box``, ``share.arrays[i]`` of ``plan.sends[i].box``
        (both ``(B, C, bh, bw)``, ``(B, C, *box.shape)``)."""
        xp = get_array_module(a)
        B, C = a.shape[:2]
        key = (B, C, a.dtype.str, xp.__name__)
        if key not in self._buffers:
            def make(transfers):
                return MessageBuffers([xp.empty((B, C) + t.box.shape, dtype=a.dtype)
                                       for t in transfers], self.host_staging)
            self._buffers[key] = (make(self.plan.recvs), make(self.plan.sends))
        return self._buffers[key]

    # -- forward: globalToLocal -------------------------------------------------------------------
    def exchange(self, x_local, out=None):
        """Fill my chunk from my tile and my peers' tiles.

        x_local : ``(B, C, h, w)``, my input tile (``plan.own``; ``(B, C, *plan.own.shape)`` in
            any number of axes).
        out : optional ``(B, C, Hc, Wc)`` array to fill (a buffer the caller reuses every step).
            It must be zero outside the image (allocate it with zeros once): those positions are
            never written, so it stays so.
        Returns a new ``(B, C, Hc, Wc)`` array (``plan.chunk``), zero where it lies outside the
        image, or ``out``. Collective over my peers in ``comm``.
        """
        return self.exchange_begin(x_local, out).finish()

    def exchange_begin(self, x_local, out=None):
        """Start :meth:`exchange`: post the messages, fill the chunk's own part and padding, and
        return a :class:`HaloRequest` whose ``chunk`` is already valid wherever no ghost pixel
        lies (:func:`distnet.geometry.overlap.early_output_box` says which outputs read only
        those) and whose :meth:`~HaloRequest.finish` waits for the ghosts and returns the
        chunk. Between the two, a layer computes (the overlap); until ``finish`` the chunk's ghost
        pixels keep what they held before (a reused ``out``: the last exchange's ghosts), so only
        outputs outside ``early_output_box`` may read them, to be computed again after it. The
        layer must not write ``x_local`` or the chunk's ghost parts. Collective over my peers in
        ``comm``; the same chunk as :meth:`exchange`, whatever the timing.
        """
        chunk_box = self.plan.chunk
        self._check(x_local, self.plan.own.shape, "x_local")
        xp = get_array_module(x_local)
        ghost, share = self._bufs(x_local)
        tag = 2 * self.tag
        reqs = [self.comm.Irecv(buf, source=src, tag=tag)
                for buf, src in zip(ghost.incoming(), self._recv_peers)]
        for buf, part in zip(share.arrays, self._pack):
            buf[...] = x_local[part]
        reqs += [self.comm.Isend(buf, dest=dst, tag=tag)
                 for buf, dst in zip(share.outgoing(), self._send_peers)]
        if TRAFFIC.enabled and share.arrays:
            TRAFFIC.record("halo_fwd", sum(b.nbytes for b in share.arrays), len(share.arrays), self.tag)
        # While the messages fly: zeros (padding and not-yet-received ghosts) and my own part.
        shape = x_local.shape[:2] + chunk_box.shape
        if out is None:
            chunk = xp.zeros(shape, dtype=x_local.dtype)
        else:
            self._check(out, chunk_box.shape, "out")
            chunk = out
        if self._inner is not None:
            in_chunk, in_own = self._inner
            chunk[in_chunk] = x_local[in_own]
        return HaloRequest(self, chunk, reqs, ghost)

    get_fprop_view = exchange

    # -- backward: localToGlobal(ADD_VALUES) --------------------------------------------------------
    def exchange_adjoint(self, g_chunk, out=None):
        """Sum chunk gradients into their owners' tiles (the adjoint of :meth:`exchange`).

        g_chunk : ``(B, C, Hc, Wc)`` (``(B, C, *plan.chunk.shape)``), the gradient with respect
            to my chunk.
        Returns a new ``(B, C, h, w)`` array: my interior part of ``g_chunk`` plus, for every peer
        whose chunk overlaps my tile, its gradient there (added in peer rank order, so the result
        is deterministic). Padding positions are dropped. ``out``: an optional ``(B, C, h, w)``
        array to write the result into (and return); it may be the view of ``g_chunk`` on my
        tile (the result is then formed in place). Collective over my peers in ``comm``.
        """
        own = self.plan.own
        self._check(g_chunk, self.plan.chunk.shape, "g_chunk")
        xp = get_array_module(g_chunk)
        ghost, share = self._bufs(g_chunk)
        tag = 2 * self.tag + 1
        # What I sent forward comes back (share), what I received goes back to its owner (ghost).
        reqs = [self.comm.Irecv(buf, source=src, tag=tag)
                for buf, src in zip(share.incoming(), self._send_peers)]
        for buf, part in zip(ghost.arrays, self._unpack):
            buf[...] = g_chunk[part]
        reqs += [self.comm.Isend(buf, dest=dst, tag=tag)
                 for buf, dst in zip(ghost.outgoing(), self._recv_peers)]
        if TRAFFIC.enabled and ghost.arrays:
            TRAFFIC.record("halo_bwd", sum(b.nbytes for b in ghost.arrays), len(ghost.arrays), self.tag)
        if out is None:
            g_local = xp.zeros(g_chunk.shape[:2] + own.shape, dtype=g_chunk.dtype)
        else:
            self._check(out, own.shape, "out")
            g_local = out
            if not self._inner_is_own:
                g_local[...] = 0
        if self._inner is not None:
            in_chunk, in_own = self._inner
            dst, src = g_local[in_own], g_chunk[in_chunk]
            if not same_view(dst, src):   # out may be g_chunk's own-tile view: nothing to copy
                dst[...] = src
        _waitall(reqs)
        for buf, part in zip(share.arrived(), self._pack):
            g_local[part] += buf
        return g_local

    get_bprop_view = exchange_adjoint

    def __repr__(self):
        p = self.plan
        return (f"GlobalArray(rank {p.coords} of {p.grid}, own {p.own.shape}, chunk {p.chunk.shape}, "
                f"{len(p.recvs)} recvs, {len(p.sends)} sends, tag {self.tag})")
