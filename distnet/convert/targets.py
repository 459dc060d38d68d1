"""``distnet data convert VOLUMES OUT.h5 --targets TARGETS.csv``: a folder of 3-D volumes and a CSV
of float targets per volume (regression, e.g. CosmoFlow's cosmological parameters) to the HDF5
layout: ``<split>/x`` ``(N, C, D, H, W)`` as :mod:`.volumes` writes it and ``<split>/y`` float32
``(N, T)``, the targets' names in the root attribute ``target_names``
(docs/volumes.md#regression-on-volumes-cosmoflow).

The CSV's first row names the targets after a first cell for the file names
(``name,omega_m,sigma_8``); every other row is a volume's file name (its path under VOLUMES,
with or without its extension) and ``T`` finite numbers. Every volume needs one row and every
row one volume; anything else is a DataError naming the file and line.
"""
import csv
import os

import numpy as np

from ..datasets.hdf5 import TARGETS_ATTR
from ..errors import DataError
from .masks import stem
from .segmentation import files_of
from .splits import draw_splits
from .volumes import VOLUME_EXTENSIONS, survey_volumes, volume_reader
from .writer import summary, write

def _number(text, path, line, name):
    """``text`` as a finite float; DataError at ``path:line`` naming the column otherwise."""
    try:
        v = float(text)
    except ValueError:
        v = None
    if v is None or not np.isfinite(v):
        raise DataError(f"{path}:{line}: {name} is {text.strip()!r}, not a finite number")
    return v


def read_targets(path):
    """``(names, {stem: (line, values (T,))})`` of a targets CSV (module docstring)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = [(n, r) for n, r in enumerate(csv.reader(f), 1) if any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"cannot read targets {path}: {e}") from None
    if len(rows) < 2:
        raise DataError(f"{path}: a header row (name,target1,...) and a row per volume are needed")
    names = [c.strip() for c in rows[0][1][1:]]
    if not names or not all(names):
        raise DataError(f"{path}:{rows[0][0]}: the first row names the targets after the file name's column "
                        "(e.g. name,omega_m,sigma_8)")
    out = {}
    for line, row in rows[1:]:
        if len(row) != len(names) + 1:
            raise DataError(f"{path}:{line}: {len(row) - 1} value(s), but the header names {len(names)} targets")
        key = stem(row[0].strip())
        if key in out:
            raise DataError(f"{path}:{line}: {row[0].strip()} again (line {out[key][0]})")
        out[key] = (line, [_number(c, path, line, n) for c, n in zip(row[1:], names)])
    return names, out


def pair_targets(src, files, path, rows):
    """``(volume paths, targets (N, T) float32)`` of ``files`` (relative to ``src``) in order;
    DataError for a volume without a row or a row without a volume."""
    lacking = [f for f in files if stem(f) not in rows]
    if lacking:
        raise DataError(f"{path} has no row for {len(lacking)} volume(s) of {src}: {', '.join(lacking[:3])}"
                        + (", ..." if len(lacking) > 3 else ""))
    known = {stem(f) for f in files}
    spare = sorted((line, key) for key, (line, _) in rows.items() if key not in known)
    if spare:
        raise DataError(f"{path}:{spare[0][0]}: {spare[0][1]} names no volume of {src} "
                        f"({len(spare)} such row(s))")
    targets = np.array([rows[stem(f)][1] for f in files], dtype=np.float32)
    return [os.path.join(src, f) for f in files], targets


def convert_volume_targets(src, out, targets_csv, test_fraction=0.2, valid_fraction=0.0, seed=0):
    """Write ``out`` from the volumes under ``src`` and their rows of ``targets_csv`` (module
    docstring); the splits drawn as for any source. Returns the summary dict with ``notes``."""
    names, rows = read_targets(targets_csv)
    paths, targets = pair_targets(src, files_of(src, VOLUME_EXTENSIONS, "volumes"), targets_csv, rows)
    shape, dtype = survey_volumes(paths)
    pos = draw_splits(len(paths), test_fraction, valid_fraction, seed, src)
    read = volume_reader(dtype)

    def fill(split, dset):
        for i, k in enumerate(pos[split]):
            dset[i] = read(paths[k])

    write(out, {s: (len(p), shape, dtype) for s, p in pos.items()}, fill, {s: targets[p] for s, p in pos.items()},
          None, src, seed, test_fraction, valid_fraction,
          {TARGETS_ATTR: names, "targets_source": os.path.abspath(targets_csv)})
    info = summary(out)
    info["notes"] = []
    return info


__all__ = ["TARGETS_ATTR", "convert_volume_targets", "pair_targets", "read_targets"]
