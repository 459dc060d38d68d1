"""The training loop of every experiment kind: :func:`run_experiment` is the whole life of a
job on one rank, read top to bottom.

1. set up: topology, layer plans, weights (``exp.setup``); the hooks learn the topology;
2. ``resume``: restore the checkpoint and replay its epoch records to the hooks, so a resumed
   run's records start at epoch 0 as an uninterrupted run's;
3. load this rank's data; the model starts (first epoch, shuffle state); a run from scratch
   runs the model's ``before_training`` (GB's pretraining, its records to ``hooks.pretrain``);
4. the epochs: one ``fit_epoch`` each (before every step: fault injection and ``hooks.batch``),
   every ``eval_every`` epochs the metrics of the evaluated splits, then the checkpoint policy
   (:mod:`distnet.experiments.policy`: the best epoch, early stopping, which checkpoint is due,
   which ones go), its checkpoints, then ``hooks.epoch``;
5. the end: the final checkpoint (``checkpoint.at_end``), the best epoch, the experiment's final
   metrics, the :class:`RunResult` with timings to ``hooks.finished``.

The model answers a small protocol: ``start(resume_state) -> first epoch``,
``before_training(train) -> records``, ``fit_epoch(train, epoch, on_batch, read_ahead) -> mean
cost`` and ``split_metrics(split) -> {name: value}`` (``misclass`` for the image models; token /
sequence accuracies for seq2seq). The experiment (:class:`~distnet.experiments.base.Experiment`)
says what differs between kinds: its start lines, the splits it evaluates, its epoch line and
its final metrics. Every rank runs the same calls in the same order; only rank 0 logs.
"""
import time
from dataclasses import dataclass, field

from ..config.builder import config_error
from ..errors import ConfigError
from ..faults import fault_hook
from ..log import get_logger
from .evaluate import written_on
from .policy import CheckpointPolicy, checkpoint_file


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
        error rates (``distnet run``'s watchdog stops here: they are not watched)."""

    def finished(self, result):
        """After the final error rates, with the :class:`RunResult`."""


def run_experiment(exp, topology=None, hooks=None, resume=None):
    """Train ``exp``'s model (and evaluate it); returns a :class:`RunResult`, identical on every
    rank. Collective over the run's world. Arguments: see
    :meth:`~distnet.experiments.base.Experiment.run`."""
    hooks = hooks or RunHooks()
    model, log, clock = exp.model, get_logger(), time.perf_counter
    t_start = clock()
    t = exp.setup(topology)
    timings = {"setup": clock() - t_start}
    exp.log_start(log)
    hooks.started(exp, t)
    result = RunResult(grid=tuple(t.grid), size=t.size)

    history, resume_state = [], None
    if resume:
        t0 = clock()
        ck = exp.restore(resume)
        timings["restore"] = clock() - t0
        history = [r for r in ck.history if r.get("epoch", -1) <= ck.epoch]
        resume_state = ck.resume
        for r in history:  # the run's records start at epoch 0, as an uninterrupted run's
            hooks.epoch(dict(r, from_checkpoint=True))
        log.info("resumed from %s: epoch %d done (written on %s); %s", resume, ck.epoch,
                 written_on(ck), epochs_left(ck.epoch, model.num_epochs))

    t0 = clock()
    data = exp.load_data()
    timings["data"] = clock() - t0
    hooks.loaded({split: len(data[split][0]) for split in data})
    train = data["train"]
    first = result.start_epoch = model.start(resume_state)
    exp.note_start(data, first, log)
    eval_splits = [s for s in exp.eval_splits() if s in data]
    try:
        policy = CheckpointPolicy.of(exp, eval_splits, t.rank)
    except ConfigError as e:   # every rank: the same experiment, the same splits
        raise config_error(exp, e.bare_message, e.key) from None
    policy.replay(history)   # a resumed run decides as the uninterrupted one would
    fault = fault_hook(t.rank)

    def on_batch(epoch, batch, nbatches, running_cost):
        if fault is not None:
            fault(epoch, batch, nbatches)
        hooks.batch(epoch, batch, nbatches, running_cost)

    read_ahead = exp.read_ahead(train)   # streamed data prefetches the model's minibatches
    t0 = clock()
    try:
        if resume_state is None:   # checkpoints close supervised epochs, which pretraining preceded
            for record in model.before_training(train):
                hooks.pretrain(record)
        if policy.stop is not None and first < model.num_epochs:
            log.info("the checkpoint stopped training early after epoch %d (%s): no epoch left to train",
                     policy.stop["epoch"], policy.stop["detail"])
        for epoch in range(first, model.num_epochs if policy.stop is None else first):
            t1 = clock()
            exp.set_epoch(train, epoch)     # augmented images draw per epoch
            cost = model.fit_epoch(train, epoch, on_batch, read_ahead)
            exp.set_epoch(train, None)      # the metrics measure the images as stored
            record = {"epoch": epoch, "cost": cost, "seconds": clock() - t1}
            if eval_splits and exp.evaluates(epoch):
                t1 = clock()
                for split in eval_splits:
                    for name, value in exp.split_metrics(data[split]).items():
                        record[f"{split}_{name}"] = value
                record["eval_seconds"] = clock() - t1
            exp.log_epoch(record, log)
            history.append(record)
            try:
                policy.check_monitor(record)   # every rank: the same record
            except ConfigError as e:
                raise config_error(exp, e.bare_message, e.key) from None
            due = policy.epoch_done(record, epoch == model.num_epochs - 1)
            if due["checkpoint"]:
                t1 = clock()
                exp.save_checkpoint(due["checkpoint"], epoch, history)
                record["checkpoint_seconds"] = clock() - t1
                result.checkpoint = due["checkpoint"]
            if due["best"]:
                exp.save_checkpoint(due["best"], epoch, history)
            if due["checkpoint"]:   # only once the newer one is complete (the final one's: below)
                policy.remove(due["remove"])
            if policy.stop is not None:
                log.info("stopping early after epoch %d: %s", epoch, policy.stop["detail"])
            hooks.epoch(record)
            if policy.stop is not None:
                break
    finally:
        if read_ahead is not None:
            read_ahead([])   # forget what was scheduled
    hooks.trained()
    timings["train"] = clock() - t0

    result.epoch_costs = [r["cost"] for r in history]
    if exp.checkpoint_path and exp.checkpoint_at_end and history:
        last = history[-1]
        trained = last["epoch"] >= first   # else the checkpoint's own last epoch, rewritten here
        path = last["checkpoint"] if trained and last.get("checkpoint") else checkpoint_file(
            exp.checkpoint_path, last["epoch"])
        exp.save_checkpoint(path, last["epoch"], history)
        result.checkpoint = path
        if trained:
            policy.remove(last.get("removed", ()))
    summary = policy.summary(model.num_epochs, history[-1]["epoch"] if history else None)
    result.stop, result.checkpoints = summary["stop"], summary["checkpoints"]
    result.best_checkpoint = summary["best_checkpoint"]
    result.best_epoch = summary["best_epoch"] if exp.picks_best_epoch else None
    if result.best_epoch is None and exp.picks_best_epoch and policy.monitor is None and \
            any("test_misclass" in r for r in history):
        log.info("no best epoch: the run has no validation split (checkpoint select_on_test: true "
                 "selects on the test split)")
    if result.best_epoch is not None:
        b = result.best_epoch
        log.info("best epoch: %d (%s)%s", b["epoch"], best_text(b),
                 f"; its checkpoint: {result.best_checkpoint}" if result.best_checkpoint else "")
    t0 = clock()
    exp.final_metrics(data, history, result, log)
    timings["eval"] = clock() - t0
    timings["total"] = clock() - t_start
    result.timings = timings
    hooks.finished(result)
    return result


def epochs_left(done, num_epochs):
    """The resume line's end: the epochs left after epoch ``done`` of ``num_epochs``."""
    if done + 1 >= num_epochs:
        return f"no epoch left to train (num_epochs {num_epochs}): evaluating the checkpoint's model"
    return f"training epochs {done + 1} to {num_epochs - 1}"


def best_text(best):
    """``valid misclass 0.50000%`` (an error rate, as the best-epoch line always said), else
    ``valid_cost 0.12345``."""
    if "misclass" in best:
        return f"{best['split']} misclass {best['misclass']:.5f}%"
    return f"{best['metric']} {best['value']:.5g}"
