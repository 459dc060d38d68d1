"""The training loop of every experiment kind: :func:`run_experiment` is the whole life of a
job on one rank, read top to bottom.

1. set up: topology, layer plans, weights (``exp.setup``); the hooks learn the topology;
2. ``resume``: restore the checkpoint and replay its epoch records to the hooks, so a resumed
   run's records start at epoch 0 as an uninterrupted run's (a checkpoint written inside an
   epoch continues that epoch at its next step);
3. load this rank's data; the model starts (first epoch, shuffle state); a run from scratch
   runs the model's ``before_training`` (GB's pretraining, its records to ``hooks.pretrain``);
4. the epochs: one ``fit_epoch`` each (before every step: the step checkpoints, fault
   injection and ``hooks.batch``), every ``eval_every`` epochs the metrics of the evaluated
   splits, then the checkpoint bookkeeping
   (:class:`~distnet.experiments.checkpointing.Checkpointing`: the policy's decisions, the
   checkpoints written and removed), then ``hooks.epoch``; a preemption signal ends the run
   after its checkpoint (:class:`~distnet.comm.signals.Preempted`);
5. the end: the final checkpoint and the best epoch (the bookkeeping's ``finish``), the
   experiment's final metrics, the :class:`RunResult` with timings to ``hooks.finished``.

The model answers a small protocol: ``start(resume_state) -> first epoch``,
``before_training(train) -> records``, ``fit_epoch(train, epoch, on_batch, read_ahead[, start])
-> mean cost`` and ``split_metrics(split) -> {name: value}`` (``misclass`` for the image models; token /
sequence accuracies for seq2seq). The experiment (:class:`~distnet.experiments.base.Experiment`)
says what differs between kinds: its start lines, the splits it evaluates, its epoch line and
its final metrics. Every rank runs the same calls in the same order; only rank 0 logs.
"""
import time
from dataclasses import dataclass, field

from ..comm.phase import enter, tick
from ..faults import fault_hook
from ..log import get_logger
from .checkpointing import Checkpointing
from .evaluate import written_on


@dataclass
class RunResult:
    """What a run measured: per-epoch mean training cost (from epoch 0, also for a resumed run:
    the earlier epochs come from the checkpoint) and the final error rates (percent)."""

    epoch_costs: list = field(default_factory=list)
    train_misclass: float = None
    test_misclass: float = None
    #: Final error rate of the validation split (percent; None without one).
    valid_misclass: float = None
    #: Images in each split whose error rate was measured: ``{"train": n, "test": n, ...}``
    #: (what one misclassified image is worth: ``100 / n`` points).
    split_images: dict = field(default_factory=dict)
    #: ``{"epoch", "split", "metric", "value"}`` (+ ``misclass`` when that is the metric) of the
    #: best evaluated epoch by the checkpoint policy's ``monitor`` (default ``valid_misclass``);
    #: None when no epoch was evaluated or the run has no split to select on (no validation
    #: split, and no ``select_on_test``).
    best_epoch: dict = None
    grid: tuple = (1, 1)
    size: int = 1
    #: First epoch trained by this run (> 0 when resumed).
    start_epoch: int = 0
    #: Path of the last checkpoint written (None if none).
    checkpoint: str = None
    #: Wall seconds: setup, restore, data, train, eval, total.
    timings: dict = field(default_factory=dict)
    #: Why training stopped: ``{"reason": "num_epochs" | "early_stopping", "epoch", "detail"}``.
    stop: dict = None
    #: The checkpoint files the run leaves (those ``keep_last`` kept, then the best one).
    checkpoints: list = field(default_factory=list)
    #: The best epoch's checkpoint (``keep_best``), None without one.
    best_checkpoint: str = None
    #: A per-pixel model's final overlaps, ``{"test_miou": percent, "test_class_iou": [...], ...}``
    #: (:data:`~distnet.experiments.pixel_metrics.SEGMENTATION` of each split); empty otherwise.
    final_metrics: dict = field(default_factory=dict)


class RunHooks:
    """What a run reports while it runs (no-ops here; override what you need). Every rank calls
    every hook at the same points."""

    def started(self, experiment, topology):
        """After setup: the topology is known, the weights are drawn."""

    def batch(self, epoch, batch, nbatches, running_cost):
        """Before every training step; ``running_cost``: the summed cost of the epoch's
        batches before this one (0.0 before the first)."""

    def loaded(self, sizes):
        """After the data is read: ``{split: images}``."""

    def epoch(self, record):
        """After every epoch: ``{"epoch", "cost", "seconds"}`` (+ ``test_misclass`` /
        ``train_misclass`` when evaluated, ``checkpoint`` when one was written)."""

    def pretrain(self, record):
        """After each epoch of GB's pretraining (before the first epoch record), per pretrained
        layer: ``{"pretrain": layer name, "pretrain_epoch", "cost", "reconstruction",
        "sparsity"}``."""

    def trained(self):
        """After the last training step and its epoch's end, before the final checkpoint and
        error rates."""

    def finished(self, result):
        """After the final error rates, with the :class:`RunResult`."""


def run_experiment(exp, topology=None, hooks=None, resume=None, default_checkpoint=None):
    """Train ``exp``'s model (and evaluate it); returns a :class:`RunResult`, identical on every
    rank. Collective over the run's world. Arguments: see
    :meth:`~distnet.experiments.base.Experiment.run`. Each part runs in its phase
    (:mod:`distnet.comm.phase`: the watchdog's and the failure records' words)."""
    hooks = hooks or RunHooks()
    model, log, clock = exp.model, get_logger(), time.perf_counter
    t_start = clock()
    enter("start-up")
    t = exp.setup(topology)
    timings = {"setup": clock() - t_start}
    exp.log_start(log)
    hooks.started(exp, t)
    result = RunResult(grid=tuple(t.grid), size=t.size)
    history, resume_state = _restore(exp, resume, hooks, timings, log)

    t0 = clock()
    enter("data loading")
    data = exp.load_data()
    timings["data"] = clock() - t0
    hooks.loaded({split: len(data[split][0]) for split in data})
    first = result.start_epoch = model.start(resume_state)
    exp.note_start(data, log)
    eval_splits = [s for s in exp.eval_splits() if s in data]
    checkpoints = Checkpointing.start(exp, eval_splits, history, t.rank, log, default_checkpoint)
    checkpoints.note_unwritten(first, model.num_epochs)

    t0 = clock()
    start = resume_state.start(t.ndata, t.data_index) if resume_state is not None else None
    _train(exp, data, eval_splits, first, start, checkpoints, hooks, resume_state is None, t.rank, log)
    hooks.trained()
    timings["train"] = clock() - t0

    result.epoch_costs = [r["cost"] for r in history]
    checkpoints.finish(history, first, model.num_epochs, result, exp.picks_best_epoch)
    t0 = clock()
    enter("final evaluation")
    exp.final_metrics(data, history, result, log)
    timings["eval"] = clock() - t0
    timings["total"] = clock() - t_start
    result.timings = timings
    hooks.finished(result)
    return result


def _restore(exp, resume, hooks, timings, log):
    """``(history, resume state)``: a resumed checkpoint's epoch records (replayed to the hooks,
    so the run's records start at epoch 0 as an uninterrupted run's) and the state that
    continues after it; ``([], None)`` for a run from scratch."""
    if not resume:
        return [], None
    t0 = time.perf_counter()
    enter("restore")
    ck = exp.restore(resume)
    timings["restore"] = time.perf_counter() - t0
    history = [r for r in ck.history if r.get("epoch", -1) <= ck.epoch]
    for r in history:
        hooks.epoch(dict(r, from_checkpoint=True))
    at = ck.position
    log.info("resumed from %s: %s (written on %s); %s", resume, ck.describe_done(), written_on(ck),
             epochs_left(ck.epoch, exp.model.num_epochs) if at is None else f"training epochs {at['epoch']} to "
             f"{exp.model.num_epochs - 1}")
    return history, ck.resume


def _train(exp, data, eval_splits, first, start, checkpoints, hooks, pretrain, rank, log):
    """The epochs from ``first`` (``start``: the rest of the first one, whose first batches a
    checkpoint holds; after GB's pretraining on a run from scratch, ``pretrain``): each trained
    and evaluated, its record logged and kept in the checkpoints' history, the checkpoints told
    (before every step too), the hooks told; until the last epoch, an early stop, or a
    preemption signal's checkpoint (:class:`~distnet.comm.signals.Preempted` raised)."""
    model, train, history = exp.model, data["train"], checkpoints.history
    fault = fault_hook(rank)

    def on_batch(epoch, batch, nbatches, running_cost):
        if fault is not None:
            fault(epoch, batch, nbatches)
        hooks.batch(epoch, batch, nbatches, running_cost)

    read_ahead = exp.read_ahead(train)   # streamed data prefetches the model's minibatches
    try:
        if pretrain:   # checkpoints close supervised epochs, which pretraining preceded
            enter("pretraining")
            for record in model.before_training(train):
                hooks.pretrain(record)
        for epoch in checkpoints.epochs(first, model.num_epochs):
            record = _epoch(exp, data, eval_splits, epoch, on_batch, read_ahead, checkpoints,
                            start if epoch == first else None)
            exp.log_epoch(record, log)
            history.append(record)
            preempted = checkpoints.epoch_done(record, epoch == model.num_epochs - 1, history)
            hooks.epoch(record)
            if preempted is not None:
                raise preempted
            if checkpoints.stopped:
                break
    finally:
        if read_ahead is not None:
            read_ahead([])   # forget what was scheduled


def _epoch(exp, data, eval_splits, epoch, on_batch, read_ahead, checkpoints, start=None):
    """One epoch's training steps (``start``: from a step inside it, :meth:`~distnet.models.
    checkpoint.ResumeState.start`), then (every ``eval_every``) the metrics of the evaluated
    splits: its record ``{"epoch", "cost", "seconds", "<split>_<metric>", "eval_seconds"}``."""
    clock, train = time.perf_counter, data["train"]
    t0 = clock()
    enter("training")
    exp.set_epoch(train, epoch)     # augmented images draw per epoch
    checkpoints.epoch_begins()
    more = {} if start is None else {"start": start}   # a model of a plugin may not take it

    def step(model_epoch, batch, nbatches, running_cost):   # a DBN counts its layers' epochs from 0
        checkpoints.before_step(epoch, batch, running_cost)
        on_batch(model_epoch, batch, nbatches, running_cost)
    cost = exp.model.fit_epoch(train, epoch, step, read_ahead, **more)
    exp.set_epoch(train, None)      # the metrics measure the images as stored
    record = {"epoch": epoch, "cost": cost, "seconds": clock() - t0}
    if eval_splits and exp.evaluates(epoch):
        t0 = clock()
        enter("evaluation")
        for split in eval_splits:
            for name, value in exp.split_metrics(data[split]).items():
                record[f"{split}_{name}"] = value
            tick()
        record["eval_seconds"] = clock() - t0
    return record


def epochs_left(done, num_epochs):
    """The resume line's end: the epochs left after epoch ``done`` of ``num_epochs``."""
    if done + 1 >= num_epochs:
        return f"no epoch left to train (num_epochs {num_epochs}): evaluating the checkpoint's model"
    return f"training epochs {done + 1} to {num_epochs - 1}"
