"""``distnet info``: the software stack, for bug reports (gathered by
:mod:`distnet.experiments.stack` from the modules that own each fact). Under a launcher every
rank reports, and rank 0 prints the rows every rank shares once, then each node's ranks with the
rows in which they differ (threads, GPU)."""
import click

from ..experiments.stack import stack_info
from .job import Job

__all__ = ["info", "stack_info"]


@click.command()
def info():
    """Print versions of distnet and its stack (for bug reports); under mpiexec or srun, every
    rank's, grouped by node."""
    with Job() as job:
        rows = stack_info()             # under mpiexec: every rank (the thread plan is collective)
        from ..comm.launcher import host_name
        from ..comm.world import gather_to_rank0
        blocks = gather_to_rank0((host_name(), rows))
    if job.rank0:                       # one report, not one per rank
        for line in report(blocks):
            click.echo(line)


def report(blocks):
    """The lines of :func:`info` from every rank's ``(host, rows)`` in rank order."""
    rows = blocks[0][1]
    if len(blocks) == 1:
        return [f"{k:>10}: {v}" for k, v in rows]
    differ = {k for _, mine in blocks for k, v in mine if (k, v) not in rows} | \
             {k for k, v in rows if any((k, v) not in mine for _, mine in blocks)}
    lines = [f"{k:>10}: {v}" for k, v in rows if k not in differ]
    nodes = {}
    for rank, (host, _) in enumerate(blocks):
        nodes.setdefault(host, []).append(rank)
    for host, ranks in nodes.items():
        lines.append(f"node {host}: rank(s) {', '.join(map(str, ranks))}")
        for r in ranks:
            lines += [f"  [rank {r}] {k:>10}: {v}" for k, v in blocks[r][1] if k in differ] or \
                     [f"  [rank {r}] as above"]
    return lines
