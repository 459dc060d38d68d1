"""Which checkpoint a run directory stands for, where a command is given one instead of a file.

A run keeps its last checkpoint (``checkpoint.h5``, or the last ``{epoch}`` file its ``run.json``
names) and, with ``checkpoint: {keep_best: true}``, the best epoch's (``checkpoint-best.h5``, or
the ``best_checkpoint`` its ``run.json`` names). ``RUN_DIR:best`` and ``RUN_DIR:last`` choose
one; a bare ``RUN_DIR`` means what the command reads it for: ``distnet predict``, ``evaluate``
and :func:`distnet.load` use a trained model, the best where the run kept one, else the last
(Lightning's ``ckpt_path="best"``); ``distnet run --resume`` continues training, from the last.
"""
import os
from dataclasses import dataclass

from ..errors import OptionError
from ..models.sharded import INDEX
from .policy import best_file
from .rundir import read_info

#: The checkpoint a run directory holds (``distnet run`` writes it there unless told otherwise).
RUN_CHECKPOINT = "checkpoint.h5"
#: The choices a ``RUN_DIR:CHOICE`` suffix names.
CHOICES = ("best", "last")


@dataclass(frozen=True)
class ChosenCheckpoint:
    """A checkpoint path and how it was chosen: ``choice`` ``"best"`` or ``"last"`` of the run
    directory ``run_dir`` (None: a file or sharded folder was given itself); ``other``: the
    run's checkpoint of the other choice, if it kept one."""

    path: str
    run_dir: str = None
    choice: str = None
    other: str = None

    def describe(self):
        """One line for the output: which checkpoint of which run directory, and how to ask for
        the other one (None for a checkpoint given by its own path)."""
        if self.run_dir is None:
            return None
        what = {"best": "its best checkpoint (the best epoch's)", "last": "its last checkpoint"}[self.choice]
        other = [c for c in CHOICES if c != self.choice][0]
        if self.other:
            tail = f"; {self.run_dir}:{other} names {self.other}"
        elif self.choice == "last" and other == "best":
            tail = " (the run kept no best checkpoint: checkpoint keep_best: true keeps one)"
        else:
            tail = ""
        return f"{self.run_dir}: {what}, {self.path}{tail}"


def split_choice(value):
    """``(path, choice)``: ``RUN_DIR:best`` / ``RUN_DIR:last`` split (a path that exists as
    written is never split), else ``(value, None)``."""
    for choice in CHOICES:
        suffix = ":" + choice
        if value.endswith(suffix) and not os.path.exists(value):
            return value[:-len(suffix)], choice
    return value, None


def is_run_directory(path):
    """Whether ``path`` is a folder that is no sharded checkpoint (no ``index.h5`` in it)."""
    return os.path.isdir(path) and not os.path.exists(os.path.join(path, INDEX))


def run_checkpoints(run_dir):
    """``{"last": path or None, "best": path or None}`` of a run directory: its files that
    exist, found where the run wrote them (the default names in the folder, or what its
    ``run.json`` names: a relative name there is also looked for next to the last checkpoint
    and in the folder, since the run may have started in another directory)."""
    info = read_info(os.path.join(run_dir, "run.json"))
    recorded_last = info.get("checkpoint") if isinstance(info.get("checkpoint"), str) else None
    recorded_best = info.get("best_checkpoint") if isinstance(info.get("best_checkpoint"), str) else None
    near = [run_dir] + ([os.path.dirname(recorded_last)] if recorded_last else [])
    last = _first_existing([os.path.join(run_dir, RUN_CHECKPOINT), recorded_last])
    best = [os.path.join(run_dir, best_file(RUN_CHECKPOINT))]
    if recorded_best:
        best = [recorded_best] + [os.path.join(d, os.path.basename(recorded_best)) for d in near] + best
    return {"last": last, "best": _first_existing(best)}


def choose_checkpoint(value, default="best"):
    """The :class:`ChosenCheckpoint` that ``value`` names: a checkpoint file or sharded folder
    (itself), or a run directory with an optional ``:best`` / ``:last`` (module docstring;
    ``default``: the choice of a bare run directory, ``"best"`` falling back to the last).
    OptionError naming the folder when it holds no such checkpoint."""
    path, choice = split_choice(value)
    if not is_run_directory(path):
        if choice is not None:
            raise OptionError(f"{value}: :{choice} follows a run directory, and {path} is none (give the "
                              "checkpoint file alone)")
        return ChosenCheckpoint(value)
    found = run_checkpoints(path)
    want = choice or default
    if found[want] is None and choice is None and want == "best":
        want = "last"           # the run kept no best checkpoint: its last is its model
    if found[want] is None:
        if want == "best":
            raise OptionError(f"{value}: the run directory holds no best checkpoint (its run had no checkpoint "
                              f"keep_best: true); {path}:last names its last checkpoint")
        raise OptionError(f"{value}: {path} is a folder without {RUN_CHECKPOINT} (the run directory of a run that "
                          "wrote no checkpoint?); give the checkpoint file")
    other = found["last" if want == "best" else "best"]
    return ChosenCheckpoint(found[want], path, want, other if other != found[want] else None)


def _first_existing(paths):
    return next((p for p in paths if p and os.path.exists(p)), None)
