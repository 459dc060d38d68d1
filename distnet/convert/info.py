"""``distnet data info FILE.h5`` and ``distnet data stats FILE.h5``: what a dataset file in the
HDF5 layout holds (docs/data.md).

:func:`dataset_info` reads the header and the labels (never the pixels), checked as
:class:`~distnet.datasets.HDF5Dataset` checks them before a run (layout, dtypes, label range);
:func:`info_lines` turns it into the lines the command prints: the splits, the image shape and
type, where the file came from (the converter's attributes), and one row per label with its
class name (for a converted image folder: the class folder) and its images per split, so the
label a class folder became is never a guess. A file in the sequence layout (``src``/``tgt``,
``distnet data convert --target``) gets its splits and vocabulary sizes. :func:`describe_stats`
gives the lines of ``distnet data stats``: the convert recipe and the per-channel statistics.
"""
import json

import numpy as np

from ..data.pixel_labels import mask_key
from ..data.sources import open_hdf5
from ..data.stats import MEAN_ATTR, STD_ATTR, channel_stats, read_stats
from ..datasets.hdf5 import HDF5Dataset
from ..errors import DataError
from ..fileio import write_failure
from ..geometry.partition import Box
from .recipe import describe_recipe, read_recipe

SPLITS = ("train", "valid", "test")


def _text(value):
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def dataset_info(path):
    """``{"path", "kind": "images" | "sequences", ...}`` of the dataset file ``path``.

    Images: ``splits`` ``{split: n}``, ``shape`` ``(C, H, W)``, ``dtype``, ``nclasses``,
    ``class_names`` (list of ``nclasses`` str; ``"0"``, ``"1"``, ... when the file has none),
    ``named`` (whether the file holds class names), ``counts`` ``{split: (nclasses,) int}``,
    ``attrs`` (the converter's record: ``source``, ``seed``, ``class_order``, ...; those present).
    Sequences: ``splits`` ``{split: pairs}``, ``src_vocab`` / ``tgt_vocab`` sizes. Float targets
    (``"kind": "targets"``): ``shape``, ``dtype``, ``names``, ``targets`` ``{split: (N, T)}``.
    DataError (naming the file) for a file in neither layout."""
    path = str(path)
    with open_hdf5(path) as f:
        attrs = {k: f.attrs[k] for k in f.attrs}
        if "src_vocab" in attrs:
            splits = {s: int(f[f"{s}/src"].shape[0]) for s in SPLITS if f"{s}/src" in f}
            try:
                vocab = {k: len(json.loads(_text(attrs[k]))) for k in ("src_vocab", "tgt_vocab")}
            except (KeyError, ValueError) as e:
                raise DataError(f"{path}: the vocabulary attributes are not JSON lists: {e}") from None
            return {"path": path, "kind": "sequences", "splits": splits, **vocab}
    ds = HDF5Dataset(path=path)
    shape, nclasses = ds.image_shape, ds.nclasses      # the checks a run makes on the header
    srcs = ds.sources()
    if ds.regression:
        return {"path": path, "kind": "targets", "shape": tuple(shape), "dtype": str(srcs["train"].dtype),
                "names": ds.class_names() or [str(k) for k in range(nclasses)],
                "targets": {s: np.asarray(srcs[s].labels(), np.float64) for s in SPLITS if s in srcs}}
    if ds.per_pixel:
        counts = {s: pixel_counts(srcs[mask_key(s)], nclasses, ds.ignore_label) for s in SPLITS if s in srcs}
    else:
        counts = {s: np.bincount(np.asarray(srcs[s].labels()), minlength=nclasses) for s in SPLITS if s in srcs}
    names = attrs.get("class_names")
    named = names is not None
    names = [_text(n) for n in names] if named else [str(k) for k in range(nclasses)]
    if len(names) != nclasses:
        raise DataError(f"{path}: the attribute class_names holds {len(names)} names for {nclasses} classes")
    record = {k: (_text(attrs[k]) if isinstance(attrs[k], (bytes, str)) else attrs[k].item())
              for k in ("distnet_format", "source", "class_order", "seed", "test_fraction", "valid_fraction")
              if k in attrs}
    return {"path": path, "kind": "images", "splits": {s: int(srcs[s].shape[0]) for s in counts},
            "shape": tuple(shape), "dtype": str(srcs["train"].dtype), "nclasses": nclasses,
            "class_names": names, "named": named, "counts": counts, "attrs": record,
            "masks": str(srcs[mask_key("train")].dtype) if ds.per_pixel else None, "ignore_label": ds.ignore_label}


def pixel_counts(masks, nclasses, ignore, rows_per_read=64):
    """Pixels per class ``(nclasses + 2,)`` of a split's masks (a mask source), read in blocks of
    images: the classes, then the ignore label's pixels, then those of any other value."""
    out = np.zeros(nclasses + 2, np.int64)
    whole = Box.of_spans((0, n) for n in masks.shape[2:])
    for a in range(0, masks.shape[0], rows_per_read):
        ids = masks.read(np.arange(a, min(masks.shape[0], a + rows_per_read)), whole).ravel().astype(np.int64)
        known = (ids >= 0) & (ids < nclasses)
        out[:nclasses] += np.bincount(ids[known], minlength=nclasses)
        out[nclasses] += int((ids == ignore).sum()) if ignore is not None else 0
        out[nclasses + 1] += int((~known).sum()) - (int((ids == ignore).sum()) if ignore is not None else 0)
    return out


def info_lines(info):
    """The lines ``distnet data info`` prints for :func:`dataset_info`'s ``info``."""
    if info["kind"] == "targets":
        return target_lines(info)
    splits = ", ".join(f"{s} {n}" for s, n in info["splits"].items())
    if info["kind"] == "sequences":
        return [f"{info['path']}: sequence pairs: {splits}; source vocabulary {info['src_vocab']} tokens, "
                f"target vocabulary {info['tgt_vocab']} tokens"]
    shape, volumes = info["shape"], len(info["shape"]) == 4
    axes = "C x D x H x W" if volumes else "C x H x W"
    lines = [f"{info['path']}: {splits} {'volumes' if volumes else 'images'} of {'x'.join(map(str, shape))} "
             f"{info['dtype']} ({axes}), {info['nclasses']} classes"]
    if info.get("masks"):
        unit = "voxel" if volumes else "pixel"
        ignore = info["ignore_label"]
        lines.append(f"labels per {unit} (masks, {info['masks']}); ignore label "
                     f"{ignore if ignore is not None else 'none'}; the table counts {unit}s")
    a = info["attrs"]
    if "source" in a:
        order = a.get("class_order")
        made = f"converted from {a['source']}" + (f" (class folders in {order} order)" if order else "")
        drawn = ", ".join(f"{k} {a[k]:g}" if isinstance(a[k], float) else f"{k} {a[k]}"
                          for k in ("seed", "test_fraction", "valid_fraction") if k in a)
        lines.append(f"{made}; {drawn}" if drawn else made)
    if not info["named"]:
        lines.append("no class names stored (attribute class_names): the labels are the names")
    folders = a.get("class_order") is not None
    head = "class folder" if folders else "class"
    width = max(len(head), *(len(n) + folders for n in info["class_names"]))
    splits = list(info["counts"])
    col = max([7] + [len(str(int(v))) for s in splits for v in info["counts"][s]])    # pixel counts grow long
    lines.append(f"{'label':>5}  {head:<{width}}  " + "  ".join(f"{s:>{col}}" for s in splits))
    for k, name in enumerate(info["class_names"]):
        shown = name + "/" if folders else name
        lines.append(f"{k:>5}  {shown:<{width}}  " + "  ".join(f"{int(info['counts'][s][k]):>{col}}" for s in splits))
    if info.get("masks"):
        k = info["nclasses"]
        extra = [("ignored", k)] + ([("no class", k + 1)] if any(info["counts"][s][k + 1] for s in splits) else [])
        for name, i in extra:
            counts = "  ".join(f"{int(info['counts'][s][i]):>{col}}" for s in splits)
            lines.append(f"{'':>5}  {name:<{width}}  {counts}")
    empty = [str(k) for k in range(info["nclasses"]) if not any(info["counts"][s][k] for s in splits)]
    if empty:
        lines.append(f"label(s) {', '.join(empty)} have no {'pixel' if info.get('masks') else 'image'} in any split")
    return lines


def target_lines(info):
    """The lines of ``distnet data info`` for a file of float targets: its splits, then the mean
    and standard deviation of each target per split."""
    shape, t = info["shape"], info["targets"]
    kind = "volumes" if len(shape) == 4 else "images"
    lines = [f"{info['path']}: {', '.join(f'{s} {len(y)}' for s, y in t.items())} {kind} of "
             f"{'x'.join(map(str, shape))} {info['dtype']}, {len(info['names'])} float targets per sample (regression)"]
    width = max(6, *(len(n) for n in info["names"]))
    lines.append(f"{'target':<{width}}  " + "  ".join(f"{s + ' mean':>12}  {s + ' std':>12}" for s in t))
    for k, name in enumerate(info["names"]):
        lines.append(f"{name:<{width}}  " + "  ".join(f"{y[:, k].mean():>12.6g}  {y[:, k].std():>12.6g}"
                                                     for y in t.values()))
    return lines


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
    recipe = read_recipe(path)
    lines = [f"{path}: images decoded as {describe_recipe(recipe)} (distnet predict repeats it on new pictures)"
             if recipe else f"{path}: no convert recipe (not converted from an image folder)"]
    stats = read_stats(path)
    if stats is not None:
        return lines + [stats_line(*stats)]
    with h5py.File(path, "r") as f:
        x = f.get("train/x")
        if not isinstance(x, h5py.Dataset) or x.ndim not in (4, 5) or x.dtype.kind not in "biuf":
            raise DataError(f"{path}: no train/x (N, C, H, W) or (N, C, D, H, W) of numbers to compute statistics "
                            "of (docs/data.md)")
        mean, std = channel_stats(x)
    if store:
        try:
            with h5py.File(path, "r+") as f:
                f.attrs[MEAN_ATTR], f.attrs[STD_ATTR] = mean, std
        except (OSError, RuntimeError) as e:
            raise DataError(f"cannot store the statistics in {path}: {write_failure(e)}") from None
    return lines + [stats_line(mean, std) + ("; stored in the file" if store else
                                             "; computed now, not stored (--write stores them)")]
