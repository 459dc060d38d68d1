"""distnet from Python: load a trained model and predict, in a script or a notebook.

    from distnet.api import load
    model = load("runs/pics")                    # a run directory: its best checkpoint, else its last
    result = model.predict(["new_pics/bars/000.png", "photo.jpg"])   # or a folder, or an array
    result.classes, result.probabilities         # class names per image, (N, K) probabilities

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
    argmax), ``probabilities`` ``(N, K)`` (column ``k``: label ``k``), ``class_names`` (K names,
    or None where the training data named none), ``files`` (the pictures' names, None for an
    array), ``true_classes`` (per picture its class folder, None where it is in none; None for
    an array), ``skipped`` ``[(file,
    reason)]`` (``skip_bad``) and ``converted`` (files whose channel count was converted)."""

    labels: np.ndarray
    probabilities: np.ndarray
    class_names: list = None
    files: list = None
    true_classes: list = None
    skipped: list = field(default_factory=list)
    converted: list = field(default_factory=list)

    def __len__(self):
        return len(self.labels)

    @property
    def classes(self):
        """The predicted class of every image: its name, or its label as text without names."""
        return [self.class_names[k] if self.class_names else str(k) for k in self.labels.tolist()]

    def rows(self):
        """One dict per image: ``file`` (pictures), ``label``, ``class``, ``true_class`` (a
        folder per class) and the probability of every class by name (``p_<name>``)."""
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
    epoch it closed, 0-based), ``class_names``, ``image_shape`` ``(C, H, W)``, ``preprocessing``
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
        self.class_names = self.preprocessing.get("class_names")
        self.experiment.setup(Topology.serial(), image_shape=self.image_shape)
        self.epoch = self.experiment.restore(self.checkpoint).epoch

    def __repr__(self):
        names = ", ".join(self.class_names) if self.class_names else f"{self.nclasses} classes"
        return (f"<distnet model {self.checkpoint}: epoch {self.epoch}, images "
                f"{'x'.join(map(str, self.image_shape))}, classes {names}>")

    @property
    def nclasses(self):
        return int(self.experiment.model.layers[-1].out_shape[0])

    def predict(self, images, skip_bad=False, convert_channels=False):
        """The :class:`Predictions` of ``images``: picture files or folders (a path, or a list of
        them; decoded by the training's recipe, a folder per class giving ``true_classes``), or
        a numpy array ``(N, C, H, W)`` (one image: ``(C, H, W)``) stored as the training images
        were (uint8 pixels for a converted image folder). Pictures that cannot be used
        (unreadable, another channel count, another size where the training resized none) are
        one DataError naming them all, or left out with ``skip_bad`` (listed in ``skipped``);
        ``convert_channels`` converts another channel count (listed in ``converted``)."""
        from .experiments.evaluate import predict_images
        from .experiments.preprocessing import prepare
        files = truth = decoded = None
        if isinstance(images, np.ndarray):
            x = self._array(images)
        else:
            x, files, truth, decoded = self._pictures(images, skip_bad, convert_channels)
        probabilities, labels = predict_images(self.experiment, lambda tile: x,
                                               lambda a, dtype: prepare(self.preprocessing, a, dtype))
        return Predictions(labels, probabilities, self.class_names, files, truth,
                           decoded.skipped if decoded else [], decoded.converted if decoded else [])

    def _array(self, x):
        """An array of images checked against the model's image shape."""
        if x.ndim == 3:
            x = x[None]
        if x.ndim != 4 or tuple(x.shape[1:]) != self.image_shape:
            hint = ("; it looks like (N, H, W, C): give x.transpose(0, 3, 1, 2)"
                    if x.ndim == 4 and tuple(x.shape[1:]) == self.image_shape[1:] + self.image_shape[:1] else "")
            raise DataError(f"images of shape {tuple(x.shape)}, but the model takes (N, "
                            f"{', '.join(map(str, self.image_shape))}) (N, C, H, W){hint}")
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
