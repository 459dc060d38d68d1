"""Splits drawn by group (``distnet data convert --group-by REGEX``): every image of one source
(the crops of one photo, the frames of one recording, the slides of one patient) goes to one
split, so the test split measures new sources, not new crops of sources the model trained on.

An image's group is what ``REGEX`` finds in its path under its class folder (``photo12/crop3.png``,
``astronaut_012.png``): the regex's first group where it has one, else the whole match; an
image the regex does not match is an error naming it. The draw walks the same permutation as
the plain draw (:func:`~.splits.draw_splits`, ``np.random.RandomState(seed).permutation(N)``):
each group meets it at its first image, and goes whole to the test split while that split holds
fewer than ``round(N * test_fraction)`` images, then to the validation split likewise, then to
train; the split sizes are as close as whole groups allow. Every split keeps the permutation's
order of its images, so classes stay mixed. With ``--stratify`` the fractions hold class by
class (a group counts for the class of its first image).
"""
import re

import numpy as np

from ..errors import DataError, OptionError
from .report import shown


def parse_group_by(text):
    """``--group-by``'s regular expression, compiled; OptionError for one Python cannot read."""
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as e:
        raise OptionError(f"--group-by {text!r} is not a regular expression: {e}") from None


def group_keys(names, pattern):
    """The group of every image by its ``names`` (its path under its class folder): the first
    group of ``pattern`` where it has one, else the whole match; DataError naming the images it
    does not match."""
    keys, unmatched = [], []
    for name in names:
        m = pattern.search(name)
        key = (m.group(1) if pattern.groups else m.group(0)) if m else None
        if not key:
            unmatched.append(name)
        keys.append(key)
    if unmatched:
        raise DataError(f"--group-by '{pattern.pattern}' finds no group in {len(unmatched)} image path(s) (paths "
                        f"under their class folder): {shown(unmatched)}")
    return keys


def draw_groups(keys, test_fraction, valid_fraction, seed, what, labels=None):
    """``{split: positions}`` of the ``len(keys)`` images, whole groups per split (module
    docstring); with ``labels`` (``--stratify``) the fractions hold class by class, a group
    counting for the class of its first image in the permutation. DataError when the groups
    cannot give every split asked for an image and leave train one."""
    n = len(keys)
    perm = np.random.RandomState(seed).permutation(n)
    labels = np.zeros(n, dtype=np.int64) if labels is None else np.asarray(labels)
    sizes, kind = {}, {}
    for i in perm:
        sizes[keys[i]] = sizes.get(keys[i], 0) + 1
        kind.setdefault(keys[i], int(labels[i]))
    per_class = {}
    for k, c in kind.items():
        per_class[c] = per_class.get(c, 0) + sizes[k]
    want = {c: {"test": int(round(m * test_fraction)), "valid": int(round(m * valid_fraction))}
            for c, m in per_class.items()}
    held = {c: {"test": 0, "valid": 0, "train": 0} for c in per_class}
    side = {}
    for i in perm:
        k = keys[i]
        if k in side:
            continue
        c = kind[k]
        split = next((s for s in ("test", "valid") if held[c][s] < want[c][s]), "train")
        side[k] = split
        held[c][split] += sizes[k]
    for split, frac in (("test", test_fraction), ("valid", valid_fraction), ("train", 1.0)):
        if frac > 0 and not any(h[split] for h in held.values()):
            raise DataError(f"{what}: the {len(sizes)} group(s) of --group-by cannot give the {split} split an image "
                            f"(test_fraction {test_fraction}, valid_fraction {valid_fraction}); give more groups or "
                            "other fractions")
    out = {s: np.array([i for i in perm if side[keys[i]] == s], dtype=np.int64) for s in ("test", "valid", "train")}
    return {s: v for s, v in out.items() if len(v) or s == "train"}


def group_line(pattern, keys, pos, stratify=False):
    """The converter's line on a grouped draw: the groups and images of every split."""
    parts = [f"{s} {len({keys[i] for i in p})} group(s), {len(p)} image(s)" for s, p in pos.items()]
    how = ", class by class (--stratify)" if stratify else ""
    return (f"splits drawn by group (--group-by '{pattern.pattern}': {len(set(keys))} groups, every group in one "
            f"split{how}): {'; '.join(parts)}")
