"""What a model's output must be for its cost, checked when the model is built and placed
(``distnet check`` and before training), and the targets the cost reads:

* a **per-image** cost (``CrossEntropy``, ``SoftmaxCrossEntropy``, ``SumSquaredDiffs``): the last
  layer gives a vector ``(K,)``, complete on every rank (replicated); the targets are one-hot
  rows ``(N, K)`` of the labels; a regression cost (``MeanSquared``, ``SumSquared``) reads the
  data set's float targets ``(N, T)`` as they are, ``T`` outputs;
* a **per-pixel** cost (:mod:`distnet.ops.pixel_costs`): the last layer gives maps ``(K, *S)``
  over the plane of the input images, tiled like them (each rank its tile of every map); the
  targets are the labels of the pixels ``(N, *S)``, tiled alike
  (docs/design.md#per-pixel-outputs). Its sums run over the whole minibatch, so it runs one
  micro-batch.

A cost that does not fit the output is a ConfigError at the cost's YAML line (the model's
``cost`` key, or its line, where the file names none).
"""
import numpy as np

from ..config.builder import config_error, config_given, config_name, config_where
from ..errors import ConfigError
from ..layers.placement import REPLICATED, SPATIAL

#: The per-pixel costs, named in messages.
PIXEL_COSTS = "PixelSoftmaxCrossEntropy, DiceLoss, PixelBinaryCrossEntropy"
#: The costs of float targets per sample (regression), named in messages.
REGRESSION_COSTS = "MeanSquared or SumSquared"


def cost_error(model, message, key=None):
    """A ConfigError at the cost's YAML line (``key``: one of its keys), or at the model's
    ``cost`` key when the cost has none."""
    if config_where(model.cost) is not None:
        return config_error(model.cost, message, key)
    return config_error(model, message, "cost" if config_where(model, "cost") else None)


def _shape(shape):
    return "x".join(str(int(v)) for v in shape)


def check_output_shape(model, shape):
    """The last layer's global output ``shape`` against the cost (module docstring)."""
    last, cost = model.layers[-1], model.cost
    name = config_name(cost)
    if not model.per_pixel:
        if len(shape) != 1:
            raise last.error(f"the last layer must give a vector (a fully connected layer), but it gives maps "
                             f"{_shape(shape)} and the cost {name} is per image; for an output per pixel give "
                             f"the model a per-pixel cost ({PIXEL_COSTS})")
        return
    plane = tuple(model.input_shape[1:])
    if len(shape) < 2:
        raise cost_error(model, f"{name} is a per-pixel cost: the last layer must give maps (one per class, "
                                f"over the images' {_shape(plane)} pixels), but layer '{last.name}' gives a vector "
                                f"of {shape[0]}; end the model in a ConvLayer, or use a per-image cost")
    if tuple(shape[1:]) != plane:
        raise cost_error(model, f"{name} scores every pixel of the images ({_shape(plane)}, the plane their "
                                f"labels cover), but the last layer '{last.name}' gives maps of {_shape(shape[1:])}; "
                                "keep the size (padding) or bring it back (upsampling)")


def _check_classes(model):
    """The cost's class weights against the last layer's maps (ConfigError at the cost)."""
    try:
        model.cost.check_classes(model.layers[-1].out_shape[0])
    except ConfigError as e:
        raise cost_error(model, f"{config_name(model.cost)}: {e.bare_message}", e.key) from None


def check_output_layout(model, layout):
    """The last layer's output layout kind (``layout``) against the cost: replicated for a
    per-image cost, tiled (spatial) for a per-pixel one, which also runs one micro-batch and
    whose class weights must fit the maps."""
    last = model.layers[-1]
    if not model.per_pixel:
        if layout != REPLICATED:
            raise last.error("the output of the last layer must be complete on every rank (the cost "
                             f"{config_name(model.cost)} is per image); a tiled output needs a per-pixel "
                             f"cost ({PIXEL_COSTS})")
        return
    if layout != SPATIAL:
        raise cost_error(model, f"{config_name(model.cost)} is a per-pixel cost and reads the last layer's maps "
                                f"tiled like the images, but layer '{last.name}' gives an output complete on "
                                "every rank")
    if model.micro_batches > 1:
        raise model.error(f"the per-pixel cost {config_name(model.cost)} normalises over the whole minibatch; "
                          f"it cannot run with micro_batches: {model.micro_batches}", "micro_batches")
    _check_classes(model)


def check_outputs(model, dataset):
    """ConfigError (at the last layer) unless it gives what the cost needs for the classes of
    ``dataset``: one output per class (per image), or the cost's maps (per pixel: one per
    class; PixelBinaryCrossEntropy: one map of two classes), and then the cost's class weights."""
    last = model.layers[-1]
    nout, nclasses = last.out_shape[0], dataset.nclasses
    _check_labels(model, dataset)
    if not model.per_pixel:
        if nout != nclasses:
            what = "targets per sample" if model.cost.regresses else "classes"
            raise last.error(f"gives {nout} outputs but the dataset has {nclasses} {what}", "nout")
        return
    want = model.cost.output_channels(nclasses)
    if nout != want or (want == 1 and nclasses != 2):
        need = f"{want} map(s) for the dataset's {nclasses} classes" if want == nclasses else \
            f"one map and a dataset of 2 classes (it has {nclasses})"
        raise last.error(f"gives {nout} map(s), but the cost {config_name(model.cost)} needs {need}",
                         "nofm" if config_given(last, "nofm") else None)
    _check_classes(model)


def _check_labels(model, dataset):
    """ConfigError (at the cost) unless the labels ``dataset`` gives suit the cost: a label per
    pixel for a per-pixel cost and per image for the others (where the data set says which:
    ``Dataset.per_pixel``), and the data set's ``ignore_label`` the cost's (a pixel the data set
    leaves unlabelled would be a class id out of range for the cost)."""
    name = config_name(model.cost)
    pixels = dataset.per_pixel
    if dataset.regression != model.cost.regresses:
        raise cost_error(model, f"the data set gives float targets per sample, but the cost {name} scores class "
                                f"labels; use {REGRESSION_COSTS}" if dataset.regression else
                         f"the cost {name} regresses float targets per sample, but the data set gives class labels "
                         f"per {'pixel' if pixels else 'image'}; give it data with targets (distnet data convert "
                         "--targets) or a class cost")
    if pixels != model.per_pixel:
        raise cost_error(model, f"the data set gives a label per {'pixel' if pixels else 'image'}, but the cost "
                                f"{name} is per {'pixel' if model.per_pixel else 'image'}"
                                + (f"; use a per-pixel cost ({PIXEL_COSTS})" if pixels else ""))
    ignore = dataset.ignore_label
    if model.per_pixel and ignore is not None and model.cost.ignore_label != ignore:
        raise cost_error(model, f"the data set marks unlabelled pixels with {ignore}, but the cost {name} has "
                                f"ignore_label: {model.cost.ignore_label}; give it ignore_label: {ignore}",
                         "ignore_label")


def one_hot(labels, k, dtype):
    """``(N, k)`` one-hot rows of the class ids ``labels (N,)``."""
    t = np.zeros((len(labels), k), dtype=dtype)
    t[np.arange(len(labels)), labels] = 1
    return t
