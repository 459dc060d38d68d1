"""The checkpoint bookkeeping of one run: after every epoch the policy decides (best epoch,
early stopping, which checkpoint is due, which ones go), the due checkpoints are written and the
let-go ones removed once the newer one is complete; at the end the final checkpoint and the
best epoch. The training loop (:mod:`distnet.experiments.loop`) makes one call per epoch and one
at the end; the decisions themselves are :class:`~distnet.experiments.policy.CheckpointPolicy`'s.

The idea is Lightning's ``ModelCheckpoint`` callback (``on_train_epoch_end``: monitor, save the
top and the last, remove the others) and nanoGPT's "save when the validation loss improves",
kept as one object so that the loop shows only the loop.
"""
import time

from ..config.builder import config_error, config_where
from ..errors import ConfigError
from .policy import CheckpointPolicy, checkpoint_file


class Checkpointing:
    """The checkpoints of one run of experiment ``exp``: made by :meth:`start` on every rank,
    every rank calls the same methods at the same points (saves are collective)."""

    def __init__(self, exp, policy, log):
        self.exp, self.policy, self.log = exp, policy, log
        #: The last checkpoint written (None: none yet).
        self.written = None

    @classmethod
    def start(cls, exp, splits, history, world_rank, log, default_path=None):
        """The bookkeeping of a run that evaluates ``splits``, after ``history`` (a resumed
        checkpoint's epoch records: replayed, so a resumed run decides as the uninterrupted one
        would); its checkpoints go to :meth:`~distnet.experiments.base.Experiment.checkpoint_target`
        of ``default_path``. ConfigError at the experiment's ``checkpoint`` key on every rank
        (the same experiment, the same splits) for a policy the run cannot follow."""
        try:
            policy = CheckpointPolicy.of(exp, splits, world_rank, exp.checkpoint_target(default_path))
        except ConfigError as e:
            raise config_error(exp, e.bare_message, e.key) from None
        policy.replay(history)
        return cls(exp, policy, log)

    @property
    def stopped(self):
        """Whether the policy stopped training early (in this run or the resumed one's)."""
        return self.policy.stop is not None

    def note_unwritten(self, first_epoch, num_epochs):
        """On world rank 0, a warning (at the checkpoint key's line) when a checkpoint path is set
        but no epoch from ``first_epoch`` to the last writes one: ``at_end: False`` with ``every``
        0 (only at the end, but not at the end), or an ``every`` no epoch reaches."""
        p = self.policy
        if p.world_rank != 0 or not p.path or p.at_end:
            return
        if p.every and any((e + 1) % p.every == 0 for e in range(first_epoch, num_epochs)):
            return
        where = config_where(self.exp, "checkpoint")
        why = (f"every is {p.every} and the run's epochs {first_epoch} .. {num_epochs - 1} reach no multiple of it"
               if p.every else "every is 0 (only at the end)")
        self.log.warning("%scheckpoint at_end is False and %s: this run writes no checkpoint to %s; set at_end: "
                         "True or an every the run reaches (or --no-checkpoint)", f"{where}: " if where else "",
                         why, p.path)

    def epochs(self, first_epoch, num_epochs):
        """The epochs to train: ``first_epoch`` to the last, or none after a resumed checkpoint
        whose policy stopped training early (said once)."""
        if not self.stopped:
            return range(first_epoch, num_epochs)
        if first_epoch < num_epochs:
            self.log.info("the checkpoint stopped training early after epoch %d (%s): no epoch left to train",
                          self.policy.stop["epoch"], self.policy.stop["detail"])
        return range(first_epoch, first_epoch)

    def epoch_done(self, record, last, history):
        """After the epoch of ``record`` (its metrics in it, ``history`` up to it; ``last``: the
        last epoch of ``num_epochs``): the policy's decisions go into the record, the due
        checkpoint and the best epoch's are written (``checkpoint_seconds``), then the ones let
        go removed; an early stop is logged."""
        try:
            self.policy.check_monitor(record)   # every rank: the same record
        except ConfigError as e:
            raise config_error(self.exp, e.bare_message, e.key) from None
        epoch = record["epoch"]
        due = self.policy.epoch_done(record, last)
        if due["checkpoint"]:
            t0 = time.perf_counter()
            self.exp.save_checkpoint(due["checkpoint"], epoch, history)
            record["checkpoint_seconds"] = time.perf_counter() - t0
            self.written = due["checkpoint"]
        if due["best"]:
            self.exp.save_checkpoint(due["best"], epoch, history)
        if due["checkpoint"]:   # only once the newer one is complete (the final one's: finish)
            self.policy.remove(due["remove"])
        if self.stopped and last:   # the patience ran out as the scheduled epochs did: nothing stops early
            self.log.info("epoch %d, the last of num_epochs: %s", epoch, self.policy.stop["detail"])
        elif self.stopped:
            self.log.info("stopping early after epoch %d: %s", epoch, self.policy.stop["detail"])

    def finish(self, history, first_epoch, num_epochs, result, picks_best_epoch=True):
        """After training: the final checkpoint (``at_end``; a resumed run that trained nothing
        rewrites the checkpoint's own last epoch), the removals it completes, and into
        ``result`` (a :class:`~distnet.experiments.loop.RunResult`) the last checkpoint written,
        why training stopped, the files kept and the best epoch (logged)."""
        p = self.policy
        if p.path and p.at_end and history:
            last = history[-1]
            trained = last["epoch"] >= first_epoch
            path = last["checkpoint"] if trained and last.get("checkpoint") else checkpoint_file(p.path, last["epoch"])
            self.exp.save_checkpoint(path, last["epoch"], history)
            self.written = path
            if trained:
                p.remove(last.get("removed", ()))
        result.checkpoint = self.written
        summary = p.summary(num_epochs, history[-1]["epoch"] if history else None)
        result.stop, result.checkpoints = summary["stop"], summary["checkpoints"]
        result.best_checkpoint = summary["best_checkpoint"]
        result.best_epoch = summary["best_epoch"] if picks_best_epoch else None
        if result.best_epoch is None and picks_best_epoch and p.monitor is None and \
                any("test_misclass" in r for r in history):
            self.log.info("no best epoch: the run has no validation split (checkpoint select_on_test: true "
                          "selects on the test split)")
        if result.best_epoch is not None:
            b = result.best_epoch
            self.log.info("best epoch: %d (%s)%s", b["epoch"], best_text(b),
                          f"; its checkpoint: {result.best_checkpoint}" if result.best_checkpoint else "")


def best_text(best):
    """``valid misclass 0.50000%`` (an error rate, as the best-epoch line always said), else
    ``valid_cost 0.12345``."""
    if "misclass" in best:
        return f"{best['split']} misclass {best['misclass']:.5f}%"
    return f"{best['metric']} {best['value']:.5g}"
