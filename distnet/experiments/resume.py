"""``distnet run --resume auto``: continue from the newest complete checkpoint a job has written,
or start fresh when there is none, so that one job script serves the first submission and every
requeue (after a preemption, a time limit, a lost node) alike.

Where it looks (world rank 0, on its node): the run's checkpoint target (``checkpoint.path`` or
``--checkpoint``, its ``{epoch}`` files included; else ``checkpoint.h5`` in ``--run-dir``), the
checkpoints the run directory's ``run.json`` names, and a sharded checkpoint whose replacement a
crash cut short (``PATH.old-TOKEN`` where ``PATH`` is gone). *Complete*: a file that reads as a
checkpoint (files take their name only once written), a sharded folder whose index and every
shard are there with the index's token. *Newest*: the furthest in training (epoch, then step
inside it, then optimiser steps), then the most recent. The checkpoint resumes on whatever
number of ranks and grid the job has now.
"""
import glob
import os
import string

from ..errors import CheckpointError, OptionError


def _pattern(path):
    """``path`` with its ``{epoch}`` fields as ``*`` (a glob of the files it names)."""
    return "".join(glob.escape(lit) + ("*" if field is not None else "")
                   for lit, field, _, _ in string.Formatter().parse(path))


def candidates(target, run_dir=None):
    """The paths ``--resume auto`` considers (module docstring: ``target`` the run's checkpoint
    target, ``run_dir`` its run directory), existing ones, without repeats."""
    from .policy import best_file, path_fields
    from .rundir import read_info
    found = []
    if target:
        names = sorted(glob.glob(_pattern(target))) if path_fields(target) else [target]
        best = best_file(target)
        found += [p for p in names if p != best and not p.endswith(os.path.basename(best))]
    if run_dir:
        info = read_info(os.path.join(run_dir, "run.json"))
        recorded = [info.get("checkpoint")] + list(info.get("checkpoints") or [])
        found += [p for p in recorded if isinstance(p, str)]
    for p in list(found):
        if not os.path.lexists(p):      # a sharded publication cut short between its two renames
            found += sorted(glob.glob(glob.escape(p) + ".old-*"))
    out = []
    for p in found:
        if os.path.exists(p) and os.path.realpath(p) not in {os.path.realpath(q) for q in out}:
            out.append(p)
    return out


def progress_of(path):
    """``(epoch, batch, steps)`` that the checkpoint ``path`` continues from; CheckpointError when
    it is not complete."""
    from ..models.checkpoint import read_checkpoint
    from ..models.sharded import is_sharded, read_index
    if is_sharded(path):
        ck = read_index(path)
        for shard in ck.meta["shards"]:
            _check_shard(path, shard["file"], ck.meta["token"])
    else:
        ck = read_checkpoint(path, arrays=False)
    r = ck.resume
    return r.epoch, r.batch, int(ck.meta.get("steps", 0))


def _check_shard(path, name, token):
    import h5py
    full = os.path.join(path, name)
    try:
        with h5py.File(full, "r") as f:
            mine = f.attrs.get("token")
    except OSError:
        raise CheckpointError(f"checkpoint {path}: shard {name} is missing or unreadable") from None
    if (mine.decode() if isinstance(mine, bytes) else mine) != token:
        raise CheckpointError(f"checkpoint {path}: shard {name} belongs to another save")


def newest_checkpoint(target, run_dir=None, log=None):
    """The newest complete checkpoint of :func:`candidates` (module docstring), or None; the
    incomplete ones are said in ``log`` (a warning each)."""
    best, key = None, None
    for path in candidates(target, run_dir):
        try:
            k = progress_of(path) + (os.path.getmtime(path),)
        except CheckpointError as e:
            if log is not None:
                log.warning("resume auto: skipping %s: %s", path, str(e).split(": ", 1)[-1])
            continue
        if key is None or k > key:
            best, key = path, k
    return best


def need_a_place(run_dir, target):
    """OptionError when ``--resume auto`` has nowhere to look: no ``--run-dir`` and no
    checkpoint path (a default run directory is new every time)."""
    if not run_dir and not target:
        raise OptionError("--resume auto looks for the newest checkpoint of the job's run directory or "
                          "checkpoint path: give --run-dir DIR (the same on every submission of the job) or "
                          "--checkpoint PATH")
