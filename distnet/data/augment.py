"""Data augmentation of the training split: random crop with padding and flips, exact on tiles.

The YAML key ``augment`` of a dataset (docs/data.md#augmentation) makes an :class:`Augmentation`.
Every transform is an *index map*: output pixel ``(y, x)`` of image ``i`` in epoch ``e`` is the
stored pixel ``(sy, sx)`` (or the ``fill`` value), where

* ``y' = H - 1 - y`` if the image is flipped vertically, else ``y``; ``x'`` likewise with ``W``
  and the horizontal flip (the flip follows the crop, as ``RandomCrop`` then ``RandomFlip``);
* ``sy = y' + oy - p`` and ``sx = x' + ox - p``, with ``p`` the padding and ``oy, ox`` in
  ``[0, 2p]`` the crop's offsets in the padded image;
* a source outside the image is ``fill`` (``mode: constant``), its mirror without repeating the
  edge (``reflect``, numpy's and torchvision's ``reflect``) or the nearest edge pixel (``edge``).

The draws ``oy, ox, flip_h, flip_v`` of an image are a pure function of ``(seed, epoch, index)``
(:func:`draw_hash`), where ``index`` is the image's row in the training split (the row the model
asks for, the same on every rank); nothing depends on the rank, the grid or the data replicas.
A rank that owns the tile ``[y0, y1) x [x0, x1)`` of every image holds the *reach* of its tile
(:meth:`Augmentation.reach`: every stored pixel some draw can map onto the tile) and gathers its
augmented tile from it, so every rank computes exactly the single-process pixels of its tile with
no communication. This module never talks to MPI.
"""
import numbers

import numpy as np

from ..errors import ConfigError
from ..geometry.partition import Box
from .sources import cut
from .stream import StreamArray

#: The values of ``crop: {mode: ...}``.
PAD_MODES = ("constant", "reflect", "edge")
#: The values of ``flip``.
FLIPS = ("horizontal", "vertical", "both")
#: Draw streams (the last argument of :func:`draw_hash`).
STREAM_OY, STREAM_OX, STREAM_FLIP_H, STREAM_FLIP_V = 0, 1, 2, 3

_MASK = (1 << 64) - 1


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


class Augmentation:
    """The ``augment`` key of a dataset: random crop with padding and random flips of the
    training images, one draw per image and epoch.

    Parameters (the keys of the YAML mapping)
    -----------------------------------------
    crop : int or mapping, optional
        The padding ``p`` (an int), or ``{padding: p, mode: constant | reflect | edge,
        fill: number}``: pad every side by ``p`` and crop an ``H x W`` window at a random offset
        (a random shift by up to ``p`` pixels each way). ``fill`` (default 0) is in the values
        the model sees (after the dataset's scaling) and only used with ``mode: constant``.
    flip : 'horizontal' | 'vertical' | 'both', optional
        Flip each image left-right (``horizontal``), upside down (``vertical``) or each of the
        two independently, with probability 1/2 each.
    seed : int, optional
        Seed of the draws; default the experiment's ``rng_seed``.
    """

    KEYS = ("crop", "flip", "seed")

    def __init__(self, padding=0, mode="constant", fill=0.0, flip_h=False, flip_v=False, seed=None):
        self.padding, self.mode, self.fill = int(padding), mode, float(fill)
        self.flip_h, self.flip_v, self.seed = bool(flip_h), bool(flip_v), seed

    @classmethod
    def from_config(cls, value):
        """An Augmentation from the YAML value of ``augment`` (a mapping; None or ``{}``: None).
        Raises :class:`ConfigError` (key ``augment``) naming the wrong entry."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ConfigError(f"expected a mapping such as {{crop: 4, flip: horizontal}}, got {value!r}",
                              key="augment")
        unknown = [k for k in value if k not in cls.KEYS]
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r} in augment; valid keys: {', '.join(cls.KEYS)}",
                              key="augment")
        kw = {}
        crop = value.get("crop")
        if crop is not None:
            if not isinstance(crop, dict):
                crop = {"padding": crop}
            bad = [k for k in crop if k not in ("padding", "mode", "fill")]
            if bad:
                raise ConfigError(f"unknown key {bad[0]!r} in augment: crop; valid keys: padding, mode, fill",
                                  key="augment")
            p = crop.get("padding")
            if isinstance(p, bool) or not isinstance(p, numbers.Integral) or p < 0:
                raise ConfigError(f"augment: crop padding must be an integer >= 0, got {p!r}", key="augment")
            mode = crop.get("mode", "constant")
            if mode not in PAD_MODES:
                raise ConfigError(f"augment: crop mode must be one of {', '.join(PAD_MODES)}, got {mode!r}",
                                  key="augment")
            fill = crop.get("fill", 0)
            if (isinstance(fill, bool) or not isinstance(fill, numbers.Real)
                    or not np.isfinite(float(fill))):
                raise ConfigError(f"augment: crop fill must be a finite number, got {fill!r}", key="augment")
            kw.update(padding=int(p), mode=mode, fill=float(fill))
        flip = value.get("flip")
        if flip is not None:
            if flip not in FLIPS:
                raise ConfigError(f"augment: flip must be one of {', '.join(FLIPS)}, got {flip!r}",
                                  key="augment")
            kw.update(flip_h=flip in ("horizontal", "both"), flip_v=flip in ("vertical", "both"))
        seed = value.get("seed")
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
                raise ConfigError(f"augment: seed must be an integer, got {seed!r}", key="augment")
            kw["seed"] = int(seed)
        if not kw.get("padding") and not kw.get("flip_h") and not kw.get("flip_v"):
            return None     # nothing random: the training images as stored
        return cls(**kw)

    def __repr__(self):
        return (f"Augmentation(padding={self.padding}, mode={self.mode!r}, fill={self.fill}, "
                f"flip_h={self.flip_h}, flip_v={self.flip_v}, seed={self.seed})")

    # -- the draws and the index map -----------------------------------------------------------

    def draws(self, seed, epoch, index):
        """``{"oy", "ox", "flip_h", "flip_v"}``, int64 / bool arrays ``(n,)``, of the images
        ``index`` in ``epoch``: offsets ``hash % (2p + 1)`` (streams 0, 1), flips the top bit of
        the hash (streams 2, 3); ``seed`` is used unless the mapping names its own."""
        seed = self.seed if self.seed is not None else seed
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        n = len(index)
        span = np.uint64(2 * self.padding + 1)

        def offset(stream):
            if not self.padding:
                return np.zeros(n, np.int64)
            return (draw_hash(seed, epoch, index, stream) % span).astype(np.int64)

        def flip(enabled, stream):
            if not enabled:
                return np.zeros(n, bool)
            return (draw_hash(seed, epoch, index, stream) >> np.uint64(63)).astype(bool)

        return {"oy": offset(STREAM_OY), "ox": offset(STREAM_OX),
                "flip_h": flip(self.flip_h, STREAM_FLIP_H), "flip_v": flip(self.flip_v, STREAM_FLIP_V)}

    def _axis_map(self, lo, hi, size, offset, flipped):
        """Stored indices ``(n, hi - lo)`` and their validity for output indices ``[lo, hi)`` of
        one axis of length ``size`` (module docstring)."""
        out = np.arange(lo, hi, dtype=np.int64)[None, :]
        src = np.where(flipped[:, None], size - 1 - out, out) + offset[:, None] - self.padding
        valid = (src >= 0) & (src < size)
        if self.mode == "reflect":
            period = 2 * (size - 1)
            if period:
                src = np.abs(src) % period
                src = np.where(src >= size, period - src, src)
            else:
                src = np.zeros_like(src)
            valid = np.ones_like(valid)
        elif self.mode == "edge":
            src, valid = np.clip(src, 0, size - 1), np.ones_like(valid)
        return src, valid

    def source_index(self, draws, tile, plane):
        """Where the augmented ``tile`` of each drawn image comes from: ``(sy (n, h), vy (n, h),
        sx (n, w), vx (n, w))``, stored row and column indices in the ``plane`` ``(H, W)`` and
        whether each is inside the image (else the pixel is ``fill``). An invalid index is
        clipped into the image, so it can be used to gather before the fill."""
        H, W = plane
        sy, vy = self._axis_map(tile.y0, tile.y1, H, draws["oy"], draws["flip_v"])
        sx, vx = self._axis_map(tile.x0, tile.x1, W, draws["ox"], draws["flip_h"])
        return np.clip(sy, 0, H - 1), vy, np.clip(sx, 0, W - 1), vx

    def reach(self, tile, plane):
        """The :class:`Box` of stored pixels that some draw maps onto ``tile`` of the ``plane``
        ``(H, W)``: the tile and, with flips, its mirror, grown by the padding and clipped to the
        image (reflected and edge pixels lie within ``p`` of the edge, so inside it too)."""
        H, W = plane
        p = self.padding

        def span(lo, hi, size, flipped):
            a, b = (min(lo, size - hi), max(hi, size - lo)) if flipped else (lo, hi)
            return max(0, a - p), min(size, b + p)

        y0, y1 = span(tile.y0, tile.y1, H, self.flip_v)
        x0, x1 = span(tile.x0, tile.x1, W, self.flip_h)
        return Box(y0, y1, x0, x1)

    def apply(self, stored, index, epoch, seed, tile, reach, plane):
        """The augmented ``tile`` ``(n, C, h, w)`` of the images ``index`` ``(n,)`` in ``epoch``
        from ``stored`` ``(n, C, rh, rw)``: those images cut to ``reach`` (:meth:`reach`).

        The index map of :meth:`source_index`, computed as copies: the batch is padded once
        (``np.pad`` in this mode, only on the sides where the reach meets the image's edge), and
        each image's tile is one slice of it, reversed along a flipped axis."""
        d = self.draws(seed, epoch, index)
        H, W = plane
        p = self.padding
        pad_y = (p if reach.y0 == 0 else 0, p if reach.y1 == H else 0)
        pad_x = (p if reach.x0 == 0 else 0, p if reach.x1 == W else 0)
        padded = stored
        if p and any(pad_y + pad_x):
            extra = {"constant_values": stored.dtype.type(self.fill)} if self.mode == "constant" else {}
            padded = np.pad(stored, ((0, 0), (0, 0), pad_y, pad_x), mode=self.mode, **extra)
        origin_y, origin_x = pad_y[0] - reach.y0, pad_x[0] - reach.x0   # global index -> padded index
        out = np.empty((len(d["oy"]), stored.shape[1], tile.y1 - tile.y0, tile.x1 - tile.x0), stored.dtype)
        for j in range(len(out)):
            ya = (H - tile.y1 if d["flip_v"][j] else tile.y0) + int(d["oy"][j]) - p + origin_y
            xa = (W - tile.x1 if d["flip_h"][j] else tile.x0) + int(d["ox"][j]) - p + origin_x
            window = padded[j, :, ya:ya + out.shape[2], xa:xa + out.shape[3]]
            out[j] = window[:, ::-1 if d["flip_v"][j] else 1, ::-1 if d["flip_h"][j] else 1]
        return out

    # -- the dataset's load --------------------------------------------------------------------

    def load(self, load_tile, tile, plane, seed):
        """``load_tile(box) -> {split: (x, y)}`` called with the reach of ``tile``; returns the
        splits with the training one an :class:`AugmentedArray` of ``tile`` and the others cut
        to ``tile``."""
        reach = self.reach(tile, plane)
        data = load_tile(reach)
        out = {}
        for split, (x, y) in data.items():
            if split == "train":
                x = AugmentedArray(x, self, tile, reach, plane, seed)
            else:
                x = cut_to(x, tile, reach)
            out[split] = (x, y)
        return out


def cut_to(x, tile, reach):
    """``x`` (a split cut to ``reach``: an array or a StreamArray) cut to ``tile`` inside it."""
    if tile == reach:
        return x
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x[cut(tile, reach)])
    local = Box(tile.y0 - reach.y0, tile.y1 - reach.y0, tile.x0 - reach.x0, tile.x1 - reach.x0)
    t = x.tile       # the reach inside the stream's source (the file, or a tile cache)
    return StreamArray(x.source, x.index, Box(t.y0 + local.y0, t.y0 + local.y1, t.x0 + local.x0,
                                              t.x0 + local.x1), x.scaler, x.dtype, x.check)


class AugmentedArray:
    """The training split as the model indexes it: ``x[rows]`` is the augmented ``tile`` of the
    images ``rows`` (their rows in the split, the draws' ``index``) in the current epoch
    (:meth:`set_epoch`, which the training loop calls before every epoch's training steps), and
    the ``tile`` as stored while no epoch is set (None: before training, GB's pretraining, the
    metrics after an epoch, ``distnet evaluate``).

    ``stored`` is the split cut to the reach of ``tile``: an ``(N, C, rh, rw)`` array or a
    :class:`~distnet.data.stream.StreamArray` (whose prefetch still serves the reads).
    ``shape`` is ``(N, C, h, w)`` with ``(h, w)`` the tile's shape.
    """

    ndim = 4

    def __init__(self, stored, augmentation, tile, reach, plane, seed):
        self.stored, self.augmentation = stored, augmentation
        self.tile, self.reach, self.plane, self.seed = tile, reach, tuple(plane), seed
        self.shape = (stored.shape[0], stored.shape[1]) + tuple(tile.shape)
        self.dtype = stored.dtype
        self.epoch = None

    def set_epoch(self, epoch):
        """Draw the next reads for ``epoch`` (an int), or read the images as stored (None)."""
        self.epoch = None if epoch is None else int(epoch)

    def __len__(self):
        return self.shape[0]

    @property
    def nbytes(self):
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize

    def __getitem__(self, rows):
        if isinstance(rows, slice):
            rows = np.arange(len(self))[rows]
        elif np.isscalar(rows):
            return self[np.array([rows])][0]
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if self.epoch is None:
            return np.ascontiguousarray(self.stored[rows][cut(self.tile, self.reach)])
        return self.augmentation.apply(self.stored[rows], rows, self.epoch, self.seed, self.tile,
                                       self.reach, self.plane)

    def read_ahead(self):
        """The read-ahead of the stored split when it is streamed (:meth:`StreamArray.read_ahead`),
        else None: the model's minibatches of this split are its rows there."""
        return self.stored.read_ahead() if isinstance(self.stored, StreamArray) else None

    def close(self):
        if isinstance(self.stored, StreamArray):     # an array in memory holds no file
            self.stored.close()

    def __repr__(self):
        return f"AugmentedArray({self.augmentation}, shape={self.shape}, tile={self.tile}, reach={self.reach})"


__all__ = ["Augmentation", "AugmentedArray", "draw_hash", "cut_to", "PAD_MODES", "FLIPS"]
