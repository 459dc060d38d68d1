"""Which checkpoint a run directory stands for (distnet.experiments.run_checkpoints): the best
where the run kept one, else the last; ``:best`` / ``:last``; ``--resume`` takes the last; the
files found where ``run.json`` names them even when the run started in another folder."""
import json

import click
import pytest

from distnet.cli.options import RUN_CHECKPOINT, checkpoint_argument, trained_checkpoint_argument
from distnet.errors import OptionError
from distnet.experiments import run_checkpoints as rc


def _run(folder, best=True, info=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "checkpoint.h5").write_bytes(b"last")
    if best:
        (folder / "checkpoint-best.h5").write_bytes(b"best")
    if info is not None:
        (folder / "run.json").write_text(json.dumps(info))
    return folder


def test_the_constant_the_command_line_keeps_is_the_experiments_one():
    assert RUN_CHECKPOINT == rc.RUN_CHECKPOINT


def test_a_run_directory_is_its_best_checkpoint_else_its_last(tmp_path):
    run = _run(tmp_path / "r")
    chosen = rc.choose_checkpoint(str(run))
    assert (chosen.path, chosen.choice, chosen.other) == (str(run / "checkpoint-best.h5"), "best",
                                                          str(run / "checkpoint.h5"))
    assert chosen.describe() == (f"{run}: its best checkpoint (the best epoch's), {run / 'checkpoint-best.h5'}; "
                                 f"{run}:last names {run / 'checkpoint.h5'}")
    last = rc.choose_checkpoint(f"{run}:last")
    assert (last.path, last.choice, last.other) == (str(run / "checkpoint.h5"), "last", str(run / "checkpoint-best.h5"))
    assert rc.choose_checkpoint(str(run), default="last").path == str(run / "checkpoint.h5")   # --resume
    plain = _run(tmp_path / "p", best=False)
    chosen = rc.choose_checkpoint(str(plain))
    assert (chosen.path, chosen.choice) == (str(plain / "checkpoint.h5"), "last")
    assert chosen.describe().endswith("(the run kept no best checkpoint: checkpoint keep_best: true keeps one)")
    with pytest.raises(OptionError, match=r":best: the run directory holds no best checkpoint .*:last names"):
        rc.choose_checkpoint(f"{plain}:best")


def test_a_file_is_itself_and_takes_no_choice(tmp_path):
    run = _run(tmp_path / "r")
    file = run / "checkpoint.h5"
    assert rc.choose_checkpoint(str(file)) == rc.ChosenCheckpoint(str(file))
    assert rc.choose_checkpoint(str(file)).describe() is None
    with pytest.raises(OptionError, match=r":best follows a run directory, and .* is none"):
        rc.choose_checkpoint(f"{file}:best")
    odd = tmp_path / "ck:last"            # a name that exists as written is never split
    odd.write_bytes(b"x")
    assert rc.choose_checkpoint(str(odd)).path == str(odd)
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(OptionError, match="is a folder without checkpoint.h5"):
        rc.choose_checkpoint(str(tmp_path / "empty_run"))


def test_epoch_paths_and_a_run_started_elsewhere(tmp_path):
    """run.json names the last {epoch} checkpoint (absolute) and the best one as the run was
    told (relative to the folder it started in): both are found from here."""
    ck = tmp_path / "cks"
    ck.mkdir()
    (ck / "ck_07.h5").write_bytes(b"last")
    (ck / "ck_best.h5").write_bytes(b"best")
    run = tmp_path / "r"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"checkpoint": str(ck / "ck_07.h5"),
                                              "best_checkpoint": "elsewhere/cks/ck_best.h5"}))
    assert rc.run_checkpoints(str(run)) == {"last": str(ck / "ck_07.h5"), "best": str(ck / "ck_best.h5")}


def test_the_options_report_their_choice(tmp_path):
    run = _run(tmp_path / "r")
    ctx = click.Context(click.Command("x"))
    assert trained_checkpoint_argument(ctx, None, str(run)) == str(run / "checkpoint-best.h5")
    assert ctx.meta["checkpoint choice"].choice == "best"
    assert checkpoint_argument(ctx, None, str(run)) == str(run / "checkpoint.h5")
    with pytest.raises(click.BadParameter, match="holds no best checkpoint"):
        checkpoint_argument(ctx, None, f"{_run(tmp_path / 'q', best=False)}:best")
