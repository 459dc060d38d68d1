"""The splits a converter draws: the images of a split not given by the source are drawn from the
training images with ``np.random.RandomState(seed).permutation(N)``: the first ``round(N *
test_fraction)`` are the test split, the next ``round(N * valid_fraction)`` the validation split,
the rest train. Every split drawn this way is stored in that shuffled order (so classes are mixed
even without ``shuffle``). With ``stratify`` the same permutation is walked class by class
(:func:`_stratified`), so every class is in every drawn split in proportion.
"""
import numpy as np

from ..errors import DataError


def draw_splits(n, test_fraction, valid_fraction, seed, what, labels=None):
    """``{split: positions}`` drawn from ``n`` items (module docstring); with ``labels`` (``(n,)``
    ints: ``--stratify``) each class is split on its own by the fractions (:func:`_stratified`)."""
    perm = np.random.RandomState(seed).permutation(n)
    if labels is not None:
        return _stratified(perm, np.asarray(labels), test_fraction, valid_fraction, what)
    n_test, n_valid = int(round(n * test_fraction)), int(round(n * valid_fraction))
    for name, frac, k in (("test_fraction", test_fraction, n_test), ("valid_fraction", valid_fraction, n_valid)):
        if frac > 0 and k == 0:
            raise DataError(f"{what}: {name} {frac} of {n} images is round({n * frac:g}) = 0 "
                            f"{name.split('_')[0]} images; give a larger fraction or more images")
    if n - n_test - n_valid < 1:
        raise DataError(f"{what}: test_fraction {test_fraction} and valid_fraction {valid_fraction} "
                        f"leave no training image of {n}")
    out = {"test": perm[:n_test], "valid": perm[n_test:n_test + n_valid], "train": perm[n_test + n_valid:]}
    return {k: v for k, v in out.items() if len(v) or k == "train"}


def _stratified(perm, labels, test_fraction, valid_fraction, what):
    """The stratified draw: the same permutation ``perm`` as the plain draw, walked class by
    class: of the ``n_k`` images of class ``k`` (in ``perm``'s order) the first
    ``round(n_k * test_fraction)`` go to test, the next ``round(n_k * valid_fraction)`` to
    valid, the rest to train; every split keeps ``perm``'s order, so classes stay mixed. A class
    too small for a split is left out of it (the converter's note says which)."""
    ranked = labels[perm]
    side = np.empty(len(perm), dtype=np.int8)     # 0 test, 1 valid, 2 train, by position in perm
    for k in np.unique(labels):
        at = np.flatnonzero(ranked == k)
        n_k = len(at)
        n_test, n_valid = int(round(n_k * test_fraction)), int(round(n_k * valid_fraction))
        n_test, n_valid = min(n_test, n_k - 1), min(n_valid, max(0, n_k - 1 - min(n_test, n_k - 1)))
        side[at[:n_test]], side[at[n_test:n_test + n_valid]], side[at[n_test + n_valid:]] = 0, 1, 2
    out = {"test": perm[side == 0], "valid": perm[side == 1], "train": perm[side == 2]}
    for name, frac in (("test", test_fraction), ("valid", valid_fraction)):
        if frac > 0 and not len(out[name]):
            raise DataError(f"{what}: {name}_fraction {frac} of every class rounds to 0 images; give a larger "
                            "fraction or more images")
    return {k: v for k, v in out.items() if len(v) or k == "train"}
