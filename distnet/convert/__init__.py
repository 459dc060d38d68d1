"""The converters of ``distnet data``: files in, the files distnet reads out, and the tools that
inspect them. They sit beside the data engine (:mod:`distnet.data`), which reads what they
write; no run imports them.

=================  ============================================================================
``command``        ``distnet data convert``: which converter a source goes to
``images``,        image folders (classes as folders, splits as folders or drawn), pictures
``folders``,       without classes; Pillow decoding and its recipe, which ``distnet predict``
``decode``,        repeats on new pictures
``recipe``
``arrays``         ``.npz`` / ``.npy`` arrays
``text``           parallel text to the sequence layout (``--target``)
``splits``,        the drawn splits, the HDF5 file written, what the command prints
``writer``,
``report``
``pictures``       what ``distnet predict --data`` names, decoded by the recipe
``sample``         ``distnet data mnist-sample``: the 5000-image MNIST sample as IDX files
``info``           ``distnet data info`` and ``distnet data stats``
=================  ============================================================================
"""
from .command import convert
from .report import describe

__all__ = ["convert", "describe"]
