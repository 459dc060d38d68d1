"""Click callbacks shared by the commands' options (light: imported when the CLI starts)."""
import math

import click

#: The checkpoint a run directory holds (``distnet run`` writes it there unless told otherwise):
#: :data:`distnet.experiments.run_checkpoints.RUN_CHECKPOINT`, written out here so that the
#: command line starts without importing the experiments.
RUN_CHECKPOINT = "checkpoint.h5"


def given_path(ctx, param, value):
    """An option's path must not be empty: ``--resume "$CK"`` with CK unset trained from scratch,
    ``--checkpoint ""`` wrote no checkpoint, ``--metrics ""`` no metrics, without a word."""
    if value is not None and not str(value).strip():
        raise click.BadParameter("an empty path (an unset shell variable?); give a path, or leave "
                                 "the option out")
    return value


def checkpoint_argument(ctx, param, value, default="last"):
    """The options that read a checkpoint: a non-empty path (:func:`given_path`): a checkpoint
    file, a sharded checkpoint folder, or a run directory with an optional ``:best`` / ``:last``
    (:func:`~distnet.experiments.run_checkpoints.choose_checkpoint`). A bare run directory is
    its last checkpoint here (``run --resume`` continues training); the choice is kept in
    ``ctx.meta["checkpoint choice"]`` for the command to name."""
    value = given_path(ctx, param, value)
    if value is None:
        return value
    _refuse_unfinished_shards(value)
    from ..errors import OptionError
    from ..experiments.run_checkpoints import choose_checkpoint
    try:
        chosen = choose_checkpoint(value, default)
    except OptionError as e:
        raise click.BadParameter(str(e)) from None
    ctx.meta["checkpoint choice"] = chosen
    return chosen.path


def trained_checkpoint_argument(ctx, param, value):
    """:func:`checkpoint_argument` for the commands that use a trained model (``evaluate``,
    ``predict``): a bare run directory is its best checkpoint where the run kept one, else its
    last."""
    return checkpoint_argument(ctx, param, value, default="best")


def _refuse_unfinished_shards(value):
    """BadParameter for a sharded checkpoint folder whose save did not finish (its shards, no
    index): it is no checkpoint, and no run directory either."""
    import os
    from ..models.sharded import INDEX
    if os.path.isdir(value) and not os.path.exists(os.path.join(value, INDEX)) \
            and any(n.startswith("shard-") for n in os.listdir(value)):
        raise click.BadParameter(f"{value} is an incomplete sharded checkpoint: its shards but no {INDEX} (the save "
                                 "did not finish); give an earlier checkpoint (run --resume auto finds the newest "
                                 "complete one)")


def finite_number(ctx, param, value):
    """A number option must be finite: ``nan`` passes every range check (and would make every
    comparison agree), ``inf`` means nothing as a tolerance or a rate."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number")
    return value
