"""Which stored rows each split uses: ``sample_pct`` (one meaning for every dataset) and the
validation hold-out (``valid_fraction``). Pure functions of counts and seeds.

``sample_pct``
--------------
A percentage in (0, 100] of the training images to keep; the test split is always complete.

* ``100`` (the default): all ``N`` training images in file order.
* otherwise ``n = floor(N * sample_pct / 100)`` (at least 1; the product is computed exactly from
  the decimal value written, so ``N = 60000, sample_pct = 0.3`` keeps 180), and the images kept
  are ``idx[:n]`` where ``idx = np.arange(N)`` shuffled by ``np.random.RandomState(seed).shuffle``
  — in that **shuffled order**, which is also the order every epoch starts from. Labels are
  selected with the same indices.

Differences from neon v0.4.0 (docs/neon-semantics.md#subsampling):

* neon's MNIST divided ``sample_pct >= 1`` by 100 but took smaller values as fractions, so ``1``
  meant 1 % while ``0.5`` meant 50 %. Here ``0.5`` means 0.5 %.
* neon's CIFAR10 truncated ``sample_pct`` with ``int()`` (``0.5`` kept no image, ``2.7`` meant 2 %).
  Here fractional percentages count.
* neon shuffled with the *global* numpy RNG after the backend had seeded it and the model had
  drawn its weights, so the subset depended on the layers before it. distnet uses a fresh
  ``RandomState(seed)``; for the same seed the shuffle is neon's shuffle of a freshly seeded RNG.

Validation split (:func:`split_rows`)
-------------------------------------
The file's ``valid`` split if it has one, else ``valid_fraction`` of the training images
(``round(N * valid_fraction)`` of them, chosen by ``np.random.RandomState(0).permutation(N)``,
kept in file order) held out of train; then ``sample_pct`` keeps a subset of the remaining
training images as above.
"""
import math
from fractions import Fraction

import numpy as np

from ..errors import ConfigError

#: Seed of the validation hold-out (valid_fraction): fixed, independent of the model's seed.
VALID_SEED = 0


def sample_indices(n_total, sample_pct, seed):
    """Indices of the training images kept by ``sample_pct`` (module docstring), shape ``(n,)``."""
    if sample_pct == 100:
        return np.arange(n_total)
    n = max(1, math.floor(n_total * Fraction(str(sample_pct)) / 100))
    idx = np.arange(n_total)
    np.random.RandomState(seed).shuffle(idx)
    return idx[:n]


def split_rows(counts, valid_fraction=0.0, sample_pct=100, seed=0):
    """``{split: stored rows}`` in the order train, valid, test (module docstring). ``counts``:
    ``{split: N}`` of the stored splits (``train``, ``test``, optionally ``valid``); a held-out
    validation split holds rows of the stored train split. ConfigError (key ``valid_fraction``)
    when the hold-out would take no image or every image."""
    n_train = counts["train"]
    rows = {"test": np.arange(counts["test"])}
    train = np.arange(n_train)
    if "valid" in counts:
        rows["valid"] = np.arange(counts["valid"])
    elif valid_fraction > 0:
        n_valid = int(round(n_train * valid_fraction))
        if not 0 < n_valid < n_train:
            raise ConfigError(f"valid_fraction {valid_fraction} of {n_train} training images "
                              f"holds out {n_valid}: need at least 1 and leave 1", key="valid_fraction")
        held = np.zeros(n_train, bool)
        held[np.random.RandomState(VALID_SEED).permutation(n_train)[:n_valid]] = True
        rows["valid"] = np.flatnonzero(held)
        train = np.flatnonzero(~held)
    if sample_pct != 100:
        train = train[sample_indices(len(train), sample_pct, seed)]
    rows["train"] = train
    return {s: rows[s] for s in ("train", "valid", "test") if s in rows}   # the order runs print
