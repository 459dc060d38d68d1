"""Using a trained checkpoint: error rates of its data splits (``distnet evaluate``) and class
probabilities of new images (``distnet predict``), on any grid or number of ranks.

Both build the experiment as ``distnet run`` would (its topology from the world, its layers
planned on it), load the checkpoint with :func:`~distnet.models.sharded.restore_any`
(every weight is stored in its global layout, so a checkpoint written on one grid loads on any
other) and run the model forward only. Every rank calls these functions; the results are the
same on every rank (rank 0 prints and writes).
"""
from dataclasses import dataclass, field

import numpy as np

from ..backend import under_seterr_handling
from ..errors import ConfigError, TrainingError
from .pixel_metrics import segmentation_lines
from .regression_metrics import own_rows, regression_line


@dataclass
class Evaluation:
    """What :func:`evaluate_checkpoint` measured."""

    #: ``{split: misclassification rate in percent}`` in the dataset's order (train, test).
    rates: dict = field(default_factory=dict)
    #: ``{split: number of images}``.
    counts: dict = field(default_factory=dict)
    #: ``{split: {"cost", "misclass", "top{k}_misclass", "class_accuracy", "precision", "recall",
    #: "f1", "macro_precision", "macro_recall", "macro_f1", "confusion"}}``
    #: (:func:`~distnet.experiments.metrics.split_metrics`, from the counts of every rank).
    metrics: dict = field(default_factory=dict)
    #: The class names the data gives (label 0 first), else None.
    class_names: list = None
    epoch: int = None                 # the last epoch the checkpoint had trained (0-based)
    written_on: str = ""              # "6 rank(s), grid 1x3, data 2" of the checkpoint
    size: int = 1
    grid: tuple = (1, 1)
    evaluated_on: str = ""            # the same for this run's topology
    warning: str = None               # how the experiment's preprocessing differs from the training's


def restore_trained(exp, checkpoint, preprocessing="check", topology=None):
    """Set up ``exp`` on ``topology`` (default: from the world), load ``checkpoint`` and agree on
    the preprocessing with the training's (:func:`~.preprocessing.agreed_preprocessing`,
    ``preprocessing`` one of its choices: found on world rank 0, applied on every rank).
    Returns ``(Checkpoint, Agreed)``. Collective."""
    from ..comm.root_read import read_on_root
    from .preprocessing import agreed_preprocessing
    exp.setup(topology)
    ck = exp.restore(checkpoint)
    agreed = read_on_root(exp.topology.world, lambda: agreed_preprocessing(exp, checkpoint, ck, preprocessing))
    if agreed.scaling is not None:
        exp.dataset.use_scaling(*agreed.scaling)
    return ck, agreed


def layout_text(size, grid, data=1, pipe=1):
    """``"8 rank(s), grid 1x2, data 2, pipe 2"`` (data and pipe only when > 1), as the run
    header names a layout; ``grid`` None or empty: ``?``."""
    text = f"{size} rank(s), grid {'x'.join(str(int(g)) for g in grid or ()) or '?'}"
    return text + "".join(f", {k} {int(v)}" for k, v in (("data", data), ("pipe", pipe)) if int(v) > 1)


def written_on(ck):
    """The layout that wrote checkpoint ``ck`` (:func:`layout_text`)."""
    m = ck.meta   # checkpoints before the pipe key: without it
    return layout_text(m.get("size", "?"), m.get("grid"), m.get("data", 1), m.get("pipe", 1))


@under_seterr_handling
def evaluate_checkpoint(exp, checkpoint, topology=None, preprocessing="check"):
    """Misclassification rates of every split of ``exp``'s dataset (train and test) with the
    weights of ``checkpoint``, the images scaled as the training's were (:func:`restore_trained`;
    ``preprocessing``: ``check``, ``training`` or ``experiment``). Collective over the run's
    world; returns an :class:`Evaluation` (the same on every rank)."""
    ck, agreed = restore_trained(exp, checkpoint, preprocessing, topology)
    t = exp.topology
    data = exp.load_data()
    result = Evaluation(epoch=ck.epoch, written_on=written_on(ck), size=t.size, grid=tuple(t.grid),
                        evaluated_on=layout_text(t.size, t.grid, t.ndata, t.npipe), warning=agreed.warning)
    result.class_names = agreed.record.get("class_names")
    for split, (x, y) in data.items():
        m = result.metrics[split] = exp.split_metrics((x, y))
        # a model that does not classify measures one thing (an Autoencoder: its reconstruction)
        result.rates[split] = m["misclass"] if "misclass" in m else next(iter(m.values()))
        result.counts[split] = len(y)
    return result


def evaluation_lines(result, label=("misclass rate", "%"), max_confusion=20):
    """What ``distnet evaluate`` prints per split of an :class:`Evaluation`: the error rate
    line (``label``: the model's name and unit of it), then for a classifier the cost and top-k
    error rate, a table per class (images, precision, recall, F1, their macro averages) and the
    confusion matrix (rows: true class, columns: predicted), both by class name, when there are
    at most ``max_confusion`` classes (else the macro averages alone)."""
    lines = []
    for split, m in result.metrics.items():
        if "mse" in m:      # a regression: its errors, no rate
            lines.append(f"{regression_line(split, m, result.class_names)} ({result.counts[split]} samples)")
            continue
        lines.append(f"{split} set {label[0]}: {result.rates[split]:.5f}{label[1]} ({result.counts[split]} images)")
        if "confusion" not in m:
            continue
        extra = [f"cost {m['cost']:.5f}"] + [f"{k.replace('_misclass', '').replace('top', 'top-')} misclass "
                                              f"{v:.5f}%" for k, v in m.items() if k.startswith("top")]
        lines.append(f"{split} set {', '.join(extra)}")
        conf = m["confusion"]
        names = result.class_names or [str(c) for c in range(len(conf))]
        if "miou" in m:   # a per-pixel model: the overlaps of its pixels
            lines += segmentation_lines(split, m, names)
        if len(conf) <= max_confusion:
            lines.append(f"{split} set per class (recall: the share of the class's images classified right):")
            lines += class_table(names, m)
            lines.append(f"{split} set confusion matrix (rows: true class, columns: predicted class):")
            lines += confusion_lines(names, conf)
        else:
            lines.append(f"{split} set macro precision {_pct(m.get('macro_precision'))}, recall "
                         f"{_pct(m.get('macro_recall'))}, F1 {_pct(m.get('macro_f1'))}; {len(conf)} classes: per "
                         "class and the confusion matrix in --json")
    return lines


def _pct(v):
    return "-" if v is None or v != v else f"{v:.2f}%"


def class_table(names, m):
    """The per-class lines of a split's metrics ``m`` (``confusion``, ``precision``, ``recall``,
    ``f1`` and their macro averages), one row per class named by ``names``."""
    conf = np.asarray(m["confusion"])
    rows = [[str(n), str(int(c))] + [_pct(m[k][i]) if k in m else "-" for k in ("precision", "recall", "f1")]
            for i, (n, c) in enumerate(zip(names, conf.sum(axis=1)))]
    rows.append(["macro average", str(int(conf.sum()))] + [_pct(m.get(f"macro_{k}"))
                                                           for k in ("precision", "recall", "f1")])
    head = ["class", "images", "precision", "recall", "F1"]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    return ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in [head] + rows]


def confusion_lines(names, conf):
    """A confusion matrix ``conf`` (rows: true class, columns: predicted) with the class
    ``names`` heading its rows and columns."""
    names = [str(n) for n in names]
    first = max(len(n) for n in names)
    widths = [max(len(n), *(len(str(row[j])) for row in conf)) for j, n in enumerate(names)]
    head = "  " + " " * first + " " + " ".join(n.rjust(w) for n, w in zip(names, widths))
    return [head.rstrip()] + ["  " + n.ljust(first) + " " + " ".join(str(v).rjust(w) for v, w in zip(row, widths))
                              for n, row in zip(names, conf)]


# ---------------------------------------------------------------------------------------------
# predict
# ---------------------------------------------------------------------------------------------

@under_seterr_handling
def predict_images(exp, read_images, prepare=None):
    """The model's class probabilities for new images, after :func:`restore_trained`:
    ``(probabilities (N, K), labels (N,))``, labels the argmax; the last layer's outputs, through
    the softmax where the cost takes logits (:meth:`~distnet.ops.costs.Cost.probabilities`).
    ``read_images(tile)`` returns this rank's part of the images as stored, ``(N, C, h, w)``
    (``tile``: a :class:`~distnet.geometry.Box` of the plane, None for whole images), e.g.
    :meth:`distnet.data.reading.Reading.read_images` of a file; ``prepare(x, dtype)`` turns them
    into the values the model trained on (default: the experiment's dataset's
    ``prepare_images``: its ``scale``, ``mean`` and ``std``, or MNIST's division by 255). The
    result is the same on every rank (data replicas each compute their rows; one Allreduce over
    ``Topology.data`` puts them together). Collective over the run's world."""
    if exp.model.per_pixel:   # every rank alike, before any work
        raise ConfigError("predict gives one row of class probabilities per image, but this model scores "
                          "every pixel (a per-pixel cost); distnet predict -o OUT_DIR/ writes its masks")
    if exp.model.cost.regresses:
        raise ConfigError("this model regresses float targets (a MeanSquared or SumSquared cost): it has no "
                          "class probabilities (predict_values gives its predicted targets)")
    full = model_outputs(exp, read_images, prepare, "probabilities")
    full = exp.model.cost.probabilities(full)   # logits (SoftmaxCrossEntropy) become probabilities
    return full, full.argmax(axis=1)


@under_seterr_handling
def predict_values(exp, read_images, prepare=None):
    """A regression's predicted targets for new samples, after :func:`restore_trained`:
    ``values (N, T)`` float64, the last layer's outputs (column ``t``: target ``t``, named by
    the training data's target names). ``read_images`` and ``prepare`` as for
    :func:`predict_images`. The same on every rank; collective over the run's world."""
    return model_outputs(exp, read_images, prepare, "values")


def model_outputs(exp, read_images, prepare, what):
    """The last layer's outputs ``(N, K)`` float64 of the images ``read_images`` gives
    (:func:`predict_images`), the same on every rank: each data replica computes its rows, one
    Allreduce over ``Topology.data`` puts them together. TrainingError on every rank where an
    output is not finite (``what``: what cannot be written then). Collective over the world."""
    from ..comm.abort import run_collectively
    from ..comm.reduce import allreduce_sum
    t, model = exp.topology, exp.model
    cut = exp.dist_flag and any(int(g) > 1 for g in t.grid)     # one tile: whole images, no dataset asked
    tile = exp.dataset.rank_tile(t.grid, t.coords) if cut else None
    x = run_collectively(read_images, t.world, tile)
    x = (prepare or exp.dataset.prepare_images)(x, exp.backend.dtype)   # scale, mean, std as trained
    out = model.predict(x)                         # this replica's rows, in order
    full = np.zeros((len(x), out.shape[1] if out.ndim == 2 else model.layers[-1].out_shape[0]), dtype=np.float64)
    full[own_rows(model, len(x))] = out
    allreduce_sum([full], t.data)
    bad = int(np.count_nonzero(~np.isfinite(full).all(axis=1)))
    if bad:   # every rank agrees: the outputs are replicated and summed over the replicas
        raise TrainingError(f"the model's outputs are not finite (NaN or inf) for {bad} of {len(full)} images, "
                            f"so no {what} can be written; check the checkpoint's weights and the "
                            "images' scale (the training's scale, mean and std apply to them)")
    return full
