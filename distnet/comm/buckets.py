"""Gradient sums that start during the backward: buckets of gradients, each reduced with a
nonblocking Allreduce (:func:`~distnet.comm.reduce.allreduce_sum_start`) as soon as the
layers that fill it are done, so that the sums overlap the backward of the layers below.

Use (:class:`distnet.layers.step.GradientBuckets` does this for every training step; see
benchmarks/README.md "Overlap")::

    reducer = BucketReducer(host_staging, bucket_bytes=4 << 20)
    for i in reversed(range(len(layers))):          # the backward
        delta = layers[i].bprop(delta, ...)
        reducer.add([p.grad for p in layers[i] params], comm_of_those_params)
    reducer.finish()                                # every sum has arrived; then the update

Every rank must :meth:`~BucketReducer.add` the same arrays (shapes, dtypes, communicators) in
the same order: buckets then start in the same order on every rank of a communicator, as MPI
requires of nonblocking collectives. Each array is summed over its communicator's ranks, as
:func:`~distnet.comm.reduce.allreduce_sum` would; only which arrays share one Allreduce
changes with ``bucket_bytes`` (on 1-2 ranks the sums are bitwise those of one Allreduce of
everything; on more ranks the MPI library's algorithm, chosen by message size, may associate
the ranks' terms differently: rounding only).
"""
from .reduce import allreduce_sum_start, progress


class BucketReducer:
    """Buckets of gradient arrays per (communicator, dtype), started when full.

    host_staging : as in :func:`~distnet.comm.reduce.allreduce_sum` (``Backend.host_staging``).
    bucket_bytes : a bucket is started once it holds at least this many bytes (an array is never
        split; 0: every :meth:`add` starts its own bucket).
    """

    def __init__(self, host_staging=False, bucket_bytes=4 << 20):
        self.host_staging = bool(host_staging)
        self.bucket_bytes = int(bucket_bytes)
        self._open = {}       # (id(comm), dtype) -> [comm, arrays, bytes], in order of creation
        self._pending = []    # PendingSums in start order

    def add(self, arrays, comm, start_full=True):
        """``arrays`` (gradients that are final now) join the open bucket of ``comm`` and their
        dtype; a bucket that reaches ``bucket_bytes`` is started (``start_full`` False: it stays
        open, whatever its size, until :meth:`finish`). Communicators of one rank are skipped.
        Lets MPI progress the sums in flight. Collective over ``comm`` (see module)."""
        for a in arrays:
            if comm.Get_size() == 1:
                continue
            key = (id(comm), a.dtype.str)
            bucket = self._open.setdefault(key, [comm, [], 0])
            bucket[1].append(a)
            bucket[2] += a.nbytes
            if start_full and bucket[2] >= self.bucket_bytes:
                self._start(key)
        progress()

    def _start(self, key):
        comm, arrays, _ = self._open.pop(key)
        self._pending.append(allreduce_sum_start(arrays, comm, self.host_staging, kind="allreduce_grad"))

    def finish(self):
        """Start the buckets still open (in the order they were opened), wait for every sum (in
        start order). Afterwards every array passed to :meth:`add` holds its sum."""
        for key in list(self._open):
            self._start(key)
        for p in self._pending:
            p.wait()
        self._pending = []

    @property
    def in_flight(self):
        """Number of sums started and not yet waited for."""
        return len(self._pending)
