"""Datasets: MNIST, CIFAR-10, Iris (in the source) and a generic HDF5 layout, cut into per-rank n-rants and cached.

No MPI here: the caller passes the rank's tile (a :class:`~distnet.geometry.partition.Box` from
:func:`~distnet.geometry.partition.tile_of`), rank, size and grid to ``Dataset.load``, which
returns ``{'train': (x, y), 'test': (x, y)}`` with ``x`` ``(N, C, h, w)`` and ``y`` ``(N,)`` int64.
See :mod:`.base` (keys, ``sample_pct``), :mod:`.cache` (``serialized_path``),
:mod:`.safe_pickle` (pickles that cannot run code) and :mod:`.sample` (the MNIST sample).
"""
from .base import Dataset, sample_indices
from .cache import fill_placeholders
from .cifar10 import CIFAR10
from .hdf5 import HDF5Dataset
from .iris import Iris
from .mnist import MNIST
from .numpy_files import NumpyDataset
from .stream import StreamArray
from .sample import existing_mnist_sample, write_mnist_sample

#: YAML name -> class.
DATASETS = {"MNIST": MNIST, "CIFAR10": CIFAR10, "HDF5Dataset": HDF5Dataset, "NumpyDataset": NumpyDataset,
            "Iris": Iris}

__all__ = ["CIFAR10", "DATASETS", "Dataset", "HDF5Dataset", "Iris", "MNIST", "NumpyDataset", "StreamArray", "fill_placeholders",
           "sample_indices", "existing_mnist_sample", "write_mnist_sample"]
