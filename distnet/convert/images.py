"""Image folders to the HDF5 layout (:mod:`.writer`): a folder of class folders
(:func:`convert_image_folder`, classes and splits by :mod:`.folders`, pixels by :mod:`.decode`),
or of pictures without classes (:func:`convert_unlabeled`: ``x`` and ``files`` only, for
``distnet predict --data``). Both keep the recipe of their decoding (:mod:`.recipe`).
"""
import json
import os

import numpy as np

from ..errors import DataError, OptionError
from ..fileio import atomic_target, check_writable, hdf5_file, write_failure
from .decode import decode_image, parse_size, pillow, survey
from .folders import image_folder_splits, list_pictures
from .groups import parse_group_by
from .pictures import decode_for_model
from .recipe import RECIPE_ATTR, describe_recipe, image_recipe, read_recipe
from .report import few_bits_note, missing_classes_note, resize_line, shown, split_line
from .writer import CHUNK_PIXELS, FORMAT, attr_text, check_space, summary, write


def convert_image_folder(src, out, size=None, test_fraction=0.2, valid_fraction=0.0, seed=0,
                         class_order="text", resize=None, stratify=False, group_by=None):
    """Write ``out`` from the image folder ``src``; returns a summary dict whose ``notes`` are
    warnings for the user (class order, skipped files, multi-frame images) and whose
    ``resize`` line says what ``size`` did to aspect ratios (:func:`~.report.resize_line`).
    ``group_by``: a regular expression whose match in an image's path under its class folder
    names its group; every group goes to one split (:mod:`.groups`)."""
    Image = pillow()
    size = parse_size(size) if isinstance(size, str) else size
    notes = []
    drawn, grouped = [], []
    classes, splits = image_folder_splits(src, test_fraction, valid_fraction, seed, class_order, notes,
                                          stratify, drawn, parse_group_by(group_by), grouped)
    all_items = [it for items in splits.values() for it in items]
    C, (H, W), shapes, notes_seen = survey(Image, [p for p, _ in all_items], size)
    notes += notes_seen
    wide = []       # the largest value of every 16-bit image

    def fill(split, dset):
        for i, (path, _) in enumerate(splits[split]):
            dset[i] = decode_image(Image, path, C, (H, W), wide, resize or "stretch")

    labels = {s: np.array([lab for _, lab in v], dtype=np.int64) for s, v in splits.items()}
    recipe = image_recipe((H, W), resize, C, classes, size is not None)
    extra = {"class_order": class_order, RECIPE_ATTR: recipe, "stratify": bool(stratify)}
    if group_by is not None:
        extra["group_by"] = group_by      # for the record (distnet data info)
    write(out, {s: (len(v), (C, H, W), np.uint8) for s, v in splits.items()}, fill, labels, classes,
           src, seed, test_fraction, valid_fraction, extra)
    info = summary(out)
    info["resize"] = resize_line(size, resize, shapes)
    info["split"] = grouped[0] if grouped else split_line(stratify, drawn)
    info["notes"] = notes + [n for n in (few_bits_note(wide), missing_classes_note(labels, classes, "/"))
                             if n]
    return info


def convert_unlabeled(src, out, size=None, resize=None, like=None):
    """Write ``out`` from the images under the folder ``src`` (in subfolders too, none a class),
    without labels: ``x`` ``(N, C, H, W)`` uint8, ``files`` (each image's path under ``src``, in
    ``x``'s order) and the recipe. ``like``: a converted data set whose recipe (size, resize,
    channels) decodes the images, so they match its training images; else ``size`` and
    ``resize`` as for a labeled folder. ``distnet predict --data OUT`` reads it."""
    Image = pillow()
    if not os.path.isdir(src):
        raise DataError(f"{src} is not a folder")
    pictures = list_pictures([src])
    notes = []
    if like is not None:
        if size is not None or resize is not None:
            raise OptionError("--like takes the size and resize of the data set it names; give no --size or "
                              "--resize with it")
        recipe = read_recipe(like)
        if recipe is None:
            raise DataError(f"--like {like} holds no convert recipe (only data sets converted from image folders "
                            "do); give --size (and --resize) instead")
        C, (H, W), shapes = recipe["channels"], recipe["size"], None
    else:
        size = parse_size(size) if isinstance(size, str) else size
        C, (H, W), shapes, notes = survey(Image, [p for p, *_ in pictures], size)
        recipe = json.loads(image_recipe((H, W), resize, C, [], size is not None))
        recipe["size"] = (H, W)
    x_layout = {"x": (len(pictures), (C, H, W), np.uint8)}
    check_writable(out, "output")
    check_space(out, x_layout, {})
    decoded = decode_for_model([path for path, *_ in pictures], recipe, like or src, convert_channels=True,
                               hints=None)
    x = decoded.x
    if decoded.converted and like is not None:    # the data set's channel count, not the pictures'
        notes.append(f"{len(decoded.converted)} of {len(pictures)} picture(s) converted to the {C} channel(s) of "
                     f"{like}'s images: {shown(decoded.converted)}")
    import h5py
    try:
        with atomic_target(out) as tmp:
            with hdf5_file(tmp) as f:
                f.create_dataset("x", data=x, fletcher32=True,
                                 chunks=(1, C, min(H, CHUNK_PIXELS), min(W, CHUNK_PIXELS)))
                f["files"] = np.array([attr_text(name) for _, name, _ in pictures], dtype=h5py.string_dtype())
                f.attrs["distnet_format"] = FORMAT
                f.attrs["source"] = attr_text(os.path.abspath(src))
                f.attrs[RECIPE_ATTR] = image_recipe((H, W), recipe["resize"], C, recipe["class_names"],
                                                    recipe["resize"] is not None)
    except (OSError, RuntimeError) as e:
        raise DataError(f"cannot write {out}: {write_failure(e)}") from None
    line = (f"wrote {out}: {len(pictures)} unlabeled images of {C}x{H}x{W} uint8 (datasets x and files; "
            f"distnet predict --data {out})")
    extra = resize_line((H, W), recipe["resize"], shapes) if shapes is not None and recipe["resize"] else None
    if like is not None:
        extra = f"decoded as the images of {like}: {describe_recipe(recipe)}"
    return {"path": str(out), "n": len(pictures), "shape": (C, H, W), "notes": notes,
            "text": line + (f"\n{extra}" if extra else "")}
