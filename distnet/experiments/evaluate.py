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
from ..errors import TrainingError


@dataclass
class Evaluation:
    """What :func:`evaluate_checkpoint` measured."""

    #: ``{split: misclassification rate in percent}`` in the dataset's order (train, test).
    rates: dict = field(default_factory=dict)
    #: ``{split: number of images}``.
    counts: dict = field(default_factory=dict)
    #: ``{split: {"cost", "misclass", "top{k}_misclass", "class_accuracy", "confusion"}}``
    #: (:func:`~distnet.experiments.metrics.split_metrics`, from the counts of every rank).
    metrics: dict = field(default_factory=dict)
    #: The class names the data gives (label 0 first), else None.
    class_names: list = None
    epoch: int = None                 # the last epoch the checkpoint had trained (0-based)
    written_on: str = ""              # "6 rank(s), grid 1x3, data 2" of the checkpoint
    size: int = 1
    grid: tuple = (1, 1)
    evaluated_on: str = ""            # the same for this run's topology


def _restore(exp, checkpoint, topology=None):
    """Set up ``exp`` on ``topology`` (default: from the world) and load ``checkpoint``;
    returns the :class:`~distnet.models.checkpoint.Checkpoint`. Collective."""
    exp.setup(topology)
    return exp.restore(checkpoint)


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
def evaluate_checkpoint(exp, checkpoint, topology=None):
    """Misclassification rates of every split of ``exp``'s dataset (train and test) with the
    weights of ``checkpoint``. Collective over the run's world; returns an :class:`Evaluation`
    (the same on every rank)."""
    ck = _restore(exp, checkpoint, topology)
    t = exp.topology
    data = exp.load_data()
    result = Evaluation(epoch=ck.epoch, written_on=written_on(ck), size=t.size, grid=tuple(t.grid),
                        evaluated_on=layout_text(t.size, t.grid, t.ndata, t.npipe))
    result.class_names = exp.dataset.class_names()
    for split, (x, y) in data.items():
        m = result.metrics[split] = exp.split_metrics((x, y))
        # a model that does not classify measures one thing (an Autoencoder: its reconstruction)
        result.rates[split] = m["misclass"] if "misclass" in m else next(iter(m.values()))
        result.counts[split] = len(y)
    return result


def evaluation_lines(result, label=("misclass rate", "%"), max_confusion=20):
    """What ``distnet evaluate`` prints per split of an :class:`Evaluation`: the error rate
    line (``label``: the model's name and unit of it), then for a classifier cost and top-k
    error rate, the accuracy per class, and the confusion matrix (rows: true class, columns:
    predicted) when there are at most ``max_confusion`` classes."""
    lines = []
    for split, m in result.metrics.items():
        lines.append(f"{split} set {label[0]}: {result.rates[split]:.5f}{label[1]} ({result.counts[split]} images)")
        if "confusion" not in m:
            continue
        extra = [f"cost {m['cost']:.5f}"] + [f"{k.replace('_misclass', '').replace('top', 'top-')} misclass "
                                              f"{v:.5f}%" for k, v in m.items() if k.startswith("top")]
        lines.append(f"{split} set {', '.join(extra)}")
        names = result.class_names or [str(c) for c in range(len(m["class_accuracy"]))]
        acc = ", ".join(f"{n} {'-' if a is None else f'{a:.2f}%'}" for n, a in zip(names, m["class_accuracy"]))
        lines.append(f"{split} set accuracy per class: {acc}")
        conf = m["confusion"]
        if len(conf) <= max_confusion:
            width = max(len(str(v)) for row in conf for v in row)
            lines.append(f"{split} set confusion matrix (rows: true class, columns: predicted class):")
            lines += ["  " + " ".join(str(v).rjust(width) for v in row) for row in conf]
        else:
            lines.append(f"{split} set confusion matrix: {len(conf)} classes, see --json")
    return lines


# ---------------------------------------------------------------------------------------------
# predict
# ---------------------------------------------------------------------------------------------

@under_seterr_handling
def predict_checkpoint(exp, checkpoint, read_images, topology=None):
    """The model's class probabilities for new images with the weights of ``checkpoint``:
    ``(probabilities (N, K), labels (N,))``, labels the argmax; the last layer's outputs, through
    the softmax where the cost takes logits (:meth:`~distnet.ops.costs.Cost.probabilities`). ``read_images(tile)`` returns this rank's part of the
    images as stored, ``(N, C, h, w)`` (``tile``: a :class:`~distnet.geometry.Box` of the plane,
    None for whole images), e.g. :meth:`distnet.data.reading.Reading.read_images` of a file; the
    experiment's dataset turns them into the values it trained on (``prepare_images``: its
    ``scale``, ``mean`` and ``std``, or MNIST's division by 255). The result is
    the same on every rank (data replicas each compute their rows; one Allreduce over
    ``Topology.data`` puts them together). Collective over the run's world."""
    from ..comm.abort import run_collectively
    from ..comm.reduce import allreduce_sum
    _restore(exp, checkpoint, topology)
    t, model = exp.topology, exp.model
    tile = exp.dataset.rank_tile(t.grid, t.coords) if exp.dist_flag else None
    x = run_collectively(read_images, t.world, tile)
    x = exp.dataset.prepare_images(x, exp.backend.dtype)   # as the dataset's own: scale, mean, std
    out = model.predict(x)                         # this replica's rows, in order
    bs = model.batch_size or len(x)
    mine = np.concatenate([model.replica_rows(np.arange(i, min(i + bs, len(x)))) for i in range(0, len(x), bs)]
                          or [np.zeros(0, dtype=int)])
    full = np.zeros((len(x), out.shape[1] if out.ndim == 2 else exp.dataset.nclasses), dtype=np.float64)
    full[mine] = out
    allreduce_sum([full], t.data)
    bad = int(np.count_nonzero(~np.isfinite(full).all(axis=1)))
    if bad:   # every rank agrees: the outputs are replicated and summed over the replicas
        raise TrainingError(f"the model's outputs are not finite (NaN or inf) for {bad} of {len(full)} images, "
                            "so no probabilities can be written; check the checkpoint's weights and the "
                            "images' scale (the dataset's scale, mean and std apply to them)")
    full = model.cost.probabilities(full)   # logits (SoftmaxCrossEntropy) become probabilities
    return full, full.argmax(axis=1)
