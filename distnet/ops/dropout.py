"""Inverted dropout whose mask is a pure function of (seed, step, layer, GLOBAL position).

A counter-based generator (splitmix64's output function on ``key + (i + 1) * golden``, i the
flat index of the element in the GLOBAL tensor, C order) gives every element its own 64-bit
hash, so a rank computes exactly its tile's slice of the single-process mask without drawing
the whole tensor, in any order, on numpy or cupy (plain ``uint64`` arithmetic, wrapping), and a
tiled or data-parallel run drops exactly the units the one-process run drops. Never seed per
rank.

Semantics (inverted dropout, as ``torch.nn.Dropout``): in training each element is zeroed with
probability ``p`` and the survivors are scaled by ``1 / (1 - p)``, so the expected activation is
unchanged and evaluation is the identity (no mask, no scaling). The uniform variate of element
``i`` is ``u_i = (h_i >> 11) * 2**-53`` in ``[0, 1)``; it is kept iff ``u_i >= p`` (compared as
integers: exact, no rounding of ``p`` beyond ``2**-53``).

Shapes: ``global_shape`` is the whole tensor, e.g. ``(N_global, C, H, W)`` (all data replicas'
samples; ``N`` then ``C`` then pixels) or ``(N_global, F)``; ``index`` is a tuple of slices
(step 1), one per axis, naming the tile (``None``: the whole tensor). The mask has the tile's
shape. Typical use::

    key = stream_key(seed, step, layer_id)            # same on every rank
    mask = dropout_mask(key, p, global_shape, index, xp=xp, dtype=x.dtype)
    y = dropout_fprop(x, mask)          dx = dropout_bprop(dy, mask)
"""
import numpy as np

from ..backend import get_array_module
from ..errors import ConfigError

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def _mix_int(z):
    """splitmix64's finaliser on a Python int (host side, for keys)."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def stream_key(seed, *counters):
    """A 64-bit key (Python int) for the stream of ``seed`` and integer ``counters`` (e.g. the
    global step and a layer id): hashes chained so that nearby tuples give unrelated keys."""
    k = _mix_int(int(seed) * _GOLDEN + 1)
    for c in counters:
        k = _mix_int(k ^ _mix_int((int(c) + 1) * _GOLDEN))
    return k


def _index(global_shape, index):
    """Normalise ``index`` to ``[(start, stop)]`` per axis, checked against ``global_shape``."""
    if index is None:
        index = (slice(None),) * len(global_shape)
    index = tuple(index) + (slice(None),) * (len(global_shape) - len(index))
    if len(index) != len(global_shape):
        raise ConfigError(f"dropout: index {index} has more axes than the tensor {tuple(global_shape)}")
    out = []
    for s, n in zip(index, global_shape):
        if not isinstance(s, slice):
            raise ConfigError(f"dropout: index entries must be slices, got {s!r}")
        a, b, step = s.indices(n)
        if step != 1:
            raise ConfigError(f"dropout: index slices must have step 1, got {s!r}")
        out.append((a, max(a, b)))
    return out


def random_bits(key, global_shape, index=None, xp=np):
    """``uint64`` hashes of the tile ``index`` of a ``global_shape`` tensor (tile-shaped)."""
    ranges = _index(global_shape, index)
    nd = len(ranges)
    strides = [1] * nd
    for d in range(nd - 2, -1, -1):
        strides[d] = strides[d + 1] * int(global_shape[d + 1])
    flat = None
    for d, ((a, b), st) in enumerate(zip(ranges, strides)):
        r = xp.arange(a, b, dtype=xp.uint64) * np.uint64(st)
        r = r.reshape((1,) * d + (b - a,) + (1,) * (nd - d - 1))
        flat = r if flat is None else flat + r
    if flat is None:                          # a 0-d tensor: one element, index 0
        flat = xp.zeros((), dtype=xp.uint64)
    tile_shape = tuple(b - a for a, b in ranges)
    z = xp.broadcast_to(flat, tile_shape) + np.uint64(0)       # a fresh (writable) array
    z += np.uint64(1)
    z *= np.uint64(_GOLDEN)
    z += np.uint64(key & _MASK64)
    z ^= z >> np.uint64(30)
    z *= np.uint64(_M1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_M2)
    z ^= z >> np.uint64(31)
    return z


def uniform(key, global_shape, index=None, xp=np, dtype="float64"):
    """Uniform variates in ``[0, 1)`` of the tile (53 random bits each)."""
    u = (random_bits(key, global_shape, index, xp) >> np.uint64(11)).astype(dtype)
    u *= 2.0 ** -53
    return u


def _check_p(p):
    p = float(p)
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"dropout probability must be in [0, 1), got {p}", key="dropout")
    return p


def keep_mask(key, p, global_shape, index=None, xp=np):
    """Boolean tile mask: True where the element is kept (probability ``1 - p``)."""
    p = _check_p(p)
    threshold = np.uint64(int(round(p * 2.0 ** 53)))
    return (random_bits(key, global_shape, index, xp) >> np.uint64(11)) >= threshold


def dropout_mask(key, p, global_shape, index=None, xp=np, dtype="float32"):
    """The scaled tile mask: ``1 / (1 - p)`` where kept, 0 where dropped (``dtype``)."""
    p = _check_p(p)
    m = keep_mask(key, p, global_shape, index, xp).astype(dtype)
    m *= 1.0 / (1.0 - p)
    return m


def dropout_fprop(x, mask, out=None):
    """Training forward: ``x * mask`` (``mask`` from :func:`dropout_mask`, same shape; into
    ``out`` if given, which may be ``x``)."""
    return get_array_module(x, mask).multiply(x, mask, out=out)


def dropout_bprop(dy, mask, out=None):
    """Backward: ``dy * mask`` (the same mask as the forward)."""
    return dropout_fprop(dy, mask, out)
