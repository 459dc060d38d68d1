"""The training's preprocessing travels with the model: how the training's dataset turned
images as stored into the model's values (image shape, stored type, ``scale``, ``mean`` and
``std`` as applied, ``normalize``'s statistics included, the division by 255 of MNIST and
CIFAR-10, class names (a regression's: the names of its targets, which ``distnet predict``
writes as its column names), the decoding recipe of pictures: :meth:`Dataset.preprocessing
<distnet.datasets.base.Dataset.preprocessing>`) is kept in every checkpoint (``/config``
attribute ``preprocessing``, JSON).

``distnet predict`` and ``evaluate`` compare it with the experiment they are given
(:func:`agreed_preprocessing`): an experiment or data file that disagrees (a ``normalize``
dropped, a ``mean`` added, another file's statistics through ``--set datasets.0.path=...``)
is refused with a line naming both values, unless ``--preprocessing training`` (apply the
training's values to the experiment's images) or ``--preprocessing experiment`` (use the
experiment's, told in a warning) says which to use. :func:`distnet.load` applies the
checkpoint's record alone (:func:`prepare`), so it needs no data file.

A checkpoint written before the record existed is compared with the dataset its own
experiment text builds, where that dataset's files can still be read; else the experiment's
values are used with a warning that they could not be checked.
"""
import json
import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, DataError, DistnetError
from ..log import get_logger

#: What ``--preprocessing`` may say: ``check`` (the default: refuse a disagreement),
#: ``training`` (the checkpoint's values), ``experiment`` (the experiment's).
CHOICES = ("check", "training", "experiment")

#: The compared fields, in the order a message names them: ``(field, what a message calls it)``.
FIELDS = (("image_shape", "image shape (C, H, W)"), ("stored_dtype", "stored type"),
          ("divide_by_255", "pixels divided by 255"), ("scale", "scale"), ("mean", "mean"), ("std", "std"),
          ("class_names", "class names"), ("recipe", "decoding recipe of pictures"))
#: The recipe's keys that decide the pixels (its class names are compared as the data's).
RECIPE_KEYS = ("size", "resize", "channels")


def preprocessing_text(dataset):
    """The JSON a checkpoint keeps of ``dataset``'s preprocessing, or "" when the dataset has
    none (sequences) or its files cannot tell it now (then predict says it cannot check)."""
    try:
        record = dataset.preprocessing()
        return "" if record is None else json.dumps(record)
    except (DistnetError, OSError) as e:
        get_logger().debug("no preprocessing record for the checkpoint: %s", e)
        return ""


def checkpoint_preprocessing(ck):
    """The training's preprocessing dict of checkpoint ``ck``: its record, else (a checkpoint
    written before records) the dataset its experiment text builds, else None."""
    text = (ck.config or {}).get("preprocessing")
    if text:
        try:
            return json.loads(text)
        except ValueError:
            raise DataError(f"checkpoint {ck.path}: its preprocessing record is not JSON (the file is "
                            "damaged)") from None
    resolved = (ck.config or {}).get("resolved")
    if not resolved:
        return None
    from ..config import load_experiment
    from ..data.reading import EveryRankReads
    try:
        exp = load_experiment(ck.config.get("source") or "training experiment", text=resolved)
        # read here, by this rank alone: a read: root / node strategy would fetch its header in a
        # collective that only the rank calling this makes
        exp.dataset.reading = EveryRankReads(compares_copies=False)
        return exp.dataset.preprocessing()
    except (DistnetError, OSError):
        return None


def differences(training, new):
    """``[(what, training's value, new value)]`` of the fields (:data:`FIELDS`) in which the
    preprocessing dicts ``training`` and ``new`` differ (numbers to 1e-12 relative)."""
    out = []
    for field, what in FIELDS:
        a, b = training.get(field), new.get(field)
        if field == "recipe":
            a, b = (None if r is None else {k: r.get(k) for k in RECIPE_KEYS} for r in (a, b))
        if field == "stored_dtype" and None in (a, b):
            continue        # MNIST and CIFAR-10 say it only by dividing by 255
        if not _same(a, b):
            out.append((what, a, b))
    return out


def _same(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return (isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool)
                and not isinstance(b, bool) and math.isclose(a, b, rel_tol=1e-12, abs_tol=0))
    return a == b


def shown(field, value, record):
    """A value for a message: a scale as a fraction where it is one, a ``normalize`` mean or
    std with where it came from."""
    if value is None:
        return "none"
    if field == "scale" and abs(value) < 1 and abs(1 / value - round(1 / value)) < 1e-9:
        return f"{value:.6g} (1/{round(1 / value)})"
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, list) and value and isinstance(value[0], float):
        text = "[" + ", ".join(f"{v:.6g}" for v in value) + "]"
    else:
        text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    if field in ("mean", "std") and record.get("normalize"):
        text += f" (normalize: {record['normalize']} of {', '.join(record.get('files') or []) or 'the data'})"
    return text


def disagreement(diffs, training, new, checkpoint):
    """The one-line account of ``diffs`` (:func:`differences`) between the training's record and
    the experiment's."""
    fields = dict((w, f) for f, w in FIELDS)
    parts = [f"{what}: training {shown(fields[what], a, training)}, experiment {shown(fields[what], b, new)}"
             for what, a, b in diffs]
    return f"the experiment's preprocessing differs from the training's kept in checkpoint {checkpoint}: " \
           + "; ".join(parts)


@dataclass
class Agreed:
    """What :func:`agreed_preprocessing` decided: the preprocessing ``record`` in use (its class
    names and recipe), the ``scaling`` ``(scale, mean, std)`` every rank's dataset is to apply
    (None: its own) and a ``warning`` to show (None: nothing to say)."""

    record: dict
    scaling: tuple = None
    warning: str = None


def agreed_preprocessing(exp, checkpoint, ck, choice="check"):
    """The :class:`Agreed` preprocessing ``distnet predict`` and ``evaluate`` use for experiment
    ``exp`` and the checkpoint ``ck`` (read from ``checkpoint``): the experiment's dataset's,
    checked against the training's (module docstring). ``choice`` (:data:`CHOICES`): ``check``
    refuses a disagreement (ConfigError naming both values and the options); ``training`` takes
    the training's record (class names, recipe) and its scaling, which every rank's dataset
    then applies (:meth:`~distnet.datasets.files.FileDataset.use_scaling`); ``experiment`` keeps
    the experiment's. Both say what differs in the warning. Run it on one rank (it reads the
    data file's header) and hand the result to the others."""
    new = exp.dataset.preprocessing()
    training = checkpoint_preprocessing(ck)
    if training is None:
        return Agreed(new, warning=f"checkpoint {checkpoint} keeps no record of its training's preprocessing "
                                   "(written by an older distnet, and its experiment's data file cannot be read "
                                   "here): the experiment's scaling is used unchecked")
    diffs = differences(training, new)
    if not diffs:
        return Agreed(new)
    text = disagreement(diffs, training, new, checkpoint)
    if choice == "experiment":
        return Agreed(new, warning=f"{text}; using the experiment's (--preprocessing experiment)")
    if choice == "training":
        return Agreed(training, training_scaling(exp.dataset, training, new, checkpoint),
                      f"{text}; using the training's (--preprocessing training)")
    raise ConfigError(f"{text}. Values other than the training's give wrong outputs: give the experiment the "
                      "training's (the run directory's resolved.yaml), or say which to use: --preprocessing "
                      "training (the checkpoint's) or --preprocessing experiment")


def training_scaling(dataset, training, new, checkpoint):
    """The ``(scale, mean, std)`` of the ``training`` record, for ``dataset`` to scale its images
    by (``--preprocessing training``); ConfigError where that cannot be (another image shape, a
    dataset kind whose scaling is fixed); None where the scaling agrees already."""
    if list(training["image_shape"]) != list(new["image_shape"]):
        raise ConfigError(f"checkpoint {checkpoint} was trained on images of {training['image_shape']} (C, H, W) "
                          f"and the experiment's are {new['image_shape']}: no preprocessing option bridges that")
    keys = ("divide_by_255", "scale", "mean", "std")
    if all(_same(training.get(k), new.get(k)) for k in keys):
        return None         # the scaling agrees: class names or the recipe differ
    if training.get("divide_by_255") != new.get("divide_by_255") or not dataset.takes_scaling:
        raise ConfigError(f"--preprocessing training: the experiment's {new['dataset']} scales its images its own "
                          f"way and the training's {training['dataset']} did otherwise; give the experiment the "
                          "training's dataset kind")
    return training["scale"], training["mean"], training["std"]


def check_kind(record, x, where):
    """DataError when images ``x`` store integers and the training's floats, or the other way
    round (one scale cannot suit both)."""
    stored = record.get("stored_dtype")
    if stored is not None and (np.dtype(x.dtype).kind == "f") != (np.dtype(stored).kind == "f"):
        raise DataError(f"{where} store {x.dtype} values but the training images were {stored}: give them stored "
                        "as the training images are (the training's scale, mean and std apply to them)")


def prepare(record, x, dtype):
    """Images ``x`` ``(N, C, H, W)`` as stored in the values the model was trained on, by the
    preprocessing ``record`` alone, as the training's dataset prepares new images
    (:meth:`~distnet.datasets.base.Dataset.prepare_images`: the same operations, so the same
    bits). DataError for images whose type does not suit the training's, or that the scaling
    makes inf or NaN."""
    from ..data.scaling import Scaler
    dtype = np.dtype(dtype)
    check_kind(record, x, "the images")
    if record.get("scale") is None:
        out = np.asarray(x, dtype=dtype)
        out = out / dtype.type(255) if record.get("divide_by_255") and x.dtype.kind in "biu" else out
    else:
        scaler = Scaler(record["scale"], _tuple(record.get("mean")), _tuple(record.get("std")))
        out = scaler.apply_into(x, np.empty(x.shape, dtype))
    bad = ~np.isfinite(out.reshape(len(out), -1)).all(axis=1)
    if bad.any():
        raise DataError(f"image {int(np.argmax(bad))} holds NaN or inf values once scaled as the training "
                        "images were; give finite images")
    return out


def _tuple(v):
    return None if v is None else tuple(float(x) for x in v)
