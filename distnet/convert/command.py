"""``distnet data convert SOURCE OUT``: the converter a source goes to, its options checked
against it: a folder of class folders of images (:mod:`.images`), of pictures without classes
(``--unlabeled``), a folder of images or volumes with a folder of their masks (``--masks``:
:mod:`.segmentation`, :mod:`.volumes`), or ``.npz`` / ``.npy`` arrays (:mod:`.arrays`).
Parallel text (``--target``) is :mod:`.text`.
"""
import os

from ..errors import OptionError
from .arrays import convert_arrays, read_class_names
from .decode import RESIZE_MODES
from .images import convert_image_folder, convert_unlabeled
from .masks import DEFAULT_IGNORE
from .segmentation import check_mask_options, convert_segmentation
from .targets import convert_volume_targets
from .volumes import VOLUME_ONLY, convert_volumes, is_volume_folder


def convert(src, out, size=None, labels=None, test_fraction=0.2, valid_fraction=0.0, seed=0, layout=None,
            class_order=None, class_names=None, resize=None, stratify=False, unlabeled=False, like=None,
            group_by=None, masks=None, classes=None, ignore_label=None, targets=None):
    """Dispatch on the source: a folder of images, an ``.npz`` or an ``.npy`` (module docstring).
    ``class_order`` (folders only): ``"text"`` (the default) or ``"numeric"``; ``class_names``
    (arrays only): a text file of one name per line, label 0 first; ``resize`` (folders, with
    ``size``): :data:`RESIZE_MODES`; ``stratify``: draw the splits class by class;
    ``unlabeled`` (folders): :func:`convert_unlabeled` (``like``: the data set whose recipe it
    repeats); ``group_by`` (folders): a regex naming each image's group, every group in one
    split (:mod:`.groups`); ``masks`` (a folder of images or volumes): their masks' folder,
    ``classes`` a file of the class names, ``ignore_label`` the label of pixels that count for
    nothing (default 255); ``targets`` (a folder of volumes): a CSV of float targets per volume
    (:mod:`.targets`)."""
    for name, v in (("test_fraction", test_fraction), ("valid_fraction", valid_fraction)):
        if not 0 <= v < 1:
            raise OptionError(f"{name} must be in [0, 1), got {v}")
    src = os.fspath(src)
    if not str(out).lower().endswith((".h5", ".hdf5")):
        raise OptionError(f"the output {out} must end in .h5 or .hdf5")
    if resize is not None and resize not in RESIZE_MODES:
        raise OptionError(f"resize must be one of {', '.join(RESIZE_MODES)}, got {resize!r}")
    if resize is not None and size is None and like is None:
        raise OptionError("--resize says how --size treats another aspect ratio: give --size HxW with it")
    if like is not None and not unlabeled:
        raise OptionError("--like gives an unlabeled conversion the recipe of a data set: give --unlabeled with it")
    if targets is not None:
        return _convert_targets(src, out, targets, (test_fraction, valid_fraction, seed),
                                {"--masks": masks, "--size": size, "--resize": resize, "--classes": classes,
                                 "--ignore-label": ignore_label, "--labels": labels, "--layout": layout,
                                 "--class-order": class_order, "--class-names": class_names,
                                 "--stratify": stratify or None, "--unlabeled": unlabeled or None,
                                 "--group-by": group_by})
    if masks is not None:
        return _convert_masked(src, out, masks, size, resize, (test_fraction, valid_fraction, seed), classes,
                               DEFAULT_IGNORE if ignore_label is None else ignore_label,
                               (labels, layout, class_order, class_names, stratify, unlabeled, group_by))
    if classes is not None or ignore_label is not None:
        raise OptionError(f"{'--classes' if classes is not None else '--ignore-label'} is an option of masks: give "
                          "the masks' folder with --masks")
    if group_by is not None and not os.path.isdir(src):
        raise OptionError("--group-by finds each image's group in its path under its class folder: a folder of "
                          "images only")
    if unlabeled:
        given = [k for k, v in (("--labels", labels), ("--layout", layout), ("--class-order", class_order),
                                ("--class-names", class_names), ("--stratify", stratify or None),
                                ("--group-by", group_by)) if v is not None]
        if given:
            raise OptionError(f"{', '.join(given)}: not options of an unlabeled conversion (--unlabeled)")
        if not os.path.isdir(src):
            raise OptionError(f"--unlabeled converts a folder of images; {src} is not one")
        return convert_unlabeled(src, out, size, resize, like)
    if os.path.isdir(src):
        if any(f.lower().endswith(VOLUME_ONLY) for f in os.listdir(src)):
            raise OptionError(f"{src} holds volumes: they convert with per-voxel labels, so give their masks' folder "
                              "with --masks")
        if layout is not None:
            raise OptionError("--layout tells how arrays are laid out; images of a folder need none")
        if class_names is not None:
            raise OptionError("--class-names names the labels of arrays; the class folders of images name "
                              "theirs (--class-order orders them)")
        if labels is not None:
            raise OptionError("--labels gives the labels of an .npy of images; the class folders of images "
                              "give theirs")
        return convert_image_folder(src, out, size, test_fraction, valid_fraction, seed, class_order or "text",
                                    resize, stratify, group_by)
    if src.lower().endswith((".npz", ".npy")):
        if size is not None:
            raise OptionError("--size resizes images of a folder; arrays are stored as they are")
        if class_order is not None:
            raise OptionError("--class-order orders the class folders of images; arrays hold their labels")
        if labels is not None and src.lower().endswith(".npz"):
            raise OptionError(f"--labels gives the labels of an .npy of images; {src} holds its own (y_train, "
                              "or y)")
        names = read_class_names(class_names) if class_names is not None else None
        return convert_arrays(src, out, labels, test_fraction, valid_fraction, seed, class_names=names,
                              layout=layout, stratify=stratify)
    raise OptionError(f"{src}: give a folder of class subfolders of images, an .npz or an .npy file")


def _convert_masked(src, out, masks, size, resize, split_args, classes, ignore_label, others):
    """``--masks``: images (:func:`~.segmentation.convert_segmentation`) or volumes
    (:func:`~.volumes.convert_volumes`) with their masks; ``others``: the options masks do not take."""
    check_mask_options(src, *others)
    if not os.path.isdir(masks):
        raise OptionError(f"--masks {masks} is not a folder (of the masks, named as their images)")
    test_fraction, valid_fraction, seed = split_args
    if is_volume_folder(src):
        if size is not None or resize is not None:
            raise OptionError("--size and --resize resize images; volumes are stored as they are (resample them first)")
        return convert_volumes(src, out, masks, test_fraction, valid_fraction, seed, classes, ignore_label)
    return convert_segmentation(src, out, masks, size, resize, test_fraction, valid_fraction, seed, classes,
                                ignore_label)


def _convert_targets(src, out, targets, split_args, others):
    """``--targets``: a folder of volumes with a CSV of float targets per volume
    (:func:`~.targets.convert_volume_targets`); ``others``: ``{option: value}`` it does not take."""
    given = [k for k, v in others.items() if v is not None]
    if given:
        raise OptionError(f"{', '.join(given)}: not options of a conversion with --targets (float targets per "
                          "volume)")
    if not os.path.isdir(src) or not is_volume_folder(src):
        raise OptionError(f"--targets pairs the volumes of a folder (.npy, NIfTI, TIFF stacks) with rows of a CSV; "
                          f"{src} is not a folder of volumes")
    return convert_volume_targets(src, out, targets, *split_args)
