"""Per-pixel labels (masks, segmentations): a class id for every pixel, or voxel, of an image,
read by tile exactly as the images are.

A split with per-pixel labels stores them as ``<split>/y`` ``(N, *S)`` of a small integer type
beside its images ``<split>/x`` ``(N, C, *S)`` (docs/data.md#the-hdf5-layout). Inside the engine a
split's masks are one more source, keyed :func:`mask_key` (``"train/mask"``) beside the split's
images, that reads like a one-channel image ``(N, 1, *S)`` (:class:`H5MaskSource`): so the read
strategies (``read: root`` / ``node`` send each rank its tile of the masks as of the images), the
tile caches, the streams and the hyperslab reads serve masks with no code of their own. What a
dataset hands the model is the channel-less ``(N, *tile)`` in the stored integer type: an array
(in memory) or a :class:`LabelStream` (streamed, read per minibatch with the images).

Values are class ids ``0 .. nclasses-1`` or the *ignore label* (pixels that count for nothing: a
per-pixel cost and its metrics skip them; an augmentation that pads a mask pads with it); any
other value is a DataError naming the file, the image and the pixel (:func:`check_mask_values`).
"""
import numpy as np

from ..errors import DataError
from ..geometry.partition import axis_noun
from .sources import H5Source
from .stream import StreamArray

#: What a split's name gets to name its masks' source.
MASK_SUFFIX = "/mask"
#: The root attribute of an HDF5 data set that holds its ignore label.
IGNORE_ATTR = "ignore_label"
#: Images whose masks are checked at once (bounds the temporary arrays).
_BLOCK = 64


def mask_key(split):
    """The key of the masks of ``split`` beside its image source (``"train"`` -> ``"train/mask"``)."""
    return split + MASK_SUFFIX


def is_mask_key(key):
    return key.endswith(MASK_SUFFIX)


def image_keys(sources):
    """``sources`` (``{key: value}``) without the masks' entries."""
    return {k: v for k, v in sources.items() if not is_mask_key(k)}


def split_of(key):
    """The split whose masks ``key`` names (``"train/mask"`` -> ``"train"``)."""
    return key[:-len(MASK_SUFFIX)]


class H5MaskSource(H5Source):
    """The masks ``<split>/y`` ``(N, *S)`` of an HDF5 file, read as a one-channel image: its
    ``shape`` is ``(N, 1, *S)`` (what it is built with) and ``read`` fills ``(n, 1, *tile)``
    (one hyperslab per run of rows, as the images)."""

    member, channels = "y", False

    def __init__(self, path, split, shape, dtype):
        super().__init__(path, split, shape, dtype, pixel_labels=True)

    def where(self):
        return f"{self.path} ({self.name} masks)"


class KeepValues:
    """The scaler of masks: values are copied as stored (class ids are no pixels to scale)."""

    def apply_into(self, raw, out):
        np.copyto(out, raw, casting="unsafe")
        return out

    def describe(self):
        return "class ids as stored"


class LabelStream(StreamArray):
    """A split's masks read per minibatch: ``y[rows]`` is ``(len(rows), *tile)`` of the stored
    integer type, the rows of the images' :class:`~.stream.StreamArray` beside it (which
    schedules this one's read-ahead with its own: :attr:`~.stream.StreamArray.companions`)."""

    def __init__(self, source, index, tile):
        super().__init__(source, index, tile, KeepValues(), source.dtype)
        self.shape = (len(self.index),) + tuple(tile.shape)

    def read(self, rows):
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        return super().read(rows).reshape((len(rows),) + self.shape[1:])


def check_mask_values(y, nclasses, ignore, where, rows, origin):
    """DataError unless every value of the masks ``y`` ``(n, *tile)`` (file rows ``rows``; the
    tile's first pixel at ``origin``) is a class id ``0 .. nclasses-1`` or ``ignore``."""
    y = np.asarray(y)
    for a in range(0, len(y), _BLOCK):
        block = y[a:a + _BLOCK]
        bad = (block < 0) | (block >= nclasses)
        if ignore is not None:
            bad &= block != ignore
        if bad.any():
            at = np.argwhere(bad)[0]
            i = a + int(at[0])
            where_px = ", ".join(f"{axis_noun(len(at) - 1, k)} {int(v) + origin[k]}" for k, v in enumerate(at[1:]))
            allowed = f"0 .. {nclasses - 1}" + (f" or the ignore label {ignore}" if ignore is not None else "")
            raise DataError(f"{where}: mask of image {int(rows[i])} holds {block[tuple(at)]} at {where_px}, not "
                            f"a class id {allowed} ({int(bad.sum())} such pixel(s) in images "
                            f"{int(rows[a])}..{int(rows[min(len(y), a + _BLOCK) - 1])})")


def check_mask_source(source, index, tile, nclasses, ignore, rows_per_read=256):
    """:func:`check_mask_values` on ``tile`` of the rows ``index`` of a mask source, read in
    blocks (memory flat): what a streamed split checks once before training."""
    index = np.unique(np.asarray(index, dtype=np.int64))
    for a in range(0, len(index), rows_per_read):
        rows = index[a:a + rows_per_read]
        check_mask_values(source.read(rows, tile)[:, 0], nclasses, ignore, source.where(), rows, tile.lo)


__all__ = ["IGNORE_ATTR", "H5MaskSource", "LabelStream", "check_mask_source", "check_mask_values",
           "image_keys", "is_mask_key", "mask_key", "split_of"]
