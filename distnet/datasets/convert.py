"""``distnet data convert``: a folder of images, or ``.npy``/``.npz`` arrays, to the HDF5 layout
that :class:`~distnet.datasets.HDF5Dataset` reads (docs/data.md).

Sources
-------
* A folder with one subfolder per class (``cats/``, ``dogs/``, ...) of PNG/JPEG (also BMP, GIF,
  TIFF, WebP, AVIF, PGM/PPM) images, in the class folder or in folders under it (symbolic links
  followed). Classes are the subfolder names sorted as text (``class_order="text"``, the
  torchvision/Keras order: label 0 = the first; folders ``0``..``11`` give folder ``10`` label
  2, which a note says), or, with ``class_order="numeric"``, folders named by integers sorted by
  value. Names starting with ``.`` (``.DS_Store``, macOS's ``._x.jpg``), ``__MACOSX``,
  ``Thumbs.db`` and ``desktop.ini`` are skipped; other files that are not images (by extension),
  and images outside the class folders, are skipped with a note. A folder holding ``train/``
  (and ``test/``, ``valid/`` or ``val/`` if it has them: :data:`SPLIT_FOLDERS`), each with the
  same class subfolders, keeps those splits and draws the missing ones from train; another folder
  next to ``train/``, or split folders without ``train/``, are refused. Decoding needs Pillow
  (``pip install 'distnet[images]'``). An image is taken as it is shown: its EXIF orientation
  applied (phone photos), its first frame (animated GIF, multi-page TIFF: a note names them).
  Images are grayscale (1 channel) when all are, else RGB
  (3 channels; alpha is dropped); 16-bit grayscale becomes 8 bits (``round(v / 257)``), and
  floating-point images (TIFF mode ``F``) are refused. All images must have one size unless ``size`` (``HxW``)
  resizes them (bilinear), an image of another aspect ratio by ``resize``: ``stretch`` (the
  default), ``crop`` or ``pad`` (:func:`fit_image`); the summary's ``resize`` line says how many
  images that changed. How images were decoded is kept as the recipe (:mod:`.recipe`), which
  ``distnet predict`` repeats on new pictures. With ``unlabeled``, a folder of pictures without
  classes becomes ``x`` and ``files`` only (:func:`convert_unlabeled`).
* An ``.npz`` with ``x_train``/``y_train`` (and optionally ``x_test``/``y_test``,
  ``x_valid``/``y_valid``), or with ``x``/``y``; or an ``.npy`` of images with ``labels`` (an
  ``.npy`` of labels). Images ``(N, C, H, W)`` or ``(N, H, W)``; any numeric dtype, stored as is
  (uint8 stays uint8). ``.npy`` files are memory-mapped and copied in blocks. ``(N, H, W, C)``
  arrays are transposed with ``layout="nhwc"``; without a layout, an array whose last axis looks
  like channels (1, 3 or 4) and whose second does not is refused (``layout="nchw"`` keeps it).
  Classes are named ``0``, ``1``, ... unless ``class_names`` names a text file of one name per line.

Splits: the images of a split not given by the source are drawn from the training images with
``np.random.RandomState(seed).permutation(N)``: the first ``round(N * test_fraction)`` are the
test split, the next ``round(N * valid_fraction)`` the validation split, the rest train. Every
split drawn this way is stored in that shuffled order (so classes are mixed even without
``shuffle``); splits given by the source keep their order for arrays, and are shuffled the same
way for image folders. With ``stratify`` the same permutation is walked class by class
(:func:`_stratified`), so every class is in every drawn split in proportion.

Output: ``train/x`` ``(N, C, H, W)`` (uint8 for images), ``train/y`` int64, ``test/...``, and
``valid/...`` when there is a validation split; chunks of one image and at most 128 x 128 pixels
(a rank's tile of a batch touches only its chunks) with Fletcher-32 checksums (a corrupt chunk is
an error naming the file, never silent garbage); attributes ``nclasses``, ``class_names``,
``distnet_format`` (``"distnet-data/1"``), ``source``, ``seed``, ``test_fraction``,
``valid_fraction``, and for an image folder ``class_order`` (``class_names[k]`` is the folder of
label ``k``; names that are not UTF-8 are kept with ``\\xff`` escapes), ``image_recipe`` for an
image folder (:mod:`.recipe`), ``stratify``, and ``channel_mean`` / ``channel_std``: the
per-channel statistics of ``train/x`` as stored (:mod:`.stats`). Written to a temporary name
and moved into place. The converter returns notes (``info["notes"]``) that the command line prints
as warnings.
"""
import json
import os

import numpy as np

from ..errors import DataError, OptionError
from ..fileio import atomic_target, check_writable, free_space, hdf5_file, write_failure
from .checks import labels_problem
from .recipe import RECIPE_ATTR, describe_recipe, image_recipe, read_recipe
from .stats import MEAN_ATTR, STD_ATTR, channel_stats

FORMAT = "distnet-data/1"
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".jfif", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".avif", ".pgm",
                    ".ppm", ".pbm", ".pnm")
CHUNK_PIXELS = 128
_COPY_ROWS = 256


def parse_size(text):
    """``"HxW"`` (or ``"N"`` for a square) -> ``(H, W)``; DataError otherwise."""
    if text is None:
        return None
    parts = str(text).lower().replace(" ", "").split("x")
    try:
        vals = [int(p) for p in parts]
    except ValueError:
        vals = []
    if len(vals) == 1:
        vals = vals * 2
    if len(vals) != 2 or min(vals) < 1:
        raise OptionError(f"size must be HxW (e.g. 64x48), got {text!r}")
    return tuple(vals)


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise DataError("reading images needs Pillow, which is not installed: pip install "
                        "'distnet[images]' (or pip install Pillow)") from None
    return Image


# ----------------------------------------------------------------------------- image folders

#: Names that file managers and archivers leave in folders; never classes or images (besides
#: every name starting with ``.``: ``.DS_Store``, macOS's ``._x.jpg``, ``.ipynb_checkpoints``).
IGNORED_NAMES = frozenset({"__MACOSX", "Thumbs.db", "desktop.ini"})
#: How class folders are ordered into labels (``--class-order``).
CLASS_ORDERS = ("text", "numeric")
#: Class mappings and file names shown in full in a note before "...".
_SHOWN = 3


def _visible(name):
    return not name.startswith(".") and name not in IGNORED_NAMES


def _shown(items, n=_SHOWN):
    """``a, b, c, ... (N in all)`` for a note."""
    items = list(items)
    more = f", ... ({len(items)} in all)" if len(items) > n else ""
    return ", ".join(str(i) for i in items[:n]) + more


def _is_int(name):
    """Whether a folder name is a whole number written in digits (``7``, ``007``)."""
    return name.isascii() and name.isdigit()


def _class_folders(folder, order="text", notes=None):
    """The class folder names of ``folder`` in label order: ``text`` (sorted as strings, the
    torchvision/Keras order) or ``numeric`` (names that are all integers, by value). In text
    order, integer names whose numeric order differs add a note to ``notes``."""
    entries = sorted(d for d in os.listdir(folder) if _visible(d))
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
    numeric = all(_is_int(c) for c in classes)
    if order == "numeric":
        if not numeric:
            bad = next(c for c in classes if not _is_int(c))
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
                     f"{_shown(moved)}; give --class-order numeric for labels in numeric order")
    return classes


def _walk(top):
    """Paths of the visible files under ``top``, relative to it with ``/``, sorted; follows
    symbolic links to folders, each real folder once and never back up to ``top`` or above it
    (a link to a parent would loop, or pull other classes' images in)."""
    top_real = os.path.realpath(top)
    seen, out = set(), []
    for root, dirs, files in os.walk(top, followlinks=True):
        real = os.path.realpath(root)
        above = root != top and os.path.commonpath([real, top_real]) == real
        if real in seen or above:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if _visible(d))
        rel = os.path.relpath(root, top)
        out += [f if rel == "." else f"{rel}/{f}" for f in files if _visible(f)]
    return sorted(out)


def _images_of(folder, classes, notes=None):
    """``[(path, label)]`` of every image under ``folder/<class>/`` (subfolders included,
    hidden files skipped); DataError for an empty class. Files that are not images (by
    extension), and images outside a class folder, add a note to ``notes``."""
    out, skipped = [], []
    for label, name in enumerate(classes):
        sub = os.path.join(folder, name)
        if not os.path.isdir(sub):
            raise DataError(f"{folder} has no class folder {name}/ (other splits have it)")
        files = _walk(sub)
        images = [f for f in files if f.lower().endswith(IMAGE_EXTENSIONS)]
        skipped += [os.path.join(sub, f) for f in files if not f.lower().endswith(IMAGE_EXTENSIONS)]
        if not images:
            raise DataError(f"class folder {sub} holds no images ({', '.join(IMAGE_EXTENSIONS)})")
        out += [(os.path.join(sub, f), label) for f in images]
    loose = sorted(p for f in os.listdir(folder) for p in [os.path.join(folder, f)]
                   if _visible(f) and f.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(p))
    if notes is not None and skipped:
        heic = [p for p in skipped if p.lower().endswith(_UNREAD_PHOTOS)]
        hint = (f" ({len(heic)} HEIC/HEIF photo(s), the iPhone's format, which Pillow does not read: "
                "convert them to JPEG first)" if heic else "")
        notes.append(f"skipped {len(skipped)} file(s) that are not images (by the extension): "
                     f"{_shown(heic + [p for p in skipped if p not in heic])}{hint}")
    if notes is not None and loose:
        notes.append(f"skipped {len(loose)} image(s) in {folder} itself, outside the class folders: "
                     f"{_shown(loose)}")
    return out


#: Photo formats Pillow cannot read without a plugin (iPhones save HEIC).
_UNREAD_PHOTOS = (".heic", ".heif")
#: EXIF orientations (tag 274) that turn the stored image by 90 degrees (H and W swap).
_QUARTER_TURNS = (5, 6, 7, 8)
_ORIENTATION = 0x0112


def _probe(Image, path):
    """``(mode, (H, W), frames)`` of an image as it is shown (its EXIF orientation applied),
    reading its header only."""
    try:
        with Image.open(path) as im:
            hw = (im.height, im.width)
            if im.getexif().get(_ORIENTATION) in _QUARTER_TURNS:
                hw = hw[::-1]
            return im.mode, hw, int(getattr(im, "n_frames", 1))
    except Exception as e:  # noqa: BLE001 - PIL raises many types for bad files
        raise DataError(f"cannot read image {path}: {type(e).__name__}: {e}") from None


#: Pillow modes of one channel (``LA``: grayscale with alpha, the alpha dropped).
GRAY_MODES = {"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}


def _to_8_bits(Image, im, wide=None):
    """``im`` as an 8-bit image: 16-bit grayscale (modes ``I;16*``, and ``I`` holding 0..65535)
    becomes ``round(v / 257)`` (Pillow's own conversion clips every value above 255 to 255);
    floating-point pixels (mode ``F``) have no fixed range and are refused. ``wide``: a list
    that gets the largest value of each 16-bit image."""
    if im.mode == "F":
        raise ValueError("floating-point pixels (mode F) have no fixed range to map to 0..255: save "
                         "the images as an (N, C, H, W) .npy and convert that")
    if im.mode != "I" and not im.mode.startswith("I;16"):
        return im
    a = np.asarray(im).astype(np.int64)
    if a.size and (a.min() < 0 or a.max() > 65535):
        raise ValueError(f"{im.mode} pixels {a.min()}..{a.max()} are not 16-bit (0..65535)")
    if wide is not None and a.size:
        wide.append(int(a.max()))
    return Image.fromarray(((a * 255 + 32767) // 65535).astype(np.uint8), "L")


#: 16-bit images whose values all stay below this (12-bit cameras and scanners) lose most of
#: their gray levels in ``v / 257``: a note says so.
_FEW_BITS = 4096


def _few_bits_note(wide):
    """The note for 16-bit images (``wide``: their largest values) that use few of 16 bits."""
    if not wide or max(wide) >= _FEW_BITS:
        return None
    top = max(wide)
    return (f"{len(wide)} 16-bit image(s) hold values of at most {top} ({top.bit_length()} bits): 8 bits "
            f"(v / 257) keep {(top * 255 + 32767) // 65535 + 1} gray levels of them; to keep them all, "
            "write the images to an (N, C, H, W) uint16 .npy, convert that, and set scale: "
            f"1/{top} (or the sensor's range)")


#: How ``--size`` meets an image of another aspect ratio: ``stretch`` (both axes scaled on their
#: own: the default, distorting), ``crop`` (scaled to cover H x W, the middle kept), ``pad``
#: (scaled to fit inside H x W, centered on black: a letterbox).
RESIZE_MODES = ("stretch", "crop", "pad")


def fit_image(Image, im, size, resize="stretch"):
    """``im`` (a Pillow image) brought to ``size`` ``(H, W)`` by ``resize``
    (:data:`RESIZE_MODES`), bilinear; an image of that size already is returned as it is."""
    H, W = size
    h, w = im.height, im.width
    if (h, w) == (H, W):
        return im
    if resize == "stretch":
        return im.resize((W, H), Image.BILINEAR)
    if resize == "crop":            # the box is in source pixels, fractions kept: no rounding shift
        s = max(H / h, W / w)
        ch, cw = H / s, W / s
        top, left = (h - ch) / 2, (w - cw) / 2
        return im.resize((W, H), Image.BILINEAR, box=(left, top, left + cw, top + ch))
    if resize == "pad":
        s = min(H / h, W / w)
        nh, nw = max(1, min(H, int(round(h * s)))), max(1, min(W, int(round(w * s))))
        inner = im if (nh, nw) == (h, w) else im.resize((nw, nh), Image.BILINEAR)
        canvas = Image.new(im.mode, (W, H), 0)
        canvas.paste(inner, ((W - nw) // 2, (H - nh) // 2))
        return canvas
    raise OptionError(f"resize must be one of {', '.join(RESIZE_MODES)}, got {resize!r}")


def _decode(Image, path, channels, size, wide=None, resize="stretch"):
    """``(C, H, W)`` uint8 pixels of one image as it is shown: the first frame, turned by its
    EXIF orientation (phone photos), 16-bit images scaled to 8 bits (``wide``:
    :func:`_to_8_bits`), brought to ``size`` by ``resize`` (:func:`fit_image`)."""
    from PIL import ImageOps
    try:
        with Image.open(path) as im:
            im = ImageOps.exif_transpose(im)
            im = _to_8_bits(Image, im, wide).convert("L" if channels == 1 else "RGB")
            if size is not None:
                im = fit_image(Image, im, size, resize)
            a = np.asarray(im, dtype=np.uint8)
    except Exception as e:  # noqa: BLE001
        raise DataError(f"cannot read image {path}: {type(e).__name__}: {e}") from None
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def _draw_splits(n, test_fraction, valid_fraction, seed, what, labels=None):
    """``{split: positions}`` drawn from ``n`` items (module docstring); with ``labels`` (``(n,)``
    ints: ``--stratify``) each class is split on its own by the fractions (:func:`_stratified`)."""
    perm = np.random.RandomState(seed).permutation(n)
    if labels is not None:
        return _stratified(perm, np.asarray(labels), test_fraction, valid_fraction, what)
    n_test, n_valid = int(round(n * test_fraction)), int(round(n * valid_fraction))
    for name, frac, k in (("test_fraction", test_fraction, n_test), ("valid_fraction", valid_fraction, n_valid)):
        if frac > 0 and k == 0:
            raise DataError(f"{what}: {name} {frac} of {n} images is round({n * frac:g}) = 0 "
                            f"{name.split('_')[0]} images; give a larger fraction or more images")
    if n - n_test - n_valid < 1:
        raise DataError(f"{what}: test_fraction {test_fraction} and valid_fraction {valid_fraction} "
                        f"leave no training image of {n}")
    out = {"test": perm[:n_test], "valid": perm[n_test:n_test + n_valid], "train": perm[n_test + n_valid:]}
    return {k: v for k, v in out.items() if len(v) or k == "train"}


def _stratified(perm, labels, test_fraction, valid_fraction, what):
    """The stratified draw: the same permutation ``perm`` as the plain draw, walked class by
    class: of the ``n_k`` images of class ``k`` (in ``perm``'s order) the first
    ``round(n_k * test_fraction)`` go to test, the next ``round(n_k * valid_fraction)`` to
    valid, the rest to train; every split keeps ``perm``'s order, so classes stay mixed. A class
    too small for a split is left out of it (the converter's note says which)."""
    ranked = labels[perm]
    side = np.empty(len(perm), dtype=np.int8)     # 0 test, 1 valid, 2 train, by position in perm
    for k in np.unique(labels):
        at = np.flatnonzero(ranked == k)
        n_k = len(at)
        n_test, n_valid = int(round(n_k * test_fraction)), int(round(n_k * valid_fraction))
        n_test, n_valid = min(n_test, n_k - 1), min(n_valid, max(0, n_k - 1 - min(n_test, n_k - 1)))
        side[at[:n_test]], side[at[n_test:n_test + n_valid]], side[at[n_test + n_valid:]] = 0, 1, 2
    out = {"test": perm[side == 0], "valid": perm[side == 1], "train": perm[side == 2]}
    for name, frac in (("test", test_fraction), ("valid", valid_fraction)):
        if frac > 0 and not len(out[name]):
            raise DataError(f"{what}: {name}_fraction {frac} of every class rounds to 0 images; give a larger "
                            "fraction or more images")
    return {k: v for k, v in out.items() if len(v) or k == "train"}


#: Folder names that hold a split (any case): ``val`` and ``validation`` are the validation split.
SPLIT_FOLDERS = {"train": "train", "test": "test", "valid": "valid", "val": "valid", "validation": "valid"}


def _split_folders(src):
    """``{split: folder name}`` of the split folders of ``src`` (:data:`SPLIT_FOLDERS`)."""
    named = {}
    for d in sorted(os.listdir(src)):
        split = SPLIT_FOLDERS.get(d.lower())
        if split is None or not _visible(d) or not os.path.isdir(os.path.join(src, d)):
            continue
        if split in named:
            raise DataError(f"{src} has both {named[split]}/ and {d}/: give one folder per split")
        named[split] = d
    return named


def _holds_images(folder):
    return any(f.lower().endswith(IMAGE_EXTENSIONS) and _visible(f) for f in os.listdir(folder))


def _check_one_class(folder, classes, notes):
    """One class folder: a DataError when its images are all in its subfolders (SOURCE one
    level above the class folders: every image would be label 0), else a note."""
    if len(classes) != 1:
        return
    inner = os.path.join(folder, classes[0])
    if not _holds_images(inner):
        subs = sorted(d for d in os.listdir(inner) if _visible(d) and os.path.isdir(os.path.join(inner, d)))
        raise DataError(f"{folder} has one class folder, {classes[0]}/, and its images are in its subfolders "
                        f"{_shown(d + '/' for d in subs)}: give {inner} as SOURCE if those are the classes")
    notes.append(f"{folder} has one class folder ({classes[0]}/): every image is label 0; SOURCE is the "
                 "folder that holds one subfolder per class")


def image_folder_splits(src, test_fraction, valid_fraction, seed, class_order="text", notes=None,
                        stratify=False, drawn=None):
    """``(classes, {split: [(path, label)]})`` of an image folder (module docstring); what the
    user should know (class order, skipped files) is appended to ``notes``. A folder with a
    ``train/`` folder is a folder of splits (``test/``, ``valid/`` or ``val/``; those it lacks
    are drawn from train); any other folder in it is refused, as are split folders without
    ``train/`` (their images would become the classes ``test``, ``val``)."""
    notes = [] if notes is None else notes
    if not os.path.isdir(src):
        raise DataError(f"{src} is not a folder")
    named = _split_folders(src)
    if "train" in named:
        others = sorted(d for d in os.listdir(src) if _visible(d) and os.path.isdir(os.path.join(src, d))
                        and d not in named.values())
        if others:
            raise DataError(f"{src} holds the split folders {', '.join(d + '/' for d in named.values())} and "
                            f"also {', '.join(d + '/' for d in others)}: a folder of splits holds train/, test/ "
                            "and valid/ (or val/) only, each with one subfolder per class")
        train_dir = os.path.join(src, named["train"])
        classes = _class_folders(train_dir, class_order, notes)
        _check_one_class(train_dir, classes, notes)
        rng = np.random.RandomState(seed)
        splits = {}
        for s in ("train", "test", "valid"):
            if s not in named:
                continue
            folder = os.path.join(src, named[s])
            extra = sorted(set(_class_folders(folder)) - set(classes))
            if extra:
                raise DataError(f"{folder} has class folder(s) {', '.join(c + '/' for c in extra)} "
                                f"that {train_dir} lacks; every split needs the same classes")
            items = _images_of(folder, classes, notes)
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
            pos = _draw_splits(len(train), test_fraction if draw_test else 0.0,
                               valid_fraction if draw_valid else 0.0, seed, src,
                               [lab for _, lab in train] if stratify else None)
            for s in ("test", "valid"):
                if s in pos and s not in splits:
                    splits[s] = [train[i] for i in pos[s]]
                    if drawn is not None:
                        drawn.append(s)
            splits["train"] = [train[i] for i in pos["train"]]
        return classes, {s: splits[s] for s in ("train", "test", "valid") if s in splits}
    looks_split = [d for d in named.values() if not _holds_images(os.path.join(src, d))]
    if looks_split:
        raise DataError(f"{src} has {', '.join(d + '/' for d in looks_split)} but no train/ folder: a folder "
                        "of splits needs train/ (its class folders decide the labels); or rename the "
                        "folder if it is a class")
    if test_fraction == 0:
        raise DataError(f"{src}: no test split (give train/ and test/ folders or a test_fraction > 0)")
    classes = _class_folders(src, class_order, notes)
    _check_one_class(src, classes, notes)
    items = _images_of(src, classes, notes)
    pos = _draw_splits(len(items), test_fraction, valid_fraction, seed, src,
                       [lab for _, lab in items] if stratify else None)
    if drawn is not None:
        drawn += [s for s in ("test", "valid") if s in pos]
    return classes, {s: [items[i] for i in p] for s, p in pos.items()}


def convert_image_folder(src, out, size=None, test_fraction=0.2, valid_fraction=0.0, seed=0,
                         class_order="text", resize=None, stratify=False):
    """Write ``out`` from the image folder ``src``; returns a summary dict whose ``notes`` are
    warnings for the user (class order, skipped files, multi-frame images) and whose
    ``resize`` line says what ``size`` did to aspect ratios (:func:`resize_line`)."""
    Image = _pillow()
    size = parse_size(size) if isinstance(size, str) else size
    notes = []
    drawn = []
    classes, splits = image_folder_splits(src, test_fraction, valid_fraction, seed, class_order, notes,
                                          stratify, drawn)
    all_items = [it for items in splits.values() for it in items]
    C, (H, W), shapes, notes_seen = _survey(Image, [p for p, _ in all_items], size)
    notes += notes_seen
    wide = []       # the largest value of every 16-bit image

    def fill(split, dset):
        for i, (path, _) in enumerate(splits[split]):
            dset[i] = _decode(Image, path, C, (H, W), wide, resize or "stretch")

    labels = {s: np.array([lab for _, lab in v], dtype=np.int64) for s, v in splits.items()}
    recipe = image_recipe((H, W), resize, C, classes, size is not None)
    _write(out, {s: (len(v), (C, H, W), np.uint8) for s, v in splits.items()}, fill, labels, classes,
           src, seed, test_fraction, valid_fraction, {"class_order": class_order, RECIPE_ATTR: recipe,
                                                      "stratify": bool(stratify)})
    info = summary(out)
    info["resize"] = resize_line(size, resize, shapes)
    info["split"] = split_line(stratify, drawn)
    info["notes"] = notes + [n for n in (_few_bits_note(wide), _missing_classes_note(labels, classes, "/"))
                             if n]
    return info


def _survey(Image, paths, size):
    """Read the headers of ``paths``: ``(channels, (H, W), [(h, w) of every image], notes)``;
    one DataError naming every image that cannot be read, or images of several sizes without
    ``size``."""
    notes = []
    shapes, sizes, frames, gray, color, bad = [], {}, [], [], [], []
    for path in paths:
        try:
            mode, hw, n_frames = _probe(Image, path)
        except DataError as e:      # all of them in one message, not one per attempt
            bad.append((path, str(e)))
            continue
        shapes.append(hw)
        (gray if mode in GRAY_MODES else color).append(path)
        sizes.setdefault(hw, path)
        if n_frames > 1:
            frames.append(f"{path} ({n_frames} frames)")
    bad.sort()
    if len(bad) == 1:
        raise DataError(bad[0][1])
    if bad:
        raise DataError(f"{len(bad)} images cannot be read (remove or replace them): {bad[0][1]}; and "
                        f"{_shown([p for p, _ in bad[1:]], 5)}")
    if frames:
        notes.append(f"{len(frames)} image(s) hold several frames (animated GIF, multi-page TIFF); only "
                     f"the first frame of each is converted: {_shown(sorted(frames))}")
    if gray and color:      # one stray color image makes a grayscale set 3 channels
        few, many = sorted((gray, color), key=len)
        kinds = ("grayscale", "color") if few is gray else ("color", "grayscale")
        notes.append(f"{len(few)} {kinds[0]} image(s) among {len(many)} {kinds[1]} ones: every image is "
                     f"stored as RGB (3 channels; a gray value in all three): {_shown(sorted(few))}")
    if size is None and len(sizes) > 1:
        (s1, p1), (s2, p2) = list(sizes.items())[:2]
        raise DataError(f"images of different sizes: {p1} is {s1[0]}x{s1[1]}, {p2} is {s2[0]}x{s2[1]}; "
                        "give a size to resize them all (--size HxW)")
    return 3 if color else 1, size or next(iter(sizes)), shapes, notes


def resize_line(size, resize, shapes):
    """What ``--size`` did, for the converter's output: how many of the images (``shapes``:
    their ``(h, w)``) had another aspect ratio than ``size`` and what ``resize`` did to them;
    None without ``size``."""
    if size is None:
        return None
    H, W = size
    other = sum(1 for h, w in shapes if h * W != w * H)
    mode = resize or "stretch"
    how = {"stretch": "stretched to it, distorted (--resize stretch, the default; --resize crop or pad keep "
                      "the aspect ratio)",
           "crop": "scaled to cover it and center-cropped (--resize crop)",
           "pad": "scaled to fit inside it and padded with black (letterbox, --resize pad)"}[mode]
    return (f"resized to {H}x{W} (bilinear): {other} of {len(shapes)} image(s) have another aspect ratio, "
            f"{how}")


# ----------------------------------------------------------------------------- arrays

def _load_array(path, mmap=True):
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {path}: {e}") from None


def _array_splits(src, labels_path):
    """``{split: (x, y, where)}`` from an .npz or an .npy (+ labels .npy)."""
    if src.lower().endswith(".npz"):
        z = _load_array(src, mmap=False)
        with z:
            names = set(z.files)
            if {"x", "y"} <= names and "x_train" not in names:
                split = sorted(names & {f"{a}_{s}" for a in "xy" for s in ("test", "valid")})
                if split:       # they were ignored, and a test split drawn from x
                    raise DataError(f"{src} holds x, y and {', '.join(split)}: name the training arrays "
                                    "x_train, y_train (x, y alone are split by --test-fraction)")
                return {"train": (z["x"], z["y"], src)}
            if not {"x_train", "y_train"} <= names:
                raise DataError(f"{src} holds arrays {sorted(names)}; expected x_train, y_train (and "
                                "optionally x_test, y_test, x_valid, y_valid), or x, y")
            for s in ("test", "valid"):
                half = [f"{a}_{s}" for a in "xy" if f"{a}_{s}" in names]
                if len(half) == 1:
                    other = ("y_" if half[0][0] == "x" else "x_") + s
                    raise DataError(f"{src} holds {half[0]} without {other}: give both (or neither)")
            return {s: (z[f"x_{s}"], z[f"y_{s}"], src) for s in ("train", "test", "valid")
                    if f"x_{s}" in names and f"y_{s}" in names}
    if labels_path is None:
        raise OptionError(f"{src} holds images only: give the labels (.npy) with --labels")
    return {"train": (_load_array(src), _load_array(labels_path, mmap=False), labels_path)}


#: Channel counts that make a 4-d array's last axis look like channels (gray, RGB, RGBA).
_CHANNEL_COUNTS = (1, 3, 4)


def _check_layout(x, layout, src, split):
    """``x`` as ``(N, C, H, W)``: transposed from ``(N, H, W, C)`` with ``layout="nhwc"``; with
    no layout, a DataError when the last axis looks like channels and the second does not."""
    if x.ndim != 4 or layout == "nchw":
        return x
    if layout == "nhwc":
        return x.transpose(0, 3, 1, 2)
    if layout is not None:
        raise OptionError(f"layout must be nchw or nhwc, got {layout!r}")
    if x.shape[3] in _CHANNEL_COUNTS and x.shape[1] not in _CHANNEL_COUNTS:
        raise DataError(f"{src}: {split} images are {x.shape}, which looks like (N, H, W, C) (channels "
                        f"last) but distnet stores (N, C, H, W): give --layout nhwc to transpose them, or "
                        f"--layout nchw if they really are {x.shape[1]} channels of {x.shape[2]}x{x.shape[3]} "
                        "pixels")
    return x


def _check_arrays(x, y, where, split):
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4 or x.dtype.kind not in "biuf":
        raise DataError(f"{where}: {split} images must be a numeric (N, C, H, W) or (N, H, W) array, "
                        f"got {x.dtype} {x.shape}")
    y = np.asarray(y)
    problem = labels_problem(y, len(x))
    if problem:
        raise DataError(f"{where}: {split} labels {problem}")
    if len(y) == 0:
        raise DataError(f"{where}: the {split} split holds no images")
    if y.min() < 0:
        raise DataError(f"{where}: {split} label {int(y.min())} is out of range (negative)")
    return x, y.astype(np.int64)


def convert_arrays(src, out, labels=None, test_fraction=0.2, valid_fraction=0.0, seed=0,
                   class_names=None, layout=None, stratify=False):
    """Write ``out`` from ``.npz`` / ``.npy`` arrays (module docstring); returns a summary.
    ``layout``: ``"nchw"`` (store 4-d arrays as they are), ``"nhwc"`` (transpose them), None
    (as they are, refusing arrays whose last axis looks like channels)."""
    if not os.path.isfile(src):
        raise DataError(f"{src} does not exist")
    given = {s: _check_arrays(_check_layout(x, layout, src, s), y, where if s == "train" else src, s)
             for s, (x, y, where) in _array_splits(src, labels).items()}
    shape = given["train"][0].shape[1:]
    for s, (x, _) in given.items():
        if x.shape[1:] != shape:
            raise DataError(f"{src}: {s} images are {x.shape[1:]}, train {shape}")
        if x.dtype != given["train"][0].dtype:      # stored in train's dtype, they would be cast
            raise DataError(f"{src}: {s} images are {x.dtype} but train images {given['train'][0].dtype}; "
                            "store every split in one dtype")
    # rows of each output split: (source split, positions)
    plan = {s: (s, np.arange(len(given[s][1]))) for s in given}
    draw_test = "test" not in given
    draw_valid = "valid" not in given and valid_fraction > 0
    unused = (f"valid_fraction {valid_fraction:g} is not used: {src} holds the validation split (x_valid, "
              "y_valid)") if "valid" in given and valid_fraction > 0 else None
    if draw_test or draw_valid:
        pos = _draw_splits(len(given["train"][1]), test_fraction if draw_test else 0.0,
                           valid_fraction if draw_valid else 0.0, seed, src,
                           given["train"][1] if stratify else None)
        for s, p in pos.items():
            plan[s] = ("train", p)
    if "test" not in plan:
        raise DataError(f"{src}: no test split (give x_test/y_test or a test_fraction > 0)")
    nclasses = 1 + max(int(given[s][1].max()) for s in given)
    names = list(class_names) if class_names else [str(k) for k in range(nclasses)]
    if len(names) < nclasses:
        raise DataError(f"{src}: label {nclasses - 1} is out of range for the {len(names)} class names "
                        f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})")
    dtype = given["train"][0].dtype

    def fill(split, dset):
        s, p = plan[split]
        x = given[s][0]
        for a in range(0, len(p), _COPY_ROWS):
            pb = p[a:a + _COPY_ROWS]
            order = np.argsort(pb, kind="stable")      # read in file order, store in p's order
            block = np.empty((len(pb),) + shape, dtype)
            block[order] = np.asarray(x[pb[order]])
            if block.dtype.kind == "f" and not np.isfinite(block).all():
                bad = int(pb[int(np.argmax(~np.isfinite(block.reshape(len(block), -1)).all(1)))])
                raise DataError(f"{src}: {s} image {bad} holds NaN or inf values")
            dset[a:a + len(block)] = block

    labels_out = {s: given[src_split][1][p] for s, (src_split, p) in plan.items()}
    _write(out, {s: (len(p), shape, dtype) for s, (_, p) in plan.items()}, fill, labels_out, names,
           src, seed, test_fraction, valid_fraction, {"stratify": bool(stratify)})
    info = summary(out)
    info["split"] = split_line(stratify, [s for s in ("test", "valid") if s in plan and plan[s][0] != s])
    note = _unused_labels_note(np.concatenate(list(labels_out.values())), len(names))
    info["notes"] = [n for n in (unused, note, None if note else _missing_classes_note(labels_out, names)) if n]
    return info


def _missing_classes_note(labels, classes, mark=""):
    """A note naming the classes that a split (``labels``: split -> labels) has no image of, but
    another split has: a split drawn at random may miss a small class, and its error rate then
    says nothing about it."""
    held = {s: np.bincount(y, minlength=len(classes)) > 0 for s, y in labels.items()}
    anywhere = np.logical_or.reduce(list(held.values()))
    parts = [f"{s} has no image of {_shown(classes[k] + mark for k in np.flatnonzero(anywhere & ~h))}"
             for s, h in held.items() if (anywhere & ~h).any()]
    return f"{'; '.join(parts)} (see distnet data info)" if parts else None


def _unused_labels_note(y, nclasses):
    """A note when labels of ``0 .. nclasses-1`` have no image: ``1 .. K`` (MATLAB's and SVHN's
    1-based labels) make K + 1 classes, label 0 empty, and a model of K outputs is refused."""
    empty = np.flatnonzero(np.bincount(y, minlength=nclasses) == 0)
    if not len(empty):
        return None
    if list(empty) == [0]:
        return (f"label 0 has no image: labels 1 .. {nclasses - 1} look 1-based (MATLAB, SVHN), which makes "
                f"{nclasses} classes; store y - 1 for {nclasses - 1} classes 0 .. {nclasses - 2}")
    return f"label(s) {_shown(int(k) for k in empty)} of 0 .. {nclasses - 1} have no image"


# ----------------------------------------------------------------------------- writing

def _write(out, layout, fill, labels, classes, src, seed, test_fraction, valid_fraction, attrs=None):
    """Create ``out`` with ``layout`` (split -> (n, (C, H, W), dtype)), ``fill(split, dataset)``
    writing the pixels, ``labels`` (split -> int64 array) and the root attributes ``attrs``."""
    import h5py
    if not str(out).lower().endswith((".h5", ".hdf5")):
        raise OptionError(f"the output {out} must end in .h5 or .hdf5")
    for s, y in labels.items():
        if len(y) and y.max() >= len(classes):
            raise DataError(f"{src}: {s} label {int(y.max())} is out of range 0..{len(classes) - 1}")
    check_writable(out, "output")      # a read-only folder says so, not "no room"
    _check_space(out, layout, labels)
    try:
        _write_file(h5py, out, layout, fill, labels, classes, src, seed, test_fraction, valid_fraction,
                    attrs or {})
    except (OSError, RuntimeError) as e:    # h5py raises both for a failed write
        raise DataError(f"cannot write {out}: {write_failure(e)}") from None


def _check_space(out, layout, labels):
    """DataError before anything is written when the output's file system lacks the room
    (h5py meeting a full disk mid-write prints a wall of errors and may crash the process)."""
    need = sum(n * C * H * W * np.dtype(dt).itemsize + n * 64 for n, (C, H, W), dt in layout.values())
    need += sum(8 * len(y) for y in labels.values()) + 64 * 1024     # labels, chunk index, header
    folder, free = free_space(out)
    if need > free:
        raise DataError(f"cannot write {out}: it needs about {need / 2**20:.2f} MiB but {folder} has "
                        f"{free / 2**20:.2f} MiB free")


def attr_text(name):
    """A file or folder name as UTF-8 text for an HDF5 attribute: bytes that are not UTF-8
    (Python keeps them as surrogates) are written ``\\xff``, so the name stays readable."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _write_file(h5py, out, layout, fill, labels, classes, src, seed, test_fraction, valid_fraction, attrs):
    with atomic_target(out) as tmp:
        with hdf5_file(tmp) as f:     # a disk that fills meanwhile: an OSError, never a crash at exit
            for split in ("train", "valid", "test"):
                if split not in layout:
                    continue
                n, (C, H, W), dtype = layout[split]
                dset = f.create_dataset(f"{split}/x", (n, C, H, W), dtype=dtype, fletcher32=True,
                                        chunks=(1, C, min(H, CHUNK_PIXELS), min(W, CHUNK_PIXELS)))
                fill(split, dset)
                f[f"{split}/y"] = labels[split]
            mean, std = channel_stats(f["train/x"])     # read back in blocks: memory stays bounded
            f.attrs[MEAN_ATTR], f.attrs[STD_ATTR] = mean, std
            f.attrs["nclasses"] = len(classes)
            f.attrs["class_names"] = [attr_text(str(c)) for c in classes]
            f.attrs["distnet_format"] = FORMAT
            f.attrs["source"] = attr_text(os.path.abspath(src))
            f.attrs["seed"] = int(seed)
            f.attrs["test_fraction"] = float(test_fraction)
            f.attrs["valid_fraction"] = float(valid_fraction)
            for k, v in attrs.items():
                f.attrs[k] = v


def summary(path):
    """``{"path", "splits": {split: n}, "shape", "dtype", "classes", "class_order"}`` of a
    converted file (``class_order``: ``text``/``numeric`` for an image folder, else None)."""
    import h5py
    with h5py.File(path, "r") as f:
        splits = {s: int(f[f"{s}/x"].shape[0]) for s in ("train", "valid", "test") if s in f}
        shape = tuple(int(d) for d in f["train/x"].shape[1:])
        dtype = str(f["train/x"].dtype)
        classes = [c.decode() if isinstance(c, bytes) else str(c) for c in f.attrs["class_names"]]
        order = f.attrs.get("class_order")
        stats = tuple(np.asarray(f.attrs[a], np.float64) if a in f.attrs else None for a in (MEAN_ATTR, STD_ATTR))
    order = order.decode() if isinstance(order, bytes) else order
    return {"path": str(path), "splits": splits, "shape": shape, "dtype": dtype, "classes": classes,
            "class_order": None if order is None else str(order), "mean": stats[0], "std": stats[1]}


#: Labels shown by :func:`label_line` before it shortens the list (``distnet data info`` shows all).
LABELS_SHOWN = 12


def label_line(classes, path, mark="/"):
    """``labels: 0 = cat/, 1 = dog/, ...``: which class folder (``mark`` "/"; class name: "")
    became which label."""
    pairs = [f"{k} = {c}{mark}" for k, c in enumerate(classes)]
    if len(pairs) > LABELS_SHOWN:
        pairs = pairs[:LABELS_SHOWN - 2] + ["...", pairs[-1]]
        return f"labels: {', '.join(pairs)} (all {len(classes)}: distnet data info {path})"
    return f"labels: {', '.join(pairs)}"


def describe(info):
    """What ``distnet data convert`` prints: one line, and a second one with the label of every
    class folder, or class name given (:func:`label_line`)."""
    C, H, W = info["shape"]
    parts = ", ".join(f"{s} {n}" for s, n in info["splits"].items())
    names = ", ".join(info["classes"][:8]) + (", ..." if len(info["classes"]) > 8 else "")
    line = (f"wrote {info['path']}: {parts} images of {C}x{H}x{W} {info['dtype']}, "
            f"{len(info['classes'])} classes ({names})")
    folders = info.get("class_order") is not None
    lines = [line] + [info[k] for k in ("resize", "split") if info.get(k)]
    if folders or info["classes"] != [str(k) for k in range(len(info["classes"]))]:
        lines.append(label_line(info["classes"], info["path"], "/" if folders else ""))   # else: the labels are the names
    return "\n".join(lines)


def split_line(stratify, drawn):
    """The converter's line on a stratified draw (None otherwise). ``drawn``: the splits drawn."""
    if not stratify or not drawn:
        return None
    return (f"{' and '.join(drawn)} drawn stratified by class (--stratify): each class in proportion; a class "
            "missing from a split is named in a warning")


def read_class_names(path):
    """The class names of a text file, one per line (label 0 first; UTF-8, a byte-order mark
    dropped); DataError naming ``file:line`` for an empty line or a name given twice."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read class names {path}: {e}") from None
    if lines and lines[-1] == "":
        lines.pop()
    seen = {}
    for n, line in enumerate(lines, 1):
        name = line.strip()
        if not name:
            raise DataError(f"{path}:{n}: empty line; give one class name per line, label 0 first")
        if name in seen:
            raise DataError(f"{path}:{n}: class name {name!r} again (line {seen[name]})")
        seen[name] = n
    if not seen:
        raise DataError(f"{path} holds no class names")
    return list(seen)


# ----------------------------------------------------------------------------- unlabeled images

def is_image_file(path):
    return path.lower().endswith(IMAGE_EXTENSIONS)


def list_pictures(paths):
    """The pictures of ``paths`` (image files, or folders), as ``[(path, name, true_class)]`` in
    order: files as given (``name`` the path given, no true class); a folder's images sorted by
    their path under it (``name`` that relative path), those in a subfolder with the subfolder's
    name as their true class (a folder per class), those in the folder itself with none. Hidden
    files and names of file managers are skipped, as by the converter. DataError for a path
    that is neither, or a folder without images."""
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



def convert_unlabeled(src, out, size=None, resize=None, like=None):
    """Write ``out`` from the images under the folder ``src`` (in subfolders too, none a class),
    without labels: ``x`` ``(N, C, H, W)`` uint8, ``files`` (each image's path under ``src``, in
    ``x``'s order) and the recipe. ``like``: a converted data set whose recipe (size, resize,
    channels) decodes the images, so they match its training images; else ``size`` and
    ``resize`` as for a labeled folder. ``distnet predict --data OUT`` reads it."""
    Image = _pillow()
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
        C, (H, W), shapes, notes = _survey(Image, [p for p, *_ in pictures], size)
        recipe = json.loads(image_recipe((H, W), resize, C, [], size is not None))
        recipe["size"] = (H, W)
    x_layout = {"x": (len(pictures), (C, H, W), np.uint8)}
    check_writable(out, "output")
    _check_space(out, x_layout, {})
    x = decode_pictures(pictures, recipe, like or src)
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


def convert(src, out, size=None, labels=None, test_fraction=0.2, valid_fraction=0.0, seed=0, layout=None,
            class_order=None, class_names=None, resize=None, stratify=False, unlabeled=False, like=None):
    """Dispatch on the source: a folder of images, an ``.npz`` or an ``.npy`` (module docstring).
    ``class_order`` (folders only): ``"text"`` (the default) or ``"numeric"``; ``class_names``
    (arrays only): a text file of one name per line, label 0 first; ``resize`` (folders, with
    ``size``): :data:`RESIZE_MODES`; ``stratify``: draw the splits class by class;
    ``unlabeled`` (folders): :func:`convert_unlabeled` (``like``: the data set whose recipe it
    repeats)."""
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
    if unlabeled:
        given = [k for k, v in (("--labels", labels), ("--layout", layout), ("--class-order", class_order),
                                ("--class-names", class_names), ("--stratify", stratify or None)) if v is not None]
        if given:
            raise OptionError(f"{', '.join(given)}: not options of an unlabeled conversion (--unlabeled)")
        if not os.path.isdir(src):
            raise OptionError(f"--unlabeled converts a folder of images; {src} is not one")
        return convert_unlabeled(src, out, size, resize, like)
    if os.path.isdir(src):
        if layout is not None:
            raise OptionError("--layout tells how arrays are laid out; images of a folder need none")
        if class_names is not None:
            raise OptionError("--class-names names the labels of arrays; the class folders of images name "
                              "theirs (--class-order orders them)")
        if labels is not None:
            raise OptionError("--labels gives the labels of an .npy of images; the class folders of images "
                              "give theirs")
        return convert_image_folder(src, out, size, test_fraction, valid_fraction, seed, class_order or "text",
                                    resize, stratify)
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
