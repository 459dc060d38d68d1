"""The checkpoint bookkeeping of one run: after every epoch the policy decides (best epoch,
early stopping, which checkpoint is due, which ones go), the due checkpoints are written and the
let-go ones removed once the newer one is complete; inside an epoch the step checkpoints
(``checkpoint: {every_steps: N, every_minutes: T}``) and the one a preemption signal asks for;
at the end the final checkpoint and the best epoch. The training loop
(:mod:`distnet.experiments.loop`) makes one call per epoch, one before every step and one at
the end; the decisions themselves are :class:`~distnet.experiments.policy.CheckpointPolicy`'s.

A checkpoint inside an epoch holds its *position* (the epoch, the steps of it done, their
summed cost) and the shuffle state at the epoch's start: a resumed run draws the epoch's order
again and goes on at the next step, with the same momentum, schedules, augmentation draws and
policy state, so its costs are those of the uninterrupted run. The ranks agree when to write
one without waiting for each other (:class:`~distnet.comm.agree.StepFlags`): a preemption
signal that reached some rank, a clock that says ``every_minutes`` have passed, a background
save that every rank has written (``checkpoint: {async: true}``, sharded checkpoints).

The idea is Lightning's ``ModelCheckpoint`` callback (``on_train_epoch_end``: monitor, save the
top and the last, remove the others; ``every_n_train_steps``, ``train_time_interval``) and
nanoGPT's "save when the validation loss improves", kept as one object so that the loop shows
only the loop.
"""
import time

from ..comm.phase import phase
from ..comm.signals import Preempted, preemption_requested
from ..config.builder import config_error, config_where
from ..errors import ConfigError
from ..models.checkpoint import shuffle_state_of
from .policy import CheckpointPolicy, checkpoint_file

#: The flags the ranks agree on before every step: a preemption signal (its number), step
#: checkpoint due by the clock, a background save still writing.
SIGNAL, MINUTES, WRITING = range(3)


class Checkpointing:
    """The checkpoints of one run of experiment ``exp``: made by :meth:`start` on every rank,
    every rank calls the same methods at the same points (saves are collective)."""

    def __init__(self, exp, policy, log, history=()):
        self.exp, self.policy, self.log = exp, policy, log
        #: The last checkpoint completely written (None: none yet).
        self.written = None
        self.history = history              # the run's epoch records (the loop's list)
        self.every_steps = exp.checkpoint_every_steps
        self.every_minutes = exp.checkpoint_every_minutes
        self.background = bool(exp.checkpoint_async and exp.checkpoint_sharded)
        self.flags = None                   # StepFlags (start)
        self.pending = None                 # (PendingSave, paths to remove after it, its path)
        self.pending_since = 0              # self.exchanges when it began
        self.exchanges = 0
        self.epoch_state = None             # the shuffle state at the epoch's start
        self.midway = None                  # the checkpoint written inside the current epoch
        self.saved_at, self.saved_step = time.monotonic(), None

    @classmethod
    def start(cls, exp, splits, history, world_rank, log, default_path=None):
        """The bookkeeping of a run that evaluates ``splits``, after ``history`` (a resumed
        checkpoint's epoch records: replayed, so a resumed run decides as the uninterrupted one
        would); its checkpoints go to :meth:`~distnet.experiments.base.Experiment.checkpoint_target`
        of ``default_path``. ConfigError at the experiment's ``checkpoint`` key on every rank
        (the same experiment, the same splits) for a policy the run cannot follow. A sharded
        checkpoint's folder is proven visible and writable to every rank here, before the first
        epoch (collective over the run's world)."""
        try:
            policy = CheckpointPolicy.of(exp, splits, world_rank, exp.checkpoint_target(default_path))
        except ConfigError as e:
            raise config_error(exp, e.bare_message, e.key) from None
        policy.replay(history)
        self = cls(exp, policy, log, history)
        if policy.path:
            from ..comm.agree import StepFlags
            if exp.checkpoint_sharded:
                from ..models.shard_check import check_shared_folder
                check_shared_folder(checkpoint_file(policy.path, 0), exp.topology.world)
            self.flags = StepFlags(exp.topology.world, 3)
        return self

    @property
    def stopped(self):
        """Whether the policy stopped training early (in this run or the resumed one's)."""
        return self.policy.stop is not None

    def note_unwritten(self, first_epoch, num_epochs):
        """On world rank 0, a warning (at the checkpoint key's line) when a checkpoint path is set
        but no epoch from ``first_epoch`` to the last writes one: ``at_end: False`` with ``every``
        0 (only at the end, but not at the end), or an ``every`` no epoch reaches."""
        p = self.policy
        if p.world_rank != 0 or not p.path or p.at_end or self.every_steps or self.every_minutes:
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

    # -- inside an epoch ----------------------------------------------------------------------

    def epoch_begins(self):
        """Before an epoch's first step (and before the model draws its order): the shuffle state
        a checkpoint inside it stores."""
        self.epoch_state = shuffle_state_of(self.exp.model)
        self.midway = None

    def before_step(self, epoch, batch, running_cost):
        """Before step ``batch`` of ``epoch`` (``running_cost``: the summed cost of the epoch's
        steps before it): a background save every rank has written is published; a step
        checkpoint is written when one is due (``every_steps``, ``every_minutes``, a preemption
        signal); after a signal's checkpoint every rank raises :class:`Preempted`. Collective
        over the run's world (one nonblocking reduction of three integers)."""
        if self.flags is None:
            return
        self.exchanges += 1
        writing = self.pending is not None and not self.pending[0].written()
        agreed = self.flags.exchange([preemption_requested() or 0, self._minutes_due(), int(writing)])
        if self.pending is not None and not agreed[WRITING] and self.exchanges - self.flags.lag > self.pending_since:
            self._finish_pending()
        steps = self.exp.model.steps
        due = agreed[SIGNAL] or agreed[MINUTES] or (
            self.every_steps and steps and steps % self.every_steps == 0 and steps != self.saved_step)
        if due:
            self._save_inside(epoch, batch, running_cost, final=bool(agreed[SIGNAL]))
        if agreed[SIGNAL]:
            self.flags.close()      # nothing left in flight when the ranks leave
            raise Preempted(agreed[SIGNAL], self.written, f"in epoch {epoch} after {batch} step(s)"
                            if batch else f"at the start of epoch {epoch}")

    def _minutes_due(self):
        return int(bool(self.every_minutes) and time.monotonic() - self.saved_at >= 60 * self.every_minutes)

    def _save_inside(self, epoch, batch, running_cost, final):
        """The checkpoint of the first ``batch`` steps of ``epoch`` (``final``: the run ends
        after it, so it is written in the foreground)."""
        t = self.exp.topology
        with phase("checkpoint"):
            self._finish_pending()
            costs = t.data.allgather(float(running_cost)) if t.ndata > 1 else [float(running_cost)]
            path = checkpoint_file(self.policy.path, epoch)
            position = {"epoch": epoch, "batch": batch, "costs": costs}
            pending = self.exp.save_checkpoint(path, epoch - 1, self.history, position, self.epoch_state,
                                               background=self.background and not final)
            self._saved(path, pending, self.policy.keep(path))
        self.midway = path
        self.log.debug("checkpoint %s: epoch %d, %d step(s) of it", path, epoch, batch)

    def _saved(self, path, pending, removals):
        """A save of ``path`` done (``pending``: under way in the background): the let-go
        ``removals`` go once it is complete."""
        self.saved_at, self.saved_step = time.monotonic(), self.exp.model.steps
        if pending is not None:
            self.pending, self.pending_since = (pending, removals, path), self.exchanges
            return
        self.written = path
        self.policy.remove(removals)

    def _finish_pending(self):
        """Publish the background save under way, if any (collective), and remove what it
        replaces."""
        if self.pending is None:
            return
        pending, removals, path = self.pending
        self.pending = None
        self.exp.finish_save(pending)
        self.written = path
        self.policy.remove(removals)

    # -- the end of an epoch ------------------------------------------------------------------

    def epoch_done(self, record, last, history):
        """After the epoch of ``record`` (its metrics in it, ``history`` up to it; ``last``: the
        last epoch of ``num_epochs``): the policy's decisions go into the record, the due
        checkpoint and the best epoch's are written (``checkpoint_seconds``), then the ones let
        go removed; an early stop is logged. Returns a :class:`Preempted` to raise after the
        record is told (a preemption signal reached some rank: its checkpoint is written), else None."""
        try:
            self.policy.check_monitor(record)   # every rank: the same record
        except ConfigError as e:
            raise config_error(self.exp, e.bare_message, e.key) from None
        epoch = record["epoch"]
        due = self.policy.epoch_done(record, last)
        if self.midway and self.midway != record.get("checkpoint"):
            record["midway_checkpoint"] = self.midway
        with phase("checkpoint"):
            if due["checkpoint"]:
                t0 = time.perf_counter()
                self._finish_pending()
                pending = self.exp.save_checkpoint(due["checkpoint"], epoch, history, background=self.background)
                record["checkpoint_seconds"] = time.perf_counter() - t0
                self._saved(due["checkpoint"], pending, due["remove"])  # let-go ones once it is complete
            if due["best"]:
                self._finish_pending()
                self.exp.save_checkpoint(due["best"], epoch, history)
        if self.stopped and last:   # the patience ran out as the scheduled epochs did: nothing stops early
            self.log.info("epoch %d, the last of num_epochs: %s", epoch, self.policy.stop["detail"])
        elif self.stopped:
            self.log.info("stopping early after epoch %d: %s", epoch, self.policy.stop["detail"])
        return None if last or self.stopped else self._preempted_after(record, history)

    def _preempted_after(self, record, history):
        """After a (not the last) epoch: when a preemption signal reached some rank (agreed at
        once: one small blocking reduction per epoch), the epoch's checkpoint (the one just
        written, else a new one, named in ``record``) and the :class:`Preempted` to raise."""
        if self.flags is None:
            return None
        signum = self.flags.now([preemption_requested() or 0, 0, 0])[SIGNAL]
        if not signum:
            return None
        epoch = record["epoch"]
        with phase("checkpoint"):
            self._finish_pending()
            if record.get("checkpoint") != self.written or self.written is None:
                path = checkpoint_file(self.policy.path, epoch)
                self.exp.save_checkpoint(path, epoch, history)
                record["checkpoint"] = path
                self._saved(path, None, self.policy.keep(path))
            self.flags.close()
        return Preempted(signum, self.written, f"after epoch {epoch}")

    def finish(self, history, first_epoch, num_epochs, result, picks_best_epoch=True):
        """After training: the final checkpoint (``at_end``; a resumed run that trained nothing
        rewrites the checkpoint's own last epoch), the removals it completes, and into
        ``result`` (a :class:`~distnet.experiments.loop.RunResult`) the last checkpoint written,
        why training stopped, the files kept and the best epoch (logged)."""
        p = self.policy
        with phase("final checkpoint"):
            self._finish_pending()
            if self.flags is not None:
                self.flags.close()
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
