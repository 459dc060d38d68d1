"""Image folders as ``distnet data convert`` and ``distnet predict --data`` read them.

A folder with one subfolder per class (``cats/``, ``dogs/``, ...) of PNG/JPEG (also BMP, GIF,
TIFF, WebP, AVIF, PGM/PPM) images, in the class folder or in folders under it (symbolic links
followed). Classes are the subfolder names sorted as text (``class_order="text"``, the
torchvision/Keras order: label 0 = the first; folders ``0``..``11`` give folder ``10`` label 2,
which a note says), or, with ``class_order="numeric"``, folders named by integers sorted by
value. Names starting with ``.`` (``.DS_Store``, macOS's ``._x.jpg``), ``__MACOSX``,
``Thumbs.db`` and ``desktop.ini`` are skipped; other files that are not images (by extension),
and images outside the class folders, are skipped with a note. A folder holding ``train/`` (and
``test/``, ``valid/`` or ``val/`` if it has them: :data:`SPLIT_FOLDERS`), each with the same class
subfolders, keeps those splits and draws the missing ones from train (:mod:`.splits`); another
folder next to ``train/``, or split folders without ``train/``, are refused.
"""
import os

import numpy as np

from ..errors import DataError
from .groups import draw_groups, group_keys, group_line
from .report import shown
from .splits import draw_splits


IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".jfif", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".avif", ".pgm",
                    ".ppm", ".pbm", ".pnm")
#: Names that file managers and archivers leave in folders; never classes or images (besides
#: every name starting with ``.``: ``.DS_Store``, macOS's ``._x.jpg``, ``.ipynb_checkpoints``).
IGNORED_NAMES = frozenset({"__MACOSX", "Thumbs.db", "desktop.ini"})
#: How class folders are ordered into labels (``--class-order``).
CLASS_ORDERS = ("text", "numeric")


def visible(name):
    return not name.startswith(".") and name not in IGNORED_NAMES


def is_int(name):
    """Whether a folder name is a whole number written in digits (``7``, ``007``)."""
    return name.isascii() and name.isdigit()


def class_folders(folder, order="text", notes=None):
    """The class folder names of ``folder`` in label order: ``text`` (sorted as strings, the
    torchvision/Keras order) or ``numeric`` (names that are all integers, by value). In text
    order, integer names whose numeric order differs add a note to ``notes``."""
    entries = sorted(d for d in os.listdir(folder) if visible(d))
    paths = {d: os.path.join(folder, d) for d in entries}
    broken = [d for d in entries if os.path.islink(paths[d]) and not os.path.exists(paths[d])]
    if broken:      # a class folder on storage that is not mounted: the next classes' labels would shift
        link = os.path.join(folder, broken[0])
        raise DataError(f"{link} is a link to {os.readlink(link)}, which does not exist: mount or fix it, or "
                        "remove the link")
    classes = [d for d in entries if os.path.isdir(paths[d])]
    if not classes:
        raise DataError(f"{folder} has no class subfolders: put the images of each class in a "
                        "subfolder named after the class (e.g. cats/, dogs/)")
    numeric = all(is_int(c) for c in classes)
    if order == "numeric":
        if not numeric:
            bad = next(c for c in classes if not is_int(c))
            raise DataError(f"--class-order numeric orders class folders named by integers, but {folder} "
                            f"has {bad}/; use --class-order text")
        by_value = {}
        for c in classes:
            if int(c) in by_value:
                raise DataError(f"--class-order numeric: class folders {by_value[int(c)]}/ and {c}/ of "
                                f"{folder} are the same number")
            by_value[int(c)] = c
        return sorted(classes, key=int)
    if order != "text":
        raise DataError(f"class order must be one of {', '.join(CLASS_ORDERS)}, got {order!r}")
    by_value = sorted(classes, key=int) if numeric else classes
    if by_value != classes and notes is not None:
        moved = [f"{c}/ is label {k}" for k, c in enumerate(classes) if by_value[k] != c]
        notes.append(f"the class folders of {folder} are numbers, but their labels follow the text order "
                     f"of the names (as torchvision's and Keras' image folders do), not their value: "
                     f"{shown(moved)}; give --class-order numeric for labels in numeric order")
    return classes


def walk(top):
    """Paths of the visible files under ``top``, relative to it with ``/``, sorted; follows
    symbolic links to folders, each real folder once and never back up to ``top`` or above it
    (a link to a parent would loop, or pull other classes' images in)."""
    top = os.fspath(top)      # a Path would never equal os.walk's str roots, and hide the top itself
    top_real = os.path.realpath(top)
    seen, out = set(), []
    for root, dirs, files in os.walk(top, followlinks=True):
        real = os.path.realpath(root)
        above = root != top and os.path.commonpath([real, top_real]) == real
        if real in seen or above:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if visible(d))
        rel = os.path.relpath(root, top)
        out += [f if rel == "." else f"{rel}/{f}" for f in files if visible(f)]
    return sorted(out)


#: Photo formats Pillow cannot read without a plugin (iPhones save HEIC).
_UNREAD_PHOTOS = (".heic", ".heif")


def images_of(folder, classes, notes=None):
    """``[(path, label)]`` of every image under ``folder/<class>/`` (subfolders included,
    hidden files skipped); DataError for an empty class. Files that are not images (by
    extension), and images outside a class folder, add a note to ``notes``."""
    out, skipped = [], []
    for label, name in enumerate(classes):
        sub = os.path.join(folder, name)
        if not os.path.isdir(sub):
            raise DataError(f"{folder} has no class folder {name}/ (other splits have it)")
        files = walk(sub)
        images = [f for f in files if f.lower().endswith(IMAGE_EXTENSIONS)]
        skipped += [os.path.join(sub, f) for f in files if not f.lower().endswith(IMAGE_EXTENSIONS)]
        if not images:
            raise DataError(f"class folder {sub} holds no images ({', '.join(IMAGE_EXTENSIONS)})")
        out += [(os.path.join(sub, f), label) for f in images]
    loose = sorted(p for f in os.listdir(folder) for p in [os.path.join(folder, f)]
                   if visible(f) and f.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(p))
    if notes is not None and skipped:
        heic = [p for p in skipped if p.lower().endswith(_UNREAD_PHOTOS)]
        hint = (f" ({len(heic)} HEIC/HEIF photo(s), the iPhone's format, which Pillow does not read: "
                "convert them to JPEG first)" if heic else "")
        notes.append(f"skipped {len(skipped)} file(s) that are not images (by the extension): "
                     f"{shown(heic + [p for p in skipped if p not in heic])}{hint}")
    if notes is not None and loose:
        notes.append(f"skipped {len(loose)} image(s) in {folder} itself, outside the class folders: "
                     f"{shown(loose)}")
    return out


#: Folder names that hold a split (any case): ``val`` and ``validation`` are the validation split.
SPLIT_FOLDERS = {"train": "train", "test": "test", "valid": "valid", "val": "valid", "validation": "valid"}


def split_folders(src):
    """``{split: folder name}`` of the split folders of ``src`` (:data:`SPLIT_FOLDERS`)."""
    named = {}
    for d in sorted(os.listdir(src)):
        split = SPLIT_FOLDERS.get(d.lower())
        if split is None or not visible(d) or not os.path.isdir(os.path.join(src, d)):
            continue
        if split in named:
            raise DataError(f"{src} has both {named[split]}/ and {d}/: give one folder per split")
        named[split] = d
    return named


def holds_images(folder):
    return any(f.lower().endswith(IMAGE_EXTENSIONS) and visible(f) for f in os.listdir(folder))


def check_one_class(folder, classes, notes):
    """One class folder: a DataError when its images are all in its subfolders (SOURCE one
    level above the class folders: every image would be label 0), else a note."""
    if len(classes) != 1:
        return
    inner = os.path.join(folder, classes[0])
    if not holds_images(inner):
        subs = sorted(d for d in os.listdir(inner) if visible(d) and os.path.isdir(os.path.join(inner, d)))
        raise DataError(f"{folder} has one class folder, {classes[0]}/, and its images are in its subfolders "
                        f"{shown(d + '/' for d in subs)}: give {inner} as SOURCE if those are the classes")
    notes.append(f"{folder} has one class folder ({classes[0]}/): every image is label 0; SOURCE is the "
                 "folder that holds one subfolder per class")


def draw(items, folder, classes, test_fraction, valid_fraction, seed, what, stratify=False, group_by=None,
         grouped=None):
    """``{split: positions}`` of the images ``items`` (``[(path, label)]`` under ``folder``'s class
    folders ``classes``): :func:`~.splits.draw_splits` (``stratify``: class by class), or with
    ``group_by`` (a compiled regex) whole groups per split (:mod:`.groups`: an image's group is
    found in its path under its class folder; ``stratify`` too), the line saying so appended to
    ``grouped``."""
    if group_by is None:
        return draw_splits(len(items), test_fraction, valid_fraction, seed, what,
                           [lab for _, lab in items] if stratify else None)
    names = [os.path.relpath(p, os.path.join(folder, classes[lab])).replace(os.sep, "/") for p, lab in items]
    keys = group_keys(names, group_by)
    pos = draw_groups(keys, test_fraction, valid_fraction, seed, what, [lab for _, lab in items] if stratify else None)
    if grouped is not None:
        grouped.append(group_line(group_by, keys, pos, stratify))
    return pos


def image_folder_splits(src, test_fraction, valid_fraction, seed, class_order="text", notes=None,
                        stratify=False, drawn=None, group_by=None, grouped=None):
    """``(classes, {split: [(path, label)]})`` of an image folder (module docstring); what the
    user should know (class order, skipped files) is appended to ``notes``. A folder with a
    ``train/`` folder is a folder of splits (``test/``, ``valid/`` or ``val/``; those it lacks
    are drawn from train); any other folder in it is refused, as are split folders without
    ``train/`` (their images would become the classes ``test``, ``val``). The splits drawn are
    drawn by :func:`draw` (``stratify``, ``group_by``, ``grouped``)."""
    notes = [] if notes is None else notes
    if not os.path.isdir(src):
        raise DataError(f"{src} is not a folder")
    named = split_folders(src)
    if "train" in named:
        others = sorted(d for d in os.listdir(src) if visible(d) and os.path.isdir(os.path.join(src, d))
                        and d not in named.values())
        if others:
            raise DataError(f"{src} holds the split folders {', '.join(d + '/' for d in named.values())} and "
                            f"also {', '.join(d + '/' for d in others)}: a folder of splits holds train/, test/ "
                            "and valid/ (or val/) only, each with one subfolder per class")
        train_dir = os.path.join(src, named["train"])
        classes = class_folders(train_dir, class_order, notes)
        check_one_class(train_dir, classes, notes)
        rng = np.random.RandomState(seed)
        splits = {}
        for s in ("train", "test", "valid"):
            if s not in named:
                continue
            folder = os.path.join(src, named[s])
            extra = sorted(set(class_folders(folder)) - set(classes))
            if extra:
                raise DataError(f"{folder} has class folder(s) {', '.join(c + '/' for c in extra)} "
                                f"that {train_dir} lacks; every split needs the same classes")
            items = images_of(folder, classes, notes)
            splits[s] = [items[i] for i in rng.permutation(len(items))]
        draw_test = "test" not in splits
        draw_valid = "valid" not in splits and valid_fraction > 0
        if "valid" in splits and valid_fraction > 0:
            notes.append(f"valid_fraction {valid_fraction:g} is not used: {os.path.join(src, named['valid'])} "
                         "is the validation split")
        if draw_test and test_fraction == 0:
            raise DataError(f"{src}: no test split (give a test/ folder or a test_fraction > 0)")
        if draw_test or draw_valid:
            train = splits["train"]
            pos = draw(train, train_dir, classes, test_fraction if draw_test else 0.0,
                       valid_fraction if draw_valid else 0.0, seed, src, stratify, group_by, grouped)
            for s in ("test", "valid"):
                if s in pos and s not in splits:
                    splits[s] = [train[i] for i in pos[s]]
                    if drawn is not None:
                        drawn.append(s)
            splits["train"] = [train[i] for i in pos["train"]]
        return classes, {s: splits[s] for s in ("train", "test", "valid") if s in splits}
    looks_split = [d for d in named.values() if not holds_images(os.path.join(src, d))]
    if looks_split:
        raise DataError(f"{src} has {', '.join(d + '/' for d in looks_split)} but no train/ folder: a folder "
                        "of splits needs train/ (its class folders decide the labels); or rename the "
                        "folder if it is a class")
    if test_fraction == 0:
        raise DataError(f"{src}: no test split (give train/ and test/ folders or a test_fraction > 0)")
    classes = class_folders(src, class_order, notes)
    check_one_class(src, classes, notes)
    items = images_of(src, classes, notes)
    pos = draw(items, src, classes, test_fraction, valid_fraction, seed, src, stratify, group_by, grouped)
    if drawn is not None:
        drawn += [s for s in ("test", "valid") if s in pos]
    return classes, {s: [items[i] for i in p] for s, p in pos.items()}


def is_image_file(path):
    return path.lower().endswith(IMAGE_EXTENSIONS)


def list_pictures(paths, what="--data"):
    """The pictures of ``paths`` (image files, or folders), as ``[(path, name, true_class)]`` in
    order: files as given (``name`` the path given, no true class); a folder's images sorted by
    their path under it (``name`` that relative path), those in a subfolder with the subfolder's
    name as their true class (a folder per class), those in the folder itself with none. Hidden
    files and names of file managers are skipped, as by the converter. DataError for a path
    that is neither, or a folder without images (``what``: how messages call a path)."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            found = [f for f in walk(p) if is_image_file(f)]
            if not found:
                raise DataError(f"{what} {p}: the folder holds no images (PNG, JPEG, ...)")
            out += [(os.path.join(p, f), f, f.split("/")[0] if "/" in f else None) for f in found]
        elif os.path.isfile(p) and is_image_file(p):
            out.append((p, p, None))
        elif not os.path.exists(p):
            raise DataError(f"{what} {p}: no such file or folder")
        else:
            raise DataError(f"{what} {p}: not an image file (by its extension) or a folder of images; "
                            "several --data are image files or folders, one --data may also be an HDF5, "
                            ".npy or IDX file of images")
    return out
