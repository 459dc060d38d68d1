"""Click callbacks shared by the commands' options (light: imported when the CLI starts)."""
import math
import os

import click

#: The checkpoint a run directory holds (``distnet run`` writes it there unless told otherwise).
RUN_CHECKPOINT = "checkpoint.h5"


def given_path(ctx, param, value):
    """An option's path must not be empty: ``--resume "$CK"`` with CK unset trained from scratch,
    ``--checkpoint ""`` wrote no checkpoint, ``--metrics ""`` no metrics, without a word."""
    if value is not None and not str(value).strip():
        raise click.BadParameter("an empty path (an unset shell variable?); give a path, or leave "
                                 "the option out")
    return value


def checkpoint_argument(ctx, param, value):
    """The options that read a checkpoint (``run --resume``, ``evaluate`` / ``predict
    --checkpoint``): a non-empty path (:func:`given_path`), and a run directory stands for its
    :data:`RUN_CHECKPOINT`, else for the last checkpoint its ``run.json`` names (``{epoch}``
    paths)."""
    from ..models.sharded import INDEX
    value = given_path(ctx, param, value)
    if value is None or not os.path.isdir(value) or os.path.exists(os.path.join(value, INDEX)):
        return value    # a file, or a sharded checkpoint folder
    if any(n.startswith("shard-") for n in os.listdir(value)):
        raise click.BadParameter(f"{value} is an incomplete sharded checkpoint: its shards but no {INDEX} (the save "
                                 "did not finish); give an earlier checkpoint (run --resume auto finds the newest "
                                 "complete one)")
    path = os.path.join(value, RUN_CHECKPOINT)
    if not os.path.exists(path):   # a run that wrote elsewhere ({epoch} paths): its last checkpoint
        path = _recorded_checkpoint(value) or path
    if not os.path.exists(path):
        raise click.BadParameter(f"{value} is a folder without {RUN_CHECKPOINT} (the run directory of a "
                                 "run that wrote no checkpoint?); give the checkpoint file")
    return path


def finite_number(ctx, param, value):
    """A number option must be finite: ``nan`` passes every range check (and would make every
    comparison agree), ``inf`` means nothing as a tolerance or a rate."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number")
    return value


def _recorded_checkpoint(run_dir):
    """The last checkpoint a run directory's ``run.json`` names, or None."""
    import json
    try:
        with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
            path = json.load(f).get("checkpoint")
    except (OSError, ValueError, AttributeError):
        return None
    return path if isinstance(path, str) else None
