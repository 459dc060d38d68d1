"""Arrays to the HDF5 layout (:mod:`.writer`): an ``.npz`` with ``x_train``/``y_train`` (and
optionally ``x_test``/``y_test``, ``x_valid``/``y_valid``), or with ``x``/``y``; or an ``.npy`` of
images with ``labels`` (an ``.npy`` of labels). Images ``(N, C, H, W)`` or ``(N, H, W)``; any
numeric dtype, stored as is (uint8 stays uint8). ``.npy`` files are memory-mapped and copied in
blocks. ``(N, H, W, C)`` arrays are transposed with ``layout="nhwc"``; without a layout, an array
whose last axis looks like channels (1, 3 or 4) and whose second does not is refused
(``layout="nchw"`` keeps it). Classes are named ``0``, ``1``, ... unless ``class_names`` names a
text file of one name per line. Splits the source does not give are drawn (:mod:`.splits`);
those it gives keep their order.
"""
import os

import numpy as np

from ..data.checks import labels_problem
from ..errors import DataError, OptionError
from .report import missing_classes_note, split_line, unused_labels_note
from .splits import draw_splits
from .writer import summary, write


_COPY_ROWS = 256


def _load_array(path, mmap=True):
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {path}: {e}") from None


def _array_splits(src, labels_path):
    """``{split: (x, y, where)}`` from an .npz or an .npy (+ labels .npy)."""
    if src.lower().endswith(".npz"):
        z = _load_array(src, mmap=False)
        with z:
            names = set(z.files)
            if {"x", "y"} <= names and "x_train" not in names:
                split = sorted(names & {f"{a}_{s}" for a in "xy" for s in ("test", "valid")})
                if split:       # they were ignored, and a test split drawn from x
                    raise DataError(f"{src} holds x, y and {', '.join(split)}: name the training arrays "
                                    "x_train, y_train (x, y alone are split by --test-fraction)")
                return {"train": (z["x"], z["y"], src)}
            if not {"x_train", "y_train"} <= names:
                raise DataError(f"{src} holds arrays {sorted(names)}; expected x_train, y_train (and "
                                "optionally x_test, y_test, x_valid, y_valid), or x, y")
            for s in ("test", "valid"):
                half = [f"{a}_{s}" for a in "xy" if f"{a}_{s}" in names]
                if len(half) == 1:
                    other = ("y_" if half[0][0] == "x" else "x_") + s
                    raise DataError(f"{src} holds {half[0]} without {other}: give both (or neither)")
            return {s: (z[f"x_{s}"], z[f"y_{s}"], src) for s in ("train", "test", "valid")
                    if f"x_{s}" in names and f"y_{s}" in names}
    if labels_path is None:
        raise OptionError(f"{src} holds images only: give the labels (.npy) with --labels")
    return {"train": (_load_array(src), _load_array(labels_path, mmap=False), labels_path)}


#: Channel counts that make a 4-d array's last axis look like channels (gray, RGB, RGBA).
_CHANNEL_COUNTS = (1, 3, 4)


def _check_layout(x, layout, src, split):
    """``x`` as ``(N, C, H, W)``: transposed from ``(N, H, W, C)`` with ``layout="nhwc"``; with
    no layout, a DataError when the last axis looks like channels and the second does not."""
    if x.ndim != 4 or layout == "nchw":
        return x
    if layout == "nhwc":
        return x.transpose(0, 3, 1, 2)
    if layout is not None:
        raise OptionError(f"layout must be nchw or nhwc, got {layout!r}")
    if x.shape[3] in _CHANNEL_COUNTS and x.shape[1] not in _CHANNEL_COUNTS:
        raise DataError(f"{src}: {split} images are {x.shape}, which looks like (N, H, W, C) (channels "
                        f"last) but distnet stores (N, C, H, W): give --layout nhwc to transpose them, or "
                        f"--layout nchw if they really are {x.shape[1]} channels of {x.shape[2]}x{x.shape[3]} "
                        "pixels")
    return x


def _check_arrays(x, y, where, split):
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4 or x.dtype.kind not in "biuf":
        raise DataError(f"{where}: {split} images must be a numeric (N, C, H, W) or (N, H, W) array, "
                        f"got {x.dtype} {x.shape}")
    y = np.asarray(y)
    problem = labels_problem(y, len(x))
    if problem:
        raise DataError(f"{where}: {split} labels {problem}")
    if len(y) == 0:
        raise DataError(f"{where}: the {split} split holds no images")
    if y.min() < 0:
        raise DataError(f"{where}: {split} label {int(y.min())} is out of range (negative)")
    return x, y.astype(np.int64)


def convert_arrays(src, out, labels=None, test_fraction=0.2, valid_fraction=0.0, seed=0,
                   class_names=None, layout=None, stratify=False):
    """Write ``out`` from ``.npz`` / ``.npy`` arrays (module docstring); returns a summary.
    ``layout``: ``"nchw"`` (store 4-d arrays as they are), ``"nhwc"`` (transpose them), None
    (as they are, refusing arrays whose last axis looks like channels)."""
    if not os.path.isfile(src):
        raise DataError(f"{src} does not exist")
    given = {s: _check_arrays(_check_layout(x, layout, src, s), y, where if s == "train" else src, s)
             for s, (x, y, where) in _array_splits(src, labels).items()}
    shape = given["train"][0].shape[1:]
    for s, (x, _) in given.items():
        if x.shape[1:] != shape:
            raise DataError(f"{src}: {s} images are {x.shape[1:]}, train {shape}")
        if x.dtype != given["train"][0].dtype:      # stored in train's dtype, they would be cast
            raise DataError(f"{src}: {s} images are {x.dtype} but train images {given['train'][0].dtype}; "
                            "store every split in one dtype")
    # rows of each output split: (source split, positions)
    plan = {s: (s, np.arange(len(given[s][1]))) for s in given}
    draw_test = "test" not in given
    draw_valid = "valid" not in given and valid_fraction > 0
    unused = (f"valid_fraction {valid_fraction:g} is not used: {src} holds the validation split (x_valid, "
              "y_valid)") if "valid" in given and valid_fraction > 0 else None
    if draw_test or draw_valid:
        pos = draw_splits(len(given["train"][1]), test_fraction if draw_test else 0.0,
                           valid_fraction if draw_valid else 0.0, seed, src,
                           given["train"][1] if stratify else None)
        for s, p in pos.items():
            plan[s] = ("train", p)
    if "test" not in plan:
        raise DataError(f"{src}: no test split (give x_test/y_test or a test_fraction > 0)")
    nclasses = 1 + max(int(given[s][1].max()) for s in given)
    names = list(class_names) if class_names else [str(k) for k in range(nclasses)]
    if len(names) < nclasses:
        raise DataError(f"{src}: label {nclasses - 1} is out of range for the {len(names)} class names "
                        f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})")
    dtype = given["train"][0].dtype

    def fill(split, dset):
        s, p = plan[split]
        x = given[s][0]
        for a in range(0, len(p), _COPY_ROWS):
            pb = p[a:a + _COPY_ROWS]
            order = np.argsort(pb, kind="stable")      # read in file order, store in p's order
            block = np.empty((len(pb),) + shape, dtype)
            block[order] = np.asarray(x[pb[order]])
            if block.dtype.kind == "f" and not np.isfinite(block).all():
                bad = int(pb[int(np.argmax(~np.isfinite(block.reshape(len(block), -1)).all(1)))])
                raise DataError(f"{src}: {s} image {bad} holds NaN or inf values")
            dset[a:a + len(block)] = block

    labels_out = {s: given[src_split][1][p] for s, (src_split, p) in plan.items()}
    write(out, {s: (len(p), shape, dtype) for s, (_, p) in plan.items()}, fill, labels_out, names,
           src, seed, test_fraction, valid_fraction, {"stratify": bool(stratify)})
    info = summary(out)
    info["split"] = split_line(stratify, [s for s in ("test", "valid") if s in plan and plan[s][0] != s])
    note = unused_labels_note(np.concatenate(list(labels_out.values())), len(names))
    info["notes"] = [n for n in (unused, note, None if note else missing_classes_note(labels_out, names)) if n]
    return info


def read_class_names(path):
    """The class names of a text file, one per line (label 0 first; UTF-8, a byte-order mark
    dropped); DataError naming ``file:line`` for an empty line or a name given twice."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read class names {path}: {e}") from None
    if lines and lines[-1] == "":
        lines.pop()
    seen = {}
    for n, line in enumerate(lines, 1):
        name = line.strip()
        if not name:
            raise DataError(f"{path}:{n}: empty line; give one class name per line, label 0 first")
        if name in seen:
            raise DataError(f"{path}:{n}: class name {name!r} again (line {seen[name]})")
        seen[name] = n
    if not seen:
        raise DataError(f"{path} holds no class names")
    return list(seen)
