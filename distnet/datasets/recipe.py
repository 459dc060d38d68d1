"""The convert recipe: how ``distnet data convert`` turned image files into pixels, kept with the
data set so that ``distnet predict`` decodes new pictures the same way.

The recipe is the JSON text of the root attribute ``image_recipe`` of a converted HDF5 file::

    {"version": 1, "size": [H, W], "resize": "stretch" | "crop" | "pad" | null,
     "channels": 1 | 3, "class_names": ["cat", "dog", ...]}

``resize`` null: the source images all had the size ``H x W`` and none was resized (``--size``
not given), so a picture of another size is refused at predict time rather than resized in a
way training never saw. Decoding is the converter's own (:func:`~.convert._decode`): the EXIF
orientation applied, the first frame, 16-bit gray to 8 bits, ``L`` or ``RGB`` by ``channels``,
then :func:`~.convert.fit_image`. Pixels are stored as uint8, so the data set's ``scale``,
``mean``/``std`` or ``normalize`` keys turn both the training images and the new ones into the
model's values.
"""
import json
import os

import numpy as np

from ..errors import DataError

#: The root attribute holding the recipe.
RECIPE_ATTR = "image_recipe"
RECIPE_VERSION = 1


def image_recipe(size, resize, channels, class_names, resized=True):
    """The recipe's JSON text: images brought to ``size`` ``(H, W)`` by ``resize`` (``None``:
    ``"stretch"``; ``resized`` False: no ``--size`` was given), ``channels`` 1 or 3."""
    return json.dumps({"version": RECIPE_VERSION, "size": [int(size[0]), int(size[1])],
                       "resize": (resize or "stretch") if resized else None, "channels": int(channels),
                       "class_names": [str(c) for c in class_names]})


def read_recipe(path):
    """The recipe dict of the HDF5 file ``path``, or None when it has none (a file converted
    from arrays, or written by hand). DataError for a recipe this version cannot read."""
    import h5py
    try:
        with h5py.File(path, "r") as f:
            text = f.attrs.get(RECIPE_ATTR)
    except OSError as e:
        raise DataError(f"cannot open HDF5 file {path}: {e}") from None
    if text is None:
        return None
    try:
        recipe = json.loads(text.decode() if isinstance(text, bytes) else str(text))
        if recipe.get("version") != RECIPE_VERSION:
            raise ValueError(f"version {recipe.get('version')!r}, this distnet reads {RECIPE_VERSION}")
        size = tuple(int(v) for v in recipe["size"])
        if len(size) != 2 or recipe["channels"] not in (1, 3):
            raise ValueError("size must be [H, W] and channels 1 or 3")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DataError(f"{path}: the attribute {RECIPE_ATTR} is not a convert recipe ({e})") from None
    return {**recipe, "size": size}


def describe_recipe(recipe):
    """``3x32x32, stretched`` style text for messages."""
    H, W = recipe["size"]
    how = f"{recipe['resize']} to {H}x{W}" if recipe["resize"] else f"all {H}x{W}, none resized"
    return f"{recipe['channels']} channel(s), {how}"


# ----------------------------------------------------------------------------- pictures to predict

def is_image_file(path):
    from .convert import IMAGE_EXTENSIONS
    return path.lower().endswith(IMAGE_EXTENSIONS)


def list_pictures(paths):
    """The pictures of ``paths`` (image files, or folders), as ``[(path, name, true_class)]`` in
    order: files as given (``name`` the path given, no true class); a folder's images sorted by
    their path under it (``name`` that relative path), those in a subfolder with the subfolder's
    name as their true class (a folder per class), those in the folder itself with none. Hidden
    files and names of file managers are skipped, as by the converter. DataError for a path
    that is neither, or a folder without images."""
    from .convert import _walk
    out = []
    for p in paths:
        if os.path.isdir(p):
            found = [f for f in _walk(p) if is_image_file(f)]
            if not found:
                raise DataError(f"--data {p}: the folder holds no images (PNG, JPEG, ...)")
            out += [(os.path.join(p, f), f, f.split("/")[0] if "/" in f else None) for f in found]
        elif os.path.isfile(p) and is_image_file(p):
            out.append((p, p, None))
        elif not os.path.exists(p):
            raise DataError(f"--data {p}: no such file or folder")
        else:
            raise DataError(f"--data {p}: not an image file (by its extension) or a folder of images; "
                            "several --data are image files or folders, one --data may also be an HDF5, "
                            ".npy or IDX file of images")
    return out


def decode_pictures(pictures, recipe, where):
    """``(N, C, H, W)`` uint8 pixels of ``pictures`` (``[(path, ...)]``) decoded by ``recipe``
    exactly as the converter decoded the training images. Without a resize in the recipe, a
    picture of another size is a DataError naming it. ``where``: the recipe's file, for
    messages."""
    from .convert import _decode, _pillow, _probe
    Image = _pillow()
    C, size = recipe["channels"], recipe["size"]
    if recipe["resize"] is None:
        for path, *_ in pictures:
            hw = _probe(Image, path)[1]
            if tuple(hw) != size:
                raise DataError(f"{path} is {hw[0]}x{hw[1]} but the training images of {where} were all "
                                f"{size[0]}x{size[1]} and converted without --size, so there is no resize to "
                                "repeat: resize the pictures to that size, or convert the training images with "
                                "--size (and --resize) and train again")
    x = np.empty((len(pictures), C) + tuple(size), np.uint8)
    for i, (path, *_) in enumerate(pictures):
        x[i] = _decode(Image, path, C, size, resize=recipe["resize"] or "stretch")
    return x


# ----------------------------------------------------------------------------- predict's inputs

class Pictures:
    """What ``distnet predict --data`` names, ready to read on every rank: image files and
    folders (decoded by a recipe), or one HDF5 / ``.npy`` / IDX file of stored images.

    ``names``: one name per image (a picture's path; an unlabeled conversion's ``files``), or
    None; ``truth``: a picture's class folder name, or None, per image (None: none known).
    :meth:`read` gives ``(N, C, h, w)`` as stored, cut to a tile.
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

    def read(self, image_shape, tile=None):
        """The images ``(N, C, h, w)`` as stored (uint8 pixels for pictures), cut to ``tile``."""
        if self.pictures is None:
            from .arrays import read_images
            return read_images(self.paths[0], image_shape, tile)
        x = decode_pictures(self.pictures, self.recipe, self.where)
        return x if tile is None else x[:, :, tile.y0:tile.y1, tile.x0:tile.x1]


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
