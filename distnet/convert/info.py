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

from ..data.sources import open_hdf5
from ..data.stats import MEAN_ATTR, STD_ATTR, channel_stats, read_stats
from ..datasets.hdf5 import HDF5Dataset
from ..errors import DataError
from ..fileio import write_failure
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
    Sequences: ``splits`` ``{split: pairs}``, ``src_vocab`` / ``tgt_vocab`` sizes.
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
    counts = {s: np.bincount(np.asarray(srcs[s].labels()), minlength=nclasses)
              for s in SPLITS if s in srcs}
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
            "class_names": names, "named": named, "counts": counts, "attrs": record}


def info_lines(info):
    """The lines ``distnet data info`` prints for :func:`dataset_info`'s ``info``."""
    splits = ", ".join(f"{s} {n}" for s, n in info["splits"].items())
    if info["kind"] == "sequences":
        return [f"{info['path']}: sequence pairs: {splits}; source vocabulary {info['src_vocab']} tokens, "
                f"target vocabulary {info['tgt_vocab']} tokens"]
    C, H, W = info["shape"]
    lines = [f"{info['path']}: {splits} images of {C}x{H}x{W} {info['dtype']} (C x H x W), "
             f"{info['nclasses']} classes"]
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
    lines.append(f"{'label':>5}  {head:<{width}}  " + "  ".join(f"{s:>7}" for s in splits))
    for k, name in enumerate(info["class_names"]):
        shown = name + "/" if folders else name
        lines.append(f"{k:>5}  {shown:<{width}}  " + "  ".join(f"{int(info['counts'][s][k]):>7}" for s in splits))
    empty = [str(k) for k in range(info["nclasses"]) if not any(info["counts"][s][k] for s in splits)]
    if empty:
        lines.append(f"label(s) {', '.join(empty)} have no image in any split")
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
