"""``distnet data convert IMAGES OUT.h5 --masks MASKS``: a folder of images and a folder of their
masks (paired by file name, :mod:`.masks`) to the HDF5 layout with per-pixel labels:
``<split>/x`` ``(N, C, H, W)`` uint8 and ``<split>/y`` ``(N, H, W)`` of the smallest unsigned type
that holds the class ids and the ignore label, chunked alike (docs/data.md#the-hdf5-layout).

Images are decoded as for a folder of classes (:mod:`.decode`: one size, or ``--size`` with
``--resize``; the recipe kept for ``distnet predict``); a mask is resized with its image by
nearest neighbour (``pad`` pads it with the ignore label). Every mask is read once to check its
size and class ids before anything is written, then once more to write it. The splits are drawn
as for any source (:mod:`.splits`); volumes (:mod:`.volumes`) share the writing
(:func:`write_pairs`).
"""
import os

import numpy as np

from ..errors import DataError, OptionError
from .decode import decode_image, fit_image, parse_size, pillow, survey
from .folders import IMAGE_EXTENSIONS, walk
from .masks import ClassIds, pair_masks, read_class_file, read_png_mask
from .recipe import RECIPE_ATTR, image_recipe
from .report import few_bits_note, resize_line
from .splits import draw_splits
from .writer import summary, write


def files_of(folder, extensions, what):
    """The files under ``folder`` (relative paths, sorted; hidden names skipped) with one of
    ``extensions``; DataError when there are none. ``what``: the files, in words."""
    if not os.path.isdir(folder):
        raise DataError(f"{folder} is not a folder")
    found = [f for f in walk(folder) if f.lower().endswith(extensions)]
    if not found:
        raise DataError(f"{folder} holds no {what} ({', '.join(extensions)})")
    return found


def write_pairs(out, src, masks, pairs, layout, read_x, read_mask, ids, split_args, attrs):
    """Write ``out`` from ``pairs`` (``[(image, mask)]``): the splits drawn by ``split_args``
    (``(test_fraction, valid_fraction, seed)``), ``layout`` ``(shape (C, *S), dtype)`` of the
    images, ``read_x(path)`` and ``read_mask(path)`` their arrays as stored, ``ids``
    (:class:`~.masks.ClassIds`, filled by a first pass) the classes; ``attrs`` besides the
    masks'. Returns the summary of :func:`~.writer.summary`."""
    classes = ids.classes(f"the masks of {masks}")
    test_fraction, valid_fraction, seed = split_args
    pos = draw_splits(len(pairs), test_fraction, valid_fraction, seed, src)
    splits = {s: [pairs[i] for i in p] for s, p in pos.items()}
    dtype = ids.dtype()

    def fill(split, dset):
        for i, (path, _) in enumerate(splits[split]):
            dset[i] = read_x(path)

    def fill_masks(split, dset):
        for i, (_, path) in enumerate(splits[split]):
            dset[i] = read_mask(path)

    shape, x_dtype = layout
    write(out, {s: (len(v), shape, x_dtype) for s, v in splits.items()}, fill, None, classes, src, seed,
          test_fraction, valid_fraction, {"masks_source": os.path.abspath(masks), **ids.attrs(), **attrs},
          masks=(dtype, fill_masks))
    return summary(out)


def convert_segmentation(src, out, masks, size=None, resize=None, test_fraction=0.2, valid_fraction=0.0, seed=0,
                         classes=None, ignore_label=255):
    """Write ``out`` from the images under ``src`` and their masks under ``masks`` (module
    docstring); ``classes``: a ``--classes`` file. Returns the summary dict, with ``notes``
    (warnings: masks without an image, frames, colour among gray) and the ``resize`` line."""
    Image = pillow()
    size = parse_size(size) if isinstance(size, str) else size
    files = files_of(src, IMAGE_EXTENSIONS, "images")
    pairs, notes = pair_masks(src, files, masks, files_of(masks, IMAGE_EXTENSIONS, "masks"))
    C, (H, W), shapes, seen = survey(Image, [p for p, _ in pairs], size)
    ids = ClassIds(read_class_file(classes) if classes else None, ignore_label)
    for (path, mask), hw in zip(pairs, shapes):
        m, palette = read_png_mask(Image, mask)
        if m.shape != tuple(hw):
            raise DataError(f"mask {mask} is {m.shape[0]}x{m.shape[1]} but its image {path} is {hw[0]}x{hw[1]}: "
                            "a mask has its image's size")
        ids.check(m, mask, palette)
    wide, how = [], resize or "stretch"

    def read_mask(path):
        m = read_png_mask(Image, path)[0]
        if m.shape == (H, W):
            return m
        fill = ids.ignore if ids.ignore is not None else 0
        return np.asarray(fit_image(Image, Image.fromarray(m.astype(np.int32)), (H, W), how, nearest=True, fill=fill))

    recipe = image_recipe((H, W), resize, C, ids.classes(f"the masks of {masks}"), size is not None)
    info = write_pairs(out, src, masks, pairs, ((C, H, W), np.uint8),
                       lambda p: decode_image(Image, p, C, (H, W), wide, how), read_mask, ids,
                       (test_fraction, valid_fraction, seed), {RECIPE_ATTR: recipe})
    info["resize"] = resize_line(size, resize, shapes)
    info["notes"] = notes + seen + [n for n in (few_bits_note(wide),) if n]
    return info


def check_mask_options(src, labels, layout, class_order, class_names, stratify, unlabeled, group_by=None):
    """OptionError for options that ``--masks`` does not take (``src``: the SOURCE given)."""
    given = [k for k, v in (("--labels", labels), ("--layout", layout), ("--class-order", class_order),
                            ("--class-names", class_names), ("--stratify", stratify or None),
                            ("--unlabeled", unlabeled or None), ("--group-by", group_by)) if v is not None]
    if given:
        hint = " (--classes names the classes of masks)" if class_names is not None else ""
        raise OptionError(f"{', '.join(given)}: not options of a conversion with --masks{hint}")
    if not os.path.isdir(src):
        raise OptionError(f"--masks pairs the images (or volumes) of a folder with their masks; {src} is not a "
                          "folder")


__all__ = ["check_mask_options", "convert_segmentation", "files_of", "write_pairs"]
