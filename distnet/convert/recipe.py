"""The convert recipe: how ``distnet data convert`` turned image files into pixels, kept with the
data set so that ``distnet predict`` decodes new pictures the same way.

The recipe is the JSON text of the root attribute ``image_recipe`` of a converted HDF5 file::

    {"version": 1, "size": [H, W], "resize": "stretch" | "crop" | "pad" | null,
     "channels": 1 | 3, "class_names": ["cat", "dog", ...]}

``resize`` null: the source images all had the size ``H x W`` and none was resized (``--size``
not given), so a picture of another size is refused at predict time rather than resized in a
way training never saw. Decoding is the converter's own (:func:`~.decode.decode_image`): the EXIF
orientation applied, the first frame, 16-bit gray to 8 bits, ``L`` or ``RGB`` by ``channels``,
then :func:`~.decode.fit_image`. Pixels are stored as uint8, so the data set's ``scale``,
``mean``/``std`` or ``normalize`` keys turn both the training images and the new ones into the
model's values.
"""
import json

from ..datasets.hdf5 import RECIPE_ATTR, recipe_text_of
from ..errors import DataError

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
    text = recipe_text_of(path)
    return None if text is None else parse_recipe(text, path)


def parse_recipe(recipe, where):
    """A recipe (its JSON text, or the dict of it a checkpoint keeps) checked, ``size`` a
    tuple; DataError naming ``where`` for one this version cannot read."""
    try:
        recipe = json.loads(recipe) if isinstance(recipe, str) else dict(recipe)
        if recipe.get("version") != RECIPE_VERSION:
            raise ValueError(f"version {recipe.get('version')!r}, this distnet reads {RECIPE_VERSION}")
        size = tuple(int(v) for v in recipe["size"])
        if len(size) != 2 or recipe["channels"] not in (1, 3):
            raise ValueError("size must be [H, W] and channels 1 or 3")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DataError(f"{where}: the attribute {RECIPE_ATTR} is not a convert recipe ({e})") from None
    return {**recipe, "size": size}


def describe_recipe(recipe):
    """``3x32x32, stretched`` style text for messages."""
    H, W = recipe["size"]
    how = f"{recipe['resize']} to {H}x{W}" if recipe["resize"] else f"all {H}x{W}, none resized"
    return f"{recipe['channels']} channel(s), {how}"
