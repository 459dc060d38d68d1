"""The hooks ``distnet run`` gives the training (:class:`~distnet.experiments.loop.RunHooks`'s
calls): the run directory, the ``--metrics`` file and the progress bar on rank 0, the watchdog's
training steps on every rank."""
from .job import collectively


class CliHooks:
    """The run's hooks for the command line: run directory, --metrics file, progress bar, all
    on rank 0 (the other ranks get no files and no bar); the watchdog on every rank.

    watchdog : a started :class:`~distnet.comm.watchdog.Watchdog` (``distnet run`` starts it as
        soon as every rank has the experiment), or its seconds (one is started with the run)."""

    def __init__(self, record, metrics, bar, watchdog=None, tensorboard=None):
        self.record, self.bar = record, bar
        self.metrics = metrics          # a MetricsFile (rank 0) or None
        self.tensorboard = tensorboard  # a TensorBoardLog (rank 0) or None
        self.watchdog_seconds = watchdog if isinstance(watchdog, (int, float)) else None
        self.watchdog = None if self.watchdog_seconds is not None else watchdog
        self.world = None               # the world communicator of a multi-rank run (started)

    def started(self, experiment, topology):
        """After setup: rank 0 records the topology and every rank's host in run.json (a failure
        ends every rank; collective over the world), the bar learns the epochs."""
        from ..comm.launcher import host_name
        self.world = topology.world if topology.size > 1 else None
        if self.watchdog_seconds:
            from ..comm.watchdog import Watchdog
            self.watchdog = Watchdog(self.world, self.watchdog_seconds).start()
        hosts = self.world.gather(host_name(), root=0) if self.world is not None else [host_name()]

        def record():           # rank 0 writes run.json; its failure (a full disk) is every rank's
            if self.record is not None:
                from ..experiments.rundir import versions
                from ..log import get_logger
                names = experiment.dataset.class_names()
                if names:               # plot's per-class curves name them
                    self.record.info["class_names"] = list(names)
                self.record.topology(topology, versions(), hosts)
                get_logger().info("run directory: %s", self.record.path)
        collectively(self.world, record)
        if self.bar is not None:
            self.bar.start(experiment.model.num_epochs, experiment.model.batch_size)
        if self.tensorboard is not None:
            self.tensorboard.started(experiment.model)

    def loaded(self, sizes):
        if self.tensorboard is not None:
            self.tensorboard.loaded(sizes)

    def batch(self, epoch, batch, nbatches, running_cost):
        """Before training step ``batch`` (0-based) of ``nbatches`` of ``epoch``: the watchdog
        sees progress, the bar moves. ``running_cost``: the summed cost of the epoch's batches
        before this one (0.0 before the first), the bar's running cost."""
        if self.watchdog is not None:
            self.watchdog.progress(epoch, batch)
        if self.bar is not None:
            self.bar.batch(epoch, batch, nbatches, running_cost)

    def _write(self, rec, tensorboard=None):
        """Rank 0 writes ``rec`` (and hands it to ``tensorboard``, a :class:`TensorBoardLog`
        method); every rank calls this at the same point, so a failure (a full disk) ends every
        rank with rank 0's reason (one allgather over the world, per epoch)."""
        def write():
            if self.record is not None:
                self.record.metrics(rec)
            if self.metrics is not None:
                self.metrics.write(rec)
            if tensorboard is not None:
                tensorboard(rec)
        collectively(self.world, write)

    def epoch(self, record):
        """After every epoch: its record to the run directory and the --metrics file."""
        if self.watchdog is not None:
            self.watchdog.progress(record.get("epoch"), None)
        self._write(record, self.tensorboard and self.tensorboard.epoch)

    def pretrain(self, record):
        """After every pretraining epoch of a layer (GB): its record, as :meth:`epoch`."""
        self._write(record, self.tensorboard and self.tensorboard.pretrain)

    def trained(self):
        """After the last training step: nothing (the watchdog watches the final checkpoint
        and error rates too, in their phases)."""

    def finished(self, result):
        """After the final error rates: the ``{"final": True, ...}`` record of ``result``."""
        rec = {"final": True, "train_misclass": result.train_misclass,
               "test_misclass": result.test_misclass, "size": result.size,
               "grid": list(result.grid), "start_epoch": result.start_epoch}
        if result.valid_misclass is not None:
            rec["valid_misclass"] = result.valid_misclass
        if result.best_epoch is not None:
            rec["best_epoch"] = result.best_epoch
        if result.split_images:
            rec["split_images"] = dict(result.split_images)
        rec.update(result.final_metrics)   # a per-pixel model's mIoU, Dice, ... of each split
        rec.update(policy_record(result))
        last = len(result.epoch_costs) - 1
        self._write(rec, self.tensorboard and (lambda r: self.tensorboard.final(r, max(last, 0))))

    def close_watchdog(self):
        """Every rank at the same point (the end of a run, a preemption): the watchdog ends and
        no heartbeat is left unreceived (collective over the world)."""
        if self.watchdog is not None:
            self.watchdog.close()

    def close(self, ok=True):
        """End of the run (``ok``: it succeeded): the watchdog's thread and the bar stop, the
        --metrics file is kept (a replaced file takes its name only when ``ok``)."""
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.bar is not None:
            self.bar.close()
        if self.metrics is not None:
            self.metrics.close(ok)
        if self.tensorboard is not None:
            self.tensorboard.close()


def policy_record(result):
    """What the checkpoint policy left (:class:`~distnet.experiments.loop.RunResult`): why
    training stopped, the checkpoint files kept, the best epoch's checkpoint; for the final
    metrics line and ``run.json``."""
    return {"stop": result.stop, "checkpoints": list(result.checkpoints),
            "best_checkpoint": result.best_checkpoint}
