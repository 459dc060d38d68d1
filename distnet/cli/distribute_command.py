"""``distnet distribute``: write the distributed version of an experiment file (the recipe is
:func:`distnet.cli.distribute.distribute_text`)."""
import click

from .job import Job, fail
from .options import given_path


@click.command()
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
    from ..fileio import refuse_existing, same_file, write_text
    from .distribute import distribute_text
    with Job("distribute", one_process=True):
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
            fail(f"{source}: not UTF-8 text ({e.reason} at byte {e.start})")
        except OSError as e:
            fail(f"cannot read {source}: {e.strerror or e}", 1)
    if not output:
        click.echo(text, nl=False)
