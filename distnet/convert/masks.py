"""Masks for ``distnet data convert SOURCE OUT --masks MASKS``: pairing images (or volumes) with
their masks by file name, the class ids they hold, the class names and the ignore label.

An image ``SOURCE/a/b.png`` is paired with the mask of the same path and stem under MASKS
(``MASKS/a/b.png``, or ``b.npy``, ``b.nii.gz``, ... for volumes: the extension may differ). A
2-D mask is an *index PNG* (or any image file Pillow reads losslessly): a palette image (mode
``P``, its pixels the palette indices) or one channel of class ids (``L``, ``I``, ``I;16``,
``1``); an RGB(A) mask is refused (colours are no class ids: save it with a palette).

Class ids are ``0 .. K-1``; the *ignore label* (``--ignore-label``, default 255) marks pixels that
count for nothing (borders, unlabeled). ``K`` is the number of names in ``--classes FILE`` (one
per line, class 0 first), else one more than the largest class id in any mask. A class id not
below ``K`` (and not the ignore label) is an error naming the file, the value and, for a palette
mask, its colour.
"""
import os

import numpy as np

from ..errors import DataError, OptionError
from .report import shown

#: The default ``--ignore-label`` (Pascal VOC's border label).
DEFAULT_IGNORE = 255
#: Pillow modes of index masks.
MASK_MODES = ("P", "L", "1", "I", "I;16", "I;16B", "I;16L", "I;16N")
#: Extensions of one file name that are one suffix (``b.nii.gz`` is ``b``).
_DOUBLE = (".nii.gz",)


def stem(path):
    """``path`` without its extension (``a/b.png`` -> ``a/b``, ``c.nii.gz`` -> ``c``)."""
    low = path.lower()
    for ext in _DOUBLE:
        if low.endswith(ext):
            return path[:-len(ext)]
    return os.path.splitext(path)[0]


def pair_masks(folder, files, masks_folder, mask_files):
    """``[(file, mask)]`` (paths) pairing each of ``files`` (paths relative to ``folder``) with
    the mask of its stem among ``mask_files`` (relative to ``masks_folder``), and the notes (masks
    without an image). DataError for an image without a mask, or a stem with two masks."""
    by_stem = {}
    for m in mask_files:
        other = by_stem.setdefault(stem(m), m)
        if other != m:
            raise DataError(f"{os.path.join(masks_folder, other)} and {os.path.join(masks_folder, m)} are masks of "
                            "one name: keep one")
    lacking = [f for f in files if stem(f) not in by_stem]
    if lacking:
        raise DataError(f"{len(lacking)} image(s) of {folder} have no mask of the same name in {masks_folder}: "
                        f"{shown(os.path.join(folder, f) for f in lacking)}")
    used = {stem(f) for f in files}
    spare = sorted(os.path.join(masks_folder, m) for s, m in by_stem.items() if s not in used)
    notes = [f"skipped {len(spare)} mask(s) without an image of the same name: {shown(spare)}"] if spare else []
    return [(os.path.join(folder, f), os.path.join(masks_folder, by_stem[stem(f)])) for f in files], notes


def read_png_mask(Image, path):
    """``(class ids (H, W) int64, palette (256, 3) uint8 or None)`` of a 2-D mask file;
    DataError naming it when it is no index image (RGB) or cannot be read."""
    try:
        with Image.open(path) as im:
            mode = im.mode
            if mode not in MASK_MODES:
                raise DataError(f"mask {path} is an image of mode {mode}: a mask holds one class id per pixel, "
                                "as a palette PNG (mode P) or a single-channel PNG of the ids (mode L), not colours; "
                                "save it with a palette (Image.convert('P') of a colour mask maps colours to indices) "
                                "or as ids")
            ids = np.asarray(im).astype(np.int64)
            palette = im.getpalette() if mode == "P" else None
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - PIL raises many types for bad files
        raise DataError(f"cannot read mask {path}: {type(e).__name__}: {e}") from None
    if palette is not None:
        palette = np.asarray(palette[:768] + [0] * (768 - len(palette[:768])), np.uint8).reshape(256, 3)
    return ids, palette


def read_class_file(path):
    """The class names of ``--classes FILE``: one per line, class 0 first (blank lines at the end
    dropped); OptionError for a file without names or with a name twice."""
    with open(path, encoding="utf-8") as f:
        names = [line.strip() for line in f.read().splitlines()]
    while names and not names[-1]:
        names.pop()
    if not names or not all(names):
        raise OptionError(f"--classes {path}: give one class name per line, class 0 first (no blank lines)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise OptionError(f"--classes {path}: {twice[0]} is named twice")
    return names


class ClassIds:
    """The class ids met while the masks are read: checks each mask against the classes and
    the ignore label, and tells ``K``, the names and (palette masks) the colours at the end.

    names : list of str or None
        ``--classes``: the classes (every id must be below their number), else None (``K`` is
        one more than the largest id).
    ignore : int
        The ignore label (not a class).
    """

    def __init__(self, names, ignore):
        if ignore is not None and names is not None and ignore < len(names):
            raise OptionError(f"--ignore-label {ignore} is class {names[ignore]!r}: give a label that is no class "
                              f"(at least {len(names)})")
        self.names, self.ignore = names, ignore
        self.top, self.colors = -1, {}

    def check(self, ids, path, palette=None):
        """Enter one mask's ``ids``; DataError naming ``path`` for an id out of range."""
        values = np.unique(ids)
        classes = values[values != self.ignore] if self.ignore is not None else values
        if classes.size and classes[0] < 0:
            raise DataError(f"mask {path} holds the negative class id {int(classes[0])}")
        if self.names is not None and classes.size and classes[-1] >= len(self.names):
            bad = int(classes[-1])
            colour = f" (palette colour #{bytes(palette[bad]).hex()})" if palette is not None and bad < 256 else ""
            raise DataError(f"mask {path} holds class id {bad}{colour}, out of range 0..{len(self.names) - 1} "
                            f"({len(self.names)} classes in --classes; ignore label {self.ignore})")
        if classes.size:
            self.top = max(self.top, int(classes[-1]))
        if palette is not None:
            for v in classes.tolist():
                self.colors.setdefault(v, bytes(palette[v]).hex())

    def classes(self, what):
        """The class names (``"0"``, ``"1"``, ... without ``--classes``); DataError when no mask
        holds a class (``what``: the masks, in words)."""
        if self.names is not None:
            return list(self.names)
        if self.top < 0:
            raise DataError(f"{what} hold no class id (every pixel is the ignore label {self.ignore})")
        if self.ignore is not None and self.ignore <= self.top:
            raise DataError(f"--ignore-label {self.ignore} lies among the class ids of {what} (0 .. {self.top}), but "
                            "the ignore label is no class: give the value that marks their ignored pixels (default "
                            "255), or --classes to say which ids are classes")
        return [str(k) for k in range(self.top + 1)]

    def dtype(self):
        """The smallest unsigned type that holds every class id and the ignore label."""
        top = max(len(self.names or []), self.top + 1, (self.ignore or 0) + 1)
        return np.dtype(np.uint8 if top <= 256 else np.uint16 if top <= 65536 else np.uint32)

    def attrs(self):
        """The root attributes of the masks: ``ignore_label``, and ``class_colors`` (palette
        masks: each class's colour as ``rrggbb``, ``""`` where none was seen)."""
        out = {"ignore_label": int(self.ignore)} if self.ignore is not None else {}
        if self.colors:
            k = len(self.names) if self.names is not None else self.top + 1
            out["class_colors"] = [self.colors.get(c, "") for c in range(k)]
        return out


__all__ = ["ClassIds", "DEFAULT_IGNORE", "pair_masks", "read_class_file", "read_png_mask", "stem"]
