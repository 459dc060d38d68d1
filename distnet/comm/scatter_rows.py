"""Stream rows of a data file from the one rank that reads it to the ranks that need them, in
chunks of bounded size: each rank gets its tile of the rows, as stored.

The reader (``root`` of ``comm``) reads ``chunk`` rows at a time, cut to the bounding box of
the tiles asked for, and sends every rank its tile of them (one ``Send`` of a contiguous
buffer, no pickling); a rank receives them in place into its ``(n, C, h, w)`` array. Neither
the reader nor a message ever holds more than ``chunk_bytes`` of pixels (at least one row):
the reader's memory is one chunk read plus one tile of it being sent, whatever the size of
the data set.

Before each chunk the reader broadcasts whether its read succeeded, so that a file that fails
half-way (a truncated copy, a bad disk) stops every rank with the reader's error instead of
leaving them waiting for pixels that never come.

This module never imports mpi4py: it calls the communicator's methods (``bcast``, ``gather``,
``Send``, ``Recv``).
"""
import numpy as np

from ..errors import DistnetError
from .abort import RemoteError

#: Default bound of one chunk, in bytes (the ``read_chunk_mb`` key of a dataset: 16).
CHUNK_BYTES = 16 * 2**20
_TAG = 0x7D17


def chunk_rows(n_rows, row_bytes, chunk_bytes=CHUNK_BYTES):
    """``[(a, b), ...]``: the row ranges of the chunks that stream ``n_rows`` rows of
    ``row_bytes`` bytes each, every chunk at most ``chunk_bytes`` (and at least one row)."""
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    per = max(1, int(chunk_bytes // max(1, row_bytes)))
    return [(a, min(n_rows, a + per)) for a in range(0, n_rows, per)]


def bounding_box(boxes):
    """The smallest box holding every box of ``boxes``, each given by its bounds axis by axis
    (``(y0, y1, x0, x1)`` on a plane, ``(z0, z1, y0, y1, x0, x1)`` in a volume)."""
    axes = range(0, len(boxes[0]), 2)
    return tuple(v for i in axes for v in (min(b[i] for b in boxes), max(b[i + 1] for b in boxes)))


def _extent(box):
    """The lengths of ``box`` (bounds axis by axis) along each axis."""
    return tuple(box[i + 1] - box[i] for i in range(0, len(box), 2))


def _inside(box, big):
    """The slices of ``box`` in an array of the box ``big`` (bounds axis by axis)."""
    return tuple(slice(box[i] - big[i], box[i + 1] - big[i]) for i in range(0, len(box), 2))


def _tell(comm, root, error):
    """The reader's verdict on its last read, to every rank of ``comm`` (raises on all if bad)."""
    if comm.Get_rank() == root:
        told = (None if error is None else error if isinstance(error, DistnetError)
                else f"{type(error).__name__}: {error}")
        comm.bcast(told, root=root)
        if error is not None:
            raise error
        return
    told = comm.bcast(None, root=root)
    if told is None:
        return
    if isinstance(told, DistnetError):
        raise told
    raise RemoteError([(root, told)])


def scatter_rows(comm, read, n_rows, channels, dtype, box, need=True, root=0,
                 chunk_bytes=CHUNK_BYTES, stats=None, into=None):
    """Every rank of ``comm`` that asks (``need``) gets its ``box`` of ``n_rows`` rows that only
    ``root`` can read. Collective over ``comm``.

    Parameters
    ----------
    read : callable or None
        On ``root``: ``read(a, b, box)`` returns rows ``a .. b-1`` of the rows to send (in
        that order), cut to that box, as stored: ``(b - a, C, y1 - y0, x1 - x0)``. Elsewhere: None.
    n_rows, channels, dtype :
        The rows to send, their channels ``C`` and stored dtype (the same on every rank).
    box : (y0, y1, x0, x1)
        This rank's part of the ``H x W`` plane (a volume's: ``(z0, z1, y0, y1, x0, x1)``).
    need : bool
        False: this rank needs nothing (it has a cache); it gets None and nothing is sent to it.
    chunk_bytes : int
        Bound of one chunk (the largest tile of one row if that is more).
    stats : dict or None
        On ``root``: ``bytes`` and ``messages`` sent to other ranks are added to it,
        ``max_message`` is the largest message.
    into : array-like or None
        Where this rank's rows go, ``into[a:b] = chunk`` (an HDF5 dataset of a node-local cache:
        then a rank holds one chunk at a time); None: a new array. A failed write (a full disk)
        is raised after the stream, so that the other ranks are not left waiting.

    Returns
    -------
    ``into`` or a new ``(n_rows, C, h, w)`` array of ``dtype`` (this rank's tile of every row);
    None where ``need`` is False.
    """
    box = tuple(int(v) for v in box)
    wants = comm.allgather(box if need else None)   # every rank derives the same chunk plan
    dtype = np.dtype(dtype)
    shape = (n_rows, channels) + _extent(box)
    out = None if not need else np.empty(shape, dtype) if into is None else into
    asking = [(r, b) for r, b in enumerate(wants) if b is not None]
    if not asking:
        return out
    big = bounding_box([b for _, b in asking])
    row_bytes = channels * int(np.prod(_extent(big))) * dtype.itemsize
    chunks = chunk_rows(n_rows, row_bytes, chunk_bytes)
    sink = _Sink(out)
    if comm.Get_rank() == root:
        _send_chunks(comm, root, read, chunks, big, asking, dtype, sink, stats)
    else:
        _receive_chunks(comm, root, chunks, sink if need else None, into is None, shape, dtype)
    sink.raise_failure()
    return out


class _Sink:
    """Where this rank's rows go (``out[a:b] = rows``). A failed write (a full disk) is kept and
    raised after the stream, so that the other ranks are not left waiting."""

    def __init__(self, out):
        self.out, self.failed = out, []

    def put(self, a, b, rows):
        if self.failed:
            return
        try:
            self.out[a:b] = rows
        except Exception as e:  # noqa: BLE001 - raised after the stream (the others go on)
            self.failed.append(e)

    def raise_failure(self):
        if self.failed:
            raise self.failed[0]


def _send_chunks(comm, root, read, chunks, big, asking, dtype, sink, stats):
    """The reader: every chunk read (the bounding box ``big`` of the tiles asked for), its
    verdict told, each asking rank sent its tile (``root``'s own put in place)."""
    for a, b in chunks:
        try:
            part, error = read(a, b, big), None
        except Exception as e:  # noqa: BLE001 - told to every rank, then re-raised
            part, error = None, e
        _tell(comm, root, error)
        for r, mine in asking:
            tile = part[(slice(None), slice(None)) + _inside(mine, big)]
            if r == root:
                sink.put(a, b, tile)
                continue
            buf = np.ascontiguousarray(tile, dtype=dtype)
            comm.Send(buf, dest=r, tag=_TAG)
            if stats is not None:
                stats["bytes"] = stats.get("bytes", 0) + buf.nbytes
                stats["messages"] = stats.get("messages", 0) + 1
                stats["max_message"] = max(stats.get("max_message", 0), buf.nbytes)


def _receive_chunks(comm, root, chunks, sink, in_place, shape, dtype):
    """Another rank: the reader's verdict on every chunk, then (``sink``: this rank asked) its
    tile of the chunk's rows, received in place when ``in_place`` (a row slice of a new array is
    contiguous), else into a buffer put into the sink."""
    for a, b in chunks:
        _tell(comm, root, None)
        if sink is None:
            continue
        if in_place:
            comm.Recv(sink.out[a:b], source=root, tag=_TAG)
        else:
            buf = np.empty((b - a,) + shape[1:], dtype)
            comm.Recv(buf, source=root, tag=_TAG)
            sink.put(a, b, buf)
