"""``distnet runs``: list run directories with their status, as recorded and as it is now."""
import os

import click

from ..experiments.rundir import ENV_BASE, read_info, run_status


def _run_dirs(paths):
    for path in paths:
        if os.path.isfile(os.path.join(path, "run.json")):
            yield path
        elif os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                sub = os.path.join(path, name)
                if os.path.isfile(os.path.join(sub, "run.json")):
                    yield sub


def describe(path):
    """One line: directory, status, start time, ranks, and the error (with its rank, host and
    phase) if any; then a line per unfinished save of its checkpoint left beside it."""
    info = read_info(os.path.join(path, "run.json"))
    status = run_status(path, info)
    status = status if isinstance(status, str) and status else "unknown"   # an edited or foreign record
    topo = info.get("topology")
    size = topo.get("size") if isinstance(topo, dict) else None
    size = size if isinstance(size, int) and not isinstance(size, bool) and size >= 1 else None
    parts = [path, status, info.get("started", "?")]
    if size:
        parts.append("1 process" if size == 1 else f"{size} ranks")
    if status == "crashed":
        parts.append(f"recorded as {info.get('status')}; its process (pid {info.get('pid')} on "
                     f"{info.get('host')}) is gone")
    elif info.get("error"):
        rank, host, phase = info.get("failed_rank"), info.get("failed_host"), info.get("failed_phase")
        where = f"rank {rank}" + (f" on {host}" if host else "") + (f" in {phase}" if phase else "")
        parts.append((f"{where}: " if rank is not None else "") + str(info["error"]))
    elif status == "preempted" and isinstance(info.get("preempted"), dict):
        p = info["preempted"]
        parts.append(f"by {p.get('signal')}; " + (f"checkpoint {p.get('checkpoint')} {p.get('where')}"
                                                  if p.get("checkpoint") else "no new checkpoint"))
    return "  ".join(str(p) for p in parts) + "".join(f"\n  {line}" for line in leftovers(info))


def leftovers(info):
    """Lines about what interrupted saves of the run's checkpoint left beside it (a sharded
    save's ``PATH.tmp-TOKEN`` folder is the size of a checkpoint; the next save removes it)."""
    from ..models.shard_save import unfinished_saves
    path = info.get("checkpoint")
    if not isinstance(path, str):
        return []
    return [f"left by a save that did not finish: {p} ({n / 2**20:.1f} MiB; the next save of {path} removes it)"
            for p, n in unfinished_saves(path)]


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, file_okay=False), metavar="[DIR]...")
def runs(paths):
    """List run directories (DIR itself, or the runs inside DIR; default: $DISTNET_RUNS_DIR or
    runs/) with their status: running, finished, failed, interrupted, or crashed (recorded as
    running but its process is gone: kill -9, a lost node)."""
    where = paths
    if not paths:
        base = os.environ.get(ENV_BASE) or "runs"
        paths = (base,) if os.path.isdir(base) else ()
        where = (base,)
    found = list(_run_dirs(paths))
    for path in found:
        click.echo(describe(path))
    if not found:   # say so: an empty answer looks like a command that did nothing
        click.echo(f"no run directories in {', '.join(where)} (`distnet run` records each run there)", err=True)
