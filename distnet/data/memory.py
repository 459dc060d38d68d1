"""Data memory per rank, in memory vs streamed: a pure function of shapes (no file is read).

For ``show`` / ``plan``: ``dataset.memory_per_rank(tile, batch_size, ndata, dtype)`` (see
:meth:`FileDataset.memory_per_rank <distnet.datasets.files.FileDataset.memory_per_rank>`) or
:func:`data_memory` with the numbers directly.
"""
import math

from .stream import PREFETCH_DEPTH


def data_memory(split_rows, channels, tile_shape, float_bytes, stored_bytes, batch_size=None, ndata=1,
                label_bytes=None):
    """Bytes of data one rank holds, both ways.

    split_rows : ``{split: N}`` images per split (train after ``sample_pct``, test, valid).
    channels, tile_shape : ``C`` and the rank's ``(h, w)`` (``(d, h, w)``; the whole image without a grid).
    float_bytes, stored_bytes : item sizes of the model dtype (4 or 8) and of the file (1: uint8).
    batch_size : the model's minibatch (None: the whole training split).
    ndata : data replicas (a replica reads ``ceil(batch_size / ndata)`` rows of every batch).
    label_bytes : the item size of per-pixel labels (masks, held as stored: one label per pixel
        of the tile); None: one int64 label per image.

    Returns ``{"memory": bytes, "stream": bytes}``. In memory: every row of every split as
    floats, plus the labels. Streaming: the int64 labels and row indices of every split (row
    indices only with masks), plus ``PREFETCH_DEPTH + 2`` float batches of the replica's rows
    (read ahead, being read, in use; their masks too) and one batch as stored — independent of
    the number of images beyond the 16 bytes per image of labels and indices.
    """
    pixels = math.prod(tile_shape)
    total = sum(int(n) for n in split_rows.values())
    label = 8 if label_bytes is None else pixels * label_bytes
    memory = total * (channels * pixels * float_bytes + label)
    bs = batch_size or int(split_rows.get("train", total))
    rows = math.ceil(bs / max(1, ndata))
    batch = channels * pixels * ((PREFETCH_DEPTH + 2) * float_bytes + stored_bytes)
    if label_bytes is not None:
        batch += pixels * (PREFETCH_DEPTH + 3) * label_bytes
    stream = total * (8 if label_bytes is not None else 16) + rows * batch
    return {"memory": int(memory), "stream": int(stream)}


def describe_memory(dataset, tile=None, batch_size=None, ndata=1, dtype="float32"):
    """One line for ``show`` / ``plan``: the data bytes of one rank in memory and streamed, and
    which one ``in_memory`` picks, e.g. ``data per rank: 450.0 MiB in memory, 25.5 MiB streamed
    (in_memory: auto -> stream)``; for datasets that cannot tell (MNIST, CIFAR-10) ``data per
    rank: in memory (the whole split)``."""
    import numpy as np
    m = dataset.memory_per_rank(tile=tile, batch_size=batch_size, ndata=ndata, dtype=np.dtype(dtype))
    if m is None:
        return "data per rank: in memory (the whole split)"
    setting = dataset.in_memory
    setting = setting if isinstance(setting, str) else str(setting).lower()
    return (f"data per rank: {m['memory'] / 2**20:.1f} MiB in memory, {m['stream'] / 2**20:.1f} MiB "
            f"streamed (in_memory: {setting} -> {m['mode']})")
