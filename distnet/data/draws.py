"""The random draws of augmentation: pure functions of ``(seed, epoch, image index, stream)``.

Every number an augmentation draws for image ``i`` (its row in the training split) in epoch
``e`` comes from one 64-bit hash, ``h(k) = mix(mix(mix(mix(seed) ^ e) ^ i) ^ k)`` with ``mix``
SplitMix64's finaliser (:func:`draw_hash`), one *stream* ``k`` per quantity
(:data:`STREAMS`). Nothing depends on the rank, the grid, the data replicas, the minibatch order
or the shuffle, so every rank that holds a part of image ``i`` draws what the others draw for it
(docs/design.md#augmentation). Integers in ``[0, n)`` are ``h % n``; a yes/no is the top bit;
a uniform number in ``[0, 1)`` is the top 53 bits times ``2**-53``.
"""
import numpy as np

_MASK = (1 << 64) - 1

#: The stream of every quantity drawn: the crop's offsets and the flips per axis (y and x keep
#: the streams 0 to 3 of the first crops and flips, so their draws stay as they were), the
#: quarter turns, the resized crop's scale, aspect ratio and corner per axis, the brightness and
#: contrast factors.
STREAMS = {"offset_y": 0, "offset_x": 1, "flip_x": 2, "flip_y": 3, "offset_z": 4, "flip_z": 5, "turns": 6,
           "scale": 7, "ratio": 8, "start_y": 9, "start_x": 10, "start_z": 11, "brightness": 12, "contrast": 13}


def _mix(v):
    """SplitMix64's finaliser on a uint64 array (wrapping arithmetic)."""
    v = v + np.uint64(0x9E3779B97F4A7C15)
    v = (v ^ (v >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    v = (v ^ (v >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return v ^ (v >> np.uint64(31))


def draw_hash(seed, epoch, index, stream):
    """The 64-bit draw of stream ``stream`` for the images ``index`` (int array ``(n,)``) in
    ``epoch``: ``mix(mix(mix(mix(seed) ^ epoch) ^ index) ^ stream)`` with ``mix`` SplitMix64's
    finaliser, all in uint64 (``seed`` taken modulo 2**64). Returns uint64 ``(n,)``."""
    with np.errstate(over="ignore"):
        h = _mix(np.full(1, int(seed) & _MASK, dtype=np.uint64))
        h = _mix(h ^ np.uint64(int(epoch) & _MASK))
        h = _mix(h ^ np.asarray(index, dtype=np.int64).astype(np.uint64))
        return _mix(h ^ np.uint64(stream))


class Draws:
    """The draws of the images ``index`` in ``epoch`` under ``seed``: ``integers(name, n)``
    (``h % n``, ``n`` an int or an ``(len(index),)`` array of them), ``coin(name)`` (the top
    bit), ``uniform(name)`` (in ``[0, 1)``), for the names of :data:`STREAMS`."""

    def __init__(self, seed, epoch, index):
        self.seed, self.epoch = seed, int(epoch)
        self.index = np.asarray(index, dtype=np.int64).reshape(-1)

    def hash(self, name):
        return draw_hash(self.seed, self.epoch, self.index, STREAMS[name])

    def integers(self, name, n):
        return (self.hash(name) % np.asarray(n, dtype=np.uint64)).astype(np.int64)

    def coin(self, name):
        return (self.hash(name) >> np.uint64(63)).astype(bool)

    def uniform(self, name):
        return (self.hash(name) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


__all__ = ["Draws", "STREAMS", "draw_hash"]
