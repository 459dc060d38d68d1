"""distnet from Python: load a trained model and predict, in a script or a notebook.

    from distnet.api import load
    model = load("runs/pics")                    # a run directory: its best checkpoint, else its last
    result = model.predict(["new_pics/bars/000.png", "photo.jpg"])   # or a folder, or an array
    result.classes, result.probabilities         # class names per image, (N, K) probabilities

A regression (a ``MeanSquared`` or ``SumSquared`` cost) gives ``values`` ``(N, T)`` float64, the
predicted targets named by ``target_names``, what ``distnet predict`` writes for it.

A per-pixel model (segmentation, 2-D or 3-D) gives the masks ``labels`` ``(N, H, W)`` (volumes:
``(N, D, H, W)``) uint8 and ``probabilities`` ``(N, K, H, W)`` float32, what ``distnet predict -o
OUT_DIR/ --probabilities OUT.h5`` writes.

:func:`load` takes what ``distnet predict --checkpoint`` takes (a checkpoint file, a sharded
checkpoint folder, a run directory, ``RUN_DIR:best`` / ``RUN_DIR:last``), builds the model of the
experiment the checkpoint keeps, on one process, and loads the weights. :meth:`Model.predict`
applies the training's preprocessing that the checkpoint keeps (its recipe decodes pictures,
its ``scale``, ``mean``, ``std`` or ``normalize`` statistics scale them: the rules of ``distnet
predict``, with no data file needed) and returns a :class:`Predictions`. docs/python.md has the
whole page.
"""
import os
from dataclasses import dataclass, field

import numpy as np

from .errors import DataError


def load(checkpoint, cpu=False):
    """The trained :class:`Model` of ``checkpoint`` (a path: a checkpoint file or folder, a run
    directory: its best checkpoint where the run kept one, else its last; ``RUN_DIR:best`` /
    ``RUN_DIR:last`` choose). ``cpu``: build a GPU-trained experiment on the CPU backend.
    Raises a :class:`~distnet.errors.DistnetError` naming the problem (no such checkpoint, one
    without its experiment or preprocessing)."""
    from .experiments.run_checkpoints import choose_checkpoint
    chosen = choose_checkpoint(os.fspath(checkpoint), "best")
    return Model(chosen, cpu)


@dataclass
class Predictions:
    """What :meth:`Model.predict` gives, one row per image in order: ``labels`` ``(N,)`` (the
    argmax), ``probabilities`` ``(N, K)`` (column ``k``: label ``k``; a per-pixel model's:
    ``labels`` ``(N, *plane)`` uint8, ``probabilities`` ``(N, K, *plane)`` float32, ``plane``
    ``(H, W)`` or a volume's ``(D, H, W)``), ``class_names`` (K names,
    or None where the training data named none), ``files`` (the pictures' names, None for an
    array), ``true_classes`` (per picture its class folder, None where it is in none; None for
    an array), ``skipped`` ``[(file,
    reason)]`` (``skip_bad``) and ``converted`` (files whose channel count was converted). A
    regression's: ``values`` ``(N, T)`` float64 (column ``t``: target ``t``) and ``target_names``
    (T names, or None), its ``labels``, ``probabilities`` and ``class_names`` None."""

    labels: np.ndarray
    probabilities: np.ndarray
    class_names: list = None
    files: list = None
    true_classes: list = None
    skipped: list = field(default_factory=list)
    converted: list = field(default_factory=list)
    values: np.ndarray = None
    target_names: list = None

    def __len__(self):
        return len(self.labels if self.values is None else self.values)

    @property
    def classes(self):
        """The predicted class of every image: its name, or its label as text without names
        (a classifier's; a per-pixel model's ``labels`` index ``class_names`` per pixel)."""
        if self.values is not None:
            raise ValueError("a regression model's predictions are values per target (values, named by "
                             "target_names), not classes")
        if self.labels.ndim > 1:
            raise ValueError("a per-pixel model's predictions have a class per pixel (labels), not per image")
        return [self.class_names[k] if self.class_names else str(k) for k in self.labels.tolist()]

    def rows(self):
        """One dict per image: ``file`` (pictures), ``label``, ``class``, ``true_class`` (a
        folder per class) and the probability of every class by name (``p_<name>``); a
        regression's: ``file`` and the value of every target by name (``t0``, ... without names)."""
        if self.values is not None:
            names = self.target_names or [f"t{k}" for k in range(self.values.shape[1])]
            return [dict({"file": self.files[i]} if self.files is not None else {}, **dict(zip(names, v)))
                    for i, v in enumerate(self.values.tolist())]
        names = self.class_names or [str(k) for k in range(self.probabilities.shape[1])]
        out = []
        for i, (label, p) in enumerate(zip(self.labels.tolist(), self.probabilities.tolist())):
            row = {"file": self.files[i]} if self.files is not None else {}
            row.update(label=label, **{"class": self.classes[i]})
            if self.true_classes is not None and any(t is not None for t in self.true_classes):
                row["true_class"] = self.true_classes[i]
            row.update({f"p_{n}": v for n, v in zip(names, p)})
            out.append(row)
        return out


class Model:
    """A trained model (made by :func:`load`): the experiment the checkpoint keeps, built on one
    process with the checkpoint's weights. Attributes: ``checkpoint`` (the file), ``epoch`` (the
    epoch it closed, 0-based), ``class_names`` (None for a regression), ``target_names`` (a
    regression's, else None), ``image_shape`` ``(C, H, W)``, ``preprocessing``
    (the training's, a dict: :mod:`distnet.experiments.preprocessing`), ``experiment`` (the
    built experiment object) and ``chosen`` (how a run directory was resolved)."""

    def __init__(self, chosen, cpu=False):
        from .comm.topology import Topology
        from .config import load_experiment
        from .errors import CheckpointError
        from .experiments.preprocessing import checkpoint_preprocessing
        from .models.sharded import read_state
        self.chosen, self.checkpoint = chosen, chosen.path
        state = read_state(self.checkpoint)
        text = (state.config or {}).get("resolved")
        if not text:
            raise CheckpointError(f"checkpoint {self.checkpoint} keeps no experiment text (not written by distnet "
                                  "run?): distnet.load builds the model from it")
        self.preprocessing = checkpoint_preprocessing(state)
        if self.preprocessing is None:
            raise DataError(f"checkpoint {self.checkpoint} keeps no record of its training's preprocessing (an older "
                            "distnet wrote it) and its training data cannot be read here: run distnet predict with "
                            "the experiment and its data file instead")
        self.experiment = load_experiment(state.config.get("source") or "experiment", text=text, gpu_as_cpu=cpu)
        self.image_shape = tuple(int(d) for d in self.preprocessing["image_shape"])
        self.experiment.setup(Topology.serial(len(self.image_shape) - 1), image_shape=self.image_shape)
        self.epoch = self.experiment.restore(self.checkpoint).epoch
        # a regression's data names its targets where a classifier's names its classes
        names = self.preprocessing.get("class_names")
        self.regression = bool(self.experiment.model.cost.regresses)
        self.class_names, self.target_names = (None, names) if self.regression else (names, None)

    def __repr__(self):
        names = self.target_names if self.regression else self.class_names
        kind = "targets" if self.regression else "classes"
        names = ", ".join(names) if names else f"{self.nclasses} {kind}"
        what = "volumes" if len(self.image_shape) == 4 else "images"
        return (f"<distnet model {self.checkpoint}: epoch {self.epoch}, {what} "
                f"{'x'.join(map(str, self.image_shape))}, {kind} {names}>")

    @property
    def nclasses(self):
        return int(self.experiment.model.layers[-1].out_shape[0])

    def predict(self, images, skip_bad=False, convert_channels=False):
        """The :class:`Predictions` of ``images``: picture files or folders (a path, or a list of
        them; decoded by the training's recipe, a folder per class giving ``true_classes``), or
        a numpy array ``(N, C, H, W)`` (one image: ``(C, H, W)``) stored as the training images
        were (uint8 pixels for a converted image folder). A 3-D model takes volumes: files
        (``.npy``, NIfTI, TIFF stacks, as ``distnet predict --data``) or folders of them, or an
        array ``(N, C, D, H, W)`` (one volume: ``(C, D, H, W)``). Pictures that cannot be used
        (unreadable, another channel count, another size where the training resized none) are
        one DataError naming them all, or left out with ``skip_bad`` (listed in ``skipped``);
        ``convert_channels`` converts another channel count (listed in ``converted``). A
        regression's :class:`Predictions` hold its ``values`` instead."""
        from .experiments.evaluate import predict_images, predict_values
        from .experiments.preprocessing import prepare
        files = truth = decoded = None
        if isinstance(images, np.ndarray):
            x = self._array(images)
        elif len(self.image_shape) == 4:
            x, files, decoded = self._volumes(images, skip_bad)
        else:
            x, files, truth, decoded = self._pictures(images, skip_bad, convert_channels)

        def scaled(a, dtype):
            return prepare(self.preprocessing, a, dtype)
        notes = (decoded.skipped, decoded.converted) if decoded else ([], [])
        if self.regression:
            values = predict_values(self.experiment, lambda tile: x, scaled)
            return Predictions(None, None, None, files, None, *notes, values=values, target_names=self.target_names)
        if self.experiment.model.per_pixel:
            probabilities, labels = self._maps(x, scaled)
        else:
            probabilities, labels = predict_images(self.experiment, lambda tile: x, scaled)
        return Predictions(labels, probabilities, self.class_names, files, truth, *notes)

    def _maps(self, x, scaled):
        """``(probabilities (N, K, *plane) float32, labels (N, *plane) uint8)`` of a per-pixel
        model: what ``distnet predict`` writes, from the same code (one tile per image here)."""
        from .experiments.predict_masks import predict_masks
        plane = self.image_shape[1:]
        labels = np.empty((len(x),) + plane, np.uint8)
        probabilities = np.empty((len(x), self.nclasses) + plane, np.float32)

        def receive(key, arrays):
            labels[key[0]], probabilities[key[0]] = arrays
        predict_masks(self.experiment, lambda tile: x, receive, True, scaled)
        return probabilities, labels

    def _volumes(self, paths, skip_bad):
        """``(x, names, Volumes)`` of volume files and folders (or an HDF5 file of volumes), as
        ``distnet predict --data`` reads them."""
        from .convert.predict_volumes import Volumes
        from .data.sources import whole
        paths = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
        volumes = Volumes(paths)
        volumes.decode(None, None, self.image_shape, skip_bad)
        src = volumes.source(self.image_shape)
        try:
            return np.asarray(src.read(np.arange(src.shape[0]), whole(self.image_shape[1:]))), volumes.names, volumes
        finally:
            src.close()

    def _array(self, x):
        """An array of images (volumes) checked against the model's image shape."""
        nd = len(self.image_shape) + 1
        if x.ndim == nd - 1:
            x = x[None]
        if x.ndim != nd or tuple(x.shape[1:]) != self.image_shape:
            hint = ("; it looks like (N, H, W, C): give x.transpose(0, 3, 1, 2)"
                    if x.ndim == 4 == nd and tuple(x.shape[1:]) == self.image_shape[1:] + self.image_shape[:1]
                    else "")
            what, axes = ("volumes", "C, D, H, W") if nd == 5 else ("images", "C, H, W")
            raise DataError(f"{what} of shape {tuple(x.shape)}, but the model takes (N, "
                            f"{', '.join(map(str, self.image_shape))}) (N, {axes}){hint}")
        if x.dtype.kind not in "biuf":
            raise DataError(f"images must be numbers, got dtype {x.dtype}")
        return x

    def _pictures(self, paths, skip_bad, convert_channels):
        """``(x, names, true classes, Decoded)`` of picture files and folders, decoded by the
        training's recipe as ``distnet predict`` decodes them."""
        from .convert.folders import list_pictures
        from .convert.pictures import choose_recipe, decode_for_model
        paths = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
        pictures = list_pictures(paths, what="picture")
        where = ", ".join(self.preprocessing.get("files") or []) or f"checkpoint {self.checkpoint}"
        recipe, where, _ = choose_recipe(None, self.preprocessing.get("recipe"), where, self.image_shape)
        decoded = decode_for_model([p for p, _, _ in pictures], recipe, where, skip_bad, convert_channels,
                                   hints=("skip_bad=True", "convert_channels=True"))
        names = [pictures[i][1] for i in decoded.kept]
        truth = [pictures[i][2] for i in decoded.kept]
        return decoded.x, names, truth, decoded
