"""The volumes ``distnet predict --data`` (and :func:`distnet.load`'s ``predict``) names for a
3-D model: volume files (``.npy``, NIfTI, TIFF stacks: :mod:`.volumes` reads them as the
converter did) and folders of them, each file one volume ``(D, H, W)`` or ``(C, D, H, W)``; or
one HDF5 file of volumes stored already (``x`` or ``test/x``, ``(N, C, D, H, W)``). Volumes are
used as stored: no resizing, no channel conversion, so every one must have the model's ``(C, D,
H, W)``; the ones that do not are named in one report (the error, or with ``skip_bad`` a warning).
"""
import os

import numpy as np

from ..data.predict_files import images_source
from ..data.sources import Source, cut
from ..errors import DataError, OptionError
from ..geometry.partition import shape_text
from .folders import is_image_file, walk
from .pictures import stored_names
from .volumes import VOLUME_EXTENSIONS, is_volume_folder, read_volume


def volume_files(paths):
    """``[(path, name, None)]`` of the volume files ``paths`` name (files as given; a folder's
    volume files sorted by their path under it); DataError for a path that is neither."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            found = [f for f in walk(p) if f.lower().endswith(VOLUME_EXTENSIONS)]
            if not found:
                raise DataError(f"--data {p}: the folder holds no volumes (.npy, .nii, .nii.gz, .tif, .tiff)")
            out += [(os.path.join(p, f), f, None) for f in found]
        elif os.path.isfile(p) and p.lower().endswith(VOLUME_EXTENSIONS):
            out.append((p, p, None))
        elif not os.path.exists(p):
            raise DataError(f"--data {p}: no such file or folder")
        else:
            what = "a 2-D picture" if is_image_file(p) else "not a volume file (by its extension)"
            raise DataError(f"--data {p}: {what}; this model takes volumes: .npy, NIfTI (.nii, .nii.gz) or TIFF "
                            "stack files, folders of them, or one HDF5 file of volumes (N, C, D, H, W)")
    return out


def volume_problem(path, image_shape):
    """Why the volume file ``path`` cannot be given to a model of volumes ``image_shape`` ``(C,
    D, H, W)`` (None: it can), and its ``(shape, dtype)``."""
    try:
        a = read_volume(path)
    except DataError as e:
        return str(e), None
    if a.shape == tuple(image_shape):
        return None, (a.shape, a.dtype)
    other = "channel count" if a.shape[1:] == tuple(image_shape[1:]) else "size"
    return (f"{path} is a volume of {shape_text(a.shape)} and the model takes {shape_text(image_shape)} "
            f"(C x D x H x W): another {other}"), None


class VolumeFiles(Source):
    """Volume files of one shape ``(C, D, H, W)`` and type as a source of ``(N, C, D, H, W)``:
    each read opens the files of its rows and copies their tile (a ``.npy`` memory-mapped:
    only the tile's bytes are read)."""

    def __init__(self, paths, shape, dtype):
        self.files, self.path, self.name = list(paths), ", ".join(paths), "volumes"
        self.shape, self.dtype = (len(self.files),) + tuple(shape), np.dtype(dtype)

    def labels(self):
        return np.zeros(len(self.files), dtype=np.int64)

    def read(self, rows, tile, positions=None, out=None):
        rows = np.asarray(rows, dtype=np.int64)
        out = self._out(len(rows), tile, out)
        box = cut(tile)[1:]         # every channel, the tile's box
        for at, row in zip(range(len(rows)) if positions is None else positions, rows):
            out[at] = read_volume(self.files[row])[box]
        return out


class Volumes:
    """What ``distnet predict --data`` names for a 3-D model, ready to read on every rank
    (:class:`~distnet.convert.pictures.Pictures`' interface): volume files and folders
    (``pictures``: ``[(path, name, None)]``, ``names`` their names), or one HDF5 file of
    volumes (``pictures`` None, ``names`` its ``files`` dataset or None). ``truth``: None;
    ``converted``: empty (a volume's channels are never converted)."""

    def __init__(self, paths, recipe_file=None):
        self.paths, self.recipe_file = list(paths), recipe_file
        self.pictures = self.names = self.truth = None
        self._files, self.skipped, self.converted = None, [], []
        if len(self.paths) == 1 and self.paths[0].lower().endswith((".h5", ".hdf5")):
            self.names = stored_names(self.paths[0])
        else:
            self.pictures = volume_files(self.paths)
            self.names = [name for _, name, _ in self.pictures]

    def decode(self, training_recipe, training_where, image_shape, skip_bad=False, convert_channels=False):
        """Check every volume file against the model's ``image_shape`` ``(C, D, H, W)`` and keep
        the usable ones: one DataError naming each that is not, unless ``skip_bad`` (left out,
        listed in ``skipped`` as ``(path, reason)``; the warning lines are returned). ``--recipe``
        and ``convert_channels`` are for pictures (OptionError)."""
        if self.recipe_file is not None or convert_channels:
            option = "--recipe" if self.recipe_file is not None else "--convert-channels"
            raise OptionError(f"{option} is for pictures; volumes are used as stored: give no {option}")
        if self.pictures is None:
            return []
        kept, bad, kinds = [], [], set()
        for path, name, _ in self.pictures:
            reason, kind = volume_problem(path, image_shape)
            if reason is None:
                kept.append((path, name))
                kinds.add(kind)
            else:
                bad.append(reason)
                self.skipped.append((path, reason))
        if len(kinds) > 1:
            raise DataError(f"--data: volumes of different types ({', '.join(sorted(str(k[1]) for k in kinds))}); "
                            "cast them to one first")
        if bad and (not skip_bad or not kept):
            more = " (--skip-bad predicts the others)" if kept else ""
            raise DataError(f"{len(bad)} of {len(self.pictures)} volume(s) cannot be used{more}: " + "; ".join(bad))
        self._files = kept
        self.names = [name for _, name in kept]
        self._dtype = kinds.pop()[1]
        return [f"skipped {len(bad)} of {len(self.pictures)} volume(s) (--skip-bad): " + "; ".join(bad)] if bad else []

    def source(self, image_shape):
        """The volumes as a :class:`~distnet.data.sources.Source` (checked already: :meth:`decode`)."""
        if self.pictures is None:
            return images_source(self.paths[0], image_shape)
        return VolumeFiles([p for p, _ in self._files], image_shape, self._dtype)


def refuse_volumes(paths):
    """DataError when ``paths`` (a 2-D model's ``--data``) name volumes: NIfTI files, TIFF stacks,
    folders of volumes."""
    for p in paths:
        if (os.path.isdir(p) and is_volume_folder(p)) or p.lower().endswith((".nii", ".nii.gz")):
            raise DataError(f"--data {p}: volumes (.npy, NIfTI, TIFF stacks), but this model takes 2-D images; "
                            "predict them with a 3-D model")
