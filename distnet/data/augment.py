"""Data augmentation of the training split, exact on tiles: random crops with padding, flips per
axis, random resized crops, quarter turns, brightness and contrast, of images and their masks,
in 2-D and 3-D.

The YAML key ``augment`` of a dataset (docs/data.md#augmentation, :mod:`.augment_keys`) makes an
:class:`Augmentation`. Image ``i`` in epoch ``e``, forward, as torchvision's transforms in this
order would treat it:

1. ``resized_crop``: a box of a random fraction of the image's area (volume) and aspect ratio
   is stretched back to the image's size (linear interpolation, or nearest; masks nearest);
2. ``crop``: every side padded by ``p`` (per axis if given so) and an image-sized window cut at
   a random offset in ``[0, 2p]`` per axis (``constant``: ``fill``, for masks the ignore label;
   ``reflect``; ``edge``);
3. ``flip``: each named axis reversed with probability 1/2;
4. ``rotate90``: ``k`` quarter turns in the ``(y, x)`` plane, ``k`` uniform in 0..3 (as
   ``np.rot90``; a plane that is not square is refused: its turned image would not have its shape);
5. ``brightness`` and ``contrast`` (images only): ``x -> (x * b - m) * c + m`` with factors
   uniform in ``[max(0, 1 - v), 1 + v]`` and ``m`` the contrast's ``center`` (default 0).

Steps 1 to 4 are *index maps* (:mod:`.index_maps`): output pixel ``o`` reads, axis by axis,
stored pixels fixed by the draws, which are a pure function of ``(seed, epoch, i)``
(:mod:`.draws`), ``i`` the image's row in the training split, the same on every rank; step 5
is per pixel. A rank that owns a tile of every image holds the *reach* of its tile
(:meth:`Augmentation.reach`: every stored pixel some draw can map onto it) and computes its
augmented tile from it, so every rank gets exactly the single-process pixels of its tile with no
communication, masks with the same draws as their images. This module never talks to MPI.
"""
import math

import numpy as np

from ..geometry.partition import Box, shape_text
from . import augment_keys
from .augment_keys import FLIPS, PAD_MODES
from .draws import Draws, draw_hash
from .index_maps import axis_map, gather, pad_index, resize_index, turned
from .pixel_labels import LabelStream
from .sources import cut
from .stream import StreamArray

#: Axis letters of 2-D and 3-D images (``x`` the last axis).
_LETTERS = "zyx"


def _letters(ndim):
    return _LETTERS[-ndim:]


class Augmentation:
    """The ``augment`` key of a dataset (module docstring; :mod:`.augment_keys` parses it).

    padding : int or tuple
        The crop's padding ``p`` (0: no crop), or one per spatial axis (``z, y, x`` order).
    mode, fill :
        The crop's padding mode and fill value (in the values the model sees; masks pad with the
        ignore label).
    flips : str
        The axes flipped, as letters of ``"zyx"`` (``"x"``: ``flip: horizontal``), or ``"all"``:
        every spatial axis of the images.
    resized_crop : ``((smin, smax), (rmin, rmax), interpolation)`` or None
        The fraction of the area (volume) and the aspect ratio ``w / h`` of the box, and how it
        is stretched (``linear`` or ``nearest``).
    rotate90 : bool
        Quarter turns in the ``(y, x)`` plane.
    brightness, contrast, center :
        The jitter ranges (0: off) and the contrast's centre.
    seed : int or None
        Seed of the draws; default the experiment's ``rng_seed``.
    """

    KEYS = augment_keys.KEYS

    def __init__(self, padding=0, mode="constant", fill=0.0, flips="", resized_crop=None, rotate90=False,
                 brightness=0.0, contrast=0.0, center=0.0, seed=None):
        self.padding, self.mode, self.fill = padding, mode, float(fill)
        self.flips, self.resized_crop, self.rotate90 = flips, resized_crop, bool(rotate90)
        self.brightness, self.contrast, self.center = float(brightness), float(contrast), float(center)
        self.seed = seed

    @classmethod
    def from_config(cls, value):
        """An Augmentation from the YAML value of ``augment`` (a mapping; None or nothing
        random: None). Raises :class:`ConfigError` (key ``augment``) naming the wrong entry."""
        kw = augment_keys.parse(value)
        return None if kw is None else cls(**kw)

    def __repr__(self):
        return (f"Augmentation(padding={self.padding}, mode={self.mode!r}, fill={self.fill}, flips={self.flips!r}, "
                f"resized_crop={self.resized_crop}, rotate90={self.rotate90}, brightness={self.brightness}, "
                f"contrast={self.contrast}, center={self.center}, seed={self.seed})")

    # -- checks that need the data's shape -----------------------------------------------------

    def flipped(self, ndim):
        """The letters of the axes flipped among ``ndim`` spatial axes."""
        return _letters(ndim) if self.flips == "all" else self.flips

    def pads(self, ndim):
        """The padding of each of ``ndim`` spatial axes."""
        return tuple(self.padding) if isinstance(self.padding, tuple) else (int(self.padding),) * ndim

    def check_plane(self, plane, per_pixel=False, ignore_label=None):
        """ConfigError (key ``augment``) when this augmentation does not fit images of spatial
        ``plane`` ``(H, W)`` or ``(D, H, W)``, or (``per_pixel``) their masks, which a crop in
        ``constant`` mode pads with the ``ignore_label``."""
        ndim = len(plane)
        if isinstance(self.padding, tuple) and len(self.padding) != ndim:
            raise augment_keys.bad(f"augment: crop padding gives {len(self.padding)} values but the images have "
                                   f"{ndim} spatial axes ({shape_text(plane)}): give one per axis, or one number")
        lacking = [a for a in self.flipped(ndim) if a not in _letters(ndim)]
        if lacking:
            raise augment_keys.bad(f"augment: flip names axis {lacking[0]}, which {shape_text(plane)} images lack")
        if self.rotate90 and plane[-1] != plane[-2]:
            raise augment_keys.bad(f"augment: rotate90 turns the (y, x) plane by quarter turns, which changes the "
                                   f"shape of a plane that is not square ({shape_text(plane[-2:])}): remove it (flip: "
                                   "both gives the half turns), or convert the images to a square size")
        if per_pixel and ignore_label is None and self.mode == "constant" and any(self.pads(ndim)):
            raise augment_keys.bad("augment: crop pads the masks with the ignore label, and the data has none: set "
                                   "the dataset's ignore_label, or crop with mode: reflect or edge")

    # -- the draws and the index maps ----------------------------------------------------------

    def draws(self, seed, epoch, index, plane):
        """The draws of the images ``index`` ``(n,)`` in ``epoch`` for images of spatial ``plane``
        (``seed`` unless the mapping names its own): ``offset`` and ``flip`` ``(n, ndim)``
        (the crop's offset in ``[0, 2p]`` and whether each axis is reversed), ``turns`` ``(n,)``,
        ``start`` and ``length`` ``(n, ndim)`` (the resized crop's box; the whole axis without
        one), ``brightness`` and ``contrast`` ``(n,)`` factors (1 without them)."""
        r = Draws(self.seed if self.seed is not None else seed, epoch, index)
        n, ndim = len(r.index), len(plane)
        offset, flip = np.zeros((n, ndim), np.int64), np.zeros((n, ndim), bool)
        for a, (letter, p) in enumerate(zip(_letters(ndim), self.pads(ndim))):
            if p:
                offset[:, a] = r.integers(f"offset_{letter}", 2 * p + 1)
            if letter in self.flipped(ndim):
                flip[:, a] = r.coin(f"flip_{letter}")
        turns = (r.hash("turns") >> np.uint64(62)).astype(np.int64) if self.rotate90 else np.zeros(n, np.int64)
        start, length = self._boxes(r, plane)
        return {"offset": offset, "flip": flip, "turns": turns, "start": start, "length": length,
                "brightness": self._factors(r, "brightness", self.brightness),
                "contrast": self._factors(r, "contrast", self.contrast)}

    @staticmethod
    def _factors(r, name, spread):
        if not spread:
            return np.ones(len(r.index))
        low = max(0.0, 1.0 - spread)
        return low + (1.0 + spread - low) * r.uniform(name)

    def _boxes(self, r, plane):
        """The resized crop's ``(start, length)`` ``(n, ndim)``: a fraction ``s`` of the area drawn
        in ``scale``, the ratio ``w / h`` log-uniform in ``ratio``, ``h = round(sqrt(s H W / r))``
        and ``w = round(sqrt(s H W r))`` (a volume: the depth ``round(D s^(1/3))`` and the plane
        ``s^(2/3)`` of its area), each clipped to ``[1, size]`` (torchvision draws again
        instead, up to 10 times: one draw keeps it a function of the image), the corner uniform."""
        n, ndim = len(r.index), len(plane)
        start, length = np.zeros((n, ndim), np.int64), np.tile(np.asarray(plane, np.int64), (n, 1))
        if self.resized_crop is None:
            return start, length
        (smin, smax), (rmin, rmax), _ = self.resized_crop
        s = smin + (smax - smin) * r.uniform("scale")
        ratio = np.exp(math.log(rmin) + (math.log(rmax) - math.log(rmin)) * r.uniform("ratio"))
        area = plane[-2] * plane[-1] * (s if ndim == 2 else s ** (2 / 3))
        sides = {"y": np.sqrt(area / ratio), "x": np.sqrt(area * ratio), "z": plane[0] * s ** (1 / 3)}
        for a, letter in enumerate(_letters(ndim)):
            length[:, a] = np.clip(np.round(sides[letter]), 1, plane[a]).astype(np.int64)
            start[:, a] = r.integers(f"start_{letter}", plane[a] - length[:, a] + 1)
        return start, length

    def axis_maps(self, d, tile, reach, plane, linear, padded=None):
        """The :class:`~.index_maps.AxisMap` of every output axis of ``tile`` for the draws
        ``d``, in the stored box ``reach`` (module docstring's steps 4 to 1, backwards);
        ``padded``: the stored box was padded already (:meth:`pad`), by these widths before
        each axis."""
        ndim, pads, maps = len(plane), np.asarray(self.pads(len(plane))), []
        rows = np.arange(len(d["turns"]))
        unturned = np.zeros(len(rows), bool)
        for a in range(ndim):
            b, backwards = turned(a, d["turns"], ndim) if self.rotate90 else (np.full(len(rows), a), unturned)
            size = plane[a]     # a turned axis reads one of the same size (the plane is square)
            c = np.arange(tile.lo[a], tile.hi[a], dtype=np.int64)[None, :]
            c = np.where((backwards != d["flip"][rows, b])[:, None], size - 1 - c, c)  # a turn and a flip reverse alike
            valid = None
            if padded is not None:
                c = c + (d["offset"][rows, b] - pads[b] + np.asarray(padded)[b])[:, None]
            elif pads.any():
                c, valid = pad_index(c + (d["offset"][rows, b] - pads[b])[:, None], size, self.mode)
            upper = weight = None
            if self.resized_crop is not None:
                c, upper, weight = resize_index(c, d["start"][rows, b][:, None], d["length"][rows, b][:, None],
                                                size, linear)
                upper = None if upper is None else upper - np.asarray(reach.lo)[b][:, None]
            maps.append(axis_map(b, c - np.asarray(reach.lo)[b][:, None], upper, weight, valid))
        return maps

    def reach(self, tile, plane):
        """The :class:`Box` of stored pixels that some draw maps onto ``tile`` of a ``plane``
        ``(H, W)`` (``(D, H, W)``): the tile and, with quarter turns, its turned copies, with
        flips its mirror, grown by the padding and clipped to the image (reflected and edge
        pixels lie within ``p`` of the edge, so inside it too); a resized crop reaches the
        whole image along every axis."""
        ndim, pads = len(plane), self.pads(len(plane))
        spans = list(tile.spans)
        if self.rotate90:       # a square (y, x) plane: each axis reads both, either way round
            size = plane[-1]
            ends = [v for lo, hi in spans[-2:] for v in (lo, hi, size - hi, size - lo)]
            spans[-2] = spans[-1] = (min(ends), max(ends))
        out = []
        for a, ((lo, hi), size, letter) in enumerate(zip(spans, plane, _letters(ndim))):
            if self.resized_crop is not None:
                lo, hi = 0, size
            elif letter in self.flipped(ndim):
                lo, hi = min(lo, size - hi), max(hi, size - lo)
            out.append((max(0, lo - pads[a]), min(size, hi + pads[a])))
        return Box.of_spans(out)

    def apply(self, stored, index, epoch, seed, tile, reach, plane, mask_fill=None):
        """The augmented ``tile`` ``(n, C, *tile)`` of the images ``index`` ``(n,)`` in ``epoch``
        from ``stored`` ``(n, C, *reach)``: those images cut to ``reach`` (:meth:`reach`).
        ``mask_fill`` given: ``stored`` are masks ``(n, 1, *reach)``, stretched by nearest,
        padded with it and not jittered."""
        d = self.draws(seed, epoch, index, plane)
        mask = mask_fill is not None
        linear = not mask and self.resized_crop is not None and self.resized_crop[2] == "linear"
        fill = stored.dtype.type(mask_fill if mask else self.fill)
        out = np.empty((len(d["turns"]), stored.shape[1]) + tuple(tile.shape), stored.dtype)
        padded = None
        if self.resized_crop is None and any(self.pads(len(plane))):
            stored, padded = self.pad(stored, reach, plane, fill)
        gather(stored, self.axis_maps(d, tile, reach, plane, linear, padded), out, fill)
        if not mask:
            self._jitter(out, d)
        return out

    def pad(self, stored, reach, plane, fill):
        """``stored`` ``(n, C, *reach)`` padded by the crop (``np.pad`` in its mode) on the sides
        where ``reach`` meets the image's edge, and the widths before each axis: every crop
        window is then a slice, and the padding is computed once per batch."""
        widths = [(p if lo == 0 else 0, p if hi == size else 0)
                  for p, lo, hi, size in zip(self.pads(len(plane)), reach.lo, reach.hi, plane)]
        if not any(v for w in widths for v in w):
            return stored, [0] * len(plane)
        extra = {"constant_values": fill} if self.mode == "constant" else {}
        return np.pad(stored, [(0, 0), (0, 0)] + widths, mode=self.mode, **extra), [w[0] for w in widths]

    def _jitter(self, out, d):
        """``out = (out * b - m) * c + m`` per image, in ``out``'s dtype (module docstring)."""
        shape = (-1,) + (1,) * (out.ndim - 1)
        if self.brightness:
            out *= d["brightness"].astype(out.dtype).reshape(shape)
        if self.contrast:
            center = out.dtype.type(self.center)
            out -= center
            out *= d["contrast"].astype(out.dtype).reshape(shape)
            out += center

    # -- the dataset's load --------------------------------------------------------------------

    def load(self, load_tile, tile, plane, seed, per_pixel=False, ignore_label=None):
        """``load_tile(box) -> {split: (x, y)}`` called with the reach of ``tile``; returns the
        splits with the training one's images (and masks, ``per_pixel``: ``ignore_label`` pads
        them) an :class:`AugmentedArray` of ``tile``, and the others cut to ``tile``."""
        self.check_plane(plane, per_pixel, ignore_label)
        reach = self.reach(tile, plane)
        data = load_tile(reach)
        out = {}
        for split, (x, y) in data.items():
            if split == "train":
                x = AugmentedArray(x, self, tile, reach, plane, seed)
                if per_pixel:
                    y = AugmentedArray(y, self, tile, reach, plane, seed, mask_fill=ignore_label, images=x)
            else:
                x, y = cut_to(x, tile, reach), (cut_to(y, tile, reach) if per_pixel else y)
                if isinstance(x, StreamArray) and isinstance(y, StreamArray):
                    x.companions.append(y)
            out[split] = (x, y)
        return out


def cut_to(x, tile, reach):
    """``x`` (a split cut to ``reach``: images ``(N, C, *reach)`` or masks ``(N, *reach)``, an
    array or a stream) cut to ``tile`` inside it."""
    if tile == reach:
        return x
    if isinstance(x, np.ndarray):
        inside = tile.relative_to(reach)
        return np.ascontiguousarray(x[cut(tile, reach)] if x.ndim == 2 + tile.ndim else x[(slice(None),) + inside])
    t = x.tile       # the reach inside the stream's source (the file, or a tile cache)
    box = Box.of_spans((start + lo - r, start + hi - r) for start, (lo, hi), r in zip(t.lo, tile.spans, reach.lo))
    if isinstance(x, LabelStream):
        return LabelStream(x.source, x.index, box)
    return StreamArray(x.source, x.index, box, x.scaler, x.dtype, x.check)


class AugmentedArray:
    """The training split as the model indexes it: ``x[rows]`` is the augmented ``tile`` of the
    images ``rows`` (their rows in the split, the draws' ``index``) in the current epoch
    (:meth:`set_epoch`, which the training loop calls before every epoch's training steps), and
    the ``tile`` as stored while no epoch is set (None: before training, GB's pretraining, the
    metrics after an epoch, ``distnet evaluate``).

    ``stored`` is the split cut to the reach of ``tile``: an ``(N, C, *reach)`` array or a
    :class:`~distnet.data.stream.StreamArray` (whose prefetch still serves the reads); for
    masks (``mask_fill``: what a crop pads them with) ``(N, *reach)`` or a
    :class:`~distnet.data.pixel_labels.LabelStream`, and ``images`` the images' AugmentedArray,
    whose epoch they follow (the training loop sets the images' only). ``shape`` is
    ``(N, C, *tile)`` (masks ``(N, *tile)``).
    """

    def __init__(self, stored, augmentation, tile, reach, plane, seed, mask_fill=None, images=None):
        self.stored, self.augmentation = stored, augmentation
        self.tile, self.reach, self.plane, self.seed = tile, reach, tuple(plane), seed
        self.mask_fill, self.images = mask_fill, images
        self.per_pixel = images is not None
        lead = stored.shape[:1] if self.per_pixel else stored.shape[:2]
        self.shape = tuple(lead) + tuple(tile.shape)
        self.ndim = len(self.shape)
        self.dtype = stored.dtype
        self._epoch = None

    @property
    def epoch(self):
        return self.images.epoch if self.images is not None else self._epoch

    def set_epoch(self, epoch):
        """Draw the next reads for ``epoch`` (an int), or read the images as stored (None)."""
        self._epoch = None if epoch is None else int(epoch)

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
        stored = self.stored[rows]
        if self.per_pixel:
            stored = stored[:, None]        # one channel: the index maps of the images
        if self.epoch is None:
            out = np.ascontiguousarray(stored[cut(self.tile, self.reach)])
        else:
            out = self.augmentation.apply(stored, rows, self.epoch, self.seed, self.tile, self.reach, self.plane,
                                          self.mask_fill)
        return out[:, 0] if self.per_pixel else out

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
