"""``distnet run``: train an experiment on one process or, under mpiexec, on every rank, and
record the run (the run directory, ``--metrics``, the checkpoint; the hooks in :mod:`.hooks`)."""
import logging
import math
import os

import click

from ..errors import DistnetError
from .hooks import CliHooks, policy_record
from .job import Job, world_rank
from .options import RUN_CHECKPOINT, checkpoint_argument, given_path


@click.command()
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False), callback=given_path,
              help="Also write per-epoch costs and final error rates as JSON lines here (rank 0).")
@click.option("-v", "--verbose", is_flag=True, help="Log per-layer plans and debug lines.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a value of the experiment, e.g. --set model.num_epochs=1 (repeatable).")
@click.option("--resume", type=click.Path(), metavar="CHECKPOINT", callback=checkpoint_argument,
              help="Continue from a checkpoint (written on any grid or number of ranks), or a run "
                   "directory's checkpoint.h5; --set applies to the experiment, e.g. --set "
                   "model.num_epochs=20 to train longer.")
@click.option("--run-dir", type=click.Path(file_okay=False), callback=given_path,
              help="Record the run here (default: runs/<experiment>-<time>, or under $DISTNET_RUNS_DIR).")
@click.option("--no-run-dir", is_flag=True, help="Do not write a run directory.")
@click.option("--checkpoint", "checkpoint_path", type=click.Path(), callback=given_path,
              help="Checkpoint file (default: the experiment's checkpoint.path, else checkpoint.h5 "
                   "in the run directory).")
@click.option("--checkpoint-every", type=click.IntRange(min=0), metavar="N",
              help="Also write the checkpoint every N epochs (0: only at the end).")
@click.option("--no-checkpoint", is_flag=True, help="Write no checkpoint.")
@click.option("--sharded-checkpoint", is_flag=True, default=None,
              help="Write the checkpoint as a sharded folder, every rank its own part in parallel "
                   "(the experiment's checkpoint.sharded; needs a folder every rank sees).")
@click.option("--progress/--no-progress", default=None,
              help="Progress on rank 0: a bar when stderr is a terminal, else a 'progress:' line "
                   "(epoch, batch, images/s, running cost, ETA) every --progress-every (default: on "
                   "unless --quiet; --progress forces the bar).")
@click.option("--progress-every", default="60s", show_default=True, metavar="Ns|Nb",
              help="Without a terminal: a progress line after N seconds without another log line "
                   "(e.g. 30s), or every N batches (e.g. 100b).")
@click.option("--watchdog", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="End the job when a training step makes no progress for SECONDS, naming the rank "
                   "that stalled (default: the experiment's watchdog key; none).")
@click.option("--tensorboard", is_flag=True,
              help="Also write TensorBoard event files (costs, error rates, learning rates, images/s) "
                   "into the run directory's tensorboard/ (rank 0; needs distnet[tensorboard]).")
@click.option("--force", is_flag=True,
              help="Replace existing files: --checkpoint (other than this experiment's own), --metrics, "
                   "and use a non-empty --run-dir.")
def run(experiment, metrics_path, verbose, quiet, overrides, resume, run_dir, no_run_dir,
        checkpoint_path, checkpoint_every, no_checkpoint, progress, progress_every, watchdog, tensorboard, force,
        sharded_checkpoint):
    """Run EXPERIMENT (a YAML file). Under mpiexec, every rank runs this same command.

    Every run is recorded in a run directory (rank 0 writes): experiment.yaml, resolved.yaml
    (with the --set overrides), run.json (command, topology, versions, timings, status),
    metrics.jsonl (one line per epoch) and checkpoint.h5 (the model, at the end and every
    --checkpoint-every N epochs)."""
    from ..config import load_experiment
    from ..experiments.rundir import experiment_config
    from ..log import get_logger, keep_handler
    from ..progress import ProgressBar, parse_every
    from .outputs import prepare_outputs, record_failures_in
    try:
        every, every_batches = parse_every(progress_every)
    except ValueError:
        raise click.BadParameter(f"{progress_every!r}: give seconds (30s) or batches (100b)",
                                 param_hint="--progress-every") from None
    if watchdog is not None and not math.isfinite(watchdog):
        raise click.BadParameter(f"{watchdog} is not a number of seconds", param_hint="'--watchdog'")
    for a, b, given in (("--run-dir", "--no-run-dir", run_dir is not None and no_run_dir),
                        ("--checkpoint", "--no-checkpoint", checkpoint_path is not None and no_checkpoint),
                        ("--checkpoint-every", "--no-checkpoint", checkpoint_every is not None and no_checkpoint),
                        ("--verbose", "--quiet", verbose and quiet),
                        ("--progress", "--quiet", progress is True and quiet),
                        ("--tensorboard", "--no-run-dir", tensorboard and no_run_dir)):
        if given:   # one of them would be dropped silently
            raise click.UsageError(f"{a} and {b} contradict each other: give one of them")
    # under mpiexec the abort hook first, before anything can fail on one rank
    with Job(world=True, signals=True, errors=TRAINING_ERRORS) as job:
        rank0 = job.rank0
        state = job.on_failure(_Record())   # what to close and record when the run fails
        text, overrides = job.experiment_text(experiment, overrides)   # rank 0's, on every rank
        exp = load_experiment(experiment, overrides, text=text)
        if verbose or quiet:
            exp.logging = dict(exp.logging, level=logging.DEBUG if verbose else logging.WARNING)
        # shapes and data headers, agreed on by every rank (a data file missing on another node
        # fails there): a broken experiment leaves no run directory behind
        job.collectively(exp.check)
        if tensorboard:
            from .tensorboard import require_writer
            require_writer()
        exp.config_record = experiment_config(experiment, overrides, text=text)
        if checkpoint_every is not None:
            exp.checkpoint_every = checkpoint_every
        if checkpoint_path:
            from ..experiments.policy import path_fields
            try:   # {epoch} expands to the epoch number; nothing else
                path_fields(checkpoint_path)
            except DistnetError as e:
                raise click.BadParameter(str(e).replace("checkpoint path ", "", 1), param_hint="'--checkpoint'") from None
            exp.checkpoint_path = checkpoint_path
        if sharded_checkpoint:
            exp.checkpoint_sharded = True
        if no_checkpoint:
            exp.checkpoint_path, exp.checkpoint_every = None, 0
        # Every destination is checked (and the run directory claimed) by rank 0, the writer,
        # before training; a refusal ends every rank with the reason.
        outputs = job.collectively(lambda: prepare_outputs(
            exp, experiment, None if no_run_dir else run_dir, not no_run_dir, metrics_path, resume,
            force, checkpoint=not no_checkpoint) if rank0 else None)
        record = state.record = outputs.record if outputs is not None else None
        where = job.bcast(record.path if record is not None else None)
        if exp.checkpoint_path is None and where is not None and not no_checkpoint:
            exp.checkpoint_path = os.path.join(where, RUN_CHECKPOINT)
        if where is not None:
            record_failures_in(where)
            if job.comm is not None:   # another node's failure reaches rank 0's run.json
                from ..comm.abort import start_failure_relay
                start_failure_relay(job.comm)

        def start_record():     # rank 0 writes; a failure (a full disk) ends every rank with its reason
            if record is not None:
                record.start(exp.config_record, resume=resume, checkpoint=exp.checkpoint_path)
                return keep_handler(record.log_handler())  # log.txt: what rank 0 prints
        state.log_handler = job.collectively(start_record)
        show = rank0 and not quiet and progress is not False
        bar = (ProgressBar(enabled=None if progress is None else True, lines=True, every=every,
                           every_batches=every_batches) if show else None)
        def open_board():       # rank 0 writes the event files; a failure ends every rank
            if tensorboard and record is not None:
                from .tensorboard import TensorBoardLog
                return TensorBoardLog(os.path.join(record.path, "tensorboard"))
        board = job.collectively(open_board)
        hooks = state.hooks = CliHooks(record, outputs.metrics if outputs is not None else None, bar,
                                       watchdog=watchdog if watchdog is not None else exp.watchdog,
                                       tensorboard=board)
        result = exp.run(hooks=hooks, resume=resume)

        def finish():   # rank 0's last writes (the --metrics rename, run.json): every rank waits
            hooks.close(ok=True)
            if record is not None:   # the checkpoint written, if any (none with at_end: false, every: 0)
                record.info["checkpoint"] = os.path.abspath(result.checkpoint) if result.checkpoint else None
                if exp.checkpoint_io:   # bytes and seconds of the last save and of the restore
                    record.info["checkpoint_io"] = dict(exp.checkpoint_io)
                record.info.update(policy_record(result), best_epoch=result.best_epoch)
                record.finish("finished", timings=result.timings)
                get_logger().info("run directory: %s", record.path)
        # A failure here (a full disk) ends every rank with rank 0's reason and status, instead
        # of rank 0 alone while the others had already exited 0.
        job.collectively(finish)
        _drop_handler(state.log_handler)
        if job.comm is not None:
            from ..comm.abort import stop_failure_relay
            stop_failure_relay()


def _out_of_memory(e):   # numpy's "Unable to allocate 67 GiB for an array with shape ..."
    return (f"out of memory: {e or 'an allocation failed'} (a layer or batch too big for one rank: make "
            "it smaller or use more ranks; `distnet show -n N` gives the memory per rank)", 1)


def _floating_point(e):  # numpy's, raised because the backend's seterr_handling asks for it
    return (f"floating-point error: {e} (the backend's seterr_handling stops the run on it; lower the "
            "learning rate or check the data, or let seterr_handling warn or ignore it)", 1)


#: What a training may raise besides a DistnetError, told in one line (:class:`~.job.Job`'s errors).
TRAINING_ERRORS = ((MemoryError, _out_of_memory), (FloatingPointError, _floating_point))


def _drop_handler(handler):
    if handler is not None:
        from ..log import get_logger
        get_logger().removeHandler(handler)
        handler.close()


class _Record:
    """A failed run's last words (a :class:`~.job.Job` failure listener): the hooks closed (the
    --metrics file left as it was), the log handler dropped, the run directory told why (which
    rank, what error) when it was claimed. Errors of its own are swallowed: the command's own
    error matters more."""

    def __init__(self):
        self.hooks = self.record = self.log_handler = None

    def __call__(self, failure):
        if self.hooks is not None:
            try:
                self.hooks.close(ok=False)
            except Exception:  # noqa: BLE001 - recording the failure matters more
                pass
        _drop_handler(self.log_handler)
        if self.record is not None:
            try:
                if failure.line:
                    self.record.log_line(failure.line)
                self.record.finish(failure.status, error=failure.error,
                                   rank=world_rank() if failure.rank is None else failure.rank)
            except (OSError, DistnetError):
                pass
