"""``distnet data convert VOLUMES OUT.h5 --masks MASKS``: a folder of 3-D volumes and a folder of
their masks (paired by file name, :mod:`.masks`) to the HDF5 layout of volumes: ``<split>/x``
``(N, C, D, H, W)`` in the volumes' own type and ``<split>/y`` ``(N, D, H, W)``, chunked in blocks
of at most 64 voxels a side (docs/masks.md#volumes-npy-nifti-tiff-stacks).

Formats, by extension:

* ``.npy``: ``(D, H, W)`` (one channel) or ``(C, D, H, W)``, memory-mapped;
* ``.nii``, ``.nii.gz`` (NIfTI, ``pip install 'distnet[nifti]'``: nibabel): voxel axes ``(X, Y,
  Z)`` or ``(X, Y, Z, C)`` are stored as ``(C, Z, Y, X)``: ``D`` runs along ``Z``, ``W`` along
  ``X``, as the slices of a scanner are viewed; the scale of the header applied;
* ``.tif``, ``.tiff`` stacks (``pip install 'distnet[tiff]'``: tifffile): ``(D, H, W)`` pages, or
  ``(D, H, W, S)`` with ``S`` 3 or 4 samples (channels) per pixel, stored ``(S, D, H, W)``.

A folder is a set of volumes when it holds ``.npy`` or NIfTI files or a TIFF of more than one page
(:func:`is_volume_folder`); a 2-D file in it (an image, a one-page TIFF, an ``(H, W)`` array) is
refused, naming it. Every volume has one shape and type (no resizing: resample them first);
masks hold integers (whole numbers stored as floats, as NIfTI masks often are, are accepted) of
the volume's ``(D, H, W)``; float volumes must be finite.
"""
import numpy as np

from ..errors import DataError
from .folders import IMAGE_EXTENSIONS, walk
from .masks import ClassIds, pair_masks, read_class_file
from .segmentation import files_of, write_pairs

#: The extensions of volume files (TIFF counts where it is a stack).
VOLUME_EXTENSIONS = (".npy", ".nii", ".nii.gz", ".tif", ".tiff")
_TIFF, _NIFTI = (".tif", ".tiff"), (".nii", ".nii.gz")
#: The extensions only volumes have.
VOLUME_ONLY = (".npy",) + _NIFTI


def _extra(module, what, extra):
    """``import module``, or the DataError saying which ``pip install`` reads ``what``."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DataError(f"reading {what} needs {module}, which is not installed: pip install 'distnet[{extra}]' "
                        f"(or pip install {module})") from None


def tiff_pages(path):
    """The number of pages (slices) of a TIFF file (tifffile, else Pillow)."""
    try:
        import tifffile
        with tifffile.TiffFile(path) as t:
            return len(t.pages)
    except ImportError:
        pass
    except Exception as e:  # noqa: BLE001 - tifffile raises many types for bad files
        raise DataError(f"cannot read {path}: {type(e).__name__}: {e}") from None
    from .decode import pillow, probe
    return probe(pillow(), path)[2]


def is_volume_folder(folder):
    """Whether ``folder`` holds volumes (module docstring) rather than images."""
    files = [f.lower() for f in walk(folder)]
    if any(f.endswith(VOLUME_ONLY) for f in files):
        return True
    import os
    return any(tiff_pages(os.path.join(folder, f)) > 1 for f in files if f.endswith(_TIFF))


def _load(path):
    """The array of a volume file as its format orders it into ``([C,] D, H, W)`` (module docstring)."""
    low = path.lower()
    try:
        if low.endswith(".npy"):
            return np.load(path, mmap_mode="r", allow_pickle=False)
        if low.endswith(_NIFTI):
            a = np.asanyarray(_extra("nibabel", "NIfTI volumes (.nii, .nii.gz)", "nifti").load(path).dataobj)
            return a.transpose(tuple(range(a.ndim))[::-1]) if a.ndim in (3, 4) else a
        a = _extra("tifffile", "TIFF stacks", "tiff").imread(path)
        return np.moveaxis(a, -1, 0) if a.ndim == 4 and a.shape[-1] in (3, 4) else a
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - numpy, nibabel and tifffile raise many types for bad files
        raise DataError(f"cannot read {path}: {type(e).__name__}: {e}") from None


def read_volume(path):
    """``(C, D, H, W)`` of a volume file; DataError for another number of axes (a 2-D file)."""
    a = _load(path)
    if a.ndim == 3:
        return a[None]
    if a.ndim != 4 or a.dtype.kind not in "biuf":
        kind = "a 2-D (H, W) array" if a.ndim == 2 else f"a {a.ndim}-D array"
        raise DataError(f"{path} is {kind} of {a.dtype} {a.shape}, not a volume: a set of volumes holds (D, H, W) or "
                        "(C, D, H, W) arrays of numbers only")
    return a


def read_volume_mask(path):
    """``(D, H, W)`` class ids (int64) of a mask file; DataError for another shape or values
    that are no whole numbers."""
    a = np.asarray(_load(path))
    if a.ndim != 3 or a.dtype.kind not in "biuf":
        raise DataError(f"mask {path} is {a.dtype} {a.shape}: a volume's mask is (D, H, W) class ids")
    if a.dtype.kind == "f":
        if not np.isfinite(a).all() or not (a == np.round(a)).all():
            raise DataError(f"mask {path} holds values that are no class ids (not whole numbers)")
    return a.astype(np.int64)


def survey_volumes(paths):
    """``(shape (C, D, H, W), dtype)`` of the volumes ``paths``: one shape and one type, else a
    DataError naming two files."""
    first = None
    for path in paths:
        a = read_volume(path)
        if first is None:
            first = (path, a.shape, a.dtype)
        elif a.shape != first[1] or a.dtype != first[2]:
            raise DataError(f"volumes of different {'shapes' if a.shape != first[1] else 'types'}: {first[0]} is "
                            f"{first[2]} {first[1]}, {path} is {a.dtype} {a.shape} (C, D, H, W); resample or cast "
                            "them to one first")
    return first[1], first[2]


def volume_reader(dtype):
    """``read(path)``: a volume's ``(C, D, H, W)`` array; DataError for NaN or inf in float volumes."""
    def read(path):
        a = np.asarray(read_volume(path))
        if dtype.kind == "f" and not np.isfinite(a).all():
            raise DataError(f"{path} holds NaN or inf values: clean the volume or leave it out")
        return a
    return read


def convert_volumes(src, out, masks, test_fraction=0.2, valid_fraction=0.0, seed=0, classes=None, ignore_label=255):
    """Write ``out`` from the volumes under ``src`` and their masks under ``masks`` (module
    docstring); ``classes``: a ``--classes`` file. Returns the summary dict with ``notes``."""
    images = [f for f in walk(src) if f.lower().endswith(IMAGE_EXTENSIONS) and not f.lower().endswith(_TIFF)]
    if images:
        raise DataError(f"{src} holds volumes and also 2-D images ({images[0]}, ...): a data set is of images or of "
                        "volumes")
    files = files_of(src, VOLUME_EXTENSIONS, "volumes")
    pairs, notes = pair_masks(src, files, masks, files_of(masks, VOLUME_EXTENSIONS, "masks"))
    shape, dtype = survey_volumes([p for p, _ in pairs])
    ids = ClassIds(read_class_file(classes) if classes else None, ignore_label)
    for path, mask in pairs:
        m = read_volume_mask(mask)
        if m.shape != shape[1:]:
            raise DataError(f"mask {mask} is {'x'.join(map(str, m.shape))} but its volume {path} is "
                            f"{'x'.join(map(str, shape[1:]))} (D x H x W): a mask has its volume's shape")
        ids.check(m, mask)
    info = write_pairs(out, src, masks, pairs, (shape, dtype), volume_reader(dtype), read_volume_mask, ids,
                       (test_fraction, valid_fraction, seed), {})
    info["notes"] = notes
    return info


__all__ = ["VOLUME_EXTENSIONS", "VOLUME_ONLY", "convert_volumes", "is_volume_folder", "read_volume", "read_volume_mask",
           "tiff_pages", "volume_reader"]
