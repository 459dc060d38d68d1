"""Warnings at the start of a run (rank 0, with the YAML ``file:line`` of the key): settings
that cannot do what they say for this run's data and length, found once the training set's size
is known (:func:`note_run_start`, called by :meth:`FitExperiment.note_start
<distnet.experiments.fit.FitExperiment.note_start>`). They warn, never refuse: each can be meant."""
from ..config.builder import config_where


def note_run_start(exp, n, ndata, log):
    """Every note below for experiment ``exp`` training on ``n`` images over ``ndata`` data
    replicas (the checkpoint's note is the checkpoint bookkeeping's:
    :meth:`~distnet.experiments.checkpointing.Checkpointing.note_unwritten`)."""
    note_batch_size(exp, n, ndata, log)
    note_schedules(exp, n, log)


def note_batch_size(exp, n, ndata, log):
    """A warning (file:line) when the model's ``batch_size`` cannot be what it says: larger
    than the ``n`` training images (every epoch is one step on all of them: a learning rate
    tuned for that batch size is off), or smaller than the ``ndata`` data replicas (some
    replicas get no rows of a batch and idle)."""
    bs = exp.model.batch_size
    if bs is None:
        return
    where = config_where(exp.model, "batch_size")
    at = f"{where}: " if where else ""
    if bs > n:
        log.warning("%sbatch_size %d is larger than the %d training images: every epoch is one step "
                    "on all %d", at, bs, n, n)
    if bs < ndata:
        log.warning("%sbatch_size %d is smaller than the %d data replicas: %d of them get no rows of a "
                    "batch (they wait); use a batch_size of at least %d", at, bs, ndata, ndata - bs, ndata)

def note_schedules(exp, n, log):
    """A warning (at the schedule's line) for each learning-rate schedule the run ends
    before (never acts, or stops short: the factor never reaches its end), with a hint when
    its numbers fit the run's optimiser steps but are counted in epochs (``schedule_unit:
    epoch``, the default, where ``step`` was meant). Not when ``num_epochs`` was set on the
    command line (a short trial run, or a resume that trains longer, knows it)."""
    from ..optim.schedules import unreached, vanishes
    rule, epochs = exp.model.learning_rule, exp.model.num_epochs
    if rule is None or rule.schedule is None or epochs == 0:
        return
    if (config_where(exp.model, "num_epochs") or "").startswith("command line"):
        return
    steps = epochs * -(-n // (exp.model.batch_size or n))
    last_t = epochs - 1 if rule.schedule_unit == "epoch" else steps - 1
    for s in rule.schedule.schedules:
        why = unreached(s, last_t)
        if why is None:
            continue
        as_steps = rule.schedule_unit == "epoch" and unreached(s, steps - 1) is None
        hint = (f"; t counts epochs (schedule_unit: epoch): if it meant the run's {steps} optimiser "
                "steps, write schedule_unit: step" if as_steps else "")
        where = config_where(s)
        log.warning("%s%s (schedule_unit: %s, num_epochs %d)%s", f"{where}: " if where else "", why,
                    rule.schedule_unit, epochs, hint)
    for s in rule.schedule.schedules:
        why = vanishes(s, last_t)
        if why is None:
            continue
        as_epochs = rule.schedule_unit == "step" and vanishes(s, epochs - 1) is None
        hint = ("; t counts optimiser steps (schedule_unit: step): if it meant epochs, write schedule_unit: "
                "epoch" if as_epochs else "")
        where = config_where(s)
        log.warning("%s%s (schedule_unit: %s, num_epochs %d)%s", f"{where}: " if where else "", why,
                    rule.schedule_unit, epochs, hint)
