"""``distnet run``: train an experiment on one process or, under mpiexec, on every rank, and
record the run (the run directory, ``--metrics``, the checkpoint; the hooks in :mod:`.hooks`)."""
import math
import os

import click

from ..errors import DistnetError
from .hooks import CliHooks, policy_record
from .job import Job, world_rank
from .options import RUN_CHECKPOINT, checkpoint_argument, finite_number, given_path


#: The options of ``distnet run`` that set a key of the experiment (docs/commands.md#distnet-run):
#: ``(parameter, option, key path, value)``, the value None for the option's own. They are
#: overrides like ``--set``, applied before the experiment is built; rank 0's hold on every rank.
#: The other options (--metrics, --run-dir, --no-run-dir, --progress, --progress-every, --force)
#: choose what rank 0 writes and prints, not what the run does.
SETTINGS = (("checkpoint_path", "--checkpoint", "checkpoint.path", None),
            ("checkpoint_every", "--checkpoint-every", "checkpoint.every", None),
            ("checkpoint_every_steps", "--checkpoint-every-steps", "checkpoint.every_steps", None),
            ("checkpoint_every_minutes", "--checkpoint-every-minutes", "checkpoint.every_minutes", None),
            ("no_checkpoint", "--no-checkpoint", "checkpoint.enabled", False),
            ("sharded_checkpoint", "--sharded-checkpoint", "checkpoint.sharded", True),
            ("watchdog", "--watchdog", "watchdog", None),
            ("tensorboard", "--tensorboard", "tensorboard", True),
            ("log_dir", "--log-dir", "logging.log_dir", None),
            ("verbose", "-v", "logging.level", "DEBUG"),
            ("quiet", "-q", "logging.level", "WARNING"))


def _resume_argument(ctx, param, value):
    """``--resume`` as :func:`~.options.checkpoint_argument` resolves it (a run directory: its
    checkpoint; ``auto`` stays ``auto``, resolved by rank 0 once the experiment is known), the
    words given kept too (``ctx.meta``): a node that cannot see the run directory resolves it
    otherwise, yet was given the same option."""
    ctx.meta["resume given"] = value
    return value if value == "auto" else checkpoint_argument(ctx, param, value)


def run_settings(**given):
    """``[(option as given, key path, value)]`` of the :data:`SETTINGS` options among ``given``
    (click's parameters: a flag given is True, an option given is not None)."""
    out = []
    for name, option, key, value in SETTINGS:
        v = given.get(name)
        if v is None or v is False:
            continue
        if value is None:
            out.append((f"{option} {v:g}" if isinstance(v, float) else f"{option} {v}", key, v))
        else:
            out.append((option, key, value))
    return out


@click.command()
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False), callback=given_path,
              help="Also write per-epoch costs and final error rates as JSON lines here (rank 0).")
@click.option("-v", "--verbose", is_flag=True, help="Log per-layer plans and debug lines (logging.level: DEBUG).")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors (logging.level: WARNING), no progress.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a value of the experiment, e.g. --set model.num_epochs=1 (repeatable).")
@click.option("--resume", type=click.Path(), metavar="CHECKPOINT|auto", callback=_resume_argument,
              help="Continue from a checkpoint (written on any grid or number of ranks), or a run "
                   "directory's checkpoint.h5; --set applies to the experiment, e.g. --set "
                   "model.num_epochs=20 to train longer. auto: the newest complete checkpoint of "
                   "--run-dir or --checkpoint, or a fresh start when there is none (a job script "
                   "that requeues itself).")
@click.option("--run-dir", type=click.Path(file_okay=False), callback=given_path,
              help="Record the run here (default: runs/<experiment>-<time>, or under $DISTNET_RUNS_DIR).")
@click.option("--no-run-dir", is_flag=True, help="Do not write a run directory.")
@click.option("--checkpoint", "checkpoint_path", type=click.Path(), callback=given_path,
              help="Checkpoint file (checkpoint.path; default: checkpoint.h5 in the run directory).")
@click.option("--checkpoint-every", type=click.IntRange(min=0), metavar="N",
              help="Also write the checkpoint every N epochs (checkpoint.every; 0: only at the end).")
@click.option("--checkpoint-every-steps", type=click.IntRange(min=0), metavar="N",
              help="Also write the checkpoint every N optimiser steps, inside epochs (checkpoint.every_steps); "
                   "a resume continues at the next step.")
@click.option("--checkpoint-every-minutes", type=click.FloatRange(min=0), metavar="T", callback=finite_number,
              help="Also write the checkpoint every T minutes, inside epochs (checkpoint.every_minutes).")
@click.option("--no-checkpoint", is_flag=True, help="Write no checkpoint (checkpoint.enabled: false).")
@click.option("--sharded-checkpoint", is_flag=True, default=None,
              help="Write the checkpoint as a sharded folder, every rank its own part in parallel "
                   "(checkpoint.sharded: true; needs a folder every rank sees).")
@click.option("--progress/--no-progress", default=None,
              help="Progress on rank 0: a bar when stderr is a terminal, else a 'progress:' line "
                   "(epoch, batch, images/s, running cost, ETA) every --progress-every (default: on "
                   "unless --quiet; --progress forces the bar).")
@click.option("--progress-every", default="60s", show_default=True, metavar="Ns|Nb",
              help="Without a terminal: a progress line after N seconds without another log line "
                   "(e.g. 30s), or every N batches (e.g. 100b).")
@click.option("--watchdog", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="End the job when a training step makes no progress for SECONDS, naming the rank "
                   "that stalled (the experiment's watchdog key; default: none).")
@click.option("--tensorboard", is_flag=True,
              help="Also write TensorBoard event files (costs, error rates, learning rates, images/s) "
                   "into the run directory's tensorboard/ (tensorboard: true; rank 0; needs "
                   "distnet[tensorboard]).")
@click.option("--log-dir", type=click.Path(file_okay=False), callback=given_path,
              help="Every rank also logs into DIR/rank-RRRRR.log on its own node: its lines, its phases and "
                   "its failure (logging.log_dir).")
@click.option("--force", is_flag=True,
              help="Replace existing files: --checkpoint (other than this experiment's own), --metrics, "
                   "and use a non-empty --run-dir.")
def run(experiment, metrics_path, verbose, quiet, overrides, resume, run_dir, no_run_dir,
        checkpoint_path, checkpoint_every, checkpoint_every_steps, checkpoint_every_minutes, no_checkpoint, progress,
        progress_every, watchdog, tensorboard, force, sharded_checkpoint, log_dir):
    """Run EXPERIMENT (a YAML file). Under mpiexec, every rank runs this same command.

    Every run is recorded in a run directory (rank 0 writes): experiment.yaml, resolved.yaml
    (with the --set overrides and the options that set keys), run.json (command, topology,
    versions, timings, status), metrics.jsonl (one line per epoch) and checkpoint.h5 (the
    model, at the end and every --checkpoint-every N epochs). A preemption signal (SIGUSR1,
    SIGTERM) ends it after a checkpoint, with exit status 75."""
    from .outputs import prepare_outputs
    every = _progress_every(progress_every)
    if watchdog is not None and not math.isfinite(watchdog):
        raise click.BadParameter(f"{watchdog} is not a number of seconds", param_hint="'--watchdog'")
    _refuse_contradictions(run_dir=run_dir is not None and no_run_dir,
                           checkpoint=checkpoint_path is not None and no_checkpoint,
                           checkpoint_every=(checkpoint_every, checkpoint_every_steps,
                                             checkpoint_every_minutes) != (None,) * 3 and no_checkpoint,
                           verbose=verbose and quiet, progress=progress is True and quiet,
                           tensorboard=tensorboard and no_run_dir)
    settings = run_settings(checkpoint_path=checkpoint_path, checkpoint_every=checkpoint_every,
                            checkpoint_every_steps=checkpoint_every_steps,
                            checkpoint_every_minutes=checkpoint_every_minutes,
                            no_checkpoint=no_checkpoint, sharded_checkpoint=sharded_checkpoint,
                            watchdog=watchdog, tensorboard=tensorboard, log_dir=log_dir, verbose=verbose, quiet=quiet)
    # under mpiexec the abort hook first, before anything can fail on one rank
    with Job(world=True, signals=True, errors=TRAINING_ERRORS) as job:
        from ..faults import install_phase_fault
        from ..log import job_rank
        install_phase_fault(job_rank())     # DISTNET_FAULT_INJECT=RANK:PHASE...: the tests' frozen node
        state = job.on_failure(_Record())   # what to close and record when the run fails
        exp, resume = _load(job, experiment, overrides, settings,
                             (resume, click.get_current_context().meta.get("resume given")))
        state.watchdog = _guard(job, exp, writes_checkpoints=exp.checkpoint_enabled and (
            exp.checkpoint_path is not None or not no_run_dir))
        # Every destination is checked (and the run directory claimed) by rank 0, the writer,
        # before training; a refusal ends every rank with the reason.
        outputs = job.collectively(lambda: prepare_outputs(
            exp, experiment, None if no_run_dir else run_dir, not no_run_dir, metrics_path, resume,
            force) if job.rank0 else None)
        if resume == "auto":    # rank 0 found the newest checkpoint, or none
            resume = job.bcast(outputs.resume if outputs is not None else None)
        default = _open_record(job, exp, state, outputs, resume)
        hooks = state.hooks = _hooks(job, exp, outputs, quiet, progress, every, state.watchdog)
        result = exp.run(hooks=hooks, resume=resume, default_checkpoint=default)
        # rank 0's last writes (the --metrics rename, run.json): every rank waits; a failure
        # here (a full disk) ends every rank with rank 0's reason and status, instead of rank 0
        # alone while the others had already exited 0.
        job.collectively(lambda: _finish(exp, hooks, record=state.record, result=result))
        _close(job, state)


def _guard(job, exp, writes_checkpoints):
    """Every rank, as soon as it has rank 0's experiment: the watchdog starts (``watchdog``:
    it covers the whole run from here), and the experiment's ``checkpoint.on_signal`` signals
    ask for a checkpoint from now on (a run that writes none ends at once on them, as on
    Ctrl-C); one that came during the start-up is delivered now. Returns the watchdog (None
    without one)."""
    from ..comm.signals import handle_preemption_signals, preempt_on
    from . import replay_deferred
    watchdog = None
    if exp.watchdog:
        from ..comm.watchdog import Watchdog
        watchdog = Watchdog(job.comm, exp.watchdog).start()
    if writes_checkpoints and exp.checkpoint_on_signal:
        preempt_on(exp.checkpoint_on_signal, exp.checkpoint_grace, job.comm)
        handle_preemption_signals(exp.checkpoint_on_signal)
    replay_deferred()          # a preemption signal of the start-up, now that a handler may take it
    return watchdog


def _open_record(job, exp, state, outputs, resume):
    """The run directory (rank 0) started: failures recorded there from every rank (and, over
    the failure relay, from other nodes), run.json and log.txt written. Returns the default
    checkpoint path (``checkpoint.h5`` in it; None without one)."""
    from ..log import get_logger, keep_handler
    from .outputs import record_failures_in
    record = state.record = outputs.record if outputs is not None else None
    where = job.bcast(record.path if record is not None else None)
    default = os.path.join(where, RUN_CHECKPOINT) if where is not None else None
    if where is not None:
        record_failures_in(where)
        if job.comm is not None:   # another node's failure reaches rank 0's run.json
            from ..comm.abort import start_failure_relay
            start_failure_relay(job.comm)

    def start_record():     # rank 0 writes; a failure (a full disk) ends every rank with its reason
        if record is not None:
            record.start(exp.config_record, resume=resume, checkpoint=exp.checkpoint_target(default))
            return keep_handler(record.log_handler())  # log.txt: what rank 0 prints
    state.log_handler = job.collectively(start_record)
    if outputs is not None and click.get_current_context().meta.get("resume given") == "auto" and resume is None:
        get_logger().warning("resume auto: no complete checkpoint yet (%s): training from the start",
                             exp.checkpoint_target(default) or "no checkpoint path")
    return default


def _close(job, state):
    """The end of a run that succeeded, on every rank: the watchdog ends (collective: no
    heartbeat left unreceived), rank 0's log handler and the failure relay stop."""
    from ..comm.signals import preemption_done
    state.hooks.close_watchdog()
    preemption_done()
    _drop_handler(state.log_handler)
    if job.comm is not None:
        from ..comm.abort import stop_failure_relay
        stop_failure_relay()


def _progress_every(text):
    """``--progress-every`` as ``(seconds, batches)``."""
    from ..progress import parse_every
    try:
        return parse_every(text)
    except ValueError:
        raise click.BadParameter(f"{text!r}: give seconds (30s) or batches (100b)",
                                 param_hint="--progress-every") from None


def _refuse_contradictions(**given):
    """A UsageError for two options of which one would be dropped silently."""
    pairs = {"run_dir": ("--run-dir", "--no-run-dir"), "checkpoint": ("--checkpoint", "--no-checkpoint"),
             "checkpoint_every": ("--checkpoint-every", "--no-checkpoint"), "verbose": ("--verbose", "--quiet"),
             "progress": ("--progress", "--quiet"), "tensorboard": ("--tensorboard", "--no-run-dir")}
    for name, both in given.items():
        if both:
            a, b = pairs[name]
            raise click.UsageError(f"{a} and {b} contradict each other: give one of them")


def _load(job, experiment, overrides, settings, resume):
    """``(experiment, resume)``: the experiment built on every rank from rank 0's file, ``--set``
    and settings, and rank 0's ``--resume`` (``resume``: ``(resolved, as given)``; one
    broadcast). A rank given other options says so in one warning line, then follows rank 0:
    ranks that ran different experiments, or wrote checkpoints at different epochs, would wait
    for each other forever. The experiment's shapes and data headers are checked by every rank
    (a data file missing on another node fails there): a broken experiment leaves no run
    directory behind."""
    from ..config import load_experiment
    mine = (list(overrides), [tuple(s) for s in settings], resume[1])
    text, overrides, (settings, resume) = job.experiment_text(experiment, overrides, (mine[1], resume))
    if (list(overrides), [tuple(s) for s in settings], resume[1]) != mine:
        _warn_unlike_rank0(mine, (list(overrides), settings, resume[1]))
    resume = resume[0]
    exp = load_experiment(experiment, overrides, text=text, settings=settings, record=True)
    job.collectively(exp.check)
    if exp.tensorboard:
        from .tensorboard import require_writer
        require_writer()
    return exp, resume


def _words(overrides, settings, resume):
    return ([f"--set {o}" for o in overrides] + [option for option, _, _ in settings]
            + ([f"--resume {resume}"] if resume else []))


def _warn_unlike_rank0(mine, rank0):
    """One line on this rank: the options that set its run differ from rank 0's, which it
    follows (those of one side only are named; the whole lists when only their order differs)."""
    here, there = _words(*mine), _words(*rank0)
    only_here, only_there = [w for w in here if w not in there], [w for w in there if w not in here]
    if not only_here and not only_there:
        only_here, only_there = here, there
    click.echo(f"[rank {world_rank()}] distnet: warning: the options that set the run differ from rank 0's "
               f"(this rank: {' '.join(only_here) or 'none'}; rank 0: {' '.join(only_there) or 'none'}): "
               "every rank runs as rank 0 was told", err=True)


def _hooks(job, exp, outputs, quiet, progress, every, watchdog=None):
    """The run's :class:`CliHooks`: on rank 0 the run directory, --metrics, the progress bar and
    TensorBoard (its writer opened collectively: a failure ends every rank); the ``watchdog``
    on every rank."""
    from ..progress import ProgressBar
    record = outputs.record if outputs is not None else None
    bar = None
    if job.rank0 and not quiet and progress is not False:
        bar = ProgressBar(enabled=None if progress is None else True, lines=True, every=every[0],
                          every_batches=every[1])

    def open_board():       # rank 0 writes the event files
        if exp.tensorboard and record is not None:
            from .tensorboard import TensorBoardLog
            return TensorBoardLog(os.path.join(record.path, "tensorboard"))
    board = job.collectively(open_board)
    return CliHooks(record, outputs.metrics if outputs is not None else None, bar, watchdog=watchdog,
                    tensorboard=board)


def _finish(exp, hooks, record, result):
    """Rank 0's last writes: the hooks closed, run.json told the checkpoint written (if any),
    its reads and writes, the policy's outcome and the status."""
    from ..comm.phase import enter
    from ..log import get_logger
    enter("finishing")
    hooks.close(ok=True)
    if record is None:
        return
    record.info["checkpoint"] = os.path.abspath(result.checkpoint) if result.checkpoint else None
    if exp.checkpoint_io:   # bytes and seconds of the last save and of the restore
        record.info["checkpoint_io"] = dict(exp.checkpoint_io)
    record.info.update(policy_record(result), best_epoch=result.best_epoch)
    record.finish("finished", timings=result.timings)
    get_logger().info("run directory: %s", record.path)


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
    rank, what error, in which phase) when it was claimed. A preempted run (every rank at once)
    also ends its watchdog collectively and records the checkpoint it wrote. Errors of its own
    are swallowed: the command's own error matters more."""

    def __init__(self):
        self.hooks = self.record = self.log_handler = self.watchdog = None

    def __call__(self, failure):
        from ..comm.phase import current
        if self.hooks is not None:
            try:
                if failure.status == "preempted":
                    self.hooks.close_watchdog()
                self.hooks.close(ok=False)
            except Exception:  # noqa: BLE001 - recording the failure matters more
                pass
        _drop_handler(self.log_handler)
        if self.record is not None:
            try:
                if failure.line:
                    self.record.log_line(failure.line)
                if failure.preempted is not None:   # every rank stopped together: no failing rank
                    self.record.info["preempted"] = failure.preempted
                    self.record.finish("preempted")
                else:
                    self.record.finish(failure.status, error=failure.error, phase=current(),
                                       rank=world_rank() if failure.rank is None else failure.rank)
            except (OSError, DistnetError):
                pass
