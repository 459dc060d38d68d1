"""Per-pixel labels in memory, for the tests of the per-pixel costs and metrics (until the data
sets ship masks): ``PixelShapes``, images ``(N, 1, H, W)`` whose pixels each belong to one of
``classes`` classes (a rectangle of each class on class 0, the image brighter by class, plus
noise), labels ``(N, H, W)`` int64 cut by the same tile as the images, a few pixels per image
labelled ``ignore_label``; and the YAML of small per-pixel models that read it."""
import numpy as np

from distnet.config.registry import register_classes
from distnet.config.types import NonNegativeInt, PositiveInt
from distnet.datasets.base import Dataset
from distnet.data.sources import whole


def pixel_images(n, shape=(12, 10), classes=3, seed=0, ignore_label=None):
    """``(x (n, 1, H, W) float64, labels (n, H, W) int64)`` (module docstring)."""
    rng = np.random.RandomState(seed)
    H, W = shape
    labels = np.zeros((n, H, W), dtype=np.int64)
    for i in range(n):
        for c in range(1, classes):
            y0, x0 = rng.randint(0, H - 2), rng.randint(0, W - 2)
            labels[i, y0:y0 + rng.randint(2, H // 2 + 2), x0:x0 + rng.randint(2, W // 2 + 2)] = c
    x = labels[:, None] / max(classes - 1, 1) + 0.3 * rng.standard_normal((n, 1, H, W))
    if ignore_label is not None:
        labels[rng.uniform(size=labels.shape) < 0.05] = ignore_label
    return x, labels


class PixelShapes(Dataset):
    """Keys: ``n_train``, ``n_test``, ``n_valid`` (images per split; no validation split when 0),
    ``height``, ``width``, ``classes``, ``seed``, ``ignore_label``, and the data set keys
    ``dist_flag`` / ``dist_mode``."""

    config_types = {**Dataset.config_types, "n_train": PositiveInt, "n_test": PositiveInt,
                    "n_valid": NonNegativeInt, "height": PositiveInt, "width": PositiveInt,
                    "classes": PositiveInt, "seed": NonNegativeInt, "ignore_label": int}
    repo_required = False
    scale_255 = False
    per_pixel = True

    def __init__(self, n_train=16, n_test=6, n_valid=0, height=12, width=10, classes=3, seed=0,
                 ignore_label=None, **common):
        super().__init__(**common)
        self.sizes = {"train": n_train, "valid": n_valid, "test": n_test}
        self.image_shape, self.nclasses = (1, height, width), classes
        self.seed, self.ignore_label = seed, ignore_label

    def split_names(self):
        return tuple(s for s, n in self.sizes.items() if n)

    def class_names(self):
        return ["background"] + [f"shape{c}" for c in range(1, self.nclasses)]

    def source_files(self):
        return []

    def fingerprint(self):
        return None

    def check(self):
        pass

    def check_same_data(self, comm):
        pass

    def load(self, tile=None, seed=0, dtype=np.float32, rank=0, size=1, grid=None):
        tile = tile if tile is not None else whole(self.plane)
        cut = tuple(slice(lo, hi) for lo, hi in tile.spans)
        out = {}
        for k, (split, n) in enumerate(self.sizes.items()):
            if n:
                x, labels = pixel_images(n, self.plane, self.nclasses, self.seed + 7 * k, self.ignore_label)
                out[split] = (np.ascontiguousarray(x[(slice(None), slice(None)) + cut], dtype=dtype),
                              np.ascontiguousarray(labels[(slice(None),) + cut]))
        return out


register_classes(PixelShapes, kind="dataset")

#: A per-pixel model on PixelShapes (float64): conv, conv to one map per class, logits.
PIXEL_CNN = """!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: !obj:distnet.backends.Numpy64 {rng_seed: 5},
  datasets: [!obj:PixelShapes {n_train: 20, n_test: 6, n_valid: 4, classes: 3, ignore_label: 255}],
  eval_every: 1,
  model: !obj:distnet.models.Convnet {
    num_epochs: 3, batch_size: 6, learning_rate: 0.5, momentum: {type: constant, coef: 0.5},
    cost: COST,
    layers: [
      !obj:distnet.layers.ConvLayer {name: conv, nofm: 4, fshape: 3, padding: 1,
                                     weight_init: {type: normal, scale: 0.3}},
      !obj:distnet.layers.ConvLayer {name: scores, nofm: NOUT, fshape: 3, padding: 1,
                                     weight_init: {type: normal, scale: 0.3},
                                     activation: !obj:distnet.activations.ACT {}},
    ],
  },
}
"""

#: The cost, output maps and last activation of each per-pixel cost in :data:`PIXEL_CNN`.
COSTS = {
    "ce": ("!obj:distnet.costs.PixelSoftmaxCrossEntropy {ignore_label: 255, class_weights: [0.5, 1.0, 2.0]}",
           3, "Identity"),
    "dice": ("!obj:distnet.costs.DiceLoss {ignore_label: 255, class_weights: [1.0, 2.0, 0.5]}", 3, "Identity"),
    "dice_batch": ("!obj:distnet.costs.DiceLoss {ignore_label: 255, batch: true, include_background: false}",
                   3, "Identity"),
    "bce": ("!obj:distnet.costs.PixelBinaryCrossEntropy {ignore_label: 255}", 1, "Logistic"),
}


def pixel_experiment(cost="ce", dist=False, **keys):
    """The YAML text of :data:`PIXEL_CNN` with the cost ``cost`` (a key of :data:`COSTS`);
    ``dist``: a distributed run (``dist_flag``); ``keys``: text replacements."""
    text, nout, act = COSTS[cost]
    out = PIXEL_CNN.replace("COST", text).replace("NOUT", str(nout)).replace("ACT", act)
    if cost == "bce":
        out = out.replace("classes: 3", "classes: 2")
    if dist:
        out = out.replace("FitPredictErrorExperiment {", "FitPredictErrorExperiment { dist_flag: True,", 1)
        out = out.replace("!obj:PixelShapes {", "!obj:PixelShapes {dist_flag: True, ")
    for old, new in keys.items():
        out = out.replace(old, new)
    return out
