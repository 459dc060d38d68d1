"""``distnet checkpoint``: convert between a single-file checkpoint and a sharded checkpoint
folder (docs/checkpoints.md); one process each, one global array in memory at a time."""
import click

from ..fileio import refuse_existing
from .job import Job


def _mib(n):
    return f"{n / 2**20:.2f} MiB"


@click.group()
def checkpoint():
    """Consolidate or split checkpoints."""


@checkpoint.command("consolidate")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
def consolidate(folder, output, force):
    """Write the sharded checkpoint FOLDER as the single file OUTPUT (for evaluate, predict or
    export on any machine; a run resumes from either)."""
    from ..models.reshard import consolidate as write_one
    from ..models.sharded import read_index
    with Job("checkpoint consolidate", one_process=True):
        refuse_existing(output, "checkpoint", force)
        ck = read_index(folder)
        nbytes = write_one(folder, output)
    click.echo(f"{output}: epoch {ck.epoch}, {len(ck.params)} parameters and {len(ck.buffers)} buffers "
               f"from {len(ck.meta['shards'])} shard(s), {_mib(nbytes)}")


@checkpoint.command("split")
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--shards", type=click.IntRange(min=1), default=4, show_default=True,
              help="Number of shard files: each sharded array is cut in blocks along its longest axis.")
@click.option("--force", is_flag=True, help="Replace FOLDER if it exists.")
def split(source, folder, shards, force):
    """Write the single-file checkpoint SOURCE as the sharded checkpoint FOLDER (any run resumes
    from it on any number of ranks, each reading only the pieces it needs)."""
    from ..models.reshard import split as write_split
    from ..models.sharded import read_index
    with Job("checkpoint split", one_process=True):
        refuse_existing(folder, "checkpoint", force)
        nbytes = write_split(source, folder, shards)
        ck = read_index(folder)
    click.echo(f"{folder}: epoch {ck.epoch}, {len(ck.params)} parameters and {len(ck.buffers)} buffers "
               f"in {len(ck.meta['shards'])} shard(s), {_mib(nbytes)}")
