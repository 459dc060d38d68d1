"""Per-channel mean and standard deviation of stored images, streamed in blocks of rows so
memory stays bounded whatever the split's size (what ``normalize: per_channel`` applies).

The statistics are of the values as stored (uint8 pixels 0..255 for converted images), in
float64: the population standard deviation ``sqrt(mean((x - mean)^2))`` over every image and
pixel of a channel. Blocks are merged with Chan et al.'s pairwise update (mean and sum of
squared deviations), which stays accurate where ``E[x^2] - E[x]^2`` would cancel.

``distnet data convert`` stores them with the file it writes (attributes :data:`MEAN_ATTR`,
:data:`STD_ATTR`); ``distnet data stats`` prints them (:mod:`distnet.convert.info`).
"""
import numpy as np

#: The attributes (on the root of an HDF5 data set) holding the statistics of ``train/x``.
MEAN_ATTR, STD_ATTR = "channel_mean", "channel_std"
#: At most this many bytes of float64 per block.
BLOCK_BYTES = 32 * 2**20


def channel_stats(x, block_bytes=BLOCK_BYTES):
    """``(mean (C,), std (C,))`` float64 of ``x`` ``(N, C, H, W)`` or ``(N, C, D, H, W)`` (an array or an h5py dataset,
    read ``rows`` images at a time)."""
    n_img, C = int(x.shape[0]), int(x.shape[1])
    per_image = max(1, int(np.prod(x.shape[1:])) * 8)
    rows = max(1, block_bytes // per_image)
    count, mean, m2 = 0, np.zeros(C), np.zeros(C)
    for a in range(0, n_img, rows):
        b = np.asarray(x[a:a + rows], dtype=np.float64)
        axes = (0,) + tuple(range(2, b.ndim))      # every axis but the channels
        nb = int(np.prod([b.shape[i] for i in axes]))
        if nb == 0:
            continue
        mb = b.mean(axis=axes)
        m2b = ((b - mb.reshape((1, C) + (1,) * (b.ndim - 2))) ** 2).sum(axis=axes)
        total = count + nb
        delta = mb - mean
        mean = mean + delta * (nb / total)
        m2 = m2 + m2b + delta ** 2 * (count * nb / total)
        count = total
    return mean, np.sqrt(m2 / max(count, 1))


def read_stats(path):
    """``(mean, std)`` stored in the HDF5 file ``path``, or None when it has none."""
    import h5py
    with h5py.File(path, "r") as f:
        if MEAN_ATTR not in f.attrs or STD_ATTR not in f.attrs:
            return None
        return (np.asarray(f.attrs[MEAN_ATTR], dtype=np.float64).reshape(-1),
                np.asarray(f.attrs[STD_ATTR], dtype=np.float64).reshape(-1))
