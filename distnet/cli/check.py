"""``distnet check``: validate an experiment without running it (and, under mpiexec, the layout
``distnet run`` would cut from those ranks); ``--list-classes`` and ``--reference``."""
import logging

import click

from ..errors import ConfigError
from .job import Job, fail


@click.command()
@click.argument("experiment", type=click.Path(dir_okay=False), required=False)
@click.option("--list-classes", is_flag=True,
              help="List the classes an experiment may name (with those of installed plugins).")
@click.option("--reference", is_flag=True, help="Print the YAML reference (docs/yaml.md).")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="As for run.")
def check(experiment, list_classes, reference, overrides):
    """Validate EXPERIMENT without running it: keys, types, classes and layer shapes. Under
    `mpiexec -n N`, also the layout (grid, replicas, stages) that `distnet run` would cut from
    those N ranks, reported once."""
    if (list_classes or reference) and (experiment is not None or overrides):
        raise click.UsageError(f"{'--reference' if reference else '--list-classes'} takes no EXPERIMENT "
                               "or --set: run it alone, and `distnet check EXPERIMENT` to check a file")
    if list_classes or reference:
        _list(reference)
        return
    if experiment is None:
        fail("give an EXPERIMENT file (or --list-classes / --reference)")
    with Job(world=True) as job:     # errors as run would exit: 2 for the file, 1 for its data
        text, overrides, _ = job.experiment_text(experiment, overrides)   # rank 0's file, as run reads it
        exp, shape, lines, nranks, layout = _checked(experiment, overrides, text)
    from ..log import job_rank
    if job_rank() != 0:     # under mpiexec: one report (rank 0's), errors from every rank
        return
    for level, note in exp.config_notes:
        click.echo(f"distnet: {logging.getLevelName(level).lower()}: {note}", err=True)
    on = (f"; on these {nranks} ranks: data {layout.data} x pipe {layout.pipe} x grid "
          f"{'x'.join(map(str, layout.grid))}" if layout is not None else "")
    if lines is not None:
        click.echo(f"{experiment}: OK ({lines[0]}{on})")
        for line in lines[1:]:
            click.echo(f"  {line}")
        return
    click.echo(f"{experiment}: OK ({len(exp.model.layers)} layers, input {exp.dataset.image_shape}, "
               f"output {shape}{on})")
    for layer in exp.model.layers:
        tower = f"  [tower {layer.tower}]" if layer.tower is not None else ""   # tower networks
        click.echo(f"  {layer.describe()}{tower}")


def _list(reference):
    """``--reference`` (the YAML reference) or ``--list-classes`` (kind, distnet path, neon path
    or the plugin that adds it)."""
    from ..config.reference import reference_markdown
    from ..config.registry import check_plugins, known_classes, plugin_source
    with Job():
        check_plugins()
    if reference:
        click.echo(reference_markdown(), nl=False)
    else:
        for name, kind, dpath, npath in known_classes():
            click.echo(f"{kind:<10} {dpath:<40} {npath or plugin_source(name) or ''}".rstrip())


def _checked(experiment, overrides, text=None):
    """``(experiment, output shape, summary lines, ranks, layout)`` of a checked EXPERIMENT: a
    chain of layers has an output shape, a Seq2SeqExperiment summary lines instead (the other
    None); under mpiexec, the launch's rank count and the layout ``distnet run`` would cut from
    it, so that `mpiexec -n 5 distnet check` cannot say OK to what run refuses (one process:
    layout None). ``text``: the file as rank 0 read it (None: read it here)."""
    from ..comm.launcher import launcher_world_size
    from ..config import load_experiment
    from ..experiments.seq2seq import Seq2SeqExperiment
    try:
        exp = load_experiment(experiment, overrides, text=text)
    except ConfigError as e:   # no GPU here: check the rest of the file on the CPU backend
        if e.key != "backend" or "GPU backend" not in e.bare_message:
            raise
        exp = load_experiment(experiment, overrides, gpu_as_cpu=True, text=text)
    shape = lines = None
    if isinstance(exp, Seq2SeqExperiment):   # not a chain of layers: its own lines
        exp.check()
        lines = exp.summary()
    else:
        shape = exp.model.infer_shapes(exp.dataset.image_shape)
        exp.check()   # what run checks before training: data headers, outputs vs classes
    nranks = launcher_world_size()[0]
    layout = exp.layout(nranks) if nranks > 1 else None
    return exp, shape, lines, nranks, layout
