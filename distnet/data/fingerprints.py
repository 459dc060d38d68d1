"""Fingerprints that make the ranks of a job agree on their data (:func:`same_data`): every rank
opens the data on its own node, and a node whose copy differs (another conversion, a half-copied
file, other labels) would train on a mixture without a word. A fingerprint is a list of ``(part,
shape, digest)``: ``part`` in words (``"train labels"``), ``shape`` what the header says (compared
first, it makes the clearer message) and a CRC-32 of the values (labels whole; pixels sampled, or
whole where reading them all is cheap). :func:`same_data` takes the communicator; it never
imports MPI.
"""
import zlib

import numpy as np

from ..errors import DataError

#: Images whose pixels a sampled fingerprint hashes per split (evenly spaced, first and last among them).
SAMPLED_IMAGES = 32
#: At most this many ranks are named in a message; the rest are counted.
NAMED_RANKS = 8


def crc(array):
    """CRC-32 of an array's values in C order (its dtype's bytes)."""
    a = np.ascontiguousarray(np.asarray(array))
    return zlib.crc32(memoryview(a).cast("B")) if a.size else 0


def sampled_rows(n, count=SAMPLED_IMAGES):
    """``count`` (at most ``n``) evenly spaced row numbers of ``0 .. n-1``, increasing."""
    return np.unique(np.linspace(0, n - 1, min(n, count)).round().astype(np.int64)) if n else np.zeros(0, np.int64)


def file_digest(path, block=1 << 20):
    """CRC-32 of a whole file, read in blocks (cheap next to reading the data to train on)."""
    value = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(block)
            if not chunk:
                return value
            value = zlib.crc32(chunk, value)


def shape_text(shape, dtype):
    return f"{tuple(int(d) for d in shape)} {np.dtype(dtype)}"


def fingerprint_differences(mine, base):
    """The parts in which fingerprint ``mine`` differs from ``base``, in words."""
    a = {p[0]: p[1:] for p in base}
    b = {p[0]: p[1:] for p in mine}
    out = []
    for part in sorted(set(a) | set(b)):
        x, y = a.get(part), b.get(part)
        if x is None or y is None:
            out.append(f"{part} {'missing' if y is None else 'only there'}")
        elif x[0] != y[0]:
            out.append(f"{part} {y[0]}, not {x[0]}")
        elif x[1] != y[1]:
            out.append(f"other {part}")
    return out


def some_ranks(ranks, limit=NAMED_RANKS):
    """``"1, 2, 3"``, or the first ``limit`` ranks and how many more (a message a thousand ranks
    share stays one short line)."""
    ranks = list(ranks)
    head = ", ".join(map(str, ranks[:limit]))
    return head if len(ranks) <= limit else f"{head} and {len(ranks) - limit} more"


#: The fingerprint of a rank that read no file itself (``read: node``: another rank of its node
#: read them): it is left out of the comparison.
NOT_READ = "not read"


def same_data(fingerprint, comm, source):
    """Collective over ``comm`` (one ``gather`` to rank 0 and one ``bcast`` of its verdict: O(P)
    at rank 0): :class:`DataError` on every rank when the fingerprint of some ranks differs from
    rank 0's, naming those ranks (the first few and a count), how the first of them differs, and
    ``source`` (the files, in words). ``fingerprint``: this rank's (None: not compared, on every
    rank; :data:`NOT_READ`: this rank read no file, the others are compared with the first that did)."""
    if comm.Get_size() == 1 or fingerprint is None:
        return
    every = comm.gather(fingerprint, root=0)
    verdict = None
    if comm.Get_rank() == 0:
        read = [r for r, f in enumerate(every) if not (isinstance(f, str) and f == NOT_READ)]
        first = read[0] if read else 0
        others = [r for r in read if every[r] != every[first]]
        if others:
            what = fingerprint_differences(every[others[0]], every[first])
            verdict = others[0], (f"{source}: rank(s) {some_ranks(others)} read data that differ from rank "
                                  f"{first}'s (rank {others[0]}: {'; '.join(what)}): every rank must read the same "
                                  f"file; copy rank {first}'s to every node")
    verdict = comm.bcast(verdict, root=0)
    if verdict:
        error = DataError(verdict[1])
        error.rank = verdict[0]     # the job's failure is that rank's (its run record names it)
        raise error
