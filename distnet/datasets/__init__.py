"""Dataset kinds: the classes an experiment file names (``!obj:distnet.datasets.HDF5Dataset``).

A kind knows its YAML keys, where its files are and what they hold (``image_shape``,
``nclasses``, a :class:`~distnet.data.sources.Source` per split); everything else it does with
them (the read strategy of ``read``, caches, streaming, augmentation, scaling, checks) is the data
engine's, :mod:`distnet.data`, which it composes. ``Dataset.load`` returns this rank's
``{'train': (x, y), 'test': (x, y)}`` with ``x`` ``(N, C, h, w)`` its tile of every image (a
:class:`~distnet.geometry.partition.Box` from :func:`~distnet.geometry.partition.tile_of`) and
``y`` ``(N,)`` int64; see :mod:`.base` (the common keys) and :mod:`.files` (your own files).
"""
from .base import Dataset
from .cifar10 import CIFAR10
from .hdf5 import HDF5Dataset
from .iris import Iris
from .mnist import MNIST
from .numpy_files import NumpyDataset
from .sequences import SequenceDataset

#: YAML name -> class.
DATASETS = {"MNIST": MNIST, "CIFAR10": CIFAR10, "HDF5Dataset": HDF5Dataset, "NumpyDataset": NumpyDataset,
            "Iris": Iris, "SequenceDataset": SequenceDataset}

__all__ = ["CIFAR10", "DATASETS", "Dataset", "HDF5Dataset", "Iris", "MNIST", "NumpyDataset", "SequenceDataset"]
