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
