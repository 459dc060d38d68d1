"""The pictures ``distnet predict --data`` names: image files, folders of them (a subfolder per
class gives each picture's true class), decoded by the convert recipe of the training data
(:mod:`.recipe`) exactly as ``distnet data convert`` decoded the training images; or one HDF5 /
``.npy`` / IDX file of stored images. The dataset's read strategy reads them
(:meth:`~distnet.data.reading.Reading.read_images`: on every rank, or on the reader only)."""
import os

import numpy as np

from ..data.predict_files import images_source
from ..data.sources import ArraySource
from ..errors import DataError, OptionError
from .decode import decode_pictures
from .folders import is_image_file, list_pictures
from .recipe import read_recipe


class Pictures:
    """What ``distnet predict --data`` names, ready to read on every rank: image files and
    folders (decoded by a recipe), or one HDF5 / ``.npy`` / IDX file of stored images.

    ``names``: one name per image (a picture's path; an unlabeled conversion's ``files``), or
    None; ``truth``: a picture's class folder name, or None, per image (None: none known).
    :meth:`source` gives them ``(N, C, H, W)`` as stored.
    """

    def __init__(self, paths, recipe_file=None):
        self.paths = list(paths)
        self.recipe_file = recipe_file
        self.recipe = None
        self.pictures = None
        self.names = self.truth = None
        pictures = [p for p in self.paths if os.path.isdir(p) or is_image_file(p)]
        if pictures and len(pictures) == len(self.paths):
            self.pictures = list_pictures(self.paths)
            self.names = [name for _, name, _ in self.pictures]
            self.truth = [true for *_, true in self.pictures]
        elif len(self.paths) != 1:
            other = next(p for p in self.paths if p not in pictures)
            raise DataError(f"--data {other}: several --data are image files or folders of images; an HDF5, "
                            ".npy or IDX file of images is given alone")
        else:
            self.names = stored_names(self.paths[0])

    def use_recipe(self, dataset_file, image_shape):
        """Find the recipe of pictures: ``--recipe`` (``recipe_file``), else the experiment's data
        set ``dataset_file`` (None: it is not a file); DataError naming what to pass when there is
        none, or when it decodes to other images than ``image_shape`` ``(C, H, W)``."""
        if self.pictures is None:
            if self.recipe_file is not None:
                raise OptionError(f"--recipe decodes pictures (image files, folders); --data {self.paths[0]} holds "
                                  "images stored already: give no --recipe")
            return
        where = self.recipe_file or dataset_file
        recipe = read_recipe(where) if where is not None else None
        if recipe is None:
            said = (f"--recipe {where} keeps none" if self.recipe_file else
                    f"the experiment's data set {dataset_file} keeps none" if dataset_file else
                    "the experiment's data set is no HDF5 file")
            raise DataError(f"--data gives pictures, which must be decoded as the training images were, but "
                            f"{said} (only distnet data convert of an image folder writes the recipe): give "
                            "--recipe DATA.h5, the data set converted from the training pictures, or --data an "
                            "HDF5/.npy file of images stored as the training images")
        shape = (recipe["channels"],) + tuple(recipe["size"])
        if tuple(image_shape) != shape:
            raise DataError(f"the recipe of {where} makes {shape[0]}x{shape[1]}x{shape[2]} images but the experiment "
                            f"takes {'x'.join(str(d) for d in image_shape)} (C x H x W): give --recipe the data "
                            "set the model was trained on")
        self.recipe, self.where = recipe, where

    def source(self, image_shape):
        """The images as a :class:`~distnet.data.sources.Source` (rows read a few at a time;
        the ``read: root`` / ``node`` reader streams them to the other ranks): pictures are
        decoded whole first."""
        if self.pictures is None:
            return images_source(self.paths[0], image_shape)
        x = decode_pictures(self.pictures, self.recipe, self.where)
        return ArraySource(", ".join(self.paths), "pictures", x, np.zeros(len(x), dtype=np.int64))


def stored_names(path):
    """The ``files`` dataset (one name per image) of an HDF5 file written by ``distnet data
    convert --unlabeled``, else None."""
    if not path.lower().endswith((".h5", ".hdf5")) or not os.path.isfile(path):
        return None
    import h5py
    try:
        with h5py.File(path, "r") as f:
            names = f.get("files")
            if names is None or "x" not in f:
                return None
            return [n.decode() if isinstance(n, bytes) else str(n) for n in names[()]]
    except OSError:
        return None
