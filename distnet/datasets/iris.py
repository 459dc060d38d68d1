"""Fisher's Iris data set (neon's ``neon.datasets.iris.Iris``): 150 flowers, 50 of each of three
species, four measurements each; carried in this module, so nothing is read or downloaded.

Features, in order (cm): sepal length, sepal width, petal length, petal width. Labels: 0 setosa,
1 versicolor, 2 virginica (neon one-hot encoded them; here the model does, as for every dataset).

The numbers are Fisher's (1936) as scikit-learn ships them (``sklearn/datasets/data/iris.csv``),
which are also neon's: they include the two corrections to the UCI copy (flower 35 has petal
width 0.2, flower 38 is 4.9 3.6 1.4 0.1). Column sums 876.5, 458.6, 563.7, 179.9 (tests check them).

Split (neon's): of each species the flowers 0-29 train, 30-39 validate, 40-49 test, stacked
species by species: train 90, test 30 images. distnet's datasets have train and test splits, so
the 30 validation flowers are not used (neon 0.4's experiments did not report them either).
"""
import numpy as np

from ..data.sources import ArraySource
from .base import Dataset

#: 150 rows of ``sepal_length sepal_width petal_length petal_width``, 50 per species in the order
#: setosa, versicolor, virginica; five rows per line, separated by ``|``.
_DATA = """
    5.1 3.5 1.4 0.2 | 4.9 3.0 1.4 0.2 | 4.7 3.2 1.3 0.2 | 4.6 3.1 1.5 0.2 | 5.0 3.6 1.4 0.2
    5.4 3.9 1.7 0.4 | 4.6 3.4 1.4 0.3 | 5.0 3.4 1.5 0.2 | 4.4 2.9 1.4 0.2 | 4.9 3.1 1.5 0.1
    5.4 3.7 1.5 0.2 | 4.8 3.4 1.6 0.2 | 4.8 3.0 1.4 0.1 | 4.3 3.0 1.1 0.1 | 5.8 4.0 1.2 0.2
    5.7 4.4 1.5 0.4 | 5.4 3.9 1.3 0.4 | 5.1 3.5 1.4 0.3 | 5.7 3.8 1.7 0.3 | 5.1 3.8 1.5 0.3
    5.4 3.4 1.7 0.2 | 5.1 3.7 1.5 0.4 | 4.6 3.6 1.0 0.2 | 5.1 3.3 1.7 0.5 | 4.8 3.4 1.9 0.2
    5.0 3.0 1.6 0.2 | 5.0 3.4 1.6 0.4 | 5.2 3.5 1.5 0.2 | 5.2 3.4 1.4 0.2 | 4.7 3.2 1.6 0.2
    4.8 3.1 1.6 0.2 | 5.4 3.4 1.5 0.4 | 5.2 4.1 1.5 0.1 | 5.5 4.2 1.4 0.2 | 4.9 3.1 1.5 0.2
    5.0 3.2 1.2 0.2 | 5.5 3.5 1.3 0.2 | 4.9 3.6 1.4 0.1 | 4.4 3.0 1.3 0.2 | 5.1 3.4 1.5 0.2
    5.0 3.5 1.3 0.3 | 4.5 2.3 1.3 0.3 | 4.4 3.2 1.3 0.2 | 5.0 3.5 1.6 0.6 | 5.1 3.8 1.9 0.4
    4.8 3.0 1.4 0.3 | 5.1 3.8 1.6 0.2 | 4.6 3.2 1.4 0.2 | 5.3 3.7 1.5 0.2 | 5.0 3.3 1.4 0.2
    7.0 3.2 4.7 1.4 | 6.4 3.2 4.5 1.5 | 6.9 3.1 4.9 1.5 | 5.5 2.3 4.0 1.3 | 6.5 2.8 4.6 1.5
    5.7 2.8 4.5 1.3 | 6.3 3.3 4.7 1.6 | 4.9 2.4 3.3 1.0 | 6.6 2.9 4.6 1.3 | 5.2 2.7 3.9 1.4
    5.0 2.0 3.5 1.0 | 5.9 3.0 4.2 1.5 | 6.0 2.2 4.0 1.0 | 6.1 2.9 4.7 1.4 | 5.6 2.9 3.6 1.3
    6.7 3.1 4.4 1.4 | 5.6 3.0 4.5 1.5 | 5.8 2.7 4.1 1.0 | 6.2 2.2 4.5 1.5 | 5.6 2.5 3.9 1.1
    5.9 3.2 4.8 1.8 | 6.1 2.8 4.0 1.3 | 6.3 2.5 4.9 1.5 | 6.1 2.8 4.7 1.2 | 6.4 2.9 4.3 1.3
    6.6 3.0 4.4 1.4 | 6.8 2.8 4.8 1.4 | 6.7 3.0 5.0 1.7 | 6.0 2.9 4.5 1.5 | 5.7 2.6 3.5 1.0
    5.5 2.4 3.8 1.1 | 5.5 2.4 3.7 1.0 | 5.8 2.7 3.9 1.2 | 6.0 2.7 5.1 1.6 | 5.4 3.0 4.5 1.5
    6.0 3.4 4.5 1.6 | 6.7 3.1 4.7 1.5 | 6.3 2.3 4.4 1.3 | 5.6 3.0 4.1 1.3 | 5.5 2.5 4.0 1.3
    5.5 2.6 4.4 1.2 | 6.1 3.0 4.6 1.4 | 5.8 2.6 4.0 1.2 | 5.0 2.3 3.3 1.0 | 5.6 2.7 4.2 1.3
    5.7 3.0 4.2 1.2 | 5.7 2.9 4.2 1.3 | 6.2 2.9 4.3 1.3 | 5.1 2.5 3.0 1.1 | 5.7 2.8 4.1 1.3
    6.3 3.3 6.0 2.5 | 5.8 2.7 5.1 1.9 | 7.1 3.0 5.9 2.1 | 6.3 2.9 5.6 1.8 | 6.5 3.0 5.8 2.2
    7.6 3.0 6.6 2.1 | 4.9 2.5 4.5 1.7 | 7.3 2.9 6.3 1.8 | 6.7 2.5 5.8 1.8 | 7.2 3.6 6.1 2.5
    6.5 3.2 5.1 2.0 | 6.4 2.7 5.3 1.9 | 6.8 3.0 5.5 2.1 | 5.7 2.5 5.0 2.0 | 5.8 2.8 5.1 2.4
    6.4 3.2 5.3 2.3 | 6.5 3.0 5.5 1.8 | 7.7 3.8 6.7 2.2 | 7.7 2.6 6.9 2.3 | 6.0 2.2 5.0 1.5
    6.9 3.2 5.7 2.3 | 5.6 2.8 4.9 2.0 | 7.7 2.8 6.7 2.0 | 6.3 2.7 4.9 1.8 | 6.7 3.3 5.7 2.1
    7.2 3.2 6.0 1.8 | 6.2 2.8 4.8 1.8 | 6.1 3.0 4.9 1.8 | 6.4 2.8 5.6 2.1 | 7.2 3.0 5.8 1.6
    7.4 2.8 6.1 1.9 | 7.9 3.8 6.4 2.0 | 6.4 2.8 5.6 2.2 | 6.3 2.8 5.1 1.5 | 6.1 2.6 5.6 1.4
    7.7 3.0 6.1 2.3 | 6.3 3.4 5.6 2.4 | 6.4 3.1 5.5 1.8 | 6.0 3.0 4.8 1.8 | 6.9 3.1 5.4 2.1
    6.7 3.1 5.6 2.4 | 6.9 3.1 5.1 2.3 | 5.8 2.7 5.1 1.9 | 6.8 3.2 5.9 2.3 | 6.7 3.3 5.7 2.5
    6.7 3.0 5.2 2.3 | 6.3 2.5 5.0 1.9 | 6.5 3.0 5.2 2.0 | 6.2 3.4 5.4 2.3 | 5.9 3.0 5.1 1.8
"""

SPECIES = ("setosa", "versicolor", "virginica")
#: ``(first, stop)`` flower of each species in a split (neon's split).
SPLIT_ROWS = {"train": (0, 30), "valid": (30, 40), "test": (40, 50)}


def measurements():
    """Fisher's 150 flowers: ``(x (150, 4) float64, y (150,) int64)``, species by species."""
    rows = [r.split() for r in _DATA.replace("|", "\n").split("\n") if r.strip()]
    x = np.array(rows, dtype=np.float64)
    y = np.repeat(np.arange(len(SPECIES), dtype=np.int64), 50)
    return x, y


class Iris(Dataset):
    """Fisher's 150 Iris flowers, carried in distnet's source (nothing is read): sepal length and
    width, petal length and width in cm, as ``image_shape = (4, 1, 1)`` (four channels of a 1x1
    image, so fully connected layers read them as neon's 4 inputs); ``nclasses = 3`` (setosa,
    versicolor, virginica); values as measured (not scaled). neon's split: flowers 0-29 of each
    species train (90), 40-49 test (30); 30-39 (neon's validation flowers) are not used.

    Keys: those of :class:`~distnet.datasets.base.Dataset`; ``repo_path`` is accepted and not
    needed (neon's files name one). ``sample_pct`` subsamples the 90 training flowers.
    """

    nclasses = len(SPECIES)
    image_shape = (4, 1, 1)
    scale_255 = False
    repo_required = False

    def source_files(self):
        return []

    def class_names(self):
        return list(SPECIES)

    def file_sources(self):
        """``{split: Source}`` of neon's split (class docstring), held in memory."""
        x, y = measurements()
        out = {}
        for split in ("train", "test"):
            lo, hi = SPLIT_ROWS[split]
            rows = np.concatenate([np.arange(lo, hi) + 50 * k for k in range(len(SPECIES))])
            out[split] = ArraySource("Iris", split, x[rows, :, None, None], y[rows])
        return out
