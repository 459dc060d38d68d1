"""The file ``distnet data convert`` writes: the HDF5 layout that
:class:`~distnet.datasets.HDF5Dataset` reads (docs/data.md).

``train/x`` ``(N, C, H, W)`` (uint8 for images; volumes ``(N, C, D, H, W)``), ``train/y`` int64 (or
per-pixel labels ``(N, H, W)`` / ``(N, D, H, W)`` of a small integer type, chunked like the
images, with the attribute ``ignore_label``), ``test/...``, and ``valid/...`` when there is a
validation split; chunks of one image and at most 128 x 128 pixels (volumes: blocks of at most
64 voxels a side, splitting each axis evenly: a rank's tile of a batch touches only its chunks)
with Fletcher-32 checksums (a corrupt chunk is an error naming
the file, never silent garbage); attributes ``nclasses``, ``class_names``, ``distnet_format``
(``"distnet-data/1"``), ``source``, ``seed``, ``test_fraction``, ``valid_fraction``, those the
converter adds (for an image folder ``class_order``, ``image_recipe``: :mod:`.recipe`;
``stratify``), and ``channel_mean`` / ``channel_std``: the per-channel statistics of ``train/x``
as stored (:mod:`distnet.data.stats`). Names that are not UTF-8 are kept with ``\\xff``
escapes. Written to a temporary name and moved into place, after a check that the file system has
the room.
"""
import os

import numpy as np

from ..data.stats import MEAN_ATTR, STD_ATTR, channel_stats
from ..errors import DataError, OptionError
from ..fileio import atomic_target, check_writable, free_space, hdf5_file, write_failure


FORMAT = "distnet-data/1"


CHUNK_PIXELS = 128
#: Chunk edge (voxels) of a volume along each spatial axis.
CHUNK_VOXELS = 64


def chunks(spatial):
    """The chunk of one image's spatial axes ``spatial``: squares of at most
    :data:`CHUNK_PIXELS` pixels; for volumes blocks of at most :data:`CHUNK_VOXELS` voxels a side
    that split each axis evenly (96 voxels: two chunks of 48, not 64 and a last one of 32 that
    HDF5 stores padded to 64, which made files of 96^3 volumes 2.4 times their size and every
    tile of a 2-way split read both chunks)."""
    if len(spatial) < 3:
        return tuple(min(int(d), CHUNK_PIXELS) for d in spatial)
    return tuple(-(-int(d) // -(-int(d) // CHUNK_VOXELS)) for d in spatial)


def write(out, layout, fill, labels, classes, src, seed, test_fraction, valid_fraction, attrs=None, masks=None):
    """Create ``out`` with ``layout`` (split -> (n, (C, *S), dtype)), ``fill(split, dataset)``
    writing the pixels, ``labels`` (split -> int64 array; or float32 targets ``(n, T)`` with
    ``classes`` None) and the root attributes ``attrs``;
    or, with ``masks`` ``(dtype, fill_masks(split, dataset))``, per-pixel labels ``(n, *S)``
    instead of ``labels`` (None)."""
    import h5py
    if not str(out).lower().endswith((".h5", ".hdf5")):
        raise OptionError(f"the output {out} must end in .h5 or .hdf5")
    for s, y in (labels or {}).items():
        if classes is not None and len(y) and y.max() >= len(classes):
            raise DataError(f"{src}: {s} label {int(y.max())} is out of range 0..{len(classes) - 1}")
    check_writable(out, "output")      # a read-only folder says so, not "no room"
    check_space(out, layout, labels or {}, None if masks is None else masks[0])
    try:
        _write_file(h5py, out, layout, fill, labels, classes, src, seed, test_fraction, valid_fraction,
                    attrs or {}, masks)
    except (OSError, RuntimeError) as e:    # h5py raises both for a failed write
        raise DataError(f"cannot write {out}: {write_failure(e)}") from None


def check_space(out, layout, labels, mask_dtype=None):
    """DataError before anything is written when the output's file system lacks the room
    (h5py meeting a full disk mid-write prints a wall of errors and may crash the process)."""
    need = sum(n * int(np.prod(shape)) * np.dtype(dt).itemsize + n * 64 for n, shape, dt in layout.values())
    if mask_dtype is not None:
        need += sum(n * int(np.prod(shape[1:])) * np.dtype(mask_dtype).itemsize for n, shape, _ in layout.values())
    need += sum(np.asarray(y).nbytes for y in labels.values()) + 64 * 1024     # labels, chunk index, header
    folder, free = free_space(out)
    if need > free:
        raise DataError(f"cannot write {out}: it needs about {need / 2**20:.2f} MiB but {folder} has "
                        f"{free / 2**20:.2f} MiB free")


def attr_text(name):
    """A file or folder name as UTF-8 text for an HDF5 attribute: bytes that are not UTF-8
    (Python keeps them as surrogates) are written ``\\xff``, so the name stays readable."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _write_file(h5py, out, layout, fill, labels, classes, src, seed, test_fraction, valid_fraction, attrs,
                masks):
    with atomic_target(out) as tmp:
        with hdf5_file(tmp) as f:     # a disk that fills meanwhile: an OSError, never a crash at exit
            for split in ("train", "valid", "test"):
                if split not in layout:
                    continue
                n, shape, dtype = layout[split]
                dset = f.create_dataset(f"{split}/x", (n,) + tuple(shape), dtype=dtype, fletcher32=True,
                                        chunks=(1, shape[0]) + chunks(shape[1:]))
                fill(split, dset)
                if masks is None:
                    f[f"{split}/y"] = labels[split]
                    continue
                ydset = f.create_dataset(f"{split}/y", (n,) + tuple(shape[1:]), dtype=masks[0], fletcher32=True,
                                         chunks=(1,) + chunks(shape[1:]))
                masks[1](split, ydset)
            mean, std = channel_stats(f["train/x"])     # read back in blocks: memory stays bounded
            f.attrs[MEAN_ATTR], f.attrs[STD_ATTR] = mean, std
            if classes is not None:     # (float targets: named by the attribute target_names)
                f.attrs["nclasses"] = len(classes)
                f.attrs["class_names"] = [attr_text(str(c)) for c in classes]
            f.attrs["distnet_format"] = FORMAT
            f.attrs["source"] = attr_text(os.path.abspath(src))
            f.attrs["seed"] = int(seed)
            f.attrs["test_fraction"] = float(test_fraction)
            f.attrs["valid_fraction"] = float(valid_fraction)
            for k, v in attrs.items():
                f.attrs[k] = v


def summary(path):
    """``{"path", "splits": {split: n}, "shape", "dtype", "classes", "class_order", "mean", "std",
    "masks", "ignore_label", "targets"}`` of a converted file (``class_order``: ``text``/``numeric``
    for an image folder, else None; ``masks``: the per-pixel labels' dtype, None for one label per
    image; ``targets``: whether ``y`` holds float targets, ``classes`` then naming them)."""
    import h5py
    with h5py.File(path, "r") as f:
        splits = {s: int(f[f"{s}/x"].shape[0]) for s in ("train", "valid", "test") if s in f}
        shape = tuple(int(d) for d in f["train/x"].shape[1:])
        dtype = str(f["train/x"].dtype)
        targets = f["train/y"].dtype.kind == "f"
        masks = str(f["train/y"].dtype) if f["train/y"].ndim > 1 and not targets else None
        ignore = f.attrs.get("ignore_label")
        classes = [c.decode() if isinstance(c, bytes) else str(c)
                   for c in f.attrs["target_names" if targets else "class_names"]]
        order = f.attrs.get("class_order")
        stats = tuple(np.asarray(f.attrs[a], np.float64) if a in f.attrs else None for a in (MEAN_ATTR, STD_ATTR))
    order = order.decode() if isinstance(order, bytes) else order
    return {"path": str(path), "splits": splits, "shape": shape, "dtype": dtype, "classes": classes,
            "class_order": None if order is None else str(order), "mean": stats[0], "std": stats[1],
            "masks": masks, "ignore_label": None if ignore is None else int(ignore), "targets": targets}
