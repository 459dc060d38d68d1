"""File formats of ``distnet predict``: the images to classify (HDF5, ``.npy`` or IDX), read as a
:class:`~distnet.data.sources.Source` (the dataset's read strategy reads them:
:meth:`~distnet.data.reading.Reading.read_images`), and the predictions written (HDF5 or CSV)."""
import os

import numpy as np

from ..errors import DataError, OptionError

#: Output formats of :func:`write_predictions`, by file extension.
PREDICTION_FORMATS = {".h5": "hdf5", ".hdf5": "hdf5", ".csv": "csv"}


def check_images_finite(x, path):
    """DataError naming the first image of ``x`` ``(N, C, h, w)`` that holds NaN or inf."""
    if x.dtype.kind == "f":
        bad = ~np.isfinite(x.reshape(len(x), -1)).all(axis=1)
        if bad.any():
            raise DataError(f"--data {path}: image {int(np.argmax(bad))} holds NaN or inf values")


def images_source(path, image_shape):
    """The images to classify in ``path``, ``(N, C, H, W)`` as stored (the experiment's dataset
    turns them into the model's values: :meth:`~distnet.datasets.base.Dataset.prepare_images`), as
    a :class:`~distnet.data.sources.Source` read a few rows at a time: a memory-mapped ``.npy`` or
    IDX file (MNIST's ``t10k-images-idx3-ubyte``, ``.gz`` too), an HDF5 file's dataset ``x`` (or
    ``test/x``, the layout of :class:`~distnet.datasets.HDF5Dataset`) read by hyperslabs; ``(N,
    C, H, W)``, or ``(N, H, W)`` for one channel (volumes, ``image_shape`` ``(C, D, H, W)``:
    ``(N, C, D, H, W)`` or ``(N, D, H, W)``). DataError for no such file, another image shape
    than ``image_shape``, values that are not numbers, or no images."""
    from .idx import map_idx
    from .sources import ArraySource, H5Source
    nd = len(image_shape) + 1       # the axes of a stack with its channel axis
    if not os.path.isfile(path):
        raise DataError(f"--data {path}: no such file or folder")
    if _is_idx_images(path):
        x, src = map_idx(path, _IDX_UBYTE_3D), None
    elif os.path.splitext(path)[1].lower() == ".npy":
        try:
            x, src = np.load(path, mmap_mode="r", allow_pickle=False), None
        except ValueError as e:
            raise DataError(f"--data {path}: not a numpy array file ({e})") from None
    else:
        import h5py
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            raise DataError(f"--data {path}: neither a .npy file nor a readable HDF5 file ({e})") from None
        with f:
            key = next((k for k in ("x", "test/x") if k in f), None)
            if key is None:
                raise DataError(f"--data {path}: the HDF5 file has no dataset 'x' (or 'test/x') of "
                                "images (N, C, H, W)")
            x = f[key]
            src = H5Source(path, key[:-2], x.shape, x.dtype) if x.ndim == nd else None
            if src is None:
                _check_axes(path, x.shape, image_shape)
                x = x[()]
    _check_axes(path, (src or x).shape, image_shape)
    if src is None and x.ndim == nd - 1:
        x = x[:, None]
    shape, dtype = (src.shape, src.dtype) if src is not None else (x.shape, x.dtype)
    if tuple(shape[1:]) != tuple(image_shape):
        raise DataError(f"--data {path}: {_kind(image_shape)} of shape {tuple(shape[1:])}, but the experiment "
                        f"takes {tuple(image_shape)} ({_axes(image_shape)})")
    if dtype.kind not in "biuf":
        raise DataError(f"--data {path}: images must be numbers, got dtype {dtype}")
    if shape[0] == 0:
        raise DataError(f"--data {path}: holds no images")
    return src if src is not None else ArraySource(path, "x", x, np.zeros(len(x), np.int64))


def _kind(image_shape):
    return "volumes" if len(image_shape) == 4 else "images"


def _axes(image_shape):
    return ", ".join("C" + "DHW"[-(len(image_shape) - 1):])


def _check_axes(path, shape, image_shape):
    """DataError unless an array of ``shape`` is a stack of ``image_shape`` arrays (with or
    without the channel axis): a volume's stack given to a 2-D model, images to a 3-D one."""
    if len(shape) - 1 not in (len(image_shape), len(image_shape) - 1):
        raise DataError(f"--data {path}: an array of shape {tuple(shape)}, but the experiment takes "
                        f"{_kind(image_shape)} (N, {_axes(image_shape)}) of {tuple(image_shape)}")


_IDX_UBYTE_3D = 0x00000803   # IDX magic: unsigned bytes, 3 dimensions (N, H, W)


def _is_idx_images(path):
    import gzip
    try:
        with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
            return f.read(4) == _IDX_UBYTE_3D.to_bytes(4, "big")
    except OSError:
        return False


def prediction_format(path):
    """``'hdf5'`` or ``'csv'`` from the extension of ``path``, ``'masks'`` for a folder (a name
    ending in ``/`` or a folder that exists: a per-pixel model's mask PNGs); OptionError
    otherwise (exit 2)."""
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        return "masks"
    fmt = PREDICTION_FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise OptionError(f"-o {path}: give a file ending in .h5, .hdf5 (HDF5) or .csv, or a folder OUT_DIR/ "
                          "(the masks of a per-pixel model)")
    return fmt


def check_prediction_target(per_pixel, output, fmt, probabilities=None):
    """OptionError unless the outputs fit the model: a per-pixel model writes masks into a folder
    (``-o OUT_DIR/``, its probabilities with ``--probabilities OUT.h5``), a classifier one row
    per image (a classifier's or a regression's) to ``.h5`` or ``.csv``."""
    if per_pixel and fmt != "masks":
        raise OptionError(f"-o {output}: this model scores every pixel; give a folder for its mask PNGs "
                          "(-o OUT_DIR/) and --probabilities OUT.h5 for its class maps (.h5 and .csv hold one "
                          "row per image)")
    if not per_pixel and fmt == "masks":
        raise OptionError(f"-o {output}: a folder takes the masks of a per-pixel model; this model predicts "
                          "one row per image: give OUT.h5, OUT.hdf5 or OUT.csv")
    if not per_pixel and probabilities is not None:
        raise OptionError("--probabilities writes a per-pixel model's class maps; this model predicts one row "
                          "per image: -o OUT.h5 holds them")


def _csv_field(text):
    """``text`` as one CSV field (quoted when it holds a comma, a quote or a line break)."""
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\r\n') else text


def probability_columns(names, k):
    """The CSV header of the ``k`` probability columns, in label order: ``p_<class name>`` where
    the ``names`` of the classes are known (quoted where a name needs it), else ``p0 .. p{k-1}``."""
    if names is None:
        return [f"p{j}" for j in range(k)]
    return [_csv_field(f"p_{n}") for n in names]


def write_predictions(path, outputs, labels, class_names=None, files=None, truth=None):
    """Write ``outputs (N, K)`` and ``labels (N,)`` to ``path``: HDF5 datasets ``probabilities``
    and ``labels``, or CSV with a header ``label,p0,...,p{K-1}`` and one row per image. With
    ``class_names`` (K names: the training file's, e.g. the converter's class folders) the
    HDF5 ``labels`` and ``probabilities`` get the attribute ``class_names`` and the CSV a column
    ``class`` after ``label``, so a label is never a guess, and its probability columns are
    named by class, ``p_<name>``, still in label order (column ``k`` of the probabilities is
    label ``k``: :func:`probability_columns`). ``files`` (N names: pictures) adds a first column
    ``file`` (HDF5: dataset ``files``); ``truth`` (N class names or None: a picture's class
    folder) adds the columns ``true_label`` (its index in ``class_names``, empty when unknown)
    and ``true_class`` after ``class`` (HDF5: ``true_labels``, -1 where unknown, and
    ``true_classes``). Written into a temporary file that replaces ``path`` once complete."""
    from ..fileio import atomic_target, hdf5_file
    fmt = prediction_format(path)
    names = list(class_names) if class_names is not None and len(class_names) == outputs.shape[1] else None
    if truth is not None and not any(t is not None for t in truth):
        truth = None
    index = {n: k for k, n in enumerate(names or [])}
    true_labels = None if truth is None else [index.get(t, -1) if t is not None else -1 for t in truth]
    with atomic_target(path) as tmp:
        if fmt == "hdf5":
            import h5py
            with hdf5_file(tmp) as f:     # a full disk: an OSError, never a crash at exit
                f["probabilities"] = outputs
                f["labels"] = labels.astype(np.int64)
                f["probabilities"].attrs["meaning"] = ("class probabilities, one row per image: the last layer's "
                                                       "outputs, through the softmax when the cost takes logits")
                if names is not None:
                    f["labels"].attrs["class_names"] = names
                    f["probabilities"].attrs["class_names"] = names     # column k: label k
                if files is not None:
                    f["files"] = np.array(list(files), dtype=h5py.string_dtype())
                if truth is not None:
                    f["true_labels"] = np.array(true_labels, dtype=np.int64)
                    f["true_classes"] = np.array([t or "" for t in truth], dtype=h5py.string_dtype())
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                head = (["file"] if files is not None else []) + ["label"] + (["class"] if names is not None else [])
                head += ["true_label", "true_class"] if truth is not None else []
                f.write(",".join(head + probability_columns(names, outputs.shape[1])) + "\n")
                for i, (lab, row) in enumerate(zip(labels, outputs)):
                    cells = [_csv_field(str(files[i]))] if files is not None else []
                    cells.append(str(int(lab)))
                    cells += [_csv_field(names[int(lab)])] if names is not None else []
                    if truth is not None:
                        known = true_labels[i] >= 0
                        cells += [str(true_labels[i]) if known else "", _csv_field(truth[i] or "")]
                    f.write(",".join(cells + [f"{v:.9g}" for v in row]) + "\n")


def value_columns(names, k):
    """The CSV header of a regression's ``k`` value columns: the targets' ``names`` (quoted where
    a name needs it), else ``t0 .. t{k-1}``."""
    if names is None or len(names) != k:
        return [f"t{j}" for j in range(k)]
    return [_csv_field(str(n)) for n in names]


def write_values(path, values, target_names=None, files=None):
    """Write a regression's predicted ``values (N, T)`` to ``path``: HDF5 dataset ``values``
    (float64, attribute ``target_names`` where the training data named its targets), or CSV
    with one column per target named by ``target_names`` (:func:`value_columns`) and one row per
    sample, each value written to round-trip exactly (``repr`` of the float64). ``files`` (N
    names: volume files) adds a first column ``file`` (HDF5: dataset ``files``). Written into a
    temporary file that replaces ``path`` once complete."""
    from ..fileio import atomic_target, hdf5_file
    names = list(target_names) if target_names is not None and len(target_names) == values.shape[1] else None
    with atomic_target(path) as tmp:
        if prediction_format(path) == "hdf5":
            import h5py
            with hdf5_file(tmp) as f:     # a full disk: an OSError, never a crash at exit
                f["values"] = np.asarray(values, dtype=np.float64)
                f["values"].attrs["meaning"] = "predicted targets, one row per sample: the last layer's outputs"
                if names is not None:
                    f["values"].attrs["target_names"] = names     # column t: target t
                if files is not None:
                    f["files"] = np.array(list(files), dtype=h5py.string_dtype())
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                head = (["file"] if files is not None else []) + value_columns(names, values.shape[1])
                f.write(",".join(head) + "\n")
                for i, row in enumerate(values.tolist()):
                    cells = [_csv_field(str(files[i]))] if files is not None else []
                    f.write(",".join(cells + [repr(v) for v in row]) + "\n")
