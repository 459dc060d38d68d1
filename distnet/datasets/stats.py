"""Per-channel mean and standard deviation of stored images, streamed in blocks of rows so
memory stays bounded whatever the split's size (what ``normalize: per_channel`` applies).

The statistics are of the values as stored (uint8 pixels 0..255 for converted images), in
float64: the population standard deviation ``sqrt(mean((x - mean)^2))`` over every image and
pixel of a channel. Blocks are merged with Chan et al.'s pairwise update (mean and sum of
squared deviations), which stays accurate where ``E[x^2] - E[x]^2`` would cancel.
"""
import numpy as np

#: The attributes (on the root of an HDF5 data set) holding the statistics of ``train/x``.
MEAN_ATTR, STD_ATTR = "channel_mean", "channel_std"
#: At most this many bytes of float64 per block.
BLOCK_BYTES = 32 * 2**20


def channel_stats(x, block_bytes=BLOCK_BYTES):
    """``(mean (C,), std (C,))`` float64 of ``x`` ``(N, C, H, W)`` (an array or an h5py dataset,
    read ``rows`` images at a time)."""
    n_img, C = int(x.shape[0]), int(x.shape[1])
    per_image = max(1, int(np.prod(x.shape[1:])) * 8)
    rows = max(1, block_bytes // per_image)
    count, mean, m2 = 0, np.zeros(C), np.zeros(C)
    for a in range(0, n_img, rows):
        b = np.asarray(x[a:a + rows], dtype=np.float64)
        nb = b.shape[0] * b.shape[2] * b.shape[3]
        if nb == 0:
            continue
        mb = b.mean(axis=(0, 2, 3))
        m2b = ((b - mb.reshape(1, C, 1, 1)) ** 2).sum(axis=(0, 2, 3))
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


def stats_line(mean, std):
    """The line of ``distnet data info`` on the per-channel statistics kept in a file."""
    def vals(v):
        return ", ".join(f"{x:.6g}" for x in v)
    return (f"per-channel mean {vals(mean)}, std {vals(std)} (train images as stored; the dataset key "
            "normalize: per_channel applies them)")


def describe_stats(path, store=False):
    """The lines of ``distnet data stats``: the recipe, and the statistics of ``path``'s
    ``train/x`` (stored ones, else computed now; ``store``: then kept in the file)."""
    import h5py
    from ..errors import DataError
    from ..fileio import write_failure
    from .recipe import describe_recipe, read_recipe
    recipe = read_recipe(path)
    lines = [f"{path}: images decoded as {describe_recipe(recipe)} (distnet predict repeats it on new pictures)"
             if recipe else f"{path}: no convert recipe (not converted from an image folder)"]
    stats = read_stats(path)
    if stats is not None:
        return lines + [stats_line(*stats)]
    with h5py.File(path, "r") as f:
        x = f.get("train/x")
        if not isinstance(x, h5py.Dataset) or x.ndim != 4 or x.dtype.kind not in "biuf":
            raise DataError(f"{path}: no train/x (N, C, H, W) of numbers to compute statistics of (docs/data.md)")
        mean, std = channel_stats(x)
    if store:
        try:
            with h5py.File(path, "r+") as f:
                f.attrs[MEAN_ATTR], f.attrs[STD_ATTR] = mean, std
        except (OSError, RuntimeError) as e:
            raise DataError(f"cannot store the statistics in {path}: {write_failure(e)}") from None
    return lines + [stats_line(mean, std) + ("; stored in the file" if store else
                                             "; computed now, not stored (--write stores them)")]
