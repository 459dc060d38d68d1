"""``distnet info``: the software stack, for bug reports (gathered by
:mod:`distnet.experiments.stack` from the modules that own each fact)."""
import click

from ..experiments.stack import stack_info
from .job import Job

__all__ = ["info", "stack_info"]


@click.command()
def info():
    """Print versions of distnet and its stack (for bug reports)."""
    with Job() as job:
        rows = stack_info()             # under mpiexec: every rank (the thread plan is collective)
    if job.rank0:                       # one report, not one per rank
        for k, v in rows:
            click.echo(f"{k:>10}: {v}")
