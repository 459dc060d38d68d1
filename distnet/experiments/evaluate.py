"""Using a trained checkpoint: error rates of its data splits (``distnet evaluate``) and class
probabilities of new images (``distnet predict``), on any grid or number of ranks.

Both build the experiment as ``distnet run`` would (its topology from the world, its layers
planned on it), load the checkpoint with :func:`~distnet.models.checkpoint.restore_checkpoint`
(every weight is stored in its global layout, so a checkpoint written on one grid loads on any
other) and run the model forward only. Every rank calls these functions; the results are the
same on every rank (rank 0 prints and writes).
"""
import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import DataError, DistnetError
from ..log import get_logger

#: Output formats of :func:`write_predictions`, by file extension.
PREDICTION_FORMATS = {".h5": "hdf5", ".hdf5": "hdf5", ".csv": "csv"}


@dataclass
class Evaluation:
    """What :func:`evaluate_checkpoint` measured."""

    #: ``{split: misclassification rate in percent}`` in the dataset's order (train, test).
    rates: dict = field(default_factory=dict)
    #: ``{split: number of images}``.
    counts: dict = field(default_factory=dict)
    epoch: int = None                 # the last epoch the checkpoint had trained (0-based)
    written_on: str = ""              # "1 rank(s), grid 1x1" of the checkpoint
    size: int = 1
    grid: tuple = (1, 1)


def _restore(exp, checkpoint, topology=None):
    """Set up ``exp`` on ``topology`` (default: from the world) and load ``checkpoint``;
    returns the :class:`~distnet.models.checkpoint.Checkpoint`. Collective."""
    from ..models.checkpoint import restore_checkpoint
    t = exp.setup(topology)
    ck = restore_checkpoint(exp.model, checkpoint, t, get_logger())
    exp.model.resume = None     # restored for inference, not to continue training
    return ck


def _written_on(ck):
    grid = "x".join(str(int(g)) for g in ck.meta.get("grid", [])) or "?"
    return f"{ck.meta.get('size', '?')} rank(s), grid {grid}"


def evaluate_checkpoint(exp, checkpoint, topology=None):
    """Misclassification rates of every split of ``exp``'s dataset (train and test) with the
    weights of ``checkpoint``. Collective over the run's world; returns an :class:`Evaluation`
    (the same on every rank)."""
    ck = _restore(exp, checkpoint, topology)
    t = exp.topology
    data = exp.load_data()
    result = Evaluation(epoch=ck.epoch, written_on=_written_on(ck), size=t.size, grid=tuple(t.grid))
    for split, (x, y) in data.items():
        result.rates[split] = exp.model.misclass_rate(x, y)
        result.counts[split] = len(y)
    return result


# ---------------------------------------------------------------------------------------------
# predict
# ---------------------------------------------------------------------------------------------

def read_images(path, image_shape, tile=None, scale_255=False):
    """Images to classify, ``(N, C, H, W)`` cut to ``tile`` (a :class:`~distnet.geometry.Box`;
    None: whole images), as float64.

    ``path``: an HDF5 file with a dataset ``x`` (or ``test/x``, the layout of
    :class:`~distnet.datasets.HDF5Dataset`), a ``.npy`` file, or an IDX image file (MNIST's
    ``t10k-images-idx3-ubyte``, ``.gz`` too); ``(N, C, H, W)``, or ``(N, H, W)`` for one channel. Integer pixels are divided by 255 when the experiment's
    dataset scales its own pixels so (``scale_255``: MNIST, CIFAR-10); floats are used as stored.
    """
    if not os.path.isfile(path):
        raise DataError(f"--data {path}: no such file")
    ext = os.path.splitext(path)[1].lower()
    if _is_idx_images(path):
        from ..datasets.idx import read_idx
        x = read_idx(path, _IDX_UBYTE_3D)
    elif ext == ".npy":
        try:
            x = np.load(path, mmap_mode="r", allow_pickle=False)
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
            x = f[key][()]
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4 or tuple(x.shape[1:]) != tuple(image_shape):
        raise DataError(f"--data {path}: images of shape {tuple(x.shape[1:])}, but the experiment "
                        f"takes {tuple(image_shape)} (C, H, W)")
    if x.dtype.kind not in "biuf":
        raise DataError(f"--data {path}: images must be numbers, got dtype {x.dtype}")
    if tile is not None:
        x = x[:, :, tile.y0:tile.y1, tile.x0:tile.x1]
    scale = scale_255 and x.dtype.kind in "biu"
    x = np.asarray(x, dtype=np.float64)
    return x / 255 if scale else x


_IDX_UBYTE_3D = 0x00000803   # IDX magic: unsigned bytes, 3 dimensions (N, H, W)


def _is_idx_images(path):
    import gzip
    try:
        with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
            return f.read(4) == _IDX_UBYTE_3D.to_bytes(4, "big")
    except OSError:
        return False


def predict_checkpoint(exp, checkpoint, data_path, topology=None):
    """The model's outputs for the images of ``data_path`` (:func:`read_images`) with the
    weights of ``checkpoint``: ``(outputs (N, K), labels (N,))``, labels the argmax. The same
    on every rank (data replicas each compute their rows; one Allreduce over ``Topology.data``
    puts them together). Collective over the run's world."""
    from ..comm.abort import run_collectively
    from ..comm.reduce import allreduce_sum
    _restore(exp, checkpoint, topology)
    t, model = exp.topology, exp.model
    tile = exp.dataset.rank_tile(t.grid, t.coords) if exp.dist_flag else None
    x = run_collectively(read_images, t.world, data_path, exp.dataset.image_shape, tile,
                         getattr(exp.dataset, "scale_255", False))
    x = x.astype(exp.backend.dtype, copy=False)
    out = model.predict(x)                         # this replica's rows, in order
    bs = model.batch_size or len(x)
    mine = np.concatenate([model.replica_rows(np.arange(i, min(i + bs, len(x)))) for i in range(0, len(x), bs)]
                          or [np.zeros(0, dtype=int)])
    full = np.zeros((len(x), out.shape[1] if out.ndim == 2 else exp.dataset.nclasses), dtype=np.float64)
    full[mine] = out
    allreduce_sum([full], t.data)
    return full, full.argmax(axis=1)


def prediction_format(path):
    """``'hdf5'`` or ``'csv'`` from the extension of ``path`` (DistnetError otherwise)."""
    fmt = PREDICTION_FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise DistnetError(f"-o {path}: give a file ending in .h5, .hdf5 (HDF5) or .csv")
    return fmt


def write_predictions(path, outputs, labels):
    """Write ``outputs (N, K)`` and ``labels (N,)`` to ``path``: HDF5 datasets ``probabilities``
    and ``labels``, or CSV with a header ``label,p0,...,p{K-1}`` and one row per image.
    Written into a temporary file that replaces ``path`` once complete."""
    from ..datasets.atomic import atomic_target
    fmt = prediction_format(path)
    with atomic_target(path) as tmp:
        if fmt == "hdf5":
            import h5py
            with h5py.File(tmp, "w") as f:
                f["probabilities"] = outputs
                f["labels"] = labels.astype(np.int64)
                f["probabilities"].attrs["meaning"] = "outputs of the model's last layer, one row per image"
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(",".join(["label"] + [f"p{k}" for k in range(outputs.shape[1])]) + "\n")
                for lab, row in zip(labels, outputs):
                    f.write(f"{int(lab)}," + ",".join(f"{v:.9g}" for v in row) + "\n")
