"""The overlap switch: whether a training step overlaps its communication with computation.

``DISTNET_OVERLAP`` (read when first asked, never at import; :func:`overlap_mode` sets it for a
block, e.g. in tests and benchmarks):

* unset, ``grad``: only the gradient buckets (their nonblocking Allreduce starts during the
  backward, :class:`~distnet.comm.buckets.BucketReducer`): the default;
* ``1``, ``on``, ``all``: the gradient buckets and the halo exchanges (a conv layer computes its
  output tile while its ghosts are in flight, then the outputs that read them again,
  :meth:`~distnet.comm.global_array.GlobalArray.exchange_begin`);
* ``halo``: only the halo exchanges;
* ``0``, ``off``, ``none``: everything blocking, as before the overlap existed (A/B runs,
  debugging).

The halo part is off by default because it costs time where messages are fast: recomputing the
border outputs made bigimage's 1x2 step 1.6-2.5% slower over in-node shared memory (benchmarks/README.md
"Overlap"), while a 256x128 tile's halo is half a megabyte, microseconds on a cluster network. It
pays where halo messages are slow against the conv (measured: 39% of a 100 ms halo delay hidden,
of at most 43% there).

``DISTNET_BUCKET_BYTES`` (default :data:`BUCKET_BYTES`): a gradient bucket starts its Allreduce
once it holds at least this many bytes (0: one Allreduce per layer and communicator).

Neither changes a number: the sums are those of the blocking calls (same buckets summed per
element; bitwise on 1-2 ranks), the outputs the same dot products.
"""
import os
from contextlib import contextmanager

from ..errors import DistnetError

#: Default gradient bucket size in bytes (``DISTNET_BUCKET_BYTES``).
BUCKET_BYTES = 1 << 20

_PARTS = ("grad", "halo")
#: What an unset ``DISTNET_OVERLAP`` means.
DEFAULT = ("grad",)
_ALIASES = {"": DEFAULT, "default": DEFAULT, "1": _PARTS, "on": _PARTS, "all": _PARTS, "true": _PARTS, "yes": _PARTS,
            "0": (), "off": (), "none": (), "false": (), "no": ()}
_state = {"parts": None, "bucket": None}


def _parse(value):
    value = str(value).strip().lower()
    if value in _ALIASES:
        return frozenset(_ALIASES[value])
    parts = {v.strip() for v in value.split(",") if v.strip()}
    if not parts or parts - set(_PARTS):
        raise DistnetError(f"DISTNET_OVERLAP={value!r}: use grad (the default), 1/on (both), "
                           f"0/off, or a list of {', '.join(_PARTS)}")
    return frozenset(parts)


def overlap_enabled(part):
    """True when ``part`` (``"grad"`` or ``"halo"``) overlaps its communication."""
    if _state["parts"] is None:
        _state["parts"] = _parse(os.environ.get("DISTNET_OVERLAP", ""))
    return part in _state["parts"]


def bucket_bytes():
    """Bytes at which a gradient bucket starts its Allreduce (``DISTNET_BUCKET_BYTES``)."""
    if _state["bucket"] is None:
        value = os.environ.get("DISTNET_BUCKET_BYTES", "")
        try:
            _state["bucket"] = BUCKET_BYTES if value.strip() == "" else max(0, int(value))
        except ValueError:
            raise DistnetError(f"DISTNET_BUCKET_BYTES={value!r} is not a whole number of bytes") from None
    return _state["bucket"]


@contextmanager
def overlap_mode(mode, bucket=None):
    """Within the block, overlap as ``DISTNET_OVERLAP=mode`` says (``True``/``False`` for all /
    nothing) and, given ``bucket``, buckets of that many bytes."""
    before = dict(_state)
    _state["parts"] = _parse({True: "1", False: "0"}.get(mode, mode))
    if bucket is not None:
        _state["bucket"] = int(bucket)
    try:
        yield
    finally:
        _state.update(before)
