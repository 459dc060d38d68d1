"""Is the optimiser state a checkpoint holds enough to continue the run it is loaded into?

A run resumed without its momentum velocities (or Adam's moments) keeps training, but from a
state an uninterrupted run never had: its costs part from the uninterrupted run's from the first
step. That is worth saying; it is not worth refusing, since loading weights into a run with
another optimiser is a legitimate start (fine-tuning)."""


def missing_optimizer_state(model, params, steps):
    """One sentence naming what a run of ``model`` resets to zero when it resumes from the
    checkpoint entries ``params`` (dicts with ``name``, ``velocity``, ``state``; see
    :mod:`distnet.models.checkpoint`) after ``steps`` optimiser steps, or None when nothing is
    missing. Nothing is missing before the first step (the state does not exist yet), and a
    velocity counts as missing only when no parameter has one (a momentum schedule may still be
    at zero for some layers)."""
    if steps <= 0 or not params:
        return None
    names = model.optimizer_state_names()
    rule = model.learning_rule
    if rule is not None:
        lacking = [e["name"] for e in params if not set(names) <= set(e.get("state") or {})]
        what = f"{type(rule).__name__} state ({', '.join(names)})"
    elif "velocity" in names and all(e.get("velocity") is None for e in params):
        lacking, what = [e["name"] for e in params], "momentum velocity"
    else:
        return None
    if not lacking:
        return None
    shown = ", ".join(lacking[:4]) + (f" and {len(lacking) - 4} more" if len(lacking) > 4 else "")
    return (f"holds no {what} for {shown} after {steps} optimiser steps: resumed with it reset to "
            "zero, so from here the run differs from an uninterrupted one")
