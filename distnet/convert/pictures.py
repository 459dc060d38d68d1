"""The pictures ``distnet predict --data`` (and :func:`distnet.load`'s ``predict``) names: image
files, folders of them (a subfolder per class gives each picture's true class), decoded by the
convert recipe of the training data (:mod:`.recipe`) exactly as ``distnet data convert``
decoded the training images; or one HDF5 / ``.npy`` / IDX file of stored images. The dataset's
read strategy reads them (:meth:`~distnet.data.reading.Reading.read_images`: on every rank, or
on the reader only).

Every picture is looked at before one is decoded (:func:`decode_for_model`), and every one that
cannot be used is named in one report: a file Pillow cannot read, a picture of another channel
count than the model's (a grayscale photo for an RGB model: refused, or converted with
``convert_channels`` and counted), a picture of another size where the training images were
not resized. Without ``skip_bad`` the report is the error; with it, the others are predicted
and the report is a warning.
"""
import os
from dataclasses import dataclass, field

import numpy as np

from ..data.predict_files import images_source
from ..data.sources import ArraySource
from ..errors import DataError, OptionError
from .decode import GRAY_MODES, decode_image, pillow, probe
from .folders import is_image_file, list_pictures
from .recipe import describe_recipe, parse_recipe, read_recipe
from .report import shown


@dataclass
class Decoded:
    """What :func:`decode_for_model` made of the pictures: ``x`` ``(N, C, H, W)`` uint8 of the
    usable ones, ``kept`` their positions in the list given, ``skipped`` ``[(path, reason)]`` and
    ``converted`` ``[path]`` (their channel count changed, ``convert_channels``)."""

    x: np.ndarray
    kept: list
    skipped: list = field(default_factory=list)
    converted: list = field(default_factory=list)


def picture_problem(Image, path, recipe, where, convert_channels=False):
    """``(reason or None, needs its channels converted)`` of one picture for a model trained on
    images decoded by ``recipe`` (``where``: its file, for messages), from its header only."""
    try:
        mode, hw, _ = probe(Image, path)
    except DataError as e:
        return str(e), False
    C, size = recipe["channels"], tuple(recipe["size"])
    gray = mode in GRAY_MODES
    other = (gray and C == 3) or (not gray and C == 1)
    if other and not convert_channels:
        has = "grayscale (1 channel)" if gray else f"color (mode {mode}, 3 channels)"
        takes = "RGB (3 channels)" if C == 3 else "grayscale (1 channel)"
        return f"{path} is {has} and the model takes {takes}", False
    if recipe["resize"] is None and tuple(hw) != size:
        return (f"{path} is {hw[0]}x{hw[1]} but the training images of {where} were all {size[0]}x{size[1]} and "
                "converted without --size, so there is no resize to repeat: resize the picture to that size, or "
                f"give --recipe DATA.h5, a data set converted with --size {size[0]}x{size[1]} (and --resize), to "
                "decode by its resize"), False
    return None, other


#: How the options that go on past bad pictures are spelled: distnet predict's flags (the
#: Python API names its keywords, :mod:`distnet.api`).
PREDICT_OPTIONS = ("--skip-bad", "--convert-channels")


def decode_for_model(paths, recipe, where, skip_bad=False, convert_channels=False, hints=PREDICT_OPTIONS):
    """The pictures ``paths`` decoded by ``recipe`` exactly as the converter decoded the
    training images (:class:`Decoded`). Every picture is checked first (:func:`picture_problem`);
    the ones that cannot be used are one DataError naming each of them and why, unless
    ``skip_bad`` (they are left out and listed in ``skipped``). ``convert_channels``: a picture of
    another channel count is converted (grayscale to RGB: its gray value in all three channels;
    color to grayscale: Pillow's luminance) and listed in ``converted``. ``hints``: the names of
    the two options that go on, as the caller spells them, for the error (None: no hint)."""
    Image = pillow()
    kept, skipped, converted = [], [], set()
    for i, path in enumerate(paths):
        reason, convert = picture_problem(Image, path, recipe, where, convert_channels)
        if reason is not None:
            skipped.append((path, reason))
            continue
        kept.append(i)
        if convert:
            converted.add(i)
    x = np.empty((len(kept), recipe["channels"]) + tuple(recipe["size"]), np.uint8)
    good = []
    for i in kept:
        try:
            x[len(good)] = decode_image(Image, paths[i], recipe["channels"], tuple(recipe["size"]),
                                        resize=recipe["resize"] or "stretch")
            good.append(i)
        except DataError as e:      # a header that reads and pixels that do not (a truncated file)
            skipped.append((paths[i], str(e)))
    if skipped and not skip_bad:
        hint = ""
        if hints:
            skip, convert = hints
            more = "" if convert_channels or not any("channel" in r for _, r in skipped) else \
                f"; {convert} converts the channel count"
            hint = f" ({skip} predicts the others{more})"
        raise DataError(f"{len(skipped)} of {len(paths)} picture(s) cannot be used{hint}: "
                        + "; ".join(r for _, r in skipped))
    if not good:
        raise DataError(f"none of the {len(paths)} picture(s) can be used: " + "; ".join(r for _, r in skipped))
    return Decoded(x[:len(good)], good, skipped, [paths[i] for i in good if i in converted])


def report_lines(decoded, total, channels):
    """The warnings of a :class:`Decoded` (the pictures skipped, those converted), for stderr."""
    lines = []
    if decoded.skipped:
        lines.append(f"skipped {len(decoded.skipped)} of {total} picture(s) (--skip-bad): "
                     + "; ".join(r for _, r in decoded.skipped))
    if decoded.converted:
        how = "grayscale to RGB (a gray value in all three channels)" if channels == 3 else \
            "color to grayscale (luminance)"
        lines.append(f"converted {len(decoded.converted)} of {total} picture(s) from {how} "
                     f"(--convert-channels): {shown(decoded.converted)}")
    return lines


def choose_recipe(recipe_file, training_recipe, training_where, image_shape):
    """``(recipe, where, note)`` that decodes pictures: ``--recipe`` ``recipe_file`` where given
    (``note`` says how it differs from the training's), else the training's (``training_recipe``,
    from ``training_where``). DataError naming what to pass when there is none, or when it makes
    other images than ``image_shape`` ``(C, H, W)``."""
    note = None
    if recipe_file is not None:
        recipe, where = read_recipe(recipe_file), recipe_file
        if recipe is not None and training_recipe is not None:
            training = parse_recipe(training_recipe, training_where)
            if any(recipe[k] != training[k] for k in ("size", "resize", "channels")):
                note = (f"pictures decoded by the recipe of --recipe {recipe_file} ({describe_recipe(recipe)}), "
                        f"not the training's ({describe_recipe(training)})")
    else:
        where = training_where
        recipe = parse_recipe(training_recipe, where) if training_recipe is not None else None
    if recipe is None:
        said = f"--recipe {where} keeps none" if recipe_file else f"the data set {where} keeps none"
        raise DataError(f"--data gives pictures, which must be decoded as the training images were, but {said} "
                        "(only distnet data convert of an image folder writes the recipe): give --recipe DATA.h5, "
                        "the data set converted from the training pictures, or --data an HDF5/.npy file of "
                        "images stored as the training images")
    shape = (recipe["channels"],) + tuple(recipe["size"])
    if tuple(image_shape) != shape:
        raise DataError(f"the recipe of {where} makes {shape[0]}x{shape[1]}x{shape[2]} images but the model "
                        f"takes {'x'.join(str(d) for d in image_shape)} (C x H x W): give --recipe the data "
                        "set the model was trained on")
    return recipe, where, note


class Pictures:
    """What ``distnet predict --data`` names, ready to read on every rank: image files and
    folders (decoded by a recipe: :meth:`decode`), or one HDF5 / ``.npy`` / IDX file of stored
    images.

    ``names``: one name per image (a picture's path; an unlabeled conversion's ``files``), or
    None; ``truth``: a picture's class folder name, or None, per image (None: none known);
    both of the pictures kept once decoded. :meth:`source` gives them ``(N, C, H, W)`` as
    stored.
    """

    def __init__(self, paths, recipe_file=None):
        self.paths = list(paths)
        self.recipe_file = recipe_file
        self.pictures = None
        self.decoded = None
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

    def decode(self, training_recipe, training_where, image_shape, skip_bad=False, convert_channels=False):
        """Decode the pictures by ``--recipe`` or the training's recipe (:func:`choose_recipe`)
        and keep the usable ones (:func:`decode_for_model`); returns the lines to warn with
        (recipe, skipped and converted pictures). Stored images need no recipe (OptionError for
        a ``--recipe`` with them)."""
        if self.pictures is None:
            if self.recipe_file is not None:
                raise OptionError(f"--recipe decodes pictures (image files, folders); --data {self.paths[0]} holds "
                                  "images stored already: give no --recipe")
            return []
        recipe, where, note = choose_recipe(self.recipe_file, training_recipe, training_where, image_shape)
        files = [path for path, _, _ in self.pictures]
        self.decoded = decode_for_model(files, recipe, where, skip_bad, convert_channels)
        self.names = [self.names[i] for i in self.decoded.kept]
        self.truth = [self.truth[i] for i in self.decoded.kept]
        return ([note] if note else []) + report_lines(self.decoded, len(files), recipe["channels"])

    def source(self, image_shape):
        """The images as a :class:`~distnet.data.sources.Source` (rows read a few at a time;
        the ``read: root`` / ``node`` reader streams them to the other ranks): pictures are
        decoded already (:meth:`decode`)."""
        if self.pictures is None:
            return images_source(self.paths[0], image_shape)
        x = self.decoded.x
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
