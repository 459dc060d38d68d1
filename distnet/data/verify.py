"""``verify: full``: every chunk of the data checksummed on every node and compared with rank 0's
node, the work spread over the ranks that read the data.

The default check (:mod:`.fingerprints`) compares, per split, the shape and stored type, a CRC-32
of all labels, and a CRC-32 of the pixels of 32 evenly spaced images (MNIST and CIFAR-10: of
their whole files). It catches another conversion of the data (other shapes or types), any
changed label, a file cut short or padded, and images that changed at the sampled rows. It does
not catch a changed image elsewhere: one image of 960 converted again trains silently on a
mixture of the two copies. With ``verify: full`` on the dataset, every rank that opens the data
files hashes its share of the chunks of every split (the chunks of its node's copy dealt out
among the node's readers, about :data:`CHUNK_BYTES` each), world rank 0 gathers the CRC-32s and
compares every node's with its own; a node whose copy differs anywhere stops the job on every
rank, naming its ranks and the rows that differ. The ranks of one node are assumed to read one
copy (one file system). ``read: root`` reads one copy only: there is nothing to compare.
"""
import numpy as np

from ..comm.phase import tick
from ..errors import ConfigError, DataError
from .checks import label_values
from .fingerprints import crc, some_ranks
from .sources import whole

#: The values of a dataset's ``verify`` key.
VERIFY = ("sample", "full")
#: About this many bytes of pixels per checksummed chunk.
CHUNK_BYTES = 16 * 2**20


def parse_verify(value):
    """``verify`` as one of :data:`VERIFY` (None: ``sample``). Raises ConfigError."""
    if value is None:
        return "sample"
    if isinstance(value, str) and value.strip().lower() in VERIFY:
        return value.strip().lower()
    raise ConfigError(f"must be sample (the default: a sample of 32 images per split) or full (every image, "
                      f"checksummed in parallel), got {value!r}", key="verify")


def chunks(sources):
    """``[(split, first row, stop row)]`` of every split of ``{split: Source}``, in order."""
    out = []
    for split, src in sorted(sources.items()):
        n = int(src.shape[0])
        per = max(1, CHUNK_BYTES // max(1, int(np.prod(src.shape[1:])) * np.dtype(src.dtype).itemsize))
        out += [(split, a, min(n, a + per)) for a in range(0, n, per)]
    return out


def digests(sources, index, count):
    """``{part: CRC-32}`` of this rank's share (chunks ``index``, ``index + count``, ...) of the
    pixels of every split, and, on the first reader of a node, of every split's labels."""
    out = {}
    if index == 0:
        out.update({f"{split} labels": crc(label_values(src.labels())) for split, src in sources.items()})
    for k, (split, a, b) in enumerate(chunks(sources)):
        if k % count == index:
            src = sources[split]
            out[f"{split} images rows {a}-{b - 1}"] = crc(src.read(np.arange(a, b), whole(src.shape[2:])))
            tick()
    return out


def verify_copies(sources, world, where):
    """``verify: full`` (module docstring). ``sources``: ``{split: Source}`` of the files this
    rank opened, None when it opened none. Collective over ``world``: one shared-memory split,
    one gather to rank 0 and one broadcast of its verdict. :class:`DataError` on every rank when
    some node's copy differs from rank 0's, naming the first node's ranks and parts."""
    from ..comm.launcher import host_name
    from ..comm.node import node_members
    index, count = node_members(world, sources is not None)
    mine = digests(sources, index, count) if sources is not None else {}
    every = world.gather((host_name(), mine), root=0) if world.Get_size() > 1 else [(host_name(), mine)]
    verdict = _verdict(every, where) if world.Get_rank() == 0 else None
    verdict = world.bcast(verdict, root=0) if world.Get_size() > 1 else verdict
    if verdict:
        error = DataError(verdict[1])
        error.rank = verdict[0]
        raise error


def _verdict(every, where):
    """``(first differing rank, message)`` from every rank's ``(host, digests)``, or None."""
    nodes, ranks = {}, {}
    for rank, (host, parts) in enumerate(every):
        nodes.setdefault(host, {}).update(parts)
        ranks.setdefault(host, []).append(rank)
    base = nodes[every[0][0]]
    for host, parts in nodes.items():
        if not parts or host == every[0][0]:
            continue
        differ = sorted(p for p in set(base) | set(parts) if base.get(p) != parts.get(p))
        if differ:
            shown = "; ".join(differ[:4]) + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
            return ranks[host][0], (f"{where}: rank(s) {some_ranks(ranks[host])} on {host} read data that differ "
                                    f"from rank 0's (verify: full: {shown} differ): every rank must read the same "
                                    "file; copy rank 0's to every node")
    return None
